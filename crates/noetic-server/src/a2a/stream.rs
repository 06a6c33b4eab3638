//! A task's updates as A2A `StreamResponse`s, from the session's events: the model's text as artifact chunks (one
//! artifact per model call), tool calls, tool progress, skipped calls, approval decisions and steering as
//! `working` status updates whose `metadata.noetic` says what happened, and the status that ends the stream:
//! `input-required` when a call waits for approval, or `completed`, `failed` or `canceled` when the turn ends.

use std::sync::Arc;

use noetic::agent::Session;
use noetic::context::{EventFollower, EventKind, Followed};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::task::{self, State, TaskId, View};
use crate::AppState;
use crate::approvals::PendingApproval;

/// Where a streamed task's updates go (the `result` of each event); a send fails when the client went away.
pub(crate) type Tx = mpsc::Sender<Value>;

/// A task being followed.
pub(crate) struct Follow {
    pub(crate) state: Arc<AppState>,
    pub(crate) session: Session,
    pub(crate) id: TaskId,
}

impl Follow {
    fn status_update(&self, status: Value, metadata: Option<Value>) -> Value {
        let mut update = json!({ "taskId": self.id.to_string(), "contextId": self.id.key, "status": status });
        if let (Some(metadata), Value::Object(fields)) = (metadata, &mut update) {
            fields.insert("metadata".into(), json!({ "noetic": metadata }));
        }
        json!({ "statusUpdate": update })
    }

    /// A `working` status update that says what happened.
    fn working(&self, what: Value) -> Value {
        let status =
            json!({ "state": State::Working.wire(), "timestamp": noetic::time::rfc3339(std::time::SystemTime::now()) });
        self.status_update(status, Some(what))
    }

    fn artifact(&self, round: u32, text: &str, append: bool) -> Value {
        json!({ "artifactUpdate": {
            "taskId": self.id.to_string(),
            "contextId": self.id.key,
            "artifact": { "artifactId": format!("response-{round}"), "parts": [{ "text": text }] },
            "append": append,
        }})
    }

    /// The view of the task now, as it ends a stream (a task that vanished reads as completed).
    async fn ended(&self) -> View {
        task::view(&self.state, &self.session, self.id.turn).await.unwrap_or(View {
            id: self.id.clone(),
            state: State::Completed,
            note: None,
            waiting: Vec::new(),
            answer: None,
        })
    }

    /// Follows the task's events from `follower` until it waits for input or ends, sending its updates to `tx`
    /// (none when `None`), the last one its final status; returns its view then, or `None` when the client went
    /// away or the server is shutting down. `replayed_to` is the newest event that was in the log before the
    /// follower began (an approval request up to it that waits no more was decided already).
    pub(crate) async fn run(&self, mut follower: EventFollower, replayed_to: u64, tx: Option<&Tx>) -> Option<View> {
        let send = |value: Value| async move {
            match tx {
                Some(tx) => tx.send(value).await.is_ok(),
                None => true,
            }
        };
        let mut round = 0u32;
        let mut streamed = false;
        // A model call ended without streaming text: its text is read from the history at the next event.
        let mut unstreamed = false;
        loop {
            let next = tokio::select! {
                biased;
                () = self.state.shutdown.cancelled() => return None,
                () = async { if let Some(tx) = tx { tx.closed().await } else { std::future::pending().await } } => return None,
                next = follower.next() => next,
            };
            let event = match next {
                Some(Followed::Event(event)) => event,
                Some(Followed::Gap { .. }) => continue,
                None => return Some(self.ended().await),
            };
            if event.turn.is_some_and(|t| t != self.id.turn) {
                if event.turn.is_some_and(|t| t > self.id.turn) {
                    return Some(self.finish(tx).await);
                }
                continue;
            }
            if std::mem::take(&mut unstreamed)
                && let Some(text) = task::last_answer(&self.session.history())
                && !send(self.artifact(round, &text, false)).await
            {
                return None;
            }
            let update = match &event.kind {
                EventKind::ModelCallStarted { .. } => {
                    round += 1;
                    streamed = false;
                    None
                }
                EventKind::ModelTextDelta { text, .. } => {
                    let update = self.artifact(round, text, streamed);
                    streamed = true;
                    Some(update)
                }
                EventKind::ModelCallCompleted { .. } => {
                    unstreamed = !streamed;
                    None
                }
                EventKind::ToolCallStarted { call_id, tool, arguments, .. } => Some(self.working(json!({
                    "event": "tool_call_started", "callId": call_id, "tool": tool, "arguments": arguments,
                }))),
                EventKind::ToolCallCompleted { call_id, tool, is_error, output, .. } => Some(self.working(json!({
                    "event": "tool_call_completed", "callId": call_id, "tool": tool, "isError": is_error, "output": output,
                }))),
                EventKind::ToolProgress { call_id, tool, data } => Some(self.working(json!({
                    "event": "tool_progress", "callId": call_id, "tool": tool, "data": data,
                }))),
                EventKind::ToolSkipped { call_id, tool, reason, .. } => Some(self.working(json!({
                    "event": "tool_skipped", "callId": call_id, "tool": tool, "reason": reason,
                }))),
                EventKind::SteeringQueued { id, .. } => {
                    Some(self.working(json!({ "event": "steering_queued", "messageId": id })))
                }
                EventKind::SteeringInjected { count, .. } => {
                    Some(self.working(json!({ "event": "steering_injected", "count": count })))
                }
                EventKind::ApprovalDecided { call_id, tool, approved, reason, .. } => Some(self.working(json!({
                    "event": "approval_decided", "callId": call_id, "tool": tool, "approved": approved, "reason": reason,
                }))),
                EventKind::ApprovalRequested { call_id, .. } => {
                    let waiting = self.state.approvals.pending(Some(self.session.key()));
                    if waiting.iter().any(|p| *p.call_id == **call_id) || event.seq > replayed_to {
                        return Some(self.input_required(tx, &event).await);
                    }
                    None
                }
                EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => {
                    // The event says how the turn ended: the session may still be busy writing that end.
                    return Some(match task::ended_by(&event.kind, self.id.turn) {
                        Some((state, note)) => self.finish_as(tx, state, note).await,
                        None => self.finish(tx).await,
                    });
                }
                _ => None,
            };
            if let Some(update) = update
                && !send(update).await
            {
                return None;
            }
        }
    }

    /// The final status of an ended task.
    /// The task's end as its turn's last event says it, sent as the final status.
    async fn finish_as(&self, tx: Option<&Tx>, state: State, note: Option<String>) -> View {
        let answer = (state == State::Completed).then(|| task::last_answer(&self.session.history())).flatten();
        let view = View { id: self.id.clone(), state, note, waiting: Vec::new(), answer };
        if let Some(tx) = tx {
            let _ = tx.send(self.status_update(view.status(), None)).await;
        }
        view
    }

    async fn finish(&self, tx: Option<&Tx>) -> View {
        let view = self.ended().await;
        if let Some(tx) = tx {
            let _ = tx.send(self.status_update(view.status(), None)).await;
        }
        view
    }

    /// The `input-required` status: the calls waiting now, and the one whose request `event` announced (the
    /// approver lists it right after the event, so it may not be listed yet).
    async fn input_required(&self, tx: Option<&Tx>, event: &noetic::context::Event) -> View {
        let mut view = self.ended().await;
        if let EventKind::ApprovalRequested { call_id, tool, arguments, arguments_sha256 } = &event.kind
            && !view.waiting.iter().any(|p| *p.call_id == **call_id)
        {
            view.waiting.push(PendingApproval {
                call_id: call_id.to_string(),
                session: Some(self.id.key.clone()),
                tool: tool.to_string(),
                arguments: arguments.clone(),
                arguments_sha256: arguments_sha256.clone(),
                requested_at: event.at,
                expires_at: event.at + self.state.approvals.timeout(),
                preview: None,
            });
            view.state = State::InputRequired;
            view.answer = None;
            view.note = Some(task::approval_note(&view.waiting));
        }
        if let Some(tx) = tx {
            let _ = tx.send(self.status_update(view.status(), None)).await;
        }
        view
    }
}
