//! One streamed generation's figures, defined once (docs/llm.md): which events carry content, and
//! TTFT, TTST, E2E, TPOT, the per-token ITL and the per-event ICL from their stamps.
//!
//! An event carries content when it brings generated text: an OpenAI chat chunk's
//! `choices[].delta.content` (or `reasoning_content`), a completions chunk's `choices[].text`, a
//! Triton `generate_stream` event's `text_output`, non-empty. A role-only prelude, a chunk with only
//! a `finish_reason`, a usage-only tail (`"choices": []`), keep-alive comments (never events:
//! `sse.rs`) and `[DONE]` are not tokens. An `error` member (or an `event: error`) fails the
//! generation: what was measured before it is kept, and the failure says what the server wrote.
//!
//! Times are from the send (CLOCK_MONOTONIC ns; in open loop the caller may also give the
//! arrival's intended send time):
//! - TTFT: the first content event; TTST: the event that brought the second token;
//! - E2E: the last content event (the stream's close is kept apart, `closed_ns`);
//! - TPOT = (last − first content) / (N − 1), N the output tokens;
//! - ITL, per token: an event after the first carrying k tokens contributes its gap to the previous
//!   content event divided by k, k times (a chunk of several tokens is not one slow token);
//!   ICL: the raw gaps between content events, one per event.
//!
//! N is the server's `usage.completion_tokens` when it sent one, else the tokens counted per event
//! (the caller's tokenizer), else one per content event; `token_source` says which. A tokenizer
//! (`tokens_per_event`) counts the generation's whole text once: a token whose bytes came in two
//! events belongs to the event of its last byte, so an event may carry none; the tokens of every
//! event still weight the ITL and the TTST when the server's usage gives N, and the tokenizer's N
//! is kept beside the server's (`tokenizer_tokens`) to say how far they differ.
//!
//! Goodput: a generation is good when it meets every per-request threshold its target sets
//! (`Goodput`: TTFT, TPOT, E2E); a failed request is never good.
//!
//! The server's own times, when it sends them (llama.cpp's `timings`: `prompt_ms`, `predicted_ms`,
//! `predicted_n`), join the client's per request: its prefill, its decode time per token, and the
//! client's TTFT minus the server's prefill (the TTFT residual: queueing, transport, the first
//! token's sampling).

use std::sync::Arc;

use serde_json::Value;
use tokenizers::Tokenizer;

/// The wire format of a stream's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFormat {
    OpenAiChat,
    OpenAiCompletions,
    TritonGenerate,
}

impl StreamFormat {
    /// Whether the server ends a whole stream with `data: [DONE]` (OpenAI's formats); Triton's
    /// `generate_stream` ends it by ending the body, so a cut stream cannot be told from a whole one.
    pub fn ends_with_done(self) -> bool {
        self != StreamFormat::TritonGenerate
    }
}

/// What one event is, to the figures.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    /// generated text (the event's share of it)
    Content(String),
    /// the server's count of the generated tokens (an event may bring content and usage both)
    Usage(u64),
    /// the server's count of the prompt's tokens (`usage.prompt_tokens`: a conversation's turn
    /// shows its history in it)
    PromptUsage(u64),
    /// `[DONE]`: the stream's end as the server says it
    Done,
    /// the server reports an error; its message
    Error(String),
    /// the server's own times for the generation (llama.cpp's `timings`)
    Timings(ServerTimings),
    /// a role prelude, a finish reason alone, any event with nothing to count
    Nothing,
}

/// What a server says it spent on one generation (llama.cpp's `timings`), ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerTimings {
    /// processing the prompt (prefill)
    pub prompt_ms: f64,
    /// generating the tokens after it
    pub predicted_ms: f64,
    /// the tokens it generated
    pub predicted_n: u64,
}

fn server_timings(value: &Value) -> Option<ServerTimings> {
    let number = |key: &str| {
        value
            .get(key)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    Some(ServerTimings {
        prompt_ms: number("prompt_ms")?,
        predicted_ms: number("predicted_ms")?,
        predicted_n: value
            .get("predicted_n")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// The kinds of one event (content and usage may come together); an error when the data is not JSON.
pub fn classify(format: StreamFormat, name: &str, data: &str) -> Result<Vec<EventKind>, String> {
    if data.trim() == "[DONE]" {
        return Ok(vec![EventKind::Done]);
    }
    let value: Value = serde_json::from_str(data)
        .map_err(|error| format!("an event is not JSON ({error}): {}", cut(data)))?;
    if name == "error" || value.get("error").is_some_and(|e| !e.is_null()) {
        let error = value.get("error").unwrap_or(&value);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| error.as_str().map(str::to_owned))
            .unwrap_or_else(|| error.to_string());
        return Ok(vec![EventKind::Error(message)]);
    }
    let mut kinds = Vec::new();
    let text: String = match format {
        StreamFormat::TritonGenerate => value
            .get("text_output")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        StreamFormat::OpenAiChat | StreamFormat::OpenAiCompletions => value
            .get("choices")
            .and_then(Value::as_array)
            .map(|choices| {
                choices
                    .iter()
                    .filter_map(|choice| match format {
                        StreamFormat::OpenAiCompletions => {
                            choice.get("text").and_then(Value::as_str)
                        }
                        _ => choice.get("delta").and_then(|delta| {
                            delta
                                .get("content")
                                .and_then(Value::as_str)
                                .filter(|text| !text.is_empty())
                                .or_else(|| delta.get("reasoning_content").and_then(Value::as_str))
                        }),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    if !text.is_empty() {
        kinds.push(EventKind::Content(text));
    }
    let usage = value.get("usage");
    if let Some(tokens) = usage
        .and_then(|usage| usage.get("completion_tokens"))
        .and_then(Value::as_u64)
    {
        kinds.push(EventKind::Usage(tokens));
    }
    if let Some(tokens) = usage
        .and_then(|usage| usage.get("prompt_tokens"))
        .and_then(Value::as_u64)
    {
        kinds.push(EventKind::PromptUsage(tokens));
    }
    if let Some(timings) = value.get("timings").and_then(server_timings) {
        kinds.push(EventKind::Timings(timings));
    }
    if kinds.is_empty() {
        kinds.push(EventKind::Nothing);
    }
    Ok(kinds)
}

fn cut(text: &str) -> &str {
    match text.char_indices().nth(200) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Where N came from (its number: the place of its count in the recorder's totals).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenSource {
    Usage = 0,
    Tokenizer = 1,
    Events = 2,
}

/// The tokens each content event completed, `texts` being the events' texts in order: the
/// generation's text is counted once (no special tokens added), and each token belongs to the
/// event that brought its last byte.
pub fn tokens_per_event(tokenizer: &Tokenizer, texts: &[String]) -> Result<Vec<u64>, String> {
    let mut whole = String::with_capacity(texts.iter().map(String::len).sum());
    let mut ends = Vec::with_capacity(texts.len());
    for text in texts {
        whole.push_str(text);
        ends.push(whole.len());
    }
    let encoding = tokenizer
        .encode(whole.as_str(), false)
        .map_err(|e| format!("the tokenizer could not count the text: {e}"))?;
    let mut counts = vec![0u64; texts.len()];
    if counts.is_empty() {
        return Ok(counts);
    }
    for &(start, end) in encoding.get_offsets() {
        let last_byte = if end > start { end - 1 } else { start };
        let event = ends.partition_point(|&event_end| event_end <= last_byte);
        counts[event.min(texts.len() - 1)] += 1;
    }
    Ok(counts)
}

/// A target's tokenizer, read from the file it names (Hugging Face's `tokenizer.json`); two are
/// equal when their files are.
#[derive(Clone)]
pub struct TokenizerFile {
    pub path: String,
    pub tokenizer: Arc<Tokenizer>,
}

impl TokenizerFile {
    pub fn load(path: &str) -> Result<TokenizerFile, String> {
        let tokenizer = Tokenizer::from_file(path)
            .map_err(|e| format!("cannot read a tokenizer from {path}: {e}"))?;
        Ok(TokenizerFile {
            path: path.to_owned(),
            tokenizer: Arc::new(tokenizer),
        })
    }
}

impl PartialEq for TokenizerFile {
    fn eq(&self, other: &TokenizerFile) -> bool {
        self.path == other.path
    }
}

impl std::fmt::Debug for TokenizerFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenizerFile({:?})", self.path)
    }
}

/// One content event: when it came and how many tokens it carried (None: not counted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ContentArrival {
    pub at_ns: u64,
    pub tokens: Option<u64>,
}

/// One generation's figures (milliseconds from the send).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationFigures {
    pub ttft_ms: Option<f64>,
    pub ttst_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    /// per token (token-weighted)
    pub itl_ms: Vec<f64>,
    /// per event after the first
    pub icl_ms: Vec<f64>,
    pub output_tokens: u64,
    pub content_events: u64,
    /// whether it met its target's goodput thresholds (None: the target sets none)
    pub good: Option<bool>,
    /// the server's prefill (its `prompt_ms`), when it sent its times
    pub server_prefill_ms: Option<f64>,
    /// the server's decode time per generated token (`predicted_ms / predicted_n`)
    pub server_decode_ms_per_token: Option<f64>,
    /// the client's TTFT minus the server's prefill
    pub ttft_residual_ms: Option<f64>,
    /// N as the target's tokenizer counted it, when it names one
    pub tokenizer_tokens: Option<u64>,
    /// the prompt's tokens as the server counted them (its `usage`), when it sent them
    pub prompt_tokens: Option<u64>,
}

/// A generative target's per-request thresholds, ms (None: not judged; read from `check.goodput`).
#[derive(Clone, Copy, Debug, Default, PartialEq, pyo3::FromPyObject)]
#[pyo3(from_item_all)]
pub struct Goodput {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Goodput {
    /// Whether a generation meets every threshold: a generation with no content event has no
    /// TTFT or E2E and meets neither; one token has no TPOT, which breaks no TPOT threshold.
    pub fn met_by(&self, found: &GenerationFigures) -> bool {
        let within =
            |value: Option<f64>, limit: Option<f64>, missing_meets: bool| match (value, limit) {
                (_, None) => true,
                (Some(value), Some(limit)) => value <= limit,
                (None, Some(_)) => missing_meets,
            };
        within(found.ttft_ms, self.ttft_ms, false)
            && within(found.tpot_ms, self.tpot_ms, true)
            && within(found.e2e_ms, self.e2e_ms, false)
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The figures of the content events of one generation sent at `sent_ns`; `usage`: the server's
/// count; `timings`: the server's own times.
pub fn figures(
    sent_ns: u64,
    events: &[ContentArrival],
    usage: Option<u64>,
    timings: Option<ServerTimings>,
) -> (GenerationFigures, TokenSource) {
    let counted = events.iter().all(|event| event.tokens.is_some());
    let per_event = |event: &ContentArrival| {
        if counted {
            event.tokens.unwrap_or(1)
        } else {
            1
        }
    };
    let (output_tokens, source) = match usage {
        Some(tokens) => (tokens, TokenSource::Usage),
        None if counted && !events.is_empty() => {
            (events.iter().map(per_event).sum(), TokenSource::Tokenizer)
        }
        None => (events.len() as u64, TokenSource::Events),
    };
    let mut found = GenerationFigures {
        output_tokens,
        content_events: events.len() as u64,
        ..GenerationFigures::default()
    };
    if let Some(timings) = timings {
        found.server_prefill_ms = Some(timings.prompt_ms);
        found.server_decode_ms_per_token =
            (timings.predicted_n > 0).then(|| timings.predicted_ms / timings.predicted_n as f64);
    }
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return (found, source);
    };
    let since_send = |at: u64| ms(at.saturating_sub(sent_ns));
    found.ttft_ms = Some(since_send(first.at_ns));
    found.ttft_residual_ms = timings.map(|timings| since_send(first.at_ns) - timings.prompt_ms);
    found.e2e_ms = Some(since_send(last.at_ns));
    let mut seen = 0;
    for event in events {
        seen += per_event(event);
        if seen >= 2 {
            found.ttst_ms = Some(since_send(event.at_ns));
            break;
        }
    }
    if output_tokens >= 2 {
        found.tpot_ms = Some(ms(last.at_ns - first.at_ns) / (output_tokens - 1) as f64);
    }
    for pair in events.windows(2) {
        found
            .icl_ms
            .push(ms(pair[1].at_ns.saturating_sub(pair[0].at_ns)));
    }
    // each event that completed k tokens shares its gap to the last event that completed one
    let mut last_token_at = None;
    for event in events {
        let k = per_event(event);
        if k == 0 {
            continue;
        }
        if let Some(before) = last_token_at {
            let gap = ms(event.at_ns.saturating_sub(before));
            found
                .itl_ms
                .extend(std::iter::repeat(gap / k as f64).take(k as usize));
        }
        last_token_at = Some(event.at_ns);
    }
    (found, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(format: StreamFormat, data: &str) -> Vec<EventKind> {
        classify(format, "", data).unwrap()
    }

    #[test]
    fn a_role_prelude_a_finish_reason_a_usage_tail_and_done_are_not_content() {
        let chat = StreamFormat::OpenAiChat;
        let prelude = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(kinds(chat, prelude), vec![EventKind::Nothing]);
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
        assert_eq!(kinds(chat, finish), vec![EventKind::Nothing]);
        let tail = r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":16,"total_tokens":21}}"#;
        assert_eq!(
            kinds(chat, tail),
            vec![EventKind::Usage(16), EventKind::PromptUsage(5)]
        );
        assert_eq!(kinds(chat, "[DONE]"), vec![EventKind::Done]);
    }

    #[test]
    fn each_format_s_text_is_its_content() {
        let chat = r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        assert_eq!(
            kinds(StreamFormat::OpenAiChat, chat),
            vec![EventKind::Content("Hi".into())]
        );
        let completion = r#"{"choices":[{"index":0,"text":" there","finish_reason":null}]}"#;
        assert_eq!(
            kinds(StreamFormat::OpenAiCompletions, completion),
            vec![EventKind::Content(" there".into())]
        );
        let triton = r#"{"model_name":"llm","model_version":"1","text_output":"abc"}"#;
        assert_eq!(
            kinds(StreamFormat::TritonGenerate, triton),
            vec![EventKind::Content("abc".into())]
        );
        let with_usage =
            r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":3}}"#;
        assert_eq!(
            kinds(StreamFormat::OpenAiChat, with_usage),
            vec![EventKind::Content("x".into()), EventKind::Usage(3)]
        );
    }

    #[test]
    fn only_openai_streams_end_with_done() {
        assert!(
            StreamFormat::OpenAiChat.ends_with_done()
                && StreamFormat::OpenAiCompletions.ends_with_done()
        );
        assert!(!StreamFormat::TritonGenerate.ends_with_done());
    }

    #[test]
    fn an_error_mid_stream_says_what_the_server_wrote_and_bad_json_is_an_error() {
        let error = r#"{"error":{"message":"context full","type":"server_error"}}"#;
        assert_eq!(
            kinds(StreamFormat::OpenAiChat, error),
            vec![EventKind::Error("context full".into())]
        );
        assert_eq!(
            classify(StreamFormat::TritonGenerate, "error", r#"{"error":"boom"}"#).unwrap(),
            vec![EventKind::Error("boom".into())]
        );
        assert!(classify(StreamFormat::OpenAiChat, "", "{not json")
            .unwrap_err()
            .starts_with("an event is not JSON"));
    }

    #[test]
    fn a_generation_is_good_when_it_meets_every_threshold_set() {
        let found = GenerationFigures {
            ttft_ms: Some(40.0),
            tpot_ms: Some(8.0),
            e2e_ms: Some(200.0),
            ..GenerationFigures::default()
        };
        let limits = |ttft, tpot, e2e| Goodput {
            ttft_ms: ttft,
            tpot_ms: tpot,
            e2e_ms: e2e,
        };
        assert!(limits(Some(40.0), Some(8.0), Some(200.0)).met_by(&found));
        assert!(limits(None, None, None).met_by(&found));
        assert!(!limits(Some(39.9), None, None).met_by(&found));
        assert!(!limits(None, Some(7.9), None).met_by(&found));
        assert!(!limits(None, None, Some(199.0)).met_by(&found));
        let one_token = GenerationFigures {
            tpot_ms: None,
            ..found.clone()
        };
        assert!(limits(None, Some(1.0), None).met_by(&one_token));
        let empty = GenerationFigures::default();
        assert!(!limits(Some(1e9), None, None).met_by(&empty));
        assert!(!limits(None, None, Some(1e9)).met_by(&empty));
    }

    fn at(ms: u64, tokens: Option<u64>) -> ContentArrival {
        ContentArrival {
            at_ns: ms * 1_000_000,
            tokens,
        }
    }

    #[test]
    fn ttft_e2e_and_tpot_come_from_the_content_events_and_the_server_s_count() {
        // sent at 0; content at 50, 60, 70, 80 ms; the server says 4 tokens
        let events = [at(50, None), at(60, None), at(70, None), at(80, None)];
        let (found, source) = figures(0, &events, Some(4), None);
        assert_eq!(source, TokenSource::Usage);
        assert_eq!(
            (found.ttft_ms, found.ttst_ms, found.e2e_ms),
            (Some(50.0), Some(60.0), Some(80.0))
        );
        assert_eq!(found.tpot_ms, Some(10.0));
        assert_eq!(found.itl_ms, vec![10.0, 10.0, 10.0]);
        assert_eq!(found.icl_ms, vec![10.0, 10.0, 10.0]);
    }

    #[test]
    fn an_event_of_k_tokens_gives_its_gap_over_k_k_times() {
        // 1 token at 50 ms, then 3 tokens at 80 ms, then 1 at 90 ms
        let events = [at(50, Some(1)), at(80, Some(3)), at(90, Some(1))];
        let (found, source) = figures(0, &events, None, None);
        assert_eq!((source, found.output_tokens), (TokenSource::Tokenizer, 5));
        assert_eq!(found.itl_ms, vec![10.0, 10.0, 10.0, 10.0]);
        assert_eq!(found.icl_ms, vec![30.0, 10.0]);
        assert_eq!(found.ttst_ms, Some(80.0));
        assert_eq!(found.tpot_ms, Some(10.0));
        // the first event's second token is its own second token: TTST is TTFT
        let (found, _) = figures(0, &[at(50, Some(2)), at(60, Some(1))], None, None);
        assert_eq!(found.ttst_ms, Some(50.0));
    }

    #[test]
    fn an_event_that_completes_no_token_adds_its_gap_to_the_next_one_s() {
        // 1 token at 50 ms; an event at 60 ms ends inside a token that the event at 80 ms completes
        let events = [at(50, Some(1)), at(60, Some(0)), at(80, Some(1))];
        let (found, source) = figures(0, &events, Some(2), None);
        assert_eq!((source, found.output_tokens), (TokenSource::Usage, 2));
        assert_eq!(found.itl_ms, vec![30.0]);
        assert_eq!(found.icl_ms, vec![10.0, 20.0]);
        assert_eq!(found.ttst_ms, Some(80.0));
    }

    /// A unigram tokenizer of a few whole words (each after SentencePiece's word mark) with
    /// byte fallback, as `inferload.local.models.llm.write_tokenizer` writes them.
    fn words_tokenizer() -> Tokenizer {
        let mut vocab = vec![r#"["<unk>", 0.0]"#.to_owned()];
        vocab.extend((0..256).map(|b| format!(r#"["<0x{b:02X}>", 0.0]"#)));
        vocab.extend(
            ["the", "storm", "lamp"]
                .iter()
                .enumerate()
                .map(|(rank, word)| format!(r#"["\u2581{word}", -{rank}.0]"#)),
        );
        let json = format!(
            r#"{{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
                "normalizer": {{"type": "Replace", "pattern": {{"String": " "}}, "content": "\u2581"}},
                "pre_tokenizer": null, "post_processor": null, "decoder": null,
                "model": {{"type": "Unigram", "unk_id": 0, "vocab": [{}], "byte_fallback": true}}}}"#,
            vocab.join(", ")
        );
        Tokenizer::from_bytes(json.as_bytes()).expect("a tokenizer")
    }

    #[test]
    fn a_tokenizer_counts_the_whole_text_and_gives_each_token_to_the_event_of_its_last_byte() {
        let tokenizer = words_tokenizer();
        let texts = |parts: &[&str]| parts.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        // one word per event
        assert_eq!(
            tokens_per_event(&tokenizer, &texts(&[" the", " storm", " lamp"])).unwrap(),
            vec![1, 1, 1]
        );
        // two words in one event, a word split across two: its token is the second event's
        assert_eq!(
            tokens_per_event(&tokenizer, &texts(&[" the storm", " la", "mp"])).unwrap(),
            vec![2, 0, 1]
        );
        // a character the vocabulary lacks falls back to its bytes (é: two), in the event it came in
        assert_eq!(
            tokens_per_event(&tokenizer, &texts(&[" the", "\u{e9}"])).unwrap(),
            vec![1, 2]
        );
        assert!(tokens_per_event(&tokenizer, &[]).unwrap().is_empty());
    }

    #[test]
    fn without_a_count_each_event_is_one_token_and_no_content_gives_no_times() {
        let (found, source) = figures(5_000_000, &[at(25, None), at(45, None)], None, None);
        assert_eq!(
            (source, found.output_tokens, found.ttft_ms, found.tpot_ms),
            (TokenSource::Events, 2, Some(20.0), Some(20.0))
        );
        let (found, source) = figures(0, &[], Some(0), None);
        assert_eq!(
            (source, found.ttft_ms, found.e2e_ms, found.itl_ms.len()),
            (TokenSource::Usage, None, None, 0)
        );
    }

    #[test]
    fn a_server_s_timings_join_the_client_s_figures() {
        // llama.cpp's usage tail: prefill 12 ms, 4 tokens decoded in 30 ms
        let tail = r#"{"choices":[],"usage":{"completion_tokens":4},"timings":{"cache_n":0,"prompt_n":25,"prompt_ms":12.0,"predicted_n":4,"predicted_ms":30.0}}"#;
        let timings = ServerTimings {
            prompt_ms: 12.0,
            predicted_ms: 30.0,
            predicted_n: 4,
        };
        assert_eq!(
            kinds(StreamFormat::OpenAiChat, tail),
            vec![EventKind::Usage(4), EventKind::Timings(timings)]
        );
        // timings without a prefill time are no timings
        let partial = r#"{"choices":[],"timings":{"predicted_ms":30.0}}"#;
        assert_eq!(
            kinds(StreamFormat::OpenAiChat, partial),
            vec![EventKind::Nothing]
        );
        let events = [at(50, None), at(60, None), at(70, None), at(80, None)];
        let (found, _) = figures(0, &events, Some(4), Some(timings));
        assert_eq!(
            (
                found.server_prefill_ms,
                found.server_decode_ms_per_token,
                found.ttft_residual_ms
            ),
            (Some(12.0), Some(7.5), Some(38.0))
        );
        let (without, _) = figures(0, &events, Some(4), None);
        assert_eq!(
            (without.server_prefill_ms, without.ttft_residual_ms),
            (None, None)
        );
    }
}
