//! The accept loop: HTTP/1.1 connections served by hyper, watched so that none can hold the server. A connection
//! with no request in progress is closed after the idle timeout; once a request's first byte arrived, its head must
//! be complete within the header-read timeout and then its body within the body-read timeout. At most
//! `max_connections` are open: at the cap each new connection closes the longest-idle one (and waits when all
//! have a request in progress, e.g. event streams); running out of file descriptors does the same. Both are logged
//! once per burst. A request in progress (an event stream sending keep-alives) is never idle.

mod watch;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::pending;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service;

use crate::authority::LocalAddr;
use crate::config::ServerConfig;
use watch::{Deadlined, InFlight, Slot, Tracked, Watched};

/// The timeouts and the cap, from [`ServerConfig`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read: Duration,
    pub(crate) body_read: Duration,
    pub(crate) idle: Duration,
    pub(crate) max_connections: usize,
}

impl Limits {
    pub(crate) fn of(config: &ServerConfig) -> Limits {
        Limits {
            header_read: config.header_read_timeout,
            body_read: config.body_read_timeout,
            idle: config.idle_timeout,
            max_connections: config.max_connections,
        }
    }
}

/// The open connections, so that the longest-idle one can be closed to make room.
struct Registry {
    open: Mutex<BTreeMap<u64, Arc<Slot>>>,
    next_id: AtomicU64,
    /// Signalled when a connection's last request ends (one may now be closed to make room).
    became_idle: Arc<Notify>,
}

impl Registry {
    fn open(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Slot>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self) -> (u64, Arc<Slot>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new(self.became_idle.clone()));
        self.open().insert(id, slot.clone());
        (id, slot)
    }

    /// Asks the connection idle the longest (no request in progress) to close; false when every one is busy.
    fn evict_longest_idle(&self) -> bool {
        let open = self.open();
        let longest = open.values().filter(|s| s.is_idle() && !s.is_evicted()).min_by_key(|s| s.idle_since());
        match longest {
            Some(slot) => {
                slot.evict();
                true
            }
            None => false,
        }
    }
}

/// Says a condition once, until it has cleared (a burst of refused connections is one line, not one per
/// connection).
#[derive(Default)]
struct Once {
    said: bool,
}

impl Once {
    fn say(&mut self, line: impl FnOnce()) {
        if !self.said {
            self.said = true;
            line();
        }
    }

    fn clear(&mut self) {
        self.said = false;
    }
}

/// True for errors of one connection (the client gave up before it was accepted), which say nothing about the
/// listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves `router` on `listener` until `stop` is cancelled; then stops accepting, lets the requests in progress
/// finish (idle connections close at once) and waits up to `drain` for them.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    drain: Duration,
) -> io::Result<()> {
    let registry =
        Arc::new(Registry { open: Mutex::default(), next_id: AtomicU64::new(0), became_idle: Arc::new(Notify::new()) });
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let (mut at_cap, mut out_of_files) = (Once::default(), Once::default());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => prepared(stream),
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                out_of_files.say(|| {
                    tracing::warn!(
                        error = %e,
                        "cannot accept connections (out of file descriptors?): closing the longest-idle connection \
                         to make room; raise the open-file limit (ulimit -n) or lower --max-connections"
                    );
                });
                registry.evict_longest_idle();
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    () = stop.cancelled() => break,
                }
            }
        };
        out_of_files.clear();
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                at_cap.say(|| {
                    tracing::warn!(
                        max_connections = limits.max_connections,
                        "reached the connection cap ({} open): each new connection closes the longest-idle one, or \
                         waits while every connection has a request in progress; raise --max-connections \
                         (ServerConfig::max_connections) if this is normal load",
                        limits.max_connections
                    );
                });
                match make_room(&registry, &permits, &stop).await {
                    Some(permit) => permit,
                    None => break,
                }
            }
        };
        // The burst is over once a quarter of the connections are free again.
        if permits.available_permits() >= limits.max_connections / 4 {
            at_cap.clear();
        }
        let (id, slot) = registry.add();
        connections.spawn(connection(stream, slot, id, registry.clone(), router.clone(), limits, stop.clone(), permit));
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(drain, connections.wait()).await.is_err() {
        tracing::warn!("connections still open {} s after the shutdown began; closing them", drain.as_secs());
    }
    Ok(())
}

/// Closes the longest-idle connection (or, when all are busy, waits until one is idle or closes) and returns its
/// place; `None` when the server stops meanwhile.
async fn make_room(
    registry: &Registry,
    permits: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    loop {
        let evicted = registry.evict_longest_idle();
        let became_idle = registry.became_idle.notified();
        tokio::select! {
            permit = permits.clone().acquire_owned() => return permit.ok(),
            () = became_idle, if !evicted => {}
            () = stop.cancelled() => return None,
        }
    }
}

/// An accepted connection as it is served: small writes (an event, a short answer) go out at once instead of waiting
/// for the client's delayed ACK (Nagle's algorithm would hold them up to ~40 ms on loopback).
fn prepared(stream: TcpStream) -> TcpStream {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "could not turn Nagle's algorithm off for a connection");
    }
    stream
}

/// Serves one connection until it ends, times out, is evicted, or the server stops and its requests finished.
#[allow(clippy::too_many_arguments)]
async fn connection(
    stream: TcpStream,
    slot: Arc<Slot>,
    id: u64,
    registry: Arc<Registry>,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    permit: OwnedSemaphorePermit,
) {
    let local = stream.local_addr().ok().map(LocalAddr);
    let service = {
        let slot = slot.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let in_flight = InFlight::begin(&slot);
            let mut request = request.map(|body| Body::new(Deadlined::new(body, limits.body_read)));
            if let Some(local) = local {
                request.extensions_mut().insert(local);
            }
            let mut router = router.clone();
            async move {
                let response = match router.call(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_flight)))
            }
        })
    };
    let io = TokioIo::new(Watched::new(stream, slot.clone()));
    // Boxed, so that dropping it (closing the socket) happens before the connection's place is given back.
    let mut conn = Box::pin(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
    let mut stopping = false;
    loop {
        let deadline = slot.deadline(&limits);
        let changed = slot.changed();
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            () = sleep_until(deadline) => {
                if let Some(why) = slot.expired(&limits) {
                    tracing::debug!("closed a connection: {why}");
                    break;
                }
            }
            () = changed => {}
            () = slot.evicted() => break,
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
    // Dropping the connection closes its socket before its place is given to another.
    drop(conn);
    registry.open().remove(&id);
    drop(permit);
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => pending().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_accepted_connection_sends_small_writes_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let client = tokio::spawn(async move { TcpStream::connect(address).await.unwrap() });
        let (stream, _) = listener.accept().await.unwrap();
        assert!(!stream.nodelay().unwrap(), "a fresh socket batches small writes");
        assert!(prepared(stream).nodelay().unwrap(), "a served connection does not");
        drop(client.await.unwrap());
    }
}
