//! What a connection's watchdog reads: whether a request is in progress, since when the connection is idle and
//! when the head of its next request began to arrive. The socket, the request bodies and the response bodies
//! report to it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::Limits;
use crate::error::BodyTimedOut;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One connection's state.
pub(super) struct Slot {
    /// When the connection was accepted; the times below are nanoseconds after it.
    origin: Instant,
    in_flight: AtomicUsize,
    idle_since: AtomicU64,
    /// One more than when the first byte of the next request's head arrived; 0 while none did.
    head_started: AtomicU64,
    changed: Notify,
    evict: CancellationToken,
    /// The registry's: told when this connection's last request ends.
    became_idle: Arc<Notify>,
}

impl Slot {
    pub(super) fn new(became_idle: Arc<Notify>) -> Slot {
        Slot {
            origin: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(0),
            changed: Notify::new(),
            evict: CancellationToken::new(),
            became_idle,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn at(&self, nanos: u64) -> Instant {
        self.origin + Duration::from_nanos(nanos)
    }

    /// No request in progress.
    pub(super) fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
    }

    pub(super) fn idle_since(&self) -> Instant {
        self.at(self.idle_since.load(Ordering::SeqCst))
    }

    /// When the connection is to be closed unless something happens first; `None` while a request is in progress.
    pub(super) fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if !self.is_idle() {
            return None;
        }
        match self.head_started.load(Ordering::SeqCst) {
            0 => Some(self.idle_since() + limits.idle),
            started => Some(self.at(started - 1) + limits.header_read),
        }
    }

    /// Why the connection is to be closed now, if it is.
    pub(super) fn expired(&self, limits: &Limits) -> Option<String> {
        if Instant::now() < self.deadline(limits)? {
            return None;
        }
        Some(if self.head_started.load(Ordering::SeqCst) == 0 {
            format!("idle for {} ms", limits.idle.as_millis())
        } else {
            format!("its request head took longer than {} ms", limits.header_read.as_millis())
        })
    }

    /// Completes when [`Slot::deadline`] may have moved.
    pub(super) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    pub(super) fn evict(&self) {
        self.evict.cancel();
    }

    pub(super) fn is_evicted(&self) -> bool {
        self.evict.is_cancelled()
    }

    pub(super) fn evicted(&self) -> WaitForCancellationFuture<'_> {
        self.evict.cancelled()
    }

    /// Bytes arrived: on an idle connection, the head of a request has begun.
    fn saw_bytes(&self) {
        if self.is_idle() && self.head_started.load(Ordering::SeqCst) == 0 {
            self.head_started.store(self.now() + 1, Ordering::SeqCst);
            self.changed.notify_one();
        }
    }
}

/// A request in progress, from its head until its response body is done (or dropped).
pub(super) struct InFlight {
    slot: Arc<Slot>,
}

impl InFlight {
    pub(super) fn begin(slot: &Arc<Slot>) -> InFlight {
        slot.in_flight.fetch_add(1, Ordering::SeqCst);
        slot.head_started.store(0, Ordering::SeqCst);
        InFlight { slot: slot.clone() }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let slot = &self.slot;
        if slot.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            slot.idle_since.store(slot.now(), Ordering::SeqCst);
            slot.changed.notify_one();
            slot.became_idle.notify_one();
        }
    }
}

/// The socket, reporting the bytes that arrive.
pub(super) struct Watched {
    stream: TcpStream,
    slot: Arc<Slot>,
}

impl Watched {
    pub(super) fn new(stream: TcpStream, slot: Arc<Slot>) -> Watched {
        Watched { stream, slot }
    }
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.slot.saw_bytes();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// A request body that must arrive within the body-read timeout of its head.
pub(super) struct Deadlined {
    body: Incoming,
    deadline: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl Deadlined {
    pub(super) fn new(body: Incoming, limit: Duration) -> Deadlined {
        use http_body::Body as _;
        let deadline = (!body.is_end_stream()).then(|| Box::pin(tokio::time::sleep(limit)));
        Deadlined { body, deadline, limit }
    }
}

impl http_body::Body for Deadlined {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(BoxError::from)));
        }
        let expired = this.deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
        if !expired {
            return Poll::Pending;
        }
        Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit)))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its request in progress until it is done.
pub(super) struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl Tracked {
    pub(super) fn new(body: Body, in_flight: InFlight) -> Tracked {
        Tracked { body, _in_flight: in_flight }
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
