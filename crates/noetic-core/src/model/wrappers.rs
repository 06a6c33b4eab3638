//! Middleware for models, in the spirit of `tower::Layer`: wrap a [`Model`] to add retries or a timeout.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};

use super::{Model, ModelRequest, ModelResponse, StreamDelta};
use super::{RetryPolicy, with_retries};
use crate::error::NoeticError;

/// Retries retryable failures ([`NoeticError::is_retryable`]) with the policy's backoff, by the one retry loop
/// ([`with_retries`]): a rate limit's `retry_after` wins over the backoff when it is longer, and one longer than the
/// policy's longest delay is returned at once rather than waited for. Calls and streams are retried alike: a
/// stream is retried while it fails before its first delta; once a delta has been handed out, a failure ends the
/// stream (text already shown cannot be taken back).
///
/// Wrapping a model that retries by itself (an HTTP provider, by its config's `retry`) does not multiply the
/// attempts: while the wrapper's attempt runs, the provider's loop makes one attempt, so this policy decides alone.
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
        Box::pin(async move { with_retries(&policy, "model call", || inner.call(request.clone())).await })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let inner = self.inner.clone();
        let policy = self.policy;
        let opened = async move {
            // An attempt lasts until the first delta (or the end of an empty stream): from there nothing is retried.
            let attempt = || {
                let mut stream = inner.stream(request.clone());
                async move {
                    match stream.next().await {
                        Some(Err(e)) => Err(e),
                        first => Ok(futures::stream::iter(first).chain(stream).boxed()),
                    }
                }
            };
            with_retries(&policy, "model stream", attempt)
                .await
                .unwrap_or_else(|error| futures::stream::once(async move { Err(error) }).boxed())
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
