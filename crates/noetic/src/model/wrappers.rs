//! Middleware for models, in the spirit of `tower::Layer`: wrap a [`Model`] to add retries or a timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::{Model, ModelRequest, ModelResponse};
use crate::error::NoeticError;
use crate::step::RetryPolicy;

/// Retries retryable failures ([`NoeticError::is_retryable`]) with the policy's backoff; a rate limit's
/// `retry_after` wins over the backoff when it is longer. Streaming is passed through untouched (a stream that
/// has begun is never retried).
pub struct RetryModel {
    inner: Arc<dyn Model>,
    policy: RetryPolicy,
}

/// Fails a call that takes longer than the timeout with a retryable [`NoeticError::ModelFailed`].
pub struct TimeoutModel {
    inner: Arc<dyn Model>,
    timeout: Duration,
}

/// Adds the wrappers to every model.
pub trait ModelExt: Model + Sized {
    /// Wraps the model with retries.
    fn with_retry(self, policy: RetryPolicy) -> RetryModel {
        RetryModel { inner: Arc::new(self), policy }
    }

    /// Wraps the model with a per-call timeout.
    fn with_timeout(self, timeout: Duration) -> TimeoutModel {
        TimeoutModel { inner: Arc::new(self), timeout }
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
                let mut delay = policy.delay(attempt);
                if let NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } = &error {
                    delay = delay.max(Duration::from_millis(*ms));
                }
                tracing::debug!(attempt, ?delay, %error, "model call failed; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        })
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> futures::stream::BoxStream<'static, Result<super::StreamDelta, NoeticError>> {
        self.inner.stream(request)
    }

    fn capabilities(&self) -> super::Capabilities {
        self.inner.capabilities()
    }
}

impl Model for TimeoutModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let call = self.inner.call(request);
        let timeout = self.timeout;
        Box::pin(async move {
            tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
                Err(NoeticError::ModelFailed {
                    message: format!("the model did not answer within {} ms; raise the timeout", timeout.as_millis()),
                    status: None,
                    raw: None,
                    retryable: true,
                })
            })
        })
    }

    fn capabilities(&self) -> super::Capabilities {
        self.inner.capabilities()
    }
}
