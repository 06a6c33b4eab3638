//! Taking a session's lease for a turn (see `log_lease`), and telling the process that holds it of a message or a
//! stop by appending them to the session's log.

use std::sync::Arc;
use std::time::Duration;

use super::SessionState;
use crate::agent::log::{Entry, Expect, Taken};
use crate::agent::log_lease::LeaseGuard;
use crate::context::lock;

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
    if logged.store().leases().is_none() || state.is_running() {
        // No lease needed, or the claim says busy: this process already holds the lease for the turn it runs.
        return Ok(Hold::Free);
    }
    let key = state.key().clone();
    let last = match logged.store().take_lease(&key, holder, term).await.map_err(|e| e.to_string())? {
        None => return Ok(Hold::Free),
        Some(Taken::Elsewhere(other)) => return Ok(Hold::Elsewhere(other)),
        Some(Taken::Held { last }) => last,
    };
    let guard = Arc::new(LeaseGuard::new(logged.store().clone(), key, holder.clone(), term));
    // Holding it, nobody else writes turns: what they wrote is the session's history. When the log ends where this
    // process last read it, there is nothing to read (a writer fenced by another's turn has not read that turn) —
    // unless a turn was left open: it is read again below, and that must come after this process's own appends
    // still on their way to the store (a message steered into it just now), which a read through the writer does.
    let known = logged.known();
    let open = lock(&logged.projection).open_turn.is_some();
    let synced = if last == known && !open {
        known
    } else {
        match logged.sync().await {
            Ok(last) => last,
            Err(e) => {
                guard.release().await;
                return Err(e);
            }
        }
    };
    // A turn left open is read again even when nothing new arrived: what was read of it earlier (when this process
    // opened the session, or heard of its entries) may be older than its last entry.
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
