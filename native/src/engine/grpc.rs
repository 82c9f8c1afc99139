//! gRPC: unary `ModelInfer` over one HTTP/2 connection per slot (h2c, or h2 over the engine's
//! rustls), spoken directly with the `h2` crate (hyper's own HTTP/2 layer).
//!
//! Not through tonic's `Channel`, nor hyper's HTTP/2 client: both hand the request body to a
//! task that waits for flow-control capacity, so every call spawned a task and its HEADERS and
//! DATA left in two socket writes (measured with strace: docs/engine.md). Here each distinct
//! request is framed once (the 5-byte gRPC prefix + the serialized ModelInferRequest, as it is);
//! a call queues HEADERS and DATA (END_STREAM) on its stream before the connection task runs,
//! so both leave in one write, and reads the answer whole: its length-prefixed message, `grpc-status` and `grpc-message` from
//! the trailers (or the headers of a trailers-only answer). The answer is decoded only as far as
//! the check needs (`checks::judge_grpc`). Message sizes are unlimited both ways
//! (`CHANNEL_OPTIONS`). The call's timeout is the client's alone: no `grpc-timeout` goes out
//! (Triton's gRPC server, given a deadline that passed, resets the stream and still sends its
//! frames, which h2 takes for a connection PROTOCOL_ERROR: every call in flight on the slot's
//! connection then failed as refused); a call that times out resets its stream and keeps the
//! connection, as grpcio does.

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};

use super::checks::{self, Failure};
use super::clock::monotonic_ns;
use super::debug;
use super::net::{ConnectError, Stamps};
use super::outcome::Outcome;
use super::target::Target;

/// Streams a slot may have reset (a call timed out) whose late frames h2 still ignores (h2's
/// default is 10).
const MAX_RESET_STREAMS: usize = 10_000;

/// A serialized message with gRPC's length prefix (uncompressed).
pub fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(message.len() + 5);
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed.freeze()
}

/// The headers of every call of a target: gRPC's own, then the target's metadata.
pub fn call_headers(metadata: &HeaderMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("inferload-engine/", env!("CARGO_PKG_VERSION"))),
    );
    for (name, value) in metadata {
        headers.append(name.clone(), value.clone());
    }
    headers
}

/// One slot's HTTP/2 connection, with a stream `S` that may be open on it (a decoupled target's
/// `ModelStreamInfer`: `stream::OpenStream`); dropping it closes the socket.
pub struct GrpcConn<S> {
    sender: h2::client::SendRequest<Bytes>,
    stamps: Arc<Stamps>,
    driver: tokio::task::JoinHandle<()>,
    /// the stream open on this connection, if any
    pub stream: Option<S>,
}

impl<S> GrpcConn<S> {
    pub fn sender_mut(&mut self) -> &mut h2::client::SendRequest<Bytes> {
        &mut self.sender
    }

    pub fn stamps(&self) -> &Arc<Stamps> {
        &self.stamps
    }
}

/// The slot's connection, ready for a new stream: a kept one the server has closed meanwhile
/// (GOAWAY) is replaced before anything is sent; made when there is none.
pub async fn connected<'a, S>(
    target: &Target,
    conn: &'a mut Option<GrpcConn<S>>,
) -> Result<&'a mut GrpcConn<S>, Failure> {
    if let Some(live) = conn.as_mut() {
        match live.sender.clone().ready().await {
            Ok(ready) => live.sender = ready,
            Err(_) => *conn = None,
        }
    }
    if conn.is_none() {
        let mut fresh = GrpcConn::connect(target).await?;
        fresh.sender = fresh
            .sender
            .clone()
            .ready()
            .await
            .map_err(|e| broken("grpc ready", &e, &target.display_address))?;
        *conn = Some(fresh);
    }
    Ok(conn.as_mut().expect("connected"))
}

impl<S> Drop for GrpcConn<S> {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// A failed connect: the failure the Python path reports for it.
fn connect_failure(error: &ConnectError, address: &str) -> Failure {
    let (ConnectError::Resolve(io) | ConnectError::Tcp(io) | ConnectError::Tls(io)) = error;
    debug::note("grpc connect", io);
    match error {
        ConnectError::Resolve(_) => Failure::new(
            checks::GRPC_STATUS_ERROR,
            format!("gRPC UNAVAILABLE: DNS resolution failed for {address}"),
        ),
        ConnectError::Tcp(e) if e.raw_os_error() == Some(libc::ETIMEDOUT) => {
            Failure::timeout(address)
        }
        // grpc: UNAVAILABLE "failed to connect to all addresses ..." (TCP refused, TLS refused alike)
        ConnectError::Tcp(_) | ConnectError::Tls(_) => Failure::refused(address),
    }
}

/// A connection that broke: grpc's UNAVAILABLE "Socket closed" / "failed to connect", a refusal;
/// or whose peer's bytes are not HTTP/2 (h2 itself ended it: an HTTP/1 port, say), a bad answer.
fn broken(what: &str, error: &h2::Error, address: &str) -> Failure {
    debug::note(what, error);
    if error.is_go_away() && error.is_library() {
        return Failure::bad_answer(checks::BROKEN_HTTP2_FRAMING);
    }
    Failure::refused(address)
}

impl<S> GrpcConn<S> {
    async fn connect(target: &Target) -> Result<GrpcConn<S>, Failure> {
        let address = &target.display_address;
        let stamps = Arc::new(Stamps::default());
        let stream = target
            .peer
            .connect(&stamps)
            .await
            .map_err(|e| connect_failure(&e, address))?;
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(4 << 20)
            .initial_connection_window_size(8 << 20)
            .max_frame_size(1 << 20)
            .max_concurrent_reset_streams(MAX_RESET_STREAMS)
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(|e| broken("grpc handshake", &e, address))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(GrpcConn {
            sender,
            stamps,
            driver,
            stream: None,
        })
    }
}

/// Why an answer's body was not read whole.
enum ReadFailure {
    Transport(h2::Error),
    /// more than the target's `max_answer_bytes` came (what came is dropped)
    TooLarge,
}

impl From<h2::Error> for ReadFailure {
    fn from(error: h2::Error) -> ReadFailure {
        ReadFailure::Transport(error)
    }
}

/// Reads an answer's body and trailers whole, giving its flow-control capacity back as it goes;
/// at most `limit` bytes of it.
async fn read_answer(
    mut body: h2::RecvStream,
    limit: usize,
) -> Result<(Bytes, Option<HeaderMap>), ReadFailure> {
    let mut whole = BytesMut::new();
    let mut single: Option<Bytes> = None;
    let mut read = 0usize;
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        read = read.saturating_add(chunk.len());
        if read > limit {
            return Err(ReadFailure::TooLarge);
        }
        match single.take() {
            None if whole.is_empty() => single = Some(chunk),
            Some(first) => {
                whole.extend_from_slice(&first);
                whole.extend_from_slice(&chunk);
            }
            None => whole.extend_from_slice(&chunk),
        }
    }
    let trailers = body.trailers().await?;
    Ok((single.unwrap_or_else(|| whole.freeze()), trailers))
}

/// Percent-decoding of `grpc-message` (UTF-8; a broken escape is kept as it is).
fn percent_decoded(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%' && i + 2 < value.len() {
            let hex = std::str::from_utf8(&value[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(byte) = hex {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// grpc's code for an HTTP status other than 200 (the gRPC over HTTP/2 spec's table).
fn code_of_http_status(status: u16) -> i32 {
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

/// How the server ended the call: its gRPC code and message (the trailers, or the headers of a
/// trailers-only answer).
pub fn call_status(
    http_status: u16,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
) -> (i32, String) {
    let source = match trailers {
        Some(trailers) if trailers.contains_key("grpc-status") => Some(trailers),
        _ if headers.contains_key("grpc-status") => Some(headers),
        _ => None,
    };
    match source {
        Some(found) => {
            let code = found
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<i32>().ok())
                .unwrap_or(2);
            let message = found
                .get("grpc-message")
                .map(|v| percent_decoded(v.as_bytes()))
                .unwrap_or_default();
            (code, message)
        }
        None if http_status != 200 => (
            code_of_http_status(http_status),
            format!("Received http2 header with status: {http_status}"),
        ),
        None => (2, "the answer carried no grpc-status".into()),
    }
}

/// The first message of an answer's body (None: no complete, uncompressed message).
fn first_message(mut body: Bytes) -> Option<Bytes> {
    if body.len() < 5 || body[0] != 0 {
        return None;
    }
    body.advance(1);
    let length = body.get_u32() as usize;
    (body.len() >= length).then(|| body.split_to(length))
}

/// One unary `ModelInfer` on the slot's connection (made first when there is none; dropped after
/// a transport failure or a timeout before anything was sent, so the next call makes a new one).
pub async fn call<S>(
    target: &Target,
    conn: &mut Option<GrpcConn<S>>,
    framed: Bytes,
    want_answer: bool,
) -> Outcome {
    let started = monotonic_ns();
    let address = &target.display_address;
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = target.grpc_uri.clone();
    *request.headers_mut() = target.metadata.clone();
    let attempt = async {
        let live = connected(target, conn).await?;
        live.stamps.arm();
        let (answer, mut body) = live
            .sender
            .send_request(request, false)
            .map_err(|e| broken("grpc call", &e, address))?;
        body.send_data(framed, true)
            .map_err(|e| broken("grpc call", &e, address))?;
        let (parts, answer) = answer
            .await
            .map_err(|e| broken("grpc answer", &e, address))?
            .into_parts();
        let (bytes, trailers) =
            read_answer(answer, target.max_answer_bytes)
                .await
                .map_err(|e| match e {
                    ReadFailure::Transport(e) => broken("grpc answer", &e, address),
                    ReadFailure::TooLarge => Failure::answer_too_large(target.max_answer_bytes),
                })?;
        Ok::<_, Failure>((parts, trailers, bytes))
    };
    let finished = tokio::time::timeout(target.timeout, attempt).await;
    let now = monotonic_ns();
    let stamps = conn.as_ref().map(|c| c.stamps.clone());
    let sent_ns = stamps.as_ref().and_then(|s| s.sent_ns());
    let failed = |failure: Failure, status: i32, received_ns: u64| Outcome {
        sent_ns: sent_ns.unwrap_or(started),
        received_ns,
        status,
        ..Outcome::failed(failure)
    };
    match finished {
        Err(_elapsed) => {
            if sent_ns.is_none() {
                *conn = None; // still connecting: that connection is given up
            }
            failed(Failure::timeout(address), 4, now)
        }
        Ok(Err(failure)) => {
            *conn = None;
            failed(failure, 14, now)
        }
        Ok(Ok((parts, trailers, body))) => {
            let sent_ns = sent_ns.unwrap_or(started);
            let received_ns = stamps
                .as_ref()
                .and_then(|s| s.read_ns())
                .filter(|r| *r >= sent_ns)
                .unwrap_or(now);
            let (code, message) =
                call_status(parts.status.as_u16(), &parts.headers, trailers.as_ref());
            if code != 0 {
                return failed(
                    checks::grpc_status_failure(code, &message, address),
                    code,
                    received_ns,
                );
            }
            let Some(answer) = first_message(body) else {
                let undecodable = Failure::bad_answer(checks::NOT_A_RESPONSE);
                return failed(undecodable, 13, received_ns);
            };
            let judged = checks::judge_grpc(&target.check, &answer);
            Outcome {
                failure: judged.as_ref().err().cloned(),
                sent_ns,
                received_ns,
                response_length: *judged.as_ref().unwrap_or(&0),
                answer: want_answer.then_some(answer),
                status: 0,
                answered: true,
                stream: None,
                generation: None,
            }
        }
    }
}

/// The URI of a method of the inference service on a target (`:scheme`, `:authority`, `:path`).
pub fn method_uri(secure: bool, authority: &str, path: &str) -> Result<Uri, String> {
    let scheme = if secure { "https" } else { "http" };
    format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|_| format!("address {authority:?}: not a valid authority"))
}

/// The headers of a `ModelStreamInfer` stream: a call's (neither carries a deadline).
pub fn stream_headers(metadata: &HeaderMap) -> HeaderMap {
    call_headers(metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_and_unframed_as_grpc_does() {
        let framed = frame(b"abc");
        assert_eq!(&framed[..], b"\x00\x00\x00\x00\x03abc");
        assert_eq!(first_message(framed).as_deref(), Some(&b"abc"[..]));
        assert_eq!(
            first_message(Bytes::from_static(b"\x00\x00\x00\x00\x05ab")),
            None
        );
        assert_eq!(
            first_message(Bytes::from_static(b"\x01\x00\x00\x00\x01a")),
            None
        ); // compressed
        assert_eq!(first_message(frame(b"")).as_deref(), Some(&b""[..]));
    }

    #[test]
    fn the_status_comes_from_the_trailers_or_a_trailers_only_answer() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("3"));
        trailers.insert(
            "grpc-message",
            HeaderValue::from_static("bad%20input%3A%20x%ZZ"),
        );
        assert_eq!(
            call_status(200, &HeaderMap::new(), Some(&trailers)),
            (3, "bad input: x%ZZ".into())
        );
        assert_eq!(
            call_status(200, &trailers, None),
            (3, "bad input: x%ZZ".into())
        );
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", HeaderValue::from_static("0"));
        assert_eq!(call_status(200, &HeaderMap::new(), Some(&ok)).0, 0);
        assert_eq!(
            call_status(503, &HeaderMap::new(), None),
            (14, "Received http2 header with status: 503".into())
        );
        assert_eq!(percent_decoded(b"%E2%9C%93 %"), "\u{2713} %");
    }
}
