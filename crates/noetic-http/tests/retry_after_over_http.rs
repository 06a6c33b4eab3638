//! Server-given delays (`retry-after-ms`, `Retry-After` in seconds or as an HTTP date), read by the shared
//! transport for every provider, are believed up to a day: a huge, infinite or far-future one is a rate limit with
//! the delay clamped, never a panic, and not waited for; a negative or NaN one counts as absent, so the policy's
//! backoff applies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use noetic::NoeticError;
use noetic::model::{Backoff, ModelResponse, RetryPolicy, StreamDelta};
use noetic_http::{
    Auth, ChunkedBody, EventDecoder, HttpConfig, HttpDriver, HttpFailure, Names, StatusClass, Transport, WireFormat,
};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A day in milliseconds: the longest delay a server is believed (`noetic_http::MAX_RETRY_AFTER`).
const A_DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The smallest wire format: a 429 is a rate limit, anything else a failure; no answer is ever read.
struct Plain;

struct NoEvents;

impl EventDecoder for NoEvents {
    fn push(&mut self, _: &str) -> Result<Vec<StreamDelta>, NoeticError> {
        Ok(Vec::new())
    }

    fn is_done(&self) -> bool {
        false
    }

    fn finish(&mut self) -> Result<Option<StreamDelta>, NoeticError> {
        Ok(None)
    }

    fn mid_stream(what: String) -> NoeticError {
        NoeticError::other(what)
    }
}

impl WireFormat for Plain {
    type Decoder = NoEvents;

    fn parse_response(&self, body: &str, _step_id: &str) -> Result<ModelResponse, NoeticError> {
        Err(NoeticError::other(format!("unexpected answer {body}")))
    }

    fn status_error(&self, failure: &HttpFailure<'_>) -> NoeticError {
        match failure.class() {
            StatusClass::RateLimited => failure.rate_limited("slow down".into()),
            _ => failure.failed(format!("HTTP {}", failure.status)),
        }
    }

    fn decoder(&self) -> NoEvents {
        NoEvents
    }
}

/// A server that answers every request with a 429 carrying `headers`.
async fn limiting_server(headers: &[(&str, &str)]) -> MockServer {
    let server = MockServer::start().await;
    let mut limited = ResponseTemplate::new(429).set_body_string(r#"{"error":{"message":"slow down"}}"#);
    for (name, value) in headers {
        limited = limited.insert_header(*name, *value);
    }
    Mock::given(method("POST")).respond_with(limited).mount(&server).await;
    server
}

/// A driver posting to `server`, three attempts a millisecond apart.
fn driver(server: &MockServer) -> Arc<HttpDriver<Plain>> {
    let mut config = HttpConfig::new(server.uri(), "TEST_API_KEY");
    config.retry = RetryPolicy::new(3, Backoff::Fixed, Duration::from_millis(1));
    let names = Names { provider: "the test server", config: "TestConfig", base_url_env: "TEST_BASE_URL" };
    let transport = Transport::new(config, format!("{}/v1/test", server.uri()), Auth::Bearer, &[], names).unwrap();
    HttpDriver::new(transport, Plain)
}

fn body() -> ChunkedBody {
    ChunkedBody::new(vec![Bytes::from_static(b"{}")])
}

/// The delay the rate limit reported, and how many requests the server saw (three attempts are allowed).
async fn reported_delay(headers: &[(&str, &str)]) -> (Option<u64>, usize) {
    let server = limiting_server(headers).await;
    match driver(&server).call(body(), None).await {
        Err(NoeticError::ModelRateLimit { retry_after_ms, .. }) => {
            (retry_after_ms, server.received_requests().await.unwrap().len())
        }
        other => panic!("expected ModelRateLimit for {headers:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_huge_retry_after_ms_is_a_rate_limit_clamped_to_a_day_and_not_waited_for() {
    for value in ["1e300", "inf", "99999999999999999999999999"] {
        assert_eq!(reported_delay(&[("retry-after-ms", value)]).await, (Some(A_DAY_MS), 1), "retry-after-ms: {value}");
    }
}

#[tokio::test]
async fn a_huge_retry_after_in_seconds_is_a_rate_limit_clamped_to_a_day() {
    for value in ["1e300", "inf", "86401", "18446744073709551616"] {
        assert_eq!(reported_delay(&[("retry-after", value)]).await, (Some(A_DAY_MS), 1), "retry-after: {value}");
    }
}

#[tokio::test]
async fn a_far_future_retry_after_date_is_a_rate_limit_clamped_to_a_day() {
    let far = "Fri, 31 Dec 9999 23:59:59 GMT";
    assert_eq!(reported_delay(&[("retry-after", far)]).await, (Some(A_DAY_MS), 1));
}

#[tokio::test]
async fn a_negative_or_nan_retry_after_counts_as_absent_and_the_backoff_applies() {
    for (name, value) in
        [("retry-after", "-5"), ("retry-after", "NaN"), ("retry-after-ms", "-5"), ("retry-after-ms", "NaN")]
    {
        assert_eq!(reported_delay(&[(name, value)]).await, (None, 3), "{name}: {value}");
    }
}

#[tokio::test]
async fn an_unusable_retry_after_ms_falls_back_to_retry_after() {
    for unusable in ["NaN", "-1", "soon"] {
        let headers = [("retry-after-ms", unusable), ("retry-after", "3600")];
        assert_eq!(reported_delay(&headers).await, (Some(3_600_000), 1), "retry-after-ms: {unusable}");
    }
}

#[tokio::test]
async fn a_stream_refused_with_a_huge_retry_after_ms_ends_in_a_clamped_rate_limit() {
    let server = limiting_server(&[("retry-after-ms", "1e300")]).await;
    let outcome: Vec<_> = driver(&server).stream(body(), None).collect().await;
    match outcome.as_slice() {
        [Err(NoeticError::ModelRateLimit { retry_after_ms, .. })] => assert_eq!(*retry_after_ms, Some(A_DAY_MS)),
        other => panic!("expected one ModelRateLimit, got {other:?}"),
    }
}
