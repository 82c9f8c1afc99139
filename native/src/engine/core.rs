//! The engine itself, without Python: targets, slots and their modes, recording, the per-call
//! completions and their eventfd, the pacer's arrivals. `python.rs` is its face to Python.
//!
//! Locks, always taken in this order and held for microseconds: a slot's state, then the
//! recorder; the pacer's schedule, a target's open-loop queue and the per-call completions are
//! each taken alone. No engine thread ever touches Python.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use tokio::sync::{mpsc, Notify};

use super::call::{self, Conn};
use super::checks::Check;
use super::clock::{monotonic_ns, wall_s, ClockMap};
use super::debug;
use super::grpc;
use super::http1::request_headers;
use super::net::Peer;
use super::outcome::{CallInput, Outcome, StreamTiming};
use super::pacer::{Arrival, OpenLoop, Pacer};
use super::record::{Completion, RecordSettings, Recorder};
use super::sequence::{http_body_with_step, SequenceSpec, Sequences};
use super::target::{header_pair, Cursor, HttpRequest, Protocol, Requests, Target};
use super::tls::{tls_setup, TlsOptions};
use super::trace_id::{grpc_id_field, http_body_with_id, TraceIds};

/// One HTTP request as Python gives it: (path, body, the request's own headers).
pub type HttpRequestSpec = (String, Bytes, Vec<(String, String)>);

/// The requests of a target as Python gives them.
pub enum RequestSpecs {
    Grpc(Vec<Bytes>),
    Http(Vec<HttpRequestSpec>),
}

/// Everything `add_target` takes.
pub struct TargetSpec {
    pub name: String,
    pub request_type: String,
    pub protocol: Protocol,
    pub address: String,
    pub display_address: String,
    pub timeout_s: f64,
    pub max_answer_bytes: usize,
    pub headers: Vec<(String, String)>,
    pub requests: RequestSpecs,
    pub check: Check,
    pub random_rotation: bool,
    pub rotation_seed: u64,
    pub start_index: usize,
    pub tls: Option<TlsOptions>,
    pub open_loop_max_queue: Option<usize>,
    pub sequence: Option<SequenceSpec>,
    /// a decoupled model's calls go on a `ModelStreamInfer` stream per slot
    pub stream: bool,
    /// a traced target: its calls' ids start with this prefix (`trace_id`)
    pub trace: Option<String>,
}

/// A per-call ticket's completion, as `take_calls` hands it to Python.
#[derive(Debug)]
pub struct CallDone {
    pub ticket: u64,
    pub outcome: Outcome,
    pub latency_ms: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Idle,
    Closed,
    Open,
    Call,
}

struct SlotState {
    /// bumped by every stop: a task of an older generation records nothing
    generation: u64,
    mode: Mode,
    /// the connection while no task holds it
    conn: Option<Conn>,
    task: Option<Running>,
}

/// A slot's task: its handle, and what tells it to stop after its call in flight.
struct Running {
    handle: tokio::task::AbortHandle,
    stop: Arc<Notify>,
}

/// How long a stopped slot's call in flight may take to end before it is cancelled. A stop
/// lets the call end and closes a stream gracefully (half-close, the server's status read): a
/// cancelled call in flight is what Triton 2.51's gRPC frontend crashed on (SIGSEGV,
/// triton-inference-server/server#8034; docs/servers.md).
const STOP_DRAIN: Duration = Duration::from_secs(2);

/// One connection, owned by one Locust user.
pub struct Slot {
    id: u64,
    target: Arc<Target>,
    state: Mutex<SlotState>,
}

/// `users/base.py` `RefusedBackoff`: 10 ms after a refusal, doubling to 1 s, none after any other outcome.
#[derive(Default)]
struct RefusedBackoff {
    delay: Duration,
}

impl RefusedBackoff {
    fn after(&mut self, refused: bool) -> Duration {
        self.delay = if !refused {
            Duration::ZERO
        } else if self.delay.is_zero() {
            Duration::from_millis(10)
        } else {
            (self.delay * 2).min(Duration::from_secs(1))
        };
        self.delay
    }
}

/// What the engine's tasks and the pacer share.
struct Shared {
    targets: RwLock<Vec<Arc<Target>>>,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    record: Mutex<(RecordSettings, Recorder)>,
    calls: Mutex<Vec<CallDone>>,
    /// per-call streamed requests' timings, by ticket, until Python asks (`stream_timing`)
    stream_timings: Mutex<HashMap<u64, StreamTiming>>,
    notify: OwnedFd,
    /// stopped slots' tasks still ending their call in flight (`close` waits for them)
    draining: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// The most per-call stream timings kept unasked (the oldest tickets' go first).
const STREAM_TIMINGS_KEPT: usize = 4096;

fn ms_between(later_ns: u64, earlier_ns: u64) -> f64 {
    (later_ns as f64 - earlier_ns as f64) / 1e6
}

impl Shared {
    fn target(&self, id: usize) -> Result<Arc<Target>, String> {
        self.targets
            .read()
            .expect("targets")
            .get(id)
            .cloned()
            .ok_or_else(|| format!("target {id}: no such target"))
    }

    fn slot(&self, id: u64) -> Result<Arc<Slot>, String> {
        self.slots
            .lock()
            .expect("slots")
            .get(&id)
            .cloned()
            .ok_or_else(|| format!("slot {id}: no such slot"))
    }

    /// Records a loop's or a sender's call, unless its slot was stopped meanwhile (then False).
    fn record(&self, slot: &Slot, generation: u64, done: &Completion<'_>) -> bool {
        let state = slot.state.lock().expect("slot");
        if state.generation != generation {
            return false;
        }
        let mut record = self.record.lock().expect("recorder");
        let (settings, recorder) = &mut *record;
        recorder.record(settings, done);
        true
    }

    fn record_arrival(&self, target: usize, intended_s: f64, unsent: bool) {
        let mut record = self.record.lock().expect("recorder");
        let (settings, recorder) = &mut *record;
        recorder.record_arrival(settings, target, intended_s, unsent);
    }

    /// The pacer: an arrival is due now.
    fn arrival_due(&self, target: usize, arrival: Arrival) {
        let Ok(found) = self.target(target) else {
            return;
        };
        let Some(open) = found.open_loop.as_ref() else {
            return;
        };
        self.record_arrival(target, arrival.intended_s, false);
        if open.offer(arrival) == super::pacer::Offered::Unsent {
            self.record_arrival(target, arrival.intended_s, true);
        }
    }

    fn push_call(&self, done: CallDone) {
        let was_empty = {
            let mut calls = self.calls.lock().expect("calls");
            let empty = calls.is_empty();
            calls.push(done);
            empty
        };
        if was_empty {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to the engine's own eventfd
            unsafe { libc::write(self.notify.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// A loop's or a sender's call: the request, with the slot's next sequence step when the target
/// is a sequence model (gRPC: its parameters appended; HTTP: spliced into the JSON header, or
/// TorchServe's sequence headers), and its trace id when the target is traced (`trace_id`).
fn loop_input(
    target: &Target,
    request_index: usize,
    sequences: Option<&mut Sequences>,
) -> CallInput {
    let mut input = CallInput {
        request_index,
        ..CallInput::default()
    };
    let step = sequences.map(|sequences| sequences.next_step().clone());
    let trace = target.trace.as_ref().map(TraceIds::next);
    if step.is_none() && trace.is_none() {
        return input;
    }
    match &target.requests {
        Requests::Grpc(_) => {
            let mut append = BytesMut::new();
            if let Some(step) = &step {
                append.extend_from_slice(&step.grpc);
            }
            if let Some((_, id)) = &trace {
                append.extend_from_slice(&grpc_id_field(id));
            }
            input.append = Some(append.freeze());
        }
        Requests::Http(all) => {
            let request = &all[request_index];
            let mut changed: Option<(Bytes, Option<usize>)> = None;
            let mut headers = HeaderMap::new();
            match &step {
                Some(step) if !step.headers.is_empty() => headers = step.headers.clone(),
                Some(step) => {
                    changed = Some(http_body_with_step(&request.body, request.json_size, step))
                }
                None => {}
            }
            if let Some((_, id)) = &trace {
                let (body, json_size) = changed
                    .as_ref()
                    .map_or((&request.body, request.json_size), |(b, s)| (b, *s));
                changed = Some(http_body_with_id(body, json_size, id));
            }
            if let Some((body, json_size)) = changed {
                if let Some(size) = json_size {
                    headers.insert(
                        "inference-header-content-length",
                        http::HeaderValue::from(size),
                    );
                }
                input.body = Some(body);
            }
            if !headers.is_empty() {
                input.headers = Some(headers);
            }
        }
    }
    input.trace_number = trace.map(|(number, _)| number);
    input
}

/// A call's sequence after it (`Sequences::after_call`): a failure before its answer was judged
/// abandons the sequence; a TorchServe sequence's refused opening is tried again.
fn after_call(sequences: Option<&mut Sequences>, outcome: &mut Outcome) {
    if let Some(sequences) = sequences {
        sequences.after_call(outcome);
    }
}

/// A traced call that succeeded: (its id's number, sent, received), for the trace join.
fn traced(input: &CallInput, outcome: &Outcome) -> Option<(u64, u64, u64)> {
    let number = input.trace_number?;
    outcome
        .failure
        .is_none()
        .then_some((number, outcome.sent_ns, outcome.received_ns))
}

/// A call's completion as a closed loop (or a recorded per-call) records it: finished now, no send lag.
fn completion<'a>(target: usize, outcome: &'a Outcome, input: &CallInput) -> Completion<'a> {
    Completion {
        target,
        traced: traced(input, outcome),
        latency_ms: ms_between(outcome.received_ns, outcome.sent_ns),
        failure: outcome.failure.as_ref(),
        response_length: outcome.response_length,
        now_s: wall_s(),
        send_lag_ms: None,
        stream: outcome.stream.as_ref(),
        generation: outcome.generation.as_ref(),
        turn: input.turn,
    }
}

async fn closed_loop(
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    generation: u64,
    mut conn: Conn,
    stop: Arc<Notify>,
) {
    let target = slot.target.clone();
    let mut backoff = RefusedBackoff::default();
    let mut sequences = target.sequence.map(|spec| Sequences::new(spec, None));
    loop {
        let input = loop_input(&target, target.next_request(), sequences.as_mut());
        let mut outcome = call::call(&target, &mut conn, &input).await;
        after_call(sequences.as_mut(), &mut outcome);
        if !shared.record(&slot, generation, &completion(target.id, &outcome, &input)) {
            return conn.close().await;
        }
        let pause = backoff.after(outcome.failure.as_ref().is_some_and(|f| f.backs_off()));
        if !pause.is_zero() {
            tokio::select! {
                _ = stop.notified() => return conn.close().await,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

async fn sender(
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    generation: u64,
    mut conn: Conn,
    stop: Arc<Notify>,
) {
    let target = slot.target.clone();
    let Some(open) = target.open_loop.as_ref() else {
        return;
    };
    let (hand, mut inbox) = mpsc::channel::<Arrival>(1);
    let mut sequences = target.sequence.map(|spec| Sequences::new(spec, None));
    loop {
        let arrival = match open.take_or_wait(slot.id, &hand) {
            Some(arrival) => arrival,
            None => tokio::select! {
                _ = stop.notified() => return conn.close().await,
                received = inbox.recv() => match received {
                    Some(arrival) => arrival,
                    None => return conn.close().await,
                },
            },
        };
        let taken_ns = monotonic_ns();
        let request_index = arrival
            .request_index
            .unwrap_or_else(|| target.next_request());
        // handed over up to the arrival's lead early: never written before its intended time
        wait_until(arrival.intended_ns).await;
        let called_ns = monotonic_ns();
        let input = loop_input(&target, request_index, sequences.as_mut());
        let mut outcome = call::call(&target, &mut conn, &input).await;
        debug::lag_profile(&arrival, taken_ns, called_ns, outcome.sent_ns);
        after_call(sequences.as_mut(), &mut outcome);
        // coordinated omission: latency from the intended send time, the send lag kept apart
        let done = Completion {
            target: target.id,
            traced: traced(&input, &outcome),
            latency_ms: ms_between(outcome.received_ns, arrival.intended_ns),
            failure: outcome.failure.as_ref(),
            response_length: outcome.response_length,
            now_s: wall_s(),
            send_lag_ms: Some(ms_between(outcome.sent_ns, arrival.intended_ns)),
            stream: outcome.stream.as_ref(),
            generation: outcome.generation.as_ref(),
            turn: None,
        };
        if !shared.record(&slot, generation, &done) {
            return conn.close().await;
        }
    }
}

/// Within this of an instant the sender spins; before it, it yields to the runtime's other tasks
/// (the connections' writes and reads run on the same threads) and looks again.
const SPIN_WITHIN_NS: u64 = 5_000;

/// Waits until the monotonic instant `deadline_ns` without holding the runtime's thread for longer
/// than the last `SPIN_WITHIN_NS`.
async fn wait_until(deadline_ns: u64) {
    loop {
        let now = monotonic_ns();
        if now >= deadline_ns {
            return;
        }
        if deadline_ns - now > SPIN_WITHIN_NS {
            tokio::task::yield_now().await;
        } else {
            std::hint::spin_loop();
        }
    }
}

async fn one_call(
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    generation: u64,
    ticket: u64,
    input: CallInput,
    mut conn: Conn,
) {
    let outcome = call::call(&slot.target, &mut conn, &input).await;
    if input.record
        && !shared.record(
            &slot,
            generation,
            &completion(slot.target.id, &outcome, &input),
        )
    {
        return conn.close().await; // stopped meanwhile: recorded nothing
    }
    let abandoned = {
        let mut state = slot.state.lock().expect("slot");
        if state.generation != generation {
            Some(conn) // stopped meanwhile
        } else {
            state.conn = Some(conn);
            state.mode = Mode::Idle;
            state.task = None;
            None
        }
    };
    if let Some(conn) = abandoned {
        return conn.close().await;
    }
    let latency_ms = ms_between(outcome.received_ns, outcome.sent_ns);
    if let Some(timing) = outcome.stream.clone() {
        let mut timings = shared.stream_timings.lock().expect("stream timings");
        if timings.len() >= STREAM_TIMINGS_KEPT {
            if let Some(oldest) = timings.keys().min().copied() {
                timings.remove(&oldest);
            }
        }
        timings.insert(ticket, timing);
    }
    shared.push_call(CallDone {
        ticket,
        outcome,
        latency_ms,
    });
}

/// Splits `host:port` (IPv6 in brackets).
fn host_port(text: &str, default_port: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default_port?,
            None => return None,
        };
        return Some((format!("[{host}]"), port));
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => {
            Some((host.to_owned(), port.parse().ok()?))
        }
        None if !text.is_empty() => Some((text.to_owned(), default_port?)),
        _ => None,
    }
}

/// The engine: its runtime (worker threads), its pacer thread, what they share.
pub struct Engine {
    shared: Arc<Shared>,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    handle: tokio::runtime::Handle,
    pacer: Pacer,
    next_slot: AtomicU64,
    next_ticket: AtomicU64,
}

impl Engine {
    pub fn new(threads: usize, window_s: f64) -> Result<Engine, String> {
        if !(window_s.is_finite() && window_s > 0.0) {
            return Err(format!(
                "window_s: expected a positive number of seconds; got {window_s}"
            ));
        }
        if threads == 0 {
            return Err("threads: expected at least 1".into());
        }
        // SAFETY: eventfd takes no pointers; the fd is owned from here on
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh, valid file descriptor that nothing else owns
        let notify = unsafe { OwnedFd::from_raw_fd(fd) };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("inferload-engine")
            .enable_all()
            .build()
            .map_err(|e| format!("the engine's runtime: {e}"))?;
        let shared = Arc::new(Shared {
            targets: RwLock::default(),
            slots: Mutex::default(),
            record: Mutex::new((
                RecordSettings {
                    window_s,
                    warmup_end: None,
                    rows: false,
                },
                Recorder::default(),
            )),
            calls: Mutex::default(),
            stream_timings: Mutex::default(),
            notify,
            draining: Mutex::default(),
        });
        let for_pacer = Arc::downgrade(&shared);
        let pacer = Pacer::start(move |target, arrival| {
            if let Some(shared) = for_pacer.upgrade() {
                shared.arrival_due(target, arrival);
            }
        })
        .map_err(|e| format!("the pacer thread: {e}"))?;
        Ok(Engine {
            shared,
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            pacer,
            next_slot: AtomicU64::new(1),
            next_ticket: AtomicU64::new(1),
        })
    }

    pub fn notify_fd(&self) -> RawFd {
        self.shared.notify.as_raw_fd()
    }

    pub fn set_warmup_end(&self, epoch_s: Option<f64>) {
        self.shared.record.lock().expect("recorder").0.warmup_end = epoch_s;
    }

    pub fn set_request_rows(&self, enabled: bool) {
        self.shared.record.lock().expect("recorder").0.rows = enabled;
    }

    pub fn rows_kept(&self) -> bool {
        self.shared.record.lock().expect("recorder").0.rows
    }

    pub fn target_names(&self) -> Vec<String> {
        self.shared
            .targets
            .read()
            .expect("targets")
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    pub fn request_types(&self) -> Vec<String> {
        self.shared
            .targets
            .read()
            .expect("targets")
            .iter()
            .map(|t| t.request_type.clone())
            .collect()
    }

    pub fn add_target(&self, spec: TargetSpec) -> Result<usize, String> {
        if !(spec.timeout_s.is_finite() && spec.timeout_s > 0.0) {
            return Err(format!(
                "timeout_s: expected a positive number of seconds; got {}",
                spec.timeout_s
            ));
        }
        let (host, port, scheme_tls) = match spec.protocol {
            Protocol::Grpc => {
                let (host, port) = host_port(&spec.address, None).ok_or_else(|| {
                    format!(
                        "address {:?}: expected host:port for a grpc target",
                        spec.address
                    )
                })?;
                (host, port, false)
            }
            Protocol::Http => {
                let (secure, rest) = if let Some(rest) = spec.address.strip_prefix("https://") {
                    (true, rest)
                } else if let Some(rest) = spec.address.strip_prefix("http://") {
                    (false, rest)
                } else {
                    return Err(format!(
                        "address {:?}: expected http://host:port or https://host:port",
                        spec.address
                    ));
                };
                let rest = rest.strip_suffix('/').unwrap_or(rest);
                if rest.contains('/') {
                    return Err(format!(
                        "address {:?}: expected no path (the requests carry theirs)",
                        spec.address
                    ));
                }
                let (host, port) = host_port(rest, Some(if secure { 443 } else { 80 }))
                    .ok_or_else(|| {
                        format!("address {:?}: expected http(s)://host:port", spec.address)
                    })?;
                if !secure && spec.tls.is_some() {
                    return Err(format!(
                        "address {:?}: tls is given, so the address must be https://",
                        spec.address
                    ));
                }
                (host, port, secure)
            }
        };
        let tls_options = spec
            .tls
            .clone()
            .or_else(|| scheme_tls.then(TlsOptions::default));
        let alpn: &[u8] = if spec.protocol == Protocol::Grpc {
            b"h2"
        } else {
            b"http/1.1"
        };
        let tls = tls_options
            .as_ref()
            .map(|options| tls_setup(options, &host, alpn).map_err(|e| format!("tls: {e}")))
            .transpose()?;
        let authority =
            if port == if scheme_tls { 443 } else { 80 } && spec.protocol == Protocol::Http {
                host.clone()
            } else {
                format!("{host}:{port}")
            };
        let mut target_headers = HeaderMap::new();
        for (name, value) in &spec.headers {
            let (name, value) = header_pair(name, value, spec.protocol == Protocol::Grpc)?;
            target_headers.append(name, value);
        }
        let requests = match (spec.protocol, spec.requests) {
            (Protocol::Grpc, RequestSpecs::Grpc(all)) => {
                Requests::Grpc(all.iter().map(|m| grpc::frame(m)).collect())
            }
            (Protocol::Http, RequestSpecs::Http(all)) => {
                let mut built = Vec::with_capacity(all.len());
                for (index, (path, body, own)) in all.into_iter().enumerate() {
                    let path = http::uri::PathAndQuery::try_from(path.as_str())
                        .ok()
                        .filter(|p| p.as_str().starts_with('/'))
                        .ok_or_else(|| format!("requests[{index}]: path {path:?}: expected an absolute path such as /v2/models/m/infer"))?;
                    let mut own_headers = HeaderMap::new();
                    for (name, value) in &own {
                        let (name, value) = header_pair(name, value, false)
                            .map_err(|e| format!("requests[{index}]: {e}"))?;
                        own_headers.append(name, value);
                    }
                    let headers = request_headers(&authority, &target_headers, &own_headers)?;
                    let json_size = match own_headers.get("inference-header-content-length") {
                        None => None,
                        Some(value) => Some(
                            value
                                .to_str()
                                .ok()
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .ok_or_else(|| format!("requests[{index}]: Inference-Header-Content-Length: expected a number of bytes"))?,
                        ),
                    };
                    built.push(HttpRequest {
                        path,
                        body,
                        headers,
                        json_size,
                    });
                }
                Requests::Http(built)
            }
            (Protocol::Grpc, _) => {
                return Err(
                    "requests: a grpc target's requests are bytes (serialized ModelInferRequests)"
                        .into(),
                )
            }
            (Protocol::Http, _) => {
                return Err(
                    "requests: an http target's requests are (path, body, headers) tuples".into(),
                )
            }
        };
        if requests.is_empty() {
            return Err("requests: expected at least one request".into());
        }
        let size = requests.len();
        let mut targets = self.shared.targets.write().expect("targets");
        let id = targets.len();
        let timeout = Duration::from_secs_f64(spec.timeout_s);
        if spec.stream && spec.protocol != Protocol::Grpc {
            return Err("stream: only a grpc target streams (ModelStreamInfer)".into());
        }
        let secure = tls.is_some();
        let (metadata, grpc_uri, stream_metadata, stream_uri) = if spec.protocol == Protocol::Grpc {
            (
                grpc::call_headers(&target_headers),
                grpc::method_uri(secure, &authority, crate::proto::MODEL_INFER)?,
                grpc::stream_headers(&target_headers),
                grpc::method_uri(secure, &authority, crate::proto::MODEL_STREAM_INFER)?,
            )
        } else {
            (
                HeaderMap::new(),
                http::Uri::default(),
                HeaderMap::new(),
                http::Uri::default(),
            )
        };
        targets.push(Arc::new(Target {
            id,
            name: spec.name,
            request_type: spec.request_type,
            protocol: spec.protocol,
            peer: Peer { host, port, tls },
            authority,
            display_address: spec.display_address,
            timeout,
            max_answer_bytes: spec.max_answer_bytes,
            metadata,
            grpc_uri,
            stream: spec.stream,
            stream_uri,
            stream_metadata,
            empty_final: super::stream::empty_final_parameter(),
            requests,
            check: spec.check,
            cursor: Mutex::new(Cursor::new(
                size,
                spec.random_rotation.then_some(spec.rotation_seed),
                spec.start_index,
            )),
            open_loop: spec.open_loop_max_queue.map(OpenLoop::new),
            sequence: spec.sequence,
            trace: spec.trace.map(TraceIds::new),
        }));
        Ok(id)
    }

    pub fn open_slot(&self, target: usize) -> Result<u64, String> {
        let target = self.shared.target(target)?;
        let id = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let slot = Slot {
            id,
            target,
            state: Mutex::new(SlotState {
                generation: 0,
                mode: Mode::Idle,
                conn: None,
                task: None,
            }),
        };
        self.shared
            .slots
            .lock()
            .expect("slots")
            .insert(id, Arc::new(slot));
        Ok(id)
    }

    /// Starts a task on an idle slot, its connection handed over.
    fn start(
        &self,
        slot_id: u64,
        mode: Mode,
        task: impl FnOnce(Arc<Shared>, Arc<Slot>, u64, Conn, Arc<Notify>) -> tokio::task::JoinHandle<()>,
    ) -> Result<(), String> {
        let slot = self.shared.slot(slot_id)?;
        let mut state = slot.state.lock().expect("slot");
        if state.mode != Mode::Idle {
            return Err(format!(
                "slot {slot_id}: busy (a loop, a sender or a call runs on it; stop_slot first)"
            ));
        }
        let conn = state
            .conn
            .take()
            .unwrap_or_else(|| Conn::new(slot.target.protocol));
        state.mode = mode;
        let stop = Arc::new(Notify::new());
        let handle = task(
            self.shared.clone(),
            slot.clone(),
            state.generation,
            conn,
            stop.clone(),
        );
        state.task = Some(Running {
            handle: handle.abort_handle(),
            stop,
        });
        Ok(())
    }

    pub fn run_closed(&self, slot: u64) -> Result<(), String> {
        let handle = self.handle.clone();
        self.start(
            slot,
            Mode::Closed,
            move |shared, slot, generation, conn, stop| {
                handle.spawn(closed_loop(shared, slot, generation, conn, stop))
            },
        )
    }

    pub fn run_open(&self, slot_id: u64) -> Result<(), String> {
        let slot = self.shared.slot(slot_id)?;
        if slot.target.open_loop.is_none() {
            return Err(format!("slot {slot_id}: its target {:?} is closed loop (add_target without open_loop_max_queue)", slot.target.name));
        }
        let handle = self.handle.clone();
        self.start(
            slot_id,
            Mode::Open,
            move |shared, slot, generation, conn, stop| {
                handle.spawn(sender(shared, slot, generation, conn, stop))
            },
        )
    }

    pub fn call(&self, slot_id: u64, input: CallInput) -> Result<u64, String> {
        let slot = self.shared.slot(slot_id)?;
        if input.request_index >= slot.target.requests.len() {
            return Err(format!(
                "request_index {}: the target {:?} has {} requests",
                input.request_index,
                slot.target.name,
                slot.target.requests.len()
            ));
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let handle = self.handle.clone();
        self.start(
            slot_id,
            Mode::Call,
            move |shared, slot, generation, conn, _stop| {
                handle.spawn(one_call(shared, slot, generation, ticket, input, conn))
            },
        )?;
        Ok(ticket)
    }

    pub fn stop_slot(&self, slot_id: u64) -> Result<(), String> {
        let slot = self.shared.slot(slot_id)?;
        {
            let mut state = slot.state.lock().expect("slot");
            state.generation += 1;
            if let Some(task) = state.task.take() {
                self.drain_then_cancel(task);
            }
            state.conn = None;
            state.mode = Mode::Idle;
        }
        if let Some(open) = slot.target.open_loop.as_ref() {
            open.forget_sender(slot_id);
        }
        Ok(())
    }

    /// A stopped slot's task ends its call in flight (it records nothing more) and closes its
    /// connection; one still running after [`STOP_DRAIN`] is cancelled.
    fn drain_then_cancel(&self, task: Running) {
        task.stop.notify_one();
        let mut draining = self.shared.draining.lock().expect("draining");
        draining.retain(|handle| !handle.is_finished());
        draining.push(task.handle.clone());
        self.handle.spawn(async move {
            tokio::time::sleep(STOP_DRAIN).await;
            task.handle.abort();
        });
    }

    /// Stops the slot and forgets it.
    pub fn close_slot(&self, slot_id: u64) -> Result<(), String> {
        self.stop_slot(slot_id)?;
        self.shared.slots.lock().expect("slots").remove(&slot_id);
        Ok(())
    }

    /// A finished per-call streamed request's timing (taken: asked once).
    pub fn stream_timing(&self, ticket: u64) -> Option<StreamTiming> {
        self.shared
            .stream_timings
            .lock()
            .expect("stream timings")
            .remove(&ticket)
    }

    pub fn take_calls(&self) -> Vec<CallDone> {
        let mut counter = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from the engine's own eventfd (resets it)
        unsafe {
            libc::read(
                self.shared.notify.as_raw_fd(),
                counter.as_mut_ptr().cast(),
                8,
            )
        };
        std::mem::take(&mut *self.shared.calls.lock().expect("calls"))
    }

    pub fn feed(
        &self,
        target_id: usize,
        intended: &[f64],
        request_indices: Option<&[Option<usize>]>,
    ) -> Result<(), String> {
        let target = self.shared.target(target_id)?;
        if target.open_loop.is_none() {
            return Err(format!("target {:?}: closed loop (add_target without open_loop_max_queue): nothing to feed", target.name));
        }
        if let Some(indices) = request_indices {
            if indices.len() != intended.len() {
                return Err(format!(
                    "request_indices: {} of them for {} arrivals",
                    indices.len(),
                    intended.len()
                ));
            }
            if let Some(bad) = indices
                .iter()
                .flatten()
                .find(|i| **i >= target.requests.len())
            {
                return Err(format!(
                    "request_indices: {bad} is past the target's {} requests",
                    target.requests.len()
                ));
            }
        }
        if let Some(bad) = intended.iter().find(|t| !t.is_finite()) {
            return Err(format!("intended: {bad} is not a time"));
        }
        if intended.windows(2).any(|pair| pair[1] < pair[0]) {
            return Err("intended: expected ascending times".into());
        }
        let clocks = ClockMap::now();
        let arrivals = intended.iter().enumerate().map(|(i, t)| Arrival {
            intended_ns: clocks.to_monotonic_ns(*t),
            intended_s: *t,
            request_index: request_indices.and_then(|indices| indices[i]),
            lead_ns: 0, // set by the pacer
            released_ns: 0,
        });
        self.pacer.feed(target_id, arrivals);
        Ok(())
    }

    pub fn end_arrivals(&self, target_id: usize) -> Result<(), String> {
        let target = self.shared.target(target_id)?;
        // fed arrivals already due that the pacer's thread had not reached (a starved machine) are
        // the schedule's: counted unsent, as the Python scheduler counts the due ones it never reached
        let now = super::clock::wall_s();
        for arrival in self.pacer.end(target_id) {
            if arrival.intended_s <= now {
                self.shared
                    .record_arrival(target_id, arrival.intended_s, false);
                self.shared
                    .record_arrival(target_id, arrival.intended_s, true);
            }
        }
        if let Some(open) = target.open_loop.as_ref() {
            for arrival in open.drain_waiting() {
                self.shared
                    .record_arrival(target_id, arrival.intended_s, true);
            }
        }
        Ok(())
    }

    /// Everything recorded since the last drain; the recorder is left empty.
    pub fn drain(&self) -> Recorder {
        std::mem::take(&mut self.shared.record.lock().expect("recorder").1)
    }

    /// Stops every slot, the pacer and the runtime (idempotent).
    pub fn close(&self) {
        let slots: Vec<u64> = self
            .shared
            .slots
            .lock()
            .expect("slots")
            .keys()
            .copied()
            .collect();
        for slot in slots {
            let _ = self.stop_slot(slot);
        }
        self.pacer.stop();
        let deadline = std::time::Instant::now() + STOP_DRAIN;
        while std::time::Instant::now() < deadline
            && !self
                .shared
                .draining
                .lock()
                .expect("draining")
                .iter()
                .all(|handle| handle.is_finished())
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        if let Some(runtime) = self.runtime.lock().expect("runtime").take() {
            runtime.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_as_targets_give_them() {
        assert_eq!(
            host_port("127.0.0.1:8001", None),
            Some(("127.0.0.1".into(), 8001))
        );
        assert_eq!(host_port("[::1]:8001", None), Some(("[::1]".into(), 8001)));
        assert_eq!(host_port("triton", Some(80)), Some(("triton".into(), 80)));
        assert_eq!(host_port("triton", None), None);
        assert_eq!(host_port("::1", None), None);
        assert_eq!(host_port("h:x", None), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_sender_waiting_for_its_instant_lets_other_tasks_run_and_is_never_early() {
        // far enough ahead that the thread is not preempted past it before the first look
        let deadline = monotonic_ns() + 100_000_000;
        // on the one thread of this runtime: a task that only makes progress if the wait yields
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = ticks.clone();
        let other = tokio::spawn(async move {
            while monotonic_ns() < deadline {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        });
        wait_until(deadline).await;
        assert!(monotonic_ns() >= deadline);
        assert!(ticks.load(std::sync::atomic::Ordering::Relaxed) > 0);
        other.await.unwrap();
    }

    #[test]
    fn refused_backoff_doubles_to_a_second_and_resets() {
        let mut backoff = RefusedBackoff::default();
        let pauses: Vec<u64> = (0..9)
            .map(|_| backoff.after(true).as_millis() as u64)
            .collect();
        assert_eq!(pauses, vec![10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(backoff.after(false), Duration::ZERO);
        assert_eq!(backoff.after(true), Duration::from_millis(10));
    }
}
