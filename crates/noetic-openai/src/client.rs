//! [`OpenAiModel`]: the [`Model`] implementation over reqwest.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use noetic::model::{Capabilities, Model, ModelRequest, ModelResponse, StreamDelta};
use noetic::step::{RetryPolicy, ToolChoice};
use noetic::{ConfigCode, ConfigError, NoeticError};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::config::OpenAiConfig;
use crate::status::{KeyInfo, retry_after_ms, status_error};
use crate::wire::{error_chain, parse_response, replay, request_body, sse_deltas};

/// An OpenAI-compatible chat-completions model: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp's server.
///
/// `call` posts a non-streaming request; `stream` posts `stream: true` and parses the server-sent events.
///
/// **Retries.** Rate limits (429, waiting at least what `Retry-After` asks), server errors (5xx, 408, 409),
/// timeouts and connection errors are retried with the configured [`RetryPolicy`](noetic::step::RetryPolicy)
/// (default 3 attempts, exponential from 500 ms). A `Retry-After` longer than the policy's `max_delay` is not
/// waited out: the [`NoeticError::ModelRateLimit`] is returned at once so the caller decides. A stream is retried
/// only until its response starts: once the first byte of a successful response has been read, failures end the
/// stream with a non-retryable error (a retry would repeat output already delivered). The client retries on its
/// own, so do not wrap it in [`RetryModel`](noetic::model::RetryModel) as well.
///
/// **Cancellation.** Dropping the future or the stream drops the HTTP request and closes its connection; the
/// client spawns no tasks.
///
/// ```no_run
/// use noetic::model::{Item, History, Model, ModelRequest};
/// use noetic_openai::{OpenAiConfig, OpenAiModel};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let model = OpenAiModel::new(OpenAiConfig::ollama())?;
/// let request = ModelRequest {
///     model: "llama3.2".into(),
///     history: History::new(vec![Item::user("Say hi.")]),
///     ..ModelRequest::default()
/// };
/// let response = model.call(request).await?;
/// println!("{} ({} tokens)", response.text_output(), response.usage.total_tokens());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct OpenAiModel {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: String,
    config: OpenAiConfig,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("endpoint", &self.inner.endpoint)
            .field("config", &self.inner.config)
            .finish()
    }
}

/// The cap `RetryPolicy` applies when it sets none (noetic does not export its constant).
const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

fn config_error(message: String, hint: &str) -> ConfigError {
    ConfigError::new(ConfigCode::NoModelProvider, message, hint)
}

/// Catches mistakes that would otherwise only show on the first request.
fn validate(config: &OpenAiConfig) -> Result<(), ConfigError> {
    let url = reqwest::Url::parse(&config.base_url).ok().filter(|u| matches!(u.scheme(), "http" | "https"));
    if url.is_none() {
        return Err(config_error(
            format!("the base URL '{}' is not an http(s) URL", config.base_url),
            "use a full URL such as https://api.openai.com/v1 or http://localhost:11434/v1 (check OPENAI_BASE_URL)",
        ));
    }
    if config.timeout.is_zero() || config.connect_timeout.is_zero() {
        return Err(ConfigError::new(
            ConfigCode::InvalidTimeout,
            "the OpenAI provider's timeout is zero, so every request would time out",
            "set OpenAiConfig::timeout and connect_timeout to a positive duration",
        ));
    }
    if config.retry.max_attempts < 1 {
        return Err(ConfigError::new(
            ConfigCode::InvalidRetryPolicy,
            "the OpenAI provider's retry policy has max_attempts 0, so no request would be sent",
            "set max_attempts to at least 1 (1 = no retries)",
        ));
    }
    Ok(())
}

impl OpenAiModel {
    /// A model talking to the server `config` describes.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`]: `NO_MODEL_PROVIDER` when the base URL is not an `http(s)` URL, when a header name or
    /// value or the API key cannot be sent in an HTTP header, or when the HTTP client cannot be built;
    /// `INVALID_TIMEOUT` for a zero timeout; `INVALID_RETRY_POLICY` for a policy with no attempts.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        validate(&config)?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| {
                config_error(
                    format!(
                        "the API key for {} contains characters that cannot be sent in an HTTP header",
                        config.base_url
                    ),
                    &format!("check {} for stray quotes, spaces or newlines", config.key_env),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        for (name, value) in &config.headers {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                config_error(
                    format!("'{name}' is not a valid HTTP header name"),
                    "use a plain ASCII token such as X-Title",
                )
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                config_error(
                    format!("the value of header '{name}' cannot be sent in an HTTP header"),
                    "remove newlines and non-visible characters from the value",
                )
            })?;
            headers.append(header, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.timeout)
            .build()
            .map_err(|e| {
                config_error(format!("the HTTP client could not be built: {}", error_chain(&e)), "check the TLS setup")
            })?;
        let endpoint = format!("{}/chat/completions", config.base_url);
        Ok(OpenAiModel { inner: Arc::new(Inner { http, endpoint, config }) })
    }

    /// A model configured from the environment ([`OpenAiConfig::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`OpenAiModel::new`].
    pub fn from_env() -> Result<Self, ConfigError> {
        OpenAiModel::new(OpenAiConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.inner.config
    }

    /// The URL requests are posted to (`{base}/chat/completions`).
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }
}

impl Model for OpenAiModel {
    fn capabilities(&self) -> Capabilities {
        self.inner.config.capabilities
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let inner = self.inner.clone();
        let body = inner.body(&request, false);
        Box::pin(async move { inner.with_retries(|| inner.timed(inner.call_once(&body))).await })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let inner = self.inner.clone();
        let body = inner.body(&request, true);
        let start = async move { inner.with_retries(|| inner.timed(inner.send(&body, true))).await };
        stream::once(start)
            .flat_map(|started| match started {
                Ok(response) if is_json(&response) => stream::once(async move {
                    // A server that ignored `stream: true` answered with a whole JSON response.
                    let text = response.text().await.map_err(|e| mid_stream(&e))?;
                    parse_response(&text).map(replay)
                })
                .flat_map(|deltas| match deltas {
                    Ok(deltas) => stream::iter(deltas.into_iter().map(Ok)).left_stream(),
                    Err(e) => stream::iter([Err(e)]).right_stream(),
                })
                .boxed(),
                Ok(response) => sse_deltas(response.bytes_stream()).boxed(),
                Err(e) => stream::iter([Err(e)]).boxed(),
            })
            .boxed()
    }
}

/// Sends a named tool choice as `required` over that one tool, for servers that take only the string forms. Left
/// alone when the named tool is not offered (the server's own error is the clearest answer then).
fn narrow_to(body: &mut serde_json::Map<String, serde_json::Value>, name: &str) {
    let Some(serde_json::Value::Array(tools)) = body.get_mut("tools") else { return };
    let Some(index) = tools.iter().position(|t| t["function"]["name"] == name) else { return };
    let tool = tools.swap_remove(index);
    *tools = vec![tool];
    body.insert("tool_choice".into(), serde_json::Value::String("required".into()));
}

/// Turns every `system` message after the first message into a `user` message starting `[system] `.
fn demote_late_system(body: &mut serde_json::Map<String, serde_json::Value>) {
    let Some(serde_json::Value::Array(messages)) = body.get_mut("messages") else { return };
    for message in messages.iter_mut().skip(1) {
        if message["role"] == "system" {
            let content = message["content"].as_str().unwrap_or_default();
            *message = serde_json::json!({"role": "user", "content": format!("[system] {content}")});
        }
    }
}

fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// A failure reading a body after it started (never retried).
fn mid_stream(error: &reqwest::Error) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!("the connection failed while reading the response: {}; call again", error_chain(error)),
        status: None,
        raw: None,
        retryable: false,
    }
}

/// How long to wait after failed attempt `failed` (0-based) before the next one, or `None` to give up: the error
/// is not retryable, the attempts are used up, or the provider asked to wait longer than the policy's cap.
fn retry_delay(policy: &RetryPolicy, failed: u32, error: &NoeticError) -> Option<Duration> {
    if failed.saturating_add(1) >= policy.max_attempts.max(1) || !error.is_retryable() {
        return None;
    }
    let backoff = policy.delay(failed);
    match error {
        NoeticError::ModelRateLimit { retry_after_ms: Some(ms), .. } => {
            let asked = Duration::from_millis(*ms);
            (asked <= policy.max_delay.unwrap_or(DEFAULT_MAX_DELAY)).then(|| backoff.max(asked))
        }
        _ => Some(backoff),
    }
}

impl Inner {
    fn body(&self, request: &ModelRequest, stream: bool) -> Vec<u8> {
        let mut body = request_body(request, stream);
        if let Some(obj) = body.as_object_mut() {
            obj.insert("model".into(), self.config.model_for(&request.model).into());
            if !self.config.capabilities.grammar {
                // Servers that take no grammar reject the unknown field (OpenAI answers 400).
                obj.remove("grammar");
            }
            if self.config.narrow_named_tool_choice
                && let Some(ToolChoice::Named(name)) = &request.tool_choice
            {
                narrow_to(obj, name);
            }
            if self.config.late_system_as_user {
                demote_late_system(obj);
            }
        }
        body.to_string().into_bytes()
    }

    fn key_info(&self) -> KeyInfo<'_> {
        KeyInfo { has_key: self.config.api_key.is_some(), key_env: &self.config.key_env, endpoint: &self.endpoint }
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy's attempts are used up.
    async fn with_retries<T, F, Fut>(&self, mut attempt: F) -> Result<T, NoeticError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, NoeticError>>,
    {
        let mut failed = 0;
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let Some(delay) = retry_delay(&self.config.retry, failed, &error) else {
                return Err(error);
            };
            tracing::debug!(attempt = failed + 1, ?delay, %error, endpoint = %self.endpoint, "model call failed; retrying");
            tokio::time::sleep(delay).await;
            failed += 1;
        }
    }

    /// Bounds one attempt by the configured timeout.
    async fn timed<T>(&self, attempt: impl Future<Output = Result<T, NoeticError>>) -> Result<T, NoeticError> {
        let timeout = self.config.timeout;
        tokio::time::timeout(timeout, attempt).await.unwrap_or_else(|_| {
            Err(NoeticError::ModelFailed {
                message: format!(
                    "{} did not answer within {} ms; raise OpenAiConfig::timeout or try again",
                    self.endpoint,
                    timeout.as_millis()
                ),
                status: None,
                raw: None,
                retryable: true,
            })
        })
    }

    async fn call_once(&self, body: &[u8]) -> Result<ModelResponse, NoeticError> {
        let response = self.send(body, false).await?;
        // Nothing has reached the caller yet, so a failure reading a whole body may be retried.
        let text = response.text().await.map_err(|e| self.transport_error(&e))?;
        parse_response(&text)
    }

    /// Posts the body; returns the response once its status is a success, else the typed error.
    async fn send(&self, body: &[u8], stream: bool) -> Result<reqwest::Response, NoeticError> {
        let response = self
            .http
            .post(&self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, if stream { "text/event-stream" } else { "application/json" })
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let wait = retry_after_ms(
            header("retry-after-ms").as_deref(),
            header(RETRY_AFTER.as_str()).as_deref(),
            SystemTime::now(),
        );
        let raw = response.text().await.unwrap_or_default();
        Err(status_error(status.as_u16(), wait, &raw, &self.key_info()))
    }

    fn transport_error(&self, error: &reqwest::Error) -> NoeticError {
        let detail = error_chain(error);
        let (message, retryable) = if error.is_timeout() {
            (format!("{} timed out ({detail}); raise OpenAiConfig::timeout or try again", self.endpoint), true)
        } else if error.is_connect() {
            (
                format!(
                    "could not connect to {} ({detail}); check the base URL and that the server is running",
                    self.endpoint
                ),
                true,
            )
        } else if error.is_builder() {
            (format!("the request to {} could not be built ({detail}); check the base URL", self.endpoint), false)
        } else {
            (format!("the request to {} failed ({detail})", self.endpoint), true)
        };
        NoeticError::ModelFailed { message, status: None, raw: None, retryable }
    }
}

#[cfg(test)]
mod tests {
    use noetic::step::Backoff;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn failed(retryable: bool) -> NoeticError {
        NoeticError::ModelFailed { message: String::new(), status: None, raw: None, retryable }
    }

    fn rate_limit(ms: Option<u64>) -> NoeticError {
        NoeticError::ModelRateLimit { step_id: String::new(), retry_after_ms: ms, message: None }
    }

    fn code_of(config: OpenAiConfig) -> Option<ConfigCode> {
        OpenAiModel::new(config).err().map(|e| e.code)
    }

    #[test]
    fn invalid_configuration_is_rejected_when_the_model_is_built() {
        assert_eq!(code_of(OpenAiConfig::new().base_url("localhost:11434/v1")), Some(ConfigCode::NoModelProvider));
        assert_eq!(code_of(OpenAiConfig::new().api_key("sk-x\n")), None, "a trailing newline is trimmed");
        assert_eq!(code_of(OpenAiConfig::new().api_key("sk-\nx")), Some(ConfigCode::NoModelProvider));
        assert_eq!(code_of(OpenAiConfig::new().header("X Title", "t")), Some(ConfigCode::NoModelProvider));
        assert_eq!(code_of(OpenAiConfig::new().timeout(Duration::ZERO)), Some(ConfigCode::InvalidTimeout));
        let no_attempts = RetryPolicy::new(0, Backoff::Fixed, MS);
        assert_eq!(code_of(OpenAiConfig::new().retry(no_attempts)), Some(ConfigCode::InvalidRetryPolicy));
        assert_eq!(code_of(OpenAiConfig::ollama()), None);
    }

    #[test]
    fn retries_follow_the_backoff_until_the_attempts_are_used() {
        let policy = RetryPolicy::new(3, Backoff::Exponential, 10 * MS);
        assert_eq!(retry_delay(&policy, 0, &failed(true)), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 1, &failed(true)), Some(20 * MS));
        assert_eq!(retry_delay(&policy, 2, &failed(true)), None, "no sleep after the last attempt");
        assert_eq!(retry_delay(&policy, 0, &failed(false)), None);
        assert_eq!(retry_delay(&policy, 0, &NoeticError::cancelled("stop")), None);
    }

    #[test]
    fn retry_after_is_waited_when_longer_than_the_backoff_and_within_the_cap() {
        let policy = RetryPolicy::new(3, Backoff::Fixed, 10 * MS).max_delay(Duration::from_secs(2));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(1500))), Some(1500 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(1))), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(None)), Some(10 * MS));
        assert_eq!(retry_delay(&policy, 0, &rate_limit(Some(60_000))), None, "longer than the cap: the caller decides");
    }
}
