//! Triton's `ModelStreamInfer` for decoupled models (`users/triton.py`): one bidirectional
//! gRPC stream per slot, opened at its first call (again after the stream broke or a call timed
//! out), its requests sent one at a time. Each request is a pick from the target's requests with
//! `triton_enable_empty_final_response` appended (every request then ends with a response flagged
//! `triton_final_response`, even when the model sends its final flag alone); its responses are read
//! up to the final one, each timed on arrival (the read that brought it):
//!
//! - latency: sent → the final response (the complete request, as the Python user reports it);
//! - [`StreamTiming`]: the responses that carry outputs (Triton's empty final one is not one), the
//!   time from the send to the first of them, the times between them;
//! - the target's shape check applies to every response with outputs; the response length is the
//!   bytes of their raw outputs.
//!
//! A response with an error fails its request (the rest of its responses are still read, up to the
//! final one); an error response without the final flag (Triton refused the request) is final. A
//! call that times out (`timeout: no final response from ADDR in time`) drops the stream: late
//! responses cannot be counted for the next request.

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;

use super::checks::{self, Failure};
use super::clock::monotonic_ns;
use super::debug;
use super::grpc::{self, GrpcConn};
use super::outcome::{Outcome, StreamTiming};
use super::target::Target;
use crate::proto::{
    InferOutputTensor, InferParameter, ModelInferRequest, ModelStreamInferResponse, ParameterChoice,
};

/// The request parameter that makes Triton send the final flag in a response of its own.
pub const EMPTY_FINAL_PARAMETER: &str = "triton_enable_empty_final_response";
/// The response parameter that marks a request's last response.
pub const FINAL_PARAMETER: &str = "triton_final_response";
/// What a stream's message that does not decode is.
const NOT_A_STREAM_RESPONSE: &str = "not a ModelStreamInferResponse";
/// How long a closing stream waits for the server to end it.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// `parameters {triton_enable_empty_final_response: true}`, to append to a serialized request.
pub fn empty_final_parameter() -> Bytes {
    let mut request = ModelInferRequest::default();
    request.parameters.insert(
        EMPTY_FINAL_PARAMETER.into(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(true)),
        },
    );
    request.encode_to_vec().into()
}

/// Where a slot's stream stands: its request side, and its answer (headers not yet received, or
/// the body being read, with what was read of it and not yet parsed).
pub struct OpenStream {
    send: h2::SendStream<Bytes>,
    answer: Answer,
    unparsed: BytesMut,
}

enum Answer {
    Waiting(h2::client::ResponseFuture),
    Reading(h2::RecvStream),
    Ended,
}

/// Whether a response ends its request (`triton_stream.is_final`).
fn is_final(response: &ModelStreamInferResponse) -> bool {
    let flag = response
        .infer_response
        .as_ref()
        .and_then(|r| r.parameters.get(FINAL_PARAMETER));
    match flag.and_then(|p| p.parameter_choice.as_ref()) {
        Some(ParameterChoice::BoolParam(value)) => *value,
        Some(_) => false,
        None if flag.is_some() => false,
        None => !response.error_message.is_empty(),
    }
}

/// `_classify_triton` for an `InferenceServerException` made of a stream's error message (no status).
fn stream_error(message: &str, address: &str) -> Failure {
    let lowered = message.to_lowercase();
    if lowered.contains("timed out") || lowered.contains("timeout") {
        return Failure::timeout(address);
    }
    if lowered.contains("refused") {
        return Failure::refused(address);
    }
    Failure::new(
        checks::REQUEST_ERROR,
        format!("triton error: {}", checks::first_line(message, 160)),
    )
}

/// The target's shape check on one response's outputs (`_answer_failure`).
fn shape_failure(target: &Target, outputs: &[InferOutputTensor]) -> Option<Failure> {
    let shapes = target.check.shapes.as_ref()?;
    outputs
        .iter()
        .find_map(|output| checks::output_shape_failure(shapes, &output.name, &output.shape))
}

/// The next complete length-prefixed message in `unparsed` (None: not all of it is there yet);
/// Err for a compressed or malformed frame.
fn next_message(unparsed: &mut BytesMut) -> Result<Option<Bytes>, ()> {
    if unparsed.len() < 5 {
        return Ok(None);
    }
    if unparsed[0] != 0 {
        return Err(());
    }
    let length = u32::from_be_bytes([unparsed[1], unparsed[2], unparsed[3], unparsed[4]]) as usize;
    if unparsed.len() < 5 + length {
        return Ok(None);
    }
    unparsed.advance(5);
    Ok(Some(unparsed.split_to(length).freeze()))
}

/// What ended a stream request without its final response.
enum Broken {
    /// the connection or the stream failed (grpc's UNAVAILABLE): the connection goes too
    Transport(Failure),
    /// the server ended the stream: with OK ("stream closed: ..."), or with its status
    Ended(Failure),
}

impl From<Failure> for Broken {
    /// a connect that failed
    fn from(failure: Failure) -> Broken {
        Broken::Transport(failure)
    }
}

impl OpenStream {
    fn open(conn: &mut GrpcConn<OpenStream>, target: &Target) -> Result<OpenStream, h2::Error> {
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = target.stream_uri.clone();
        *request.headers_mut() = target.stream_metadata.clone();
        let (answer, send) = conn.sender_mut().send_request(request, false)?;
        Ok(OpenStream {
            send,
            answer: Answer::Waiting(answer),
            unparsed: BytesMut::new(),
        })
    }

    /// Half-closes the stream (no more requests) and reads what the server still sends, up to its
    /// status, for at most [`CLOSE_WAIT`]: the server ends the stream itself instead of seeing it
    /// cancelled.
    pub async fn close(mut self) {
        if self.send.send_data(Bytes::new(), true).is_err() {
            return;
        }
        let ended = async {
            loop {
                match &mut self.answer {
                    Answer::Waiting(future) => match future.await {
                        Ok(response) => self.answer = Answer::Reading(response.into_body()),
                        Err(_) => return,
                    },
                    Answer::Reading(body) => match body.data().await {
                        Some(Ok(chunk)) => {
                            let _ = body.flow_control().release_capacity(chunk.len());
                        }
                        Some(Err(_)) => return,
                        None => {
                            let _ = body.trailers().await;
                            return;
                        }
                    },
                    Answer::Ended => return,
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, ended).await;
    }

    /// The next response message, read from the stream as it comes.
    async fn next(&mut self, target: &Target) -> Result<Bytes, Broken> {
        let address = &target.display_address;
        loop {
            match next_message(&mut self.unparsed) {
                Ok(Some(message)) => return Ok(message),
                Ok(None) => {}
                Err(()) => return Err(Broken::Ended(Failure::bad_answer(NOT_A_STREAM_RESPONSE))),
            }
            match &mut self.answer {
                Answer::Waiting(future) => {
                    let response = future.await.map_err(|e| {
                        debug::note("grpc stream answer", &e);
                        Broken::Transport(Failure::refused(address))
                    })?;
                    let (parts, body) = response.into_parts();
                    if parts.headers.contains_key("grpc-status")
                        || parts.status != http::StatusCode::OK
                    {
                        // a trailers-only answer: the server refused the stream at once
                        let (code, message) =
                            grpc::call_status(parts.status.as_u16(), &parts.headers, None);
                        self.answer = Answer::Ended;
                        return Err(Broken::Ended(checks::grpc_status_failure(
                            code, &message, address,
                        )));
                    }
                    self.answer = Answer::Reading(body);
                }
                Answer::Reading(body) => match body.data().await {
                    Some(Ok(chunk)) => {
                        let _ = body.flow_control().release_capacity(chunk.len());
                        // one response message (the part of it not yet parsed) at most max_answer_bytes
                        if self.unparsed.len() + chunk.len() > target.max_answer_bytes + 5 {
                            return Err(Broken::Transport(Failure::answer_too_large(
                                target.max_answer_bytes,
                            )));
                        }
                        self.unparsed.extend_from_slice(&chunk);
                    }
                    Some(Err(e)) => {
                        debug::note("grpc stream", &e);
                        return Err(Broken::Transport(Failure::refused(address)));
                    }
                    None => {
                        let trailers = body.trailers().await.ok().flatten();
                        self.answer = Answer::Ended;
                        let (code, message) =
                            grpc::call_status(200, &http::HeaderMap::new(), trailers.as_ref());
                        let failure = if code == 0 {
                            Failure::new(
                                checks::REQUEST_ERROR,
                                format!("stream closed: {address} ended the gRPC stream before the final response"),
                            )
                        } else {
                            checks::grpc_status_failure(code, &message, address)
                        };
                        return Err(Broken::Ended(failure));
                    }
                },
                Answer::Ended => {
                    return Err(Broken::Ended(Failure::new(
                        checks::REQUEST_ERROR,
                        format!(
                        "stream closed: {address} ended the gRPC stream before the final response"
                    ),
                    )))
                }
            }
        }
    }
}

/// One request on the slot's stream (opened first when there is none; the connection made first
/// when there is none): its outcome, and its timing when it succeeded.
pub async fn call(
    target: &Target,
    conn: &mut Option<GrpcConn<OpenStream>>,
    framed: Bytes,
    want_answer: bool,
) -> (Outcome, Option<StreamTiming>) {
    let started = monotonic_ns();
    let address = &target.display_address;
    let mut arrivals: Vec<u64> = Vec::new();
    let mut received: u64 = 0;
    let mut failure: Option<Failure> = None;
    let mut answers = BytesMut::new();
    let mut final_ns = 0u64;
    let attempt = async {
        let live = grpc::connected(target, conn).await?;
        if live.stream.is_none() {
            live.stream = Some(OpenStream::open(live, target).map_err(|e| {
                debug::note("grpc stream open", &e);
                Broken::Transport(Failure::refused(address))
            })?);
        }
        live.stamps().arm();
        let stamps = live.stamps().clone();
        let stream = live.stream.as_mut().expect("opened");
        stream.send.send_data(framed, false).map_err(|e| {
            debug::note("grpc stream send", &e);
            Broken::Transport(Failure::refused(address))
        })?;
        loop {
            let message = stream.next(target).await?;
            let now = stamps.read_ns().unwrap_or_else(monotonic_ns);
            let Ok(response) = ModelStreamInferResponse::decode(message.clone()) else {
                return Err(Broken::Ended(Failure::bad_answer(NOT_A_STREAM_RESPONSE)));
            };
            if !response.error_message.is_empty() {
                failure.get_or_insert_with(|| stream_error(&response.error_message, address));
            } else if let Some(answer) = response.infer_response.as_ref() {
                if !answer.outputs.is_empty() {
                    arrivals.push(now);
                    received += answer
                        .raw_output_contents
                        .iter()
                        .map(|raw| raw.len() as u64)
                        .sum::<u64>();
                    if failure.is_none() {
                        failure = shape_failure(target, &answer.outputs);
                    }
                    if want_answer {
                        if answers.len() + message.len() + 5 > target.max_answer_bytes {
                            return Err(Broken::Transport(Failure::answer_too_large(
                                target.max_answer_bytes,
                            )));
                        }
                        answers.extend_from_slice(&grpc::frame(&message));
                    }
                }
            }
            if is_final(&response) {
                final_ns = now;
                return Ok(stamps.sent_ns());
            }
        }
    };
    let finished = tokio::time::timeout(target.timeout, attempt).await;
    let now = monotonic_ns();
    let failed = |failure: Failure, status: i32, sent: Option<u64>| Outcome {
        sent_ns: sent.unwrap_or(started),
        received_ns: now,
        status,
        ..Outcome::failed(failure)
    };
    let sent = conn.as_ref().and_then(|c| c.stamps().sent_ns());
    match finished {
        Err(_elapsed) => {
            if let Some(live) = conn.as_mut() {
                live.stream = None; // late responses go with it
            }
            let timeout = Failure::new(
                checks::REQUEST_TIMEOUT,
                format!("timeout: no final response from {address} in time"),
            );
            // the Python user keeps its sequence after a timeout (only a gRPC error abandons it)
            (
                Outcome {
                    answered: true,
                    ..failed(timeout, 4, sent)
                },
                None,
            )
        }
        Ok(Err(Broken::Transport(failure))) => {
            *conn = None;
            (failed(failure, 14, sent), None)
        }
        Ok(Err(Broken::Ended(failure))) => {
            if let Some(live) = conn.as_mut() {
                live.stream = None;
            }
            // the server's status abandons a sequence (an RpcError); a stream it ended with OK does not
            let answered = failure.class != checks::GRPC_STATUS_ERROR;
            (
                Outcome {
                    answered,
                    ..failed(failure, 2, sent)
                },
                None,
            )
        }
        Ok(Ok(sent)) => {
            let sent_ns = sent.unwrap_or(started);
            let timing = StreamTiming {
                responses: arrivals.len() as u64,
                first_response_ms: arrivals.first().map(|a| (*a as f64 - sent_ns as f64) / 1e6),
                gaps_ms: arrivals
                    .windows(2)
                    .map(|pair| (pair[1] as f64 - pair[0] as f64) / 1e6)
                    .collect(),
            };
            let outcome = Outcome {
                answered: true,
                response_length: if failure.is_none() { received } else { 0 },
                failure: failure.clone(),
                sent_ns,
                received_ns: final_ns.max(sent_ns),
                answer: want_answer.then(|| answers.freeze()),
                status: 0,
                stream: None,
                generation: None,
            };
            (outcome, failure.is_none().then_some(timing))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::ModelInferResponse;

    fn response(final_flag: Option<bool>, error: &str) -> ModelStreamInferResponse {
        let mut infer = ModelInferResponse::default();
        if let Some(flag) = final_flag {
            infer.parameters.insert(
                FINAL_PARAMETER.into(),
                InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(flag)),
                },
            );
        }
        ModelStreamInferResponse {
            error_message: error.into(),
            infer_response: Some(infer),
        }
    }

    #[test]
    fn the_final_flag_ends_a_request_and_an_unflagged_error_is_final() {
        assert!(is_final(&response(Some(true), "")));
        assert!(!is_final(&response(Some(false), "")));
        assert!(!is_final(&response(None, "")));
        assert!(is_final(&response(None, "refused by the server")));
        assert!(!is_final(&response(Some(false), "an error mid-stream")));
    }

    #[test]
    fn stream_errors_are_classified_as_tritonclient_errors_without_a_status() {
        assert_eq!(
            stream_error("Request timed out\nmore", "a:1"),
            Failure::timeout("a:1")
        );
        assert_eq!(
            stream_error("connection refused", "a:1"),
            Failure::refused("a:1")
        );
        assert_eq!(
            stream_error(" bad input \n x", "a:1").message,
            "triton error: bad input "
        ); // strip, then the first line
    }

    #[test]
    fn messages_are_cut_from_the_stream_as_they_complete() {
        let mut unparsed = BytesMut::new();
        unparsed.extend_from_slice(&grpc::frame(b"one"));
        unparsed.extend_from_slice(&grpc::frame(b"two")[..4]);
        assert_eq!(
            next_message(&mut unparsed).unwrap().as_deref(),
            Some(&b"one"[..])
        );
        assert_eq!(next_message(&mut unparsed).unwrap(), None);
        unparsed.extend_from_slice(&grpc::frame(b"two")[4..]);
        assert_eq!(
            next_message(&mut unparsed).unwrap().as_deref(),
            Some(&b"two"[..])
        );
        unparsed.extend_from_slice(b"\x01\x00\x00\x00\x00");
        assert!(next_message(&mut unparsed).is_err());
        let parameter = ModelInferRequest::decode(empty_final_parameter().as_ref()).unwrap();
        assert!(parameter.parameters.contains_key(EMPTY_FINAL_PARAMETER));
    }
}
