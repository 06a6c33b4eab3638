//! One AG-UI run's event stream: `RUN_STARTED`, then the session's events translated ([`super::translate`]) until
//! the turn (and the turns that continue it) ends — `RUN_FINISHED`, with the `cancelled` outcome for a stopped
//! turn — or fails (`RUN_ERROR` with our error kind as its `code`), or a call waits for approval: then the run
//! ends with the `interrupt` outcome, one interrupt per waiting call, and the turn waits for a run whose `resume`
//! answers them. `STATE_SNAPSHOT`s say what the page shows (busy, queue, pending approvals) whenever it changes.

use std::sync::Arc;
use std::time::SystemTime;

use noetic::agent::Session;
use noetic::context::{EventFollower, EventKind, Followed};
use noetic::model::{Item, Role};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::input::answer_schema;
use super::translate::{Translator, agui_event, custom};
use crate::AppState;
use crate::approvals::PendingApproval;

/// The longest a run whose turn ended waits for the follower to hand out that turn's last events.
const CATCH_UP_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a run's events go: the response body. A send fails when the client went away.
pub(crate) type Tx = mpsc::Sender<Value>;

/// The run being streamed.
pub(crate) struct Run {
    pub(crate) state: Arc<AppState>,
    pub(crate) session: Session,
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    /// The state the client was last sent (its snapshot plus the deltas since), which the next delta is from.
    sent: std::sync::Mutex<Option<Value>>,
}

/// How a run ends.
pub(crate) enum End {
    /// `RUN_FINISHED` with this outcome (`None`: success).
    Finished(Option<Value>),
    /// `RUN_ERROR` with this code and message.
    Error(String, String),
    /// The client went away: nothing more to send.
    Gone,
}

/// The id of the interrupt for a call waiting for approval in turn `turn`: call ids repeat across turns, so the
/// turn and the arguments' hash are part of it (an answer given twice, or late, never reaches another call).
pub(crate) fn interrupt_id(turn: u64, call_id: &str, arguments_sha256: &str) -> String {
    let short: String = arguments_sha256.chars().take(12).collect();
    format!("t{turn}.{call_id}.{short}")
}

/// A waiting call as an AG-UI interrupt.
fn interrupt(id: &str, call_id: &str, tool: &str, arguments: &Value, sha: &str, expires: Option<SystemTime>) -> Value {
    let mut interrupt = json!({
        "id": id,
        "reason": "tool_approval",
        "message": format!("The agent wants to call {tool} with {arguments}. Approve it?"),
        "toolCallId": call_id,
        "responseSchema": answer_schema(),
        "metadata": { "tool": tool, "arguments": arguments, "arguments_sha256": sha },
    });
    if let (Some(expires), Value::Object(fields)) = (expires, &mut interrupt) {
        fields.insert("expiresAt".into(), Value::String(noetic::time::rfc3339(expires)));
    }
    interrupt
}

/// The calls of `session` waiting for approval now, with their interrupt ids.
pub(crate) fn waiting(state: &AppState, session: &Session) -> Vec<(String, PendingApproval)> {
    let turn = session.turns();
    state
        .approvals
        .pending(Some(session.key()))
        .into_iter()
        .map(|p| (interrupt_id(turn, &p.call_id, &p.arguments_sha256), p))
        .collect()
}

impl Run {
    pub(crate) fn new(state: Arc<AppState>, session: Session, thread_id: String, run_id: String) -> Run {
        Run { state, session, thread_id, run_id, sent: std::sync::Mutex::new(None) }
    }

    /// `RUN_STARTED`.
    pub(crate) fn started(&self) -> Value {
        agui_event(
            "RUN_STARTED",
            SystemTime::now(),
            json!({ "threadId": self.thread_id, "runId": self.run_id, "protocolVersion": "1.0" }),
        )
    }

    /// The event that ends the run.
    pub(crate) fn end_event(&self, end: &End) -> Option<Value> {
        let now = SystemTime::now();
        match end {
            End::Finished(outcome) => {
                let mut fields = json!({ "threadId": self.thread_id, "runId": self.run_id });
                if let (Some(outcome), Value::Object(f)) = (outcome, &mut fields) {
                    f.insert("outcome".into(), outcome.clone());
                }
                Some(agui_event("RUN_FINISHED", now, fields))
            }
            End::Error(code, message) => {
                Some(agui_event("RUN_ERROR", now, json!({ "code": code, "message": message })))
            }
            End::Gone => None,
        }
    }

    /// `STATE_SNAPSHOT` of what the page shows of the session (see [`Run::state`]); the run's deltas start from it.
    pub(crate) async fn snapshot(&self) -> Value {
        let state = self.state().await;
        *self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(state.clone());
        agui_event("STATE_SNAPSHOT", SystemTime::now(), json!({ "snapshot": state }))
    }

    /// What changed in the state since the client was last sent it: a `STATE_DELTA` (JSON Patch) when that is
    /// smaller than a `STATE_SNAPSHOT`, else the snapshot; `None` when nothing changed.
    pub(crate) async fn state_update(&self) -> Option<Value> {
        let state = self.state().await;
        let mut sent = self.sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let update = match sent.as_ref() {
            Some(before) => {
                let delta = super::patch::diff(before, &state);
                if delta.is_empty() {
                    None
                } else if Value::Array(delta.clone()).to_string().len() < state.to_string().len() {
                    Some(agui_event("STATE_DELTA", SystemTime::now(), json!({ "delta": delta })))
                } else {
                    Some(agui_event("STATE_SNAPSHOT", SystemTime::now(), json!({ "snapshot": state.clone() })))
                }
            }
            None => Some(agui_event("STATE_SNAPSHOT", SystemTime::now(), json!({ "snapshot": state.clone() }))),
        };
        *sent = Some(state);
        update
    }

    /// What the page shows of the session: whether a turn runs, the queue, pending approvals, the budget limit it
    /// is paused over.
    async fn state(&self) -> Value {
        let session = &self.session;
        let queued: Vec<Value> =
            session.queued_messages().into_iter().map(|m| json!({ "id": m.id.to_string(), "text": m.text })).collect();
        let approvals = self.state.approvals.listed(Some(session.key())).await;
        json!({
                "session": session.key(),
                "busy": session.is_busy(),
                "turns": session.turns(),
                "steering_mode": session.steering_mode().as_str(),
                "queued": queued,
                "pending_approvals": approvals,
            "paused": crate::budget::paused(session),
        })
    }

    /// The ending of a run the session's approvals interrupt: every call waiting now, plus `requested` (a call
    /// whose request this run just saw, which may not be listed yet).
    pub(crate) fn interrupted(&self, requested: Option<Value>) -> End {
        let mut interrupts = Vec::new();
        let mut ids = Vec::new();
        for (id, p) in waiting(&self.state, &self.session) {
            interrupts.push(interrupt(&id, &p.call_id, &p.tool, &p.arguments, &p.arguments_sha256, Some(p.expires_at)));
            ids.push(id);
        }
        if let Some(requested) = requested.filter(|r| !ids.iter().any(|id| r["id"] == id.as_str())) {
            ids.push(requested["id"].as_str().unwrap_or_default().to_owned());
            interrupts.push(requested);
        }
        for id in &ids {
            self.state.threads.issue(&self.thread_id, id);
        }
        End::Finished(Some(json!({ "type": "interrupt", "interrupts": interrupts })))
    }

    /// Streams the session's events after `follower`'s position until the run ends; `replayed_to` is the newest
    /// event that was in the log before this run began (an approval request up to it that waits no more was
    /// decided already, and interrupts nothing).
    pub(crate) async fn follow(&self, mut follower: EventFollower, replayed_to: u64, tx: &Tx) -> End {
        let key = self.session.key().to_owned();
        // The turns this run streams: the one running here now and those continuing it, not a turn a later message
        // starts after them.
        let chain = self.state.running.chain(&key);
        let mut translator = Translator::default();
        // The end of the last turn, while a turn continuing it may still start (an idle session's is past; the
        // events before it that the follower holds still come first).
        let mut ended: Option<End> = (!self.session.is_busy()).then_some(End::Finished(None));
        // The newest event handed out: a turn that ended before the run began following it ends the run only once
        // its events (read back from the session's log, which takes a moment) have been streamed.
        let mut seen = replayed_to;
        loop {
            let caught_up = seen >= self.session.last_event_seq();
            let next = tokio::select! {
                biased;
                () = self.state.shutdown.cancelled() => {
                    return End::Error("shutting_down".into(), "the server is shutting down; run again on another worker".into());
                }
                () = tx.closed() => return End::Gone,
                next = follower.next() => next,
                () = self.state.running.released(&key, chain), if ended.is_some() && caught_up => {
                    return ended.unwrap_or(End::Finished(None));
                }
                // Events the follower never hands out (the log no longer holds them) do not hold the run open.
                () = tokio::time::sleep(CATCH_UP_LIMIT), if ended.is_some() && !caught_up => {
                    return ended.unwrap_or(End::Finished(None));
                }
            };
            let event = match next {
                Some(Followed::Event(event)) => event,
                Some(Followed::Gap { from, to }) => {
                    seen = seen.max(to);
                    let gap = custom("events_missed", SystemTime::now(), json!({ "from": from, "to": to }));
                    if tx.send(gap).await.is_err() {
                        return End::Gone;
                    }
                    continue;
                }
                None => return ended.unwrap_or(End::Error("events_ended".into(), "the session's events ended".into())),
            };
            if ended.is_some()
                && matches!(event.kind, EventKind::TurnStarted { .. })
                && self.state.running.chain(&key) != chain
            {
                return ended.unwrap_or(End::Finished(None));
            }
            seen = seen.max(event.seq);
            self.state.threads.advance(&self.thread_id, event.seq);
            let history = || last_answer(&self.session.history());
            for out in translator.translate(&event, &history) {
                if tx.send(out).await.is_err() {
                    return End::Gone;
                }
            }
            let mut changed = false;
            match &event.kind {
                EventKind::TurnStarted { .. } => {
                    ended = None;
                    changed = true;
                }
                EventKind::TurnCompleted { .. } => ended = Some(End::Finished(None)),
                EventKind::TurnFailed { error, .. } if error.is_cancelled() => {
                    ended = Some(End::Finished(Some(json!({ "type": "cancelled" }))));
                }
                EventKind::TurnFailed { error, .. } => {
                    ended = Some(End::Error(error.kind().to_owned(), error.to_string()));
                }
                EventKind::ApprovalRequested { call_id, tool, arguments, arguments_sha256 } => {
                    let turn = event.turn.unwrap_or_else(|| self.session.turns());
                    let id = interrupt_id(turn, call_id, arguments_sha256);
                    let waits = waiting(&self.state, &self.session).iter().any(|(w, _)| *w == id);
                    // A live request not listed yet is about to be: the approver lists it right after the event.
                    if waits || event.seq > replayed_to {
                        let requested = interrupt(&id, call_id, tool, arguments, arguments_sha256, None);
                        return self.interrupted(Some(requested));
                    }
                }
                EventKind::SteeringQueued { .. }
                | EventKind::SteeringInjected { .. }
                | EventKind::ApprovalDecided { .. } => changed = true,
                _ => {}
            }
            if changed
                && let Some(update) = self.state_update().await
                && tx.send(update).await.is_err()
            {
                return End::Gone;
            }
        }
    }
}

/// The text of the model's last answer when it is the newest message of the history (its tool calls may follow
/// it); `None` when the last answer had no text.
fn last_answer(history: &[Item]) -> Option<String> {
    for item in history.iter().rev() {
        match item {
            Item::ToolCall(_) => continue,
            Item::Message { role: Role::Assistant, content } => return Some(content.clone()),
            _ => return None,
        }
    }
    None
}
