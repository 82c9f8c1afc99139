//! `INFERLOAD_ENGINE_DEBUG=1`: the underlying error of every transport failure on stderr (the
//! failure messages themselves are the Python path's, deliberately without per-call detail).

use std::sync::OnceLock;

pub fn on() -> bool {
    enabled()
}

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        std::env::var_os("INFERLOAD_ENGINE_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
    })
}

/// Prints what went wrong, with its chain of causes, when debugging is on.
pub fn note(what: &str, error: &(dyn std::error::Error + 'static)) {
    if !enabled() {
        return;
    }
    let mut line = format!("inferload engine: {what}: {error}");
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{line}");
}
