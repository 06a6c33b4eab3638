//! AG-UI's `RunAgentInput`, as far as this server reads it: the thread, the run, the new user messages at the end
//! of `messages`, and the `resume` entries that answer interrupts. Tools, context, state and forwarded props are
//! accepted and ignored (the agent's tools are the server's; its state is the session).

use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// The parts of a `RunAgentInput` the server acts on (its other fields, `state` and `forwardedProps`, are
/// accepted and ignored).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = RunRequest)]
pub(crate) struct RunInput {
    /// The session key.
    #[schema(pattern = r"^(?!\.+$)[A-Za-z0-9._-]{1,128}$")]
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    /// The conversation the client holds: the user messages at the end not taken before are the new input.
    pub(crate) messages: Vec<Message>,
    /// Answers to the thread's open interrupts.
    #[serde(default)]
    pub(crate) resume: Vec<ResumeEntry>,
    /// Ignored: the agent's tools are the server's.
    #[serde(default)]
    #[allow(dead_code)]
    #[schema(value_type = Vec<Object>)]
    tools: Vec<Value>,
    /// Ignored.
    #[serde(default)]
    #[allow(dead_code)]
    #[schema(value_type = Vec<Object>)]
    context: Vec<Value>,
}

/// One message of the conversation the client holds.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = RunMessage)]
pub(crate) struct Message {
    pub(crate) id: String,
    /// `user`, `assistant`, `tool`, …: only user messages are taken.
    pub(crate) role: String,
    /// Text, or AG-UI's content parts.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub(crate) content: Option<Value>,
}

/// An answer to one interrupt.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeEntry {
    pub(crate) interrupt_id: String,
    pub(crate) status: ResumeStatus,
    /// For an approval: `{"approved": bool, "reason"?: string}`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub(crate) payload: Option<Value>,
}

/// Whether an interrupt was answered or abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// What a resume entry decides on an approval interrupt: approve, or reject with a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Approve,
    Reject(String),
}

/// The answer schema every approval interrupt carries (`Interrupt.responseSchema`).
pub(crate) fn answer_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "approved": { "type": "boolean", "description": "true runs the call; false rejects it" },
            "reason": { "type": "string", "description": "why it was rejected (shown to the model)" }
        },
        "required": ["approved"]
    })
}

impl RunInput {
    /// Reads a `RunAgentInput` from its JSON.
    pub(crate) fn parse(body: Value) -> Result<RunInput, ApiError> {
        serde_json::from_value(body).map_err(|e| {
            ApiError::bad_request(
                "invalid_run_input",
                format!("the body is not an AG-UI RunAgentInput ({e}); send threadId, runId and messages"),
            )
        })
    }

    /// The new user messages: those at the end of `messages` (after the last message of another role) that the
    /// thread has not accepted before (`seen`), as `(id, text)`. Earlier messages are already in the session,
    /// which keeps the conversation.
    pub(crate) fn new_user_texts(
        &self,
        seen: impl Fn(&str) -> bool,
        max_chars: usize,
    ) -> Result<Vec<(String, String)>, ApiError> {
        let trailing = self.messages.iter().rev().take_while(|m| m.role == "user").collect::<Vec<_>>();
        let mut texts = Vec::new();
        for message in trailing.into_iter().rev().filter(|m| !seen(&m.id)) {
            let text = text_of(message)?;
            if text.chars().count() > max_chars {
                return Err(ApiError::new(
                    axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                    "message_too_long",
                    format!("a message may have at most {max_chars} characters; send a shorter one"),
                ));
            }
            if text.trim().is_empty() {
                return Err(ApiError::bad_request("empty_message", "the user message is empty; send some text"));
            }
            texts.push((message.id.clone(), text));
        }
        Ok(texts)
    }
}

/// The text of a user message: its string content, or its text parts joined (other parts are refused: the agent
/// takes text only).
fn text_of(message: &Message) -> Result<String, ApiError> {
    match &message.content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::bad_request(
                            "unsupported_content",
                            format!(
                                "message '{}' has a {} part; this agent takes text only: send the text as a string",
                                message.id,
                                kind.unwrap_or("untyped")
                            ),
                        ));
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::bad_request(
            "empty_message",
            format!("user message '{}' has no content; send its text as a string", message.id),
        )),
    }
}

impl ResumeEntry {
    /// The decision this entry gives: `cancelled` rejects; `resolved` needs a payload `{"approved": bool,
    /// "reason"?: string}`.
    pub(crate) fn answer(&self) -> Result<Answer, ApiError> {
        if self.status == ResumeStatus::Cancelled {
            return Ok(Answer::Reject("the person cancelled the approval".into()));
        }
        let approved = self.payload.as_ref().and_then(|p| p.get("approved")).and_then(Value::as_bool);
        match approved {
            Some(true) => Ok(Answer::Approve),
            Some(false) => {
                let reason = self.payload.as_ref().and_then(|p| p.get("reason")).and_then(Value::as_str);
                let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or("rejected by the user");
                Ok(Answer::Reject(reason.to_owned()))
            }
            None => Err(ApiError::bad_request(
                "invalid_resume",
                format!(
                    "the resume entry for interrupt '{}' needs a payload {{\"approved\": true|false, \"reason\"?: \
                     \"…\"}} (or status \"cancelled\")",
                    self.interrupt_id
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(messages: Value) -> RunInput {
        let parsed = RunInput::parse(json!({"threadId": "t", "runId": "r", "messages": messages}));
        parsed.unwrap_or_else(|e| unreachable!("{}", e.message()))
    }

    #[test]
    fn only_the_trailing_user_messages_not_seen_before_are_new() {
        let run = input(json!([
            {"id": "u1", "role": "user", "content": "first"},
            {"id": "a1", "role": "assistant", "content": "answer"},
            {"id": "u2", "role": "user", "content": "second"},
            {"id": "u3", "role": "user", "content": [{"type": "text", "text": "third"}]},
        ]));
        let texts = run.new_user_texts(|id| id == "u2", 100).unwrap_or_default();
        assert_eq!(texts, vec![("u3".to_owned(), "third".to_owned())]);
    }

    #[test]
    fn a_media_part_or_an_overlong_message_is_refused_with_its_code() {
        let media = input(json!([{"id": "u", "role": "user", "content": [{"type": "image", "source": {}}]}]));
        assert_eq!(media.new_user_texts(|_| false, 100).map_err(|e| e.code()).err(), Some("unsupported_content"));
        let long = input(json!([{"id": "u", "role": "user", "content": "abcdef"}]));
        assert_eq!(long.new_user_texts(|_| false, 5).map_err(|e| e.code()).err(), Some("message_too_long"));
    }

    #[test]
    fn a_resume_entry_approves_rejects_or_says_what_payload_it_needs() {
        let entry = |status: &str, payload: Value| ResumeEntry {
            interrupt_id: "i".into(),
            status: if status == "cancelled" { ResumeStatus::Cancelled } else { ResumeStatus::Resolved },
            payload: Some(payload),
        };
        assert_eq!(entry("resolved", json!({"approved": true})).answer().ok(), Some(Answer::Approve));
        assert_eq!(
            entry("resolved", json!({"approved": false, "reason": "not now"})).answer().ok(),
            Some(Answer::Reject("not now".into()))
        );
        assert!(matches!(entry("cancelled", json!(null)).answer(), Ok(Answer::Reject(_))));
        assert_eq!(entry("resolved", json!("yes")).answer().map_err(|e| e.code()).err(), Some("invalid_resume"));
    }
}
