//! [`OpenAiModel`]: the [`Model`] implementation over reqwest.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt, stream};
use noetic::model::{Capabilities, Model, ModelRequest, ModelResponse, StreamDelta};
use noetic::{ConfigCode, ConfigError, NoeticError};
use noetic_http::{ChunkedBody, error_chain, with_retries};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::config::OpenAiConfig;
use crate::transport::Opened;
use crate::wire::{BodyOptions, HistoryCache, encode_body, replay};

/// An OpenAI-compatible chat-completions model: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp's server.
///
/// `call` posts a non-streaming request; `stream` posts `stream: true` and parses the server-sent events.
///
/// **Retries.** Rate limits (429, waiting at least what `Retry-After` asks), server errors (5xx, 408, 409),
/// timeouts and connection errors are retried with the configured [`RetryPolicy`](noetic::step::RetryPolicy)
/// (default 3 attempts, exponential from 500 ms). A `Retry-After` longer than the policy's `max_delay` is not
/// waited out: the [`NoeticError::ModelRateLimit`] is returned at once so the caller decides (its delay clamped to
/// [`MAX_RETRY_AFTER`](noetic_http::MAX_RETRY_AFTER); a NaN or negative one counts as absent). A stream is retried
/// only until its response starts: a stall or failure before the first body byte (the
/// [idle limit](OpenAiConfig::idle_timeout), or the [timeout](OpenAiConfig::timeout) before the headers) is retried
/// like a failed call; once the first byte of a successful response has been read, failures end the stream with a
/// non-retryable error (a retry would repeat output already delivered). The client retries on its own, so do not
/// wrap it in [`RetryModel`](noetic::model::RetryModel) as well.
///
/// **Limits.** Every body — a response, an error body, a whole stream — is capped by
/// [`OpenAiConfig::max_body_bytes`] (32 MiB by default) and read once: over the cap the call ends with a
/// non-retryable error naming the setting.
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

/// What a request needs: the HTTP client, where to post, the configuration.
pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) endpoint: String,
    pub(crate) config: OpenAiConfig,
    /// The constant parts of bodies and the history messages earlier requests encoded, per item log: each
    /// request encodes only what is new and shares the rest as bytes.
    pub(crate) history_cache: HistoryCache,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("endpoint", &self.inner.endpoint)
            .field("config", &self.inner.config)
            .finish()
    }
}

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
    if config.timeout.is_zero() || config.connect_timeout.is_zero() || config.idle_timeout.is_zero() {
        return Err(ConfigError::new(
            ConfigCode::InvalidTimeout,
            "the OpenAI provider's timeout is zero, so every request would time out",
            "set OpenAiConfig::timeout, connect_timeout and idle_timeout to a positive duration",
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
    /// `INVALID_TIMEOUT` for a zero timeout, connect timeout or idle limit; `INVALID_RETRY_POLICY` for a policy with no attempts.
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
        Ok(OpenAiModel { inner: Arc::new(Inner { http, endpoint, config, history_cache: HistoryCache::default() }) })
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
    fn streams_natively(&self) -> bool {
        true
    }

    /// The configured window, else the well-known one of the model the request is sent as.
    fn context_window(&self, model: &str) -> Option<noetic::window::ContextWindow> {
        let config = &self.inner.config;
        config.window.or_else(|| noetic::window::known_window(&config.model_for(model)))
    }

    /// The configured counter, else OpenAI's tokenizer for an OpenAI model, else the estimate (`None`).
    fn token_counter(&self, model: &str) -> Option<Arc<dyn noetic::window::TokenCounter>> {
        let config = &self.inner.config;
        if let Some(counter) = &config.counter {
            return Some(counter.clone());
        }
        #[cfg(feature = "tiktoken")]
        if let Some(tiktoken) = crate::window::Tiktoken::for_model(&config.model_for(model)) {
            return Some(Arc::new(tiktoken));
        }
        let _ = model;
        None
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.config.capabilities
    }

    /// `openai` for OpenAI's own API, `openrouter` for OpenRouter; unknown for other compatible servers.
    fn provider_name(&self) -> Option<&str> {
        let url = self.inner.config.base_url.as_str();
        if url.contains("://api.openai.com") {
            Some("openai")
        } else if url.contains("://openrouter.ai") {
            Some("openrouter")
        } else {
            None
        }
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let inner = self.inner.clone();
        let body = inner.body(&request, false);
        Box::pin(async move {
            with_retries(&inner.config.retry, &inner.endpoint, || inner.timed(inner.call_once(&body))).await
        })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let inner = self.inner.clone();
        let body = inner.body(&request, true);
        let open = async move {
            // The attempt lasts until the first body byte, so a stall before it is retried like a failed call.
            let opened =
                with_retries(&inner.config.retry, &inner.endpoint, || inner.timed(inner.open_once(&body))).await?;
            Ok::<_, NoeticError>(match opened {
                Opened::Events(events) => events,
                // A server that ignored `stream: true` answered with a whole JSON response.
                Opened::Whole(response) => stream::iter(replay(response).into_iter().map(Ok)).boxed(),
            })
        };
        stream::once(open).try_flatten().boxed()
    }
}

impl Inner {
    /// The JSON body for `request`, with this server's adjustments, as shared chunks (a retry resends them without
    /// copying); its constant parts and the history's messages come from the cache where an earlier request
    /// encoded them.
    fn body(&self, request: &ModelRequest, stream: bool) -> ChunkedBody {
        let options = BodyOptions {
            model: Some(self.config.model_for(&request.model)),
            grammar: self.config.capabilities.grammar,
            narrow_named_tool_choice: self.config.narrow_named_tool_choice,
            late_system_as_user: self.config.late_system_as_user,
        };
        encode_body(request, stream, &options, &self.history_cache)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use noetic::step::{Backoff, RetryPolicy};

    use super::*;

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
        assert_eq!(code_of(OpenAiConfig::new().idle_timeout(Duration::ZERO)), Some(ConfigCode::InvalidTimeout));
        let no_attempts = RetryPolicy::new(0, Backoff::Fixed, Duration::from_millis(1));
        assert_eq!(code_of(OpenAiConfig::new().retry(no_attempts)), Some(ConfigCode::InvalidRetryPolicy));
        assert_eq!(code_of(OpenAiConfig::ollama()), None);
    }
}
