//! What one call sends and how it ended, whatever the protocol: the types the protocol modules
//! (`grpc`, `stream`, `http1`) give back to `call`, which dispatches to them, and to `core`.

use bytes::Bytes;
use http::HeaderMap;

use super::checks::Failure;
use super::generation::{GenerationFigures, TokenSource};

/// What one call sends: a request of the pool, and for a per-call, what Python changes in it.
#[derive(Clone, Debug, Default)]
pub struct CallInput {
    pub request_index: usize,
    /// gRPC: bytes appended to the serialized request (a protobuf merge)
    pub append: Option<Bytes>,
    /// HTTP: a body instead of the request's
    pub body: Option<Bytes>,
    /// HTTP: headers that replace or extend the request's
    pub headers: Option<HeaderMap>,
    /// hand the answer back (a generation's: its text, the content events joined)
    pub want_answer: bool,
    /// record the call as the slot's loops record theirs (its latency, stream and generation
    /// figures, its request row): Python reports nothing of it
    pub record: bool,
    /// a traced call: the number of its id (`trace_id`)
    pub trace_number: Option<u64>,
    /// a recorded call that is a conversation's turn: its position (from 1), recorded with it
    pub turn: Option<u32>,
}

/// How a call ended: the failure (None: a success), its wire times (CLOCK_MONOTONIC ns), the
/// response length the Python user reports, the answer when asked for, and the status (HTTP
/// status, gRPC code; 0 when no HTTP answer came).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub failure: Option<Failure>,
    pub sent_ns: u64,
    pub received_ns: u64,
    pub response_length: u64,
    pub answer: Option<Bytes>,
    pub status: i32,
    /// the server's answer was accepted and judged (a failure, if any, is its content's): what a
    /// sequence needs to know (any other failure abandons the sequence, as the Python users do)
    pub answered: bool,
    /// a streamed request that succeeded: its responses and their times
    pub stream: Option<StreamTiming>,
    /// a generation that succeeded: its figures and where its token count came from
    pub generation: Option<(GenerationFigures, TokenSource)>,
}

impl Outcome {
    pub fn failed(failure: Failure) -> Outcome {
        Outcome {
            failure: Some(failure),
            ..Outcome::default()
        }
    }
}

/// One streamed request's own figures (`measure/decoupled_record.py` `StreamTiming`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamTiming {
    pub responses: u64,
    pub first_response_ms: Option<f64>,
    pub gaps_ms: Vec<f64>,
}
