//! The stdio transport to a spawned server, with a bound on the size of a message of our own.
//!
//! rmcp's line reader drops a message over 16 MiB with only a log line, so the call it answered waited out its
//! whole timeout and was then blamed on a slow server. Here the server's stdout passes through [`BoundedLines`]
//! first: a line over [`MAX_MESSAGE_BYTES`] is ended early (rmcp ignores the unparsable piece), the rest of it
//! is skipped while its `id` is looked for, and when it answered a request, a JSON-RPC error answering that
//! request takes its place — so the call fails at once, with an error naming the cause and the limit.

use std::pin::Pin;
use std::process::Stdio;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::config::MAX_MESSAGE_BYTES;
use crate::scan::IdScanner;

/// The JSON-RPC error code of the answer that replaces a message too large to keep (the range JSON-RPC leaves to
/// implementations).
pub(crate) const MESSAGE_TOO_LARGE: i32 = -32_099;

/// How long a server may take to exit after its stdin is closed before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// Bytes read from the server at a time.
const CHUNK: usize = 64 * 1024;

/// A reader of newline-separated messages that passes lines of at most `limit` bytes through unchanged and
/// replaces longer ones (see the module docs).
pub(crate) struct BoundedLines<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line so far (all of them, also those skipped).
    line: usize,
    /// The current line is over the limit: the rest of it is skipped.
    skipping: bool,
    scanner: IdScanner,
    /// Read from `inner`, not yet handled: `input[at..]`.
    input: Vec<u8>,
    at: usize,
    /// To hand out before anything else: `queued[queued_at..]`.
    queued: Vec<u8>,
    queued_at: usize,
}

impl<R> BoundedLines<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        BoundedLines {
            inner,
            limit,
            line: 0,
            skipping: false,
            scanner: IdScanner::default(),
            input: Vec::new(),
            at: 0,
            queued: Vec::new(),
            queued_at: 0,
        }
    }

    /// Handles the unhandled input: passes what belongs to lines within the limit into `out`, queues what
    /// replaces a line over it. Returns after it put something into `out` or queued something, or used it all.
    fn handle(&mut self, out: &mut ReadBuf<'_>) {
        while self.at < self.input.len() && out.remaining() > 0 && self.queued_at == self.queued.len() {
            let rest = &self.input[self.at..];
            let newline = rest.iter().position(|b| *b == b'\n');
            let content = newline.unwrap_or(rest.len());
            if self.skipping {
                self.scanner.feed(&rest[..content]);
                self.line += content;
                self.at += content;
                if newline.is_some() {
                    self.at += 1;
                    self.end_oversized();
                }
                continue;
            }
            if self.line + content > self.limit {
                // The first `limit` bytes went (or go) through; a newline ends them there.
                let fits = self.limit - self.line;
                let take = fits.min(out.remaining());
                out.put_slice(&rest[..take]);
                self.scanner.feed(&rest[..take]);
                self.line += take;
                self.at += take;
                if take == fits {
                    self.skipping = true;
                    self.queued = b"\n".to_vec();
                    self.queued_at = 0;
                }
                return;
            }
            let take = newline.map_or(content, |n| n + 1).min(out.remaining());
            out.put_slice(&rest[..take]);
            self.scanner.feed(&rest[..take]);
            self.at += take;
            if newline.is_some_and(|n| take == n + 1) {
                self.line = 0;
                self.scanner = IdScanner::default();
            } else {
                self.line += take;
            }
            return;
        }
    }

    /// The oversized line ended: if it answered a request, an error answering it is queued.
    fn end_oversized(&mut self) {
        let (bytes, scanner) = (self.line, std::mem::take(&mut self.scanner));
        self.line = 0;
        self.skipping = false;
        let id = scanner.answered_id();
        tracing::warn!(
            bytes,
            limit = self.limit,
            ?id,
            "an MCP server sent a message over the size limit; it was dropped"
        );
        let Some(id) = id else { return };
        let answer = json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": MESSAGE_TOO_LARGE,
                "message": too_large(bytes, self.limit),
                "data": {"bytes": bytes, "limit": self.limit},
            },
        });
        let mut line = answer.to_string().into_bytes();
        line.push(b'\n');
        self.queued.extend_from_slice(&line);
    }
}

/// What the error says: the size, the limit, and what to do.
pub(crate) fn too_large(bytes: usize, limit: usize) -> String {
    format!(
        "the server answered with a message of {bytes} bytes, more than the {limit} bytes ({} MiB) a message may \
         have, so the answer was dropped; ask the tool for less (a smaller page, range or file)",
        limit / (1024 * 1024)
    )
}

/// Reads the data of an answer that replaced a message too large to keep: `(bytes, limit)`.
pub(crate) fn too_large_data(data: Option<&Value>) -> Option<(u64, u64)> {
    let data = data?;
    Some((data.get("bytes")?.as_u64()?, data.get("limit")?.as_u64()?))
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.queued_at < this.queued.len() {
                let take = (this.queued.len() - this.queued_at).min(out.remaining());
                out.put_slice(&this.queued[this.queued_at..this.queued_at + take]);
                this.queued_at += take;
                if this.queued_at == this.queued.len() {
                    this.queued.clear();
                    this.queued_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.at == this.input.len() {
                this.input.resize(CHUNK, 0);
                let mut read = ReadBuf::new(&mut this.input);
                let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
                let filled = read.filled().len();
                this.input.truncate(filled);
                this.at = 0;
                ready!(polled)?;
                if filled == 0 {
                    // The end of the stream.
                    return Poll::Ready(Ok(()));
                }
            }
            let before = out.filled().len();
            this.handle(out);
            if out.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// A spawned server's stdio as an rmcp transport, messages bounded by [`BoundedLines`]; the process is killed
/// when the transport is dropped, and given [`EXIT_GRACE`] to exit by itself when it is closed.
pub(crate) struct ChildTransport {
    child: Child,
    inner: AsyncRwTransport<RoleClient, BoundedLines<ChildStdout>, ChildStdin>,
}

impl ChildTransport {
    /// Spawns `command` with piped stdio; returns the transport and the child's stderr.
    pub(crate) fn spawn(mut command: Command) -> std::io::Result<(ChildTransport, Option<ChildStderr>)> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn()?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(std::io::Error::other("the server's stdin or stdout could not be piped"));
        };
        let stderr = child.stderr.take();
        // rmcp's own bound stays above ours: a line cut to the limit, plus its newline, always passes.
        let inner = AsyncRwTransport::new_client(BoundedLines::new(stdout, MAX_MESSAGE_BYTES), stdin)
            .with_max_line_length(MAX_MESSAGE_BYTES + 1);
        Ok((ChildTransport { child, inner }, stderr))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing stdin asks a stdio server to exit (the MCP shutdown sequence); one that does not is killed.
        self.inner.close().await?;
        if tokio::time::timeout(EXIT_GRACE, self.child.wait()).await.is_err() {
            self.child.kill().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn through(input: &[u8], limit: usize) -> Vec<String> {
        // A reader that hands over 5 bytes at a time, as a pipe may.
        let (mut tx, rx) = tokio::io::duplex(5);
        let input = input.to_vec();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            tx.write_all(&input).await.unwrap();
        });
        let mut out = Vec::new();
        BoundedLines::new(rx, limit).read_to_end(&mut out).await.unwrap();
        writer.await.unwrap();
        String::from_utf8_lossy(&out).lines().map(str::to_owned).collect()
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged() {
        let input = b"{\"id\":1}\n{\"id\":2,\"result\":{}}\n";
        assert_eq!(through(input, 20).await, ["{\"id\":1}", "{\"id\":2,\"result\":{}}"]);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_cut_and_followed_by_an_error_answering_its_request() {
        let big = format!("{{\"result\":{{\"text\":\"{}\"}},\"jsonrpc\":\"2.0\",\"id\":4}}", "x".repeat(100));
        let input = format!("{big}\n{{\"id\":5}}\n");
        let lines = through(input.as_bytes(), 40).await;
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], big[..40]);
        let answer: Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(answer["id"], 4);
        assert_eq!(answer["error"]["code"], MESSAGE_TOO_LARGE);
        assert_eq!(too_large_data(answer["error"].get("data")), Some((big.len() as u64, 40)));
        assert!(answer["error"]["message"].as_str().unwrap().contains(&format!("{} bytes", big.len())));
        assert_eq!(lines[2], "{\"id\":5}", "the next message is read as usual");
    }

    #[tokio::test]
    async fn an_oversized_notification_is_dropped_without_an_answer() {
        let big = format!("{{\"method\":\"notifications/message\",\"params\":\"{}\"}}", "y".repeat(100));
        let lines = through(format!("{big}\n{{\"id\":6}}\n").as_bytes(), 30).await;
        assert_eq!(lines, [big[..30].to_owned(), "{\"id\":6}".to_owned()]);
    }
}
