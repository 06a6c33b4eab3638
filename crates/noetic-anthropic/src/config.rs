//! Client configuration, from code or from the environment.

use std::fmt;
use std::time::Duration;

use noetic::step::{Backoff, RetryPolicy};

/// Anthropic's public API.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// How long a request may take by default: 10 minutes, as Anthropic's own SDKs allow for long generations.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// The default idle limit of a stream: the longest silence between two pieces of a streamed body. Anthropic sends
/// `ping` events while a response is being generated, so a minute of silence means the connection stalled.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default retry policy: 3 attempts, exponential backoff from 500 ms (500 ms, then 1 s), each delay capped at
/// 30 s.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff: Backoff::Exponential,
    initial_delay: Duration::from_millis(500),
    max_delay: None,
};

/// How to reach Anthropic.
///
/// ```
/// use std::time::Duration;
/// use noetic::step::{Backoff, RetryPolicy};
/// use noetic_anthropic::AnthropicConfig;
///
/// let config = AnthropicConfig::new("sk-ant-...")
///     .base_url("http://127.0.0.1:8080")
///     .timeout(Duration::from_secs(60))
///     .retry(RetryPolicy::new(5, Backoff::Exponential, Duration::from_millis(200)));
/// assert_eq!(config.messages_url(), "http://127.0.0.1:8080/v1/messages");
/// ```
#[derive(Clone)]
pub struct AnthropicConfig {
    /// The API key, sent as `x-api-key`. `None` sends no key (for proxies that add their own); Anthropic then
    /// answers 401 and the error names `ANTHROPIC_API_KEY`.
    pub api_key: Option<String>,
    /// Where the API lives, without `/v1/messages` (a trailing `/v1` is accepted too).
    pub base_url: String,
    /// The limit on one attempt: for [`noetic::model::Model::call`], the whole request; for
    /// [`noetic::model::Model::stream`], the wait for the response to begin (headers and first body bytes). An
    /// attempt that runs out of time is retried.
    pub timeout: Duration,
    /// The idle limit of a stream: the longest wait for the next bytes of a streamed body once its headers
    /// arrived. Before the first body byte a silence this long fails the attempt, which is retried; later it ends
    /// the stream with a non-retryable error, since part of the answer is out.
    pub idle_timeout: Duration,
    /// The cap on a response body, in bytes: a whole response, an error body, and a whole streamed response (so
    /// also one event). Over the cap the body is not read further and the call ends with a non-retryable
    /// [`noetic::NoeticError::ModelFailed`] naming this setting; it is not retried, since the same request would
    /// bring the same body.
    pub max_body_bytes: usize,
    /// Retries of rate limits (429), overload (529), server errors, timeouts and connection failures — only
    /// before a streamed response has begun, never after. Set `max_attempts: 1` to turn retries off (for instance
    /// when wrapping the model in [`noetic::model::RetryModel`]).
    pub retry: RetryPolicy,
    /// When set, this model id is sent instead of the request's (useful when steps or steering rules name models
    /// of another provider, e.g. the runtime's default `openai/gpt-4o-mini`).
    pub model_override: Option<String>,
}

impl AnthropicConfig {
    /// A configuration with `api_key` and the defaults: [`DEFAULT_BASE_URL`], [`DEFAULT_TIMEOUT`],
    /// [`DEFAULT_IDLE_TIMEOUT`], a 32 MiB body cap ([`noetic_http::DEFAULT_MAX_BODY_BYTES`]), [`DEFAULT_RETRY`].
    pub fn new(api_key: impl Into<String>) -> Self {
        AnthropicConfig { api_key: Some(api_key.into()), ..Self::without_key() }
    }

    /// A configuration that sends no API key (for a local proxy that adds its own).
    pub fn without_key() -> Self {
        AnthropicConfig {
            api_key: None,
            base_url: DEFAULT_BASE_URL.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_body_bytes: noetic_http::DEFAULT_MAX_BODY_BYTES,
            retry: DEFAULT_RETRY,
            model_override: None,
        }
    }

    /// A configuration from the environment: `ANTHROPIC_API_KEY` (the key; unset or empty sends none) and
    /// `ANTHROPIC_BASE_URL` (default [`DEFAULT_BASE_URL`]).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`AnthropicConfig::from_env`], reading variables through `var` (handy in tests and for config files).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let present = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let mut config = Self::without_key();
        config.api_key = present("ANTHROPIC_API_KEY");
        if let Some(url) = present("ANTHROPIC_BASE_URL") {
            config.base_url = url;
        }
        config
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the base URL (e.g. a proxy or a local mock server).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Sets the per-attempt timeout (see the `timeout` field).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the idle limit of a stream (see the `idle_timeout` field; default [`DEFAULT_IDLE_TIMEOUT`]).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Sets the cap on a response body in bytes (see the `max_body_bytes` field; default 32 MiB).
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sends `model` instead of every request's model id.
    pub fn model_override(mut self, model: impl Into<String>) -> Self {
        self.model_override = Some(model.into());
        self
    }

    /// The URL requests go to: the base URL plus `/v1/messages` (or `/messages` when it already ends in `/v1`).
    pub fn messages_url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") { format!("{base}/messages") } else { format!("{base}/v1/messages") }
    }
}

impl fmt::Debug for AnthropicConfig {
    /// Never prints the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("retry", &self.retry)
            .field("model_override", &self.model_override)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vars_reads_the_key_and_base_url_and_ignores_empty_values() {
        let c = AnthropicConfig::from_vars(|n| match n {
            "ANTHROPIC_API_KEY" => Some("sk-ant-1".into()),
            "ANTHROPIC_BASE_URL" => Some("http://localhost:9/".into()),
            _ => None,
        });
        assert_eq!(c.api_key.as_deref(), Some("sk-ant-1"));
        assert_eq!(c.messages_url(), "http://localhost:9/v1/messages");
        let empty = AnthropicConfig::from_vars(|_| Some(" ".into()));
        assert_eq!(empty.api_key, None);
        assert_eq!(empty.base_url, DEFAULT_BASE_URL);
    }

    #[test]
    fn a_base_url_ending_in_v1_is_not_doubled() {
        assert_eq!(AnthropicConfig::without_key().base_url("http://h/v1").messages_url(), "http://h/v1/messages");
        assert_eq!(AnthropicConfig::without_key().messages_url(), "https://api.anthropic.com/v1/messages");
    }

    #[test]
    fn debug_output_hides_the_key() {
        let text = format!("{:?}", AnthropicConfig::new("sk-ant-secret"));
        assert!(!text.contains("secret") && text.contains("redacted"), "{text}");
    }
}
