//! inferload's native part: the engine that sends, times, paces and records inference calls
//! (`engine`), and the reference server with scripted service times (`refserver`), both for
//! Python as the module `inferload._native`.

pub mod engine;
pub mod proto;
pub mod refserver;

use pyo3::prelude::*;

/// The module `inferload._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    engine::register(m)?;
    refserver::register(m)?;
    Ok(())
}
