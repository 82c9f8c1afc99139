//! The engine's Python face: `inferload._native.Engine` and `check_answer` (docs/engine.md).
//!
//! Every bad argument raises `ValueError` (or `TypeError` for a wrong type) naming the argument
//! and what was expected. Calls that can take a while (drain's encodings, close) let the GIL go.

use super::generation::{Goodput, StreamFormat, TokenizerFile};
use bytes::Bytes;
use http::HeaderMap;
use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use super::checks::{self, AnswerRule, Check, Failure, Reason};
use super::core::{Engine, RequestSpecs, TargetSpec};
use super::outcome::CallInput;
use super::record::{LatencyStats, LocustEntry, Recorder, WireStats};
use super::sequence::SequenceSpec;
use super::target::{header_pair, Protocol};
use super::tls::TlsOptions;

fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The native engine: targets, slots (one connection each) and what they record (docs/engine.md).
#[pyclass(name = "Engine", module = "inferload._native", frozen)]
pub struct PyEngine {
    inner: Engine,
}

const CHECK_KEYS: [&str; 7] = [
    "answer",
    "shapes",
    "length",
    "status",
    "detail",
    "goodput",
    "tokenizer",
];

/// A check dict (docs/engine.md "Judging answers"), each key but `answer` optional.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct CheckArg<'py> {
    answer: String,
    #[pyo3(default)]
    shapes: Option<Bound<'py, PyDict>>,
    #[pyo3(default)]
    length: Option<usize>,
    #[pyo3(default)]
    status: Option<String>,
    #[pyo3(default)]
    detail: Option<Bound<'py, PyAny>>,
    #[pyo3(default)]
    goodput: Option<Bound<'py, PyAny>>,
    #[pyo3(default)]
    tokenizer: Option<String>,
}

/// A check dict as a [`Check`].
fn parse_check(check: &Bound<'_, PyAny>) -> PyResult<Check> {
    let arg: CheckArg = record(check, &CHECK_KEYS, "check")?;
    let answer = arg.answer.as_str();
    let length = || {
        arg.length
            .ok_or_else(|| value_error(format!("check.length: required for answer {answer:?}")))
    };
    let rule = match answer {
        "none" => AnswerRule::None,
        "grpc_shapes" => AnswerRule::GrpcShapes,
        "triton_http" => AnswerRule::TritonHttp,
        "v2_shapes" | "v2_json" => AnswerRule::V2Shapes,
        "json_list" => AnswerRule::JsonList { length: length()? },
        "v1_predictions" => AnswerRule::V1Predictions { length: length()? },
        "openai_chat" => AnswerRule::Generation(StreamFormat::OpenAiChat),
        "openai_completions" => AnswerRule::Generation(StreamFormat::OpenAiCompletions),
        "triton_generate" => AnswerRule::Generation(StreamFormat::TritonGenerate),
        other => {
            return Err(value_error(format!(
                "check.answer: expected one of none, grpc_shapes, triton_http, v2_shapes, json_list, v1_predictions, openai_chat, openai_completions, triton_generate; got {other:?}"
            )))
        }
    };
    let mut shapes = Vec::new();
    for (name, dims) in arg.shapes.iter().flat_map(|shapes| shapes.iter()) {
        let dims: Vec<i64> = dims.extract().map_err(|_| {
            value_error(format!("check.shapes[{name}]: expected a list of integers"))
        })?;
        shapes.push((name.extract::<String>()?, dims));
    }
    let accept_2xx = match arg.status.as_deref() {
        None | Some("200") => false,
        Some("2xx") => true,
        Some(other) => {
            return Err(value_error(format!(
                "check.status: expected \"200\" or \"2xx\"; got {other:?}"
            )))
        }
    };
    let generation = matches!(rule, AnswerRule::Generation(_));
    if !generation && (arg.goodput.is_some() || arg.tokenizer.is_some()) {
        return Err(value_error(
            "check.goodput, check.tokenizer: only for a generation's stream (answer openai_chat, openai_completions or triton_generate)",
        ));
    }
    Ok(Check {
        answer: rule,
        // no shapes to check is no shape check (response_check is not `shape`, or the model's
        // metadata gave none)
        shapes: (!shapes.is_empty()).then_some(shapes),
        accept_2xx,
        reason: match &arg.detail {
            None => Check::default().reason,
            Some(detail) => parse_reason(detail)?,
        },
        goodput: arg.goodput.as_ref().map(parse_goodput).transpose()?,
        tokenizer: arg
            .tokenizer
            .as_deref()
            .map(|path| {
                TokenizerFile::load(path).map_err(|e| value_error(format!("check.tokenizer: {e}")))
            })
            .transpose()?,
    })
}

/// Refuses a key the engine does not read (a misspelled one would else be a default).
fn only_keys(dict: &Bound<'_, PyAny>, keys: &[&str], what: &str) -> PyResult<()> {
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| value_error(format!("{what}: expected a dict of {}", keys.join(", "))))?;
    for key in dict.keys() {
        let key: String = key
            .extract()
            .map_err(|_| value_error(format!("{what}: keys are strings")))?;
        if !keys.contains(&key.as_str()) {
            return Err(value_error(format!(
                "{what}: unknown key {key:?} (expected {})",
                keys.join(", ")
            )));
        }
    }
    Ok(())
}

/// A record of a dict's keys, its unknown keys refused first (`only_keys`).
fn record<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    dict: &Bound<'py, PyAny>,
    keys: &[&str],
    what: &str,
) -> PyResult<T> {
    only_keys(dict, keys, what)?;
    dict.extract::<T>().map_err(|e| {
        let (error, py): (PyErr, _) = (e.into(), dict.py());
        let text = match error.is_instance_of::<PyKeyError>(py) {
            true => format!("required key {} is missing", error.value(py)),
            false => error.value(py).to_string(),
        };
        let cause = error.cause(py).map(|c| format!(": {}", c.value(py)));
        value_error(format!("{what}: {text}{}", cause.unwrap_or_default()))
    })
}

/// A record whose every key is optional: the dict with each of `keys` it lacks as None.
fn all_optional<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
    dict: &Bound<'py, PyAny>,
    keys: &[&str],
    what: &str,
) -> PyResult<T> {
    let full = PyDict::new(dict.py());
    for key in keys {
        full.set_item(key, dict.py().None())?;
    }
    full.update(dict.cast::<PyDict>()?.as_mapping())?;
    record(full.as_any(), keys, what)
}

/// `check.goodput`: each threshold (None: not judged), each > 0.
fn parse_goodput(goodput: &Bound<'_, PyAny>) -> PyResult<Goodput> {
    let limits: Goodput =
        all_optional(goodput, &["ttft_ms", "tpot_ms", "e2e_ms"], "check.goodput")?;
    let given = [limits.ttft_ms, limits.tpot_ms, limits.e2e_ms];
    if given.iter().flatten().any(|v| !(v.is_finite() && *v > 0.0)) {
        return Err(value_error("check.goodput: expected numbers > 0"));
    }
    Ok(limits)
}

/// `check.detail`: how an error answer's reason is read (`checks::Reason`;
/// `users/failures.error_reason` in Python): the keys an error JSON may hold it in, and its length.
fn parse_reason(detail: &Bound<'_, PyAny>) -> PyResult<Reason> {
    let reason: Reason = record(detail, &["json_keys", "chars"], "check.detail")?;
    if reason.keys.is_empty() || reason.chars == 0 {
        return Err(value_error(
            "check.detail: expected json_keys and chars > 0",
        ));
    }
    Ok(reason)
}

/// `sequence`: a sequence model's length and concurrent sequences (each at least 1), string IDs,
/// and `headers` for TorchServe's (the ID in its headers).
fn parse_sequence(sequence: &Bound<'_, PyAny>) -> PyResult<SequenceSpec> {
    let spec: SequenceSpec = record(
        sequence,
        &["length", "concurrent", "string_ids", "headers"],
        "sequence",
    )?;
    if spec.length == 0 || spec.concurrent == 0 {
        return Err(value_error(
            "sequence: length and concurrent are at least 1",
        ));
    }
    Ok(spec)
}

/// `tls`: the PEM files' contents (bytes), the server name, and whether to skip verification.
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
struct TlsArg {
    ca_pem: Option<Vec<u8>>,
    cert_pem: Option<Vec<u8>>,
    key_pem: Option<Vec<u8>>,
    server_name: Option<String>,
    insecure_skip_verify: Option<bool>,
}

fn parse_tls(tls: &Bound<'_, PyAny>) -> PyResult<TlsOptions> {
    const KEYS: [&str; 5] = [
        "ca_pem",
        "cert_pem",
        "key_pem",
        "server_name",
        "insecure_skip_verify",
    ];
    let arg: TlsArg = all_optional(tls, &KEYS, "tls")?;
    Ok(TlsOptions {
        ca_pem: arg.ca_pem,
        cert_pem: arg.cert_pem,
        key_pem: arg.key_pem,
        server_name: arg.server_name,
        insecure_skip_verify: arg.insecure_skip_verify.unwrap_or(false),
    })
}

fn header_map(headers: &[(String, String)], lower_case: bool, what: &str) -> PyResult<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let (name, value) = header_pair(name, value, lower_case)
            .map_err(|e| value_error(format!("{what}: {e}")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A Python list of these values (the wire's rows are lists, as `drain_to_wire` makes them).
fn row<'py, T>(py: Python<'py>, values: T) -> PyResult<Bound<'py, PyList>>
where
    T: IntoPyObject<'py, Target = PyTuple, Output = Bound<'py, PyTuple>>,
    PyErr: From<T::Error>,
{
    Ok(values.into_pyobject(py)?.to_list())
}

fn wire_stats<'py>(py: Python<'py>, stats: &WireStats) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("h", &stats.h)?;
    dict.set_item("s", stats.s)?;
    dict.set_item("f", stats.f)?;
    dict.set_item("sum", stats.sum)?;
    dict.set_item("max", stats.max)?;
    dict.set_item("min", stats.min)?;
    Ok(dict)
}

/// Histograms by their names on the wire.
type NamedStats = Vec<(&'static str, WireStats)>;

/// A drained recorder with its histograms encoded (made without the GIL).
struct Encoded {
    windows: Vec<(i64, usize, WireStats)>,
    steady: Vec<(usize, WireStats)>,
    warmup: Vec<(usize, WireStats)>,
    lag_windows: Vec<(i64, usize, WireStats)>,
    lag_steady: Vec<(usize, WireStats)>,
    stream_first: Vec<(i64, usize, WireStats)>,
    stream_gaps: Vec<(i64, usize, WireStats)>,
    /// (target, first, gaps, [requests, responses, max responses])
    stream_steady: Vec<(usize, WireStats, WireStats, [u64; 3])>,
    generation_tpot: Vec<(i64, usize, WireStats)>,
    generation_itl: Vec<(i64, usize, WireStats)>,
    /// (target, each histogram by its wire name, counts): `GenerationTotals`
    generation_steady: Vec<(usize, NamedStats, [u64; 11])>,
    /// (target, turn, TTFT, [prompt tokens counted, sum, min, max]): `TurnTotals`
    generation_turns: Vec<(usize, u32, WireStats, [u64; 4])>,
    recorder: Recorder,
}

fn encode(mut recorder: Recorder) -> Encoded {
    fn by_window(
        stats: &mut std::collections::HashMap<(i64, usize), LatencyStats>,
    ) -> Vec<(i64, usize, WireStats)> {
        let mut out: Vec<_> = stats
            .drain()
            .map(|((index, target), s)| (index, target, s.to_wire()))
            .collect();
        out.sort_by_key(|(index, target, _)| (*index, *target));
        out
    }
    fn by_target(
        stats: &mut std::collections::HashMap<usize, LatencyStats>,
    ) -> Vec<(usize, WireStats)> {
        let mut out: Vec<_> = stats
            .drain()
            .map(|(target, s)| (target, s.to_wire()))
            .collect();
        out.sort_by_key(|(target, _)| *target);
        out
    }
    Encoded {
        windows: by_window(&mut recorder.windows),
        steady: by_target(&mut recorder.steady),
        warmup: by_target(&mut recorder.warmup),
        lag_windows: by_window(&mut recorder.lag_windows),
        lag_steady: by_target(&mut recorder.lag_steady),
        stream_first: by_window(&mut recorder.stream_first),
        stream_gaps: by_window(&mut recorder.stream_gaps),
        stream_steady: {
            let mut totals: Vec<_> = recorder
                .stream_steady
                .drain()
                .map(|(target, t)| (target, t.first.to_wire(), t.gaps.to_wire(), t.counts))
                .collect();
            totals.sort_by_key(|(target, ..)| *target);
            totals
        },
        generation_tpot: by_window(&mut recorder.generation_tpot),
        generation_itl: by_window(&mut recorder.generation_itl),
        generation_steady: {
            let mut totals: Vec<_> = recorder
                .generation_steady
                .drain()
                .map(|(target, t)| {
                    let histograms = vec![
                        ("ttst", t.ttst.to_wire()),
                        ("tpot", t.tpot.to_wire()),
                        ("itl", t.itl.to_wire()),
                        ("server_prefill", t.server_prefill.to_wire()),
                        ("server_decode", t.server_decode.to_wire()),
                        ("ttft_residual", t.ttft_residual.to_wire()),
                        ("ttft_intended", t.ttft_intended.to_wire()),
                    ];
                    (target, histograms, t.counts)
                })
                .collect();
            totals.sort_by_key(|(target, ..)| *target);
            totals
        },
        generation_turns: {
            let mut turns: Vec<_> = recorder
                .generation_turns
                .drain()
                .map(|((target, turn), t)| (target, turn, t.ttft.to_wire(), t.prompt_tokens))
                .collect();
            turns.sort_by_key(|(target, turn, ..)| (*target, *turn));
            turns
        },
        recorder,
    }
}

fn sorted_counts<'py>(
    py: Python<'py>,
    counts: &std::collections::HashMap<i64, u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut pairs: Vec<_> = counts.iter().collect();
    pairs.sort_unstable();
    let dict = PyDict::new(py);
    for (key, count) in pairs {
        dict.set_item(key, count)?;
    }
    Ok(dict)
}

fn locust_entry<'py>(
    py: Python<'py>,
    name: &str,
    method: &str,
    entry: &LocustEntry,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("name", name)?;
    dict.set_item("method", method)?;
    dict.set_item("num_requests", entry.num_requests)?;
    dict.set_item("num_failures", entry.num_failures)?;
    dict.set_item("total_response_time", entry.total_response_time)?;
    dict.set_item("min_response_time", entry.min_response_time)?;
    dict.set_item("max_response_time", entry.max_response_time)?;
    dict.set_item("total_content_length", entry.total_content_length)?;
    dict.set_item("response_times", sorted_counts(py, &entry.response_times)?)?;
    dict.set_item(
        "num_reqs_per_sec",
        sorted_counts(py, &entry.num_reqs_per_sec)?,
    )?;
    dict.set_item(
        "num_fail_per_sec",
        sorted_counts(py, &entry.num_fail_per_sec)?,
    )?;
    dict.set_item("last_request_timestamp", entry.last_request_timestamp)?;
    let errors = PyList::empty(py);
    for (failure, count) in &entry.errors {
        errors.append(row(py, (failure.class, &failure.message, *count))?)?;
    }
    dict.set_item("errors", errors)?;
    Ok(dict)
}

fn failure_tuple(failure: &Option<Failure>) -> Option<(&'static str, String)> {
    failure.as_ref().map(|f| (f.class, f.message.clone()))
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (threads = 1, window_s = 1.0))]
    fn new(threads: usize, window_s: f64) -> PyResult<PyEngine> {
        Engine::new(threads, window_s)
            .map(|inner| PyEngine { inner })
            .map_err(value_error)
    }

    /// An eventfd (EFD_NONBLOCK) readable while per-call completions wait; `take_calls` resets it.
    fn notify_fd(&self) -> i32 {
        self.inner.notify_fd()
    }

    /// Completions before this wall-clock time (s) go to the warm-up totals; None: no warm-up.
    fn set_warmup_end(&self, epoch_s: Option<f64>) {
        self.inner.set_warmup_end(epoch_s);
    }

    /// Keep one row per recorded request (`--requests-csv`), drained with the rest.
    fn set_request_rows(&self, enabled: bool) {
        self.inner.set_request_rows(enabled);
    }

    #[pyo3(signature = (name, request_type, protocol, address, display_address, timeout_s, headers, requests, check,
                        rotation = "round-robin", rotation_seed = 0, start_index = 0, tls = None, open_loop_max_queue = None, sequence = None, stream = false,
                        *, max_answer_bytes, trace = None))]
    #[allow(clippy::too_many_arguments)]
    fn add_target(
        &self,
        name: String,
        request_type: String,
        protocol: &str,
        address: String,
        display_address: String,
        timeout_s: f64,
        headers: Vec<(String, String)>,
        requests: Vec<Bound<'_, PyAny>>,
        check: &Bound<'_, PyAny>,
        rotation: &str,
        rotation_seed: u64,
        start_index: usize,
        tls: Option<&Bound<'_, PyAny>>,
        open_loop_max_queue: Option<usize>,
        sequence: Option<&Bound<'_, PyAny>>,
        stream: bool,
        max_answer_bytes: usize,
        trace: Option<String>,
    ) -> PyResult<usize> {
        let fail = |message: String| value_error(format!("add_target({name:?}): {message}"));
        let protocol = match protocol {
            "grpc" => Protocol::Grpc,
            "http" => Protocol::Http,
            other => {
                return Err(fail(format!(
                    "protocol: expected \"grpc\" or \"http\"; got {other:?}"
                )))
            }
        };
        let random_rotation = match rotation {
            "round-robin" => false,
            "random" => true,
            other => {
                return Err(fail(format!(
                    "rotation: expected \"round-robin\" or \"random\"; got {other:?}"
                )))
            }
        };
        let requests = match protocol {
            Protocol::Grpc => {
                let mut all = Vec::with_capacity(requests.len());
                for (index, item) in requests.iter().enumerate() {
                    let bytes = item.cast::<PyBytes>().map_err(|_| {
                        fail(format!(
                            "requests[{index}]: expected bytes (a serialized ModelInferRequest)"
                        ))
                    })?;
                    all.push(Bytes::copy_from_slice(bytes.as_bytes()));
                }
                RequestSpecs::Grpc(all)
            }
            Protocol::Http => {
                let mut all = Vec::with_capacity(requests.len());
                for (index, item) in requests.iter().enumerate() {
                    let (path, body, own): (String, Bound<'_, PyAny>, Vec<(String, String)>) = item
                        .extract()
                        .map_err(|_| fail(format!("requests[{index}]: expected (path: str, body: bytes, headers: list[tuple[str, str]])")))?;
                    let body = body
                        .cast::<PyBytes>()
                        .map_err(|_| fail(format!("requests[{index}]: the body is bytes")))?;
                    all.push((path, Bytes::copy_from_slice(body.as_bytes()), own));
                }
                RequestSpecs::Http(all)
            }
        };
        let check = parse_check(check)
            .map_err(|e| fail(e.to_string().trim_start_matches("ValueError: ").to_owned()))?;
        let tls = tls
            .map(parse_tls)
            .transpose()
            .map_err(|e| fail(e.to_string().trim_start_matches("ValueError: ").to_owned()))?;
        let spec = TargetSpec {
            name: name.clone(),
            request_type,
            protocol,
            address,
            display_address,
            timeout_s,
            max_answer_bytes,
            headers,
            requests,
            check,
            random_rotation,
            rotation_seed,
            start_index,
            tls,
            open_loop_max_queue,
            sequence: sequence
                .map(parse_sequence)
                .transpose()
                .map_err(|e| fail(e.to_string().trim_start_matches("ValueError: ").to_owned()))?,
            stream,
            trace,
        };
        self.inner.add_target(spec).map_err(fail)
    }

    /// A new slot (one connection, made on first use) of a target.
    fn open_slot(&self, target_id: usize) -> PyResult<u64> {
        self.inner.open_slot(target_id).map_err(value_error)
    }

    /// The slot calls in a closed loop, natively, until stopped.
    fn run_closed(&self, slot: u64) -> PyResult<()> {
        self.inner.run_closed(slot).map_err(PyRuntimeError::new_err)
    }

    /// The slot becomes a sender of its open-loop target's arrivals, until stopped.
    fn run_open(&self, slot: u64) -> PyResult<()> {
        self.inner.run_open(slot).map_err(PyRuntimeError::new_err)
    }

    /// Ends the slot's loop, sender or call at once (a call in flight is abandoned: never
    /// recorded, its ticket never comes back) and closes its connection; idempotent.
    fn stop_slot(&self, slot: u64) -> PyResult<()> {
        self.inner.stop_slot(slot).map_err(value_error)
    }

    /// `stop_slot`, then the slot is forgotten.
    fn close_slot(&self, slot: u64) -> PyResult<()> {
        self.inner.close_slot(slot).map_err(value_error)
    }

    /// One call on an idle slot; its completion comes back through `take_calls` with the ticket.
    /// `record`: the engine records it as its loops do (Python reports nothing of it).
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    #[pyo3(signature = (slot, request_index, append = None, body = None, headers = None, want_answer = false, record = false, turn = None))]
    fn call(
        &self,
        slot: u64,
        request_index: usize,
        append: Option<&Bound<'_, PyBytes>>,
        body: Option<&Bound<'_, PyBytes>>,
        headers: Option<Vec<(String, String)>>,
        want_answer: bool,
        record: bool,
        turn: Option<u32>,
    ) -> PyResult<u64> {
        let input = CallInput {
            request_index,
            append: append.map(|b| Bytes::copy_from_slice(b.as_bytes())),
            body: body.map(|b| Bytes::copy_from_slice(b.as_bytes())),
            headers: headers
                .map(|h| header_map(&h, false, "headers"))
                .transpose()?,
            want_answer,
            record,
            trace_number: None,
            turn,
        };
        self.inner
            .call(slot, input)
            .map_err(PyRuntimeError::new_err)
    }

    /// The finished per-call tickets: (ticket, error, refused, latency_ms, sent_ns, received_ns,
    /// response_length, answer, status, generation); `generation`: a successful generation's
    /// (ttft_ms | None, prompt_tokens | None, output_tokens), else None.
    fn take_calls<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let done = self.inner.take_calls();
        let list = PyList::empty(py);
        for call in done {
            let outcome = call.outcome;
            let refused = outcome.failure.as_ref().is_some_and(|f| f.is_refused());
            let answer = outcome.answer.as_ref().map(|a| PyBytes::new(py, a));
            let generation = outcome.generation.as_ref().map(|(figures, _)| {
                (
                    figures.ttft_ms,
                    figures.prompt_tokens,
                    figures.output_tokens,
                )
            });
            let item = PyTuple::new(
                py,
                [
                    call.ticket.into_pyobject(py)?.into_any(),
                    failure_tuple(&outcome.failure)
                        .into_pyobject(py)?
                        .into_any(),
                    refused.into_pyobject(py)?.to_owned().into_any(),
                    call.latency_ms.into_pyobject(py)?.into_any(),
                    outcome.sent_ns.into_pyobject(py)?.into_any(),
                    outcome.received_ns.into_pyobject(py)?.into_any(),
                    outcome.response_length.into_pyobject(py)?.into_any(),
                    answer.into_pyobject(py)?.into_any(),
                    outcome.status.into_pyobject(py)?.into_any(),
                    generation.into_pyobject(py)?.into_any(),
                ],
            )?;
            list.append(item)?;
        }
        Ok(list)
    }

    /// A finished per-call streamed request's (responses, first_response_ms | None, gaps_ms),
    /// once (a decoupled target's ticket); None when there is none (or it was taken).
    fn stream_timing(&self, ticket: u64) -> Option<(u64, Option<f64>, Vec<f64>)> {
        self.inner
            .stream_timing(ticket)
            .map(|t| (t.responses, t.first_response_ms, t.gaps_ms))
    }

    /// Open loop: arrivals at these wall-clock times (ascending), each with its request (None, or
    /// a None in the list: the next of the target's cursor). `intended` is a list of floats or
    /// packed f64 bytes.
    #[pyo3(signature = (target_id, intended, request_indices = None))]
    fn feed(
        &self,
        target_id: usize,
        intended: &Bound<'_, PyAny>,
        request_indices: Option<Vec<Option<usize>>>,
    ) -> PyResult<()> {
        let times: Vec<f64> = if let Ok(packed) = intended.cast::<PyBytes>() {
            let bytes = packed.as_bytes();
            if bytes.len() % 8 != 0 {
                return Err(value_error(format!(
                    "intended: {} bytes is no whole number of packed f64",
                    bytes.len()
                )));
            }
            bytes
                .chunks_exact(8)
                .map(|b| f64::from_ne_bytes(b.try_into().expect("8 bytes")))
                .collect()
        } else {
            intended.extract().map_err(|_| {
                PyTypeError::new_err("intended: expected a list of floats or packed f64 bytes")
            })?
        };
        self.inner
            .feed(target_id, &times, request_indices.as_deref())
            .map_err(value_error)
    }

    /// The run stops: fed arrivals not yet due are dropped uncounted, those waiting count as unsent.
    fn end_arrivals(&self, target_id: usize) -> PyResult<()> {
        self.inner.end_arrivals(target_id).map_err(value_error)
    }

    /// Everything recorded since the last drain, as `RunRecord.merge_wire` takes it, with
    /// Locust's statistics (and the request rows when kept).
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let rows_kept = self.inner.rows_kept();
        let encoded = py.detach(|| encode(self.inner.drain()));
        let names = self.inner.target_names();
        let methods = self.inner.request_types();
        let name = |id: usize| names.get(id).map_or("?", String::as_str);
        let record = PyDict::new(py);
        let window_list = |items: &[(i64, usize, WireStats)]| -> PyResult<Bound<'py, PyList>> {
            let list = PyList::empty(py);
            for (index, target, stats) in items {
                list.append(row(py, (*index, name(*target), wire_stats(py, stats)?))?)?;
            }
            Ok(list)
        };
        let target_dict = |items: &[(usize, WireStats)]| -> PyResult<Bound<'py, PyDict>> {
            let dict = PyDict::new(py);
            for (target, stats) in items {
                dict.set_item(name(*target), wire_stats(py, stats)?)?;
            }
            Ok(dict)
        };
        record.set_item("windows", window_list(&encoded.windows)?)?;
        record.set_item("steady", target_dict(&encoded.steady)?)?;
        record.set_item("warmup", target_dict(&encoded.warmup)?)?;
        record.set_item("lag_windows", window_list(&encoded.lag_windows)?)?;
        record.set_item("lag_steady", target_dict(&encoded.lag_steady)?)?;
        let recorder = &encoded.recorder;
        let mut arrivals: Vec<_> = recorder.arrival_windows.iter().collect();
        arrivals.sort_by_key(|((index, target), _)| (*index, *target));
        let arrival_windows = PyList::empty(py);
        for ((index, target), [sent, unsent]) in arrivals {
            arrival_windows.append(row(py, (*index, name(*target), [*sent, *unsent]))?)?;
        }
        record.set_item("arrival_windows", arrival_windows)?;
        let arrivals_steady = PyDict::new(py);
        for (target, [sent, unsent]) in &recorder.arrivals_steady {
            arrivals_steady.set_item(name(*target), [*sent, *unsent])?;
        }
        record.set_item("arrivals_steady", arrivals_steady)?;
        let mut refused: Vec<_> = recorder.refused_windows.iter().collect();
        refused.sort_by_key(|((index, target), _)| (*index, *target));
        let refused_windows = PyList::empty(py);
        for ((index, target), window) in refused {
            refused_windows.append(row(
                py,
                (
                    *index,
                    name(*target),
                    window.count,
                    window.first,
                    window.last,
                ),
            )?)?;
        }
        record.set_item("refused_windows", refused_windows)?;
        // open-loop send times, as `SendTimes.drain_to_wire` makes them: [index, target, float64 bytes]
        let mut sends: Vec<_> = recorder.send_times.iter().collect();
        sends.sort_by_key(|((index, target), _)| (*index, *target));
        let send_times = PyList::empty(py);
        for ((index, target), times) in sends {
            let raw: Vec<u8> = times.iter().flat_map(|t| t.to_ne_bytes()).collect();
            send_times.append(row(py, (*index, name(*target), PyBytes::new(py, &raw)))?)?;
        }
        record.set_item("send_times", send_times)?;
        // streamed requests, as `StreamRecord.drain_to_wire` makes them
        let streams = PyDict::new(py);
        streams.set_item("first", window_list(&encoded.stream_first)?)?;
        streams.set_item("gaps", window_list(&encoded.stream_gaps)?)?;
        let mut counts: Vec<_> = recorder.stream_counts.iter().collect();
        counts.sort_by_key(|((index, target), _)| (*index, *target));
        let count_list = PyList::empty(py);
        for ((index, target), n) in counts {
            count_list.append(row(py, (*index, name(*target), n.to_vec()))?)?;
        }
        streams.set_item("counts", count_list)?;
        let stream_steady = PyDict::new(py);
        for (target, first, gaps, n) in &encoded.stream_steady {
            let totals = PyDict::new(py);
            totals.set_item("first", wire_stats(py, first)?)?;
            totals.set_item("gaps", wire_stats(py, gaps)?)?;
            totals.set_item("n", n.to_vec())?;
            stream_steady.set_item(name(*target), totals)?;
        }
        streams.set_item("steady", stream_steady)?;
        record.set_item("streams", streams)?;
        // generations, as `GenerationRecord.drain_to_wire` makes them
        let generation_steady = PyDict::new(py);
        for (target, histograms, n) in &encoded.generation_steady {
            let totals = PyDict::new(py);
            for (key, stats) in histograms {
                totals.set_item(*key, wire_stats(py, stats)?)?;
            }
            totals.set_item("n", n.to_vec())?;
            generation_steady.set_item(name(*target), totals)?;
        }
        let generations = PyDict::new(py);
        generations.set_item("steady", generation_steady)?;
        generations.set_item("tpot", window_list(&encoded.generation_tpot)?)?;
        generations.set_item("itl", window_list(&encoded.generation_itl)?)?;
        let mut counts: Vec<_> = recorder.generation_counts.iter().collect();
        counts.sort_by_key(|((index, target), _)| (*index, *target));
        let count_list = PyList::empty(py);
        for ((index, target), n) in counts {
            count_list.append(row(py, (*index, name(*target), n.to_vec()))?)?;
        }
        generations.set_item("counts", count_list)?;
        let turns = PyList::empty(py);
        for (target, turn, ttft, tokens) in &encoded.generation_turns {
            let totals = row(py, (wire_stats(py, ttft)?, tokens.to_vec()))?;
            turns.append(row(py, (name(*target), *turn, totals))?)?;
        }
        generations.set_item("turns", turns)?;
        record.set_item("generations", generations)?;
        let wire = PyDict::new(py);
        wire.set_item("record", record)?;
        let mut entries: Vec<_> = recorder.locust.iter().collect();
        entries.sort_by_key(|(target, _)| **target);
        let locust = PyList::empty(py);
        for (target, entry) in entries {
            locust.append(locust_entry(
                py,
                name(*target),
                methods.get(*target).map_or("?", String::as_str),
                entry,
            )?)?;
        }
        wire.set_item("locust", locust)?;
        if rows_kept {
            let rows = PyList::empty(py);
            for (t, target, latency, ok) in &recorder.rows {
                rows.append(row(
                    py,
                    (
                        *t,
                        name(*target),
                        *latency,
                        if *ok { "ok" } else { "failure" },
                    ),
                )?)?;
            }
            wire.set_item("rows", rows)?;
        }
        if !recorder.traced.is_empty() || !recorder.traced_dropped.is_empty() {
            let traced = PyList::empty(py);
            for (target, number, sent_ns, received_ns) in &recorder.traced {
                traced.append(row(py, (name(*target), *number, *sent_ns, *received_ns))?)?;
            }
            wire.set_item("traced", traced)?;
            let dropped = PyDict::new(py);
            for (target, count) in &recorder.traced_dropped {
                dropped.set_item(name(*target), *count)?;
            }
            wire.set_item("traced_dropped", dropped)?;
        }
        Ok(wire)
    }

    /// Stops everything (idempotent; also when the engine is dropped).
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }
}

/// The answer check as a pure function: None for an accepted answer, else (class_name, message).
/// gRPC: `status` is the call's code (0: `body` is the serialized ModelInferResponse; else `body`
/// is the status message); HTTP: the status, the answer's headers and body. `address` is the
/// address failure messages name.
#[pyfunction]
#[pyo3(signature = (check, protocol, status, headers, body, address = ""))]
fn check_answer(
    check: &Bound<'_, PyDict>,
    protocol: &str,
    status: i64,
    headers: Vec<(String, String)>,
    body: &[u8],
    address: &str,
) -> PyResult<Option<(&'static str, String)>> {
    let check = parse_check(check)?;
    let outcome = match protocol {
        "grpc" if status == 0 => checks::judge_grpc(&check, body).map(|_| ()),
        "grpc" => {
            let code = i32::try_from(status).map_err(|_| value_error("status: not a gRPC code"))?;
            Err(checks::grpc_status_failure(
                code,
                &String::from_utf8_lossy(body),
                address,
            ))
        }
        "http" => {
            let status =
                u16::try_from(status).map_err(|_| value_error("status: not an HTTP status"))?;
            let lookup = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            checks::judge_http(&check, status, &lookup, body).map(|_| ())
        }
        other => {
            return Err(value_error(format!(
                "protocol: expected \"grpc\" or \"http\"; got {other:?}"
            )))
        }
    };
    Ok(outcome.err().map(|f| (f.class, f.message)))
}

/// The answer check's response length (what the Python user reports) for an accepted answer.
#[pyfunction]
#[pyo3(signature = (check, protocol, status, headers, body))]
fn answer_length(
    check: &Bound<'_, PyDict>,
    protocol: &str,
    status: i64,
    headers: Vec<(String, String)>,
    body: &[u8],
) -> PyResult<Option<u64>> {
    let check = parse_check(check)?;
    Ok(match protocol {
        "grpc" => checks::judge_grpc(&check, body).ok(),
        _ => {
            let status =
                u16::try_from(status).map_err(|_| value_error("status: not an HTTP status"))?;
            let lookup = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            checks::judge_http(&check, status, &lookup, body).ok()
        }
    })
}

/// The wire form (`LatencyStats.to_wire`) of these latencies and failures as the engine records
/// them: the encoding every drained window carries, for checks against `hdrh`.
/// Why the engine cannot count tokens with the tokenizer at `path` (a Hugging Face
/// `tokenizer.json`), or None: the check a scenario's `generation.tokenizer` gets when it is read.
#[pyfunction]
fn tokenizer_problem(path: &str) -> Option<String> {
    TokenizerFile::load(path).err()
}

/// Each text's token count with the tokenizer at `path` (no special tokens added): how a generative
/// target's synthetic prompts are measured to their asked lengths. ValueError naming the file when
/// it cannot be read.
#[pyfunction]
fn count_tokens(path: &str, texts: Vec<String>) -> PyResult<Vec<u64>> {
    let file = TokenizerFile::load(path).map_err(PyValueError::new_err)?;
    texts
        .iter()
        .map(|text| {
            file.tokenizer
                .encode(text.as_str(), false)
                .map(|encoding| encoding.len() as u64)
                .map_err(|e| {
                    PyValueError::new_err(format!(
                        "the tokenizer {path} could not count a text: {e}"
                    ))
                })
        })
        .collect()
}

#[pyfunction]
#[pyo3(signature = (latencies_ms, failures = 0))]
fn latency_wire<'py>(
    py: Python<'py>,
    latencies_ms: Vec<f64>,
    failures: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let mut stats = LatencyStats::default();
    for latency in latencies_ms {
        stats.record_success(latency);
    }
    for _ in 0..failures {
        stats.record_failure();
    }
    wire_stats(py, &stats.to_wire())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEngine>()?;
    m.add_function(wrap_pyfunction!(latency_wire, m)?)?;
    m.add_function(wrap_pyfunction!(check_answer, m)?)?;
    m.add_function(wrap_pyfunction!(answer_length, m)?)?;
    m.add_function(wrap_pyfunction!(tokenizer_problem, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    Ok(())
}
