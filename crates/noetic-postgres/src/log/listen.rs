//! Hearing other workers' appends: one connection listening on `noetic_log`, driven by a tokio task that
//! reconnects by itself and catches up on what it may have missed (see the [module docs](super)).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use noetic_runtime::agent::log::Appended;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_postgres::{AsyncMessage, Client, Notification};

use super::Counters;
use super::errors::said;

/// The channel appends are announced on.
pub(crate) const CHANNEL: &str = "noetic_log";

/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`] while connecting fails.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How often the connection is checked (a query it must answer within [`CHECK_TIMEOUT`]); each check also moves
/// the catch-up point forward.
const CHECK_EVERY: Duration = Duration::from_secs(5);
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The listening task's state.
pub(crate) struct Listener {
    pub config: tokio_postgres::Config,
    pub target: String,
    pub id: String,
    pub appended: broadcast::Sender<Appended>,
    pub counters: Arc<Counters>,
    /// The connection while it listens, for the writer's one-statement appends (their notifications then come
    /// back on the socket read for their answers).
    pub client: tokio::sync::watch::Sender<Option<super::writer::Listening>>,
}

/// Ends the task that drives a connection when the listening session ends.
struct Driving(tokio::task::JoinHandle<()>);

impl Drop for Driving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Listener {
    /// Listens until `closing` fires (the store was dropped), connecting again whenever the connection is lost;
    /// `ready` is told when it first listens.
    pub(crate) async fn run(self, mut closing: oneshot::Receiver<()>, ready: oneshot::Sender<()>) {
        // A database snapshot all of whose transactions' notifications were received (or happened before the
        // first LISTEN): after a reconnection, every session last written by a transaction it does not see may
        // have been missed.
        let mut seen: Option<String> = None;
        let mut ready = Some(ready);
        let mut backoff = MIN_BACKOFF;
        loop {
            let error = tokio::select! {
                _ = &mut closing => return,
                error = self.listen(&mut seen, &mut backoff, &mut ready) => error,
            };
            tracing::warn!(
                target = %self.target, %error, retry_in_ms = backoff.as_millis() as u64,
                "the session log's listening connection failed; connecting again"
            );
            tokio::select! {
                _ = &mut closing => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One listening connection, from connecting to its failure (the error says how it ended). `backoff` is reset
    /// and `ready` told once it listens.
    async fn listen(
        &self,
        seen: &mut Option<String>,
        backoff: &mut Duration,
        ready: &mut Option<oneshot::Sender<()>>,
    ) -> String {
        let (client, mut connection) = match self.config.connect(tokio_postgres::NoTls).await {
            Ok(connected) => connected,
            Err(e) => return format!("connecting failed: {}", said(&e)),
        };
        let (heard, mut hearing) = mpsc::unbounded_channel();
        // This store object's own appends are not news to it: left here, without waking the listening task.
        let own = format!("{}\t", self.id);
        let driving = Driving(tokio::spawn(async move {
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message
                    && !n.payload().starts_with(&own)
                    && heard.send(n).is_err()
                {
                    return;
                }
            }
        }));
        let client = Arc::new(client);
        let error = match self.start(&client, seen).await {
            Ok(()) => {
                *backoff = MIN_BACKOFF;
                self.counters.listening.fetch_add(1, Ordering::Relaxed);
                // Published only with its server process known (see `Writer::settle`).
                if let Ok(pid) = client.query_one("SELECT pg_backend_pid()", &[]).await.and_then(|r| r.try_get(0)) {
                    let name = format!("noetic-listen {}", self.id);
                    self.client.send_replace(Some(super::writer::Listening { client: client.clone(), pid, name }));
                }
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                let error = self.hear(&client, seen, &mut hearing).await;
                self.client.send_replace(None);
                error
            }
            Err(e) => e,
        };
        // What was received before the connection ended is still heard: the snapshot in `seen` counts on it.
        drop(driving);
        drop(client);
        while let Ok(n) = hearing.try_recv() {
            self.heard(&n);
        }
        error
    }

    /// Listens, and broadcasts the sessions appended to since `seen` (when this is a reconnection).
    async fn start(&self, client: &Client, seen: &mut Option<String>) -> Result<(), String> {
        // Every transaction this snapshot sees committed before the LISTEN: after the catch-up below, it is a
        // point whose appends were all either heard or caught up on.
        let before = snapshot(client).await?;
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await.map_err(|e| format!("LISTEN failed: {}", said(&e)))?;
        if let Some(old) = seen.as_deref() {
            let rows = client
                .query(
                    "SELECT key, last FROM noetic_log_sessions
                     WHERE last > 0 AND NOT pg_visible_in_snapshot(written_by, $1::text::pg_snapshot)",
                    &[&old],
                )
                .await
                .map_err(|e| format!("catching up on appends failed: {}", said(&e)))?;
            // Counted first: whoever hears of one of them sees it counted.
            self.counters.caught_up.fetch_add(rows.len() as u64, Ordering::Relaxed);
            for row in &rows {
                if let (Ok(key), Ok(last)) = (row.try_get::<_, String>(0), row.try_get::<_, i64>(1)) {
                    let _ = self.appended.send(Appended { key, last: u64::try_from(last).unwrap_or(0) });
                }
            }
        }
        *seen = Some(before);
        Ok(())
    }

    /// Broadcasts notifications as they come, and checks the connection now and then, until it fails.
    async fn hear(
        &self,
        client: &Client,
        seen: &mut Option<String>,
        hearing: &mut mpsc::UnboundedReceiver<Notification>,
    ) -> String {
        let mut check = tokio::time::interval(CHECK_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        check.tick().await;
        // Taken at the last check: once a later check is answered, every notification of a transaction it sees
        // has been received (the server sends them before it reads the next query).
        let mut pending: Option<String> = None;
        loop {
            tokio::select! {
                n = hearing.recv() => match n {
                    Some(n) => self.heard(&n),
                    None => return "the connection closed".to_owned(),
                },
                _ = check.tick() => match tokio::time::timeout(CHECK_TIMEOUT, snapshot(client)).await {
                    Ok(Ok(now)) => {
                        if let Some(confirmed) = pending.replace(now) {
                            *seen = Some(confirmed);
                        }
                    }
                    Ok(Err(e)) => return e,
                    Err(_) => return format!("the connection did not answer within {CHECK_TIMEOUT:?}"),
                },
            }
        }
    }

    /// Broadcasts the sessions a notification of another store object's append statement announces (see
    /// [`super::announce`]).
    fn heard(&self, n: &Notification) {
        let Some((id, sessions)) = super::announce::parse(n.payload()) else { return };
        if id != self.id {
            for (key, last) in sessions {
                // Nobody watching is not an error.
                let _ = self.appended.send(Appended { key: key.to_owned(), last });
            }
        }
    }
}

/// The database's current snapshot, as text.
async fn snapshot(client: &Client) -> Result<String, String> {
    client
        .query_one("SELECT pg_current_snapshot()::text", &[])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(|e| format!("reading the database's snapshot failed: {}", said(&e)))
}
