//! How an answer is judged: the failure classes and messages of the Python path, byte for byte
//! (`users/failures.py`, `users/http_answer.py`, `users/kserve.py`,
//! tritonclient's `_get_error` / `InferResult` and `users/triton.py`), so that Locust, which
//! groups failures by message, groups the engine's failures with the Python path's.
//!
//! A check is built once per target ([`Check`]); [`judge_grpc`] and [`judge_http`] run it on one
//! answer and give the response length the Python user reports, or the failure.

use super::generation::{Goodput, StreamFormat, TokenizerFile};
use super::pyjson::{self, RapidjsonError, Value};

/// One failed call: the class name of `inferload/errors.py` and the message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    pub class: &'static str,
    pub message: String,
}

pub const CONNECTION_REFUSED: &str = "ConnectionRefused";
pub const REQUEST_TIMEOUT: &str = "RequestTimeout";
pub const REQUEST_ERROR: &str = "RequestError";
pub const HTTP_STATUS_ERROR: &str = "HttpStatusError";
pub const GRPC_STATUS_ERROR: &str = "GrpcStatusError";
pub const BAD_OUTPUT_SHAPE: &str = "BadOutputShape";

impl Failure {
    pub fn new(class: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            class,
            message: message.into(),
        }
    }

    /// `ConnectionRefused("refused: cannot connect to {address}")`.
    pub fn refused(address: &str) -> Failure {
        Failure::new(
            CONNECTION_REFUSED,
            format!("refused: cannot connect to {address}"),
        )
    }

    /// `RequestTimeout("timeout: no answer from {address} in time")`.
    pub fn timeout(address: &str) -> Failure {
        Failure::new(
            REQUEST_TIMEOUT,
            format!("timeout: no answer from {address} in time"),
        )
    }

    /// `ConnectionRefused("connection error to {address}: {kind}")` (another OSError).
    pub fn connection_error(address: &str, kind: &str) -> Failure {
        Failure::new(
            CONNECTION_REFUSED,
            format!("connection error to {address}: {kind}"),
        )
    }

    /// `RequestError("client error: {kind}: {message}")` (what `classify_exception` makes of
    /// an exception that is no OSError).
    pub fn client_error(kind: &str, message: &str) -> Failure {
        Failure::new(REQUEST_ERROR, format!("client error: {kind}: {message}"))
    }

    /// `RequestError("answer larger than {limit} bytes ...")`: the answer was cut off at the
    /// target's `max_answer_bytes`, nothing more of it buffered.
    pub fn answer_too_large(limit: usize) -> Failure {
        Failure::new(
            REQUEST_ERROR,
            format!("answer larger than {limit} bytes (the target's max_answer_bytes)"),
        )
    }

    /// Whether the Python path counts it as refused: every `ConnectionRefused` (the run's
    /// `refused_windows` and a closed loop's back-off both test `isinstance(exc, ConnectionRefused)`).
    pub fn is_refused(&self) -> bool {
        self.class == CONNECTION_REFUSED
    }
}

/// The first line of a message, stripped, at most `limit` characters (`failures._first_line`).
pub fn first_line_of(text: &str, limit: usize) -> String {
    let stripped = pyjson::py_strip(text);
    pyjson::cut_chars(pyjson::first_line(stripped), limit).to_owned()
}

fn http_status_error(status: u16, detail: &str) -> Failure {
    let message = if detail.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {detail}")
    };
    Failure::new(HTTP_STATUS_ERROR, message)
}

/// What an answer must be, beyond its transport status.
#[derive(Clone, Debug, PartialEq)]
pub enum AnswerRule {
    /// any answer (gRPC: length = the raw outputs' bytes; HTTP: the body's length)
    None,
    /// a gRPC `ModelInferResponse` whose outputs have the shapes (when `shapes` is given)
    GrpcShapes,
    /// tritonclient.http's answer: status 200 with its error rule, the JSON header read as
    /// `InferResult` reads it, the shapes (when given); length = the outputs' `binary_data_size`
    TritonHttp,
    /// a KServe v2 JSON answer (`v2_answer`), the shapes when given; length = body
    V2Shapes,
    /// a JSON list of `length` items (`failures.check_json_list`)
    JsonList { length: usize },
    /// `{"predictions": [length items]}` (`v1_predictions`)
    V1Predictions { length: usize },
    /// a generation streamed as server-sent events (`http1::read_generation`); a 200 answer is
    /// read event by event, anything else judged as an HTTP error
    Generation(StreamFormat),
}

/// How an HTTP error answer's reason is read (its text goes after `HTTP {status}: `).
#[derive(Clone, Debug, PartialEq)]
pub enum DetailRule {
    /// `http_answer.json_error_detail(body, key)`: the key's value in an error JSON object, else
    /// the body's first `chars` bytes; its first line, at most `chars` characters
    Key { key: String, chars: usize },
    /// `kserve_http.error_detail`: the first truthy of the keys in a JSON object, else (a body
    /// that is no JSON object) the body's first `chars` bytes; stripped, its first line
    FirstTruthy { keys: Vec<String>, chars: usize },
}

/// A target's answer check.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub answer: AnswerRule,
    /// output name -> dims (-1: any), in the order given; None: no shape check (the target's
    /// `response_check` is not `shape`), Some(empty): checked against no shapes (what `shape`
    /// does when the model's metadata could not be read)
    pub shapes: Option<Vec<(String, Vec<i64>)>>,
    /// HTTP: any 2xx is accepted (`response_check: none`), else only 200
    pub accept_2xx: bool,
    pub detail: DetailRule,
    /// a generation's per-request goodput thresholds (`AnswerRule::Generation` only)
    pub goodput: Option<Goodput>,
    /// what counts a generation's output tokens (`AnswerRule::Generation` only)
    pub tokenizer: Option<TokenizerFile>,
}

impl Default for Check {
    fn default() -> Check {
        Check {
            answer: AnswerRule::None,
            shapes: None,
            accept_2xx: false,
            detail: DetailRule::Key {
                key: "error".into(),
                chars: 120,
            },
            goodput: None,
            tokenizer: None,
        }
    }
}

/// gRPC status code names as grpcio's `StatusCode` prints them.
pub fn grpc_code_name(code: i32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "UNKNOWN", // 2, and codes grpcio does not know
    }
}

/// The hints of a refused connection in an UNAVAILABLE status's message (`failures._GRPC_REFUSED_HINTS`).
const GRPC_REFUSED_HINTS: [&str; 4] = [
    "failed to connect",
    "connection refused",
    "connect failed",
    "socket closed",
];

/// A gRPC status the server (or the channel) ended a call with, as `_classify_triton` makes it.
pub fn grpc_status_failure(code: i32, message: &str, address: &str) -> Failure {
    let name = grpc_code_name(code);
    if name == "DEADLINE_EXCEEDED" {
        return Failure::timeout(address);
    }
    let lowered = message.to_lowercase();
    if name == "UNAVAILABLE" && GRPC_REFUSED_HINTS.iter().any(|hint| lowered.contains(hint)) {
        return Failure::refused(address);
    }
    let detail = first_line_of(message, 160);
    let text = if detail.is_empty() {
        format!("gRPC {name}")
    } else {
        format!("gRPC {name}: {detail}")
    };
    Failure::new(GRPC_STATUS_ERROR, text)
}

/// `check_output_shape`: the message of an output whose shape is not the expected one.
fn shape_mismatch(name: &str, expected: &[i64], got_repr: &str) -> Failure {
    let expected: Vec<String> = expected.iter().map(i64::to_string).collect();
    Failure::new(
        BAD_OUTPUT_SHAPE,
        format!(
            "bad output shape: '{name}' expected [{}]; got {got_repr}",
            expected.join(", ")
        ),
    )
}

fn shape_matches_ints(got: &[i64], expected: &[i64]) -> bool {
    got.len() == expected.len() && got.iter().zip(expected).all(|(g, e)| *e == -1 || e == g)
}

fn expected_shape<'a>(shapes: &'a [(String, Vec<i64>)], name: &str) -> Option<&'a [i64]> {
    shapes
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, dims)| dims.as_slice())
}

// -- gRPC ---------------------------------------------------------------------------------------

/// The message of an answer that does not decode (grpcio: `StatusCode.INTERNAL`).
const GRPC_UNDECODABLE: &str = "Exception deserializing response!";

/// A gRPC OK answer (a serialized `ModelInferResponse`): its response length (the bytes of its
/// raw output contents), or its failure (the shapes, or an answer that does not decode).
pub fn judge_grpc(check: &Check, answer: &[u8]) -> Result<u64, Failure> {
    let undecodable = || {
        Failure::new(
            GRPC_STATUS_ERROR,
            format!("gRPC INTERNAL: {GRPC_UNDECODABLE}"),
        )
    };
    let mut length = 0u64;
    let mut outputs: Vec<&[u8]> = Vec::new();
    for field in ProtoFields::new(answer) {
        let (number, content) = field.map_err(|_| undecodable())?;
        match (number, content) {
            (5, FieldContent::Bytes(bytes)) => outputs.push(bytes),
            (6, FieldContent::Bytes(bytes)) => length += bytes.len() as u64,
            _ => {}
        }
    }
    if length == 0 {
        // no raw contents (KServe answers in typed contents): the typed contents' encoded size,
        // as the Python path's `response_size`
        length = typed_contents_length(&outputs).ok_or_else(undecodable)?;
    }
    let Some(shapes) = check.shapes.as_ref() else {
        // no shapes to read: each output's own fields must still parse, as grpcio's decode wants
        for output in &outputs {
            for field in ProtoFields::new(output) {
                field.map_err(|_| undecodable())?;
            }
        }
        return Ok(length);
    };
    for output in outputs {
        let tensor = <crate::proto::InferOutputTensor as prost::Message>::decode(output)
            .map_err(|_| undecodable())?;
        if let Some(failure) = output_shape_failure(shapes, &tensor.name, &tensor.shape) {
            return Err(failure);
        }
    }
    Ok(length)
}

/// The encoded size of the outputs' typed `contents` (field 5 of `InferOutputTensor`); None when
/// an output does not decode.
fn typed_contents_length(outputs: &[&[u8]]) -> Option<u64> {
    let mut length = 0u64;
    for output in outputs {
        for field in ProtoFields::new(output) {
            if let (5, FieldContent::Bytes(contents)) = field.ok()? {
                length += contents.len() as u64;
            }
        }
    }
    Some(length)
}

/// `check_output_shape` on one decoded output: its failure when it has an expected shape it does not fit.
pub fn output_shape_failure(
    shapes: &[(String, Vec<i64>)],
    name: &str,
    shape: &[i64],
) -> Option<Failure> {
    let expected = expected_shape(shapes, name)?;
    if shape_matches_ints(shape, expected) {
        return None;
    }
    let got: Vec<String> = shape.iter().map(i64::to_string).collect();
    Some(shape_mismatch(
        name,
        expected,
        &format!("[{}]", got.join(", ")),
    ))
}

/// A protobuf field's content, as far as its wire type tells.
pub enum FieldContent<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The top-level fields of a serialized protobuf message, without decoding it.
pub struct ProtoFields<'a> {
    rest: &'a [u8],
}

impl<'a> ProtoFields<'a> {
    pub fn new(message: &'a [u8]) -> ProtoFields<'a> {
        ProtoFields { rest: message }
    }

    fn varint(&mut self) -> Result<u64, ()> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.rest.split_first().ok_or(())?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ()> {
        if self.rest.len() < n {
            return Err(());
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
}

impl<'a> Iterator for ProtoFields<'a> {
    type Item = Result<(u32, FieldContent<'a>), ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = (|| {
            let key = self.varint()?;
            let number = u32::try_from(key >> 3).map_err(|_| ())?;
            let content = match key & 7 {
                0 => FieldContent::Varint(self.varint()?),
                1 => {
                    self.take(8)?;
                    FieldContent::Fixed
                }
                2 => {
                    let n = usize::try_from(self.varint()?).map_err(|_| ())?;
                    FieldContent::Bytes(self.take(n)?)
                }
                5 => {
                    self.take(4)?;
                    FieldContent::Fixed
                }
                _ => return Err(()),
            };
            if number == 0 {
                return Err(());
            }
            Ok((number, content))
        })();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

// -- HTTP ---------------------------------------------------------------------------------------

/// An HTTP answer: its response length as the Python user reports it, or its failure.
/// `header` looks a response header up by its lower-case name.
pub fn judge_http(
    check: &Check,
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<u64, Failure> {
    if check.answer == AnswerRule::TritonHttp {
        return judge_triton_http(check, status, header, body);
    }
    let accepted = if check.accept_2xx {
        (200..300).contains(&status)
    } else {
        status == 200
    };
    if !accepted {
        return Err(http_status_error(
            status,
            &error_detail(&check.detail, body),
        ));
    }
    match &check.answer {
        AnswerRule::None
        | AnswerRule::GrpcShapes
        | AnswerRule::TritonHttp
        | AnswerRule::Generation(_) => {}
        AnswerRule::V2Shapes => check_v2_answer(check, body)?,
        AnswerRule::JsonList { length } => check_json_list(body, *length)?,
        AnswerRule::V1Predictions { length } => check_v1_predictions(body, *length)?,
    }
    Ok(body.len() as u64)
}

/// An error answer's reason, by the target's rule.
pub fn error_detail(rule: &DetailRule, body: &[u8]) -> String {
    match rule {
        DetailRule::Key { key, chars } => {
            let message = match pyjson::parse_stdlib(body) {
                Some(answer @ Value::Object(_)) => answer
                    .get(key)
                    .cloned()
                    .unwrap_or(Value::Str(String::new())),
                _ => Value::Str(pyjson::decode_replace(&body[..body.len().min(*chars)])),
            };
            if !message.truthy() {
                return String::new();
            }
            pyjson::cut_chars(pyjson::first_line(&message.py_str()), *chars).to_owned()
        }
        DetailRule::FirstTruthy { keys, chars } => {
            let message = match pyjson::parse_stdlib(body) {
                Some(answer @ Value::Object(_)) => keys
                    .iter()
                    .filter_map(|key| answer.get(key))
                    .find(|value| value.truthy())
                    .map(Value::py_str)
                    .unwrap_or_default(),
                _ if !body.is_empty() => pyjson::decode_replace(&body[..body.len().min(*chars)]),
                _ => String::new(),
            };
            first_line_of(&message, *chars)
        }
    }
}

/// `failures.describe_answer`: a value-free description of a decoded answer (None: not JSON).
pub fn describe_answer(answer: Option<&Value>) -> String {
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match answer {
        None => "a body that is not JSON".into(),
        Some(Value::List(items)) => {
            format!("a list of {} item{}", items.len(), plural(items.len()))
        }
        Some(Value::Object(members)) => {
            if members.is_empty() {
                return "an empty object".into();
            }
            let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
            keys.sort_unstable();
            let shown = keys.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            let more = if keys.len() > 5 { ", ..." } else { "" };
            format!("an object with keys [{shown}{more}]")
        }
        Some(Value::Null) => "null".into(),
        Some(other) => other.type_name().into(),
    }
}

fn items(n: usize) -> String {
    format!("{n} item{}", if n == 1 { "" } else { "s" })
}

/// `failures.check_json_list`.
pub fn check_json_list(body: &[u8], length: usize) -> Result<(), Failure> {
    let answer = pyjson::parse_stdlib(body);
    if let Some(Value::List(list)) = &answer {
        if list.len() == length {
            return Ok(());
        }
    }
    Err(Failure::new(
        BAD_OUTPUT_SHAPE,
        format!(
            "bad output: expected a JSON list of {}; got {}",
            items(length),
            describe_answer(answer.as_ref())
        ),
    ))
}

/// `v1_predictions(body, length)`.
pub fn check_v1_predictions(body: &[u8], length: usize) -> Result<(), Failure> {
    let answer = pyjson::parse_stdlib(body);
    let predictions = match &answer {
        Some(object @ Value::Object(_)) => object.get("predictions"),
        _ => None,
    };
    if let Some(Value::List(list)) = predictions {
        if list.len() == length {
            return Ok(());
        }
    }
    let got = match predictions {
        Some(list @ Value::List(_)) => format!("predictions is {}", describe_answer(Some(list))),
        _ => {
            let is_none = matches!(answer, None | Some(Value::Null));
            if is_none && !body.is_empty() {
                "a body that is not JSON".into()
            } else {
                describe_answer(Some(answer.as_ref().unwrap_or(&Value::Null)))
            }
        }
    };
    Err(Failure::new(
        BAD_OUTPUT_SHAPE,
        format!(
            "bad output: expected {{\"predictions\": a list of {}}}; got {got}",
            items(length)
        ),
    ))
}

/// `v2_answer`, then (with shapes) `v2_output_shapes` and the user's shape loop.
fn check_v2_answer(check: &Check, body: &[u8]) -> Result<(), Failure> {
    let answer = pyjson::parse_stdlib(body);
    let outputs = match &answer {
        Some(object @ Value::Object(_)) => match object.get("outputs") {
            Some(Value::List(outputs)) => Some(outputs),
            _ => None,
        },
        _ => None,
    };
    let Some(outputs) = outputs else {
        let shown = match &answer {
            None | Some(Value::Null) => "a body that is not JSON".to_owned(),
            Some(other) => describe_answer(Some(other)),
        };
        return Err(Failure::new(
            BAD_OUTPUT_SHAPE,
            format!("bad output: expected a v2 answer (an object with outputs); got {shown}"),
        ));
    };
    let Some(shapes) = check.shapes.as_ref() else {
        return Ok(());
    };
    // {str(o.get("name")): tuple(int(d) for d in o.get("shape", ())) for o in outputs if isinstance(o, dict)}
    let mut stated: Vec<(String, Vec<i128>)> = Vec::new();
    for output in outputs {
        if !matches!(output, Value::Object(_)) {
            continue;
        }
        let name = output
            .get("name")
            .map(Value::py_str)
            .unwrap_or_else(|| "None".into());
        let dims = match output.get("shape") {
            None => Vec::new(),
            Some(shape) => iterate(shape)?
                .iter()
                .map(py_int)
                .collect::<Result<Vec<_>, _>>()?,
        };
        match stated.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = dims,
            None => stated.push((name, dims)),
        }
    }
    for (name, expected) in shapes {
        if let Some((_, got)) = stated.iter().find(|(n, _)| n == name) {
            let matches = got.len() == expected.len()
                && got
                    .iter()
                    .zip(expected)
                    .all(|(g, e)| *e == -1 || i128::from(*e) == *g);
            if !matches {
                let got: Vec<String> = got.iter().map(i128::to_string).collect();
                return Err(shape_mismatch(
                    name,
                    expected,
                    &format!("[{}]", got.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

// -- Triton over HTTP: tritonclient's own handling ---------------------------------------------

/// A Python exception raised while an answer is read (its class name and `str()`).
struct PyException {
    kind: &'static str,
    message: String,
}

type PyResult<T> = Result<T, PyException>;

fn type_error(message: String) -> PyException {
    PyException {
        kind: "TypeError",
        message,
    }
}

impl From<PyException> for Failure {
    /// What `classify_exception` makes of an exception that is no OSError nor a RequestError.
    fn from(exc: PyException) -> Failure {
        Failure::client_error(exc.kind, &exc.message)
    }
}

/// `value[key]` with a string key.
fn subscript<'a>(value: &'a Value, key: &str) -> PyResult<&'a Value> {
    match value {
        Value::Object(_) => value.get(key).ok_or_else(|| PyException {
            kind: "KeyError",
            message: pyjson::str_repr(key),
        }),
        Value::List(_) => Err(type_error(
            "list indices must be integers or slices, not str".into(),
        )),
        Value::Str(_) => Err(type_error(
            "string indices must be integers, not 'str'".into(),
        )),
        other => Err(type_error(format!(
            "'{}' object is not subscriptable",
            other.type_name()
        ))),
    }
}

/// `value.get(key)` (an AttributeError on anything but a dict).
fn attr_get<'a>(value: &'a Value, key: &str) -> PyResult<Option<&'a Value>> {
    match value {
        Value::Object(_) => Ok(value.get(key)),
        other => Err(PyException {
            kind: "AttributeError",
            message: format!("'{}' object has no attribute 'get'", other.type_name()),
        }),
    }
}

/// `list(value)`: a list's items, a dict's keys, a string's characters.
fn iterate(value: &Value) -> PyResult<Vec<Value>> {
    match value {
        Value::List(items) => Ok(items.clone()),
        Value::Object(members) => Ok(members.iter().map(|(k, _)| Value::Str(k.clone())).collect()),
        Value::Str(text) => Ok(text.chars().map(|c| Value::Str(c.to_string())).collect()),
        other => Err(type_error(format!(
            "'{}' object is not iterable",
            other.type_name()
        ))),
    }
}

/// `int(value)` (integers beyond i128 saturate: no answer holds them).
fn py_int(value: &Value) -> PyResult<i128> {
    match value {
        Value::Int(digits) => Ok(digits
            .parse::<i128>()
            .unwrap_or(if digits.starts_with('-') {
                i128::MIN
            } else {
                i128::MAX
            })),
        Value::Bool(b) => Ok(i128::from(*b)),
        Value::Float(x) if x.is_nan() => Err(PyException {
            kind: "ValueError",
            message: "cannot convert float NaN to integer".into(),
        }),
        Value::Float(x) if x.is_infinite() => Err(PyException {
            kind: "OverflowError",
            message: "cannot convert float infinity to integer".into(),
        }),
        Value::Float(x) => Ok(x.trunc() as i128),
        Value::Str(text) => parse_py_int(text).ok_or_else(|| PyException {
            kind: "ValueError",
            message: format!(
                "invalid literal for int() with base 10: {}",
                pyjson::str_repr(text)
            ),
        }),
        other => Err(type_error(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            other.type_name()
        ))),
    }
}

/// Python's `int(text)` in base 10: surrounding whitespace, a sign, digits with single underscores.
fn parse_py_int(text: &str) -> Option<i128> {
    let body = pyjson::py_strip(text);
    let (negative, digits) = match body.as_bytes().first() {
        Some(b'-') => (true, &body[1..]),
        Some(b'+') => (false, &body[1..]),
        _ => (false, body),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let plain: String = digits.chars().filter(|c| *c != '_').collect();
    if !plain.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let magnitude = plain.parse::<i128>().unwrap_or(i128::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

/// Python's `e != g` is false for an int `e` and a decoded value `g`.
fn py_equal_int(expected: i64, got: &Value) -> bool {
    match got {
        Value::Int(digits) => digits
            .parse::<i128>()
            .is_ok_and(|g| g == i128::from(expected)),
        Value::Float(x) => *x == expected as f64,
        Value::Bool(b) => i64::from(*b) == expected,
        _ => false,
    }
}

/// `tritonclient.http._get_error`'s message for a status other than 200.
fn triton_error_message(body: &[u8]) -> String {
    const PREFIX: &str = "an exception occurred in the client while decoding the response: ";
    let Ok(text) = std::str::from_utf8(body) else {
        return format!(
            "{PREFIX}{}\nresponse: None",
            pyjson::utf8_error_message(body).unwrap_or_default()
        );
    };
    if text.is_empty() {
        return "client received an empty response from the server.".into();
    }
    match pyjson::parse_rapidjson(body) {
        Err(RapidjsonError::Parse(message) | RapidjsonError::Unicode(message)) => {
            format!("{PREFIX}{message}\nresponse: {text}")
        }
        Ok(answer) => match subscript(&answer, "error") {
            Ok(value) if value.truthy() => value.py_str(),
            Ok(_) => String::new(),
            Err(exc) => format!("{PREFIX}{}\nresponse: {text}", exc.message),
        },
    }
}

/// `_classify_triton` for an `InferenceServerException` without a status (raised by tritonclient
/// itself; the only one raised here names a UTF-8 error, never a timeout or a refusal).
fn triton_client_failure(message: &str) -> Failure {
    Failure::new(
        REQUEST_ERROR,
        format!("triton error: {}", first_line_of(message, 160)),
    )
}

/// A Triton HTTP answer as `TritonHttpUser.send` (tritonclient's `_raise_if_error`, `InferResult`,
/// then its own loop over the outputs) reads it.
fn judge_triton_http(
    check: &Check,
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<u64, Failure> {
    if status != 200 {
        return Err(http_status_error(
            status,
            &first_line_of(&triton_error_message(body), 160),
        ));
    }
    let result = match header("inference-header-content-length") {
        None => match pyjson::parse_rapidjson(body) {
            Ok(result) => result,
            Err(RapidjsonError::Unicode(message)) => {
                return Err(triton_client_failure(&format!(
                    "Failed to encode using UTF-8. Please use binary_data=True, if you want to pass a byte array. UnicodeError: {message}"
                )))
            }
            Err(RapidjsonError::Parse(message)) => return Err(Failure::client_error("JSONDecodeError", &message)),
        },
        Some(length) => {
            let Some(length) = parse_py_int(&length) else {
                return Err(Failure::client_error(
                    "ValueError",
                    &format!("invalid literal for int() with base 10: {}", pyjson::str_repr(&length)),
                ));
            };
            let header_bytes = &body[..usize::try_from(length).unwrap_or(0).min(body.len())];
            let result = match pyjson::parse_rapidjson(header_bytes) {
                Ok(result) => result,
                Err(RapidjsonError::Unicode(message)) => return Err(Failure::client_error("UnicodeDecodeError", &message)),
                Err(RapidjsonError::Parse(message)) => return Err(Failure::client_error("JSONDecodeError", &message)),
            };
            infer_result_buffers(&result)?;
            result
        }
    };
    triton_outputs(check, &result)
}

/// `InferResult.__init__`'s loop over the outputs of a binary answer (the buffer map).
fn infer_result_buffers(result: &Value) -> PyResult<()> {
    let mut index_is_float = false;
    for output in iterate(subscript(result, "outputs")?)? {
        let Some(parameters) = attr_get(&output, "parameters")? else {
            continue;
        };
        if matches!(parameters, Value::Null) {
            continue;
        }
        let Some(size) = attr_get(parameters, "binary_data_size")? else {
            continue;
        };
        if matches!(size, Value::Null) {
            continue;
        }
        let name = subscript(&output, "name")?;
        if let Value::List(_) | Value::Object(_) = name {
            return Err(type_error(format!(
                "unhashable type: '{}'",
                name.type_name()
            )));
        }
        let index_type = if index_is_float { "float" } else { "int" };
        match size {
            Value::Int(_) | Value::Bool(_) => {}
            Value::Float(_) => index_is_float = true,
            other => {
                return Err(type_error(format!(
                    "unsupported operand type(s) for +: '{index_type}' and '{}'",
                    other.type_name()
                )));
            }
        }
    }
    Ok(())
}

/// `TritonHttpUser.send`'s loop: the shapes (when checked) and the outputs' binary sizes.
fn triton_outputs(check: &Check, result: &Value) -> Result<u64, Failure> {
    let outputs = match attr_get(result, "outputs")? {
        Some(outputs) => iterate(outputs)?,
        None => Vec::new(),
    };
    let mut size: i128 = 0;
    for output in &outputs {
        if let Some(shapes) = check.shapes.as_ref() {
            let name = subscript(output, "name")?;
            if let Value::List(_) | Value::Object(_) = name {
                return Err(type_error(format!("unhashable type: '{}'", name.type_name())).into());
            }
            let expected = match name {
                Value::Str(name) => expected_shape(shapes, name),
                _ => None,
            };
            if let (Some(expected), Value::Str(name)) = (expected, name) {
                let got = iterate(subscript(output, "shape")?)?;
                let matches = got.len() == expected.len()
                    && got
                        .iter()
                        .zip(expected)
                        .all(|(g, e)| *e == -1 || py_equal_int(*e, g));
                if !matches {
                    return Err(shape_mismatch(name, expected, &Value::List(got).py_repr()));
                }
            }
        }
        let parameters = attr_get(output, "parameters")?
            .cloned()
            .unwrap_or(Value::Object(Vec::new()));
        let stated = attr_get(&parameters, "binary_data_size")?
            .cloned()
            .unwrap_or(Value::Int("0".into()));
        size += py_int(&stated)?;
    }
    Ok(size.clamp(0, i128::from(u64::MAX)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_headers(_: &str) -> Option<String> {
        None
    }

    fn http(check: &Check, status: u16, body: &str) -> Result<u64, Failure> {
        judge_http(check, status, &no_headers, body.as_bytes())
    }

    fn message(result: Result<u64, Failure>) -> String {
        let failure = result.expect_err("a failure");
        format!("{}: {}", failure.class, failure.message)
    }

    #[test]
    fn grpc_statuses_are_classified_as_the_python_path_does() {
        let address = "127.0.0.1:8001";
        assert_eq!(
            grpc_status_failure(4, "Deadline Exceeded", address),
            Failure::timeout(address)
        );
        assert_eq!(
            grpc_status_failure(
                14,
                "failed to connect to all addresses; last error",
                address
            ),
            Failure::refused(address)
        );
        assert_eq!(
            grpc_status_failure(14, "Server is shutting down", address).message,
            "gRPC UNAVAILABLE: Server is shutting down"
        );
        assert_eq!(
            grpc_status_failure(3, "  \n", address).message,
            "gRPC INVALID_ARGUMENT"
        );
        let long = format!("{}\nsecond line", "x".repeat(200));
        assert_eq!(
            grpc_status_failure(13, &long, address).message,
            format!("gRPC INTERNAL: {}", "x".repeat(160))
        );
        assert_eq!(
            grpc_status_failure(99, "odd", address).message,
            "gRPC UNKNOWN: odd"
        );
    }

    #[test]
    fn http_statuses_take_the_reason_by_the_targets_rule() {
        let torchserve = Check {
            detail: DetailRule::Key {
                key: "message".into(),
                chars: 120,
            },
            ..Check::default()
        };
        assert_eq!(
            message(http(
                &torchserve,
                503,
                r#"{"code": 503, "message": "Model busy\nid 7"}"#
            )),
            "HttpStatusError: HTTP 503: Model busy"
        );
        assert_eq!(
            message(http(&torchserve, 500, "<html>oops</html>")),
            "HttpStatusError: HTTP 500: <html>oops</html>"
        );
        assert_eq!(
            message(http(&torchserve, 500, "[1]")),
            "HttpStatusError: HTTP 500: [1]"
        );
        assert_eq!(
            message(http(&torchserve, 404, r#"{"message": 0}"#)),
            "HttpStatusError: HTTP 404"
        );
        assert_eq!(
            message(http(&torchserve, 404, r#"{"message": {"a": [1, null]}}"#)),
            "HttpStatusError: HTTP 404: {'a': [1, None]}"
        );
        assert_eq!(http(&torchserve, 200, "anything"), Ok(8));
        assert!(http(&torchserve, 204, "").is_err());
        let none = Check {
            accept_2xx: true,
            ..torchserve.clone()
        };
        assert_eq!(http(&none, 204, ""), Ok(0));
        let kserve = Check {
            detail: DetailRule::FirstTruthy {
                keys: vec!["error".into(), "detail".into(), "message".into()],
                chars: 120,
            },
            ..Check::default()
        };
        assert_eq!(
            message(http(
                &kserve,
                400,
                r#"{"error": "", "detail": " bad input \n more"}"#
            )),
            "HttpStatusError: HTTP 400: bad input "
        );
        assert_eq!(
            message(http(&kserve, 400, "null")),
            "HttpStatusError: HTTP 400: null"
        );
        assert_eq!(
            message(http(&kserve, 400, "{}")),
            "HttpStatusError: HTTP 400"
        );
    }

    #[test]
    fn json_list_and_v1_answers_say_what_came_instead() {
        let list = Check {
            answer: AnswerRule::JsonList { length: 2 },
            ..Check::default()
        };
        assert_eq!(http(&list, 200, "[1, 2]"), Ok(6));
        assert_eq!(
            message(http(&list, 200, "[1]")),
            "BadOutputShape: bad output: expected a JSON list of 2 items; got a list of 1 item"
        );
        assert_eq!(
            message(http(&list, 200, r#"{"f":1,"e":2,"d":3,"c":4,"b":5,"a":6}"#)),
            "BadOutputShape: bad output: expected a JSON list of 2 items; got an object with keys [a, b, c, d, e, ...]"
        );
        assert_eq!(
            message(http(&list, 200, "3.5")),
            "BadOutputShape: bad output: expected a JSON list of 2 items; got float"
        );
        assert_eq!(message(http(&list, 200, "nope")), "BadOutputShape: bad output: expected a JSON list of 2 items; got a body that is not JSON");
        let v1 = Check {
            answer: AnswerRule::V1Predictions { length: 1 },
            ..Check::default()
        };
        assert_eq!(http(&v1, 200, r#"{"predictions": [[0.5]]}"#), Ok(24));
        assert_eq!(
            message(http(&v1, 200, r#"{"predictions": []}"#)),
            r#"BadOutputShape: bad output: expected {"predictions": a list of 1 item}; got predictions is a list of 0 items"#
        );
        assert_eq!(
            message(http(&v1, 200, "null")),
            r#"BadOutputShape: bad output: expected {"predictions": a list of 1 item}; got a body that is not JSON"#
        );
        assert_eq!(
            message(http(&v1, 200, "")),
            r#"BadOutputShape: bad output: expected {"predictions": a list of 1 item}; got null"#
        );
        assert_eq!(
            message(http(&v1, 200, r#"{"outputs": 1}"#)),
            r#"BadOutputShape: bad output: expected {"predictions": a list of 1 item}; got an object with keys [outputs]"#
        );
    }

    #[test]
    fn v2_answers_are_checked_by_the_expected_shapes_in_their_order() {
        let v2 = Check {
            answer: AnswerRule::V2Shapes,
            shapes: Some(vec![("OUTPUT0".into(), vec![-1, 4])]),
            ..Check::default()
        };
        let good = r#"{"model_name":"m","outputs":[{"name":"OUTPUT0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;
        assert_eq!(http(&v2, 200, good), Ok(good.len() as u64));
        let bad = r#"{"outputs":[{"name":"OUTPUT0","shape":[1,3]}]}"#;
        assert_eq!(
            message(http(&v2, 200, bad)),
            "BadOutputShape: bad output shape: 'OUTPUT0' expected [-1, 4]; got [1, 3]"
        );
        assert_eq!(
            message(http(&v2, 200, r#"{"error": "x"}"#)),
            "BadOutputShape: bad output: expected a v2 answer (an object with outputs); got an object with keys [error]"
        );
        assert_eq!(
            message(http(
                &v2,
                200,
                r#"{"outputs":[{"name":"OUTPUT0","shape":["a"]}]}"#
            )),
            "RequestError: client error: ValueError: invalid literal for int() with base 10: 'a'"
        );
    }

    #[test]
    fn triton_http_answers_are_read_as_tritonclient_reads_them() {
        let triton = Check {
            answer: AnswerRule::TritonHttp,
            shapes: Some(vec![("OUTPUT0".into(), vec![1, 4])]),
            ..Check::default()
        };
        let header = r#"{"model_name":"identity","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}]}"#;
        let mut body = header.as_bytes().to_vec();
        body.extend_from_slice(&[0u8; 16]);
        let length = header.len().to_string();
        let with_length =
            move |name: &str| (name == "inference-header-content-length").then(|| length.clone());
        assert_eq!(judge_http(&triton, 200, &with_length, &body), Ok(16));
        assert_eq!(
            message(http(
                &triton,
                400,
                r#"{"error":"unexpected inference input 'X'"}"#
            )),
            "HttpStatusError: HTTP 400: unexpected inference input 'X'"
        );
        assert_eq!(
            message(http(&triton, 500, "")),
            "HttpStatusError: HTTP 500: client received an empty response from the server."
        );
        assert_eq!(
            message(http(&triton, 502, "<html>bad gateway</html>")),
            "HttpStatusError: HTTP 502: an exception occurred in the client while decoding the response: Parse error at offset 0: Invalid value."
        );
        assert_eq!(
            message(http(&triton, 500, r#"{"message": "x"}"#)),
            "HttpStatusError: HTTP 500: an exception occurred in the client while decoding the response: 'error'"
        );
        assert_eq!(
            message(http(&triton, 200, "<html>")),
            "RequestError: client error: JSONDecodeError: Parse error at offset 0: Invalid value."
        );
        assert_eq!(http(&triton, 200, "{}"), Ok(0));
        assert_eq!(
            message(http(
                &triton,
                200,
                r#"{"outputs":[{"name":"OUTPUT0","shape":[2,4]}]}"#
            )),
            "BadOutputShape: bad output shape: 'OUTPUT0' expected [1, 4]; got [2, 4]"
        );
        assert_eq!(
            message(http(&triton, 200, r#"{"outputs":[{"shape":[2,4]}]}"#)),
            "RequestError: client error: KeyError: 'name'"
        );
        assert_eq!(
            message(http(&triton, 200, "[]")),
            "RequestError: client error: AttributeError: 'list' object has no attribute 'get'"
        );
    }

    #[test]
    fn grpc_answers_give_their_raw_length_and_their_shapes() {
        use prost::Message;
        let response = crate::proto::ModelInferResponse {
            outputs: vec![crate::proto::InferOutputTensor {
                name: "OUTPUT0".into(),
                shape: vec![1, 4],
                ..Default::default()
            }],
            raw_output_contents: vec![bytes::Bytes::from_static(&[0u8; 16])],
            ..Default::default()
        }
        .encode_to_vec();
        let unchecked = Check::default();
        assert_eq!(judge_grpc(&unchecked, &response), Ok(16));
        let checked = Check {
            shapes: Some(vec![("OUTPUT0".into(), vec![-1, 3])]),
            ..Check::default()
        };
        assert_eq!(
            judge_grpc(&checked, &response).unwrap_err().message,
            "bad output shape: 'OUTPUT0' expected [-1, 3]; got [1, 4]"
        );
        assert_eq!(
            judge_grpc(&unchecked, &[0x0a, 0x05, 0x61])
                .unwrap_err()
                .message,
            "gRPC INTERNAL: Exception deserializing response!"
        );
        // an output (field 5) whose own bytes do not parse, with raw contents beside it: undecodable
        // without a shape check too
        let broken_output = [0x2a, 0x02, 0x0a, 0x09, 0x32, 0x02, 0x00, 0x00];
        assert_eq!(
            judge_grpc(&unchecked, &broken_output).unwrap_err().message,
            "gRPC INTERNAL: Exception deserializing response!"
        );
    }
}
