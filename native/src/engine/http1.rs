//! HTTP/1.1: one hyper client connection per slot (keep-alive; a new one after a failure, a
//! timeout or a `Connection: close`), TLS through the engine's rustls; the whole answer is read,
//! or, for a generation (`AnswerRule::Generation`), read event by event as it streams: each
//! content event stamped at its first byte's read, the figures of `generation.rs` (TTFT as the
//! first response, the gaps between content events as the gaps of a stream's `StreamTiming`).
//!
//! Failures in the vocabulary's words (`checks.rs`; the Python transport's `classify_exception`
//! gives the same): a refused connect `refused: ...`; no answer in time `timeout: ...`; a
//! connection closed before any answer byte `closed: ADDR closed the connection before
//! answering`, after some `bad answer: cut short ...`; an answer that is not HTTP/1.1 or whose
//! framing breaks `bad answer: broken HTTP framing`; another socket or TLS error `connection error
//! to ADDR: <OSError subclass | SSLError | SSLCertVerificationError>`; a host that does not resolve
//! `connection error to ADDR: gaierror`.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONNECTION, HOST};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::rt::TokioIo;

use super::checks::{self, AnswerRule, Failure};
use super::clock::monotonic_ns;
use super::debug;
use super::generation::{
    self, ContentArrival, EventKind, ServerTimings, StreamFormat, TokenizerFile,
};
use super::net::{self, ConnectError, Stamps};
use super::outcome::{CallInput, Outcome, StreamTiming};
use super::sse::SseReader;
use super::target::{HttpRequest, Target};
use super::tls::tls_error_kind;

/// One slot's HTTP/1.1 connection; dropping it closes the socket.
pub struct HttpConn {
    sender: SendRequest<Full<Bytes>>,
    stamps: Arc<Stamps>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for HttpConn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// What an I/O error is called where the Python path meets it.
fn io_failure(error: &std::io::Error, address: &str) -> Failure {
    if let Some(kind) = tls_error_kind(error) {
        return Failure::connection_error(address, kind);
    }
    if error.kind() == std::io::ErrorKind::TimedOut {
        return Failure::timeout(address);
    }
    if net::is_refused_errno(error) {
        return Failure::refused(address);
    }
    Failure::connection_error(address, net::os_error_name(error))
}

fn connect_failure(error: &ConnectError, address: &str) -> Failure {
    let (ConnectError::Resolve(io) | ConnectError::Tcp(io) | ConnectError::Tls(io)) = error;
    debug::note("http connect", io);
    match error {
        ConnectError::Resolve(_) => Failure::connection_error(address, "gaierror"),
        ConnectError::Tcp(e) | ConnectError::Tls(e) => io_failure(e, address),
    }
}

fn closed(address: &str) -> Failure {
    checks::closed_before_answering(address)
}

/// A hyper error of a call whose request may have gone out.
/// The request failed because its kept connection was closed before any answer byte came.
fn stale(error: &hyper::Error, stamps: &Stamps) -> bool {
    let io_kind = std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    let closed = matches!(
        io_kind,
        Some(
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::UnexpectedEof
        )
    ) || (io_kind.is_none()
        && (error.is_incomplete_message() || error.is_closed() || error.is_canceled()));
    closed && stamps.read_bytes() == 0
}

fn hyper_failure(error: &hyper::Error, stamps: &Stamps, address: &str) -> Failure {
    debug::note("http call", error);
    let io_error =
        std::error::Error::source(error).and_then(|source| source.downcast_ref::<std::io::Error>());
    if let Some(io_error) = io_error {
        if tls_error_kind(io_error).is_some() {
            return io_failure(io_error, address);
        }
        return match io_error.kind() {
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::UnexpectedEof => {
                if stamps.read_bytes() == 0 {
                    closed(address)
                } else {
                    Failure::bad_answer(checks::CUT_SHORT)
                }
            }
            // hyper's own word on a body it cannot decode (a broken chunk): the answer's fault, not the connection's
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
                if io_error.raw_os_error().is_none() =>
            {
                Failure::bad_answer(checks::BROKEN_FRAMING)
            }
            _ => io_failure(io_error, address),
        };
    }
    if error.is_incomplete_message() || error.is_closed() || error.is_canceled() {
        return if stamps.read_bytes() == 0 {
            closed(address)
        } else {
            Failure::bad_answer(checks::CUT_SHORT)
        };
    }
    if error.is_parse() || error.is_parse_status() || error.is_parse_too_large() {
        return Failure::bad_answer(checks::BROKEN_FRAMING);
    }
    Failure::new(checks::REQUEST_ERROR, format!("client error: {error}"))
}

impl HttpConn {
    async fn connect(target: &Target) -> Result<HttpConn, Failure> {
        let stamps = Arc::new(Stamps::default());
        let address = &target.display_address;
        let stream = target
            .peer
            .connect(&stamps)
            .await
            .map_err(|e| connect_failure(&e, address))?;
        let (sender, connection) = Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| hyper_failure(&e, &stamps, address))?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(HttpConn {
            sender,
            stamps,
            driver,
        })
    }
}

/// An answer as read: whole, or a generation's stream read event by event.
enum Answer {
    Whole(Bytes),
    Generation(GenerationRead),
}

/// A generation's stream read to its end.
struct GenerationRead {
    /// the body's bytes
    bytes: u64,
    /// each content event's arrival (its first byte's read)
    arrivals: Vec<ContentArrival>,
    /// each content event's text, kept when the target counts tokens with a tokenizer
    texts: Vec<String>,
    /// the server's count of the generated tokens, when it sent one
    usage: Option<u64>,
    /// the server's count of the prompt's tokens, when it sent one
    prompt_tokens: Option<u64>,
    /// the server's own times, when it sent them (the last ones sent)
    timings: Option<ServerTimings>,
    /// an error event, a stream that is not events, or one that ended before `[DONE]`
    failure: Option<Failure>,
}

/// Counts each content event's tokens with the target's tokenizer (`generation::tokens_per_event`):
/// the generation's N by its tokenizer.
fn count_tokens(file: &TokenizerFile, read: &mut GenerationRead) -> Result<u64, Failure> {
    let counts = generation::tokens_per_event(&file.tokenizer, &read.texts)
        .map_err(|reason| stream_failure(format!("{reason} (tokenizer {})", file.path)))?;
    for (arrival, tokens) in read.arrivals.iter_mut().zip(&counts) {
        arrival.tokens = Some(*tokens);
    }
    Ok(counts.iter().sum())
}

fn stream_failure(what: String) -> Failure {
    Failure::new(checks::REQUEST_ERROR, format!("bad stream: {what}"))
}

/// Reads a 200 answer as a generation's server-sent events, each read stamped when hyper hands
/// it over. A transport failure (the connection lost, the bound passed) is the call's failure; what
/// the stream itself says went wrong is kept with what was read before it.
async fn read_generation(
    format: StreamFormat,
    keep_texts: bool,
    content_type: Option<String>,
    mut body: hyper::body::Incoming,
    bound: usize,
    stamps: &Stamps,
    address: &str,
) -> Result<GenerationRead, Failure> {
    let mut reader = SseReader::new(bound.min(1 << 20)); // an event is parsed whole, ~35x its size
    let mut events = Vec::new();
    let mut read = GenerationRead {
        bytes: 0,
        arrivals: Vec::new(),
        texts: Vec::new(),
        usage: None,
        prompt_tokens: None,
        timings: None,
        failure: None,
    };
    let mut done = false;
    let media_type = content_type
        .as_deref()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media_type != "text/event-stream" {
        read.failure =
            Some(stream_failure(format!(
            "the answer is {}, not text/event-stream (did the request ask for \"stream\": true?)",
            if media_type.is_empty() { "without a Content-Type" } else { &media_type }
        )));
    }
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| hyper_failure(&e, stamps, address))?;
        let at_ns = monotonic_ns();
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        read.bytes += data.len() as u64;
        if read.bytes > bound as u64 {
            return Err(Failure::answer_too_large(bound));
        }
        if read.failure.is_some() || done {
            continue; // the rest is read (the connection stays usable), not judged
        }
        if let Err(error) = reader.feed(&data, at_ns, &mut events) {
            read.failure = Some(stream_failure(error.to_string()));
            continue;
        }
        for event in events.drain(..) {
            let kinds = match generation::classify(format, &event.name, &event.data) {
                Ok(kinds) => kinds,
                Err(reason) => {
                    read.failure = Some(stream_failure(reason));
                    break;
                }
            };
            for kind in kinds {
                match kind {
                    EventKind::Content(text) => {
                        read.arrivals.push(ContentArrival {
                            at_ns: event.first_byte_ns,
                            tokens: None,
                        });
                        if keep_texts {
                            read.texts.push(text);
                        }
                    }
                    EventKind::Usage(tokens) => read.usage = Some(tokens),
                    EventKind::PromptUsage(tokens) => read.prompt_tokens = Some(tokens),
                    EventKind::Timings(timings) => read.timings = Some(timings),
                    EventKind::Done => done = true,
                    EventKind::Error(message) => {
                        read.failure = Some(Failure::new(
                            checks::REQUEST_ERROR,
                            format!(
                                "stream error after {} content events: {}",
                                read.arrivals.len(),
                                checks::first_line(&message, 200)
                            ),
                        ))
                    }
                    EventKind::Nothing => {}
                }
            }
            if read.failure.is_some() {
                break;
            }
        }
    }
    if read.failure.is_none() && !done && format.ends_with_done() {
        let unfinished = if reader.unfinished() {
            ", inside an event"
        } else {
            ""
        };
        read.failure = Some(stream_failure(format!(
            "the stream ended before data: [DONE]{unfinished}, after {} content events",
            read.arrivals.len()
        )));
    }
    Ok(read)
}

/// The headers every request of a target carries, with one request's own: Host first, then the
/// target's, then the request's (which replace the target's of the same name).
pub fn request_headers(
    authority: &str,
    target_headers: &HeaderMap,
    own: &HeaderMap,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    headers.insert(
        HOST,
        HeaderValue::from_str(authority)
            .map_err(|_| format!("address {authority:?}: not a valid Host"))?,
    );
    for (name, value) in target_headers {
        headers.append(name.clone(), value.clone());
    }
    let mut replaced = std::collections::HashSet::new();
    for (name, value) in own {
        if replaced.insert(name.clone()) {
            headers.remove(name);
        }
        headers.append(name.clone(), value.clone());
    }
    Ok(headers)
}

/// One POST of a pre-encoded request (per-call: its body or headers changed) on the slot's connection.
pub async fn call(
    target: &Target,
    conn: &mut Option<HttpConn>,
    request: &HttpRequest,
    input: &CallInput,
) -> Outcome {
    let started = monotonic_ns();
    let address = &target.display_address;
    let outgoing = || {
        let mut outgoing = Request::new(Full::new(
            input.body.clone().unwrap_or_else(|| request.body.clone()),
        ));
        *outgoing.method_mut() = Method::POST;
        *outgoing.uri_mut() = Uri::from(request.path.clone());
        *outgoing.headers_mut() = request.headers.clone();
        if let Some(extra) = &input.headers {
            let mut replaced = std::collections::HashSet::new();
            for (name, value) in extra {
                if replaced.insert(name.clone()) {
                    outgoing.headers_mut().remove(name);
                }
                outgoing.headers_mut().append(name.clone(), value.clone());
            }
        }
        outgoing
    };
    let attempt = async {
        // a kept connection the server has closed meanwhile is replaced before anything is sent
        let mut kept = false;
        if let Some(live) = conn.as_mut() {
            if live.sender.ready().await.is_err() {
                *conn = None;
            } else {
                kept = true;
            }
        }
        let (live, response) = loop {
            if conn.is_none() {
                *conn = Some(HttpConn::connect(target).await?);
            }
            let live = conn.as_mut().expect("connected");
            live.sender.ready().await.map_err(|_| closed(address))?;
            live.stamps.arm();
            match live.sender.send_request(outgoing()).await {
                Ok(response) => break (live, response),
                // the server closed a kept connection as the request went out (llama.cpp closes after
                // each stream while it says Keep-Alive): it read none of it, so it goes again, once,
                // on a new connection, timed from that send
                Err(error) if kept && stale(&error, &live.stamps) => {
                    debug::note("http call on a closed kept connection, sent again", &error);
                    *conn = None;
                    kept = false;
                }
                Err(error) => return Err(hyper_failure(&error, &live.stamps, address)),
            }
        };
        let (parts, body) = response.into_parts();
        if let (AnswerRule::Generation(format), 200) = (&target.check.answer, parts.status.as_u16())
        {
            let content_type = parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let read = read_generation(
                *format,
                target.check.tokenizer.is_some() || input.want_answer,
                content_type,
                body,
                target.max_answer_bytes,
                &live.stamps,
                address,
            )
            .await?;
            return Ok::<_, Failure>((parts, Answer::Generation(read), live.stamps.clone()));
        }
        // a Content-Length past the bound fails before any byte is read, a longer body once it passes it
        let body = Limited::new(body, target.max_answer_bytes)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    return Failure::answer_too_large(target.max_answer_bytes);
                }
                match e.downcast::<hyper::Error>() {
                    Ok(hyper_error) => hyper_failure(&hyper_error, &live.stamps, address),
                    Err(other) => {
                        Failure::new(checks::REQUEST_ERROR, format!("client error: {other}"))
                    }
                }
            })?
            .to_bytes();
        Ok::<_, Failure>((parts, Answer::Whole(body), live.stamps.clone()))
    };
    let finished = tokio::time::timeout(target.timeout, attempt).await;
    let now = monotonic_ns();
    let stamps = conn.as_ref().map(|c| c.stamps.clone());
    let sent_ns = stamps.as_ref().and_then(|s| s.sent_ns()).unwrap_or(started);
    match finished {
        Err(_elapsed) => {
            *conn = None;
            Outcome {
                sent_ns,
                received_ns: now,
                ..Outcome::failed(Failure::timeout(address))
            }
        }
        Ok(Err(failure)) => {
            *conn = None;
            Outcome {
                sent_ns,
                received_ns: now,
                ..Outcome::failed(failure)
            }
        }
        Ok(Ok((parts, body, stamps))) => {
            let received_ns = stamps.read_ns().filter(|r| *r >= sent_ns).unwrap_or(now);
            let closes = parts
                .headers
                .get_all(CONNECTION)
                .iter()
                .any(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            if closes {
                *conn = None;
            }
            let status = parts.status.as_u16();
            let header = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            let body = match body {
                Answer::Whole(body) => body,
                Answer::Generation(mut read) => {
                    let counted = target
                        .check
                        .tokenizer
                        .as_ref()
                        .map(|file| count_tokens(file, &mut read))
                        .transpose();
                    let (mut figures, source) =
                        generation::figures(sent_ns, &read.arrivals, read.usage, read.timings);
                    figures.good = target.check.goodput.map(|limits| limits.met_by(&figures));
                    figures.prompt_tokens = read.prompt_tokens;
                    match counted {
                        Ok(tokens) => figures.tokenizer_tokens = tokens,
                        Err(failure) => read.failure = read.failure.or(Some(failure)),
                    }
                    let succeeded = read.failure.is_none();
                    return Outcome {
                        stream: succeeded.then(|| StreamTiming {
                            responses: figures.content_events,
                            first_response_ms: figures.ttft_ms,
                            gaps_ms: figures.icl_ms.clone(),
                        }),
                        generation: succeeded.then_some((figures, source)),
                        failure: read.failure,
                        sent_ns,
                        received_ns: now,
                        response_length: read.bytes,
                        answer: input.want_answer.then(|| Bytes::from(read.texts.concat())),
                        status: i32::from(status),
                        answered: true,
                    };
                }
            };
            let judged = checks::judge_http(&target.check, status, &header, &body);
            Outcome {
                failure: judged.as_ref().err().cloned(),
                sent_ns,
                received_ns,
                response_length: *judged.as_ref().unwrap_or(&0),
                answer: input.want_answer.then_some(body),
                status: i32::from(status),
                answered: !matches!(&judged, Err(f) if f.class == checks::HTTP_STATUS_ERROR),
                stream: None,
                generation: None,
            }
        }
    }
}
