//! A model server that streams its answers (OpenAI chat-completions SSE) exactly when the test says, so a test
//! can look at the screen between two pieces of one answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// The server; [`StreamingModel::next_request`] hands out each request as it arrives.
pub struct StreamingModel {
    pub base_url: String,
    requests: std::sync::mpsc::Receiver<(Value, Reply)>,
}

/// The answer to one request, written piece by piece; dropping it ends the answer (and the connection).
pub struct Reply {
    pieces: mpsc::UnboundedSender<String>,
}

impl Reply {
    /// Streams a piece of answer text.
    pub fn text(&self, text: &str) {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "test-model",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
        let _ = self.pieces.send(format!("data: {chunk}\n\n"));
    }

    /// Ends the answer: a stop chunk with usage, then `[DONE]`.
    pub fn finish(self) {
        self.finish_using(json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}));
    }

    /// Ends the answer as [`Reply::finish`] does, with this `usage` object in the last chunk (OpenRouter puts its
    /// `cost` there).
    pub fn finish_using(self, usage: Value) {
        let chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "test-model",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage});
        let _ = self.pieces.send(format!("data: {chunk}\n\ndata: [DONE]\n\n"));
    }
}

impl StreamingModel {
    /// Starts listening on loopback; runs on the calling test's tokio runtime.
    pub async fn start() -> StreamingModel {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let (tx, requests) = std::sync::mpsc::channel();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move { serve(socket, tx).await });
            }
        });
        StreamingModel { base_url, requests }
    }

    /// The next request's JSON body and the reply to write (blocking; call it off the async threads).
    pub fn next_request(&self) -> (Value, Reply) {
        self.requests.recv_timeout(Duration::from_secs(30)).expect("no model request within 30 s")
    }
}

async fn serve(mut socket: TcpStream, requests: std::sync::mpsc::Sender<(Value, Reply)>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let (head_end, length) = loop {
        let Ok(n) = socket.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (end + 4, length);
        }
    };
    while buffer.len() < head_end + length {
        let Ok(n) = socket.read(&mut chunk).await else { return };
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buffer[head_end..head_end + length]).unwrap_or(Value::Null);
    let (pieces, mut to_write) = mpsc::unbounded_channel();
    if requests.send((body, Reply { pieces })).is_err() {
        return;
    }
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    while let Some(piece) = to_write.recv().await {
        if socket.write_all(piece.as_bytes()).await.is_err() || socket.flush().await.is_err() {
            return;
        }
    }
    let _ = socket.shutdown().await;
}
