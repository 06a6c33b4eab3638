//! Sessions a session log shares between processes (a store with [`Leases`](super::log::Leases): PostgreSQL): a
//! process runs a session's turn only while it holds the session's lease, renews it while the turn runs and gives
//! it up when the turn ends. Taking the lease brings in what other workers appended meanwhile (their turns are the
//! session's history); a process that cannot take it steers or stops the turn where it runs by appending a message
//! or a stop, which the holder takes at its next checkpoint (SPEC 6.4).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::log::LogStore;

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
    /// The guard of a lease `holder` took on `key` for `term`.
    pub(crate) fn new(store: Arc<dyn LogStore>, key: Arc<str>, holder: Arc<str>, term: Duration) -> Self {
        LeaseGuard { store, key, holder, term }
    }

    /// The holder's name.
    pub(crate) fn holder(&self) -> &Arc<str> {
        &self.holder
    }

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
