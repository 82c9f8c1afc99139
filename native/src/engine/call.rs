//! One call on a slot's connection, whatever the protocol: what goes out and what came back.

use bytes::BytesMut;

use super::outcome::{CallInput, Outcome};
use super::stream::{self, OpenStream};
use super::target::{Protocol, Requests, Target};
use super::{grpc, http1};

/// A slot's connection (made on first use, remade after a failure).
pub enum Conn {
    /// a decoupled target's open stream rides on its connection
    Grpc(Option<grpc::GrpcConn<OpenStream>>),
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
