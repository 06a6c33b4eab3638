//! A session's events as AG-UI events: the model's text as `TEXT_MESSAGE_START` / `CONTENT` / `END` (one message
//! per model call that wrote text), each tool call as `TOOL_CALL_START` / `ARGS` / `END` when it starts and
//! `TOOL_CALL_RESULT` when it ends, and what AG-UI has no event for — steering decisions, queued and injected
//! steering messages, skipped calls, approval decisions, tool progress — as `CUSTOM` events named `noetic.*`.
//! Turn boundaries and approvals end runs; [`super::stream`] handles them.

use std::time::{SystemTime, UNIX_EPOCH};

use noetic::context::{Event, EventKind};
use serde_json::{Map, Value, json};

/// The prefix of the names of the `CUSTOM` events this server sends.
pub(crate) const CUSTOM_PREFIX: &str = "noetic.";

/// Milliseconds since the Unix epoch (AG-UI's `timestamp`).
pub(crate) fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An AG-UI event of `kind` at `at` with `fields`.
pub(crate) fn agui_event(kind: &str, at: SystemTime, fields: Value) -> Value {
    let mut event = Map::new();
    event.insert("type".into(), Value::String(kind.to_owned()));
    event.insert("timestamp".into(), millis(at).into());
    if let Value::Object(fields) = fields {
        event.extend(fields);
    }
    Value::Object(event)
}

/// A `CUSTOM` event `noetic.<name>` carrying `value`.
pub(crate) fn custom(name: &str, at: SystemTime, value: Value) -> Value {
    agui_event("CUSTOM", at, json!({ "name": format!("{CUSTOM_PREFIX}{name}"), "value": value }))
}

/// Turns one session's events into AG-UI events, keeping which text message is open.
#[derive(Default)]
pub(crate) struct Translator {
    /// The text message of the running model call, while it streams.
    open_text: Option<String>,
    /// The text message the running model call wrote (the parent of its tool calls).
    call_text: Option<String>,
    /// The model call ended without streaming its text: the answer is read from the history at the next event.
    unstreamed: Option<(String, SystemTime)>,
}

impl Translator {
    /// The AG-UI events for `event`. `last_answer` gives the text of the model's last answer from the session's
    /// history (for a model that does not stream, whose text no event carries).
    pub(crate) fn translate(&mut self, event: &Event, last_answer: &dyn Fn() -> Option<String>) -> Vec<Value> {
        let mut out = Vec::new();
        if let Some((id, at)) = self.unstreamed.take()
            && let Some(text) = last_answer().filter(|t| !t.is_empty())
        {
            out.push(agui_event("TEXT_MESSAGE_START", at, json!({ "messageId": id, "role": "assistant" })));
            out.push(agui_event("TEXT_MESSAGE_CONTENT", at, json!({ "messageId": id, "delta": text })));
            out.push(agui_event("TEXT_MESSAGE_END", at, json!({ "messageId": id })));
            self.call_text = Some(id);
        }
        let at = event.at;
        match &event.kind {
            EventKind::ModelCallStarted { .. } => {
                self.close_text(at, &mut out);
                self.call_text = None;
            }
            EventKind::ModelTextDelta { text, .. } if !text.is_empty() => {
                let id = match &self.open_text {
                    Some(id) => id.clone(),
                    None => {
                        let id = format!("noetic-{}", event.seq);
                        out.push(agui_event("TEXT_MESSAGE_START", at, json!({ "messageId": id, "role": "assistant" })));
                        self.open_text = Some(id.clone());
                        self.call_text = Some(id.clone());
                        id
                    }
                };
                out.push(agui_event("TEXT_MESSAGE_CONTENT", at, json!({ "messageId": id, "delta": text })));
            }
            EventKind::ModelCallCompleted { .. } => {
                if self.call_text.is_none() {
                    self.unstreamed = Some((format!("noetic-{}", event.seq), at));
                }
                self.close_text(at, &mut out);
            }
            EventKind::ToolCallStarted { call_id, tool, arguments, .. } => {
                self.close_text(at, &mut out);
                let mut start = json!({ "toolCallId": call_id, "toolCallName": tool });
                if let (Some(parent), Value::Object(fields)) = (&self.call_text, &mut start) {
                    fields.insert("parentMessageId".into(), Value::String(parent.clone()));
                }
                out.push(agui_event("TOOL_CALL_START", at, start));
                if !arguments.is_empty() {
                    out.push(agui_event("TOOL_CALL_ARGS", at, json!({ "toolCallId": call_id, "delta": arguments })));
                }
                out.push(agui_event("TOOL_CALL_END", at, json!({ "toolCallId": call_id })));
            }
            EventKind::ToolCallCompleted { call_id, output, is_error, error_kind, .. } => {
                out.push(agui_event(
                    "TOOL_CALL_RESULT",
                    at,
                    json!({ "messageId": format!("noetic-{}", event.seq), "toolCallId": call_id, "content": output, "role": "tool" }),
                ));
                if *is_error {
                    out.push(custom("tool_failed", at, json!({ "call_id": call_id, "error_kind": error_kind })));
                }
            }
            EventKind::ToolSkipped { call_id, tool, reason, .. } => {
                out.push(custom("tool_skipped", at, json!({ "call_id": call_id, "tool": tool, "reason": reason })));
            }
            EventKind::SteeringDenied { call_id, tool, layers, action, error } => out.push(custom(
                "steering_decision",
                at,
                json!({ "on": "tool_call", "call_id": call_id, "tool": tool, "layers": layers, "action": action, "guidance": error.to_string() }),
            )),
            EventKind::ModelResponseSteered { action, guidance, .. } => out.push(custom(
                "steering_decision",
                at,
                json!({ "on": "model_response", "action": action, "guidance": guidance }),
            )),
            EventKind::SteeringQueued { id, .. } => out.push(custom("steering_queued", at, json!({ "message_id": id }))),
            EventKind::SteeringRejected { reason, .. } => {
                out.push(custom("steering_rejected", at, json!({ "reason": reason })));
            }
            EventKind::SteeringInjected { count, .. } => {
                out.push(custom("steering_injected", at, json!({ "count": count })));
            }
            EventKind::ToolProgress { call_id, tool, data } => {
                out.push(custom("tool_progress", at, json!({ "call_id": call_id, "tool": tool, "data": data })));
            }
            EventKind::ApprovalDecided { call_id, tool, approved, reason, .. } => out.push(custom(
                "approval_decided",
                at,
                json!({ "call_id": call_id, "tool": tool, "approved": approved, "reason": reason }),
            )),
            EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => self.close_text(at, &mut out),
            _ => {}
        }
        out
    }

    /// Ends the open text message, if any (before a run ends or a tool call starts).
    pub(crate) fn close_text(&mut self, at: SystemTime, out: &mut Vec<Value>) {
        if let Some(id) = self.open_text.take() {
            out.push(agui_event("TEXT_MESSAGE_END", at, json!({ "messageId": id })));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use noetic::context::ExecutionId;

    fn event(seq: u64, kind: EventKind) -> Event {
        Event { seq, turn: Some(1), execution_id: ExecutionId::new(), at: SystemTime::UNIX_EPOCH, kind }
    }

    fn types(events: &[Value]) -> Vec<&str> {
        events.iter().map(|e| e["type"].as_str().unwrap_or("")).collect()
    }

    #[test]
    fn streamed_text_then_a_tool_call_become_one_message_and_a_call_that_names_it() {
        let mut t = Translator::default();
        let none = || None;
        let mut out = Vec::new();
        let step: std::sync::Arc<str> = "assistant".into();
        for (seq, text) in [(2, "Run"), (3, "ning")] {
            out.extend(
                t.translate(&event(seq, EventKind::ModelTextDelta { step_id: step.clone(), text: text.into() }), &none),
            );
        }
        let usage = noetic::model::Usage::default();
        out.extend(t.translate(
            &event(4, EventKind::ModelCallCompleted { step_id: step.clone(), round: 0, tool_calls: 1, usage }),
            &none,
        ));
        let started = EventKind::ToolCallStarted {
            step_id: step.clone(),
            call_id: "c1".into(),
            tool: "run_command".into(),
            arguments: "{\"command\":\"ls\"}".into(),
        };
        out.extend(t.translate(&event(5, started), &none));
        assert_eq!(
            types(&out),
            [
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END"
            ]
        );
        assert_eq!(out[4]["parentMessageId"], "noetic-2");
        assert_eq!(out[5]["delta"], "{\"command\":\"ls\"}");
    }

    #[test]
    fn the_answer_of_a_model_that_does_not_stream_is_read_from_the_history() {
        let mut t = Translator::default();
        let step: std::sync::Arc<str> = "assistant".into();
        let usage = noetic::model::Usage::default();
        let done = EventKind::ModelCallCompleted { step_id: step, round: 0, tool_calls: 0, usage };
        assert!(t.translate(&event(7, done), &|| None).is_empty());
        let ended = EventKind::TurnCompleted { session: "s".into(), turn: 1, duration: std::time::Duration::ZERO };
        let out = t.translate(&event(8, ended), &|| Some("Done.".into()));
        assert_eq!(types(&out), ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]);
        assert_eq!(out[1]["delta"], "Done.");
    }

    #[test]
    fn a_skipped_call_is_a_custom_event_that_says_why() {
        let mut t = Translator::default();
        let skipped = EventKind::ToolSkipped {
            step_id: "assistant".into(),
            call_id: "c2".into(),
            tool: "run_command".into(),
            reason: "queued user steering message".into(),
        };
        let out = t.translate(&event(9, skipped), &|| None);
        assert_eq!(out[0]["name"], "noetic.tool_skipped");
        assert_eq!(out[0]["value"]["call_id"], "c2");
    }
}
