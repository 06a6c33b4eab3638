//! Failures against a local server: each is a clear typed error or a correct retry, never a panic. Retries are
//! retried before the first streamed byte only.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{config_for, fast_retry, fixture, model_for, user_request};
use futures::StreamExt;
use noetic::error::ErrorSource;
use noetic::model::{ModelExt, StreamDelta};
use noetic::prelude::*;
use noetic::testing::raw_http::{RawServer, hold, write_stream};
use noetic_openai::{OpenAiConfig, OpenAiModel};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn requests(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// Mounts `first` for the first `n` requests, then `then` for the rest.
async fn sequence(server: &MockServer, first: ResponseTemplate, n: u64, then: ResponseTemplate) {
    Mock::given(method("POST")).respond_with(first).up_to_n_times(n).mount(server).await;
    Mock::given(method("POST")).respond_with(then).mount(server).await;
}

fn ok_text() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture("chat_text.json"), "application/json")
}

fn ok_sse() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(fixture("stream_text.sse"), "text/event-stream")
}

fn unauthorized() -> ResponseTemplate {
    let body = r#"{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    ResponseTemplate::new(401).set_body_raw(body, "application/json")
}

#[tokio::test]
async fn unauthorized_names_the_key_variable_and_the_providers_message_and_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(unauthorized()).mount(&server).await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    match &error {
        NoeticError::ModelFailed { message, status: Some(401), retryable: false, raw: Some(raw), .. } => {
            assert!(message.contains("OPENAI_API_KEY"), "{message}");
            assert!(message.contains("Incorrect API key provided"), "{message}");
            assert!(raw.contains("invalid_api_key"));
        }
        other => panic!("expected ModelFailed 401, got {other:?}"),
    }
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn unauthorized_on_openrouter_names_openrouter_api_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(unauthorized()).mount(&server).await;
    let config = OpenAiConfig::openrouter().base_url(format!("{}/api/v1", server.uri())).no_api_key();
    let stream_error = OpenAiModel::new(config).unwrap().stream(user_request("hi")).next().await.unwrap().unwrap_err();
    assert!(stream_error.to_string().contains("OPENROUTER_API_KEY"), "{stream_error}");
}

#[tokio::test]
async fn a_rate_limit_with_retry_after_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    let limited = ResponseTemplate::new(429)
        .insert_header("retry-after", "0")
        .set_body_raw(r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#, "application/json");
    sequence(&server, limited, 1, ok_text()).await;
    let response = model_for(&server).call(user_request("hi")).await.unwrap();
    assert_eq!(response.text_output(), "The capital of France is Paris.");
    assert_eq!(requests(&server).await, 2);
}

#[tokio::test]
async fn a_rate_limit_with_an_http_date_retry_after_in_the_past_is_retried() {
    let server = MockServer::start().await;
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT");
    sequence(&server, limited, 1, ok_sse()).await;
    let deltas: Vec<_> = model_for(&server).stream(user_request("hi")).collect().await;
    assert!(matches!(deltas.last(), Some(Ok(StreamDelta::Done { .. }))), "{deltas:?}");
    assert_eq!(requests(&server).await, 2, "a stream is retried before it starts");
}

#[tokio::test]
async fn a_retry_after_longer_than_the_policy_allows_is_returned_as_model_rate_limit_at_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "120"))
        .mount(&server)
        .await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    assert!(
        matches!(&error, NoeticError::ModelRateLimit { retry_after_ms: Some(120_000), step_id, .. } if step_id.is_empty()),
        "{error:?}"
    );
    assert!(error.is_retryable(), "the caller may retry later");
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn a_rate_limit_and_a_context_length_refusal_name_the_step_that_made_the_request() {
    let server = MockServer::start().await;
    let too_long = r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
    let limited = ResponseTemplate::new(429).insert_header("retry-after", "120");
    sequence(&server, limited, 1, ResponseTemplate::new(400).set_body_raw(too_long, "application/json")).await;
    let asked = ModelRequest { step: Some("assistant".into()), ..user_request("hi") };
    let model = model_for(&server);
    let limited = model.call(asked.clone()).await.unwrap_err();
    assert!(matches!(&limited, NoeticError::ModelRateLimit { step_id, .. } if step_id == "assistant"), "{limited:?}");
    let refused = model.stream(asked).next().await.unwrap().unwrap_err();
    assert!(
        matches!(&refused, NoeticError::ContextLengthExceeded { step_id, limit: Some(8192), .. } if step_id == "assistant"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_persistent_rate_limit_uses_every_attempt_then_reports_model_rate_limit() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after-ms", "2"))
        .mount(&server)
        .await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    assert!(matches!(error, NoeticError::ModelRateLimit { retry_after_ms: Some(2), .. }), "{error:?}");
    assert_eq!(requests(&server).await, 3);
}

#[tokio::test]
async fn a_server_error_is_retried_then_succeeds() {
    let server = MockServer::start().await;
    sequence(&server, ResponseTemplate::new(500).set_body_string("Internal Server Error"), 2, ok_text()).await;
    let response = model_for(&server).call(user_request("hi")).await.unwrap();
    assert_eq!(response.text_output(), "The capital of France is Paris.");
    assert_eq!(requests(&server).await, 3);
}

#[tokio::test]
async fn a_provider_wrapped_in_retry_model_is_retried_by_the_wrapper_alone_not_twice_over() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(503)).mount(&server).await;
    // The provider's own policy allows 3 attempts (`fast_retry(3)`); the wrapper's allows 2.
    let wrapped = model_for(&server).with_retry(fast_retry(2));
    let error = wrapped.call(user_request("hi")).await.unwrap_err();
    assert!(matches!(&error, NoeticError::ModelFailed { status: Some(503), .. }), "{error:?}");
    assert_eq!(requests(&server).await, 2, "the wrapper's 2 attempts, not 2 × 3");
    let streamed = wrapped.stream(user_request("hi")).next().await.unwrap();
    assert!(streamed.is_err());
    assert_eq!(requests(&server).await, 4, "a stream too: 2 more requests");
}

#[tokio::test]
async fn server_errors_that_persist_end_in_a_retryable_model_failed_with_the_status() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("overloaded"))
        .mount(&server)
        .await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    assert!(
        matches!(&error, NoeticError::ModelFailed { status: Some(503), retryable: true, raw: Some(raw), .. } if raw == "overloaded"),
        "{error:?}"
    );
    assert_eq!(requests(&server).await, 3);
}

#[tokio::test]
async fn a_bad_request_is_not_retried() {
    let server = MockServer::start().await;
    let body = r#"{"error":{"message":"Invalid value for 'tool_choice'","type":"invalid_request_error"}}"#;
    Mock::given(method("POST")).respond_with(ResponseTemplate::new(400).set_body_string(body)).mount(&server).await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    assert!(error.to_string().contains("Invalid value for 'tool_choice'"), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn an_error_object_inside_a_200_is_a_typed_error_with_the_providers_message_and_raw_body() {
    let server = MockServer::start().await;
    let body = fixture("error_in_200.json");
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body.clone(), "application/json"))
        .mount(&server)
        .await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    match error {
        NoeticError::ModelFailed { message, raw, retryable, status, .. } => {
            assert!(message.contains("Provider returned error"), "{message}");
            assert_eq!(raw, Some(body));
            assert_eq!(status, Some(400));
            assert!(!retryable);
        }
        other => panic!("expected ModelFailed, got {other:?}"),
    }
    assert_eq!(requests(&server).await, 1);
}

#[tokio::test]
async fn malformed_json_is_a_typed_error_with_the_raw_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw("<html>502 Bad Gateway</html>", "application/json"))
        .mount(&server)
        .await;
    let error = model_for(&server).call(user_request("hi")).await.unwrap_err();
    assert!(
        matches!(&error, NoeticError::ModelFailed { raw: Some(raw), retryable: false, .. } if raw.contains("Bad Gateway")),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_error_chunk_inside_a_stream_ends_it_with_a_typed_error_after_the_text_and_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(fixture("stream_error.sse"), "text/event-stream"))
        .mount(&server)
        .await;
    let deltas: Vec<_> = model_for(&server).stream(user_request("hi")).collect().await;
    assert_eq!(deltas.len(), 2, "{deltas:?}");
    assert!(matches!(&deltas[0], Ok(StreamDelta::Text { text }) if text == "Let me think"));
    match &deltas[1] {
        Err(NoeticError::ModelFailed { message, raw: Some(raw), retryable: false, .. }) => {
            assert!(message.contains("Provider disconnected unexpectedly"), "{message}");
            assert!(raw.contains("server_error"));
        }
        other => panic!("expected ModelFailed, got {other:?}"),
    }
    assert_eq!(requests(&server).await, 1, "never retried after the first streamed byte");
}

#[tokio::test]
async fn a_connection_cut_after_the_first_streamed_byte_is_not_retried() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    // Close without the final chunk: the body ends early.
    let server = RawServer::serving(move |stream| write_stream(stream, &[first]).unwrap()).unwrap();
    let model = OpenAiModel::new(config_for(&server.base())).unwrap();
    let deltas: Vec<_> = model.stream(user_request("hi")).collect().await;
    assert!(matches!(&deltas[0], Ok(StreamDelta::Text { text }) if text == "Hel"), "{deltas:?}");
    match &deltas[1] {
        Err(NoeticError::ModelFailed { message, retryable: false, .. }) => {
            assert!(message.contains("mid-stream") && message.contains("not retried"), "{message}");
        }
        other => panic!("expected a non-retryable ModelFailed, got {other:?}"),
    }
    assert_eq!(deltas.len(), 2);
    assert_eq!(server.connections(), 1, "never retried after the first streamed byte");
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported_as_a_retryable_error_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let model = OpenAiModel::new(config_for(&base)).unwrap();
    let error = model.call(user_request("hi")).await.unwrap_err();
    match &error {
        NoeticError::ModelFailed { message, retryable: true, status: None, .. } => {
            assert!(message.contains("could not connect") && message.contains(&base), "{message}");
        }
        other => panic!("expected a retryable ModelFailed, got {other:?}"),
    }
    let stream_error = model.stream(user_request("hi")).next().await.unwrap().unwrap_err();
    assert!(stream_error.is_retryable(), "nothing was streamed yet");
}

#[tokio::test]
async fn a_refused_connection_keeps_the_http_clients_error_and_its_io_cause_as_sources() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let model = OpenAiModel::new(config_for(&format!("http://127.0.0.1:{port}")).retry(fast_retry(1))).unwrap();
    let error = model.call(user_request("hi")).await.unwrap_err();
    let mut chain = Vec::new();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        chain.push(cause);
        source = cause.source();
    }
    let client = chain.iter().find_map(|e| e.downcast_ref::<ErrorSource>()?.downcast_ref::<reqwest::Error>());
    assert!(client.is_some_and(reqwest::Error::is_connect), "the HTTP client's error is the source: {chain:?}");
    let io = chain.iter().find_map(|e| e.downcast_ref::<std::io::Error>());
    assert_eq!(io.map(std::io::Error::kind), Some(std::io::ErrorKind::ConnectionRefused), "{chain:?}");
    let wire = serde_json::to_value(&error).unwrap();
    assert_eq!(wire["kind"], "model_failed");
    assert!(wire.get("source").is_none(), "the source is not serialised: {wire}");
}

#[tokio::test]
async fn a_timeout_is_a_retryable_model_failed() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(ok_text().set_delay(Duration::from_secs(30))).mount(&server).await;
    let config = config_for(&server.uri()).timeout(Duration::from_millis(50)).retry(fast_retry(2));
    let error = OpenAiModel::new(config).unwrap().call(user_request("hi")).await.unwrap_err();
    assert!(matches!(&error, NoeticError::ModelFailed { retryable: true, .. }), "{error:?}");
    assert!(error.to_string().contains("timeout"), "{error}");
    assert_eq!(requests(&server).await, 2, "timeouts are retried");
}

#[tokio::test]
async fn dropping_a_stream_mid_response_closes_the_connection() {
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    let closed_tx = std::sync::Mutex::new(Some(closed_tx));
    let server = RawServer::serving(move |stream| {
        write_stream(stream, &["data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n"]).unwrap();
        hold(stream);
        if let Some(tx) = closed_tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    })
    .unwrap();
    let model = OpenAiModel::new(config_for(&server.base())).unwrap();
    let mut stream = model.stream(user_request("hi"));
    assert!(matches!(stream.next().await, Some(Ok(StreamDelta::Text { .. }))));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(10), closed_rx)
        .await
        .expect("the server saw the connection close after the stream was dropped")
        .unwrap();
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn dropping_a_call_in_flight_aborts_the_request() {
    let (received_tx, received_rx) = tokio::sync::oneshot::channel();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    let senders = std::sync::Mutex::new(Some((received_tx, closed_tx)));
    let server = RawServer::serving(move |stream| {
        let Some((received, closed)) = senders.lock().unwrap().take() else { return };
        let _ = received.send(());
        hold(stream);
        let _ = closed.send(());
    })
    .unwrap();
    let model = OpenAiModel::new(config_for(&server.base())).unwrap();
    let mut call = model.call(user_request("hi"));
    tokio::select! {
        result = &mut call => panic!("the server never answers, yet the call ended: {result:?}"),
        _ = received_rx => {}
    }
    drop(call);
    tokio::time::timeout(Duration::from_secs(10), closed_rx)
        .await
        .expect("the server saw the connection close after the call was dropped")
        .unwrap();
}
