//! `INFERLOAD_ENGINE_DEBUG=1`: the underlying error of every transport failure on stderr (the
//! failure messages themselves are the Python path's, deliberately without per-call detail).
//! `INFERLOAD_ENGINE_LAG_PROFILE=1`: one line per open-loop send on stderr with its four times, the
//! profile of the send lag (`python -m bench.lag_profile`).

use std::sync::OnceLock;

use super::pacer::Arrival;

pub fn on() -> bool {
    enabled()
}

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| set("INFERLOAD_ENGINE_DEBUG"))
}

fn set(variable: &str) -> bool {
    std::env::var_os(variable).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Prints an open-loop send's times (CLOCK_MONOTONIC ns) when the lag profile is on: when it was
/// due, when the pacer meant to let it go (a lead early), when the pacer let it go, when its sender
/// had it, when the sender's spin ended and the call began, when the request's first byte was written.
pub fn lag_profile(arrival: &Arrival, taken_ns: u64, called_ns: u64, sent_ns: u64) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| set("INFERLOAD_ENGINE_LAG_PROFILE")) {
        let (intended, handoff, released) = (
            arrival.intended_ns,
            arrival.handoff_ns(),
            arrival.released_ns,
        );
        eprintln!("inferload engine lag: {intended} {handoff} {released} {taken_ns} {called_ns} {sent_ns}");
    }
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
