//! The driver of a model call: a provider's pure wire functions ([`WireFormat`]) over the shared [`Transport`],
//! with retries applied once, here, by the config's [`RetryPolicy`](noetic::model::RetryPolicy).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use noetic_core::NoeticError;
use noetic_core::model::{ModelResponse, StreamDelta, replay, with_retries};
use reqwest::header::CONTENT_TYPE;

use crate::body::first_chunk;
use crate::chunks::ChunkedBody;
use crate::decode::{EventDecoder, decode_events};
use crate::sse::sse_events;
use crate::status::HttpFailure;
use crate::transport::Transport;

/// What differs between providers once the body is encoded: reading an answer, an error status, a stream's events.
/// Pure functions, tested without a socket.
pub trait WireFormat: Send + Sync + 'static {
    /// The decoder of one streamed response.
    type Decoder: EventDecoder;

    /// A whole (non-streamed) response body → the response.
    ///
    /// # Errors
    ///
    /// The provider's error for a body it cannot read or an error object in it; `step_id` names the step that made
    /// the request in the errors that carry one.
    fn parse_response(&self, body: &str, step_id: &str) -> Result<ModelResponse, NoeticError>;

    /// The typed error for a non-success status (see [`HttpFailure`]'s helpers for the shared skeleton; the
    /// failure names the request's step).
    fn status_error(&self, failure: &HttpFailure<'_>) -> NoeticError;

    /// A fresh decoder for one streamed response.
    fn decoder(&self) -> Self::Decoder;
}

/// A provider's model calls: `call` and `stream` over the [`Transport`], each attempt bounded by the timeout,
/// retried by the config's policy before anything reached the caller (for a stream, until its first body byte),
/// never after.
pub struct HttpDriver<W> {
    transport: Transport,
    wire: W,
}

/// What a streaming attempt opened.
enum Opened {
    /// The deltas of an SSE body whose first bytes have arrived.
    Events(BoxStream<'static, Result<StreamDelta, NoeticError>>),
    /// A whole JSON response (a server that ignored `"stream": true`).
    Whole(ModelResponse),
}

impl<W: WireFormat> HttpDriver<W> {
    /// The driver of `wire` over `transport`.
    pub fn new(transport: Transport, wire: W) -> Arc<Self> {
        Arc::new(HttpDriver { transport, wire })
    }

    /// The transport (its settings, its endpoint).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The provider's wire format.
    pub fn wire(&self) -> &W {
        &self.wire
    }

    /// A non-streamed call of `body`, made by the step `step` ([`ModelRequest::step`]), which its errors name.
    ///
    /// [`ModelRequest::step`]: noetic_core::model::ModelRequest::step
    pub fn call(
        self: &Arc<Self>,
        body: ChunkedBody,
        step: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let this = self.clone();
        Box::pin(async move {
            let step = step.as_deref().unwrap_or_default();
            this.retried(|| this.call_once(&body, step)).await
        })
    }

    /// A streamed call of `body` made by the step `step`; a server that answers with a whole JSON response is
    /// replayed as deltas.
    pub fn stream(
        self: &Arc<Self>,
        body: ChunkedBody,
        step: Option<Arc<str>>,
    ) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        let this = self.clone();
        let open = async move {
            let step = step.as_deref().unwrap_or_default();
            // The attempt lasts until the first body byte, so a stall before it is retried like a failed call.
            Ok::<_, NoeticError>(match this.retried(|| this.open_once(&body, step)).await? {
                Opened::Events(events) => events,
                Opened::Whole(response) => stream::iter(replay(response).into_iter().map(Ok)).boxed(),
            })
        };
        stream::once(open).try_flatten().boxed()
    }

    /// `attempt` bounded by the timeout and retried by the policy, in the core's one retry loop (one attempt when
    /// a [`RetryModel`](noetic_core::model::RetryModel) around the provider retries instead).
    async fn retried<T, F, Fut>(&self, mut attempt: F) -> Result<T, NoeticError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, NoeticError>>,
    {
        let config = self.transport.config();
        with_retries(&config.retry, self.transport.endpoint(), || {
            let attempt = attempt();
            async move {
                tokio::time::timeout(config.timeout, attempt).await.unwrap_or_else(|_| Err(self.transport.timed_out()))
            }
        })
        .await
    }

    /// One non-streamed attempt. Nothing has reached the caller yet, so a failure reading the body may be retried.
    async fn call_once(&self, body: &ChunkedBody, step: &str) -> Result<ModelResponse, NoeticError> {
        let response = self.transport.send(body, false, step, |failure| self.wire.status_error(failure)).await?;
        self.wire.parse_response(&self.transport.read_whole(response).await?, step)
    }

    /// One streamed attempt, up to the first body byte: a stall or failure before it fails the attempt (and is
    /// retried); after it, failures end the returned stream and are not retried.
    async fn open_once(self: &Arc<Self>, body: &ChunkedBody, step: &str) -> Result<Opened, NoeticError> {
        let response = self.transport.send(body, true, step, |failure| self.wire.status_error(failure)).await?;
        if is_json(&response) {
            let text = self.transport.read_whole(response).await?;
            return self.wire.parse_response(&text, step).map(Opened::Whole);
        }
        let config = self.transport.config();
        let limit = config.max_body_bytes;
        let bytes = first_chunk(response.bytes_stream(), limit, Some(config.idle_timeout))
            .await
            .map_err(|e| self.transport.body_error(e))?;
        // The whole stream counts against the cap, so one event does too; the framer's own limit is the same.
        let this = self.clone();
        let events = sse_events(bytes, limit)
            .map(move |event| event.map_err(|e| W::Decoder::mid_stream(this.transport.stream_failure(e))));
        Ok(Opened::Events(decode_events(events, self.wire.decoder()).boxed()))
    }
}

fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}
