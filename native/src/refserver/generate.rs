//! Generation, scripted: OpenAI-compatible (`GET /v1/models`, `POST /v1/chat/completions` and
//! `POST /v1/completions`, answered whole or streamed as server-sent events with `"stream": true`)
//! and Triton's generate extension (`POST /v2/models/{model}/generate`, whole, and
//! `.../generate_stream`, `text_output` events that end with the body).
//!
//! A generation is one request of the known truth (`truth.rs`): it gets the next draw, waits for a
//! slot, and its `stream_responses` content events are each written after one more hold of its
//! draw (event i at start + (i + 1) · draw, deadlines from the start). Each content event carries
//! `generation.tokens_per_event` tokens, each the text `é`. Around them, as a real server writes
//! them and as `generation` asks: a role-only prelude (chat) at once, a `: keep-alive` comment
//! before each content event, events cut in two writes inside a character or written two at a time,
//! a chunk with the finish reason, a usage-only tail when the request asks for it
//! (`stream_options.include_usage`), `data: [DONE]`; or an error event after
//! `fail_after_events` content events (recorded as failed). The record's `end_ns` is the last
//! content event's hold end, `answered_ns` the stream's last write handed to the transport.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::buf::Chain;
use bytes::{Buf, Bytes};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Frame;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::hold::monotonic_ns;
use super::records::{Outcome, Protocol};
use super::shared::Shared;

/// The text of one token.
pub const TOKEN_TEXT: &str = "é";
/// How long a split event's second write waits after its first (the client reads them apart).
const SPLIT_GAP: Duration = Duration::from_millis(2);

/// A streamed answer's body: the writes of the generation's task, in order.
pub struct EventBody {
    writes: mpsc::UnboundedReceiver<Bytes>,
}

impl hyper::body::Body for EventBody {
    type Data = Chain<Bytes, Bytes>;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.writes
            .poll_recv(cx)
            .map(|write| write.map(|bytes| Ok(Frame::data(bytes.chain(Bytes::new())))))
    }
}

pub type Body = Either<Full<Chain<Bytes, Bytes>>, EventBody>;

fn answer(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_answer(status: StatusCode, value: &Value) -> Response<Body> {
    let text = Bytes::from(value.to_string());
    answer(
        status,
        "application/json",
        Either::Left(Full::new(text.chain(Bytes::new()))),
    )
}

/// OpenAI's error form.
fn openai_error(status: StatusCode, message: &str, kind: &str) -> Response<Body> {
    json_answer(
        status,
        &json!({"error": {"message": message, "type": kind, "code": status.as_u16()}}),
    )
}

#[derive(Deserialize)]
struct GenerateRequest {
    model: String,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

/// Triton's generate request: `text_input` and optional `parameters` (read, not used: the script decides).
#[derive(Deserialize)]
struct TritonGenerateRequest {
    #[allow(dead_code)]
    text_input: String,
    #[serde(default)]
    #[allow(dead_code)]
    parameters: Option<serde_json::Map<String, Value>>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// `GET /v1/models`: the one model, as OpenAI lists models (`data`) and as KServe v1 does
/// (`models`): the two APIs share the route, and each reader takes its own key.
pub fn models(shared: &Shared) -> Response<Body> {
    let model = &shared.truth.config.model;
    json_answer(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": [{"id": model, "object": "model", "owned_by": "inferload-reference"}],
            "models": [model],
        }),
    )
}

/// Which API a generation answers in.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's `/v1/chat/completions`
    Chat,
    /// OpenAI's `/v1/completions`
    Completions,
    /// Triton's generate extension (`/v2/models/{m}/generate`, `/generate_stream`): `text_output`
    /// events, no role prelude, finish chunk, usage or `[DONE]`; the stream ends with its body
    Triton,
}

/// What one chunk of the answer says, as the dialect writes it.
struct Chunks {
    dialect: Dialect,
    model: String,
}

impl Chunks {
    fn event(value: &Value) -> Vec<u8> {
        format!("data: {value}\n\n").into_bytes()
    }

    fn choice(&self, text: Option<&str>, finish: Option<&str>, role: bool) -> Value {
        if self.dialect == Dialect::Chat {
            let mut delta = serde_json::Map::new();
            if role {
                delta.insert("role".into(), json!("assistant"));
                delta.insert("content".into(), json!(""));
            }
            if let Some(text) = text {
                delta.insert("content".into(), json!(text));
            }
            json!({"index": 0, "delta": delta, "finish_reason": finish})
        } else {
            json!({"index": 0, "text": text.unwrap_or(""), "finish_reason": finish})
        }
    }

    /// One content event's chunk.
    fn content(&self, text: &str) -> Value {
        match self.dialect {
            Dialect::Triton => self.triton(text),
            _ => self.chunk(vec![self.choice(Some(text), None, false)], None),
        }
    }

    fn triton(&self, text: &str) -> Value {
        json!({"model_name": self.model, "model_version": "1", "text_output": text})
    }

    fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let object = if self.dialect == Dialect::Chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let mut chunk =
            json!({"id": "ref", "object": object, "model": self.model, "choices": choices});
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        chunk
    }

    /// The whole answer of a generation that is not streamed.
    fn whole(&self, text: String, tokens: u64) -> Value {
        match self.dialect {
            Dialect::Triton => self.triton(&text),
            Dialect::Chat => json!({"id": "ref", "object": "chat.completion", "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
                "usage": usage(tokens)}),
            Dialect::Completions => {
                json!({"id": "ref", "object": "text_completion", "model": self.model,
                "choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage(tokens)})
            }
        }
    }

    /// The error event of a stream that fails half-way, and the error answer before one starts.
    fn error(&self, message: &str, kind: &str) -> Value {
        match self.dialect {
            Dialect::Triton => json!({"error": message}),
            _ => json!({"error": {"message": message, "type": kind}}),
        }
    }
}

fn usage(tokens: u64) -> Value {
    json!({"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1})
}

/// llama.cpp's `timings` of a stream whose service started at `started_ns` and whose first and last
/// content events were written at `first_ns` and `last_ns`.
fn timings(started_ns: u64, first_ns: u64, last_ns: u64, tokens: u64) -> Value {
    let ms = |ns: u64| ns as f64 / 1e6;
    json!({"prompt_n": 1, "prompt_ms": ms(first_ns.saturating_sub(started_ns)),
           "predicted_n": tokens, "predicted_ms": ms(last_ns.saturating_sub(first_ns))})
}

/// What a generation request asks, whatever its dialect.
struct Asked {
    model: String,
    stream: bool,
    include_usage: bool,
}

/// `POST /v1/chat/completions` (chat) or `/v1/completions`.
pub async fn completions(shared: Arc<Shared>, chat: bool, body: Bytes) -> Response<Body> {
    let dialect = if chat {
        Dialect::Chat
    } else {
        Dialect::Completions
    };
    let request: GenerateRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            shared.truth.reject();
            return openai_error(
                StatusCode::BAD_REQUEST,
                &format!("the request is not a completion request: {error}"),
                "invalid_request_error",
            );
        }
    };
    let include_usage = request
        .stream_options
        .is_some_and(|options| options.include_usage);
    let asked = Asked {
        model: request.model,
        stream: request.stream,
        include_usage,
    };
    generate(shared, dialect, asked).await
}

/// `POST /v2/models/{model}[/versions/{v}]/generate` (`stream` false) or `.../generate_stream`.
pub async fn triton_generate(
    shared: Arc<Shared>,
    model: &str,
    stream: bool,
    body: Bytes,
) -> Response<Body> {
    if let Err(error) = serde_json::from_slice::<TritonGenerateRequest>(&body) {
        shared.truth.reject();
        return json_answer(
            StatusCode::BAD_REQUEST,
            &json!({"error": format!("the request is not a generate request: {error}")}),
        );
    }
    let asked = Asked {
        model: model.to_owned(),
        stream,
        include_usage: false,
    };
    generate(shared, Dialect::Triton, asked).await
}

async fn generate(shared: Arc<Shared>, dialect: Dialect, request: Asked) -> Response<Body> {
    let received = monotonic_ns();
    if request.model != shared.truth.config.model {
        shared.truth.reject();
        let message = match dialect {
            Dialect::Triton => format!(
                "Request for unknown model: '{}' is not found",
                request.model
            ),
            _ => format!("The model `{}` does not exist.", request.model),
        };
        let chunks = Chunks {
            dialect,
            model: request.model,
        };
        return json_answer(
            StatusCode::NOT_FOUND,
            &chunks.error(&message, "invalid_request_error"),
        );
    }
    let admitted = shared.truth.admit(received, Protocol::Generate, 1);
    if admitted.fails {
        shared
            .truth
            .in_flight(admitted, String::new())
            .finish(Outcome::Failed);
        let failures = &shared.truth.config.failures;
        let status =
            StatusCode::from_u16(failures.http_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        let chunks = Chunks {
            dialect,
            model: request.model,
        };
        return json_answer(status, &chunks.error(&failures.message, "server_error"));
    }
    let chat = dialect == Dialect::Chat;
    let chunks = Chunks {
        dialect,
        model: request.model,
    };
    let script = shared.truth.config.generation.clone();
    let events = shared.truth.config.stream_responses;
    let tokens = u64::from(events) * u64::from(script.tokens_per_event);
    let text = TOKEN_TEXT.repeat(script.tokens_per_event as usize);
    if !request.stream {
        let truth = &shared.truth;
        let mut flight = truth.in_flight(admitted, String::new());
        let slot = truth.start_service(&mut flight).await;
        for index in 0..events {
            truth.hold_event(&mut flight, index).await;
        }
        drop(slot);
        let response = json_answer(
            StatusCode::OK,
            &chunks.whole(text.repeat(events as usize), tokens),
        );
        flight.finish(Outcome::Ok);
        return response;
    }
    let include_usage = request.include_usage;
    let (writes, body) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let truth = &shared.truth;
        let mut flight = truth.in_flight(admitted, String::new());
        let send = |bytes: Vec<u8>| writes.send(Bytes::from(bytes)).is_ok();
        let slot = truth.start_service(&mut flight).await;
        let started_ns = flight.start_ns;
        let (mut first_ns, mut last_ns) = (None, started_ns);
        if chat
            && script.role_prelude
            && !send(Chunks::event(
                &chunks.chunk(vec![chunks.choice(None, None, true)], None),
            ))
        {
            return; // the client went away: the record says cancelled
        }
        let mut pending: Vec<u8> = Vec::new();
        for index in 0..events {
            if script.fail_after_events == Some(index) {
                let error = chunks.error(&truth.config.failures.message, "server_error");
                pending.extend(Chunks::event(&error));
                send(pending);
                drop(slot);
                flight.finish(Outcome::Failed);
                return;
            }
            truth.hold_event(&mut flight, index).await;
            if script.keep_alive {
                pending.extend_from_slice(b": keep-alive\n\n");
            }
            pending.extend(Chunks::event(&chunks.content(&text)));
            if script.coalesce_events && index % 2 == 0 && index + 1 < events {
                continue; // written with the next one
            }
            last_ns = monotonic_ns();
            first_ns.get_or_insert(last_ns);
            flight.last_event_ns = last_ns;
            if flight.first_event_ns == 0 {
                flight.first_event_ns = last_ns;
            }
            let write = std::mem::take(&mut pending);
            let delivered = match script.split_events {
                // cut inside the last token's character: its first byte goes now, the rest after a gap
                true => {
                    let cut = write
                        .iter()
                        .rposition(|&b| b == TOKEN_TEXT.as_bytes()[0])
                        .map_or(write.len() / 2, |at| at + 1);
                    let first = send(write[..cut].to_vec());
                    tokio::time::sleep(SPLIT_GAP).await;
                    first && send(write[cut..].to_vec())
                }
                false => send(write),
            };
            if !delivered {
                return;
            }
        }
        let delivered = if dialect == Dialect::Triton {
            pending.is_empty() || send(pending) // the body's end is the stream's end
        } else {
            let mut tail = std::mem::take(&mut pending);
            tail.extend(Chunks::event(
                &chunks.chunk(vec![chunks.choice(None, Some("length"), false)], None),
            ));
            if include_usage {
                let mut last = chunks.chunk(Vec::new(), Some(usage(tokens)));
                if script.timings {
                    let first_ns = first_ns.unwrap_or(last_ns);
                    last["timings"] = timings(started_ns, first_ns, last_ns, tokens);
                }
                tail.extend(Chunks::event(&last));
            }
            tail.extend_from_slice(b"data: [DONE]\n\n");
            send(tail)
        };
        drop(slot);
        flight.finish(if delivered {
            Outcome::Ok
        } else {
            Outcome::Cancelled
        });
    });
    answer(
        StatusCode::OK,
        "text/event-stream",
        Either::Right(EventBody { writes: body }),
    )
}
