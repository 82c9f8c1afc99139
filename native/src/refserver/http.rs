//! HTTP/1.1 (hyper): KServe v2 REST with Triton's binary tensor extension, Triton's model config,
//! TorchServe-style REST, KServe v1, OpenAI-compatible generation (`generate.rs`), and the records
//! (`/reference/...`).

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::canned::{http_answer, Selection, VERSION};
use super::generate;
use super::hold::monotonic_ns;
use super::records::{Outcome, Protocol};
use super::shared::{Refusal, Shared};

/// The largest request body read (tensors included).
const MAX_BODY_BYTES: usize = 256 << 20;
const JSON: &str = "application/json";
const OCTET_STREAM: &str = "application/octet-stream";
/// Triton's header: the length of the JSON before the binary tensors.
const HEADER_LENGTH: &str = "inference-header-content-length";

pub use super::generate::Body;

fn respond(
    status: StatusCode,
    content_type: &'static str,
    head: Bytes,
    tail: Bytes,
) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(head.chain(tail))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_answer(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    respond(status, JSON, body.into(), Bytes::new())
}

fn error_json(status: StatusCode, message: &str) -> Response<Body> {
    json_answer(status, json!({ "error": message }).to_string())
}

/// TorchServe's error form.
fn torchserve_error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    json_answer(
        status,
        json!({"code": status.as_u16(), "type": kind, "message": message}).to_string(),
    )
}

fn percent_decoded(segment: &str) -> Cow<'_, str> {
    if !segment.contains('%') {
        return Cow::Borrowed(segment);
    }
    fn hex(byte: u8) -> Option<u8> {
        (byte as char).to_digit(16).map(|digit| digit as u8)
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[index + 1]), hex(bytes[index + 2])) {
                out.push(high * 16 + low);
                index += 3;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// `{m}`, `{m}/versions/{v}`, then what follows: (model, version, rest).
fn model_path(path: &str) -> (Cow<'_, str>, Cow<'_, str>, &str) {
    let (model, rest) = path.split_once('/').map_or((path, ""), |(m, r)| (m, r));
    if let Some(after) = rest.strip_prefix("versions/") {
        let (version, rest) = after.split_once('/').map_or((after, ""), |(v, r)| (v, r));
        return (percent_decoded(model), percent_decoded(version), rest);
    }
    (percent_decoded(model), Cow::Borrowed(""), rest)
}

fn refusal_answer(refusal: &Refusal) -> Response<Body> {
    // Triton answers 400 to an unknown model, as to a bad request
    error_json(StatusCode::BAD_REQUEST, &refusal.message())
}

fn query_number(query: Option<&str>, key: &str) -> Option<usize> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == key)
        .and_then(|(_, value)| value.parse().ok())
}

// -- the v2 inference request's JSON header (what is read of it)

#[derive(Deserialize)]
struct InputHead {
    #[serde(default)]
    shape: Vec<i64>,
}

#[derive(Deserialize, Default)]
struct OutputParameters {
    #[serde(default)]
    binary_data: Option<bool>,
}

#[derive(Deserialize)]
struct OutputHead {
    name: String,
    #[serde(default)]
    parameters: Option<OutputParameters>,
}

#[derive(Deserialize, Default)]
struct RequestParameters {
    #[serde(default)]
    binary_data_output: Option<bool>,
}

#[derive(Deserialize)]
struct InferHead {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    inputs: Vec<InputHead>,
    #[serde(default)]
    outputs: Vec<OutputHead>,
    #[serde(default)]
    parameters: Option<RequestParameters>,
}

/// The outputs answered and which of them are binary (Triton's rules: an output's own
/// `binary_data`, else the request's `binary_data_output`, false by default).
fn selection_of(shared: &Shared, head: &InferHead) -> Result<Selection, Refusal> {
    let binary_default = head
        .parameters
        .as_ref()
        .and_then(|p| p.binary_data_output)
        .unwrap_or(false);
    if head.outputs.is_empty() {
        let all = shared.canned.all_outputs();
        return Ok(Selection {
            outputs: all,
            binary: if binary_default { all } else { 0 },
        });
    }
    let mut selection = Selection {
        outputs: 0,
        binary: 0,
    };
    for output in &head.outputs {
        let mask = shared.output_mask(std::iter::once(output.name.as_str()))?;
        selection.outputs |= mask;
        let binary = output
            .parameters
            .as_ref()
            .and_then(|p| p.binary_data)
            .unwrap_or(binary_default);
        if binary {
            selection.binary |= mask;
        }
    }
    Ok(selection)
}

fn failure_status(shared: &Shared) -> StatusCode {
    StatusCode::from_u16(shared.truth.config.failures.http_status)
        .unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

async fn v2_infer(
    shared: &Shared,
    model: &str,
    version: &str,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let received = monotonic_ns();
    let json_length = headers
        .get(HEADER_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<usize>().ok());
    let json_part = match json_length {
        Some(length) if length <= body.len() => &body[..length],
        Some(length) => {
            shared.truth.reject();
            return error_json(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Inference-Header-Content-Length {length} is more than the body's {} bytes",
                    body.len()
                ),
            );
        }
        None => &body[..],
    };
    let head: InferHead = match serde_json::from_slice(json_part) {
        Ok(head) => head,
        Err(error) => {
            shared.truth.reject();
            return error_json(
                StatusCode::BAD_REQUEST,
                &format!("failed to parse the request JSON buffer: {error}"),
            );
        }
    };
    let checked = shared
        .check_infer(
            model,
            version,
            head.inputs.first().map(|i| i.shape.as_slice()),
            false,
        )
        .and_then(|batch| Ok((batch, selection_of(shared, &head)?)));
    let (batch, selection) = match checked {
        Ok(checked) => checked,
        Err(refusal) => {
            shared.truth.reject();
            return refusal_answer(&refusal);
        }
    };
    let admitted = shared.truth.admit(received, Protocol::Http, batch);
    let mut flight = shared
        .truth
        .in_flight(admitted, head.id.clone().unwrap_or_default());
    if flight.admitted.fails {
        flight.finish(Outcome::Failed);
        return error_json(
            failure_status(shared),
            &shared.truth.config.failures.message,
        );
    }
    shared.truth.serve(&mut flight, 1, |_| {}).await;
    let (json_body, binary_bytes) =
        http_answer(&shared.canned, batch, selection, head.id.as_deref());
    let response = if binary_bytes > 0 {
        let json_length = json_body.len();
        let mut response = respond(
            StatusCode::OK,
            OCTET_STREAM,
            Bytes::from(json_body),
            shared.canned.zeros(binary_bytes),
        );
        response
            .headers_mut()
            .insert(HEADER_LENGTH, HeaderValue::from(json_length));
        response
    } else {
        json_answer(StatusCode::OK, json_body)
    };
    flight.finish(Outcome::Ok);
    response
}

async fn v2_model(
    shared: &Shared,
    method: &Method,
    path: &str,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let (model, version, rest) = model_path(path);
    let known = shared.check_model(&model, &version);
    match (method, rest) {
        (&Method::POST, "infer") => v2_infer(shared, &model, &version, headers, body).await,
        (&Method::GET, "") => match known {
            Ok(()) => json_answer(StatusCode::OK, shared.canned.json_metadata.clone()),
            Err(refusal) => refusal_answer(&refusal),
        },
        (&Method::GET, "ready") => match known {
            Ok(()) => respond(StatusCode::OK, JSON, Bytes::new(), Bytes::new()),
            Err(refusal) => refusal_answer(&refusal),
        },
        (&Method::GET, "config") => match known {
            Ok(()) => json_answer(StatusCode::OK, shared.canned.json_config.clone()),
            Err(refusal) => refusal_answer(&refusal),
        },
        _ => error_json(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn predictions(shared: &Shared, method: &Method, path: &str) -> Response<Body> {
    let (model, version) = path.split_once('/').map_or((path, ""), |(m, v)| (m, v));
    let model = percent_decoded(model);
    if model != shared.canned.model.as_str() {
        shared.truth.reject();
        return torchserve_error(
            StatusCode::NOT_FOUND,
            "ModelNotFoundException",
            &format!("Model not found: {model}"),
        );
    }
    if !version.is_empty() && version != VERSION {
        shared.truth.reject();
        return torchserve_error(
            StatusCode::NOT_FOUND,
            "ModelVersionNotFoundException",
            &format!("Model version: {version} does not exist for model: {model}"),
        );
    }
    if method == Method::OPTIONS {
        // TorchServe describes the model's API here; inferload's start check only needs a 200
        return json_answer(
            StatusCode::OK,
            json!({"openapi": "3.0.1", "info": {"title": format!("{model} (inferload reference server)"), "version": VERSION}, "paths": {}})
                .to_string(),
        );
    }
    let received = monotonic_ns();
    let admitted = shared
        .truth
        .admit(received, Protocol::Rest, shared.truth.config.rest_items);
    let mut flight = shared.truth.in_flight(admitted, String::new());
    if flight.admitted.fails {
        flight.finish(Outcome::Failed);
        return torchserve_error(
            failure_status(shared),
            "ServiceUnavailableException",
            &shared.truth.config.failures.message,
        );
    }
    shared.truth.serve(&mut flight, 1, |_| {}).await;
    let response = json_answer(StatusCode::OK, shared.canned.rest_answer.clone());
    flight.finish(Outcome::Ok);
    response
}

#[derive(Deserialize)]
struct V1Request {
    instances: Vec<serde::de::IgnoredAny>,
}

async fn v1_models(shared: &Shared, method: &Method, path: &str, body: Bytes) -> Response<Body> {
    let canned = &shared.canned;
    if path.is_empty() && method == Method::GET {
        return json_answer(
            StatusCode::OK,
            json!({ "models": [canned.model] }).to_string(),
        );
    }
    let (model, predict) = match path.strip_suffix(":predict") {
        Some(model) => (percent_decoded(model), true),
        None => (percent_decoded(path), false),
    };
    if model != canned.model.as_str() {
        if predict {
            shared.truth.reject();
        }
        return error_json(
            StatusCode::NOT_FOUND,
            &format!("Model with name {model} does not exist."),
        );
    }
    match (method, predict) {
        (&Method::GET, false) => json_answer(
            StatusCode::OK,
            json!({"name": canned.model, "ready": true}).to_string(),
        ),
        (&Method::POST, true) => {
            let received = monotonic_ns();
            let items = serde_json::from_slice::<V1Request>(&body)
                .map(|request| request.instances.len() as u32)
                .unwrap_or(shared.truth.config.rest_items);
            let admitted = shared.truth.admit(received, Protocol::V1, items);
            let mut flight = shared.truth.in_flight(admitted, String::new());
            if flight.admitted.fails {
                flight.finish(Outcome::Failed);
                return error_json(
                    failure_status(shared),
                    &shared.truth.config.failures.message,
                );
            }
            shared.truth.serve(&mut flight, 1, |_| {}).await;
            let mut answer = Vec::with_capacity(20 + (canned.list_item.len() + 1) * items as usize);
            answer.extend_from_slice(b"{\"predictions\":[");
            for index in 0..items {
                if index > 0 {
                    answer.push(b',');
                }
                answer.extend_from_slice(canned.list_item.as_bytes());
            }
            answer.extend_from_slice(b"]}");
            let response = json_answer(StatusCode::OK, answer);
            flight.finish(Outcome::Ok);
            response
        }
        _ => error_json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
    }
}

fn reference(shared: &Shared, method: &Method, path: &str, query: Option<&str>) -> Response<Body> {
    match (method, path) {
        (&Method::GET, "records") => {
            let after = query_number(query, "after").unwrap_or(0);
            let limit = query_number(query, "limit").unwrap_or(usize::MAX);
            respond(
                StatusCode::OK,
                OCTET_STREAM,
                Bytes::from(shared.truth.records.packed(after, limit)),
                Bytes::new(),
            )
        }
        (&Method::POST, "reset") => {
            shared.truth.reset();
            json_answer(StatusCode::OK, json!({"reset": true}).to_string())
        }
        (&Method::GET, "stats") => {
            json_answer(StatusCode::OK, shared.truth.stats_json().to_string())
        }
        _ => error_json(StatusCode::NOT_FOUND, "Not Found"),
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, Response<Body>> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) => Err(error_json(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body could not be read (at most {MAX_BODY_BYTES} bytes): {error}"
            ),
        )),
    }
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(response) => return Ok(response),
    };
    let method = &parts.method;
    let path = parts.uri.path();
    match (method, path) {
        (&Method::POST, "/v1/chat/completions") => {
            return Ok(generate::completions(shared, true, body).await)
        }
        (&Method::POST, "/v1/completions") => {
            return Ok(generate::completions(shared, false, body).await)
        }
        (&Method::GET, "/v1/models") => return Ok(generate::models(&shared)),
        _ => {}
    }
    if let (&Method::POST, Some(rest)) = (method, path.strip_prefix("/v2/models/")) {
        for (suffix, stream) in [("/generate_stream", true), ("/generate", false)] {
            if let Some(named) = rest.strip_suffix(suffix) {
                let model = named.split("/versions/").next().unwrap_or(named);
                return Ok(generate::triton_generate(shared, model, stream, body).await);
            }
        }
    }
    let shared = &*shared;
    let response = if let Some(rest) = path.strip_prefix("/v2/models/") {
        v2_model(shared, method, rest, &parts.headers, body).await
    } else if let Some(rest) = path.strip_prefix("/predictions/") {
        match *method {
            Method::POST | Method::OPTIONS => predictions(shared, method, rest).await,
            _ => error_json(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
        }
    } else if let Some(rest) = path.strip_prefix("/v1/models") {
        v1_models(shared, method, rest.trim_start_matches('/'), body).await
    } else if let Some(rest) = path.strip_prefix("/reference/") {
        reference(shared, method, rest, parts.uri.query())
    } else {
        match (method, path) {
            (&Method::GET, "/v2/health/live" | "/v2/health/ready") => {
                respond(StatusCode::OK, JSON, Bytes::new(), Bytes::new())
            }
            (&Method::GET, "/v2") => {
                json_answer(StatusCode::OK, shared.canned.json_server_metadata.clone())
            }
            (&Method::POST, "/v2/repository/index") => {
                json_answer(StatusCode::OK, shared.canned.json_index.clone())
            }
            (&Method::GET, "/ping") => {
                json_answer(StatusCode::OK, &b"{\"status\": \"Healthy\"}"[..])
            }
            _ => error_json(StatusCode::NOT_FOUND, "Not Found"),
        }
    };
    Ok(response)
}

/// Serve HTTP/1.1 connections until `stop` says so.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            // out of file descriptors, or a connection reset before it was accepted: go on
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(Arc::clone(&shared), request));
            let mut builder = http1::Builder::new();
            builder.keep_alive(true).pipeline_flush(true);
            match tls {
                None => {
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_paths_split_into_model_version_and_rest() {
        let (m, v, r) = model_path("identity/versions/1/infer");
        assert_eq!((m.as_ref(), v.as_ref(), r), ("identity", "1", "infer"));
        let (m, v, r) = model_path("identity");
        assert_eq!((m.as_ref(), v.as_ref(), r), ("identity", "", ""));
        let (m, v, r) = model_path("a%20b/config");
        assert_eq!((m.as_ref(), v.as_ref(), r), ("a b", "", "config"));
        assert_eq!(percent_decoded("50%"), "50%");
    }

    #[test]
    fn query_numbers_are_read_by_key() {
        assert_eq!(query_number(Some("after=5&limit=2"), "limit"), Some(2));
        assert_eq!(query_number(Some("after=x"), "after"), None);
        assert_eq!(query_number(None, "after"), None);
    }
}
