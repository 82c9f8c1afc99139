//! A target: where its calls go, its pre-encoded requests, how its answers are judged, and the
//! cursor its slots take requests from (`users/request_pool.py`'s `RequestPool.next`).

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::checks::Check;
use super::net::Peer;
use super::pacer::OpenLoop;
use super::sequence::SequenceSpec;
use super::trace_id::TraceIds;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Http,
}

/// One pre-encoded HTTP request: its path, body and its own headers (merged with the target's).
#[derive(Clone, Debug)]
pub struct HttpRequest {
    pub path: http::uri::PathAndQuery,
    pub body: Bytes,
    pub headers: HeaderMap,
    /// the length of the body's JSON header (`Inference-Header-Content-Length`; None: all JSON)
    pub json_size: Option<usize>,
}

/// A target's distinct requests, index = request index.
pub enum Requests {
    /// serialized ModelInferRequests, sent as they are (each framed once: the 5-byte gRPC prefix)
    Grpc(Vec<Bytes>),
    Http(Vec<HttpRequest>),
}

impl Requests {
    pub fn len(&self) -> usize {
        match self {
            Requests::Grpc(all) => all.len(),
            Requests::Http(all) => all.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the next call's request comes from: the pool's order, a new seeded permutation per
/// pass for `random` (the order differs from numpy's permutation: same rule, another generator).
pub struct Cursor {
    order: Vec<usize>,
    position: usize,
    random: Option<StdRng>,
}

impl Cursor {
    pub fn new(size: usize, random_seed: Option<u64>, start_index: usize) -> Cursor {
        let mut random = random_seed.map(StdRng::seed_from_u64);
        let mut order: Vec<usize> = (0..size).collect();
        if let Some(rng) = random.as_mut() {
            order.shuffle(rng);
        }
        Cursor {
            order,
            position: start_index,
            random,
        }
    }

    /// The next request's index; each pass visits every request once.
    pub fn next_index(&mut self) -> usize {
        if self.position >= self.order.len() {
            self.position = 0;
            if let Some(rng) = self.random.as_mut() {
                self.order.shuffle(rng);
            }
        }
        let index = self.order[self.position];
        self.position += 1;
        index
    }
}

pub struct Target {
    pub id: usize,
    pub name: String,
    pub request_type: String,
    pub protocol: Protocol,
    pub peer: Peer,
    /// `host:port` (the HTTP Host header, the gRPC authority)
    pub authority: String,
    /// the address as failure messages name it
    pub display_address: String,
    pub timeout: Duration,
    /// the most bytes of one answer buffered; a longer answer fails (`Failure::answer_too_large`)
    pub max_answer_bytes: usize,
    /// gRPC: the headers of every call (gRPC's own and the target's metadata, lower-case keys)
    pub metadata: HeaderMap,
    /// gRPC: where `ModelInfer` is (scheme, authority, path)
    pub grpc_uri: http::Uri,
    /// a decoupled model: every call goes on the slot's `ModelStreamInfer` stream
    pub stream: bool,
    /// gRPC: where `ModelStreamInfer` is, and the headers of its stream (no `grpc-timeout`)
    pub stream_uri: http::Uri,
    pub stream_metadata: HeaderMap,
    /// `parameters {triton_enable_empty_final_response: true}`, appended to a streamed request
    pub empty_final: Bytes,
    pub requests: Requests,
    pub check: Check,
    pub cursor: Mutex<Cursor>,
    /// an open-loop target's arrivals waiting for senders (None: closed loop)
    pub open_loop: Option<OpenLoop>,
    /// a sequence model's settings: loops and senders carry each slot's sequences
    pub sequence: Option<SequenceSpec>,
    /// a traced target's request ids: loops and senders put one on each call (`trace_id`)
    pub trace: Option<TraceIds>,
}

impl Target {
    pub fn next_request(&self) -> usize {
        self.cursor.lock().expect("cursor").next_index()
    }
}

/// A header pair as given by Python; Err names which and why.
pub fn header_pair(
    name: &str,
    value: &str,
    lower_case: bool,
) -> Result<(HeaderName, HeaderValue), String> {
    let key = if lower_case {
        name.to_ascii_lowercase()
    } else {
        name.to_owned()
    };
    let header = HeaderName::from_bytes(key.as_bytes())
        .map_err(|_| format!("header {name:?}: not a valid header name"))?;
    let value = HeaderValue::from_str(value)
        .map_err(|_| format!("header {name:?}: its value is not a valid header value"))?;
    Ok((header, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_starts_at_the_offset_and_wraps() {
        let mut cursor = Cursor::new(3, None, 2);
        let picks: Vec<usize> = (0..5).map(|_| cursor.next_index()).collect();
        assert_eq!(picks, vec![2, 0, 1, 2, 0]);
        let mut past_the_end = Cursor::new(3, None, 7);
        assert_eq!(past_the_end.next_index(), 0);
    }

    #[test]
    fn random_rotation_visits_every_request_once_per_pass_in_a_seeded_order() {
        let mut cursor = Cursor::new(10, Some(42), 0);
        let mut again = Cursor::new(10, Some(42), 0);
        let first: Vec<usize> = (0..10).map(|_| cursor.next_index()).collect();
        let second: Vec<usize> = (0..10).map(|_| cursor.next_index()).collect();
        let mut sorted = first.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        let mut sorted_second = second.clone();
        sorted_second.sort_unstable();
        assert_eq!(sorted_second, sorted);
        assert_eq!(
            first,
            (0..10).map(|_| again.next_index()).collect::<Vec<_>>()
        );
    }
}
