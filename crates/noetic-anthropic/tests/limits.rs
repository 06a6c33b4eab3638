//! Body caps and idle limits (#13 items 13 and 14): an oversized body is a typed error read once; a stall before
//! the first body byte is retried, a stall later ends the stream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::{KEY, collect, config, fixture, hello, json_response, sse_response, tiny_retry};
use futures::StreamExt;
use noetic::NoeticError;
use noetic::model::{Model, StreamDelta};
use noetic_anthropic::{AnthropicConfig, AnthropicModel, stream_deltas_limited};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const CAP: usize = 1000;

/// The first events of a streamed answer, up to a text delta "Hel".
const START: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
);

/// A bare HTTP/1.1 server: each connection, once its request is read, goes to `serve` on a thread of its own.
struct RawServer {
    base: String,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl RawServer {
    fn start(serve: fn(&mut TcpStream)) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (connections, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stopped) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            for socket in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut socket) = socket else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    if socket.read(&mut buf).is_ok_and(|n| n > 0) {
                        serve(&mut socket);
                    }
                });
            }
        });
        RawServer { base, connections, stop }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so its thread sees the flag.
        let _ = TcpStream::connect(self.base.trim_start_matches("http://"));
    }
}

const HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// The head of a chunked SSE response followed by `chunks`, in one write (so no pause falls between them).
fn write(socket: &mut TcpStream, head: bool, chunks: &[&str]) {
    let mut out = if head { HEAD.to_owned() } else { String::new() };
    for data in chunks {
        out.push_str(&format!("{:x}\r\n{data}\r\n", data.len()));
    }
    let _ = socket.write_all(out.as_bytes()).and_then(|()| socket.flush());
}

/// Holds the connection until the client closes it (at most 20 s, so a broken client cannot hang the run).
fn hold(socket: &mut TcpStream) {
    let _ = socket.set_read_timeout(Some(Duration::from_secs(20)));
    let mut buf = [0u8; 1024];
    while socket.read(&mut buf).is_ok_and(|n| n > 0) {}
}

/// A model for `base` with a body cap of [`CAP`] and an idle limit of `idle` ms.
fn model_for(base: &str, idle: u64) -> AnthropicModel {
    let config = AnthropicConfig::new(KEY).base_url(base).retry(tiny_retry(3)).max_body_bytes(CAP);
    AnthropicModel::new(config.idle_timeout(Duration::from_millis(idle)).timeout(Duration::from_secs(5))).unwrap()
}

/// The message of a non-retryable `ModelFailed`, failing the test on anything else.
fn final_failure(error: &NoeticError) -> &str {
    match error {
        NoeticError::ModelFailed { message, retryable: false, raw: None, .. } => message,
        other => panic!("expected a non-retryable ModelFailed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_response_body_over_the_cap_is_a_typed_error_naming_the_limit_read_once() {
    let server = MockServer::start().await;
    let text = fixture("text_response.json");
    let padded = format!("{text}{}", " ".repeat(CAP + 1 - text.len()));
    Mock::given(method("POST")).respond_with(json_response(&padded)).expect(1).mount(&server).await;
    let model = AnthropicModel::new(config(&server).max_body_bytes(CAP)).unwrap();
    let error = model.call(hello()).await.unwrap_err();
    let message = final_failure(&error);
    assert!(message.contains("1000 bytes") && message.contains("AnthropicConfig::max_body_bytes"), "{message}");
    server.verify().await;
    let at_cap = MockServer::start().await;
    Mock::given(method("POST")).respond_with(json_response(&padded)).mount(&at_cap).await;
    let model = AnthropicModel::new(config(&at_cap).max_body_bytes(CAP + 1)).unwrap();
    assert!(model.call(hello()).await.is_ok(), "at the cap exactly, the same answer is fine");
}

#[tokio::test]
async fn an_error_body_over_the_cap_is_read_once_and_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_string("x".repeat(CAP + 1)))
        .expect(1)
        .mount(&server)
        .await;
    let model = AnthropicModel::new(config(&server).max_body_bytes(CAP)).unwrap();
    let error = model.call(hello()).await.unwrap_err();
    assert!(matches!(error, NoeticError::ModelFailed { status: Some(529), .. }), "{error:?}");
    let message = final_failure(&error);
    assert!(message.contains("HTTP 529") && message.contains("AnthropicConfig::max_body_bytes"), "{message}");
    server.verify().await;
}

#[tokio::test]
async fn a_streamed_response_over_the_cap_ends_with_a_typed_error_and_is_not_retried() {
    let server = MockServer::start().await;
    let sse = fixture("stream_text.sse");
    assert!(sse.len() > CAP, "the fixture must be longer than the cap");
    Mock::given(method("POST")).respond_with(sse_response(&sse)).expect(1).mount(&server).await;
    let model = AnthropicModel::new(config(&server).max_body_bytes(CAP)).unwrap();
    let (_, end) = collect(&model, hello()).await;
    let message = final_failure(end.as_ref().unwrap_err()).to_owned();
    assert!(message.contains("AnthropicConfig::max_body_bytes"), "{message}");
    server.verify().await;
}

#[tokio::test]
async fn a_stream_passing_the_cap_after_it_began_keeps_its_deltas_and_then_fails() {
    let server = RawServer::start(|socket| {
        write(socket, true, &[START]);
        write(
            socket,
            false,
            &[&format!("event: ping\ndata: {{\"type\":\"ping\",\"pad\":\"{}\"}}\n\n", "x".repeat(CAP))],
        );
        hold(socket);
    });
    let (deltas, end) = collect(&model_for(&server.base, 5000), hello()).await;
    assert_eq!(deltas, vec![StreamDelta::Text { text: "Hel".into() }]);
    let message = final_failure(end.as_ref().unwrap_err()).to_owned();
    assert!(message.contains("streamed response is larger than the limit of 1000 bytes"), "{message}");
    assert_eq!(server.connections(), 1);
}

#[test]
fn one_event_over_the_limit_is_a_typed_error_in_the_pure_parser() {
    let sse = format!("data: {}\n\n", "x".repeat(100));
    let chunks: Vec<Result<Vec<u8>, String>> = sse.as_bytes().chunks(16).map(|c| Ok(c.to_vec())).collect();
    let deltas: Vec<_> =
        futures::executor::block_on(stream_deltas_limited(futures::stream::iter(chunks), 64).collect());
    assert_eq!(deltas.len(), 1);
    let message = final_failure(deltas[0].as_ref().unwrap_err());
    assert!(message.contains("larger than the limit of 64 bytes"), "{message}");
}

#[tokio::test]
async fn a_stream_that_stalls_after_its_headers_is_retried_then_fails_with_a_retryable_idle_error() {
    let server = RawServer::start(|socket| {
        write(socket, true, &[]);
        hold(socket);
    });
    let (deltas, end) = collect(&model_for(&server.base, 50), hello()).await;
    assert!(deltas.is_empty());
    match end {
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
    let slow = sse_response(&fixture("stream_text.sse")).set_delay(Duration::from_secs(30));
    Mock::given(method("POST")).respond_with(slow).expect(3).mount(&server).await;
    let model = AnthropicModel::new(config(&server).timeout(Duration::from_millis(50))).unwrap();
    let (deltas, end) = collect(&model, hello()).await;
    assert!(deltas.is_empty());
    assert!(matches!(end, Err(NoeticError::ModelFailed { retryable: true, .. })), "{end:?}");
    server.verify().await;
}

#[tokio::test]
async fn a_stream_that_stalls_after_a_delta_ends_with_an_idle_error_and_is_not_retried() {
    let server = RawServer::start(|socket| {
        write(socket, true, &[START]);
        hold(socket);
    });
    let (deltas, end) = collect(&model_for(&server.base, 50), hello()).await;
    assert_eq!(deltas, vec![StreamDelta::Text { text: "Hel".into() }]);
    let message = final_failure(end.as_ref().unwrap_err()).to_owned();
    assert!(message.contains("no data arrived for 50 ms mid-stream") && message.contains("idle_timeout"), "{message}");
    assert_eq!(server.connections(), 1, "never retried after a delta was handed out");
}
