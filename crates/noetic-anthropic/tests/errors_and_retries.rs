//! HTTP failures become typed errors; retryable ones are retried with backoff, but never once a stream has begun.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use noetic::NoeticError;
use noetic::model::{Model, StreamDelta};
use noetic_anthropic::{AnthropicConfig, AnthropicModel};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A server that answers the first `n` requests with `first`, then every request with `then`.
async fn server_failing_then(n: u64, first: ResponseTemplate, then: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(first).up_to_n_times(n).mount(&server).await;
    Mock::given(method("POST")).respond_with(then).mount(&server).await;
    server
}

fn message(error: &NoeticError) -> String {
    match error {
        NoeticError::ModelFailed { message, .. } => message.clone(),
        other => panic!("expected ModelFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn unauthorized_names_anthropic_api_key_quotes_the_provider_and_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(error_response(401, "authentication_error", "invalid x-api-key"))
        .mount(&server)
        .await;
    let error = model(&server).call(hello()).await.unwrap_err();
    let text = message(&error);
    assert!(text.contains("ANTHROPIC_API_KEY") && text.contains("invalid x-api-key"), "{text}");
    assert!(matches!(error, NoeticError::ModelFailed { status: Some(401), retryable: false, .. }));
    let (_, streamed) = collect(&model(&server), hello()).await;
    assert!(message(&streamed.unwrap_err()).contains("ANTHROPIC_API_KEY"));
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn a_rate_limit_with_retry_after_is_retried_then_succeeds() {
    let limited = error_response(429, "rate_limit_error", "Number of requests has exceeded your rate limit")
        .insert_header("retry-after", "0");
    let server = server_failing_then(1, limited, json_response(&fixture("text_response.json"))).await;
    let response = model(&server).call(hello()).await.unwrap();
    assert_eq!(response.text_output(), "Oslo is -3.5 °C right now — wrap up warm.");
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn a_rate_limited_stream_is_retried_before_it_begins() {
    let limited = error_response(429, "rate_limit_error", "slow down").insert_header("retry-after", "0");
    let server = server_failing_then(2, limited, sse_response(&fixture("stream_text.sse"))).await;
    let (_, response) = collect(&model(&server), hello()).await;
    assert_eq!(response.unwrap().text_output(), "Oslo is -3.5 °C right now — wrap up warm 🧣.");
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn a_rate_limit_reports_the_retry_after_when_no_attempt_is_left() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(error_response(429, "rate_limit_error", "slow down").insert_header("retry-after", "2"))
        .mount(&server)
        .await;
    let model = AnthropicModel::new(config(&server).retry(tiny_retry(1))).unwrap();
    let error = model.call(hello()).await.unwrap_err();
    assert!(matches!(error, NoeticError::ModelRateLimit { retry_after_ms: Some(2000), .. }), "{error:?}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_retry_after_longer_than_the_longest_backoff_is_returned_instead_of_waited_for() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(error_response(429, "rate_limit_error", "slow down").insert_header("retry-after", "3600"))
        .mount(&server)
        .await;
    let error = model(&server).call(hello()).await.unwrap_err();
    assert!(matches!(error, NoeticError::ModelRateLimit { retry_after_ms: Some(3_600_000), .. }), "{error:?}");
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn overloaded_529_is_retried_then_succeeds() {
    let overloaded = error_response(529, "overloaded_error", "Overloaded");
    let server = server_failing_then(2, overloaded, json_response(&fixture("text_response.json"))).await;
    assert!(model(&server).call(hello()).await.is_ok());
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn a_500_then_success_is_retried_before_the_stream_begins() {
    let server = server_failing_then(
        1,
        error_response(500, "api_error", "Internal server error"),
        sse_response(&fixture("stream_tool_use.sse")),
    )
    .await;
    let (_, response) = collect(&model(&server), hello()).await;
    assert_eq!(response.unwrap().tool_calls_iter().count(), 2);
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn persistent_overload_fails_after_all_attempts_with_a_retryable_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(error_response(529, "overloaded_error", "Overloaded"))
        .mount(&server)
        .await;
    let error = model(&server).call(hello()).await.unwrap_err();
    assert!(message(&error).contains("overloaded"), "{error}");
    assert!(matches!(error, NoeticError::ModelFailed { status: Some(529), retryable: true, .. }));
    assert_eq!(request_count(&server).await, 3, "the default-like policy makes 3 attempts");
}

#[tokio::test]
async fn an_overloaded_error_object_in_a_200_call_is_retried() {
    let overloaded = json_response(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    let server = server_failing_then(1, overloaded, json_response(&fixture("text_response.json"))).await;
    assert!(model(&server).call(hello()).await.is_ok());
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn a_bad_request_is_not_retried_and_carries_the_provider_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(error_response(400, "invalid_request_error", "max_tokens: Field required"))
        .mount(&server)
        .await;
    let error = model(&server).call(hello()).await.unwrap_err();
    assert!(message(&error).contains("max_tokens: Field required"));
    assert!(matches!(error, NoeticError::ModelFailed { status: Some(400), raw: Some(_), retryable: false, .. }));
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn an_error_after_the_first_streamed_byte_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(sse_response(&fixture("stream_error_mid.sse"))).mount(&server).await;
    let (deltas, response) = collect(&model(&server), hello()).await;
    assert_eq!(deltas.len(), 1);
    assert!(response.is_err());
    assert_eq!(request_count(&server).await, 1, "a stream that has begun is never retried");
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_an_error_and_not_retried() {
    let server = MockServer::start().await;
    let full = fixture("stream_text.sse");
    let cut = &full[..full.find("event: message_delta").unwrap()];
    Mock::given(method("POST")).respond_with(sse_response(cut)).mount(&server).await;
    let (deltas, response) = collect(&model(&server), hello()).await;
    assert_eq!(deltas.len(), 3);
    assert!(message(&response.unwrap_err()).contains("before message_stop"));
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn connection_refused_is_retried_then_a_retryable_error_naming_the_url() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let model = AnthropicModel::new(AnthropicConfig::new(KEY).base_url(&base).retry(tiny_retry(2))).unwrap();
    let error = model.call(hello()).await.unwrap_err();
    assert!(error.is_retryable());
    assert!(message(&error).contains(&base), "{error}");
    let (_, streamed) = collect(&model, hello()).await;
    assert!(streamed.unwrap_err().is_retryable());
}

#[tokio::test]
async fn a_server_that_does_not_answer_in_time_gives_a_retryable_timeout_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_response(&fixture("text_response.json")).set_delay(Duration::from_secs(30)))
        .mount(&server)
        .await;
    let model = AnthropicModel::new(config(&server).timeout(Duration::from_millis(50)).retry(tiny_retry(2))).unwrap();
    let error = model.call(hello()).await.unwrap_err();
    assert!(error.is_retryable() && message(&error).contains("did not answer"), "{error}");
    let (_, streamed) = collect(&model, hello()).await;
    assert!(message(&streamed.unwrap_err()).contains("did not answer"));
    assert_eq!(request_count(&server).await, 4, "each of the two calls made two attempts");
}

/// A bare HTTP/1.1 server that starts an SSE response that never ends, and reports on the channel when the client
/// closes the connection.
fn endless_stream_server() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (gone_tx, gone_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut buf = [0u8; 8192];
        let _ = socket.read(&mut buf);
        let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
        let start = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
        );
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if socket.write_all(format!("{head}{}", chunk(start)).as_bytes()).is_err() {
            return;
        }
        // The response never ends; the client closing the connection is what ends the read below (EOF). Bounded
        // at 20 s, so a broken client cannot hang the test run.
        let _ = socket.set_read_timeout(Some(Duration::from_secs(20)));
        let ping = chunk("event: ping\ndata: {\"type\":\"ping\"}\n\n");
        let _ = socket.write_all(ping.as_bytes()).and_then(|()| socket.flush());
        if let Ok(0) = socket.read(&mut buf) {
            let _ = gone_tx.send(());
        }
    });
    (base, gone_rx)
}

#[tokio::test]
async fn dropping_a_stream_mid_response_closes_the_connection() {
    let (base, gone) = endless_stream_server();
    let model = AnthropicModel::new(AnthropicConfig::new(KEY).base_url(base).retry(tiny_retry(1))).unwrap();
    let mut stream = model.stream(hello());
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, StreamDelta::Text { text: "Hel".into() });
    drop(stream);
    let closed = tokio::task::spawn_blocking(move || gone.recv_timeout(Duration::from_secs(20))).await.unwrap();
    assert!(closed.is_ok(), "the server kept writing to an open connection after the stream was dropped");
}

/// A bare server that reads a request, never answers, and reports when the client closes the connection.
fn silent_server() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (gone_tx, gone_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let _ = socket.set_read_timeout(Some(Duration::from_secs(20)));
        let mut buf = [0u8; 8192];
        loop {
            match socket.read(&mut buf) {
                Ok(0) => {
                    let _ = gone_tx.send(());
                    return;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    let _ = gone_tx.send(());
                    return;
                }
                Err(_) => return,
            }
        }
    });
    (base, gone_rx)
}

#[tokio::test]
async fn dropping_a_call_future_mid_request_closes_the_connection() {
    let (base, gone) = silent_server();
    let model = AnthropicModel::new(AnthropicConfig::new(KEY).base_url(base).retry(tiny_retry(1))).unwrap();
    let outcome = tokio::time::timeout(Duration::from_millis(100), model.call(hello())).await;
    assert!(outcome.is_err(), "the server never answers, so the call was still waiting when it was dropped");
    let closed = tokio::task::spawn_blocking(move || gone.recv_timeout(Duration::from_secs(20))).await.unwrap();
    assert!(closed.is_ok(), "the connection stayed open after the call future was dropped");
}
