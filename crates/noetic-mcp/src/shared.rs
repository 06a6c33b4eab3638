//! What a server handle, its tools and its supervisor share: the connection's peer, the offered tools, the calls
//! waiting for progress and the connection counters. Below both `server` (which connects and supervises) and `tool`
//! (which calls through the peer).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError, RwLock};

use noetic_steps::tool::{DynamicTools, ToolContext};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::watch;

use crate::config::McpServerConfig;

/// What the server handle, its tools and its supervisor share.
pub(crate) struct Shared {
    pub(crate) config: McpServerConfig,
    pub(crate) peer: RwLock<Option<Peer<RoleClient>>>,
    pub(crate) tools: DynamicTools,
    pub(crate) progress: Progress,
    /// Connections made so far (1 after the start, +1 per restart).
    pub(crate) connections: watch::Sender<u64>,
    /// Tool listings taken so far (1 after the start, +1 per change or restart).
    pub(crate) listings: watch::Sender<u64>,
}

impl Shared {
    /// The connected server, if it is connected.
    pub(crate) fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub(crate) fn set_peer(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(PoisonError::into_inner) = peer;
    }
}

/// Calls waiting for progress notifications, by progress token.
#[derive(Default)]
pub(crate) struct Progress {
    calls: Mutex<HashMap<ProgressToken, ToolContext>>,
}

/// Registered progress of one call; dropping it stops forwarding.
pub(crate) struct ProgressGuard<'a> {
    progress: &'a Progress,
    token: ProgressToken,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        self.progress.calls.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.token);
    }
}

impl Progress {
    /// Forwards the progress notifications carrying `token` to `tcx` until the guard is dropped.
    pub(crate) fn register(&self, token: &ProgressToken, tcx: ToolContext) -> ProgressGuard<'_> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).insert(token.clone(), tcx);
        ProgressGuard { progress: self, token: token.clone() }
    }

    /// Emits a progress notification as the `tool_progress` event of the call it belongs to.
    pub(crate) fn forward(&self, params: &ProgressNotificationParam) {
        let tcx = self.calls.lock().unwrap_or_else(PoisonError::into_inner).get(&params.progress_token).cloned();
        if let Some(tcx) = tcx {
            let data =
                serde_json::json!({"progress": params.progress, "total": params.total, "message": params.message});
            let _ = tcx.progress(data);
        }
    }
}
