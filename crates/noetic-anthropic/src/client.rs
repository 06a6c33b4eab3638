//! [`AnthropicModel`]: Anthropic's wire format (body encoding, response and stream parsing, status mapping) over
//! `noetic-http`'s transport and driver, which send requests, read bodies within the cap and retry.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use noetic_core::model::{Model, ModelRequest, ModelResponse, StreamDelta};
use noetic_core::{ConfigError, NoeticError};
use noetic_http::{Auth, ChunkedBody, HttpDriver, HttpFailure, Names, Transport, WireFormat};

use crate::config::{ANTHROPIC_VERSION, AnthropicConfig, BASE_URL_VAR};
use crate::encode::{HistoryCache, encode_body};
use crate::error::error_from_failure;
use crate::response::parse_response_of;
use crate::sse::Decoder;

/// A [`Model`] backed by Anthropic's Messages API (`POST /v1/messages`).
///
/// * [`Model::call`] sends a non-streamed request; [`Model::stream`] sends `"stream": true` and yields deltas as
///   the server-sent events arrive, ending with [`StreamDelta::Done`].
/// * Rate limits (429, honouring `Retry-After`), overload (529), other 5xx, 408/409, timeouts and connection
///   failures are retried with [`AnthropicConfig::retry`] — for a stream only
///   until the response has begun (its first body byte: a stall before it, per the idle limit, is retried too),
///   never after. A `Retry-After` longer than the policy's longest delay is not waited for: the
///   [`NoeticError::ModelRateLimit`] is returned at once, its delay clamped to
///   [`MAX_RETRY_AFTER`](noetic_http::MAX_RETRY_AFTER).
/// * Every body — a response, an error body, a whole stream — is capped by
///   [`AnthropicConfig::max_body_bytes`] (32 MiB by default) and read once: over the cap the call ends with a
///   non-retryable error naming the setting.
/// * Cancellation is by dropping the future or stream, which closes the connection; nothing is spawned.
///
/// The model is cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub struct AnthropicModel {
    driver: Arc<HttpDriver<Wire>>,
}

/// Anthropic's wire format: the configuration its bodies depend on and the history messages earlier requests
/// encoded, per item log (each request encodes only what is new).
struct Wire {
    config: AnthropicConfig,
    history_cache: HistoryCache,
}

impl WireFormat for Wire {
    type Decoder = Decoder;

    fn parse_response(&self, body: &str, step_id: &str) -> Result<ModelResponse, NoeticError> {
        parse_response_of(body, step_id)
    }

    fn status_error(&self, failure: &HttpFailure<'_>) -> NoeticError {
        error_from_failure(failure)
    }

    fn decoder(&self) -> Decoder {
        Decoder::default()
    }
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel").field("config", self.config()).finish_non_exhaustive()
    }
}

impl AnthropicModel {
    /// A model client with `config`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`]: `NO_MODEL_PROVIDER` when the base URL is not an `http(s)` URL, the key or a header cannot
    /// be sent in an HTTP header, or the HTTP client cannot be built; `INVALID_TIMEOUT` for a zero timeout,
    /// connect timeout or idle limit; `INVALID_RETRY_POLICY` for a policy with no attempts.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let names = Names { provider: "Anthropic", config: "AnthropicConfig", base_url_env: BASE_URL_VAR };
        let fixed = [("anthropic-version", ANTHROPIC_VERSION)];
        let transport =
            Transport::new(config.http.clone(), config.messages_url(), Auth::Header("x-api-key"), &fixed, names)?;
        let wire = Wire { config, history_cache: HistoryCache::default() };
        Ok(AnthropicModel { driver: HttpDriver::new(transport, wire) })
    }

    /// A model client configured from the environment (see [`AnthropicConfig::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`AnthropicModel::new`].
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(AnthropicConfig::from_env())
    }

    /// The configuration.
    pub fn config(&self) -> &AnthropicConfig {
        &self.driver.wire().config
    }

    /// The body for `request`, with the configured model override applied; the history's messages come from the
    /// cache where an earlier request of the same log encoded them. Shared chunks: a retry resends them without
    /// copying.
    fn body(&self, request: &ModelRequest, stream: bool) -> ChunkedBody {
        let Wire { config, history_cache } = self.driver.wire();
        encode_body(request, stream, config.model_override.as_deref(), history_cache)
    }
}

impl Model for AnthropicModel {
    fn streams_natively(&self) -> bool {
        true
    }

    fn provider_name(&self) -> Option<&str> {
        Some("anthropic")
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        self.driver.call(self.body(&request, false), request.step.clone())
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        self.driver.stream(self.body(&request, true), request.step.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use noetic_core::ConfigCode;

    use super::*;

    #[test]
    fn invalid_base_urls_and_zero_timeouts_are_rejected_when_the_client_is_built() {
        let code = |config: AnthropicConfig| AnthropicModel::new(config).err().map(|e| e.code);
        assert_eq!(code(AnthropicConfig::without_key().base_url("not a url")), Some(ConfigCode::NoModelProvider));
        assert_eq!(code(AnthropicConfig::without_key().base_url("ftp://host")), Some(ConfigCode::NoModelProvider));
        let idle = AnthropicModel::new(AnthropicConfig::without_key().idle_timeout(Duration::ZERO));
        assert!(matches!(idle, Err(e) if e.code == ConfigCode::InvalidTimeout && e.hint.contains("idle_timeout")));
        assert_eq!(code(AnthropicConfig::without_key()), None);
    }

    #[test]
    fn a_key_that_cannot_be_sent_in_a_header_is_rejected_when_the_client_is_built() {
        let model = AnthropicModel::new(AnthropicConfig::new("sk-ant-\nx"));
        assert!(
            matches!(&model, Err(e) if e.code == ConfigCode::NoModelProvider && e.hint.contains("ANTHROPIC_API_KEY")),
            "{model:?}"
        );
    }
}
