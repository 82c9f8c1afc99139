//! What the engine records natively for loops and senders, in the form `RunRecord.merge_wire`
//! takes (`measure/run_record.py` `drain_to_wire`, `measure/hdr.py` `LatencyStats.to_wire`), and
//! Locust's request statistics as `StatsEntry.log` / `log_error` keep them.
//!
//! Every rule is the Python one: the window of a completion is `floor(now / window_s)` (Python's
//! float floor division), warm-up vs steady by completion time (arrivals by intended time), a
//! success's latency in the HDR histogram (µs, 1 .. 3,600,000,000, 3 digits, `round(ms * 1000)`
//! clamped), a failure counted only, refused attempts per window with their first and last time.

use std::collections::HashMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use super::checks::Failure;
use super::generation::{GenerationFigures, TokenSource};
use super::outcome::StreamTiming;

pub const LOWEST_US: u64 = 1;
pub const HIGHEST_US: u64 = 3_600_000_000;
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Python's `a // b` for floats (`float_floor_div`: fmod first, so `1.0 // 0.1 == 9.0`).
pub fn py_floor_div(a: f64, b: f64) -> f64 {
    let modulo = a % b;
    let mut div = (a - modulo) / b;
    if modulo != 0.0 && ((b < 0.0) != (modulo < 0.0)) {
        div -= 1.0;
    }
    if div == 0.0 {
        return 0.0_f64.copysign(a / b);
    }
    let mut floor = div.floor();
    if div - floor > 0.5 {
        floor += 1.0;
    }
    floor
}

/// The window a wall-clock instant falls in.
pub fn window_index(now_s: f64, window_s: f64) -> i64 {
    py_floor_div(now_s, window_s) as i64
}

/// Python's `round(x, -digits)` for a float (correctly rounded, ties to even).
fn py_round_to_tens(x: f64, digits: i32) -> f64 {
    let unit = 10f64.powi(digits);
    let remainder = x % unit; // exact
    let base = x - remainder;
    let twice = remainder * 2.0; // exact
    let up = twice > unit || (twice == unit && (base / unit) % 2.0 != 0.0);
    if up {
        base + unit
    } else {
        base
    }
}

/// Locust's `bucket_response_time`: the response-time key of `StatsEntry.response_times`.
pub fn locust_bucket(response_time_ms: f64) -> i64 {
    if response_time_ms < 100.0 {
        response_time_ms.round_ties_even() as i64
    } else if response_time_ms < 1_000.0 {
        py_round_to_tens(response_time_ms, 1) as i64
    } else if response_time_ms < 10_000.0 {
        py_round_to_tens(response_time_ms, 2) as i64
    } else {
        py_round_to_tens(response_time_ms, 3) as i64
    }
}

/// The value a latency is recorded as (`LatencyStats.record_success`).
pub fn histogram_value_us(latency_ms: f64) -> u64 {
    let us = (latency_ms * 1000.0).round_ties_even();
    if us.is_nan() {
        return LOWEST_US;
    }
    us.clamp(LOWEST_US as f64, HIGHEST_US as f64) as u64
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS).expect("valid bounds")
}

/// `hdrh`'s `HdrHistogram.encode()`: base64 of the compressed V2 encoding.
pub fn encode_histogram(histogram: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(histogram, &mut bytes)
        .expect("an in-memory encoding");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `LatencyStats`: successes' latencies in a histogram, failures counted.
#[derive(Debug)]
pub struct LatencyStats {
    histogram: Option<Histogram<u64>>,
    pub successes: u64,
    pub failures: u64,
    pub sum_ms: f64,
    pub max_ms: f64,
    pub min_ms: f64,
}

impl Default for LatencyStats {
    fn default() -> LatencyStats {
        LatencyStats {
            histogram: None,
            successes: 0,
            failures: 0,
            sum_ms: 0.0,
            max_ms: 0.0,
            min_ms: f64::INFINITY,
        }
    }
}

/// `LatencyStats.to_wire()`'s content.
#[derive(Clone, Debug, PartialEq)]
pub struct WireStats {
    pub h: String,
    pub s: u64,
    pub f: u64,
    pub sum: f64,
    pub max: f64,
    pub min: f64,
}

impl LatencyStats {
    pub fn record_success(&mut self, latency_ms: f64) {
        let histogram = self.histogram.get_or_insert_with(new_histogram);
        histogram.saturating_record(histogram_value_us(latency_ms));
        self.successes += 1;
        self.sum_ms += latency_ms;
        if latency_ms > self.max_ms {
            self.max_ms = latency_ms;
        }
        if latency_ms < self.min_ms {
            self.min_ms = latency_ms;
        }
    }

    pub fn record_failure(&mut self) {
        self.failures += 1;
    }

    pub fn to_wire(&self) -> WireStats {
        let encoded = match (&self.histogram, self.successes) {
            (Some(histogram), n) if n > 0 => encode_histogram(histogram),
            _ => String::new(),
        };
        WireStats {
            h: encoded,
            s: self.successes,
            f: self.failures,
            sum: self.sum_ms,
            max: self.max_ms,
            min: if self.successes > 0 { self.min_ms } else { 0.0 },
        }
    }
}

/// One target's Locust statistics since the last drain (`StatsEntry` and its errors).
#[derive(Debug, Default)]
pub struct LocustEntry {
    pub num_requests: u64,
    pub num_failures: u64,
    pub total_response_time: f64,
    pub min_response_time: Option<f64>,
    pub max_response_time: f64,
    pub total_content_length: u64,
    pub response_times: HashMap<i64, u64>,
    pub num_reqs_per_sec: HashMap<i64, u64>,
    pub num_fail_per_sec: HashMap<i64, u64>,
    pub last_request_timestamp: f64,
    /// (class name, message) -> count, in the order first seen
    pub errors: Vec<(Failure, u64)>,
}

impl LocustEntry {
    /// `StatsEntry.log` (every request) and `log_error` (a failed one), at `now_s`.
    fn log(
        &mut self,
        response_time_ms: f64,
        content_length: u64,
        failure: Option<&Failure>,
        now_s: f64,
    ) {
        let second = now_s.floor() as i64;
        self.num_requests += 1;
        *self.num_reqs_per_sec.entry(second).or_insert(0) += 1;
        self.last_request_timestamp = now_s;
        self.total_response_time += response_time_ms;
        self.min_response_time = Some(
            self.min_response_time
                .map_or(response_time_ms, |m| m.min(response_time_ms)),
        );
        self.max_response_time = self.max_response_time.max(response_time_ms);
        *self
            .response_times
            .entry(locust_bucket(response_time_ms))
            .or_insert(0) += 1;
        self.total_content_length += content_length;
        if let Some(failure) = failure {
            self.num_failures += 1;
            *self.num_fail_per_sec.entry(second).or_insert(0) += 1;
            match self.errors.iter_mut().find(|(f, _)| f == failure) {
                Some((_, count)) => *count += 1,
                None => self.errors.push((failure.clone(), 1)),
            }
        }
    }
}

/// Refused attempts in one window: how many, the first and the last (wall clock, s).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RefusedWindow {
    pub count: u64,
    pub first: f64,
    pub last: f64,
}

/// One recorded request (a loop's or a sender's completed call).
#[derive(Clone, Debug)]
pub struct Completion<'a> {
    pub target: usize,
    /// a traced call that succeeded: (its id's number, sent ns, received ns) for the trace join
    pub traced: Option<(u64, u64, u64)>,
    pub latency_ms: f64,
    pub failure: Option<&'a Failure>,
    pub response_length: u64,
    /// wall clock at completion, s
    pub now_s: f64,
    /// open loop: actual send - intended, ms
    pub send_lag_ms: Option<f64>,
    /// a streamed request's responses and their times
    pub stream: Option<&'a StreamTiming>,
    /// a generation's figures and where its token count came from
    pub generation: Option<&'a (GenerationFigures, TokenSource)>,
    /// a conversation's turn (its position from 1): its generation is also counted by turn
    pub turn: Option<u32>,
}

/// One turn position of a target's conversations over the steady state (`TurnTotals` in
/// `measure/generation_record.py`): its generations' time to the first token, and the prompt tokens
/// the server counted for them, [generations counted, sum, min, max]. Recorded with the generation
/// itself, so the turns add up to the steady generations.
#[derive(Debug, Default)]
pub struct TurnTotals {
    pub ttft: LatencyStats,
    pub prompt_tokens: [u64; 4],
}

impl TurnTotals {
    fn record(&mut self, figures: &GenerationFigures) {
        if let Some(ttft) = figures.ttft_ms {
            self.ttft.record_success(ttft);
        }
        if let Some(tokens) = figures.prompt_tokens {
            let [counted, total, low, high] = self.prompt_tokens;
            self.prompt_tokens = [
                counted + 1,
                total + tokens,
                if counted == 0 {
                    tokens
                } else {
                    low.min(tokens)
                },
                if counted == 0 {
                    tokens
                } else {
                    high.max(tokens)
                },
            ];
        }
    }
}

/// One target's generations over the steady state (`measure/generation_record.py`).
#[derive(Debug, Default)]
pub struct GenerationTotals {
    /// send -> the second token
    pub ttst: LatencyStats,
    /// per request: (last content - first content) / (tokens - 1)
    pub tpot: LatencyStats,
    /// between tokens, each gap shared by the tokens of its event (token-weighted)
    pub itl: LatencyStats,
    /// the server's own times, of the generations it sent them for: prefill, decode per token,
    /// and the client's TTFT minus the prefill (floored at 0)
    pub server_prefill: LatencyStats,
    pub server_decode: LatencyStats,
    pub ttft_residual: LatencyStats,
    /// open loop: the time to the first token from the arrival's intended send (TTFT + send lag)
    pub ttft_intended: LatencyStats,
    /// [generations, output tokens, most tokens of one, counted by usage, by a tokenizer, by events,
    /// good (met the target's goodput thresholds), counted by both the server's usage and the
    /// target's tokenizer, of those the ones whose counts differ, their tokens by the tokenizer,
    /// their tokens by usage]
    pub counts: [u64; 11],
}

impl GenerationTotals {
    fn record(
        &mut self,
        figures: &GenerationFigures,
        source: TokenSource,
        send_lag_ms: Option<f64>,
    ) {
        if let (Some(ttft), Some(lag)) = (figures.ttft_ms, send_lag_ms) {
            self.ttft_intended.record_success(ttft + lag.max(0.0));
        }
        if let Some(ttst) = figures.ttst_ms {
            self.ttst.record_success(ttst);
        }
        if let Some(tpot) = figures.tpot_ms {
            self.tpot.record_success(tpot);
        }
        for gap in &figures.itl_ms {
            self.itl.record_success(*gap);
        }
        if let Some(prefill) = figures.server_prefill_ms {
            self.server_prefill.record_success(prefill);
        }
        if let Some(decode) = figures.server_decode_ms_per_token {
            self.server_decode.record_success(decode);
        }
        if let Some(residual) = figures.ttft_residual_ms {
            self.ttft_residual.record_success(residual.max(0.0));
        }
        self.counts[0] += 1;
        self.counts[1] += figures.output_tokens;
        self.counts[2] = self.counts[2].max(figures.output_tokens);
        self.counts[3 + source as usize] += 1;
        self.counts[6] += u64::from(figures.good == Some(true));
        if let (TokenSource::Usage, Some(counted)) = (source, figures.tokenizer_tokens) {
            self.counts[7] += 1;
            self.counts[8] += u64::from(counted != figures.output_tokens);
            self.counts[9] += counted;
            self.counts[10] += figures.output_tokens;
        }
    }
}

/// One target's streamed requests over the steady state (`StreamTotals`).
#[derive(Debug, Default)]
pub struct StreamTotals {
    pub first: LatencyStats,
    pub gaps: LatencyStats,
    /// streamed requests, their responses, the most one request got
    pub counts: [u64; 3],
}

fn add_counts(counts: &mut [u64; 3], responses: u64) {
    counts[0] += 1;
    counts[1] += responses;
    counts[2] = counts[2].max(responses);
}

/// Everything recorded since the last drain.
#[derive(Debug, Default)]
pub struct Recorder {
    pub windows: HashMap<(i64, usize), LatencyStats>,
    pub steady: HashMap<usize, LatencyStats>,
    pub warmup: HashMap<usize, LatencyStats>,
    pub lag_windows: HashMap<(i64, usize), LatencyStats>,
    pub lag_steady: HashMap<usize, LatencyStats>,
    pub arrival_windows: HashMap<(i64, usize), [u64; 2]>,
    pub arrivals_steady: HashMap<usize, [u64; 2]>,
    pub refused_windows: HashMap<(i64, usize), RefusedWindow>,
    pub locust: HashMap<usize, LocustEntry>,
    /// one row per request (`--requests-csv`): (wall clock s, target, latency ms, ok)
    pub rows: Vec<(f64, usize, f64, bool)>,
    /// traced calls that succeeded (`trace_id`): (target, number, sent ns, received ns), at most
    /// `MAX_TRACED` between drains; the rest counted
    pub traced: Vec<(usize, u64, u64, u64)>,
    pub traced_dropped: HashMap<usize, u64>,
    /// streamed requests (`measure/decoupled_record.py`): per window, and the steady totals
    pub stream_first: HashMap<(i64, usize), LatencyStats>,
    pub stream_gaps: HashMap<(i64, usize), LatencyStats>,
    pub stream_counts: HashMap<(i64, usize), [u64; 3]>,
    pub stream_steady: HashMap<usize, StreamTotals>,
    /// generations (`measure/generation_record.py`): per window, each generation's TPOT, its
    /// inter-token latencies (token-weighted) and [generations, output tokens, good, judged for
    /// goodput]; and the steady totals
    pub generation_tpot: HashMap<(i64, usize), LatencyStats>,
    pub generation_itl: HashMap<(i64, usize), LatencyStats>,
    pub generation_counts: HashMap<(i64, usize), [u64; 4]>,
    pub generation_steady: HashMap<usize, GenerationTotals>,
    /// conversations: each (target, turn position)'s steady generations (`TurnTotals`)
    pub generation_turns: HashMap<(usize, u32), TurnTotals>,
    /// open loop: each request's actual send time (wall clock s) by its window, for the burstiness
    /// sent (`RunRecord.record_send`, `measure/run_record.py`)
    pub send_times: HashMap<(i64, usize), Vec<f64>>,
}

/// The most traced calls kept between two drains (`ClientTraceRecords`' own bound, MAX_RECORDS).
pub const MAX_TRACED: usize = 2_000_000;

/// The settings recording follows (kept beside the recorder, not drained).
#[derive(Clone, Copy, Debug)]
pub struct RecordSettings {
    pub window_s: f64,
    pub warmup_end: Option<f64>,
    pub rows: bool,
}

impl RecordSettings {
    /// `RunRecord._in_steady`: no warm-up end set, or at or after it.
    fn in_steady(&self, t: f64) -> bool {
        match self.warmup_end {
            None => true,
            Some(end) => t >= end,
        }
    }
}

impl Recorder {
    /// `RunRecorder._on_request` + Locust's `log_request`/`log_error` + the request log's row.
    pub fn record(&mut self, settings: &RecordSettings, done: &Completion<'_>) {
        let now = done.now_s;
        let index = window_index(now, settings.window_s);
        let key = (index, done.target);
        let window = self.windows.entry(key).or_default();
        let totals = if settings.in_steady(now) {
            &mut self.steady
        } else {
            &mut self.warmup
        }
        .entry(done.target)
        .or_default();
        match done.failure {
            Some(failure) => {
                window.record_failure();
                totals.record_failure();
                if failure.is_refused() {
                    self.refused_windows
                        .entry(key)
                        .and_modify(|w| {
                            w.count += 1;
                            w.first = w.first.min(now);
                            w.last = w.last.max(now);
                        })
                        .or_insert(RefusedWindow {
                            count: 1,
                            first: now,
                            last: now,
                        });
                }
            }
            None => {
                window.record_success(done.latency_ms);
                totals.record_success(done.latency_ms);
            }
        }
        if let Some(lag_ms) = done.send_lag_ms {
            let lag = lag_ms.max(0.0);
            self.lag_windows.entry(key).or_default().record_success(lag);
            if settings.in_steady(now) {
                self.lag_steady
                    .entry(done.target)
                    .or_default()
                    .record_success(lag);
            }
            // latency counts from the intended time: sent = now - latency + lag (the unclamped lag)
            let sent = now - (done.latency_ms - lag_ms) / 1000.0;
            self.send_times
                .entry((window_index(sent, settings.window_s), done.target))
                .or_default()
                .push(sent);
        }
        let length = if done.failure.is_some() {
            0
        } else {
            done.response_length
        };
        self.locust
            .entry(done.target)
            .or_default()
            .log(done.latency_ms, length, done.failure, now);
        if settings.rows {
            self.rows
                .push((now, done.target, done.latency_ms, done.failure.is_none()));
        }
        if let Some((number, sent_ns, received_ns)) = done.traced {
            if self.traced.len() < MAX_TRACED {
                self.traced
                    .push((done.target, number, sent_ns, received_ns));
            } else {
                *self.traced_dropped.entry(done.target).or_default() += 1;
            }
        }
        if let (Some(timing), None) = (done.stream, done.failure) {
            self.record_stream(key, timing, settings.in_steady(now));
        }
        if let (Some((figures, source)), None) = (done.generation, done.failure) {
            if let Some(tpot) = figures.tpot_ms {
                self.generation_tpot
                    .entry(key)
                    .or_default()
                    .record_success(tpot);
            }
            if !figures.itl_ms.is_empty() {
                let itl = self.generation_itl.entry(key).or_default();
                for gap in &figures.itl_ms {
                    itl.record_success(*gap);
                }
            }
            let counts = self.generation_counts.entry(key).or_insert([0; 4]);
            counts[0] += 1;
            counts[1] += figures.output_tokens;
            counts[2] += u64::from(figures.good == Some(true));
            counts[3] += u64::from(figures.good.is_some());
            if settings.in_steady(now) {
                self.generation_steady
                    .entry(done.target)
                    .or_default()
                    .record(figures, *source, done.send_lag_ms);
                if let Some(turn) = done.turn {
                    self.generation_turns
                        .entry((done.target, turn))
                        .or_default()
                        .record(figures);
                }
            }
        }
    }

    /// `StreamRecord.record`: a successful streamed request that finished in window `key`.
    fn record_stream(&mut self, key: (i64, usize), timing: &StreamTiming, steady: bool) {
        if let Some(first) = timing.first_response_ms {
            self.stream_first
                .entry(key)
                .or_default()
                .record_success(first);
        }
        if !timing.gaps_ms.is_empty() {
            let gaps = self.stream_gaps.entry(key).or_default();
            for gap in &timing.gaps_ms {
                gaps.record_success(*gap);
            }
        }
        add_counts(
            self.stream_counts.entry(key).or_insert([0; 3]),
            timing.responses,
        );
        if steady {
            let totals = self.stream_steady.entry(key.1).or_default();
            if let Some(first) = timing.first_response_ms {
                totals.first.record_success(first);
            }
            for gap in &timing.gaps_ms {
                totals.gaps.record_success(*gap);
            }
            add_counts(&mut totals.counts, timing.responses);
        }
    }

    /// `record_arrival` (`unsent` false) or `record_unsent`, by intended time.
    pub fn record_arrival(
        &mut self,
        settings: &RecordSettings,
        target: usize,
        intended_s: f64,
        unsent: bool,
    ) {
        let slot = usize::from(unsent);
        self.arrival_windows
            .entry((window_index(intended_s, settings.window_s), target))
            .or_insert([0, 0])[slot] += 1;
        if settings.in_steady(intended_s) {
            self.arrivals_steady.entry(target).or_insert([0, 0])[slot] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::Deserializer;

    #[test]
    fn locust_rounds_as_bucket_response_time_does() {
        // Python: round() ties to even, round(x, -n) on the exact value of the float
        let cases = [
            (0.4, 0),
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (99.4, 99),
            (99.5, 100),
            (145.0, 140),
            (155.0, 160),
            (144.999, 140),
            (147.0, 150),
            (999.0, 1000),
            (3432.0, 3400),
            (3450.0, 3400),
            (3550.0, 3600),
            (58760.0, 59000),
            (12500.0, 12000),
            (13500.0, 14000),
        ];
        for (ms, bucket) in cases {
            assert_eq!(locust_bucket(ms), bucket, "{ms}");
        }
    }

    #[test]
    fn windows_are_python_floor_divisions() {
        assert_eq!(window_index(1_700_000_000.999, 1.0), 1_700_000_000);
        assert_eq!(window_index(10.0, 2.5), 4);
        assert_eq!(window_index(1.0, 0.1), 9); // Python: 1.0 // 0.1 == 9.0
        assert_eq!(window_index(-0.5, 1.0), -1);
        assert_eq!(py_floor_div(7.5, 2.0), 3.0);
    }

    #[test]
    fn histogram_values_are_rounded_microseconds_clamped() {
        assert_eq!(histogram_value_us(0.0), 1);
        assert_eq!(histogram_value_us(0.0005), 1); // round(0.5) == 0, clamped to 1
        assert_eq!(histogram_value_us(0.0025), 2); // round(2.5) == 2
        assert_eq!(histogram_value_us(1.2345), 1234); // 1.2345 * 1000 == 1234.4999999999998
        assert_eq!(histogram_value_us(1e12), HIGHEST_US);
    }

    #[test]
    fn an_encoded_histogram_decodes_to_the_same_counts() {
        let mut stats = LatencyStats::default();
        for ms in [0.1, 0.25, 1.0, 1.0, 2.5, 30.0, 5000.0] {
            stats.record_success(ms);
        }
        stats.record_failure();
        let wire = stats.to_wire();
        assert_eq!((wire.s, wire.f, wire.max, wire.min), (7, 1, 5000.0, 0.1));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&wire.h)
            .unwrap();
        assert_eq!(&bytes[..4], &[0x1c, 0x84, 0x93, 0x14]); // the compressed V2 cookie hdrh checks
        let decoded: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        assert_eq!(decoded.len(), 7);
        assert_eq!(
            decoded.value_at_quantile(0.5),
            stats.histogram.as_ref().unwrap().value_at_quantile(0.5)
        );
        assert_eq!(
            LatencyStats::default().to_wire(),
            WireStats {
                h: String::new(),
                s: 0,
                f: 0,
                sum: 0.0,
                max: 0.0,
                min: 0.0
            }
        );
    }

    /// A 30 ms call of target 0 that ended at `now_s`, with its generation's figures.
    fn generation_done<'a>(
        generation: Option<&'a (GenerationFigures, TokenSource)>,
        failure: Option<&'a Failure>,
        now_s: f64,
        turn: Option<u32>,
    ) -> Completion<'a> {
        Completion {
            traced: None,
            target: 0,
            latency_ms: 30.0,
            failure,
            response_length: 16,
            now_s,
            send_lag_ms: None,
            stream: None,
            generation,
            turn,
        }
    }

    #[test]
    fn a_conversation_s_turns_are_counted_with_their_generations_so_they_add_up() {
        let settings = RecordSettings {
            window_s: 1.0,
            warmup_end: Some(100.5),
            rows: false,
        };
        let mut recorder = Recorder::default();
        let failed = Failure::refused("h:1");
        let turn = |prompt_tokens, ttft_ms| {
            (
                GenerationFigures {
                    ttft_ms: Some(ttft_ms),
                    prompt_tokens: Some(prompt_tokens),
                    output_tokens: 4,
                    ..GenerationFigures::default()
                },
                TokenSource::Usage,
            )
        };
        let (first, second, second_longer) = (turn(10, 20.0), turn(30, 25.0), turn(34, 26.0));
        let done = generation_done;
        recorder.record(&settings, &done(Some(&first), None, 100.2, Some(1))); // warm-up: not counted
        recorder.record(&settings, &done(Some(&first), None, 100.6, Some(1)));
        recorder.record(&settings, &done(Some(&second), None, 100.7, Some(2)));
        recorder.record(&settings, &done(Some(&second_longer), None, 100.8, Some(2)));
        recorder.record(
            &settings,
            &done(Some(&second), Some(&failed), 100.9, Some(2)),
        ); // failed: not counted
        recorder.record(&settings, &done(Some(&first), None, 101.0, None)); // not a conversation's
        let turns = &recorder.generation_turns;
        assert_eq!(turns[&(0, 1)].prompt_tokens, [1, 10, 10, 10]);
        assert_eq!(turns[&(0, 2)].prompt_tokens, [2, 64, 30, 34]);
        assert_eq!(turns[&(0, 2)].ttft.successes, 2);
        let by_turn: u64 = turns.values().map(|t| t.prompt_tokens[0]).sum();
        assert_eq!(by_turn + 1, recorder.generation_steady[&0].counts[0]); // all but the one of no turn
    }

    #[test]
    fn a_steady_successful_generation_is_counted_with_its_token_source_and_goodput() {
        let settings = RecordSettings {
            window_s: 1.0,
            warmup_end: Some(100.5),
            rows: false,
        };
        let mut recorder = Recorder::default();
        let failed = Failure::refused("h:1");
        let figures = GenerationFigures {
            ttst_ms: Some(20.0),
            tpot_ms: Some(5.0),
            itl_ms: vec![5.0, 5.0, 5.0],
            output_tokens: 4,
            content_events: 4,
            good: Some(true),
            // the target's tokenizer counted one more than the server's usage
            tokenizer_tokens: Some(5),
            ..GenerationFigures::default()
        };
        let by_usage = (figures.clone(), TokenSource::Usage);
        // a server that sent its times: a prefill longer than the client's TTFT floors the residual at 0
        let slow = GenerationFigures {
            good: Some(false),
            server_prefill_ms: Some(3.0),
            server_decode_ms_per_token: Some(1.5),
            ttft_residual_ms: Some(-0.2),
            ..figures
        };
        let by_events = (slow, TokenSource::Events);
        let done = |generation, failure, now_s| generation_done(generation, failure, now_s, None);
        recorder.record(&settings, &done(Some(&by_usage), None, 100.2)); // warm-up: not counted
        recorder.record(&settings, &done(Some(&by_usage), None, 100.6));
        recorder.record(&settings, &done(Some(&by_events), None, 100.7));
        recorder.record(&settings, &done(Some(&by_usage), Some(&failed), 100.8));
        let totals = &recorder.generation_steady[&0];
        // the tokenizer's count is compared with usage's only where the server sent one
        assert_eq!(totals.counts, [2, 8, 4, 1, 0, 1, 1, 1, 1, 5, 4]);
        // the window counts every successful generation, warm-up or not; a failure is never good
        assert_eq!(recorder.generation_counts[&(100, 0)], [3, 12, 2, 3]);
        assert_eq!(recorder.generation_tpot[&(100, 0)].successes, 3);
        // each generation's three token gaps, in the window it ended in
        assert_eq!(recorder.generation_itl[&(100, 0)].successes, 9);
        assert_eq!(
            (
                totals.ttst.successes,
                totals.tpot.successes,
                totals.itl.successes
            ),
            (2, 2, 6)
        );
        assert_eq!(
            (
                totals.server_prefill.successes,
                totals.server_decode.successes,
                totals.ttft_residual.successes,
                totals.ttft_residual.max_ms
            ),
            (1, 1, 1, 0.0)
        );
    }

    #[test]
    fn in_open_loop_a_generation_s_ttft_is_also_timed_from_its_intended_send() {
        let settings = RecordSettings {
            window_s: 1.0,
            warmup_end: Some(100.0),
            rows: false,
        };
        let mut recorder = Recorder::default();
        let figures = (
            GenerationFigures {
                ttft_ms: Some(20.0),
                ..GenerationFigures::default()
            },
            TokenSource::Events,
        );
        for send_lag_ms in [Some(5.0), None] {
            recorder.record(
                &settings,
                &Completion {
                    traced: None,
                    target: 0,
                    latency_ms: 30.0,
                    failure: None,
                    response_length: 16,
                    now_s: 100.5,
                    send_lag_ms,
                    stream: None,
                    generation: Some(&figures),
                    turn: None,
                },
            );
        }
        let intended = &recorder.generation_steady[&0].ttft_intended;
        assert_eq!((intended.successes, intended.sum_ms), (1, 25.0));
    }

    #[test]
    fn completions_land_in_their_window_phase_and_locust_entry() {
        let settings = RecordSettings {
            window_s: 1.0,
            warmup_end: Some(100.5),
            rows: true,
        };
        let mut recorder = Recorder::default();
        let refused = Failure::refused("h:1");
        let done = |latency_ms, failure, now_s| Completion {
            traced: None,
            target: 0,
            latency_ms,
            failure,
            response_length: 16,
            now_s,
            send_lag_ms: None,
            stream: None,
            generation: None,
            turn: None,
        };
        recorder.record(&settings, &done(2.0, None, 100.2));
        recorder.record(&settings, &done(3.0, Some(&refused), 100.7));
        recorder.record(&settings, &done(4.0, Some(&refused), 100.9));
        recorder.record(&settings, &done(5.0, None, 101.1));
        assert_eq!(recorder.warmup[&0].successes, 1);
        assert_eq!(
            (recorder.steady[&0].successes, recorder.steady[&0].failures),
            (1, 2)
        );
        assert_eq!(
            (
                recorder.windows[&(100, 0)].successes,
                recorder.windows[&(100, 0)].failures
            ),
            (1, 2)
        );
        assert_eq!(
            recorder.refused_windows[&(100, 0)],
            RefusedWindow {
                count: 2,
                first: 100.7,
                last: 100.9
            }
        );
        let entry = &recorder.locust[&0];
        assert_eq!(
            (
                entry.num_requests,
                entry.num_failures,
                entry.total_content_length
            ),
            (4, 2, 32)
        );
        assert_eq!(
            (
                entry.total_response_time,
                entry.min_response_time,
                entry.max_response_time
            ),
            (14.0, Some(2.0), 5.0)
        );
        assert_eq!(entry.num_reqs_per_sec[&100], 3);
        assert_eq!(entry.num_fail_per_sec[&100], 2);
        assert_eq!(entry.errors, vec![(refused.clone(), 2)]);
        assert_eq!(recorder.rows.len(), 4);
        recorder.record_arrival(&settings, 0, 100.4, false);
        recorder.record_arrival(&settings, 0, 100.6, false);
        recorder.record_arrival(&settings, 0, 100.6, true);
        assert_eq!(recorder.arrival_windows[&(100, 0)], [2, 1]);
        assert_eq!(recorder.arrivals_steady[&0], [1, 1]);
        assert!(recorder.send_times.is_empty()); // closed loop: no send times
    }

    #[test]
    fn an_open_loop_completion_keeps_its_send_time_in_the_window_it_was_sent() {
        let settings = RecordSettings {
            window_s: 1.0,
            warmup_end: None,
            rows: false,
        };
        let mut recorder = Recorder::default();
        // intended at 100.95, sent 2 ms late (100.952), answered at 101.010: latency 60 ms from the intended time
        recorder.record(
            &settings,
            &Completion {
                traced: None,
                target: 1,
                latency_ms: 60.0,
                failure: None,
                response_length: 0,
                now_s: 101.01,
                send_lag_ms: Some(2.0),
                stream: None,
                generation: None,
                turn: None,
            },
        );
        let sent = &recorder.send_times[&(100, 1)];
        assert_eq!(sent.len(), 1);
        assert!((sent[0] - 100.952).abs() < 1e-9, "{sent:?}");
    }
}
