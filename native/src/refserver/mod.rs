//! The reference server: a real server with a known truth (docs/reference-server.md).
//!
//! KServe v2 over gRPC (`grpc`) and HTTP/1.1 (`http`), TorchServe-style REST, KServe v1 and
//! OpenAI-compatible generation, whole or streamed (`generate`);
//! each inference request is held for a scripted service time drawn from a seeded law (`laws`),
//! after waiting for one of N service slots (`slots`), with a precise hold (`hold`), and leaves a
//! record of what really happened (`records`), readable from another process over HTTP.

pub mod canned;
pub mod config;
pub mod generate;
pub mod grpc;
pub mod hold;
pub mod http;
pub mod laws;
pub mod records;
pub mod server;
pub mod shared;
pub mod slots;
pub mod truth;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::sync::Mutex;

use config::Config;
use server::{RunningServer, StartError};

/// The reference server, started on its own runtime threads in this process.
///
/// `ReferenceServer(config_json)` starts it (ValueError: a bad configuration, naming the key;
/// OSError: a port that cannot be bound); `grpc_port`, `http_port`; `stop()` (also on garbage
/// collection). For measurements run it in a process of its own
/// (`python -m inferload.local.reference_server`).
#[pyclass(module = "inferload._native", name = "ReferenceServer")]
pub struct PyReferenceServer {
    running: Mutex<Option<RunningServer>>,
    #[pyo3(get)]
    grpc_port: u16,
    #[pyo3(get)]
    http_port: u16,
    #[pyo3(get)]
    config_json: String,
}

fn start_error(error: StartError) -> PyErr {
    match error {
        StartError::Config(message) => PyValueError::new_err(message),
        StartError::Io(message) => PyOSError::new_err(message),
    }
}

#[pymethods]
impl PyReferenceServer {
    #[new]
    fn new(py: Python<'_>, config_json: &str) -> PyResult<Self> {
        let config = Config::from_json(config_json)
            .map_err(|error| PyValueError::new_err(error.to_string()))?;
        let normalised = config.to_json();
        let running = py
            .detach(|| RunningServer::start(config))
            .map_err(start_error)?;
        Ok(PyReferenceServer {
            grpc_port: running.grpc_address.port(),
            http_port: running.http_address.port(),
            config_json: normalised,
            running: Mutex::new(Some(running)),
        })
    }

    /// The JSON line the binary prints when ready (ports, host, pid).
    fn ready_line(&self) -> PyResult<String> {
        let running = self
            .running
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the server's lock is poisoned"))?;
        Ok(running
            .as_ref()
            .map(RunningServer::ready_line)
            .unwrap_or_default())
    }

    /// Stop serving (idempotent).
    fn stop(&self, py: Python<'_>) {
        let taken = self
            .running
            .lock()
            .map(|mut running| running.take())
            .unwrap_or(None);
        if let Some(mut running) = taken {
            py.detach(move || running.stop());
        }
    }
}

/// The configuration with every default filled in, as JSON (ValueError naming the key).
#[pyfunction]
fn reference_config(config_json: &str) -> PyResult<String> {
    Config::from_json(config_json)
        .map(|config| config.to_json())
        .map_err(|error| PyValueError::new_err(error.to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyReferenceServer>()?;
    m.add_function(wrap_pyfunction!(reference_config, m)?)?;
    Ok(())
}
