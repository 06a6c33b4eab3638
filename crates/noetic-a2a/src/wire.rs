//! A2A 1.0's JSON-RPC wire as pure functions: the agent card read, request bodies written, results and stream
//! events read. No sockets here.

use serde_json::{Value, json};

use crate::A2aError;

/// A skill the card lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Example requests.
    pub examples: Vec<String>,
}

/// What this client needs of an agent card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its JSON-RPC endpoint.
    pub endpoint: String,
    /// Whether it streams (`SendStreamingMessage`).
    pub streaming: bool,
    /// Its skills.
    pub skills: Vec<Skill>,
}

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Reads a card fetched from `card_url`: its JSON-RPC interface of protocol 1.0 is the endpoint.
pub fn parse_card(card: &Value, card_url: &str) -> Result<Card, A2aError> {
    let interfaces = card.get("supportedInterfaces").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let jsonrpc = |i: &&Value| {
        i.get("protocolBinding").and_then(Value::as_str).is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
    };
    let endpoint = interfaces
        .iter()
        .filter(jsonrpc)
        .find(|i| i.get("protocolVersion").and_then(Value::as_str).is_some_and(|v| v.starts_with("1.")))
        .and_then(|i| i.get("url").and_then(Value::as_str))
        .ok_or_else(|| A2aError::Card {
            url: card_url.to_owned(),
            reason: "it lists no JSONRPC interface of protocol 1.x in supportedInterfaces (this client speaks A2A 1.0 \
                     over JSON-RPC)"
                .to_owned(),
        })?;
    let skills = card
        .get("skills")
        .and_then(Value::as_array)
        .map(|skills| {
            skills
                .iter()
                .map(|s| Skill {
                    id: text(s, "id"),
                    name: text(s, "name"),
                    description: text(s, "description"),
                    examples: s
                        .get("examples")
                        .and_then(Value::as_array)
                        .map(|e| e.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                        .unwrap_or_default(),
                })
                .filter(|s| !s.id.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Ok(Card {
        name: text(card, "name"),
        description: text(card, "description"),
        endpoint: endpoint.to_owned(),
        streaming: card.pointer("/capabilities/streaming").and_then(Value::as_bool).unwrap_or(false),
        skills,
    })
}

/// A `SendMessage` / `SendStreamingMessage` request: `text` to the agent, as a reply to `task_id` when given,
/// with the skill named in the message's metadata.
pub fn send_request(id: u64, streaming: bool, text: &str, task_id: Option<&str>, skill: Option<&str>) -> Value {
    let mut message = json!({
        "messageId": uuid::Uuid::now_v7().to_string(),
        "role": "ROLE_USER",
        "parts": [{ "text": text }],
    });
    if let Value::Object(fields) = &mut message {
        if let Some(task) = task_id {
            fields.insert("taskId".into(), task.into());
        }
        if let Some(skill) = skill {
            fields.insert("metadata".into(), json!({ "skillId": skill }));
        }
    }
    let method = if streaming { "SendStreamingMessage" } else { "SendMessage" };
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": { "message": message } })
}

/// A `CancelTask` request.
pub fn cancel_request(id: u64, task_id: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "CancelTask", "params": { "id": task_id } })
}

/// The `result` of a JSON-RPC answer, or the agent's error.
pub fn rpc_result(envelope: Value) -> Result<Value, A2aError> {
    if let Some(error) = envelope.get("error") {
        return Err(A2aError::Remote {
            code: error.get("code").and_then(Value::as_i64).unwrap_or_default(),
            message: text(error, "message"),
        });
    }
    envelope
        .get("result")
        .cloned()
        .ok_or_else(|| A2aError::Protocol("a JSON-RPC answer without result or error".into()))
}

/// Where a task stands, as the agent says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Submitted or working.
    Working,
    /// The agent asks for input (or authentication) before it goes on.
    InputRequired,
    /// Done.
    Completed,
    /// Failed or rejected.
    Failed,
    /// Canceled.
    Canceled,
}

impl TaskState {
    fn parse(state: &str) -> TaskState {
        match state {
            "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => TaskState::InputRequired,
            "TASK_STATE_COMPLETED" => TaskState::Completed,
            "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" => TaskState::Failed,
            "TASK_STATE_CANCELED" => TaskState::Canceled,
            _ => TaskState::Working,
        }
    }

    /// The task will not go on without the caller (it ended, or waits for input).
    pub fn stops(self) -> bool {
        self != TaskState::Working
    }

    /// As a word for the model.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
        }
    }
}

/// One thing the agent sent: a `StreamResponse` (or a `SendMessage` result, which is one too).
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// The task as it is.
    Task {
        /// Its id.
        id: String,
        /// Its state.
        state: TaskState,
        /// Its status message's text.
        says: String,
        /// Its artifacts' text.
        artifacts: String,
    },
    /// The task's status changed (or a working step was reported, in `metadata`).
    Status {
        /// The task's id.
        id: String,
        /// Its state.
        state: TaskState,
        /// The status message's text.
        says: String,
        /// What the agent added (our own servers say there which step it was).
        metadata: Option<Value>,
    },
    /// A chunk of an artifact.
    Artifact {
        /// Which artifact.
        artifact_id: String,
        /// The chunk's text.
        text: String,
        /// Whether it extends what came before of the artifact (else it replaces it).
        append: bool,
    },
    /// A direct answer, no task.
    Message {
        /// Its text.
        text: String,
    },
}

/// The text parts of a message or artifact, joined.
fn parts_text(holder: Option<&Value>) -> String {
    let parts = holder.and_then(|h| h.get("parts")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
}

fn state_of(status: Option<&Value>) -> TaskState {
    TaskState::parse(status.and_then(|s| s.get("state")).and_then(Value::as_str).unwrap_or_default())
}

/// Reads one result; `None` for one this client has no use for.
pub fn parse_update(result: &Value) -> Option<Update> {
    if let Some(task) = result.get("task") {
        let status = task.get("status");
        let artifacts = task.get("artifacts").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        return Some(Update::Task {
            id: text(task, "id"),
            state: state_of(status),
            says: parts_text(status.and_then(|s| s.get("message"))),
            artifacts: artifacts.iter().map(|a| parts_text(Some(a))).collect::<Vec<_>>().join("\n"),
        });
    }
    if let Some(update) = result.get("statusUpdate") {
        let status = update.get("status");
        return Some(Update::Status {
            id: text(update, "taskId"),
            state: state_of(status),
            says: parts_text(status.and_then(|s| s.get("message"))),
            metadata: update.get("metadata").cloned(),
        });
    }
    if let Some(update) = result.get("artifactUpdate") {
        let artifact = update.get("artifact");
        return Some(Update::Artifact {
            artifact_id: artifact.map(|a| text(a, "artifactId")).unwrap_or_default(),
            text: parts_text(artifact),
            append: update.get("append").and_then(Value::as_bool).unwrap_or(false),
        });
    }
    result.get("message").map(|m| Update::Message { text: parts_text(Some(m)) })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_card_gives_its_jsonrpc_1_0_endpoint_and_skills_and_one_without_is_refused_saying_why() {
        let card = json!({
            "name": "helper", "description": "helps",
            "supportedInterfaces": [
                { "url": "http://h/v03", "protocolBinding": "JSONRPC", "protocolVersion": "0.3" },
                { "url": "http://h/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0" },
                { "url": "http://h/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" },
            ],
            "capabilities": { "streaming": true },
            "skills": [{ "id": "echo", "name": "Echo", "description": "says it back", "examples": ["hi"] }],
        });
        let parsed = parse_card(&card, "http://h/.well-known/agent-card.json").unwrap();
        assert_eq!(parsed.endpoint, "http://h/a2a");
        assert!(parsed.streaming);
        assert_eq!(parsed.skills[0].examples, ["hi"]);
        let old = json!({ "name": "old", "url": "http://h/", "skills": [] });
        let refused = parse_card(&old, "http://h/card").unwrap_err().to_string();
        assert!(refused.contains("no JSONRPC interface of protocol 1.x"), "{refused}");
    }

    #[test]
    fn stream_results_read_as_task_status_artifact_and_message_updates() {
        let task = json!({ "task": { "id": "t", "status": { "state": "TASK_STATE_INPUT_REQUIRED",
            "message": { "parts": [{ "text": "which file?" }] } } } });
        assert_eq!(
            parse_update(&task),
            Some(Update::Task {
                id: "t".into(),
                state: TaskState::InputRequired,
                says: "which file?".into(),
                artifacts: String::new()
            })
        );
        let chunk = json!({ "artifactUpdate": { "artifact": { "artifactId": "a", "parts": [{ "text": "par" }, { "text": "t" }] }, "append": true } });
        assert_eq!(
            parse_update(&chunk),
            Some(Update::Artifact { artifact_id: "a".into(), text: "part".into(), append: true })
        );
        let status = json!({ "statusUpdate": { "taskId": "t", "status": { "state": "TASK_STATE_REJECTED" } } });
        assert!(matches!(parse_update(&status), Some(Update::Status { state: TaskState::Failed, .. })));
        let error = json!({ "jsonrpc": "2.0", "id": 1, "error": { "code": -32001, "message": "no task" } });
        assert_eq!(rpc_result(error).unwrap_err().to_string(), "the agent answered error -32001: no task");
    }
}
