//! `run`: an async function as a step.

use std::future::Future;
use std::sync::Arc;

use super::{RetryPolicy, Step, StepFuture, validate_id};
use crate::error::{ConfigError, NoeticError};
use crate::scope::StepContext;

/// A retry policy with the function that copies the input for the next attempt.
pub(crate) type Retry<I> = Option<(RetryPolicy, fn(&I) -> I)>;

pub(crate) type RunFn<I, O> = Arc<dyn Fn(I, StepContext) -> StepFuture<O> + Send + Sync>;

/// A `run` step: calls `execute(input, ctx)`, retrying failed attempts by its [`RetryPolicy`].
pub struct StepRun<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) execute: RunFn<I, O>,
    /// The policy and a way to copy the input for the next attempt.
    pub(crate) retry: Retry<I>,
}

/// Builds a `run` step.
pub struct RunBuilder<I, O> {
    id: String,
    execute: RunFn<I, O>,
    retry: Retry<I>,
}

impl<I: Send + 'static, O: Send + 'static> Step<I, O> {
    /// A step that runs `f(input, ctx)`.
    ///
    /// ```
    /// # use noetic::prelude::*;
    /// let double = Step::run("double", |x: i32, _ctx| async move { Ok(x * 2) }).build().unwrap();
    /// # let _ = double;
    /// ```
    pub fn run<F, Fut>(id: impl Into<String>, f: F) -> RunBuilder<I, O>
    where
        F: Fn(I, StepContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, NoeticError>> + Send + 'static,
    {
        RunBuilder { id: id.into(), execute: Arc::new(move |i, c| Box::pin(f(i, c))), retry: None }
    }
}

impl<I: Clone + Send + 'static, O: Send + 'static> RunBuilder<I, O> {
    /// Retries failed attempts (each attempt gets a clone of the input).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some((policy, I::clone));
        self
    }
}

impl<I: Send + 'static, O: Send + 'static> RunBuilder<I, O> {
    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "run")?;
        if let Some((policy, _)) = &self.retry {
            policy.validate(&id)?;
        }
        Ok(Step::Run(Arc::new(StepRun { id, execute: self.execute, retry: self.retry })))
    }
}
