//! The reference server's configuration: one JSON structure (the Python launcher also reads it
//! from YAML), every key optional, validated with errors that name the key path.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

/// The most a batching model's `max_batch_size` may be.
pub const MAX_BATCH_LIMIT: u32 = 65_536;
/// The most bytes one answer's outputs may take (batch × every output's item size).
pub const MAX_ANSWER_BYTES: u64 = 1 << 30;
/// The longest scripted hold, in milliseconds (one hour).
pub const MAX_HOLD_MS: f64 = 3_600_000.0;
/// The most records the buffer may be asked to keep.
pub const MAX_RECORD_CAPACITY: usize = 100_000_000;

/// A configuration error: the key path (`delay.median_ms`) and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key_path: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key_path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.key_path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

fn problem(key_path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key_path: key_path.into(),
        message: message.into(),
    }
}

/// One tensor of the model: name, KServe v2 datatype (`FP32`, ...) and per-item dims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorConfig {
    pub name: String,
    #[serde(default = "default_datatype")]
    pub datatype: String,
    #[serde(default = "default_dims")]
    pub dims: Vec<i64>,
}

fn default_datatype() -> String {
    "FP32".into()
}

fn default_dims() -> Vec<i64> {
    vec![16]
}

/// The service-time law each request is held for (milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "law", rename_all = "lowercase", deny_unknown_fields)]
pub enum DelayConfig {
    /// Answer at once.
    None,
    /// Always `ms`.
    Fixed { ms: f64 },
    /// `exp(ln(median_ms) + sigma·Z)`, Z standard normal.
    Lognormal { median_ms: f64, sigma: f64 },
    /// `slow_ms` with probability `p_slow`, else `fast_ms`.
    Bimodal {
        p_slow: f64,
        fast_ms: f64,
        slow_ms: f64,
    },
    /// The `base` law, except `slow_ms` with probability `p`.
    Tail {
        base: Box<DelayConfig>,
        #[serde(default = "default_tail_p")]
        p: f64,
        slow_ms: f64,
    },
}

fn default_tail_p() -> f64 {
    0.01
}

/// A share of requests answered with an error instead (drawn like the delays, from the seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureConfig {
    #[serde(default)]
    pub share: f64,
    #[serde(default = "default_grpc_code")]
    pub grpc_code: String,
    #[serde(default = "default_http_status")]
    pub http_status: u16,
    #[serde(default = "default_failure_message")]
    pub message: String,
}

fn default_grpc_code() -> String {
    "UNAVAILABLE".into()
}

fn default_http_status() -> u16 {
    503
}

fn default_failure_message() -> String {
    "scripted failure".into()
}

impl Default for FailureConfig {
    fn default() -> Self {
        FailureConfig {
            share: 0.0,
            grpc_code: default_grpc_code(),
            http_status: default_http_status(),
            message: default_failure_message(),
        }
    }
}

/// How `/v1/chat/completions` and `/v1/completions` stream (the content events are
/// `stream_responses`, each after one hold of the request's draw, as a gRPC stream's responses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GenerationConfig {
    /// Tokens each content event carries (each token is the text `é`, two UTF-8 bytes).
    pub tokens_per_event: u32,
    /// A role-only chunk (chat) before the first content event, written at once.
    pub role_prelude: bool,
    /// A `: keep-alive` comment written before every content event, at once.
    pub keep_alive: bool,
    /// Every content event written in two writes, cut inside a token's UTF-8 character.
    pub split_events: bool,
    /// Content events written two at a time (the first waits for the second's time).
    pub coalesce_events: bool,
    /// An error event after this many content events, then the stream ends (None: never).
    pub fail_after_events: Option<u32>,
    /// The usage tail carries llama.cpp's `timings`, measured from the service's start: the first
    /// content event's time as `prompt_ms`, the rest's span as `predicted_ms`.
    pub timings: bool,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        GenerationConfig {
            tokens_per_event: 1,
            role_prelude: true,
            keep_alive: false,
            split_events: false,
            coalesce_events: false,
            fail_after_events: None,
            timings: false,
        }
    }
}

/// TLS on both ports (PEM files).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert_file: String,
    pub key_file: String,
}

/// The whole configuration (every key has a default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The one model served.
    pub model: String,
    /// 0: the model does not batch (shapes are `dims`); else the batch is the first input's shape[0].
    pub max_batch_size: u32,
    /// Answer `ModelStreamInfer` only, like a Triton decoupled model (its config says so).
    pub decoupled: bool,
    pub inputs: Vec<TensorConfig>,
    pub outputs: Vec<TensorConfig>,
    pub delay: DelayConfig,
    /// Draw k of this seed is the k-th request's service time (and failure).
    pub seed: u64,
    /// Service slots (FIFO); None: unlimited.
    pub concurrency: Option<u32>,
    pub failures: FailureConfig,
    /// `ModelStreamInferResponse`s per streamed request; content events per generation.
    pub stream_responses: u32,
    pub generation: GenerationConfig,
    /// Items in a TorchServe-style answer (and in a KServe v1 answer whose request has no instances).
    pub rest_items: u32,
    /// tokio worker threads.
    pub threads: u32,
    pub host: String,
    /// 0: a free port.
    pub grpc_port: u16,
    pub http_port: u16,
    pub tls: Option<TlsConfig>,
    /// Records kept; beyond that they are counted as dropped.
    pub record_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            model: "identity".into(),
            max_batch_size: 8,
            decoupled: false,
            inputs: vec![TensorConfig {
                name: "INPUT0".into(),
                datatype: default_datatype(),
                dims: default_dims(),
            }],
            outputs: vec![TensorConfig {
                name: "OUTPUT0".into(),
                datatype: default_datatype(),
                dims: default_dims(),
            }],
            delay: DelayConfig::None,
            seed: 0,
            concurrency: None,
            failures: FailureConfig::default(),
            stream_responses: 1,
            generation: GenerationConfig::default(),
            rest_items: 1,
            threads: 1,
            host: "127.0.0.1".into(),
            grpc_port: 0,
            http_port: 0,
            tls: None,
            record_capacity: 2_000_000,
        }
    }
}

/// Bytes of one element of a KServe v2 datatype (BYTES: an empty string, its 4-byte length).
pub fn element_bytes(datatype: &str) -> Option<u64> {
    Some(match datatype {
        "BOOL" | "UINT8" | "INT8" => 1,
        "UINT16" | "INT16" | "FP16" | "BF16" => 2,
        "UINT32" | "INT32" | "FP32" | "BYTES" => 4,
        "UINT64" | "INT64" | "FP64" => 8,
        _ => return None,
    })
}

/// The gRPC status codes by their canonical names.
pub fn grpc_code(name: &str) -> Option<tonic::Code> {
    use tonic::Code::*;
    Some(match name {
        "CANCELLED" => Cancelled,
        "UNKNOWN" => Unknown,
        "INVALID_ARGUMENT" => InvalidArgument,
        "DEADLINE_EXCEEDED" => DeadlineExceeded,
        "NOT_FOUND" => NotFound,
        "ALREADY_EXISTS" => AlreadyExists,
        "PERMISSION_DENIED" => PermissionDenied,
        "RESOURCE_EXHAUSTED" => ResourceExhausted,
        "FAILED_PRECONDITION" => FailedPrecondition,
        "ABORTED" => Aborted,
        "OUT_OF_RANGE" => OutOfRange,
        "UNIMPLEMENTED" => Unimplemented,
        "INTERNAL" => Internal,
        "UNAVAILABLE" => Unavailable,
        "DATA_LOSS" => DataLoss,
        "UNAUTHENTICATED" => Unauthenticated,
        _ => return None,
    })
}

const DATATYPES: &str =
    "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES";

fn check_ms(path: &str, value: f64, positive: bool) -> Result<(), ConfigError> {
    let low_ok = if positive { value > 0.0 } else { value >= 0.0 };
    if !value.is_finite() || !low_ok || value > MAX_HOLD_MS {
        let low = if positive { "> 0" } else { ">= 0" };
        return Err(problem(
            path,
            format!("expected milliseconds {low} and <= {MAX_HOLD_MS}; got {value}"),
        ));
    }
    Ok(())
}

fn check_probability(path: &str, value: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&value) {
        return Err(problem(
            path,
            format!("expected a probability in [0, 1]; got {value}"),
        ));
    }
    Ok(())
}

fn check_delay(path: &str, delay: &DelayConfig, nested: bool) -> Result<(), ConfigError> {
    match delay {
        DelayConfig::None => Ok(()),
        DelayConfig::Fixed { ms } => check_ms(&format!("{path}.ms"), *ms, false),
        DelayConfig::Lognormal { median_ms, sigma } => {
            check_ms(&format!("{path}.median_ms"), *median_ms, true)?;
            if !sigma.is_finite() || *sigma < 0.0 || *sigma > 10.0 {
                return Err(problem(
                    format!("{path}.sigma"),
                    format!("expected a number in [0, 10]; got {sigma}"),
                ));
            }
            Ok(())
        }
        DelayConfig::Bimodal {
            p_slow,
            fast_ms,
            slow_ms,
        } => {
            check_probability(&format!("{path}.p_slow"), *p_slow)?;
            check_ms(&format!("{path}.fast_ms"), *fast_ms, false)?;
            check_ms(&format!("{path}.slow_ms"), *slow_ms, false)
        }
        DelayConfig::Tail { base, p, slow_ms } => {
            if nested {
                return Err(problem(
                    format!("{path}.law"),
                    "a tail's base cannot be a tail; expected none, fixed, lognormal or bimodal",
                ));
            }
            check_delay(&format!("{path}.base"), base, true)?;
            check_probability(&format!("{path}.p"), *p)?;
            check_ms(&format!("{path}.slow_ms"), *slow_ms, false)
        }
    }
}

fn check_tensors(key: &str, tensors: &[TensorConfig], is_output: bool) -> Result<u64, ConfigError> {
    let mut names = HashSet::new();
    let mut item_bytes: u64 = 0;
    for (index, tensor) in tensors.iter().enumerate() {
        let path = format!("{key}[{index}]");
        if tensor.name.is_empty() || tensor.name.len() > 256 {
            return Err(problem(
                format!("{path}.name"),
                "expected a name of 1 to 256 characters",
            ));
        }
        if !names.insert(tensor.name.as_str()) {
            return Err(problem(
                format!("{path}.name"),
                format!("{:?} is given twice; expected unique names", tensor.name),
            ));
        }
        let Some(size) = element_bytes(&tensor.datatype) else {
            return Err(problem(
                format!("{path}.datatype"),
                format!("expected one of {DATATYPES}; got {:?}", tensor.datatype),
            ));
        };
        if tensor.dims.len() > 16 {
            return Err(problem(format!("{path}.dims"), "expected at most 16 dims"));
        }
        let mut elements: u64 = 1;
        for (d, &dim) in tensor.dims.iter().enumerate() {
            let valid = if is_output {
                dim >= 1
            } else {
                dim >= 1 || dim == -1
            };
            if !valid {
                let wanted = if is_output {
                    "an integer >= 1 (an answer's shape is concrete)"
                } else {
                    "an integer >= 1, or -1 for a variable dim"
                };
                return Err(problem(
                    format!("{path}.dims[{d}]"),
                    format!("expected {wanted}; got {dim}"),
                ));
            }
            elements = elements.saturating_mul(dim.max(1) as u64);
        }
        item_bytes = item_bytes.saturating_add(elements.saturating_mul(size));
    }
    Ok(item_bytes)
}

impl Config {
    /// Parse JSON text; a problem names the key path.
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let config: Config =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
                let path = error.path().to_string();
                let inner = error.into_inner();
                let message = inner.to_string();
                // serde_json appends " at line L column C": keep it, it helps find the key
                problem(if path == "." { String::new() } else { path }, message)
            })?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration as JSON, every default filled in.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
    }

    /// Every rule the types cannot say.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.model.is_empty() || self.model.len() > 256 || self.model.contains('/') {
            return Err(problem(
                "model",
                "expected a model name of 1 to 256 characters, without '/'",
            ));
        }
        if self.max_batch_size > MAX_BATCH_LIMIT {
            return Err(problem(
                "max_batch_size",
                format!(
                    "expected 0 (no batching) to {MAX_BATCH_LIMIT}; got {}",
                    self.max_batch_size
                ),
            ));
        }
        if self.inputs.is_empty() {
            return Err(problem("inputs", "expected at least one input"));
        }
        if self.outputs.is_empty() {
            return Err(problem("outputs", "expected at least one output"));
        }
        if self.outputs.len() > 64 {
            return Err(problem("outputs", "expected at most 64 outputs"));
        }
        check_tensors("inputs", &self.inputs, false)?;
        let item_bytes = check_tensors("outputs", &self.outputs, true)?;
        let answer_bytes = item_bytes.saturating_mul(u64::from(self.max_batch_size.max(1)));
        if answer_bytes > MAX_ANSWER_BYTES {
            return Err(problem(
                "outputs",
                format!(
                    "an answer of max_batch_size items would take {answer_bytes} bytes; expected at most {MAX_ANSWER_BYTES}"
                ),
            ));
        }
        check_delay("delay", &self.delay, false)?;
        if self.concurrency == Some(0) {
            return Err(problem(
                "concurrency",
                "expected a number of slots >= 1, or null for unlimited",
            ));
        }
        check_probability("failures.share", self.failures.share)?;
        if grpc_code(&self.failures.grpc_code).is_none() || self.failures.grpc_code == "OK" {
            return Err(problem(
                "failures.grpc_code",
                format!(
                    "expected a gRPC status name such as UNAVAILABLE or RESOURCE_EXHAUSTED; got {:?}",
                    self.failures.grpc_code
                ),
            ));
        }
        if !(400..=599).contains(&self.failures.http_status) {
            return Err(problem(
                "failures.http_status",
                format!(
                    "expected an HTTP error status 400 to 599; got {}",
                    self.failures.http_status
                ),
            ));
        }
        if self.stream_responses == 0 || self.stream_responses > 10_000 {
            return Err(problem(
                "stream_responses",
                format!("expected 1 to 10000; got {}", self.stream_responses),
            ));
        }
        if self.generation.tokens_per_event == 0 || self.generation.tokens_per_event > 1_000 {
            return Err(problem(
                "generation.tokens_per_event",
                format!(
                    "expected 1 to 1000; got {}",
                    self.generation.tokens_per_event
                ),
            ));
        }
        if self.rest_items == 0 || self.rest_items > 65_536 {
            return Err(problem(
                "rest_items",
                format!("expected 1 to 65536; got {}", self.rest_items),
            ));
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(problem(
                "threads",
                format!("expected 1 to 256; got {}", self.threads),
            ));
        }
        if self.host.is_empty() {
            return Err(problem(
                "host",
                "expected an address to bind, such as 127.0.0.1",
            ));
        }
        if self.grpc_port != 0 && self.grpc_port == self.http_port {
            return Err(problem(
                "http_port",
                format!("expected a port other than grpc_port {}", self.grpc_port),
            ));
        }
        if let Some(tls) = &self.tls {
            if tls.cert_file.is_empty() {
                return Err(problem(
                    "tls.cert_file",
                    "expected the path of a PEM certificate chain",
                ));
            }
            if tls.key_file.is_empty() {
                return Err(problem(
                    "tls.key_file",
                    "expected the path of a PEM private key",
                ));
            }
        }
        if self.record_capacity > MAX_RECORD_CAPACITY {
            return Err(problem(
                "record_capacity",
                format!(
                    "expected 0 to {MAX_RECORD_CAPACITY}; got {}",
                    self.record_capacity
                ),
            ));
        }
        Ok(())
    }

    /// Whether answers carry a batch dimension.
    pub fn batches(&self) -> bool {
        self.max_batch_size > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> ConfigError {
        Config::from_json(text).expect_err("the config should be refused")
    }

    #[test]
    fn an_empty_object_is_the_default() {
        let config = Config::from_json("{}").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(Config::from_json(&config.to_json()).unwrap(), config);
    }

    #[test]
    fn every_law_parses() {
        let config = Config::from_json(
            r#"{"delay": {"law": "tail", "base": {"law": "lognormal", "median_ms": 2, "sigma": 0.5}, "slow_ms": 50}}"#,
        )
        .unwrap();
        assert_eq!(
            config.delay,
            DelayConfig::Tail {
                base: Box::new(DelayConfig::Lognormal {
                    median_ms: 2.0,
                    sigma: 0.5
                }),
                p: 0.01,
                slow_ms: 50.0
            }
        );
        for text in [
            r#"{"law": "none"}"#,
            r#"{"law": "fixed", "ms": 1.5}"#,
            r#"{"law": "bimodal", "p_slow": 0.1, "fast_ms": 1, "slow_ms": 10}"#,
        ] {
            Config::from_json(&format!(r#"{{"delay": {text}}}"#)).unwrap();
        }
    }

    #[test]
    fn errors_name_the_key_path() {
        let error = error_of(r#"{"delay": {"law": "fixed", "ms": -1}}"#);
        assert_eq!(error.key_path, "delay.ms");
        assert!(error.message.contains("got -1"), "{error}");

        let error =
            error_of(r#"{"delay": {"law": "bimodal", "p_slow": 2, "fast_ms": 1, "slow_ms": 3}}"#);
        assert_eq!(error.key_path, "delay.p_slow");

        let error = error_of(r#"{"outputs": [{"name": "A", "datatype": "FP8"}]}"#);
        assert_eq!(error.key_path, "outputs[0].datatype");
        assert!(error.message.contains("FP8"), "{error}");

        let error = error_of(r#"{"outputs": [{"name": "A", "dims": [4, -1]}]}"#);
        assert_eq!(error.key_path, "outputs[0].dims[1]");

        let error = error_of(r#"{"concurrency": 0}"#);
        assert_eq!(error.key_path, "concurrency");

        let error = error_of(r#"{"failures": {"share": 0.5, "grpc_code": "NOPE"}}"#);
        assert_eq!(error.key_path, "failures.grpc_code");

        let error = error_of(r#"{"threads": 0}"#);
        assert_eq!(error.key_path, "threads");

        let error = error_of(
            r#"{"delay": {"law": "tail", "base": {"law": "tail", "base": {"law": "none"}, "slow_ms": 1}, "slow_ms": 2}}"#,
        );
        assert_eq!(error.key_path, "delay.base.law");
    }

    #[test]
    fn type_errors_and_unknown_keys_name_the_key_too() {
        let error = error_of(r#"{"threads": "two"}"#);
        assert_eq!(error.key_path, "threads");
        let error = error_of(r#"{"failures": {"shares": 0.1}}"#);
        assert!(error.message.contains("unknown field `shares`"), "{error}");
        let error = error_of(r#"{"inputs": [{"name": "A", "dim": [1]}]}"#);
        assert!(error.key_path.starts_with("inputs[0]"), "{error}");
        let error = error_of(r#"{"delay": {"law": "gamma"}}"#);
        assert!(error.key_path.starts_with("delay"), "{error}");
        assert!(error.message.contains("gamma"), "{error}");
    }

    #[test]
    fn an_answer_too_big_is_refused() {
        let error =
            error_of(r#"{"max_batch_size": 65536, "outputs": [{"name": "A", "dims": [100000]}]}"#);
        assert_eq!(error.key_path, "outputs");
    }
}
