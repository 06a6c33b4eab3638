//! Client configuration, from code or from the environment.

use std::fmt;

pub use noetic_http::{DEFAULT_IDLE_TIMEOUT, DEFAULT_RETRY, DEFAULT_TIMEOUT};
use noetic_http::{HttpConfig, non_empty_var};

use crate::error::API_KEY_VAR;

/// Anthropic's public API.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The environment variable holding a base URL (a proxy, a local mock server).
pub const BASE_URL_VAR: &str = "ANTHROPIC_BASE_URL";

/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

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
/// assert_eq!(config.timeout, Duration::from_secs(60));
/// ```
///
/// The settings every HTTP provider shares are an [`HttpConfig`] it dereferences to (`config.api_key`,
/// `config.base_url`, `config.timeout` …), with the builder methods `base_url`, `api_key`, `no_api_key`,
/// `key_env`, `header`, `timeout`, `connect_timeout`, `idle_timeout`, `max_body_bytes`, `retry`, `model_override`
/// and their getters. Without a key (for proxies that add their own) Anthropic answers 401 and the error names
/// `ANTHROPIC_API_KEY`.
#[derive(Clone)]
pub struct AnthropicConfig {
    pub(crate) http: HttpConfig,
}

noetic_http::http_config_methods!(AnthropicConfig);

impl AnthropicConfig {
    /// A configuration with `api_key` and the defaults: [`DEFAULT_BASE_URL`], [`DEFAULT_TIMEOUT`],
    /// [`DEFAULT_IDLE_TIMEOUT`], a 32 MiB body cap ([`noetic_http::DEFAULT_MAX_BODY_BYTES`]), [`DEFAULT_RETRY`].
    pub fn new(api_key: impl Into<String>) -> Self {
        Self::without_key().api_key(api_key)
    }

    /// A configuration that sends no API key (for a local proxy that adds its own).
    pub fn without_key() -> Self {
        AnthropicConfig { http: HttpConfig::new(DEFAULT_BASE_URL, API_KEY_VAR) }
    }

    /// A configuration from the environment: `ANTHROPIC_API_KEY` (the key; unset or empty sends none) and
    /// `ANTHROPIC_BASE_URL` (default [`DEFAULT_BASE_URL`]).
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Like [`AnthropicConfig::from_env`], reading variables through `var` (handy in tests and for config files).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let mut config = Self::without_key();
        config.http.api_key = non_empty_var(&var, API_KEY_VAR);
        match non_empty_var(&var, BASE_URL_VAR) {
            Some(url) => config.base_url(url),
            None => config,
        }
    }

    /// The URL requests go to: the base URL plus `/v1/messages` (or `/messages` when it already ends in `/v1`).
    pub fn messages_url(&self) -> String {
        let base = self.http.base_url.trim_end_matches('/');
        if base.ends_with("/v1") { format!("{base}/messages") } else { format!("{base}/v1/messages") }
    }
}

impl fmt::Debug for AnthropicConfig {
    /// Never prints the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicConfig").field("http", &self.http).finish()
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
