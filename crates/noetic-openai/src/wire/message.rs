//! One chat-completions message, made from the items it comes from, written as JSON bytes or as a
//! `serde_json::Value`. Both forms have the same keys in the same (sorted) order, so the bytes are exactly the
//! `Value`'s serialisation — the bytes path just builds no tree.

use std::borrow::Cow;

use noetic_core::model::{Item, ToolCall};
use serde_json::{Map, Value, json};

use super::escaped::EscapedArguments;

/// A message of the body, borrowing from the request's items.
pub(crate) enum Message<'a> {
    /// `user` or `system` text.
    Text { role: &'static str, content: &'a str },
    /// A tool result.
    Tool { call_id: &'a str, content: &'a str },
    /// Assistant text and the tool calls that follow it (`calls` holds the tool-call items, and `System` items
    /// skipped between them, which are not part of the message).
    Assistant { text: Option<&'a str>, calls: &'a [Item] },
}

impl Message<'_> {
    /// The message as a JSON value; with `demote`, a `system` message becomes a `user` one starting `[system] `.
    pub(crate) fn to_value(&self, demote: bool) -> Value {
        match self {
            Message::Text { role: "system", content } if demote => {
                json!({"role": "user", "content": format!("[system] {content}")})
            }
            Message::Text { role, content } => json!({"role": role, "content": content}),
            Message::Tool { call_id, content } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
            Message::Assistant { text, calls } => {
                let mut message = Map::new();
                message.insert("role".into(), json!("assistant"));
                if tool_calls(calls).next().is_none() {
                    message.insert("content".into(), json!(text.unwrap_or("")));
                    return Value::Object(message);
                }
                let content = text.filter(|t| !t.is_empty()).map_or(Value::Null, |t| json!(t));
                message.insert("content".into(), content);
                let calls = tool_calls(calls)
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": wire_arguments(&c.arguments)}})
                    })
                    .collect();
                message.insert("tool_calls".into(), Value::Array(calls));
                Value::Object(message)
            }
        }
    }

    /// Appends the message's JSON to `out`: the bytes of [`Message::to_value`]'s serialisation. A call's arguments
    /// kept in `escaped` as its answer escaped them are copied from there (the same bytes, see `escaped`).
    pub(crate) fn write(&self, demote: bool, out: &mut Vec<u8>, escaped: Option<&EscapedArguments>) {
        match self {
            Message::Text { role: "system", content } if demote => {
                out.extend_from_slice(b"{\"content\":");
                string(out, &format!("[system] {content}"));
                out.extend_from_slice(b",\"role\":\"user\"}");
            }
            Message::Text { role, content } => {
                out.extend_from_slice(b"{\"content\":");
                string(out, content);
                out.extend_from_slice(b",\"role\":");
                string(out, role);
                out.push(b'}');
            }
            Message::Tool { call_id, content } => {
                out.extend_from_slice(b"{\"content\":");
                string(out, content);
                out.extend_from_slice(b",\"role\":\"tool\",\"tool_call_id\":");
                string(out, call_id);
                out.push(b'}');
            }
            Message::Assistant { text, calls } => {
                let has_calls = tool_calls(calls).next().is_some();
                out.extend_from_slice(b"{\"content\":");
                match text {
                    _ if !has_calls => string(out, text.unwrap_or("")),
                    Some(t) if !t.is_empty() => string(out, t),
                    _ => out.extend_from_slice(b"null"),
                }
                out.extend_from_slice(b",\"role\":\"assistant\"");
                if has_calls {
                    out.extend_from_slice(b",\"tool_calls\":[");
                    for (i, call) in tool_calls(calls).enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(b"{\"function\":{\"arguments\":");
                        let kept = escaped.and_then(|e| e.take(&call.arguments));
                        match (wire_arguments(&call.arguments), kept) {
                            // Sent as they are, and kept as the answer escaped them: those bytes.
                            (Cow::Borrowed(_), Some(wire)) => {
                                out.push(b'"');
                                out.extend_from_slice(wire.as_bytes());
                                out.push(b'"');
                            }
                            (arguments, _) => string(out, &arguments),
                        }
                        out.extend_from_slice(b",\"name\":");
                        string(out, &call.name);
                        out.extend_from_slice(b"},\"id\":");
                        string(out, &call.id);
                        out.extend_from_slice(b",\"type\":\"function\"}");
                    }
                    out.push(b']');
                }
                out.push(b'}');
            }
        }
    }
}

/// The tool calls among `items`.
fn tool_calls(items: &[Item]) -> impl Iterator<Item = &ToolCall> {
    items.iter().filter_map(|item| match item {
        Item::ToolCall(call) => Some(call),
        _ => None,
    })
}

/// Appends `text` as a JSON string, escaped exactly as `serde_json` serialises a string.
pub(crate) fn string(out: &mut Vec<u8>, text: &str) {
    noetic_http::write_json_str(out, text);
}

/// Appends any serialisable value as `serde_json` writes it (the bytes of its `Value`'s serialisation).
pub(crate) fn value(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Writing to a Vec cannot fail; the values written here (JSON values, numbers, strings) always serialise.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// A past call's arguments as sent back: as the model wrote them when they are JSON, else wrapped as
/// `{"_raw": "<what the model wrote>"}` (as the Anthropic encoder does). Servers that parse the history's arguments
/// (llama.cpp does) answer every later request with an error when one call in it is malformed — a session would
/// be stuck for good; the call's result already tells the model its arguments were not JSON.
pub(crate) fn wire_arguments(raw: &str) -> Cow<'_, str> {
    // The hand scan is sure of the usual arguments at less than serde's cost; serde decides the rest.
    // Arguments a tool was given were parsed before it ran (and noted on this thread); any others are checked here.
    if noetic_core::json::is_noted_json(raw)
        || super::answer::surely_json(raw)
        || serde_json::from_str::<serde::de::IgnoredAny>(raw).is_ok()
    {
        Cow::Borrowed(raw)
    } else {
        Cow::Owned(json!({ "_raw": raw }).to_string())
    }
}
