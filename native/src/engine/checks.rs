//! How an answer is judged, in inferload's own words (docs/engine.md, "Failures"): the failure
//! classes of `inferload/errors.py` and the texts the Python transport gives too (`users/failures.py`,
//! the same rules in Python), so that a run reads the same whichever transport sent it.
//!
//! - a refused status: `HTTP {status}: {reason}` / `gRPC {CODE}: {reason}`, the reason by
//!   [`Reason`] (the first of some keys of an error JSON that holds a non-empty string, else the
//!   body's own text), cut to its first line ([`first_line`]);
//! - an answer of the wrong form: `bad output: expected ...; got ...` ([`describe_answer`] names what came,
//!   never its values) and `bad output shape: 'NAME' expected [..]; got [..]`;
//! - an answer its protocol cannot read: `bad answer: ...`.
//!
//! JSON is read by serde_json (RFC 8259: UTF-8, no NaN, finite numbers, at most 127 levels deep),
//! as an outline of what the check reads (`outline.rs`), never built whole.
//! A check is built once per target ([`Check`]); [`judge_grpc`] and [`judge_http`] run it on one
//! answer and give the response length reported to Locust, or the failure.

use std::sync::LazyLock;

use super::generation::{Goodput, StreamFormat, TokenizerFile};
use super::outline::{read_outline, Keep, Outline};

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
/// a TorchServe sequence's opening refused (HTTP 503): the closed loop backs off, the place opens it again
pub const SEQUENCE_REFUSED: &str = "SequenceRefused";

/// The characters a reason is stripped of (ASCII whitespace, as Python's `str.strip(WHITESPACE)`
/// in `users/failures.py`).
const WHITESPACE: [char; 6] = [' ', '\t', '\n', '\r', '\x0b', '\x0c'];
/// At most this many characters of a gRPC status's message go in a failure.
pub const GRPC_REASON_CHARS: usize = 160;

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

    /// `RequestError("bad answer: {what}")`: an answer its protocol cannot read.
    pub fn bad_answer(what: &str) -> Failure {
        Failure::new(REQUEST_ERROR, format!("bad answer: {what}"))
    }

    /// `RequestError("answer larger than {limit} bytes ...")`: the answer was cut off at the
    /// target's `max_answer_bytes`, nothing more of it buffered.
    pub fn answer_too_large(limit: usize) -> Failure {
        Failure::new(
            REQUEST_ERROR,
            format!("answer larger than {limit} bytes (the target's max_answer_bytes)"),
        )
    }

    /// Whether the call counts as refused: every `ConnectionRefused` (the run's
    /// `refused_windows` and a closed loop's back-off).
    pub fn is_refused(&self) -> bool {
        self.class == CONNECTION_REFUSED
    }

    /// Whether a closed loop pauses after it: a refused connection, or a refused sequence.
    pub fn backs_off(&self) -> bool {
        self.is_refused() || self.class == SEQUENCE_REFUSED
    }
}

/// What an answer that stopped before its end is (`bad answer: ...`).
pub const CUT_SHORT: &str = "cut short: the connection closed before its end";
/// What an answer that is not HTTP/1.1, or whose framing (chunks, length) breaks, is.
pub const BROKEN_FRAMING: &str = "broken HTTP framing";
/// What a gRPC answer that is not HTTP/2 (an HTTP/1 server's, say) is.
pub const BROKEN_HTTP2_FRAMING: &str = "broken HTTP/2 framing";

/// `RequestError("closed: {address} closed the connection before answering")`.
pub fn closed_before_answering(address: &str) -> Failure {
    Failure::new(
        REQUEST_ERROR,
        format!("closed: {address} closed the connection before answering"),
    )
}

/// A text's first line: stripped of ASCII whitespace, up to its first `\r` or `\n`, at most
/// `limit` characters.
pub fn first_line(text: &str, limit: usize) -> String {
    let stripped = text.trim_matches(WHITESPACE);
    let line = stripped.split(['\r', '\n']).next().unwrap_or_default();
    line.chars().take(limit).collect()
}

fn http_status_error(status: u16, reason: &str) -> Failure {
    let message = if reason.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {reason}")
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
    /// Triton's HTTP answer (a JSON header, then the outputs' binary data): the shapes (when
    /// given); length = the outputs' `binary_data_size`
    TritonHttp,
    /// a KServe v2 JSON answer (an object with a list of `outputs`), the shapes when given; length = body
    V2Shapes,
    /// a JSON list of `length` items
    JsonList { length: usize },
    /// `{"predictions": [length items]}` (KServe v1)
    V1Predictions { length: usize },
    /// a generation streamed as server-sent events (`http1::read_generation`); a 200 answer is
    /// read event by event, anything else judged as an HTTP error
    Generation(StreamFormat),
}

/// How an HTTP error answer's reason is read (its text goes after `HTTP {status}: `): the value
/// of the first of `keys` that holds a non-blank string, when the body is a JSON object (a key
/// `a.b`: key `b` of the object at key `a`); else the
/// body's own text (its first `4 * chars` bytes, invalid UTF-8 replaced); its first line, at most
/// `chars` characters.
#[derive(Clone, Debug, PartialEq, pyo3::FromPyObject)]
#[pyo3(from_item_all)]
pub struct Reason {
    #[pyo3(item("json_keys"))]
    pub keys: Vec<String>,
    #[pyo3(default = 120)]
    pub chars: usize,
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
    pub reason: Reason,
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
            reason: Reason {
                keys: vec!["error".into()],
                chars: 120,
            },
            goodput: None,
            tokenizer: None,
        }
    }
}

/// gRPC status code names (the gRPC spec's, as `grpc.StatusCode` names them too).
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

/// The hints of a refused connection in an UNAVAILABLE status's message (`failures.GRPC_REFUSED_HINTS`).
const GRPC_REFUSED_HINTS: [&str; 4] = [
    "failed to connect",
    "connection refused",
    "connect failed",
    "socket closed",
];

/// A gRPC status the server (or the channel) ended a call with: a timeout, a refusal, or
/// `gRPC {CODE}: {the message's first line}`.
pub fn grpc_status_failure(code: i32, message: &str, address: &str) -> Failure {
    let name = grpc_code_name(code);
    if name == "DEADLINE_EXCEEDED" {
        return Failure::timeout(address);
    }
    let lowered = message.to_lowercase();
    if name == "UNAVAILABLE" && lowered.contains("failed parsing http/2") {
        return Failure::bad_answer(BROKEN_HTTP2_FRAMING); // grpc's words for a peer not HTTP/2
    }
    if name == "UNAVAILABLE" && GRPC_REFUSED_HINTS.iter().any(|hint| lowered.contains(hint)) {
        return Failure::refused(address);
    }
    let detail = first_line(message, GRPC_REASON_CHARS);
    let text = if detail.is_empty() {
        format!("gRPC {name}")
    } else {
        format!("gRPC {name}: {detail}")
    };
    Failure::new(GRPC_STATUS_ERROR, text)
}

/// The failure of an output whose shape is not the expected one.
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

/// What an answer that does not decode as the protobuf message it should be is.
pub const NOT_A_RESPONSE: &str = "not a ModelInferResponse";

/// A gRPC OK answer (a serialized `ModelInferResponse`): its response length (the bytes of its
/// raw output contents), or its failure (the shapes, or an answer that does not decode).
pub fn judge_grpc(check: &Check, answer: &[u8]) -> Result<u64, Failure> {
    let undecodable = || Failure::bad_answer(NOT_A_RESPONSE);
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
        // no raw contents (KServe answers in typed contents): the typed contents' encoded size
        // (`kserve.response_size` in Python)
        length = typed_contents_length(&outputs).ok_or_else(undecodable)?;
    }
    let Some(shapes) = check.shapes.as_ref() else {
        // no shapes to read: each output's own fields must still parse
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

/// One decoded output's failure when it has an expected shape it does not fit.
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

/// An HTTP answer: its response length, or its failure. `header` looks a response header up by
/// its lower-case name.
pub fn judge_http(
    check: &Check,
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<u64, Failure> {
    let accepted = if check.accept_2xx {
        (200..300).contains(&status)
    } else {
        status == 200
    };
    if !accepted {
        return Err(http_status_error(
            status,
            &error_reason(&check.reason, body),
        ));
    }
    match &check.answer {
        AnswerRule::None | AnswerRule::GrpcShapes | AnswerRule::Generation(_) => {}
        AnswerRule::TritonHttp => return judge_triton_http(check, header, body),
        AnswerRule::V2Shapes => check_v2_answer(check, body)?,
        AnswerRule::JsonList { length } => check_json_list(body, *length)?,
        AnswerRule::V1Predictions { length } => check_v1_predictions(body, *length)?,
    }
    Ok(body.len() as u64)
}

/// An error answer's reason, by the target's rule ([`Reason`]).
pub fn error_reason(rule: &Reason, body: &[u8]) -> String {
    let keep = Keep::paths(rule.keys.iter().map(String::as_str));
    if let Some(answer @ Outline::Object { .. }) = read_outline(body, &keep) {
        let stated = rule.keys.iter().find_map(|path| {
            let found = path.split('.').try_fold(&answer, |at, key| at.get(key))?;
            found
                .as_str()
                .filter(|text| !text.trim_matches(WHITESPACE).is_empty())
        });
        if let Some(text) = stated {
            return first_line(text, rule.chars);
        }
    }
    let head = &body[..body.len().min(rule.chars.saturating_mul(4))];
    first_line(&String::from_utf8_lossy(head), rule.chars)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// A short, value-free description of a decoded answer (None: not JSON), so that Locust groups
/// the failures: a list by its length, an object by its keys (sorted, at most five).
pub fn describe_answer(answer: Option<&Outline>) -> String {
    match answer {
        None => "a body that is not JSON".into(),
        Some(Outline::List { len, .. }) => format!("a list of {len} item{}", plural(*len)),
        Some(Outline::Object { keys, .. }) if keys.is_empty() => "an empty object".into(),
        Some(Outline::Object { keys, .. }) => {
            let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            keys.sort_unstable();
            keys.dedup();
            let shown = keys.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            let more = if keys.len() > 5 { ", ..." } else { "" };
            format!("an object with keys [{shown}{more}]")
        }
        Some(Outline::Null) => "null".into(),
        Some(Outline::Bool) => "a boolean".into(),
        Some(Outline::Number(_)) => "a number".into(),
        Some(Outline::String(_)) => "a string".into(),
    }
}

fn items(n: usize) -> String {
    format!("{n} item{}", plural(n))
}

/// A JSON list of `length` items (TorchServe's and BentoML's `shape` check).
pub fn check_json_list(body: &[u8], length: usize) -> Result<(), Failure> {
    let answer = read_outline(body, &Keep::Nothing);
    if matches!(&answer, Some(Outline::List { len, .. }) if *len == length) {
        return Ok(());
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

/// `{"predictions": [length items]}` (KServe v1's `shape` check).
pub fn check_v1_predictions(body: &[u8], length: usize) -> Result<(), Failure> {
    static PREDICTIONS: LazyLock<Keep> = LazyLock::new(|| Keep::paths(["predictions"]));
    let answer = read_outline(body, &PREDICTIONS);
    let predictions = answer.as_ref().and_then(|a| a.get("predictions"));
    let got = match predictions {
        Some(Outline::List { len, .. }) if *len == length => return Ok(()),
        Some(list @ Outline::List { .. }) => {
            format!("predictions is {}", describe_answer(Some(list)))
        }
        _ => describe_answer(answer.as_ref()),
    };
    Err(Failure::new(
        BAD_OUTPUT_SHAPE,
        format!(
            "bad output: expected {{\"predictions\": a list of {}}}; got {got}",
            items(length)
        ),
    ))
}

/// The dims of a stated shape: a list of integers, or None.
fn integer_dims(shape: &Outline) -> Option<Vec<i64>> {
    shape.items()?.iter().map(Outline::as_i64).collect()
}

/// What the shape checks keep of an answer: each output's name and shape (with `more` of its members).
fn outputs_kept(more: Vec<(String, Keep)>) -> Keep {
    let mut output = vec![
        ("name".to_owned(), Keep::Nothing),
        ("shape".to_owned(), Keep::Items(Box::new(Keep::Nothing))),
    ];
    output.extend(more);
    Keep::Members(vec![(
        "outputs".to_owned(),
        Keep::Items(Box::new(Keep::Members(output))),
    )])
}

fn dims_text(dims: &[i64]) -> String {
    let shown: Vec<String> = dims.iter().map(i64::to_string).collect();
    format!("[{}]", shown.join(", "))
}

/// The outputs' stated shapes checked against the expected ones, in the expected order: an
/// output named twice is read by its last entry; an output that is no object with a string name
/// is not one of them.
fn check_stated_shapes(shapes: &[(String, Vec<i64>)], outputs: &[Outline]) -> Result<(), Failure> {
    for (name, expected) in shapes {
        let stated = outputs.iter().rev().find_map(|output| {
            matches!(output, Outline::Object { .. }).then_some(())?;
            (output.get("name")?.as_str()? == name).then(|| output.get("shape"))
        });
        let Some(stated) = stated else { continue };
        let got = match stated.map(integer_dims) {
            Some(Some(dims)) if shape_matches_ints(&dims, expected) => continue,
            Some(Some(dims)) => dims_text(&dims),
            _ => "a shape that is not a list of integers".into(),
        };
        return Err(shape_mismatch(name, expected, &got));
    }
    Ok(())
}

/// A KServe v2 answer: an object with a list of `outputs`, their shapes when checked.
fn check_v2_answer(check: &Check, body: &[u8]) -> Result<(), Failure> {
    static V2_OUTPUTS: LazyLock<Keep> = LazyLock::new(|| outputs_kept(Vec::new()));
    let answer = read_outline(body, &V2_OUTPUTS);
    let Some(Outline::List { items: outputs, .. }) = answer.as_ref().and_then(|a| a.get("outputs"))
    else {
        return Err(Failure::new(
            BAD_OUTPUT_SHAPE,
            format!(
                "bad output: expected a v2 answer (an object with outputs); got {}",
                describe_answer(answer.as_ref())
            ),
        ));
    };
    match check.shapes.as_ref() {
        Some(shapes) => check_stated_shapes(shapes, outputs),
        None => Ok(()),
    }
}

// -- Triton over HTTP ---------------------------------------------------------------------------

/// What an answer that is no Triton inference response is.
pub const NOT_A_TRITON_RESPONSE: &str = "not a Triton inference response";

fn not_triton(why: &str) -> Failure {
    Failure::bad_answer(&format!("{NOT_A_TRITON_RESPONSE} ({why})"))
}

/// A Triton HTTP answer with its status accepted: its JSON header (the first
/// `Inference-Header-Content-Length` bytes, or the whole body) is an object whose `outputs` (a
/// list, none when absent) are objects with a string `name` and a `shape` of integers; the
/// shapes are checked when asked; the response length is the outputs' `binary_data_size` in their
/// `parameters` (0 when absent: outputs in JSON).
fn judge_triton_http(
    check: &Check,
    header: &dyn Fn(&str) -> Option<String>,
    body: &[u8],
) -> Result<u64, Failure> {
    let json = match header("inference-header-content-length") {
        None => body,
        Some(length) => {
            let digits = length.trim_matches(WHITESPACE);
            let count = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse::<usize>().ok())
                .flatten();
            match count {
                Some(count) if count <= body.len() => &body[..count],
                _ => {
                    return Err(not_triton(
                        "Inference-Header-Content-Length is not a byte count within the answer",
                    ))
                }
            }
        }
    };
    static TRITON_OUTPUTS: LazyLock<Keep> = LazyLock::new(|| {
        outputs_kept(vec![(
            "parameters".to_owned(),
            Keep::paths(["binary_data_size"]),
        )])
    });
    let Some(answer @ Outline::Object { .. }) = read_outline(json, &TRITON_OUTPUTS) else {
        return Err(not_triton("its JSON header is not a JSON object"));
    };
    let outputs = match answer.get("outputs") {
        None => &[][..],
        Some(Outline::List { items, .. }) => items.as_slice(),
        Some(_) => return Err(not_triton("outputs is not a list")),
    };
    let mut size = 0u64;
    for (index, output) in outputs.iter().enumerate() {
        let named = matches!(output, Outline::Object { .. })
            .then(|| {
                Some((
                    output.get("name")?.as_str()?,
                    integer_dims(output.get("shape")?)?,
                    output.get("parameters"),
                ))
            })
            .flatten();
        let Some((name, shape, parameters)) = named else {
            return Err(not_triton(&format!(
                "outputs[{index}] is not an object with a name and a shape of integers"
            )));
        };
        if let Some(expected) = check
            .shapes
            .as_deref()
            .and_then(|s| expected_shape(s, name))
        {
            if !shape_matches_ints(&shape, expected) {
                return Err(shape_mismatch(name, expected, &dims_text(&shape)));
            }
        }
        let stated = match parameters {
            None | Some(Outline::Null) => None,
            Some(parameters @ Outline::Object { .. }) => parameters.get("binary_data_size"),
            Some(_) => {
                return Err(not_triton(&format!(
                    "outputs[{index}].parameters is not an object"
                )))
            }
        };
        size = size.saturating_add(match stated {
            None | Some(Outline::Null) => 0,
            Some(value) => value.as_u64().ok_or_else(|| {
                not_triton(&format!(
                    "outputs[{index}].parameters.binary_data_size is not a byte count"
                ))
            })?,
        });
    }
    Ok(size)
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
    fn grpc_statuses_are_a_timeout_a_refusal_or_the_code_and_its_first_line() {
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
    fn a_reason_is_a_key_of_an_error_json_that_holds_a_string_else_the_bodys_own_text() {
        let torchserve = Check {
            reason: Reason {
                keys: vec!["message".into()],
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
            message(http(&torchserve, 500, "  <html>oops</html>\r\n<body>")),
            "HttpStatusError: HTTP 500: <html>oops</html>"
        );
        assert_eq!(
            message(http(&torchserve, 404, r#"{"message": 0}"#)),
            r#"HttpStatusError: HTTP 404: {"message": 0}"#
        );
        assert_eq!(
            message(http(&torchserve, 404, "\u{feff}{\"message\": \"x\"}")),
            "HttpStatusError: HTTP 404: \u{feff}{\"message\": \"x\"}"
        );
        assert_eq!(
            message(http(&torchserve, 500, "")),
            "HttpStatusError: HTTP 500"
        );
        assert_eq!(http(&torchserve, 200, "anything"), Ok(8));
        assert!(http(&torchserve, 204, "").is_err());
        let none = Check {
            accept_2xx: true,
            ..torchserve.clone()
        };
        assert_eq!(http(&none, 204, ""), Ok(0));
        let kserve = Check {
            reason: Reason {
                keys: vec!["error".into(), "detail".into(), "message".into()],
                chars: 5,
            },
            ..Check::default()
        };
        assert_eq!(
            message(http(
                &kserve,
                400,
                r#"{"error": " ", "detail": " bad input \n more"}"#
            )),
            "HttpStatusError: HTTP 400: bad i"
        );
        assert_eq!(
            message(http(&kserve, 400, "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}")),
            "HttpStatusError: HTTP 400: \u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"
        );
        assert_eq!(
            judge_http(&kserve, 400, &no_headers, b"\xff\xfeab")
                .unwrap_err()
                .message,
            "HTTP 400: \u{fffd}\u{fffd}ab"
        );
    }

    #[test]
    fn json_list_and_v1_answers_say_what_came_instead() {
        let list = Check {
            answer: AnswerRule::JsonList { length: 2 },
            ..Check::default()
        };
        assert_eq!(http(&list, 200, "[1, 2]"), Ok(6));
        let expected = "BadOutputShape: bad output: expected a JSON list of 2 items; got";
        for (body, got) in [
            ("[1]", "a list of 1 item"),
            (
                r#"{"f":1,"e":2,"d":3,"c":4,"b":5,"a":6}"#,
                "an object with keys [a, b, c, d, e, ...]",
            ),
            ("3.5", "a number"),
            ("\"x\"", "a string"),
            ("true", "a boolean"),
            ("null", "null"),
            ("{}", "an empty object"),
            ("nope", "a body that is not JSON"),
            ("[NaN, 1]", "a body that is not JSON"),
            ("[1e400, 1]", "a body that is not JSON"),
            ("[1, 2] x", "a body that is not JSON"),
        ] {
            assert_eq!(
                message(http(&list, 200, body)),
                format!("{expected} {got}"),
                "{body}"
            );
        }
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(read_outline(nested(127).as_bytes(), &Keep::Nothing).is_some());
        assert!(read_outline(nested(128).as_bytes(), &Keep::Nothing).is_none());
        let deep = nested(200);
        assert_eq!(
            message(http(&list, 200, &deep)),
            format!("{expected} a body that is not JSON")
        );
        let v1 = Check {
            answer: AnswerRule::V1Predictions { length: 1 },
            ..Check::default()
        };
        assert_eq!(http(&v1, 200, r#"{"predictions": [[0.5]]}"#), Ok(24));
        let expected =
            r#"BadOutputShape: bad output: expected {"predictions": a list of 1 item}; got"#;
        for (body, got) in [
            (r#"{"predictions": []}"#, "predictions is a list of 0 items"),
            (
                r#"{"predictions": "x"}"#,
                "an object with keys [predictions]",
            ),
            ("null", "null"),
            ("", "a body that is not JSON"),
            (r#"{"outputs": 1}"#, "an object with keys [outputs]"),
        ] {
            assert_eq!(
                message(http(&v1, 200, body)),
                format!("{expected} {got}"),
                "{body}"
            );
        }
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
        for (outputs, got) in [
            (r#"[{"name":"OUTPUT0","shape":[1,3]}]"#, "[1, 3]"),
            (
                r#"[{"name":"OUTPUT0","shape":[1,4]},{"name":"OUTPUT0","shape":[2]}]"#,
                "[2]",
            ),
            (
                r#"[{"name":"OUTPUT0","shape":["1",4]}]"#,
                "a shape that is not a list of integers",
            ),
            (
                r#"[{"name":"OUTPUT0","shape":[1.0,4]}]"#,
                "a shape that is not a list of integers",
            ),
            (
                r#"[{"name":"OUTPUT0"}]"#,
                "a shape that is not a list of integers",
            ),
        ] {
            assert_eq!(
                message(http(&v2, 200, &format!(r#"{{"outputs":{outputs}}}"#))),
                format!("BadOutputShape: bad output shape: 'OUTPUT0' expected [-1, 4]; got {got}"),
                "{outputs}"
            );
        }
        let others = r#"{"outputs":[{"shape":[9]},"x",{"name":"OTHER","shape":[9]}]}"#;
        assert_eq!(http(&v2, 200, others), Ok(others.len() as u64));
        assert_eq!(
            message(http(&v2, 200, r#"{"error": "x"}"#)),
            "BadOutputShape: bad output: expected a v2 answer (an object with outputs); got an object with keys [error]"
        );
    }

    #[test]
    fn triton_http_answers_are_read_by_their_json_header() {
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
        let too_long =
            |name: &str| (name == "inference-header-content-length").then(|| "9999".to_owned());
        assert_eq!(
            judge_http(&triton, 200, &too_long, &body).unwrap_err().message,
            "bad answer: not a Triton inference response (Inference-Header-Content-Length is not a byte count within the answer)"
        );
        assert_eq!(
            message(http(
                &triton,
                400,
                r#"{"error":"unexpected inference input 'X'"}"#
            )),
            "HttpStatusError: HTTP 400: unexpected inference input 'X'"
        );
        assert_eq!(message(http(&triton, 500, "")), "HttpStatusError: HTTP 500");
        assert_eq!(
            message(http(&triton, 502, "<html>bad gateway</html>")),
            "HttpStatusError: HTTP 502: <html>bad gateway</html>"
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
        let not_triton = "RequestError: bad answer: not a Triton inference response";
        let each = "is not an object with a name and a shape of integers";
        for (answer, why) in [
            ("<html>", "its JSON header is not a JSON object".to_owned()),
            ("[]", "its JSON header is not a JSON object".to_owned()),
            ("{} x", "its JSON header is not a JSON object".to_owned()),
            (r#"{"outputs": null}"#, "outputs is not a list".to_owned()),
            (
                r#"{"outputs":[{"shape":[2,4]}]}"#,
                format!("outputs[0] {each}"),
            ),
            (
                r#"{"outputs":[{"name":"OUTPUT0","shape":[1,4]}, {"name":"OUTPUT0","shape":["2",4]}]}"#,
                format!("outputs[1] {each}"),
            ),
            (
                r#"{"outputs":[{"name":"OUTPUT0","shape":[1.0,4]}]}"#,
                format!("outputs[0] {each}"),
            ),
            (r#"{"outputs":["OUTPUT0"]}"#, format!("outputs[0] {each}")),
            (
                r#"{"outputs":[{"name":"O","shape":[1],"parameters":5}]}"#,
                "outputs[0].parameters is not an object".to_owned(),
            ),
            (
                r#"{"outputs":[{"name":"O","shape":[1],"parameters":{"binary_data_size":-1}}]}"#,
                "outputs[0].parameters.binary_data_size is not a byte count".to_owned(),
            ),
        ] {
            assert_eq!(
                message(http(&triton, 200, answer)),
                format!("{not_triton} ({why})"),
                "{answer}"
            );
        }
        for length in ["+5", "abc", "", " 2 x"] {
            let stated = length.to_owned();
            let header = move |name: &str| {
                (name == "inference-header-content-length").then(|| stated.clone())
            };
            assert_eq!(
                judge_http(&triton, 200, &header, b"{}{}{}").unwrap_err().message,
                "bad answer: not a Triton inference response (Inference-Header-Content-Length is not a byte count within the answer)",
                "{length}"
            );
        }
        let spaced =
            |name: &str| (name == "inference-header-content-length").then(|| " 2 ".to_owned());
        assert_eq!(judge_http(&triton, 200, &spaced, b"{}rest"), Ok(0));
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
            judge_grpc(&unchecked, &[0x0a, 0x05, 0x61]),
            Err(Failure::bad_answer(NOT_A_RESPONSE))
        );
        // an output (field 5) whose own bytes do not parse, with raw contents beside it: undecodable
        // without a shape check too
        let broken_output = [0x2a, 0x02, 0x0a, 0x09, 0x32, 0x02, 0x00, 0x00];
        assert_eq!(
            judge_grpc(&unchecked, &broken_output).unwrap_err().message,
            "bad answer: not a ModelInferResponse"
        );
    }
}
