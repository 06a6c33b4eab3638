//! The transport every HTTP provider uses: a reqwest client built from an [`HttpConfig`], a request body sent as
//! shared chunks, bodies read within the cap, and reqwest's failures turned into typed errors that say what to do.

use std::sync::Arc;
use std::time::SystemTime;

use noetic_core::error::ErrorSource;
use noetic_core::{ConfigCode, ConfigError, NoeticError};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::body::{BodyError, error_body_text, read_body, too_large};
use crate::chunks::ChunkedBody;
use crate::config::HttpConfig;
use crate::retry_after::parse_retry_after;
use crate::sse::SseStreamError;
use crate::status::HttpFailure;
use crate::{describe_bytes, error_chain};

/// How a provider sends its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI and compatible servers).
    Bearer,
    /// The key as the value of this header (Anthropic's `x-api-key`).
    Header(&'static str),
}

/// The words a provider's errors use.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// Who answers, e.g. `Anthropic`, or `the server` for any OpenAI-compatible one.
    pub provider: &'static str,
    /// The config type, named with the setting to change (`OpenAiConfig` → `OpenAiConfig::timeout`).
    pub config: &'static str,
    /// The environment variable holding the base URL.
    pub base_url_env: &'static str,
}

/// A provider's connection: the HTTP client with its default headers, where to post, the settings, the words.
pub struct Transport {
    http: reqwest::Client,
    endpoint: Arc<str>,
    config: HttpConfig,
    names: Names,
}

fn config_error(message: String, hint: &str) -> ConfigError {
    ConfigError::new(ConfigCode::NoModelProvider, message, hint)
}

/// Catches mistakes that would otherwise only show on the first request.
fn validate(config: &HttpConfig, endpoint: &str, names: &Names) -> Result<(), ConfigError> {
    let url = reqwest::Url::parse(endpoint).ok().filter(|u| matches!(u.scheme(), "http" | "https"));
    if url.is_none() {
        return Err(config_error(
            format!("the {} endpoint '{endpoint}' is not an http(s) URL", names.provider),
            &format!("use a full URL such as http://localhost:8080 (check {})", names.base_url_env),
        ));
    }
    if config.timeout.is_zero() || config.connect_timeout.is_zero() || config.idle_timeout.is_zero() {
        return Err(ConfigError::new(
            ConfigCode::InvalidTimeout,
            format!("the {} provider's timeout is zero, so every request would time out", names.provider),
            format!("set {0}::timeout, connect_timeout and idle_timeout to a positive duration", names.config),
        ));
    }
    if config.retry.max_attempts < 1 {
        return Err(ConfigError::new(
            ConfigCode::InvalidRetryPolicy,
            format!("the {} provider's retry policy has max_attempts 0, so no request would be sent", names.provider),
            "set max_attempts to at least 1 (1 = no retries)",
        ));
    }
    Ok(())
}

/// The headers every request carries: the key, the configured ones, then the provider's fixed ones.
fn default_headers(config: &HttpConfig, auth: Auth, fixed: &[(&str, &str)]) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    if let Some(key) = &config.api_key {
        let (name, text) = match auth {
            Auth::Bearer => (AUTHORIZATION, format!("Bearer {}", key.trim())),
            Auth::Header(name) => (HeaderName::from_static(name), key.trim().to_owned()),
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            config_error(
                format!(
                    "the API key for {} contains characters that cannot be sent in an HTTP header",
                    config.base_url
                ),
                &format!("check {} for stray quotes, spaces or newlines", config.key_env),
            )
        })?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let configured = config.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    for (name, value) in configured.chain(fixed.iter().copied()) {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            config_error(format!("'{name}' is not a valid HTTP header name"), "use a plain ASCII token such as X-Title")
        })?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            config_error(
                format!("the value of header '{name}' cannot be sent in an HTTP header"),
                "remove newlines and non-visible characters from the value",
            )
        })?;
        headers.append(header, value);
    }
    Ok(headers)
}

impl Transport {
    /// A transport posting to `endpoint` with `config`, sending the key as `auth` says and `fixed` headers on every
    /// request.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`]: `NO_MODEL_PROVIDER` when the endpoint is not an `http(s)` URL, a header name or value or
    /// the key cannot be sent in an HTTP header, or the HTTP client cannot be built; `INVALID_TIMEOUT` for a zero
    /// timeout, connect timeout or idle limit; `INVALID_RETRY_POLICY` for a policy with no attempts.
    pub fn new(
        config: HttpConfig,
        endpoint: String,
        auth: Auth,
        fixed: &[(&str, &str)],
        names: Names,
    ) -> Result<Self, ConfigError> {
        validate(&config, &endpoint, &names)?;
        let http = reqwest::Client::builder()
            .default_headers(default_headers(&config, auth, fixed)?)
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.timeout)
            .build()
            .map_err(|e| {
                config_error(format!("the HTTP client could not be built: {}", error_chain(&e)), "check the TLS setup")
            })?;
        Ok(Transport { http, endpoint: Arc::from(endpoint), config, names })
    }

    /// The settings.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `Config::setting`, as errors name it.
    fn setting(&self, name: &str) -> String {
        format!("{}::{name}", self.names.config)
    }

    /// Posts the body; returns the response once its status is a success, else the provider's typed error for it
    /// (`status_error`, given the error body read once within the cap and `step_id`, the step that asked).
    pub async fn send(
        &self,
        body: &ChunkedBody,
        stream: bool,
        step_id: &str,
        status_error: impl FnOnce(&HttpFailure<'_>) -> NoeticError,
    ) -> Result<reqwest::Response, NoeticError> {
        let response = self
            .http
            .post(&*self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, if stream { "text/event-stream" } else { "application/json" })
            // The shared chunks, with their exact length: sent with a Content-Length, as one buffer would be.
            .body(reqwest::Body::wrap(body.http_body()))
            .send()
            .await
            .map_err(|e| self.transport_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let retry_after = parse_retry_after(
            header("retry-after-ms").as_deref(),
            header(RETRY_AFTER.as_str()).as_deref(),
            SystemTime::now(),
        );
        let length = response.content_length();
        let setting = self.setting("max_body_bytes");
        // Read once and not retried: a retry would fetch the same oversized body again.
        let raw = error_body_text(
            response.bytes_stream(),
            self.config.max_body_bytes,
            length,
            status.as_u16(),
            &self.endpoint,
            &setting,
        )
        .await?;
        Err(status_error(&HttpFailure {
            status: status.as_u16(),
            retry_after,
            raw: &raw,
            key_sent: self.config.api_key.is_some(),
            key_env: &self.config.key_env,
            endpoint: &self.endpoint,
            step_id,
        }))
    }

    /// A whole body as text, read once within the cap. Nothing has reached the caller yet, so a failure here may
    /// be retried.
    pub async fn read_whole(&self, response: reqwest::Response) -> Result<String, NoeticError> {
        let length = response.content_length();
        let bytes = read_body(response.bytes_stream(), self.config.max_body_bytes, length)
            .await
            .map_err(|e| self.body_error(e))?;
        // Valid UTF-8 (the usual case) becomes the text without a copy.
        Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// The error for an attempt that ran out of time (retryable).
    pub fn timed_out(&self) -> NoeticError {
        NoeticError::ModelFailed {
            message: format!(
                "{} at {} did not answer within {} ms; try again, or raise {}",
                self.names.provider,
                self.endpoint,
                self.config.timeout.as_millis(),
                self.setting("timeout")
            ),
            status: None,
            raw: None,
            retryable: true,
            source: None,
        }
    }

    /// A failure reading a body before anything reached the caller.
    pub fn body_error(&self, error: BodyError<reqwest::Error>) -> NoeticError {
        match error {
            BodyError::Transport(e) => self.transport_error(e),
            BodyError::TooLarge { limit } => {
                too_large(&format!("the response from {}", self.endpoint), limit, None, &self.setting("max_body_bytes"))
            }
            BodyError::Idle { after } => NoeticError::ModelFailed {
                message: format!(
                    "{} at {} sent the response headers, then no data for {} ms ({}); try again, or raise the idle \
                     limit if the server pauses this long before answering",
                    self.names.provider,
                    self.endpoint,
                    after.as_millis(),
                    self.setting("idle_timeout")
                ),
                status: None,
                raw: None,
                retryable: true,
                source: None,
            },
        }
    }

    /// A request that got no HTTP response: a timeout, a refused connection, a reset. Retryable, since nothing
    /// reached the caller — except a request that could not even be built. reqwest's error is kept as the source
    /// (`std::error::Error::source` walks on to its I/O cause).
    pub fn transport_error(&self, error: reqwest::Error) -> NoeticError {
        let detail = error_chain(&error);
        let (who, url, env) = (self.names.provider, &self.endpoint, self.names.base_url_env);
        let (message, retryable) = if error.is_timeout() {
            // reqwest's read timeout is the configured timeout, so this says the same as `timed_out` does.
            let ms = self.config.timeout.as_millis();
            (
                format!(
                    "{who} at {url} did not answer within {ms} ms ({detail}); try again, or raise {}",
                    self.setting("timeout")
                ),
                true,
            )
        } else if error.is_connect() {
            (
                format!(
                    "could not connect to {who} at {url} ({detail}); check the base URL ({env}) and that the server is running"
                ),
                true,
            )
        } else if error.is_builder() {
            (format!("the request to {url} could not be built ({detail}); check the base URL ({env})"), false)
        } else {
            (format!("the request to {who} at {url} failed ({detail}); try again"), true)
        };
        NoeticError::ModelFailed { message, status: None, raw: None, retryable, source: Some(ErrorSource::new(error)) }
    }

    /// What ended a stream after it began, in words (the provider wraps them in its non-retryable error).
    pub fn stream_failure(&self, error: SseStreamError<BodyError<reqwest::Error>>) -> String {
        match error {
            SseStreamError::Transport(BodyError::Transport(e)) => {
                format!("the connection failed mid-stream: {}", error_chain(&e))
            }
            SseStreamError::Transport(BodyError::TooLarge { limit }) => format!(
                "the streamed response is larger than the limit of {} ({})",
                describe_bytes(limit),
                self.setting("max_body_bytes")
            ),
            SseStreamError::Transport(BodyError::Idle { after }) => {
                format!("no data arrived for {} ms mid-stream ({})", after.as_millis(), self.setting("idle_timeout"))
            }
            SseStreamError::Sse(e) => format!("{e} ({})", self.setting("max_body_bytes")),
        }
    }
}
