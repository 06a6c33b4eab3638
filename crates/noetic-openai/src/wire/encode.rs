//! Request bodies as bytes, linear in what is new: the history's messages are encoded once per item log and
//! reused by every later request of that log.
//!
//! A session's history only grows during a turn and across turns, and [`History::log_id`] names such an
//! append-only sequence. [`HistoryCache`] keeps, per log id, the encoded messages of the history up to the last
//! point where a message is closed (a tool result, a user or developer message). The next request of the same log
//! copies those bytes and encodes only the items after them. A request whose log is unknown, or whose leading
//! messages changed in a way that moves the history (see `at_zero`), is encoded whole and starts a new entry. The
//! cache is bounded (entries and bytes; least recently used go first).

use noetic::model::{History, ModelRequest};
use noetic::step::ToolChoice;
use noetic_http::{LogCache, Weighed};
use serde_json::{Map, Value};

use super::request::{closes_message, fields, system_message, walk};

/// Server-specific adjustments of the body (see [`OpenAiConfig`](crate::OpenAiConfig)).
#[derive(Debug, Clone, Default)]
pub struct BodyOptions {
    /// Sent as `model` instead of the request's model id.
    pub model: Option<String>,
    /// Keep the `grammar` field (llama.cpp); otherwise it is removed.
    pub grammar: bool,
    /// A named tool choice becomes `required` with only that tool offered.
    pub narrow_named_tool_choice: bool,
    /// Every `system` message after the first message becomes a `user` message starting `[system] `.
    pub late_system_as_user: bool,
}

/// The encoded history messages of one log.
pub struct Prefix {
    /// Items of the history the bytes cover.
    items: usize,
    /// Messages in the bytes.
    messages: usize,
    /// The history's first message was the body's first message (it then keeps a `system` role even with
    /// `late_system_as_user`).
    at_zero: bool,
    /// Encoded with `late_system_as_user`.
    late_system_as_user: bool,
    /// The messages, comma-separated, without brackets.
    json: String,
}

impl Weighed for Prefix {
    fn bytes(&self) -> usize {
        self.json.len()
    }
}

/// Encoded history messages per item log, shared by the requests a model sends (bounded: see [`LogCache`]).
pub type HistoryCache = LogCache<Prefix>;

/// Writes the body's messages, demoting late `system` messages when asked.
struct Messages<'a> {
    out: &'a mut String,
    count: usize,
    late_system_as_user: bool,
}

impl Messages<'_> {
    /// Appends one message (with its separator) to `out` and returns where it starts.
    fn push(&mut self, message: Value) -> usize {
        let message = if self.late_system_as_user && self.count > 0 { demoted(message) } else { message };
        if self.count > 0 {
            self.out.push(',');
        }
        let start = self.out.len();
        self.out.push_str(&message.to_string());
        self.count += 1;
        start
    }
}

/// A `system` message as a `user` message starting `[system] `; any other message as it is.
pub(crate) fn demoted(message: Value) -> Value {
    if message["role"] != "system" {
        return message;
    }
    let content = message["content"].as_str().unwrap_or_default();
    serde_json::json!({"role": "user", "content": format!("[system] {content}")})
}

/// Offers only the named tool and requires it.
pub(crate) fn narrow_to(body: &mut Map<String, Value>, name: &str) {
    let Some(Value::Array(tools)) = body.get_mut("tools") else { return };
    let Some(index) = tools.iter().position(|t| t["function"]["name"] == name) else { return };
    let tool = tools.swap_remove(index);
    *tools = vec![tool];
    body.insert("tool_choice".into(), Value::String("required".into()));
}

/// The largest number of leading history items after which a message is closed.
fn closed_prefix(history: &History) -> usize {
    history.as_slice().iter().rposition(closes_message).map_or(0, |i| i + 1)
}

/// The JSON body of `POST /chat/completions` for `request` as bytes: the same JSON as
/// [`request_body`](super::request_body) with `options` applied, the history's messages reused from `cache` where
/// an earlier request of the same log encoded them.
pub fn encode_body(request: &ModelRequest, stream: bool, options: &BodyOptions, cache: &HistoryCache) -> Vec<u8> {
    let mut rest = fields(request, stream);
    if !options.grammar {
        // Servers that take no grammar reject the unknown field (OpenAI answers 400).
        rest.remove("grammar");
    }
    if options.narrow_named_tool_choice
        && let Some(ToolChoice::Named(name)) = &request.tool_choice
    {
        narrow_to(&mut rest, name);
    }
    let history = &request.history;
    let cached = cache.take(history.log_id());
    let mut out = String::with_capacity(cached.as_ref().map_or(0, |p| p.json.len()) + 4096);
    out.push_str("{\"model\":");
    out.push_str(&Value::String(options.model.clone().unwrap_or_else(|| request.model.clone())).to_string());
    out.push_str(",\"messages\":[");
    let mut messages = Messages { out: &mut out, count: 0, late_system_as_user: options.late_system_as_user };
    if let Some(system) = system_message(request) {
        messages.push(system);
    }
    walk(&request.context, |message, _| {
        messages.push(message);
    });

    let at_zero = messages.count == 0;
    let usable = cached.filter(|p| {
        p.at_zero == at_zero && p.late_system_as_user == options.late_system_as_user && p.items <= history.len()
    });
    let mut prefix = usable.unwrap_or(Prefix {
        items: 0,
        messages: 0,
        at_zero,
        late_system_as_user: options.late_system_as_user,
        json: String::new(),
    });
    if prefix.messages > 0 {
        if messages.count > 0 {
            messages.out.push(',');
        }
        messages.out.push_str(&prefix.json);
        messages.count += prefix.messages;
    }
    let closed = closed_prefix(history).max(prefix.items);
    let from = prefix.items;
    walk(&history.as_slice()[from..], |message, consumed| {
        let start = messages.push(message);
        if from + consumed <= closed {
            if prefix.messages > 0 {
                prefix.json.push(',');
            }
            prefix.json.push_str(&messages.out[start..]);
            prefix.messages += 1;
        }
    });
    prefix.items = closed;
    cache.put(history.log_id(), prefix);

    walk(&request.tail, |message, _| {
        messages.push(message);
    });
    out.push(']');
    if rest.is_empty() {
        out.push('}');
    } else {
        out.push(',');
        let rest = Value::Object(rest).to_string();
        out.push_str(rest.strip_prefix('{').unwrap_or(&rest));
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests;
