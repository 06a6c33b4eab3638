//! Server-given delays (`retry-after-ms`, `Retry-After` in seconds or as an HTTP date) are believed up to a day:
//! a huge, infinite or far-future one is a rate limit with the delay clamped, never a panic; a negative or NaN one
//! counts as absent, so the policy's backoff applies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use noetic::NoeticError;
use noetic::model::Model;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

/// A day in milliseconds: the longest delay a server is believed (`noetic_http::MAX_RETRY_AFTER`).
const A_DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// A server that answers every request with a 429 carrying `headers`.
async fn limiting_server(headers: &[(&str, &str)]) -> MockServer {
    let server = MockServer::start().await;
    let mut limited = error_response(429, "rate_limit_error", "slow down");
    for (name, value) in headers {
        limited = limited.insert_header(*name, *value);
    }
    Mock::given(method("POST")).respond_with(limited).mount(&server).await;
    server
}

/// The delay the rate limit reported, and how many requests the server saw (three attempts are allowed).
async fn reported_delay(headers: &[(&str, &str)]) -> (Option<u64>, usize) {
    let server = limiting_server(headers).await;
    match model(&server).call(hello()).await {
        Err(NoeticError::ModelRateLimit { retry_after_ms, .. }) => (retry_after_ms, request_count(&server).await),
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
    let (deltas, outcome) = collect(&model(&server), hello()).await;
    assert!(deltas.is_empty());
    match outcome {
        Err(NoeticError::ModelRateLimit { retry_after_ms, .. }) => assert_eq!(retry_after_ms, Some(A_DAY_MS)),
        other => panic!("expected ModelRateLimit, got {other:?}"),
    }
}
