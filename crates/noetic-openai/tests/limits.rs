//! Body caps and idle limits (#13 items 13 and 14): an oversized body is a typed error read once; a stall before
//! the first body byte is retried, a stall later ends the stream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{
    RawServer, config_for, fixture, user_request, wait_for_close, write_chunk, write_sse_head, write_sse_head_and_chunk,
};
use futures::StreamExt;
use noetic::model::StreamDelta;
use noetic::prelude::*;
use noetic_openai::{OpenAiModel, wire::sse_deltas_limited};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const CAP: usize = 1000;

/// A model for `base` whose bodies may be at most [`CAP`] bytes.
fn capped(base: &str) -> OpenAiModel {
    OpenAiModel::new(config_for(base).max_body_bytes(CAP)).unwrap()
}

/// The message of a non-retryable `ModelFailed`, failing the test on anything else.
fn final_failure(error: &NoeticError) -> &str {
    match error {
        NoeticError::ModelFailed { message, retryable: false, raw: None, .. } => message,
        other => panic!("expected a non-retryable ModelFailed, got {other:?}"),
    }
}

/// A valid answer padded with whitespace to `size` bytes: parseable, so only the cap can refuse it.
fn padded_json(size: usize) -> String {
    let text = fixture("chat_text.json");
    format!("{text}{}", " ".repeat(size - text.len()))
}

#[tokio::test]
async fn a_response_body_over_the_cap_is_a_typed_error_naming_the_limit_read_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(padded_json(CAP + 1), "application/json"))
        .expect(1)
        .mount(&server)
        .await;
    let error = capped(&server.uri()).call(user_request("hi")).await.unwrap_err();
    let message = final_failure(&error);
    assert!(message.contains("1000 bytes") && message.contains("OpenAiConfig::max_body_bytes"), "{message}");
    server.verify().await;
    // At the cap exactly, the same answer is fine.
    let at_cap = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(padded_json(CAP), "application/json"))
        .mount(&at_cap)
        .await;
    let answer = capped(&at_cap.uri()).call(user_request("hi")).await.unwrap();
    assert_eq!(answer.text_output(), "The capital of France is Paris.");
}

#[tokio::test]
async fn an_error_body_over_the_cap_is_read_once_and_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("x".repeat(CAP + 1)))
        .expect(1)
        .mount(&server)
        .await;
    let error = capped(&server.uri()).call(user_request("hi")).await.unwrap_err();
    assert!(matches!(error, NoeticError::ModelFailed { status: Some(503), .. }), "{error:?}");
    let message = final_failure(&error);
    assert!(message.contains("HTTP 503") && message.contains("OpenAiConfig::max_body_bytes"), "{message}");
    server.verify().await;
}

#[tokio::test]
async fn a_streamed_response_over_the_cap_ends_with_a_typed_error_and_is_not_retried() {
    let server = MockServer::start().await;
    let sse = fixture("stream_text.sse");
    assert!(sse.len() > CAP, "the fixture must be longer than the cap");
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .expect(1)
        .mount(&server)
        .await;
    let deltas: Vec<_> = capped(&server.uri()).stream(user_request("hi")).collect().await;
    let last = deltas.last().unwrap().as_ref().unwrap_err();
    assert!(final_failure(last).contains("OpenAiConfig::max_body_bytes"), "{last}");
    assert!(deltas[..deltas.len() - 1].iter().all(Result::is_ok), "{deltas:?}");
    server.verify().await;
}

// Multi-threaded: dropping the server joins its thread, which waits for the client to close the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_passing_the_cap_after_it_began_keeps_its_deltas_and_then_fails() {
    let server = RawServer::start(|mut stream| {
        write_sse_head_and_chunk(
            &mut stream,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        );
        write_chunk(&mut stream, &format!(": {}\n\n", "x".repeat(CAP)));
        wait_for_close(&mut stream);
    });
    let deltas: Vec<_> = capped(&server.base()).stream(user_request("hi")).collect().await;
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert!(matches!(&deltas[0], Ok(StreamDelta::Text { text }) if text == "Hel"));
    let message = final_failure(deltas[1].as_ref().unwrap_err());
    assert!(message.contains("streamed response is larger than the limit of 1000 bytes"), "{message}");
    assert_eq!(server.connections(), 1);
}

#[test]
fn one_event_over_the_limit_is_a_typed_error_in_the_pure_parser() {
    let sse = format!("data: {}\n\n", "x".repeat(100));
    let bytes = futures::stream::iter(
        sse.as_bytes().chunks(16).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>(),
    );
    let deltas: Vec<_> = futures::executor::block_on(sse_deltas_limited(bytes, 64).collect());
    assert_eq!(deltas.len(), 1);
    let message = final_failure(deltas[0].as_ref().unwrap_err());
    assert!(message.contains("larger than the limit of 64 bytes"), "{message}");
}

// Multi-threaded: dropping the server joins its thread, which waits for the client to close the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stalls_after_its_headers_is_retried_then_fails_with_a_retryable_idle_error() {
    let server = RawServer::start(|mut stream| {
        write_sse_head(&mut stream);
        wait_for_close(&mut stream);
    });
    let config = config_for(&server.base()).idle_timeout(Duration::from_millis(50)).timeout(Duration::from_secs(5));
    let deltas: Vec<_> = OpenAiModel::new(config).unwrap().stream(user_request("hi")).collect().await;
    assert_eq!(deltas.len(), 1, "{deltas:?}");
    match &deltas[0] {
        Err(NoeticError::ModelFailed { message, retryable: true, status: None, .. }) => {
            assert!(message.contains("no data for 50 ms") && message.contains("idle_timeout"), "{message}");
        }
        other => panic!("expected a retryable ModelFailed, got {other:?}"),
    }
    assert_eq!(server.connections(), 3, "a stall before the first body byte is retried like a failed call");
}

#[tokio::test]
async fn a_stream_that_stalls_before_its_headers_is_retried_too() {
    let server = MockServer::start().await;
    let slow = ResponseTemplate::new(200)
        .set_body_raw(fixture("stream_text.sse"), "text/event-stream")
        .set_delay(Duration::from_secs(30));
    Mock::given(method("POST")).respond_with(slow).expect(3).mount(&server).await;
    let config = config_for(&server.uri()).timeout(Duration::from_millis(50));
    let deltas: Vec<_> = OpenAiModel::new(config).unwrap().stream(user_request("hi")).collect().await;
    assert!(matches!(deltas.as_slice(), [Err(NoeticError::ModelFailed { retryable: true, .. })]), "{deltas:?}");
    server.verify().await;
}

// Multi-threaded: dropping the server joins its thread, which waits for the client to close the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stalls_after_a_delta_ends_with_an_idle_error_and_is_not_retried() {
    let server = RawServer::start(|mut stream| {
        write_sse_head_and_chunk(
            &mut stream,
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        );
        wait_for_close(&mut stream);
    });
    let config = config_for(&server.base()).idle_timeout(Duration::from_millis(50)).timeout(Duration::from_secs(5));
    let deltas: Vec<_> = OpenAiModel::new(config).unwrap().stream(user_request("hi")).collect().await;
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert!(matches!(&deltas[0], Ok(StreamDelta::Text { text }) if text == "Hel"));
    let message = final_failure(deltas[1].as_ref().unwrap_err());
    assert!(message.contains("no data arrived for 50 ms mid-stream") && message.contains("idle_timeout"), "{message}");
    assert_eq!(server.connections(), 1, "never retried after a delta was handed out");
}
