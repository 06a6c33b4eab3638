//! [`OpenAiModel`]: the [`Model`] implementation over reqwest.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use noetic_core::model::{Capabilities, Model, ModelRequest, ModelResponse, StreamDelta};
use noetic_core::{ConfigError, NoeticError};
use noetic_http::{Auth, ChunkedBody, HttpDriver, HttpFailure, Names, Transport, WireFormat};

use crate::config::{OPENAI_BASE_URL_ENV, OpenAiConfig};
use crate::status::status_error;
use crate::wire::{BodyOptions, HistoryCache, StreamAccumulator, encode_body, parse_response_keeping};

/// An OpenAI-compatible chat-completions model: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp's server.
///
/// `call` posts a non-streaming request; `stream` posts `stream: true` and parses the server-sent events.
///
/// **Retries.** Rate limits (429, waiting at least what `Retry-After` asks), server errors (5xx, 408, 409),
/// timeouts and connection errors are retried with the configured [`RetryPolicy`](noetic_core::model::RetryPolicy)
/// (default 3 attempts, exponential from 500 ms). A `Retry-After` longer than the policy's `max_delay` is not
/// waited out: the [`NoeticError::ModelRateLimit`] is returned at once so the caller decides (its delay clamped to
/// [`MAX_RETRY_AFTER`](noetic_http::MAX_RETRY_AFTER); a NaN or negative one counts as absent). A stream is retried
/// only until its response starts: a stall or failure before the first body byte (the
/// [idle limit](OpenAiConfig::idle_timeout), or the [timeout](OpenAiConfig::timeout) before the headers) is retried
/// like a failed call; once the first byte of a successful response has been read, failures end the stream with a
/// non-retryable error (a retry would repeat output already delivered). [`OpenAiConfig::retry`] sets the policy;
/// `max_attempts: 1` turns retries off.
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
    driver: Arc<HttpDriver<Wire>>,
}

/// This server family's wire format: the configuration its bodies depend on and the parts earlier requests
/// encoded, per item log (each request encodes only what is new and shares the rest as bytes).
struct Wire {
    config: OpenAiConfig,
    history_cache: HistoryCache,
}

impl WireFormat for Wire {
    type Decoder = StreamAccumulator;

    fn parse_response(&self, body: &str, _step_id: &str) -> Result<ModelResponse, NoeticError> {
        // A whole answer's errors (malformed JSON, an error object) are failures, which name no step. The calls'
        // arguments are kept as escaped for the request that sends them back.
        parse_response_keeping(body, &self.history_cache)
    }

    fn status_error(&self, failure: &HttpFailure<'_>) -> NoeticError {
        status_error(failure)
    }

    fn decoder(&self) -> StreamAccumulator {
        StreamAccumulator::new()
    }
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel").field("endpoint", &self.endpoint()).field("config", self.config()).finish()
    }
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
        let endpoint = format!("{}/chat/completions", config.base_url);
        let names = Names { provider: "the server", config: "OpenAiConfig", base_url_env: OPENAI_BASE_URL_ENV };
        let transport = Transport::new(config.http.clone(), endpoint, Auth::Bearer, &[], names)?;
        let wire = Wire { config, history_cache: HistoryCache::default() };
        Ok(OpenAiModel { driver: HttpDriver::new(transport, wire) })
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
        &self.driver.wire().config
    }

    /// The URL requests are posted to (`{base}/chat/completions`).
    pub fn endpoint(&self) -> &str {
        self.driver.transport().endpoint()
    }
}

impl Model for OpenAiModel {
    fn streams_natively(&self) -> bool {
        true
    }

    /// The configured window, else the well-known one of the model the request is sent as.
    fn context_window(&self, model: &str) -> Option<noetic_core::model::ContextWindow> {
        let config = self.config();
        config.window.or_else(|| noetic_core::model::known_window(&config.model_for(model)))
    }

    /// The configured counter, else OpenAI's tokenizer for an OpenAI model, else the estimate (`None`).
    fn token_counter(&self, model: &str) -> Option<Arc<dyn noetic_core::model::TokenCounter>> {
        let config = self.config();
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
        self.config().capabilities
    }

    /// `openai` for OpenAI's own API, `openrouter` for OpenRouter; unknown for other compatible servers.
    fn provider_name(&self) -> Option<&str> {
        let url = self.config().base_url.as_str();
        if url.contains("://api.openai.com") {
            Some("openai")
        } else if url.contains("://openrouter.ai") {
            Some("openrouter")
        } else {
            None
        }
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        self.driver.call(self.body(&request, false), request.step.clone())
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        self.driver.stream(self.body(&request, true), request.step.clone())
    }
}

impl OpenAiModel {
    /// The JSON body for `request`, with this server's adjustments, as shared chunks (a retry resends them without
    /// copying); its constant parts and the history's messages come from the cache where an earlier request
    /// encoded them.
    fn body(&self, request: &ModelRequest, stream: bool) -> ChunkedBody {
        let Wire { config, history_cache } = self.driver.wire();
        let options = BodyOptions {
            model: Some(config.model_for(&request.model)),
            grammar: config.capabilities.grammar,
            narrow_named_tool_choice: config.narrow_named_tool_choice,
            late_system_as_user: config.late_system_as_user,
        };
        encode_body(request, stream, &options, history_cache)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use noetic_core::ConfigCode;
    use noetic_core::model::{Backoff, RetryPolicy};

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
