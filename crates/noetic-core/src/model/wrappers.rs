//! Middleware for models, in the spirit of `tower::Layer`: wrap a [`Model`] to add retries or a timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};

use super::RetryPolicy;
use super::{Model, ModelRequest, ModelResponse, StreamDelta};
use crate::error::NoeticError;

/// Retries retryable failures ([`NoeticError::is_retryable`]) with the policy's backoff; a rate limit's
/// `retry_after` wins over the backoff when it is longer. Calls and streams are retried alike: a stream is
/// retried while it fails before its first delta; once a delta has been handed out, a failure ends the stream
/// (text already shown cannot be taken back).
pub struct RetryModel {
    inner: Arc<dyn Model>,
    policy: RetryPolicy,
}

/// Fails a call that takes longer than the timeout with a retryable [`NoeticError::ModelFailed`]. A stream is
/// bounded the same way as a whole (from the request to its last delta), and also by an idle limit between
/// deltas ([`TimeoutModel::idle`], default: the timeout). The inner model's own streaming is kept.
pub struct TimeoutModel {
    inner: Arc<dyn Model>,
    timeout: Duration,
    idle: Duration,
}

impl TimeoutModel {
    /// Ends a stream that delivers no delta for `idle` (before the first delta too).
    pub fn idle(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }
}

/// Adds the wrappers to every model.
pub trait ModelExt: Model + Sized {
    /// Wraps the model with retries.
    fn with_retry(self, policy: RetryPolicy) -> RetryModel {
        RetryModel { inner: Arc::new(self), policy }
    }

    /// Wraps the model with a per-call timeout.
    fn with_timeout(self, timeout: Duration) -> TimeoutModel {
        TimeoutModel { inner: Arc::new(self), timeout, idle: timeout }
    }
}

impl<M: Model> ModelExt for M {}

impl Model for RetryModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let inner = self.inner.clone();
        let policy = self.policy;
        Box::pin(async move {
            let attempts = policy.max_attempts.max(1);
            let mut attempt = 0;
            loop {
                let error = match inner.call(request.clone()).await {
                    Ok(r) => return Ok(r),
                    Err(e) => e,
                };
                if attempt + 1 >= attempts || !error.is_retryable() {
                    return Err(error);
                }
                let delay = retry_delay(&policy, attempt, &error);
                tracing::debug!(attempt, ?delay, %error, "model call failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let inner = self.inner.clone();
        let policy = self.policy;
        let opened = async move {
            let attempts = policy.max_attempts.max(1);
            let mut attempt = 0;
            loop {
                let mut stream = inner.stream(request.clone());
                let error = match stream.next().await {
                    Some(Err(e)) => e,
                    // The first delta (or an empty stream): from here on nothing is retried.
                    first => return futures::stream::iter(first).chain(stream).boxed(),
                };
                if attempt + 1 >= attempts || !error.is_retryable() {
                    return futures::stream::once(async move { Err(error) }).boxed();
                }
                let delay = retry_delay(&policy, attempt, &error);
                tracing::debug!(attempt, ?delay, %error, "model stream failed before its first delta; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        };
        futures::stream::once(opened).flatten().boxed()
    }
    fn streams_natively(&self) -> bool {
        self.inner.streams_natively()
    }

    fn capabilities(&self) -> super::Capabilities {
        self.inner.capabilities()
    }

    fn context_window(&self, model: &str) -> Option<super::ContextWindow> {
        self.inner.context_window(model)
    }

    fn token_counter(&self, model: &str) -> Option<Arc<dyn super::TokenCounter>> {
        self.inner.token_counter(model)
    }

    fn provider_name(&self) -> Option<&str> {
        self.inner.provider_name()
    }
}

/// The backoff before retry `attempt + 1`; a rate limit's `retry_after` wins when it is longer.
fn retry_delay(policy: &RetryPolicy, attempt: u32, error: &NoeticError) -> Duration {
    let delay = policy.delay(attempt);
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } => delay.max(Duration::from_millis(*ms)),
        _ => delay,
    }
}

fn timed_out(message: String) -> NoeticError {
    NoeticError::ModelFailed { message, status: None, raw: None, retryable: true, source: None }
}

impl Model for TimeoutModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let call = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
                Err(timed_out(format!("the model did not answer within {} ms; raise the timeout", timeout.as_millis())))
            })
        })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let (timeout, idle) = (self.timeout, self.idle);
        let deadline = tokio::time::Instant::now() + timeout;
        let state = Some(self.inner.stream(request));
        futures::stream::unfold(state, move |state| async move {
            let mut stream = state?;
            let now = tokio::time::Instant::now();
            let (limit, why) = if deadline <= now + idle {
                (
                    deadline,
                    format!("the model did not finish answering within {} ms; raise the timeout", timeout.as_millis()),
                )
            } else {
                (now + idle, format!("the model sent nothing for {} ms; raise the idle limit", idle.as_millis()))
            };
            match tokio::time::timeout_at(limit, stream.next()).await {
                Ok(Some(delta)) => Some((delta, Some(stream))),
                Ok(None) => None,
                // The inner stream is dropped here: a stalled connection is closed, not left behind.
                Err(_) => Some((Err(timed_out(why)), None)),
            }
        })
        .boxed()
    }

    fn streams_natively(&self) -> bool {
        self.inner.streams_natively()
    }

    fn capabilities(&self) -> super::Capabilities {
        self.inner.capabilities()
    }

    fn context_window(&self, model: &str) -> Option<super::ContextWindow> {
        self.inner.context_window(model)
    }

    fn token_counter(&self, model: &str) -> Option<Arc<dyn super::TokenCounter>> {
        self.inner.token_counter(model)
    }

    fn provider_name(&self) -> Option<&str> {
        self.inner.provider_name()
    }
}
