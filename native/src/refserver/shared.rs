//! What both transports share: the truth, the canned answers, and the checks of a request
//! (worded as Triton words them).

use super::canned::{Canned, VERSION};
use super::truth::Truth;

pub struct Shared {
    pub truth: Truth,
    pub canned: Canned,
}

/// Why a request is refused before any draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not the model (or version) served: gRPC NOT_FOUND, HTTP 400 (Triton's status) or 404.
    UnknownModel(String),
    /// A decoupled model asked for on a unary call or over HTTP.
    Decoupled(String),
    /// A batch too big, an output the model does not have, a body that cannot be read.
    BadRequest(String),
}

impl Refusal {
    pub fn message(&self) -> String {
        match self {
            Refusal::UnknownModel(message)
            | Refusal::Decoupled(message)
            | Refusal::BadRequest(message) => message.clone(),
        }
    }
}

impl Shared {
    /// The model (and version, when one is named) is the one served.
    pub fn check_model(&self, model: &str, version: &str) -> Result<(), Refusal> {
        if model != self.canned.model {
            return Err(Refusal::UnknownModel(format!(
                "Request for unknown model: '{model}' is not found"
            )));
        }
        if !version.is_empty() && version != VERSION {
            return Err(Refusal::UnknownModel(format!(
                "Request for unknown model: '{model}' version {version} is not found"
            )));
        }
        Ok(())
    }

    /// The model served, its batch size (the first input's shape[0] when it batches, else 1).
    pub fn check_infer(
        &self,
        model: &str,
        version: &str,
        first_shape: Option<&[i64]>,
        streamed: bool,
    ) -> Result<u32, Refusal> {
        self.check_model(model, version)?;
        let config = &self.truth.config;
        if config.decoupled && !streamed {
            return Err(Refusal::Decoupled(format!(
                "model '{model}' is decoupled (like Triton's decoupled models it answers over the gRPC ModelStreamInfer stream only)"
            )));
        }
        if !config.batches() {
            return Ok(1);
        }
        let batch = first_shape
            .and_then(|shape| shape.first().copied())
            .unwrap_or(1);
        if batch < 1 || batch > i64::from(config.max_batch_size) {
            return Err(Refusal::BadRequest(format!(
                "inference request batch-size must be <= {} for '{model}' (got {batch})",
                config.max_batch_size
            )));
        }
        Ok(batch as u32)
    }

    /// The outputs named (all of them when none is), as a mask of the canned outputs.
    pub fn output_mask<'a>(&self, names: impl Iterator<Item = &'a str>) -> Result<u64, Refusal> {
        let mut mask = 0u64;
        for name in names {
            let Some(index) = self.canned.output_index(name) else {
                return Err(Refusal::BadRequest(format!(
                    "unexpected inference output '{name}' for model '{}'",
                    self.canned.model
                )));
            };
            mask |= 1 << index;
        }
        Ok(if mask == 0 {
            self.canned.all_outputs()
        } else {
            mask
        })
    }
}
