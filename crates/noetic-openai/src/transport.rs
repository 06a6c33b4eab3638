//! One HTTP attempt: post the body, read the answer within the limits (body cap, idle limit), and turn every
//! failure into a typed error.

use std::future::Future;
use std::time::SystemTime;

use futures::StreamExt;
use futures::stream::BoxStream;
use noetic::NoeticError;
use noetic::model::{ModelResponse, StreamDelta};
use noetic_http::{
    BodyError, ChunkedBody, SseStreamError, describe_bytes, error_body_text, error_chain, first_chunk,
    parse_retry_after, read_body, sse_events,
};
use reqwest::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER};

use crate::client::Inner;
use crate::status::{KeyInfo, status_error};
use crate::wire::{event_deltas, mid_stream, parse_response};

/// What a streaming attempt opened.
pub(crate) enum Opened {
    /// The deltas of an SSE body whose first bytes have arrived.
    Events(BoxStream<'static, Result<StreamDelta, NoeticError>>),
    /// A whole JSON response (a server that ignored `stream: true`).
    Whole(ModelResponse),
}

impl Inner {
    fn key_info(&self) -> KeyInfo<'_> {
        KeyInfo { has_key: self.config.api_key.is_some(), key_env: &self.config.key_env, endpoint: &self.endpoint }
    }

    /// Bounds one attempt by the configured timeout.
    pub(crate) async fn timed<T>(
        &self,
        attempt: impl Future<Output = Result<T, NoeticError>>,
    ) -> Result<T, NoeticError> {
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

    /// One non-streaming attempt. Nothing has reached the caller yet, so a failure reading the body may be retried.
    pub(crate) async fn call_once(&self, body: &ChunkedBody) -> Result<ModelResponse, NoeticError> {
        let response = self.send(body, false).await?;
        let text = self.read_whole(response).await?;
        parse_response(&text)
    }

    /// One streaming attempt, up to the first body byte: a stall or failure before it fails the attempt (and is
    /// retried); after it, failures end the returned stream and are not retried.
    pub(crate) async fn open_once(&self, body: &ChunkedBody) -> Result<Opened, NoeticError> {
        let response = self.send(body, true).await?;
        if is_json(&response) {
            let text = self.read_whole(response).await?;
            return parse_response(&text).map(Opened::Whole);
        }
        let limit = self.config.max_body_bytes;
        let bytes = first_chunk(response.bytes_stream(), limit, Some(self.config.idle_timeout))
            .await
            .map_err(|e| self.body_error(e))?;
        // The whole stream counts against the cap, so one event does too; the framer's own limit is the same.
        let events = sse_events(bytes, limit).map(|event| event.map_err(stream_error));
        Ok(Opened::Events(event_deltas(events).boxed()))
    }

    /// A whole body as text, read once within the cap.
    async fn read_whole(&self, response: reqwest::Response) -> Result<String, NoeticError> {
        let length = response.content_length();
        let bytes = read_body(response.bytes_stream(), self.config.max_body_bytes, length)
            .await
            .map_err(|e| self.body_error(e))?;
        // Valid UTF-8 (the usual case) becomes the text without a copy.
        Ok(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// Posts the body; returns the response once its status is a success, else the typed error.
    async fn send(&self, body: &ChunkedBody, stream: bool) -> Result<reqwest::Response, NoeticError> {
        let response = self
            .http
            .post(&self.endpoint)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, if stream { "text/event-stream" } else { "application/json" })
            // The shared chunks, with their exact length: sent with a Content-Length, as one buffer would be.
            .body(reqwest::Body::wrap(body.http_body()))
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let wait = parse_retry_after(
            header("retry-after-ms").as_deref(),
            header(RETRY_AFTER.as_str()).as_deref(),
            SystemTime::now(),
        )
        // At most a day (`MAX_RETRY_AFTER`), so the milliseconds always fit.
        .map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        let length = response.content_length();
        // Read once and not retried: a retry would fetch the same oversized body again.
        let body = response.bytes_stream();
        let raw =
            error_body_text(body, self.config.max_body_bytes, length, status.as_u16(), &self.endpoint, SETTING).await?;
        Err(status_error(status.as_u16(), wait, &raw, &self.key_info()))
    }

    /// A failure reading a body before anything reached the caller.
    fn body_error(&self, error: BodyError<reqwest::Error>) -> NoeticError {
        match error {
            BodyError::Transport(e) => self.transport_error(&e),
            BodyError::TooLarge { limit } => too_large(&format!("the response from {}", self.endpoint), limit, None),
            BodyError::Idle { after } => NoeticError::ModelFailed {
                message: format!(
                    "{} sent the response headers, then no data for {} ms (OpenAiConfig::idle_timeout); try again, \
                     or raise the idle limit if the server pauses this long before answering",
                    self.endpoint,
                    after.as_millis()
                ),
                status: None,
                raw: None,
                retryable: true,
            },
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> NoeticError {
        let detail = error_chain(error);
        let (message, retryable) = if error.is_timeout() {
            // reqwest's read timeout is the configured timeout, so this says the same as `timed` does.
            let ms = self.config.timeout.as_millis();
            (
                format!(
                    "{} did not answer within {ms} ms ({detail}); raise OpenAiConfig::timeout or try again",
                    self.endpoint
                ),
                true,
            )
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

fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// The setting that caps bodies, named in errors.
const SETTING: &str = "OpenAiConfig::max_body_bytes";

/// `what` is over the body cap (see [`noetic_http::too_large`]).
fn too_large(what: &str, limit: usize, status: Option<u16>) -> NoeticError {
    noetic_http::too_large(what, limit, status, SETTING)
}

/// A failure after the stream began (never retried).
fn stream_error(error: SseStreamError<BodyError<reqwest::Error>>) -> NoeticError {
    mid_stream(match error {
        SseStreamError::Transport(BodyError::Transport(e)) => {
            format!("the connection failed mid-stream: {}", error_chain(&e))
        }
        SseStreamError::Transport(BodyError::TooLarge { limit }) => format!(
            "the streamed response is larger than the limit of {} (OpenAiConfig::max_body_bytes)",
            describe_bytes(limit)
        ),
        SseStreamError::Transport(BodyError::Idle { after }) => {
            format!("no data arrived for {} ms mid-stream (OpenAiConfig::idle_timeout)", after.as_millis())
        }
        SseStreamError::Sse(e) => format!("{e} (OpenAiConfig::max_body_bytes)"),
    })
}
