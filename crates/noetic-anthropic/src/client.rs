//! The transport: [`AnthropicModel`] sends requests with `reqwest`, retries before a response has begun, and hands
//! bodies to the pure translation functions.

use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use noetic::NoeticError;
use noetic::model::{Model, ModelRequest, ModelResponse, StreamDelta, replay};
use noetic_http::{
    BodyError, ChunkedBody, SseStreamError, describe_bytes, error_body_text, error_chain, first_chunk,
    parse_retry_after, read_body, sse_events, with_retries,
};

use crate::config::{ANTHROPIC_VERSION, AnthropicConfig};
use crate::encode::{HistoryCache, encode_body};
use crate::error::{error_from_status, transport_error};
use crate::response::parse_response;
use crate::sse::{event_deltas, mid_stream};

/// A [`Model`] backed by Anthropic's Messages API (`POST /v1/messages`).
///
/// * [`Model::call`] sends a non-streamed request; [`Model::stream`] sends `"stream": true` and yields deltas as
///   the server-sent events arrive, ending with [`StreamDelta::Done`].
/// * Rate limits (429, honouring `Retry-After`), overload (529), other 5xx, 408/409, timeouts and connection
///   failures are retried with the configured [`RetryPolicy`](noetic::step::RetryPolicy) — for a stream only
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
    http: reqwest::Client,
    config: Arc<AnthropicConfig>,
    url: Arc<str>,
    /// The history messages earlier requests encoded, per item log: each request encodes only what is new.
    history_cache: Arc<HistoryCache>,
}

impl std::fmt::Debug for AnthropicModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicModel").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What a streaming attempt opened.
enum Opened {
    /// The deltas of an SSE body whose first bytes have arrived.
    Events(BoxStream<'static, Result<StreamDelta, NoeticError>>),
    /// A whole JSON response (a server that ignored `"stream": true`).
    Whole(ModelResponse),
}

impl AnthropicModel {
    /// A model client with `config`.
    ///
    /// # Errors
    ///
    /// [`NoeticError::ModelFailed`] when the base URL is not a valid URL, the timeout or idle limit is zero, or the
    /// HTTP client cannot be built.
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
        if config.timeout.is_zero() || config.idle_timeout.is_zero() {
            return Err(NoeticError::ModelFailed {
                message: "the Anthropic provider's timeout or idle limit is zero, so every request would time out; \
                          set AnthropicConfig::timeout and idle_timeout to a positive duration"
                    .to_owned(),
                status: None,
                raw: None,
                retryable: false,
            });
        }
        let http = reqwest::Client::builder().build().map_err(|e| NoeticError::ModelFailed {
            message: format!("cannot build the HTTP client ({}); check the TLS setup", error_chain(&e)),
            status: None,
            raw: None,
            retryable: false,
        })?;
        Ok(AnthropicModel {
            http,
            config: Arc::new(config),
            url: Arc::from(url),
            history_cache: Arc::new(HistoryCache::default()),
        })
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

    /// The body for `request`, with the configured model override applied; the history's messages come from the
    /// cache where an earlier request of the same log encoded them. Shared chunks: a retry resends them without
    /// copying.
    fn body(&self, request: &ModelRequest, stream: bool) -> ChunkedBody {
        let model = self.config.model_override.as_deref();
        encode_body(request, stream, model, &self.history_cache)
    }

    /// Sends one request; a non-2xx status becomes its typed error (the error body is read for the message).
    async fn send(&self, body: &ChunkedBody) -> Result<reqwest::Response, NoeticError> {
        let mut request = self
            .http
            .post(&*self.url)
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            // The shared chunks, with their exact length: sent with a Content-Length, as one buffer would be.
            .body(reqwest::Body::wrap(body.http_body()));
        if let Some(key) = &self.config.api_key {
            request = request.header("x-api-key", key);
        }
        let response = request.send().await.map_err(|e| transport_error(&e, &self.url))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let retry_after =
            parse_retry_after(header("retry-after-ms").as_deref(), header("retry-after").as_deref(), SystemTime::now());
        let length = response.content_length();
        // Read once and not retried: a retry would fetch the same oversized body again.
        let text = error_body_text(
            response.bytes_stream(),
            self.config.max_body_bytes,
            length,
            status.as_u16(),
            &self.url,
            SETTING,
        )
        .await?;
        Err(error_from_status(status.as_u16(), retry_after, &text, self.config.api_key.is_some()))
    }

    /// A whole body as text, read once within the cap. Nothing has reached the caller yet, so a transport failure
    /// here may be retried.
    async fn read_whole(&self, response: reqwest::Response) -> Result<String, NoeticError> {
        let length = response.content_length();
        let bytes = read_body(response.bytes_stream(), self.config.max_body_bytes, length)
            .await
            .map_err(|e| self.body_error(e))?;
        // Valid UTF-8 (the usual case) becomes the text without a copy.
        Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// A failure reading a body before anything reached the caller.
    fn body_error(&self, error: BodyError<reqwest::Error>) -> NoeticError {
        match error {
            BodyError::Transport(e) => NoeticError::ModelFailed {
                message: format!("the Anthropic response body could not be read ({}); try again", error_chain(&e)),
                status: None,
                raw: None,
                retryable: true,
            },
            BodyError::TooLarge { limit } => too_large(&format!("the response from {}", self.url), limit, None),
            BodyError::Idle { after } => NoeticError::ModelFailed {
                message: format!(
                    "Anthropic at {} sent the response headers, then no data for {} ms (AnthropicConfig::idle_timeout); \
                     try again, or raise the idle limit",
                    self.url,
                    after.as_millis()
                ),
                status: None,
                raw: None,
                retryable: true,
            },
        }
    }

    /// One attempt of a non-streamed call, bounded by the timeout as a whole.
    async fn call_once(&self, body: &ChunkedBody) -> Result<ModelResponse, NoeticError> {
        let attempt = async {
            let response = self.send(body).await?;
            parse_response(&self.read_whole(response).await?)
        };
        tokio::time::timeout(self.config.timeout, attempt).await.unwrap_or_else(|_| Err(self.timed_out()))
    }

    /// One attempt at opening a stream, bounded by the timeout until the first body byte: a stall or failure
    /// before it fails the attempt (and is retried); after it, failures end the returned stream.
    async fn open_once(&self, body: &ChunkedBody) -> Result<Opened, NoeticError> {
        let attempt = async {
            let response = self.send(body).await?;
            let json = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.starts_with("application/json"));
            if json {
                return parse_response(&self.read_whole(response).await?).map(Opened::Whole);
            }
            let limit = self.config.max_body_bytes;
            let bytes = first_chunk(response.bytes_stream(), limit, Some(self.config.idle_timeout))
                .await
                .map_err(|e| self.body_error(e))?;
            // The whole stream counts against the cap, so one event does too; the framer's own limit is the same.
            let events = sse_events(bytes, limit).map(|event| event.map_err(stream_error));
            Ok(Opened::Events(event_deltas(events).boxed()))
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
    fn streams_natively(&self) -> bool {
        true
    }

    fn provider_name(&self) -> Option<&str> {
        Some("anthropic")
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let this = self.clone();
        Box::pin(async move {
            let body = this.body(&request, false);
            with_retries(&this.config.retry, &this.url, || this.call_once(&body)).await
        })
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let this = self.clone();
        let open = async move {
            let body = this.body(&request, true);
            let deltas = match with_retries(&this.config.retry, &this.url, || this.open_once(&body)).await? {
                Opened::Events(deltas) => deltas,
                Opened::Whole(response) => futures::stream::iter(replay(response).into_iter().map(Ok)).boxed(),
            };
            Ok::<_, NoeticError>(deltas)
        };
        futures::stream::once(open).try_flatten().boxed()
    }
}

/// The setting that caps bodies, named in errors.
const SETTING: &str = "AnthropicConfig::max_body_bytes";

/// `what` is over the body cap (see [`noetic_http::too_large`]).
fn too_large(what: &str, limit: usize, status: Option<u16>) -> NoeticError {
    noetic_http::too_large(what, limit, status, SETTING)
}

/// A failure after the stream began (never retried).
fn stream_error(error: SseStreamError<BodyError<reqwest::Error>>) -> NoeticError {
    match error {
        SseStreamError::Transport(BodyError::Transport(e)) => mid_stream(&error_chain(&e)),
        SseStreamError::Transport(BodyError::TooLarge { limit }) => mid_stream(&format!(
            "the streamed response is larger than the limit of {} (AnthropicConfig::max_body_bytes)",
            describe_bytes(limit)
        )),
        SseStreamError::Transport(BodyError::Idle { after }) => mid_stream(&format!(
            "no data arrived for {} ms mid-stream (AnthropicConfig::idle_timeout)",
            after.as_millis()
        )),
        SseStreamError::Sse(e) => mid_stream(&format!("{e} (AnthropicConfig::max_body_bytes)")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn invalid_base_urls_and_zero_timeouts_are_rejected_when_the_client_is_built() {
        let e = AnthropicModel::new(AnthropicConfig::without_key().base_url("not a url"));
        assert!(matches!(e, Err(NoeticError::ModelFailed { retryable: false, .. })));
        let e = AnthropicModel::new(AnthropicConfig::without_key().base_url("ftp://host"));
        assert!(matches!(e, Err(NoeticError::ModelFailed { retryable: false, .. })));
        let e = AnthropicModel::new(AnthropicConfig::without_key().idle_timeout(Duration::ZERO));
        assert!(
            matches!(e, Err(NoeticError::ModelFailed { retryable: false, message, .. }) if message.contains("idle_timeout"))
        );
        assert!(AnthropicModel::new(AnthropicConfig::without_key()).is_ok());
    }
}
