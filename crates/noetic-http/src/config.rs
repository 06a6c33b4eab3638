//! What every HTTP provider is configured with — base URL, key, extra headers, timeouts, body cap, retries, a model
//! override — in one type that each provider's config wraps, with one set of builder methods
//! ([`http_config_methods!`](crate::http_config_methods)).

use std::fmt;
use std::time::Duration;

use noetic_core::model::Backoff;
use noetic_core::model::RetryPolicy;

use crate::DEFAULT_MAX_BODY_BYTES;

/// The default request timeout of one attempt: 10 minutes, as the providers' own SDKs allow for long generations.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default idle limit of a stream: the longest silence between two pieces of a streamed body.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default retry policy: 3 attempts, exponential backoff from 500 ms (500 ms, then 1 s), each delay capped at
/// 30 s.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_attempts: 3,
    backoff: Backoff::Exponential,
    initial_delay: Duration::from_millis(500),
    max_delay: None,
};

/// How to reach an HTTP model provider: the settings every provider shares. A provider's config wraps one (and
/// dereferences to it), adding what only it needs.
///
/// ```
/// use std::time::Duration;
/// use noetic_http::HttpConfig;
///
/// let config = HttpConfig::new("http://127.0.0.1:8080/v1/", "MY_API_KEY");
/// assert_eq!(config.base_url, "http://127.0.0.1:8080/v1");
/// assert_eq!(config.timeout, Duration::from_secs(600));
/// assert!(config.api_key.is_none());
/// ```
#[derive(Clone)]
pub struct HttpConfig {
    /// Where the API lives (no trailing `/`).
    pub base_url: String,
    /// The API key; `None` sends none (local servers, proxies that add their own).
    pub api_key: Option<String>,
    /// The environment variable error messages tell the user to set when the key is missing or wrong.
    pub key_env: String,
    /// Headers added to every request.
    pub headers: Vec<(String, String)>,
    /// The limit on one attempt: a whole non-streamed call, or the wait for a stream to begin (its headers and
    /// first body bytes). An attempt that runs out of time is retried.
    pub timeout: Duration,
    /// The limit on opening a connection.
    pub connect_timeout: Duration,
    /// The idle limit of a stream: the longest wait for the next bytes of a streamed body once its headers
    /// arrived. Before the first body byte a silence this long fails the attempt, which is retried; later it ends
    /// the stream with a non-retryable error, since part of the answer is out.
    pub idle_timeout: Duration,
    /// The cap on a response body in bytes: a whole response, an error body, a whole stream (so also one event).
    /// Over it the call ends with a non-retryable error naming the setting (the same request would bring the same
    /// body).
    pub max_body_bytes: usize,
    /// Retries of rate limits, overload, server errors, timeouts and connection failures — only before a streamed
    /// response has begun, never after. `max_attempts: 1` turns them off.
    pub retry: RetryPolicy,
    /// When set, this model id is sent instead of every request's.
    pub model_override: Option<String>,
}

impl HttpConfig {
    /// `base_url` (a trailing `/` is dropped) with no key, naming `key_env` in key errors, and the defaults:
    /// [`DEFAULT_TIMEOUT`], [`DEFAULT_CONNECT_TIMEOUT`], [`DEFAULT_IDLE_TIMEOUT`], a 32 MiB body cap
    /// ([`DEFAULT_MAX_BODY_BYTES`]) and [`DEFAULT_RETRY`].
    pub fn new(base_url: impl Into<String>, key_env: impl Into<String>) -> Self {
        HttpConfig {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            key_env: key_env.into(),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            retry: DEFAULT_RETRY,
            model_override: None,
        }
    }
}

/// Reads variable `name` through `lookup`, treating an empty or blank value as absent.
pub fn non_empty_var(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

impl fmt::Debug for HttpConfig {
    /// Never prints the key or header values: configs end up in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .field("headers", &self.headers.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("retry", &self.retry)
            .field("model_override", &self.model_override)
            .finish()
    }
}

/// The builder methods and getters of a provider config that wraps an [`HttpConfig`] in its field `http`, written
/// once for every provider: `http_config_methods!(OpenAiConfig)` gives `OpenAiConfig` `base_url`, `api_key`,
/// `no_api_key`, `key_env`, `header`, `timeout`, `connect_timeout`, `idle_timeout`, `max_body_bytes`, `retry`,
/// `model_override` (each taking and returning the config), their `get_…` / `has_api_key` getters, and
/// `Deref`/`DerefMut` to the [`HttpConfig`].
#[macro_export]
macro_rules! http_config_methods {
    ($config:ident) => {
        impl ::std::ops::Deref for $config {
            type Target = $crate::HttpConfig;
            fn deref(&self) -> &$crate::HttpConfig {
                &self.http
            }
        }

        impl ::std::ops::DerefMut for $config {
            fn deref_mut(&mut self) -> &mut $crate::HttpConfig {
                &mut self.http
            }
        }

        impl $config {
            /// Sets the base URL (a trailing `/` is ignored), e.g. a proxy or a local server.
            pub fn base_url(mut self, url: impl Into<String>) -> Self {
                self.http.base_url = url.into().trim_end_matches('/').to_owned();
                self
            }

            /// Sets the API key.
            pub fn api_key(mut self, key: impl Into<String>) -> Self {
                self.http.api_key = Some(key.into());
                self
            }

            /// Removes the API key (none is sent).
            pub fn no_api_key(mut self) -> Self {
                self.http.api_key = None;
                self
            }

            /// Names the environment variable that error messages tell the user to set when the key is missing
            /// or wrong.
            pub fn key_env(mut self, name: impl Into<String>) -> Self {
                self.http.key_env = name.into();
                self
            }

            /// Adds a header to every request.
            pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
                self.http.headers.push((name.into(), value.into()));
                self
            }

            /// Sets the limit on one attempt (default 600 s): a whole non-streamed call, or the wait for a stream
            /// to begin (its headers and first body bytes). An attempt that runs out of time is retried.
            pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.http.timeout = timeout;
                self
            }

            /// Sets the connect timeout (default 10 s).
            pub fn connect_timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.http.connect_timeout = timeout;
                self
            }

            /// Sets the idle limit of a stream (default 60 s): the longest wait for the next bytes of a streamed
            /// body once its headers arrived. Before the first body byte a silence this long fails the attempt,
            /// which is retried; later it ends the stream with a non-retryable error.
            pub fn idle_timeout(mut self, timeout: ::std::time::Duration) -> Self {
                self.http.idle_timeout = timeout;
                self
            }

            /// Sets the cap on a response body in bytes (default 32 MiB): a whole response, an error body, a whole
            /// stream. Over it the call ends with a non-retryable error naming this setting.
            pub fn max_body_bytes(mut self, bytes: usize) -> Self {
                self.http.max_body_bytes = bytes;
                self
            }

            /// Sets the retry policy (default 3 attempts, exponential from 500 ms; `max_attempts: 1` turns
            /// retries off). Retries happen only before a response has begun, never after.
            pub fn retry(mut self, policy: ::noetic_core::model::RetryPolicy) -> Self {
                self.http.retry = policy;
                self
            }

            /// Sends `model` instead of every request's model id (useful when steps or steering rules name
            /// models of another provider, e.g. the runtime's default `openai/gpt-4o-mini`).
            pub fn model_override(mut self, model: impl Into<String>) -> Self {
                self.http.model_override = Some(model.into());
                self
            }

            /// The base URL.
            pub fn get_base_url(&self) -> &str {
                &self.http.base_url
            }

            /// True when a key is configured.
            pub fn has_api_key(&self) -> bool {
                self.http.api_key.is_some()
            }

            /// The environment variable error messages name for the key.
            pub fn get_key_env(&self) -> &str {
                &self.http.key_env
            }

            /// The retry policy.
            pub fn get_retry(&self) -> ::noetic_core::model::RetryPolicy {
                self.http.retry
            }

            /// The limit on one attempt.
            pub fn get_timeout(&self) -> ::std::time::Duration {
                self.http.timeout
            }

            /// The idle limit of a stream.
            pub fn get_idle_timeout(&self) -> ::std::time::Duration {
                self.http.idle_timeout
            }

            /// The cap on a response body, in bytes.
            pub fn get_max_body_bytes(&self) -> usize {
                self.http.max_body_bytes
            }

            /// The shared settings.
            pub fn http(&self) -> &$crate::HttpConfig {
                &self.http
            }
        }
    };
}
