//! A bare HTTP/1.1 server on 127.0.0.1 for provider tests, with nothing but the standard library: it reads each
//! request whole, then answers with a planned [`Reply`] or hands the connection to the test's own code, so a test
//! can send what a mock server cannot (a stream that stops mid-body, a head that never comes, a connection cut
//! short) and see what the client does with the connection (retries, closing it when dropped).
//!
//! ```
//! use std::io::{Read, Write};
//! use noetic::testing::raw_http::{RawServer, whole};
//!
//! let server = RawServer::start(whole(200, "text/plain", "hi"))?;
//! let mut socket = std::net::TcpStream::connect(server.base().trim_start_matches("http://"))?;
//! socket.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")?;
//! let mut answer = String::new();
//! socket.read_to_string(&mut answer)?;
//! assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("\r\n\r\nhi"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long [`hold`] waits for the client to close, so that a client that never does cannot hang a run.
pub const HOLD_AT_MOST: Duration = Duration::from_secs(20);

/// What the server does with each request once it has read it.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Writes these bytes (a whole response, head and body) and closes the connection.
    Whole(Vec<u8>),
    /// Writes these texts as a chunked `text/event-stream` response ([`write_stream`]), then [`hold`]s the
    /// connection: the body never ends.
    Stream(Vec<String>),
    /// Writes nothing and [`hold`]s the connection.
    Silence,
}

/// A whole response: `status`, a `content-length`, `connection: close` and `body`.
pub fn whole(status: u16, content_type: &str, body: &str) -> Reply {
    let head = format!(
        "HTTP/1.1 {status} Status\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    Reply::Whole([head.as_bytes(), body.as_bytes()].concat())
}

/// The server; dropping it stops taking connections (connections already taken go on until they end).
pub struct RawServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl RawServer {
    /// Starts a server on a free port that answers every request with `reply`.
    pub fn start(reply: Reply) -> std::io::Result<RawServer> {
        RawServer::serving(move |socket| answer(socket, &reply))
    }

    /// Starts a server on a free port that hands each connection, once its request is read, to `serve` on a thread
    /// of its own; the connection closes when `serve` returns.
    pub fn serving(serve: impl Fn(&mut TcpStream) + Send + Sync + 'static) -> std::io::Result<RawServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (connections, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stop, serve) = (connections.clone(), stopped.clone(), Arc::new(serve));
        let accepting = std::thread::spawn(move || {
            for socket in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut socket) = socket else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let serve = serve.clone();
                std::thread::spawn(move || {
                    if read_request(&mut socket).is_ok() {
                        serve(&mut socket);
                    }
                });
            }
        });
        Ok(RawServer { addr, connections, stopped, accepting: Some(accepting) })
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many connections it has taken so far (a [`Reply`] ends each after one request).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        // A connection wakes the blocking accept, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

/// Writes the head of a chunked `text/event-stream` response with the first of `texts` as its first chunk (one
/// write, so no pause falls between them), then each other text as a chunk of its own write. The body is not ended.
pub fn write_stream(socket: &mut TcpStream, texts: &[impl AsRef<str>]) -> std::io::Result<()> {
    const HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    let first = HEAD.to_owned() + &texts.first().map(|t| chunk(t.as_ref())).unwrap_or_default();
    for write in std::iter::once(first).chain(texts.iter().skip(1).map(|t| chunk(t.as_ref()))) {
        socket.write_all(write.as_bytes())?;
        socket.flush()?;
    }
    Ok(())
}

/// Keeps the connection open, sending nothing, until the client closes it (or [`HOLD_AT_MOST`] passes).
pub fn hold(socket: &mut TcpStream) {
    let _ = socket.set_read_timeout(Some(HOLD_AT_MOST));
    let mut buf = [0u8; 1024];
    while socket.read(&mut buf).is_ok_and(|n| n > 0) {}
}

/// Reads a request's head and as many body bytes as its `content-length` says.
fn read_request(socket: &mut TcpStream) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let mut wanted = None;
    loop {
        if wanted.is_none()
            && let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok());
            wanted = Some(end + 4 + length.unwrap_or(0));
        }
        if wanted.is_some_and(|wanted| data.len() >= wanted) {
            return Ok(());
        }
        match socket.read(&mut buf)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `reply` (a client that went away ends it) and, for a stream or silence, holds the connection.
fn answer(socket: &mut TcpStream, reply: &Reply) {
    match reply {
        Reply::Whole(bytes) => {
            let _ = socket.write_all(bytes).and_then(|()| socket.flush());
        }
        Reply::Stream(texts) => {
            if write_stream(socket, texts).is_ok() {
                hold(socket);
            }
        }
        Reply::Silence => hold(socket),
    }
}
