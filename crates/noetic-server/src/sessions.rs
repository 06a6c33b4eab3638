//! The log store's sessions as a list (with which turns run now, here or on another worker) and deleting one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use noetic::agent::log::LogStore;
use serde::Serialize;
use tokio::sync::Notify;

use crate::AppState;
use crate::error::ApiError;
use crate::millis::unix_millis;
use crate::open::check_key;

/// The sessions whose turns this server runs now (a turn and the turns that continue it), so the list can tell a
/// running turn from one a stopped process left: the log shows an open turn in both. Each unbroken run of turns of a
/// session is a *chain* with a number of its own, so a watcher can tell the turns continuing the one it watched from
/// a turn started afresh after it ended.
#[derive(Default)]
pub(crate) struct RunningTurns(Arc<Mutex<Chains>>, Arc<Notify>);

/// Per session: how many guards hold it, and the number of its chain.
#[derive(Default)]
pub(crate) struct Chains {
    held: HashMap<String, (usize, u64)>,
    next: u64,
}

/// Marks a session's turn as running here until dropped.
pub(crate) struct RunningGuard {
    turns: Arc<Mutex<Chains>>,
    released: Arc<Notify>,
    key: String,
}

impl RunningTurns {
    /// Marks `key` as running here until the guard is dropped.
    pub(crate) fn start(&self, key: &str) -> RunningGuard {
        let mut chains = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        chains.next += 1;
        let next = chains.next;
        chains.held.entry(key.to_owned()).or_insert((0, next)).0 += 1;
        RunningGuard { turns: self.0.clone(), released: self.1.clone(), key: key.to_owned() }
    }

    pub(crate) fn contains(&self, key: &str) -> bool {
        self.chain(key).is_some()
    }

    /// The number of the chain of turns of `key` running here now.
    pub(crate) fn chain(&self, key: &str) -> Option<u64> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).held.get(key).map(|(_, chain)| *chain)
    }

    /// Waits until the chain `chain` of `key` ends (at once for `None`): this server runs neither a turn of it nor
    /// a continuation.
    pub(crate) async fn released(&self, key: &str, chain: Option<u64>) {
        loop {
            let notified = self.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if chain.is_none() || self.chain(key) != chain {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut chains = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((count, _)) = chains.held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                chains.held.remove(&self.key);
            }
        }
        drop(chains);
        self.released.notify_waiters();
    }
}

/// The runtime's session log store, or 501 for a runtime built without one.
pub(crate) fn store(state: &AppState) -> Result<&Arc<dyn LogStore>, ApiError> {
    state.runtime.log_store().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no_store",
            "this server's runtime keeps no session log; build it with a log store to list, delete and read ledgers",
        )
    })
}

/// A store failure as the API says it.
pub(crate) fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "store_unavailable", e.to_string())
}

/// `GET /api/sessions`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListSessionsOk {
    sessions: Vec<SessionLine>,
}

/// `DELETE /api/sessions/{key}`.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteSessionOk {
    /// The session key.
    deleted: String,
}

/// One session of the list.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionLine {
    key: String,
    /// Its title, if it was given one (PATCH /api/sessions/{key}); untrusted text.
    #[schema(required = true)]
    title: Option<String>,
    turns: u64,
    items: u64,
    queued: u64,
    /// A turn runs now (on this server, or on `running_on`).
    running: bool,
    /// With a store several workers share: the worker running its turn, when it is another one (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    running_on: Option<String>,
    /// A stopped process left its last turn unfinished (POST .../resume finishes it); false while the turn runs.
    unfinished: bool,
    /// ms since the Unix epoch.
    #[serde(serialize_with = "unix_millis")]
    #[schema(value_type = u64)]
    updated_at: SystemTime,
}

/// The worker other than this one that holds `key`'s lease (runs its turn), if any.
pub(crate) async fn holder_elsewhere(
    state: &AppState,
    store: &dyn LogStore,
    key: &str,
) -> Result<Option<String>, ApiError> {
    let Some(leases) = store.leases() else { return Ok(None) };
    let holder = leases.holder(key).await.map_err(unavailable)?;
    Ok(holder.filter(|h| h != state.runtime.worker_id()))
}

/// What the list says of one session: an open turn (one that started and did not end) is a running turn when this
/// server runs it or another worker holds its lease, else a turn a stopped process left.
async fn line(
    state: &AppState,
    store: &dyn LogStore,
    session: noetic::agent::log::SessionLine,
) -> Result<SessionLine, ApiError> {
    let open = session.summary.open_turn.is_some();
    let here = state.running.contains(&session.key);
    let running_on = match open && !here {
        true => holder_elsewhere(state, store, &session.key).await?,
        false => None,
    };
    let running = open && (here || running_on.is_some());
    Ok(SessionLine {
        unfinished: open && !running,
        running,
        running_on,
        turns: session.summary.turns,
        items: session.summary.items,
        queued: session.summary.queued,
        updated_at: session.updated_at,
        title: session.summary.title,
        key: session.key,
    })
}

/// `GET /api/sessions`: the store's sessions, newest first.
#[utoipa::path(
    get,
    path = "/api/sessions",
    summary = "List the store's sessions, newest first, with which turns run now",
    responses(
        (
            status = 200,
            description = "OK",
            body = ListSessionsOk,
            content_type = "application/json",
        ),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 501, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn list_sessions(State(state): State<Arc<AppState>>) -> Result<Json<ListSessionsOk>, ApiError> {
    let store = store(&state)?.clone();
    let listed = store.list().await.map_err(|e| ApiError::internal(format!("could not list the sessions: {e}")))?;
    let mut lines = Vec::with_capacity(listed.len());
    for session in listed {
        lines.push(line(&state, store.as_ref(), session).await?);
    }
    Ok(Json(ListSessionsOk { sessions: lines }))
}

/// How long a delete waits for the server to let go of a session whose turn just ended.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// `DELETE /api/sessions/{key}`: deletes an idle session (its log: conversation, queue, ledger and layer state)
/// from the store and from the server's memory.
#[utoipa::path(
    delete,
    path = "/api/sessions/{key}",
    summary = "Delete an idle session: its conversation, queue, ledger and layer state, from the store and the \
        server's memory",
    description = "Changes state: send it with 'X-Noetic-Request: 1' (or a JSON body), like every POST and PUT. \
        Refused with 409 'busy' while a turn runs (stop it first), and with 409 'session_in_use' when the server \
        cannot let the session go: a session whose events were followed since the server started stays in its memory \
        (restart the server, then delete it).",
    params(crate::openapi::common::SessionKey),
    responses(
        (
            status = 200,
            description = "Deleted",
            body = DeleteSessionOk,
            content_type = "application/json",
        ),
        (status = 400, response = crate::openapi::common::ApiErrorResponse),
        (status = 401, response = crate::openapi::common::ApiErrorResponse),
        (status = 403, response = crate::openapi::common::ApiErrorResponse),
        (status = 404, response = crate::openapi::common::ApiErrorResponse),
        (status = 409, response = crate::openapi::common::ApiErrorResponse),
        (status = 415, response = crate::openapi::common::ApiErrorResponse),
        (status = 501, response = crate::openapi::common::ApiErrorResponse),
        (status = 503, response = crate::openapi::common::ApiErrorResponse),
    ),
)]
pub(crate) async fn delete_session(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
) -> Result<Json<DeleteSessionOk>, ApiError> {
    check_key(&key)?;
    let shared = store(&state)?.clone();
    let busy = || {
        ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            format!("session '{key}' is running a turn; stop it (POST /api/sessions/{key}/stop), then delete it"),
        )
    };
    if let Some(chain) = state.running.chain(&key) {
        // A turn that just ended still holds the session here while the server looks for messages that came after
        // it (a continuation). Idle now: wait for that look, briefly, rather than refuse a session the user sees
        // idle. A turn running, or a continuation started meanwhile, is refused.
        if state.runtime.session(&key).is_busy() {
            return Err(busy());
        }
        let settled = tokio::time::timeout(SETTLE, state.running.released(&key, Some(chain))).await;
        if settled.is_err() || state.running.contains(&key) {
            return Err(busy());
        }
    }
    if let Some(worker) = holder_elsewhere(&state, shared.as_ref(), &key).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            format!("session '{key}' is running a turn on worker {worker}; stop it, then delete it"),
        ));
    }
    // Deleted from memory too, also when somebody followed its events here (their streams end).
    let deleted = match state.runtime.delete_session(&key).await {
        Ok(deleted) => deleted,
        Err(noetic::agent::SessionError::Busy { .. }) => return Err(busy()),
        Err(e) => return Err(unavailable(e)),
    };
    if !deleted {
        return Err(ApiError::not_found("no_such_session", format!("there is no session '{key}' to delete")));
    }
    Ok(Json(DeleteSessionOk { deleted: key }))
}
