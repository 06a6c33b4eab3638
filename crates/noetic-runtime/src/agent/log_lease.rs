//! Sessions a session log shares between processes (a store with [`Leases`](super::log::Leases): PostgreSQL): a
//! process runs a session's turn only while it holds the session's lease, renews it while the turn runs and gives
//! it up when the turn ends. Taking the lease brings in what other workers appended meanwhile (their turns are the
//! session's history); a process that cannot take it steers or stops the turn where it runs by appending a message
//! or a stop, which the holder takes at its next checkpoint (SPEC 6.4).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::log::{Entry, Expect, LogStore};
use super::session::SessionState;
use crate::context::lock;

/// How long a lease lasts without renewal, unless the runtime says otherwise.
pub const DEFAULT_LEASE_TERM: Duration = Duration::from_secs(15);

/// A session's lease, held by this process for a turn.
pub(crate) struct LeaseGuard {
    store: Arc<dyn LogStore>,
    key: Arc<str>,
    holder: Arc<str>,
    term: Duration,
}

impl LeaseGuard {
    /// Gives the lease up (a failure is logged: the lease then runs out).
    pub(crate) async fn release(&self) {
        if let Some(leases) = self.store.leases()
            && let Err(e) = leases.release(&self.key, &self.holder).await
        {
            tracing::warn!(session = %self.key, error = %e, "could not give the session's lease up (it runs out)");
        }
    }

    /// Renews the lease every third of its term until `done` is cancelled; when it cannot (another process took
    /// the session, the store is gone for longer than the term), `turn` is cancelled.
    pub(crate) fn keep(self: &Arc<Self>, turn: CancellationToken, done: CancellationToken) {
        let guard = self.clone();
        tokio::spawn(async move {
            let every = guard.term / 3;
            loop {
                tokio::select! {
                    () = done.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
                let Some(leases) = guard.store.leases() else { return };
                match leases.acquire(&guard.key, &guard.holder, guard.term).await {
                    Ok(None) => {}
                    Ok(Some(other)) => {
                        tracing::warn!(session = %guard.key, holder = %other, "the session's lease was taken over; the turn stops");
                        turn.cancel();
                        return;
                    }
                    Err(e) => tracing::warn!(session = %guard.key, error = %e, "could not renew the session's lease"),
                }
            }
        });
    }
}

/// Whether this process may start a turn of a session.
pub(crate) enum Hold {
    /// The store is not shared: no lease needed.
    Free,
    /// This process holds the lease now (the session brought up to date).
    Held(Arc<LeaseGuard>),
    /// Another process holds it: the worker named.
    Elsewhere(String),
}

/// Takes the session's lease for a turn (see the [module docs](self)), or says who holds it.
pub(crate) async fn hold(state: &Arc<SessionState>, holder: &Arc<str>, term: Duration) -> Result<Hold, String> {
    let Some(logged) = state.logged() else { return Ok(Hold::Free) };
    let Some(leases) = logged.store().leases() else { return Ok(Hold::Free) };
    if state.is_running() {
        // The claim says busy; this process already holds the lease for the turn it runs.
        return Ok(Hold::Free);
    }
    let key = state.key().clone();
    if let Some(other) = leases.acquire(&key, holder, term).await.map_err(|e| e.to_string())? {
        return Ok(Hold::Elsewhere(other));
    }
    let guard = Arc::new(LeaseGuard { store: logged.store().clone(), key, holder: holder.clone(), term });
    // Holding it, nobody else writes turns: what they wrote is the session's history.
    let known = logged.known();
    let synced = match logged.sync().await {
        Ok(last) => last,
        Err(e) => {
            guard.release().await;
            return Err(e);
        }
    };
    // A turn left open is read again even when nothing new arrived: what was read of it earlier (when this process
    // opened the session, or heard of its entries) may be older than its last entry.
    let open = lock(&logged.projection).open_turn.is_some();
    if (synced != known || open)
        && let Err(e) = state.reload_unfinished().await
    {
        guard.release().await;
        return Err(e);
    }
    Ok(Hold::Held(guard))
}

/// Appends `entries` at the end of the session's log, for the process that runs its turn to take in.
pub(crate) async fn tell_holder(state: &SessionState, entries: &[Entry]) -> Result<(), String> {
    let Some(logged) = state.logged() else { return Ok(()) };
    logged.store().append(state.key(), Expect::End, entries).await.map(|_| ()).map_err(|e| e.to_string())
}
