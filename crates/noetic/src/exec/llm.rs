//! Executes `llm` steps.
//!
//! The model interface arrives with the tools-and-models work; until a model is configured on the context, an
//! `llm` step fails with the configuration error `NO_MODEL_PROVIDER`.

use crate::context::Context;
use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::step::StepLlm;

pub(super) async fn execute<I, O>(s: &StepLlm<I, O>, _input: I, _ctx: &Context) -> Result<O, NoeticError> {
    Err(ConfigError::new(
        ConfigCode::NoModelProvider,
        format!("llm step '{}' needs a model (\"{}\") and the context has none", s.id, s.model),
        "run the step through a Runtime built with a model",
    )
    .into())
}
