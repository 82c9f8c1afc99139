//! One call on a slot's connection, whatever the protocol: what goes out and what came back.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;

use super::checks::Failure;
use super::generation::{GenerationFigures, TokenSource};
use super::stream::{self, StreamTiming};
use super::target::{Protocol, Requests, Target};
use super::{grpc, http1};

/// A slot's connection (made on first use, remade after a failure).
pub enum Conn {
    Grpc(Option<grpc::GrpcConn>),
    Http(Option<http1::HttpConn>),
}

impl Conn {
    pub fn new(protocol: Protocol) -> Conn {
        match protocol {
            Protocol::Grpc => Conn::Grpc(None),
            Protocol::Http => Conn::Http(None),
        }
    }

    /// Ends the connection gracefully: an open stream is half-closed and its status read
    /// (briefly), then the socket closes.
    pub async fn close(self) {
        if let Conn::Grpc(Some(mut live)) = self {
            if let Some(open) = live.stream.take() {
                open.close().await;
            }
        }
    }
}

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
    /// hand the answer back
    pub want_answer: bool,
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

/// Makes the call (connecting first when the slot has no connection).
pub async fn call(target: &Target, conn: &mut Conn, input: &CallInput) -> Outcome {
    match (&target.requests, conn) {
        (Requests::Grpc(all), Conn::Grpc(live)) if target.stream => {
            // the request with the empty-final parameter (and what Python appends), framed anew
            let framed = &all[input.request_index];
            let extra = input.append.as_deref().unwrap_or_default();
            let mut joined =
                BytesMut::with_capacity(framed.len() + target.empty_final.len() + extra.len());
            joined.extend_from_slice(&framed[5..]);
            joined.extend_from_slice(&target.empty_final);
            joined.extend_from_slice(extra);
            let (outcome, timing) =
                stream::call(target, live, grpc::frame(&joined), input.want_answer).await;
            Outcome {
                stream: timing,
                ..outcome
            }
        }
        (Requests::Grpc(all), Conn::Grpc(live)) => {
            let framed = &all[input.request_index];
            let message = match &input.append {
                Some(extra) if !extra.is_empty() => {
                    // the serialized request with the fields appended (a protobuf merge), framed anew
                    let mut joined = BytesMut::with_capacity(framed.len() + extra.len());
                    joined.extend_from_slice(&framed[5..]);
                    joined.extend_from_slice(extra);
                    grpc::frame(&joined)
                }
                _ => framed.clone(),
            };
            grpc::call(target, live, message, input.want_answer).await
        }
        (Requests::Http(all), Conn::Http(live)) => {
            http1::call(target, live, &all[input.request_index], input).await
        }
        _ => unreachable!("a slot's connection speaks its target's protocol"),
    }
}
