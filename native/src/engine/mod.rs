//! The native engine: sends, times, paces and records inference calls for the Locust users
//! (docs/engine.md). One `Engine` per Python process owns a tokio runtime (its worker threads)
//! and a pacer thread; Python registers targets, opens slots (one connection each) and runs each
//! slot as a closed loop, an open-loop sender or one call at a time; what loops and senders do is
//! recorded here and drained by Python in batches.
//!
//! Modules by role: `core` (targets, slots, modes, recording), `call` (one call, dispatched to `grpc`, `stream` or `http1`;
//! what it sends and how it ended: `outcome`),
//! `net` (connections, wire timestamps), `sse` (server-sent events framed and stamped), `generation`
//! (a streamed generation's content events and figures), `tls`, `pacer` (open loop), `record` (the wire format of
//! `RunRecord.merge_wire` and Locust's statistics), `trace_id` (the trace join's request ids), `checks` (answers judged, failures
//! in inferload's own words; `outline`: a JSON answer read as far as a check needs it), `clock`, `target`, `python` (the API).

pub mod call;
pub mod checks;
pub mod clock;
pub mod core;
pub mod debug;
pub mod generation;
pub mod grpc;
pub mod http1;
pub mod net;
pub mod outcome;
pub mod outline;
pub mod pacer;
pub mod python;
pub mod record;
pub mod sequence;
pub mod sse;
pub mod stream;
pub mod target;
pub mod tls;
pub mod trace_id;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    python::register(m)
}
