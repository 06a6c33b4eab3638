//! `every`: run a body on a fixed interval until the context is cancelled.

use std::sync::Arc;
use std::time::Duration;

use super::{Step, StepFuture, validate_id};
use crate::context::WakeHandle;
use crate::error::{ConfigCode, ConfigError};
use crate::scope::StepContext;

/// What an `every` step does when its body fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EveryOnError {
    /// Record the error as an event and keep going (the default).
    #[default]
    Continue,
    /// Fail the step with the error.
    Fail,
}

pub(crate) type BodyFn<I> = Arc<dyn Fn(I, StepContext) -> StepFuture<()> + Send + Sync>;

/// An `every` step: runs its body at once, then parks `interval ± jitter` (uniform, clamped at zero) between
/// runs; a send on `wake_on` ends a park early. It never produces an output: it ends only with
/// [`NoeticError::Cancelled`](crate::NoeticError::Cancelled) or, with [`EveryOnError::Fail`], the body's error.
pub struct StepEvery<I> {
    pub(crate) id: Arc<str>,
    pub(crate) body: BodyFn<I>,
    pub(crate) interval: Duration,
    pub(crate) jitter: Duration,
    pub(crate) wake_on: Option<WakeHandle>,
    pub(crate) on_error: EveryOnError,
    pub(crate) clone_input: fn(&I) -> I,
}

/// Builds an `every` step.
pub struct EveryBuilder<I> {
    id: String,
    body: BodyFn<I>,
    ms: f64,
    jitter_ms: f64,
    wake_on: Option<WakeHandle>,
    on_error: EveryOnError,
    clone_input: fn(&I) -> I,
}

impl<I: Clone + Send + Sync + 'static, B: Send + 'static> Step<I, B> {
    /// Runs `body` every `ms` milliseconds (must be finite and `>= 0`) with the same input each time.
    /// The built step's output type is free: an `every` step never returns a value.
    pub fn every(id: impl Into<String>, body: Step<I, B>, ms: f64) -> EveryBuilder<I> {
        let body: BodyFn<I> = Arc::new(move |input, ctx| {
            let body = body.clone();
            Box::pin(async move { body.execute(input, &ctx).await.map(|_| ()) })
        });
        EveryBuilder {
            id: id.into(),
            body,
            ms,
            jitter_ms: 0.0,
            wake_on: None,
            on_error: EveryOnError::Continue,
            clone_input: I::clone,
        }
    }
}

fn millis(ms: f64) -> Option<Duration> {
    if ms.is_finite() && ms >= 0.0 { Duration::try_from_secs_f64(ms / 1000.0).ok() } else { None }
}

impl<I: Send + 'static> EveryBuilder<I> {
    /// Random jitter in milliseconds (finite, `>= 0`): each park lasts a uniform draw in `ms ± jitter`.
    pub fn jitter(mut self, jitter_ms: f64) -> Self {
        self.jitter_ms = jitter_ms;
        self
    }

    /// Any send on this channel ends the current park early (the message stays in the channel).
    pub fn wake_on(mut self, handle: impl Into<WakeHandle>) -> Self {
        self.wake_on = Some(handle.into());
        self
    }

    /// What a failing body does.
    pub fn on_error(mut self, on_error: EveryOnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Validates and builds the step.
    pub fn build<O>(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "every")?;
        let interval = millis(self.ms).ok_or_else(|| {
            ConfigError::new(
                ConfigCode::InvalidIntervalMs,
                format!("every step '{id}' has interval {} ms", self.ms),
                "give a finite interval in milliseconds, 0 or more",
            )
        })?;
        let jitter = millis(self.jitter_ms).ok_or_else(|| {
            ConfigError::new(
                ConfigCode::InvalidJitter,
                format!("every step '{id}' has jitter {} ms", self.jitter_ms),
                "give a finite jitter in milliseconds, 0 or more",
            )
        })?;
        Ok(Step::Every(Arc::new(StepEvery {
            id,
            body: self.body,
            interval,
            jitter,
            wake_on: self.wake_on,
            on_error: self.on_error,
            clone_input: self.clone_input,
        })))
    }
}
