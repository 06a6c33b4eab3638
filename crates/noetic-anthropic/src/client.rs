//! The transport: [`AnthropicModel`] sends requests with `reqwest`, retries before a response has begun, and hands
//! bodies to the pure translation functions.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use noetic::NoeticError;
use noetic::model::{Model, ModelRequest, ModelResponse, StreamDelta, replay};
use noetic::step::RetryPolicy;
use serde_json::Value;

use crate::config::{ANTHROPIC_VERSION, AnthropicConfig};
use crate::error::{error_chain, error_from_status, parse_retry_after, transport_error};
use crate::request::request_body;
use crate::response::parse_response;
use crate::sse::stream_deltas;

/// The cap on one backoff delay when the retry policy sets none (the same 30 s `RetryPolicy` uses).
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

/// A [`Model`] backed by Anthropic's Messages API (`POST /v1/messages`).
///
/// * [`Model::call`] sends a non-streamed request; [`Model::stream`] sends `"stream": true` and yields deltas as
///   the server-sent events arrive, ending with [`StreamDelta::Done`].
/// * Rate limits (429, honouring `Retry-After`), overload (529), other 5xx, 408/409, timeouts and connection
///   failures are retried with the configured [`RetryPolicy`] — for a stream only until the response has begun,
///   never after. A `Retry-After` longer than the policy's longest delay is not waited for: the
///   [`NoeticError::ModelRateLimit`] is returned at once.
/// * Cancellation is by dropping the future or stream, which closes the connection; nothing is spawned.
///
/// The model is cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct AnthropicModel {
    http: reqwest::Client,
    config: Arc<AnthropicConfig>,
    url: Arc<str>,
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What a streaming request opened.
enum Opened {
    /// An SSE body.
    Events(reqwest::Response),
    /// A whole JSON response (a server that ignored `"stream": true`).
    Whole(ModelResponse),
}

impl AnthropicModel {
    /// A model client with `config`.
    ///
    /// # Errors
    ///
    /// [`NoeticError::ModelFailed`] when the base URL is not a valid URL or the HTTP client cannot be built.
    pub fn new(config: AnthropicConfig) -> Result<Self, NoeticError> {
        let url = config.messages_url();
        let invalid = |detail: String| NoeticError::ModelFailed {
            message: format!("cannot use the Anthropic endpoint '{url}' ({detail}); fix ANTHROPIC_BASE_URL"),
            status: None,
            raw: None,
            retryable: false,
        };
        let parsed = reqwest::Url::parse(&url).map_err(|e| invalid(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https".to_owned()));
        }
        let http = reqwest::Client::builder().build().map_err(|e| NoeticError::ModelFailed {
            message: format!("cannot build the HTTP client ({}); check the TLS setup", error_chain(&e)),
            status: None,
            raw: None,
            retryable: false,
        })?;
        Ok(AnthropicModel { http, config: Arc::new(config), url: Arc::from(url) })
    }

    /// A model client configured from the environment (see [`AnthropicConfig::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`AnthropicModel::new`].
    pub fn from_env() -> Result<Self, NoeticError> {
        Self::new(AnthropicConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// The body for `request`, with the configured model override applied.
    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut body = request_body(request, stream);
        if let Some(model) = &self.config.model_override {
            body["model"] = Value::String(model.clone());
        }
        body
    }

    /// Sends one request; a non-2xx status becomes its typed error (the error body is read for the message).
    async fn send(&self, body: &Value) -> Result<reqwest::Response, NoeticError> {
        let mut request = self.http.post(&*self.url).header("anthropic-version", ANTHROPIC_VERSION).json(body);
        if let Some(key) = &self.config.api_key {
            request = request.header("x-api-key", key);
        }
        let response = request.send().await.map_err(|e| transport_error(&e, &self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let retry_after = parse_retry_after(header("retry-after-ms").as_deref(), header("retry-after").as_deref());
        let text = response.text().await.unwrap_or_default();
        Err(error_from_status(status.as_u16(), retry_after, &text, self.config.api_key.is_some()))
    }

    /// One attempt of a non-streamed call, bounded by the timeout as a whole.
    async fn call_once(&self, body: &Value) -> Result<ModelResponse, NoeticError> {
        let attempt = async {
            let response = self.send(body).await?;
            let text = response.text().await.map_err(|e| NoeticError::ModelFailed {
                message: format!("the Anthropic response body could not be read ({}); try again", error_chain(&e)),
                status: None,
                raw: None,
                retryable: true,
            })?;
            parse_response(&text)
        };
        tokio::time::timeout(self.config.timeout, attempt).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    /// One attempt at opening a stream, bounded by the timeout until the response starts.
    async fn open_once(&self, body: &Value) -> Result<Opened, NoeticError> {
        let attempt = async {
            let response = self.send(body).await?;
            let json = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/json"));
            if !json {
                return Ok(Opened::Events(response));
            }
            // Nothing has been streamed yet, so a failure here is still retryable.
            let text = response.text().await.map_err(|e| NoeticError::ModelFailed {
                message: format!("the Anthropic response body could not be read ({}); try again", error_chain(&e)),
                status: None,
                raw: None,
                retryable: true,
            })?;
            parse_response(&text).map(Opened::Whole)
        };
        tokio::time::timeout(self.config.timeout, attempt).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    /// The error for an attempt that ran out of time (retryable).
    fn timed_out(&self) -> NoeticError {
        NoeticError::ModelFailed {
            message: format!(
                "Anthropic at {} did not answer within {} ms; try again, or raise AnthropicConfig::timeout",
                self.url,
                self.config.timeout.as_millis()
            ),
            status: None,
            raw: None,
            retryable: true,
        }
    }
}

impl Model for AnthropicModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let this = self.clone();
        Box::pin(async move {
            let body = this.body(&request, false);
            with_retries(this.config.retry, || this.call_once(&body)).await
        })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let this = self.clone();
        let open = async move {
            let body = this.body(&request, true);
            let deltas = match with_retries(this.config.retry, || this.open_once(&body)).await? {
                Opened::Events(response) => {
                    let bytes = response.bytes_stream().map_err(|e| error_chain(&e));
                    stream_deltas(idle_timeout(bytes, this.config.timeout)).boxed()
                }
                Opened::Whole(response) => futures::stream::iter(replay(response).into_iter().map(Ok)).boxed(),
            };
            Ok::<_, NoeticError>(deltas)
        };
        futures::stream::once(open).try_flatten().boxed()
    }
}

/// Runs `attempt` until it succeeds, fails for good, or the policy's attempts are used up.
async fn with_retries<T, F, Fut>(policy: RetryPolicy, mut attempt: F) -> Result<T, NoeticError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, NoeticError>>,
{
    let mut number = 0;
    loop {
        let error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        let Some(delay) = retry_delay(&policy, number, &error) else { return Err(error) };
        tracing::debug!(attempt = number, ?delay, %error, "Anthropic request failed; retrying");
        tokio::time::sleep(delay).await;
        number += 1;
    }
}

/// The wait before retrying after failed attempt `attempt` (0-based), or `None` when `error` is final: not
/// retryable, the last attempt, or a `Retry-After` longer than the policy's longest delay.
pub(crate) fn retry_delay(policy: &RetryPolicy, attempt: u32, error: &NoeticError) -> Option<Duration> {
    if attempt.saturating_add(1) >= policy.max_attempts.max(1) || !error.is_retryable() {
        return None;
    }
    let backoff = policy.delay(attempt);
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } => {
            let asked = Duration::from_millis(*ms);
            (asked <= policy.max_delay.unwrap_or(DEFAULT_MAX_DELAY)).then(|| backoff.max(asked))
        }
        _ => Some(backoff),
    }
}

/// Ends `bytes` with an error when no chunk arrives within `timeout`.
fn idle_timeout<S, B>(bytes: S, timeout: Duration) -> impl Stream<Item = Result<B, String>> + Send + 'static
where
    S: Stream<Item = Result<B, String>> + Send + 'static,
    B: Send + 'static,
{
    futures::stream::unfold(Some(Box::pin(bytes)), move |bytes| async move {
        let mut bytes = bytes?;
        match tokio::time::timeout(timeout, bytes.next()).await {
            Ok(Some(item)) => Some((item, Some(bytes))),
            Ok(None) => None,
            Err(_) => Some((
                Err(format!(
                    "no data arrived for {} ms; raise AnthropicConfig::timeout if the model needs longer pauses",
                    timeout.as_millis()
                )),
                None,
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use noetic::step::Backoff;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn failed(retryable: bool) -> NoeticError {
        NoeticError::ModelFailed { message: String::new(), status: None, raw: None, retryable }
    }

    #[test]
    fn retries_follow_the_backoff_and_stop_after_the_last_attempt() {
        let policy = RetryPolicy::new(3, Backoff::Exponential, 500 * MS);
        assert_eq!(retry_delay(&policy, 0, &failed(true)), Some(500 * MS));
        assert_eq!(retry_delay(&policy, 1, &failed(true)), Some(1000 * MS));
        assert_eq!(retry_delay(&policy, 2, &failed(true)), None);
        assert_eq!(retry_delay(&policy, 0, &failed(false)), None);
    }

    #[test]
    fn a_retry_after_longer_than_the_backoff_wins_and_one_beyond_the_cap_ends_the_retries() {
        let policy = RetryPolicy::new(3, Backoff::Exponential, 500 * MS).max_delay(10_000 * MS);
        let limited =
            |ms| NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: Some(ms), message: None };
        assert_eq!(retry_delay(&policy, 0, &limited(2000)), Some(2000 * MS));
        assert_eq!(retry_delay(&policy, 0, &limited(0)), Some(500 * MS));
        assert_eq!(retry_delay(&policy, 0, &limited(60_000)), None);
        let unknown = NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: None, message: None };
        assert_eq!(retry_delay(&policy, 0, &unknown), Some(500 * MS));
    }

    #[test]
    fn invalid_base_urls_are_rejected_when_the_client_is_built() {
        let e = AnthropicModel::new(AnthropicConfig::without_key().base_url("not a url"));
        assert!(matches!(e, Err(NoeticError::ModelFailed { retryable: false, .. })));
        let e = AnthropicModel::new(AnthropicConfig::without_key().base_url("ftp://host"));
        assert!(matches!(e, Err(NoeticError::ModelFailed { retryable: false, .. })));
    }
}
