//! Approvals over HTTP: a call of a tool that needs approval waits here until a client approves or rejects it,
//! and is rejected when nobody decides in time (fail closed). The runtime's approver is [`Approvals::approver`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use noetic::tool::{Approval, ApprovalRequest, Approver};
use serde::Serialize;
use tokio::sync::oneshot;

/// How long a call waits for a decision by default.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// A call waiting for a decision, as clients see it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingApproval {
    /// The call id (the key to decide with).
    pub call_id: String,
    /// The session whose turn made the call.
    pub session: Option<String>,
    /// The tool.
    pub tool: String,
    /// The arguments (written by the model: untrusted).
    pub arguments: serde_json::Value,
    /// The SHA-256 of the arguments' canonical JSON: a client that shows the call sends it back with its
    /// decision, so the decision cannot reach a call with other arguments (see [`Approvals::decide_shown`]).
    pub arguments_sha256: String,
    /// When the call started waiting.
    #[serde(serialize_with = "crate::millis::unix_millis")]
    pub requested_at: SystemTime,
    /// When it is rejected if nobody decides.
    #[serde(serialize_with = "crate::millis::unix_millis")]
    pub expires_at: SystemTime,
    /// What the call would change (a diff for a file write), when the server has a [`Preview`] for it; made when
    /// the call is listed, so it shows the files as they are then. Built from untrusted arguments: escape it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// Describes what a waiting call would change, for the person deciding: e.g. the diff a `write_file` call would
/// make. It may read files (it runs on a blocking thread); `None` when it has nothing to show for the call.
pub type Preview = Arc<dyn Fn(&ApprovalRequest) -> Option<String> + Send + Sync>;

struct Waiting {
    info: PendingApproval,
    answer: oneshot::Sender<Approval>,
    /// Which wait it is, so that a replaced call's wait, ending, does not take its successor off the list.
    serial: u64,
}

/// Numbers the waits.
static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A waiting call's key: its session and its call id (call ids are only unique within a conversation).
type Key = (Option<String>, String);

/// The calls waiting for a decision.
#[derive(Clone)]
pub struct Approvals {
    waiting: Arc<Mutex<HashMap<Key, Waiting>>>,
    timeout: Duration,
    preview: Option<Preview>,
}

/// Why a decision could not be delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum DecideError {
    /// No call with this id waits (never asked, already decided, timed out or cancelled).
    NotWaiting,
    /// Calls of several sessions wait under this call id: the session must be named.
    Ambiguous,
    /// The call waiting under this id has other arguments than those the decision was given for (a newer call
    /// reused the id): nothing was decided.
    ArgumentsChanged,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Approvals {
    /// Calls wait at most `timeout` for a decision, then are rejected.
    pub fn new(timeout: Duration) -> Self {
        Approvals { waiting: Arc::default(), timeout, preview: None }
    }

    /// Shows each waiting call with what `preview` says it would change (see [`PendingApproval::preview`]).
    pub fn with_preview(mut self, preview: Preview) -> Self {
        self.preview = Some(preview);
        self
    }

    /// The approver to give the runtime ([`noetic::agent::RuntimeBuilder::approver`]).
    pub fn approver(&self) -> Arc<dyn Approver> {
        Arc::new(self.clone())
    }

    /// How long a call waits for a decision.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The calls waiting now, oldest first; only `session`'s when given.
    pub fn pending(&self, session: Option<&str>) -> Vec<PendingApproval> {
        let mut list: Vec<PendingApproval> = lock(&self.waiting)
            .values()
            .filter(|w| session.is_none() || w.info.session.as_deref() == session)
            .map(|w| w.info.clone())
            .collect();
        list.sort_by_key(|p| p.requested_at);
        list
    }

    /// The calls waiting now, as [`Approvals::pending`], each with its preview and `expires_in_ms` (the time left
    /// to decide, by the server's clock: a client counts down from it without trusting its own clock).
    pub(crate) async fn listed(&self, session: Option<&str>) -> Vec<crate::bodies::ListedApproval> {
        let mut list = self.pending(session);
        if let Some(preview) = self.preview.clone().filter(|_| !list.is_empty()) {
            let previewed = tokio::task::spawn_blocking(move || {
                for pending in &mut list {
                    pending.preview = preview(&pending.request());
                }
                list
            })
            .await;
            list = match previewed {
                Ok(list) => list,
                // A preview that panicked shows nothing; the calls still wait for a decision.
                Err(_) => self.pending(session),
            };
        }
        let now = SystemTime::now();
        list.into_iter()
            .map(|pending| crate::bodies::ListedApproval {
                expires_in_ms: crate::millis::millis_of(pending.expires_at.duration_since(now).unwrap_or_default()),
                requested_at: crate::millis::unix_ms(pending.requested_at),
                expires_at: crate::millis::unix_ms(pending.expires_at),
                call_id: pending.call_id,
                session: pending.session,
                tool: pending.tool,
                arguments: pending.arguments,
                arguments_sha256: pending.arguments_sha256,
                preview: pending.preview,
            })
            .collect()
    }

    /// Delivers a decision to the waiting call `call_id` of `session` (which may be left out while only one
    /// session has a call with that id waiting).
    pub fn decide(
        &self,
        session: Option<&str>,
        call_id: &str,
        approval: Approval,
    ) -> Result<PendingApproval, DecideError> {
        self.decide_shown(session, call_id, None, approval)
    }

    /// [`Approvals::decide`] for a decision given on the arguments whose hash is `shown`
    /// ([`PendingApproval::arguments_sha256`]); when the call waiting under the id has other arguments, nothing
    /// is decided and it keeps waiting.
    pub fn decide_shown(
        &self,
        session: Option<&str>,
        call_id: &str,
        shown: Option<&str>,
        approval: Approval,
    ) -> Result<PendingApproval, DecideError> {
        let mut map = lock(&self.waiting);
        let key = match session {
            Some(session) => (Some(session.to_owned()), call_id.to_owned()),
            None => {
                let mut keys = map.keys().filter(|(_, id)| id == call_id);
                let key = keys.next().cloned().ok_or(DecideError::NotWaiting)?;
                if keys.next().is_some() {
                    return Err(DecideError::Ambiguous);
                }
                key
            }
        };
        let waiting = map.get(&key).ok_or(DecideError::NotWaiting)?;
        if shown.is_some_and(|shown| shown != waiting.info.arguments_sha256) {
            return Err(DecideError::ArgumentsChanged);
        }
        let waiting = map.remove(&key).ok_or(DecideError::NotWaiting)?;
        drop(map);
        // The call may have been cancelled a moment ago; then nobody reads the answer, which is fine.
        let _ = waiting.answer.send(approval);
        Ok(waiting.info)
    }
}

impl PendingApproval {
    /// The request this call made of the approver.
    fn request(&self) -> ApprovalRequest {
        ApprovalRequest::new(self.tool.clone(), self.call_id.clone(), self.arguments.clone(), self.session.clone())
    }
}

/// Removes a call's entry when its wait ends however it ends (decided, timed out, turn cancelled) — its own
/// entry only: a newer call that reused the id keeps waiting.
struct Entry {
    waiting: Arc<Mutex<HashMap<Key, Waiting>>>,
    key: Key,
    serial: u64,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut waiting = lock(&self.waiting);
        if waiting.get(&self.key).is_some_and(|w| w.serial == self.serial) {
            waiting.remove(&self.key);
        }
    }
}

impl Approver for Approvals {
    fn approve(&self, request: ApprovalRequest) -> BoxFuture<'static, Approval> {
        let (tx, rx) = oneshot::channel();
        let now = SystemTime::now();
        let info = PendingApproval {
            call_id: request.call_id.clone(),
            session: request.session,
            tool: request.tool,
            arguments: request.arguments,
            arguments_sha256: request.arguments_sha256,
            requested_at: now,
            expires_at: now + self.timeout,
            preview: None,
        };
        let key: Key = (info.session.clone(), info.call_id.clone());
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let replaced = lock(&self.waiting).insert(key.clone(), Waiting { info, answer: tx, serial });
        if let Some(old) = replaced {
            // Two calls with one id (a model repeating an id across turns): the older one is rejected, never left
            // waiting for a decision meant for the newer.
            let _ = old.answer.send(Approval::Reject { reason: "a newer call with the same id replaced it".into() });
        }
        let entry = Entry { waiting: self.waiting.clone(), key, serial };
        let timeout = self.timeout;
        Box::pin(async move {
            let result = tokio::time::timeout(timeout, rx).await;
            drop(entry);
            match result {
                Ok(Ok(approval)) => approval,
                Ok(Err(_)) => Approval::Reject { reason: "the approval request was withdrawn".into() },
                Err(_) => Approval::Reject {
                    reason: format!("nobody approved the call within {} s, so it was rejected", timeout.as_secs()),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str) -> ApprovalRequest {
        in_session("s", id)
    }

    fn in_session(session: &str, id: &str) -> ApprovalRequest {
        ApprovalRequest::new("write_file", id, serde_json::json!({"path": "a"}), Some(session.into()))
    }

    #[tokio::test]
    async fn two_sessions_waiting_under_one_call_id_are_told_apart() {
        let approvals = Approvals::new(Duration::from_secs(30));
        let first = tokio::spawn(approvals.approve(in_session("a", "c1")));
        let second = tokio::spawn(approvals.approve(in_session("b", "c1")));
        assert_eq!(approvals.pending(None).len(), 2, "neither replaces the other");
        assert_eq!(approvals.decide(None, "c1", Approval::Approve).err(), Some(DecideError::Ambiguous));
        assert!(approvals.decide(Some("b"), "c1", Approval::Reject { reason: "no".into() }).is_ok());
        assert!(approvals.decide(None, "c1", Approval::Approve).is_ok(), "now only session a's waits");
        assert!(matches!(first.await, Ok(Approval::Approve)));
        assert!(matches!(second.await, Ok(Approval::Reject { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_nobody_decides_is_rejected_when_its_time_is_up_and_leaves_the_list() {
        let approvals = Approvals::new(Duration::from_secs(30));
        let wait = approvals.approve(request("c1"));
        let waiting = tokio::spawn(wait);
        tokio::task::yield_now().await;
        assert_eq!(approvals.pending(None).len(), 1);
        let Ok(answer) = waiting.await else { unreachable!("the wait does not panic") };
        assert!(matches!(answer, Approval::Reject { reason } if reason.contains("within 30 s")));
        assert!(approvals.pending(None).is_empty());
        assert_eq!(approvals.decide(None, "c1", Approval::Approve).err(), Some(DecideError::NotWaiting));
    }

    #[tokio::test]
    async fn a_decision_reaches_the_waiting_call_once() {
        let approvals = Approvals::new(Duration::from_secs(30));
        let wait = tokio::spawn(approvals.approve(request("c2")));
        let decided = approvals.decide(Some("s"), "c2", Approval::Approve);
        assert!(decided.is_ok_and(|p| p.session.as_deref() == Some("s") && p.tool == "write_file"));
        assert_eq!(approvals.decide(None, "c2", Approval::Approve).err(), Some(DecideError::NotWaiting));
        assert!(matches!(wait.await, Ok(Approval::Approve)));
    }

    #[tokio::test]
    async fn a_decision_given_for_other_arguments_does_not_reach_the_call_waiting_under_that_id() {
        let approvals = Approvals::new(Duration::from_secs(30));
        let shown = approvals.approve(request("c4"));
        let shown_hash = approvals.pending(None)[0].arguments_sha256.clone();
        assert_eq!(shown_hash, noetic::digest::json_sha256(&serde_json::json!({"path": "a"})));
        // The model reuses the id for another call: the older one is rejected, the newer waits.
        let newer = ApprovalRequest::new("write_file", "c4", serde_json::json!({"path": "b"}), Some("s".into()));
        let newer = tokio::spawn(approvals.approve(newer));
        assert!(matches!(shown.await, Approval::Reject { .. }));
        let stale = approvals.decide_shown(Some("s"), "c4", Some(&shown_hash), Approval::Approve);
        assert_eq!(stale.err(), Some(DecideError::ArgumentsChanged));
        assert_eq!(approvals.pending(None).len(), 1, "the newer call still waits");
        let current = approvals.pending(None)[0].arguments_sha256.clone();
        assert!(approvals.decide_shown(Some("s"), "c4", Some(&current), Approval::Approve).is_ok());
        assert!(matches!(newer.await, Ok(Approval::Approve)));
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_nothing_pending() {
        let approvals = Approvals::new(Duration::from_secs(30));
        let wait = approvals.approve(request("c3"));
        assert_eq!(approvals.pending(Some("s")).len(), 1);
        assert!(approvals.pending(Some("other")).is_empty());
        drop(wait);
        // The entry belongs to the wait: dropping it (a cancelled turn) takes the call off the list.
        assert!(approvals.pending(None).is_empty());
    }
}
