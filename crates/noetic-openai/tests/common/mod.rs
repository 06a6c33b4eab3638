//! Helpers shared by the HTTP tests: fixtures, a client for a local server, and a raw TCP server for what
//! wiremock cannot do (cutting a response short, noticing a closed connection).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use noetic::prelude::*;
use noetic_openai::{OpenAiConfig, OpenAiModel};
use serde_json::Value;
use wiremock::MockServer;

/// The base URL (`…/v1`) of the local llama.cpp server, or `None` (after saying why) when no server answers and
/// none is required (`NOETIC_E2E_REQUIRED=1` turns a missing server into a failure). `NOETIC_LOCAL_LLM_URL`
/// overrides the URL (default `http://127.0.0.1:18080/v1`, or the port in `NOETIC_LOCAL_LLM_PORT`).
pub async fn local_server() -> Option<String> {
    let base = std::env::var("NOETIC_LOCAL_LLM_URL").unwrap_or_else(|_| match std::env::var("NOETIC_LOCAL_LLM_PORT") {
        Ok(port) => format!("http://127.0.0.1:{port}/v1"),
        Err(_) => "http://127.0.0.1:18080/v1".to_owned(),
    });
    let health = format!("{}/health", base.trim_end_matches('/').trim_end_matches("/v1"));
    let up = match reqwest::Client::new().get(&health).timeout(Duration::from_secs(5)).send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("{health} answered {}", r.status())),
        Err(e) => Err(format!("{health} did not answer ({e})")),
    };
    if let Err(why) = up {
        let reason = format!(
            "no local llama.cpp server: {why}; start one with `scripts/local-llm.sh setup && scripts/local-llm.sh start`"
        );
        if std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1") {
            panic!("NOETIC_E2E_REQUIRED=1 but {reason}");
        }
        // Straight to stderr: the harness captures print macros, and a skip must be visible.
        let _ = writeln!(std::io::stderr(), "skipped: {reason}");
        return None;
    }
    Some(base)
}

/// A committed fixture's text.
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"))
}

/// A committed JSON fixture, parsed.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

/// Retries with 1 ms delays, so tests stay fast without pausing time.
pub fn fast_retry(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(attempts, Backoff::Fixed, Duration::from_millis(1)).max_delay(Duration::from_millis(50))
}

/// A config pointing at a local server's `/v1`, with a key and fast retries.
pub fn config_for(base: &str) -> OpenAiConfig {
    OpenAiConfig::new().base_url(format!("{base}/v1")).api_key("sk-test").retry(fast_retry(3))
}

/// A model for a wiremock server.
pub fn model_for(server: &MockServer) -> OpenAiModel {
    OpenAiModel::new(config_for(&server.uri())).unwrap()
}

/// The JSON bodies the server received, in order.
pub async fn received_bodies(server: &MockServer) -> Vec<Value> {
    server.received_requests().await.unwrap().iter().map(|r| r.body_json::<Value>().unwrap()).collect()
}

/// Every delta of a stream, failing the test on an error.
pub async fn collect(model: &OpenAiModel, request: ModelRequest) -> Vec<noetic::model::StreamDelta> {
    use futures::StreamExt;
    model.stream(request).map(|d| d.unwrap()).collect().await
}

/// The response a stream ends with (its last delta must be `Done`).
pub fn done(deltas: &[noetic::model::StreamDelta]) -> ModelResponse {
    match deltas.last() {
        Some(noetic::model::StreamDelta::Done { response }) => response.clone(),
        other => panic!("the stream must end with Done, got {other:?}"),
    }
}

/// A user request for `model`.
pub fn user_request(text: &str) -> ModelRequest {
    ModelRequest {
        model: "openai/gpt-4o-mini".into(),
        history: noetic::model::History::new(vec![Item::user(text)]),
        ..ModelRequest::default()
    }
}

/// A blocking HTTP/1.1 server on 127.0.0.1 that hands each connection (after reading its whole request) to
/// `serve`. Stops and joins its thread on drop.
pub struct RawServer {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RawServer {
    pub fn start(serve: impl Fn(TcpStream) + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, stopped) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                if read_request(&mut stream) {
                    serve(stream);
                }
            }
        });
        RawServer { addr, connections, stop, thread: Some(thread) }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request's head and its `content-length` body; false when the peer sent nothing.
fn read_request(stream: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
        .unwrap_or(0);
    while data.len() < head_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// Writes the head of a chunked SSE response and one chunk holding `event`, in one write (so no pause falls
/// between them).
pub fn write_sse_head_and_chunk(stream: &mut TcpStream, event: &str) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunk = format!("{head}{:x}\r\n{event}\r\n", event.len());
    stream.write_all(chunk.as_bytes()).unwrap();
    stream.flush().unwrap();
}

/// Blocks until the peer closes the connection (or it fails).
pub fn wait_for_close(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
