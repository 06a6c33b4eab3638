//! A bare HTTP/1.1 server on the loopback interface for the provider scenarios: it answers every request with one
//! planned [`Reply`], including what a mock server cannot send (a stream that stops mid-body, a head that never
//! comes), and counts the requests it read.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a held connection waits for the client to close it, so that a client that never does cannot hang a run.
const HOLD_AT_MOST: Duration = Duration::from_secs(20);

/// What the server does with each request once it has read it.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Writes these bytes (a whole response, head and body) and closes the connection.
    Whole(Vec<u8>),
    /// Writes the head of a chunked `text/event-stream` response with the first of these texts as its first chunk
    /// (one write, so no pause falls between them), each other text as a chunk of its own write, and then holds the
    /// connection open, sending nothing more, until the client closes it.
    Stream(Vec<String>),
    /// Writes nothing and holds the connection until the client closes it.
    Silence,
}

/// A whole response: `status`, a `content-length`, `connection: close` and `body`.
pub(crate) fn whole(status: u16, content_type: &str, body: &str) -> Reply {
    let head = format!(
        "HTTP/1.1 {status} Status\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    Reply::Whole([head.as_bytes(), body.as_bytes()].concat())
}

/// The server; dropping it stops taking connections.
pub(crate) struct RawServer {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

impl RawServer {
    /// Starts a server on a free port of 127.0.0.1 that answers each request with `reply`, each connection on a
    /// thread of its own.
    pub(crate) fn start(reply: Reply) -> std::io::Result<RawServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let (requests, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stop) = (requests.clone(), stopped.clone());
        let accepting = std::thread::spawn(move || {
            for socket in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut socket) = socket else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let reply = reply.clone();
                std::thread::spawn(move || {
                    if read_request(&mut socket).is_ok() {
                        answer(&mut socket, &reply);
                    }
                });
            }
        });
        Ok(RawServer { addr, requests, stopped, accepting: Some(accepting) })
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub(crate) fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many connections (one request each: every reply ends the connection) it has taken so far.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
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

/// Sends `reply` (ignoring a client that went away) and, for a stream or silence, holds the connection.
fn answer(socket: &mut TcpStream, reply: &Reply) {
    const HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    let chunk = |text: &String| format!("{:x}\r\n{text}\r\n", text.len());
    let writes: Vec<Vec<u8>> = match reply {
        Reply::Whole(bytes) => vec![bytes.clone()],
        Reply::Stream(texts) => {
            let first = HEAD.to_owned() + &texts.first().map(chunk).unwrap_or_default();
            std::iter::once(first).chain(texts.iter().skip(1).map(chunk)).map(String::into_bytes).collect()
        }
        Reply::Silence => Vec::new(),
    };
    for bytes in writes {
        if socket.write_all(&bytes).and_then(|()| socket.flush()).is_err() {
            return;
        }
    }
    if !matches!(reply, Reply::Whole(_)) {
        let _ = socket.set_read_timeout(Some(HOLD_AT_MOST));
        let mut buf = [0u8; 1024];
        while socket.read(&mut buf).is_ok_and(|n| n > 0) {}
    }
}
