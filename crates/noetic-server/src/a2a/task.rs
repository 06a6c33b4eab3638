//! A2A tasks as session turns: a task's id is its session key and turn number (`KEY:TURN`), its context id is the
//! session key, and its state is read from the session — whether the turn runs, the calls it waits on, and how it
//! ended in the session's events — so nothing about tasks is kept beside the session, and a task is found again
//! wherever the session is (after a restart, on another worker).

use std::time::{Duration, SystemTime};

use noetic::agent::Session;
use noetic::context::{EventKind, Followed};
use noetic::model::{Item, Role};
use serde_json::{Value, json};

use crate::AppState;
use crate::approvals::PendingApproval;

/// What a task id names: a turn of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskId {
    pub(crate) key: String,
    pub(crate) turn: u64,
}

impl TaskId {
    /// `KEY:TURN` (a session key never holds a `:`).
    pub(crate) fn parse(id: &str) -> Option<TaskId> {
        let (key, turn) = id.rsplit_once(':')?;
        let turn = turn.parse().ok().filter(|t| *t > 0)?;
        crate::open::check_key(key).ok()?;
        Some(TaskId { key: key.to_owned(), turn })
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.key, self.turn)
    }
}

/// A task's state, as A2A names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// A message queued on a session paused over its budget: the turn it starts once the limit is raised.
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl State {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// Completed, failed or canceled: nothing more happens to the task.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Failed | State::Canceled)
    }
}

/// What the session says of one task now.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) id: TaskId,
    pub(crate) state: State,
    /// The agent's words for the status: the error of a failed task, what an input-required task waits for.
    pub(crate) note: Option<String>,
    /// The calls an input-required task waits on.
    pub(crate) waiting: Vec<PendingApproval>,
    /// The turn's answer, when known (the session's last turn, ended).
    pub(crate) answer: Option<String>,
}

/// The longest a task's state is looked for in the session's events (they are in memory or in its log).
const SCAN_LIMIT: Duration = Duration::from_secs(10);

/// How `turn` of `session` stands; `None` when the session never started it.
pub(crate) async fn view(state: &AppState, session: &Session, turn: u64) -> Option<View> {
    let id = TaskId { key: session.key().to_owned(), turn };
    if turn == session.turns() + 1
        && !session.queued_messages().is_empty()
        && let Some(reached) = session.budget().paused
    {
        let note = Some(paused_note(session.key(), &reached));
        return Some(View { id, state: State::Submitted, note, waiting: Vec::new(), answer: None });
    }
    if turn == 0 || turn > session.turns() {
        return None;
    }
    if turn == session.turns() && session.is_busy() {
        // A turn that said it ended is still busy while it writes its end to the session's log.
        if let Some((ended, note)) = ending(session, turn).await {
            let answer = (ended == State::Completed).then(|| last_answer(&session.history())).flatten();
            return Some(View { id, state: ended, note, waiting: Vec::new(), answer });
        }
        let waiting = state.approvals.pending(Some(session.key()));
        if waiting.is_empty() {
            return Some(View { id, state: State::Working, note: None, waiting, answer: None });
        }
        let note = Some(approval_note(&waiting));
        return Some(View { id, state: State::InputRequired, note, waiting, answer: None });
    }
    if turn == session.turns() && session.unfinished_turn().is_some() {
        // A turn a stopped process left: it goes on when a worker resumes it (the server's takeover does).
        return Some(View { id, state: State::Working, note: None, waiting: Vec::new(), answer: None });
    }
    let (ended, note) = ending(session, turn).await.unwrap_or((State::Completed, None));
    let answer = (turn == session.turns() && ended == State::Completed).then(|| last_answer(&session.history()));
    Some(View { id, state: ended, note, waiting: Vec::new(), answer: answer.flatten() })
}

/// How `turn` ended, if `kind` is the event that says so.
pub(crate) fn ended_by(kind: &EventKind, turn: u64) -> Option<(State, Option<String>)> {
    match kind {
        EventKind::TurnCompleted { turn: t, .. } if *t == turn => Some((State::Completed, None)),
        EventKind::TurnFailed { turn: t, error, .. } if *t == turn => {
            let state = if error.is_cancelled() { State::Canceled } else { State::Failed };
            Some((state, Some(error.to_string())))
        }
        _ => None,
    }
}

/// How `turn` ended, from the session's events (`None` when they no longer say).
async fn ending(session: &Session, turn: u64) -> Option<(State, Option<String>)> {
    let newest = session.last_event_seq();
    if newest == 0 {
        return None;
    }
    let mut follower = session.follow(0);
    let scan = async {
        let mut found = None;
        while let Some(next) = follower.next().await {
            let seq = match next {
                Followed::Event(event) => {
                    if let Some(ended) = ended_by(&event.kind, turn) {
                        found = Some(ended);
                    }
                    event.seq
                }
                Followed::Gap { to, .. } => to,
            };
            if seq >= newest {
                break;
            }
        }
        found
    };
    tokio::time::timeout(SCAN_LIMIT, scan).await.ok().flatten()
}

/// The text of the model's last answer in `history`.
pub(crate) fn last_answer(history: &[Item]) -> Option<String> {
    history.iter().rev().find_map(|item| match item {
        Item::Message { role: Role::Assistant, content } if !content.is_empty() => Some(content.clone()),
        _ => None,
    })
}

/// What a task queued on a session paused over its budget says: why it waits and how it continues.
pub(crate) fn paused_note(key: &str, reached: &noetic::budget::BudgetReached) -> String {
    format!(
        "The session is paused over its budget ({reached}). The message was queued: it runs as this task once a          person raises the limit (PUT /api/sessions/{key}/budget on this server, Raise on its page, or /budget in          noetic chat). GetTask or SubscribeToTask follows it."
    )
}

/// What an input-required task asks of the client.
pub(crate) fn approval_note(waiting: &[PendingApproval]) -> String {
    let calls: Vec<String> = waiting.iter().map(|p| format!("{} with {}", p.tool, p.arguments)).collect();
    format!(
        "The agent wants to call {}. Reply to this task with 'approve' or 'reject: <why>' (or a data part \
         {{\"approved\": true|false, \"reason\"?: \"…\"}}).",
        calls.join(" and ")
    )
}

/// An agent message of the task, with `text` and, when given, a data part.
pub(crate) fn agent_message(id: &TaskId, message_id: &str, text: &str, data: Option<Value>) -> Value {
    let mut parts = vec![json!({ "text": text })];
    if let Some(data) = data {
        parts.push(json!({ "data": data, "mediaType": "application/json" }));
    }
    json!({
        "messageId": message_id,
        "contextId": id.key,
        "taskId": id.to_string(),
        "role": "ROLE_AGENT",
        "parts": parts,
    })
}

/// The data part of an input-required status: the calls waiting, to answer by call id if wanted.
pub(crate) fn waiting_data(waiting: &[PendingApproval]) -> Value {
    let calls: Vec<Value> = waiting
        .iter()
        .map(|p| {
            json!({
                "callId": p.call_id,
                "tool": p.tool,
                "arguments": p.arguments,
                "argumentsSha256": p.arguments_sha256,
                "expiresAt": noetic::time::rfc3339(p.expires_at),
            })
        })
        .collect();
    json!({ "approvals": calls })
}

impl View {
    /// The task's `TaskStatus`.
    pub(crate) fn status(&self) -> Value {
        let mut status = json!({ "state": self.state.wire(), "timestamp": noetic::time::rfc3339(SystemTime::now()) });
        let message = match (&self.note, self.state) {
            (Some(note), State::InputRequired) => {
                Some(agent_message(&self.id, &format!("{}.input", self.id), note, Some(waiting_data(&self.waiting))))
            }
            (Some(note), _) => Some(agent_message(&self.id, &format!("{}.status", self.id), note, None)),
            (None, State::Completed) => {
                self.answer.as_deref().map(|a| agent_message(&self.id, &format!("{}.answer", self.id), a, None))
            }
            _ => None,
        };
        if let (Some(message), Value::Object(fields)) = (message, &mut status) {
            fields.insert("message".into(), message);
        }
        status
    }

    /// The `Task` object; `extra` goes into its metadata (under `noetic`).
    pub(crate) fn task(&self, extra: Option<Value>) -> Value {
        let mut task = json!({ "id": self.id.to_string(), "contextId": self.id.key, "status": self.status() });
        let Value::Object(fields) = &mut task else { return task };
        if let Some(answer) = &self.answer {
            fields.insert(
                "artifacts".into(),
                json!([{ "artifactId": "answer", "name": "answer", "parts": [{ "text": answer }] }]),
            );
        }
        if let Some(extra) = extra {
            fields.insert("metadata".into(), json!({ "noetic": extra }));
        }
        task
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_is_the_session_key_and_the_turn_number_and_nothing_else_parses() {
        let id = TaskId::parse("thread.1-a:12");
        assert_eq!(id, Some(TaskId { key: "thread.1-a".into(), turn: 12 }));
        assert_eq!(id.map(|i| i.to_string()).as_deref(), Some("thread.1-a:12"));
        for bad in ["thread", "thread:0", "thread:x", ":3", "a b:3", "..:1"] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
    }
}
