//! A server on a loopback port, a client, and a reader of server-sent events, for the API and page tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use noetic::agent::log::{LogStore, MemoryLogStore};
use noetic::agent::{Runtime, RuntimeBuilder};
use noetic_server::{Approvals, Server, ServerConfig};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running server.
pub struct Running {
    pub addr: SocketAddr,
    pub base: String,
    pub server: Server,
    pub client: reqwest::Client,
    pub token: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// Starts a server for the runtime `builder` makes (a memory log store and the server's approver are added).
    pub async fn start(builder: RuntimeBuilder, config: ServerConfig, approval_timeout: Duration) -> Running {
        Running::start_with(builder, config, Approvals::new(approval_timeout)).await
    }

    /// [`Running::start`] with these approvals.
    pub async fn start_with(builder: RuntimeBuilder, config: ServerConfig, approvals: Approvals) -> Running {
        let store: Arc<dyn LogStore> = Arc::new(MemoryLogStore::default());
        let runtime: Runtime = builder.approver(approvals.approver()).log_store(store).build().unwrap();
        let token = config.token.clone();
        let server = Server::new(runtime, approvals, config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.clone().serve(listener, async move {
            let _ = rx.await;
        }));
        Running {
            addr,
            base: format!("http://{addr}"),
            server,
            client: reqwest::Client::new(),
            token,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.auth(self.client.post(self.url(path)).json(&body)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.auth(self.client.put(self.url(path)).json(&body)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self.auth(self.client.patch(self.url(path)).json(&body)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A DELETE, marked as the page marks it (`X-Noetic-Request: 1`).
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let request = self.client.delete(self.url(path)).header("X-Noetic-Request", "1");
        let response = self.auth(request).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.auth(self.client.get(self.url(path))).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Sends `text` to session `key`.
    pub async fn say(&self, key: &str, text: &str) -> (u16, Value) {
        self.post(&format!("/api/sessions/{key}/messages"), serde_json::json!({ "text": text })).await
    }

    /// Opens the session's event stream after event `after` (by `Last-Event-ID` when `by_header`).
    pub async fn events(&self, key: &str, after: u64, by_header: bool) -> EventStream {
        let path = if by_header {
            format!("/api/sessions/{key}/events")
        } else {
            format!("/api/sessions/{key}/events?after={after}")
        };
        let mut request = self.auth(self.client.get(self.url(&path)));
        if by_header {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert!(
            response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"),
            "an event stream"
        );
        EventStream { body: Box::pin(response.bytes_stream()), buffer: String::new() }
    }

    /// Asks the server to shut down and waits for `serve` to return.
    pub async fn shut_down(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.unwrap(),
            None => Ok(()),
        }
    }
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Value,
}

impl Sse {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
    pub fn seq(&self) -> u64 {
        self.id.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0)
    }
}

type Body = std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Reads server-sent events off a response body.
pub struct EventStream {
    body: Body,
    buffer: String,
}

impl EventStream {
    /// The next event (comments and keep-alives skipped); `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Sse> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut sse = Sse { id: None, event: None, data: Value::Null };
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        sse.id = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        sse.event = Some(v.trim().to_owned());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() {
                    continue;
                }
                sse.data = serde_json::from_str(&data).unwrap();
                return Some(sse);
            }
            let chunk = self.body.next().await?.ok()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Reads until an event of `kind`, returning every event read (it included).
    pub async fn until(&mut self, kind: &str) -> Vec<Sse> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await {
            let done = event.kind() == kind;
            seen.push(event);
            if done {
                return seen;
            }
        }
        panic!("the stream ended before a '{kind}' event; read {:?}", seen.iter().map(Sse::kind).collect::<Vec<_>>());
    }
}

/// A response read off a raw connection: the status and the body (as JSON when it is JSON, else a string).
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: Value,
}

impl Raw {
    /// The typed error's code, or "" when the body is no typed error.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
}

/// Sends `request` (a whole HTTP/1.1 request, as bytes on the wire: nothing is normalised or added) on a new
/// connection and reads the response head and, when it has a length, its body. An event stream's body is not read.
pub async fn raw(addr: SocketAddr, request: &str) -> Raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed before a response head: {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(bytes[..end].to_vec()).unwrap();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap();
    let length = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>()))
        .and_then(Result::ok);
    let mut body = bytes[end..].to_vec();
    if let Some(length) = length {
        while body.len() < length {
            let n = stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the connection closed inside the body");
            body.extend_from_slice(&chunk[..n]);
        }
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Raw { status, head, body }
}

/// The page's files and the API document, as the server serves them.
pub const PAGE_FILES: &[&str] = &[
    "/",
    "/app.css",
    "/app.js",
    "/dom.js",
    "/markdown.js",
    "/approval.js",
    "/chat.js",
    "/side.js",
    "/rename.js",
    "/sessions.js",
    "/openapi.json",
];

/// Every route the server has: the documented API (from its OpenAPI document, path parameters filled in) and the
/// page's files, as `(method, path)`.
pub fn every_route() -> Vec<(String, String)> {
    let doc: Value = serde_json::from_str(noetic_server::api_document()).unwrap();
    let mut routes: Vec<(String, String)> = PAGE_FILES.iter().map(|p| ("GET".to_owned(), (*p).to_owned())).collect();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        let path = path.replace("{key}", "k").replace("{call_id}", "c1").replace("{agent}", "default");
        for method in methods.as_object().unwrap().keys().filter(|m| *m != "parameters") {
            routes.push((method.to_ascii_uppercase(), path.clone()));
        }
    }
    routes
}

/// True for the methods that change something.
pub fn changes_state(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}
