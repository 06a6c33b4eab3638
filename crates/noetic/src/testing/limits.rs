//! The body-cap and idle-limit scenarios every HTTP provider runs (#13 items 13 and 14): an oversized body is a
//! typed error read once; a stall before the first body byte is retried, a stall later ends the stream. A provider
//! describes itself as a [`Provider`] (how to make its model, what its wire looks like) and runs them all with
//! [`provider_limit_tests!`](crate::provider_limit_tests), one test each; the scenarios talk to a bare server on
//! 127.0.0.1 ([`raw_http`](super::raw_http)), so nothing here needs a mock-server crate.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::conformance::{Checked, ConformanceFailure, check, fail};
use super::raw_http::{RawServer, Reply, whole};
use crate::error::{ConfigError, NoeticError};
use crate::model::{Model, ModelRequest, StreamDelta};

/// The body cap the scenarios set, in bytes.
pub const CAP: usize = 1000;

/// The limits a scenario makes its model with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The cap on every body, in bytes (the provider config's `max_body_bytes`).
    pub max_body_bytes: usize,
    /// The longest pause allowed while a body arrives (`idle_timeout`).
    pub idle_timeout: Duration,
    /// How long a response may take to begin (`timeout`).
    pub timeout: Duration,
}

/// What a stream yields: deltas, or the error that ends it.
pub type Items = Vec<Result<StreamDelta, NoeticError>>;

/// Makes a provider's model for a base URL with [`Limits`].
pub type MakeModel = fn(&str, Limits) -> Result<Arc<dyn Model>, ConfigError>;

/// An HTTP provider under test: how to make its model and what its wire looks like.
pub struct Provider {
    /// Its configuration type's name, as its limit errors name it (`"OpenAiConfig"`).
    pub config: &'static str,
    /// Makes its model for a server at `base` (`http://127.0.0.1:PORT`, the provider adds its own path) with these
    /// limits, an API key, and 3 attempts in all for a retried failure, a millisecond apart.
    pub model: MakeModel,
    /// A request the scenarios send.
    pub request: ModelRequest,
    /// A whole answer (a JSON body) shorter than [`CAP`].
    pub answer: String,
    /// The text of [`Provider::answer`].
    pub answer_text: &'static str,
    /// A whole streamed answer (an SSE body) longer than [`CAP`].
    pub stream: String,
    /// The first events of a streamed answer, up to its first text delta, which is `"Hel"`.
    pub start: &'static str,
    /// An event the provider reads past, at least the given number of bytes long.
    pub padding: fn(usize) -> String,
    /// An error status the provider retries (503, 529).
    pub retried_status: u16,
    /// The provider's SSE parser with a limit on one event's size, run over these chunks of a body.
    pub parse: fn(Vec<Vec<u8>>, usize) -> Items,
}

/// The cap, with idle and start limits no scenario reaches.
fn capped() -> Limits {
    Limits { max_body_bytes: CAP, idle_timeout: Duration::from_secs(5), timeout: Duration::from_secs(30) }
}

fn start(scenario: &'static str, reply: Reply) -> Result<RawServer, ConformanceFailure> {
    RawServer::start(reply).map_err(|e| fail(scenario, format!("the test server did not start: {e}")))
}

fn model(
    p: &Provider,
    scenario: &'static str,
    server: &RawServer,
    limits: Limits,
) -> Result<Arc<dyn Model>, ConformanceFailure> {
    (p.model)(&server.base(), limits).map_err(|e| fail(scenario, format!("the model could not be made: {e}")))
}

/// Every item of the provider's stream of [`Provider::request`].
async fn streamed(model: &dyn Model, p: &Provider) -> Items {
    model.stream(p.request.clone()).collect().await
}

/// The message of a non-retryable `ModelFailed` without a raw body; a failure on anything else (`None`: no error).
fn final_failure<'e>(scenario: &'static str, error: Option<&'e NoeticError>) -> Result<&'e str, ConformanceFailure> {
    match error {
        Some(NoeticError::ModelFailed { message, retryable: false, raw: None, .. }) => Ok(message),
        other => Err(fail(scenario, format!("expected a non-retryable ModelFailed, got {other:?}"))),
    }
}

/// The error that ends `items`, if the last one is an error.
fn last_error(items: &[Result<StreamDelta, NoeticError>]) -> Option<&NoeticError> {
    items.last().and_then(|item| item.as_ref().err())
}

/// The message of a retryable `ModelFailed` without a status, the only item of `items`; a failure on anything else.
fn only_retryable_failure<'e>(
    scenario: &'static str,
    items: &'e [Result<StreamDelta, NoeticError>],
) -> Result<&'e str, ConformanceFailure> {
    match items {
        [Err(NoeticError::ModelFailed { message, retryable: true, status: None, .. })] => Ok(message),
        other => Err(fail(scenario, format!("expected only a retryable ModelFailed, got {other:?}"))),
    }
}

/// `"Hel"` as the first of two items; a failure on anything else.
fn hel_then_one_more(scenario: &'static str, items: &[Result<StreamDelta, NoeticError>]) -> Checked {
    let hel = matches!(items.first(), Some(Ok(StreamDelta::Text { text })) if text == "Hel");
    check(scenario, hel && items.len() == 2, || format!("expected the delta \"Hel\" and an error, got {items:?}"))
}

/// The provider's answer padded with spaces to `size` bytes: still valid, so only the cap can refuse it.
fn padded(p: &Provider, scenario: &'static str, size: usize) -> Result<String, ConformanceFailure> {
    let pad = size.checked_sub(p.answer.len()).ok_or_else(|| fail(scenario, "the answer is longer than the cap"))?;
    Ok(format!("{}{}", p.answer, " ".repeat(pad)))
}

/// An answer one byte over the cap fails with a non-retryable error naming the limit and the config setting, after
/// one request; an answer of exactly the cap is read.
pub async fn a_response_body_over_the_cap_is_a_typed_error_naming_the_limit_read_once(p: &Provider) -> Checked {
    const S: &str = "a response body over the cap is a typed error naming the limit, read once";
    let server = start(S, whole(200, "application/json", &padded(p, S, CAP + 1)?))?;
    let error = model(p, S, &server, capped())?.call(p.request.clone()).await.err();
    let message = final_failure(S, error.as_ref())?;
    let setting = format!("{}::max_body_bytes", p.config);
    check(S, message.contains("1000 bytes") && message.contains(&setting), || message.to_owned())?;
    check(S, server.connections() == 1, || format!("{} requests, not 1", server.connections()))?;
    let at_cap = start(S, whole(200, "application/json", &padded(p, S, CAP)?))?;
    let answer = model(p, S, &at_cap, capped())?.call(p.request.clone()).await;
    let answer = answer.map_err(|e| fail(S, format!("an answer of exactly the cap failed: {e}")))?;
    check(S, answer.text_output() == p.answer_text, || format!("at the cap, the answer was {answer:?}"))
}

/// An error body over the cap keeps its status, names the limit and the config setting, and is not retried.
pub async fn an_error_body_over_the_cap_is_read_once_and_not_retried(p: &Provider) -> Checked {
    const S: &str = "an error body over the cap is read once and not retried";
    let server = start(S, whole(p.retried_status, "text/plain", &"x".repeat(CAP + 1)))?;
    let error = model(p, S, &server, capped())?.call(p.request.clone()).await.err();
    let status = matches!(&error, Some(NoeticError::ModelFailed { status: Some(s), .. }) if *s == p.retried_status);
    check(S, status, || format!("expected a ModelFailed with status {}, got {error:?}", p.retried_status))?;
    let message = final_failure(S, error.as_ref())?;
    let (http, setting) = (format!("HTTP {}", p.retried_status), format!("{}::max_body_bytes", p.config));
    check(S, message.contains(&http) && message.contains(&setting), || message.to_owned())?;
    check(S, server.connections() == 1, || format!("{} requests, not 1", server.connections()))
}

/// A streamed answer longer than the cap ends with a non-retryable error naming the config setting, every item
/// before it a delta, after one request.
pub async fn a_streamed_response_over_the_cap_ends_with_a_typed_error_and_is_not_retried(p: &Provider) -> Checked {
    const S: &str = "a streamed response over the cap ends with a typed error and is not retried";
    check(S, p.stream.len() > CAP, || "the provider's stream must be longer than the cap".into())?;
    let server = start(S, whole(200, "text/event-stream", &p.stream))?;
    let items = streamed(&*model(p, S, &server, capped())?, p).await;
    let message = final_failure(S, last_error(&items))?;
    check(S, message.contains(&format!("{}::max_body_bytes", p.config)), || message.to_owned())?;
    check(S, items[..items.len() - 1].iter().all(Result::is_ok), || format!("{items:?}"))?;
    check(S, server.connections() == 1, || format!("{} requests, not 1", server.connections()))
}

/// A stream whose body passes the cap after its first delta keeps that delta, then fails, and is not retried.
pub async fn a_stream_passing_the_cap_after_it_began_keeps_its_deltas_and_then_fails(p: &Provider) -> Checked {
    const S: &str = "a stream passing the cap after it began keeps its deltas and then fails";
    let server = start(S, Reply::Stream(vec![p.start.to_owned(), (p.padding)(CAP)]))?;
    let limits = Limits { timeout: Duration::from_secs(5), ..capped() };
    let items = streamed(&*model(p, S, &server, limits)?, p).await;
    hel_then_one_more(S, &items)?;
    let message = final_failure(S, last_error(&items))?;
    let limit = "streamed response is larger than the limit of 1000 bytes";
    check(S, message.contains(limit), || message.to_owned())?;
    check(S, server.connections() == 1, || format!("{} requests, not 1", server.connections()))
}

/// The provider's parser alone: one event over its limit is the only item, a non-retryable error naming the limit.
pub fn one_event_over_the_limit_is_a_typed_error_in_the_pure_parser(p: &Provider) -> Checked {
    const S: &str = "one event over the limit is a typed error in the pure parser";
    let sse = format!("data: {}\n\n", "x".repeat(100));
    let items = (p.parse)(sse.as_bytes().chunks(16).map(<[u8]>::to_vec).collect(), 64);
    check(S, items.len() == 1, || format!("expected one error, got {items:?}"))?;
    let message = final_failure(S, last_error(&items))?;
    check(S, message.contains("larger than the limit of 64 bytes"), || message.to_owned())
}

/// A response whose head arrives but no body byte within the idle limit is retried like a failed call (3 requests),
/// then ends with a retryable error naming the pause and `idle_timeout`.
pub async fn a_stream_that_stalls_after_its_headers_is_retried_then_fails_with_a_retryable_idle_error(
    p: &Provider,
) -> Checked {
    const S: &str = "a stream that stalls after its headers is retried, then fails with a retryable idle error";
    let server = start(S, Reply::Stream(Vec::new()))?;
    let limits = Limits { idle_timeout: Duration::from_millis(50), timeout: Duration::from_secs(5), ..capped() };
    let items = streamed(&*model(p, S, &server, limits)?, p).await;
    let message = only_retryable_failure(S, &items)?;
    check(S, message.contains("no data for 50 ms") && message.contains("idle_timeout"), || message.to_owned())?;
    let requests = server.connections();
    check(S, requests == 3, || format!("{requests} requests: a stall before the first body byte is retried"))
}

/// A response whose head does not arrive within the timeout is retried too (3 requests), then ends with a
/// retryable error.
pub async fn a_stream_that_stalls_before_its_headers_is_retried_too(p: &Provider) -> Checked {
    const S: &str = "a stream that stalls before its headers is retried too";
    let server = start(S, Reply::Silence)?;
    let limits = Limits { timeout: Duration::from_millis(50), ..capped() };
    let items = streamed(&*model(p, S, &server, limits)?, p).await;
    let retryable = matches!(items.as_slice(), [Err(NoeticError::ModelFailed { retryable: true, .. })]);
    check(S, retryable, || format!("expected only a retryable ModelFailed, got {items:?}"))?;
    check(S, server.connections() == 3, || format!("{} requests, not 3", server.connections()))
}

/// A stream that pauses past the idle limit after its first delta keeps that delta, then ends with a
/// non-retryable error naming the pause and `idle_timeout`, and is never retried.
pub async fn a_stream_that_stalls_after_a_delta_ends_with_an_idle_error_and_is_not_retried(p: &Provider) -> Checked {
    const S: &str = "a stream that stalls after a delta ends with an idle error and is not retried";
    let server = start(S, Reply::Stream(vec![p.start.to_owned()]))?;
    let limits = Limits { idle_timeout: Duration::from_millis(50), timeout: Duration::from_secs(5), ..capped() };
    let items = streamed(&*model(p, S, &server, limits)?, p).await;
    hel_then_one_more(S, &items)?;
    let message = final_failure(S, last_error(&items))?;
    let idle = message.contains("no data arrived for 50 ms mid-stream") && message.contains("idle_timeout");
    check(S, idle, || message.to_owned())?;
    let requests = server.connections();
    check(S, requests == 1, || format!("{requests} requests: never retried after a delta was handed out"))
}

/// Defines one test per scenario of [`noetic::testing::limits`](crate::testing::limits) for the
/// [`Provider`](crate::testing::limits::Provider) that `$provider` makes (an expression evaluated in each test).
/// The calling crate needs tokio with its `macros` and `rt` features.
#[macro_export]
macro_rules! provider_limit_tests {
    ($provider:expr) => {
        $crate::provider_limit_tests!(@async $provider,
            a_response_body_over_the_cap_is_a_typed_error_naming_the_limit_read_once,
            an_error_body_over_the_cap_is_read_once_and_not_retried,
            a_streamed_response_over_the_cap_ends_with_a_typed_error_and_is_not_retried,
            a_stream_passing_the_cap_after_it_began_keeps_its_deltas_and_then_fails,
            a_stream_that_stalls_after_its_headers_is_retried_then_fails_with_a_retryable_idle_error,
            a_stream_that_stalls_before_its_headers_is_retried_too,
            a_stream_that_stalls_after_a_delta_ends_with_an_idle_error_and_is_not_retried
        );

        #[test]
        fn one_event_over_the_limit_is_a_typed_error_in_the_pure_parser()
        -> Result<(), $crate::testing::ConformanceFailure> {
            $crate::testing::limits::one_event_over_the_limit_is_a_typed_error_in_the_pure_parser(&$provider)
        }
    };
    (@async $provider:expr, $($scenario:ident),+) => {
        $(
            #[tokio::test]
            async fn $scenario() -> Result<(), $crate::testing::ConformanceFailure> {
                $crate::testing::limits::$scenario(&$provider).await
            }
        )+
    };
}
