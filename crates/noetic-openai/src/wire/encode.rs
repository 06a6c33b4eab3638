//! Request bodies as bytes, linear in what is new: the history's messages are encoded once per item log and
//! reused by every later request of that log.
//!
//! A session's history only grows during a turn and across turns, and [`History::log_id`] names such an
//! append-only sequence. [`HistoryCache`] keeps, per log id, the encoded messages of the history up to the last
//! point where a message is closed (a tool result, a user or developer message). The next request of the same log
//! copies those bytes and encodes only the items after them. A request whose log is unknown, or whose leading
//! messages changed in a way that moves the history (see `at_zero`), is encoded whole and starts a new entry. The
//! cache is bounded (entries and bytes; least recently used go first).

use std::collections::HashMap;
use std::sync::Mutex;

use noetic::model::{History, ModelRequest};
use noetic::step::ToolChoice;
use serde_json::{Map, Value};

use super::request::{closes_message, fields, system_message, walk};

/// At most this many logs are remembered.
const MAX_ENTRIES: usize = 1024;
/// At most this many bytes of encoded messages are remembered over all logs.
const MAX_BYTES: usize = 64 << 20;

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
struct Prefix {
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
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    by_log: HashMap<u64, Prefix>,
    bytes: usize,
    clock: u64,
}

/// Encoded history messages per item log, shared by the requests a model sends.
#[derive(Default)]
pub struct HistoryCache {
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for HistoryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (logs, bytes) = self.usage();
        f.debug_struct("HistoryCache").field("logs", &logs).field("bytes", &bytes).finish()
    }
}

impl HistoryCache {
    /// An empty cache.
    pub fn new() -> Self {
        HistoryCache::default()
    }

    /// How many logs it remembers and how many bytes of messages it holds.
    pub fn usage(&self) -> (usize, usize) {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (entries.by_log.len(), entries.bytes)
    }

    /// Takes the prefix of `log` out (so encoding runs without the lock).
    fn take(&self, log: u64) -> Option<Prefix> {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let prefix = entries.by_log.remove(&log)?;
        entries.bytes -= prefix.json.len();
        Some(prefix)
    }

    fn put(&self, log: u64, mut prefix: Prefix) {
        if prefix.json.len() > MAX_BYTES {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.clock += 1;
        prefix.last_used = entries.clock;
        entries.bytes += prefix.json.len();
        if let Some(old) = entries.by_log.insert(log, prefix) {
            entries.bytes -= old.json.len();
        }
        while entries.by_log.len() > MAX_ENTRIES || entries.bytes > MAX_BYTES {
            let Some(oldest) = entries.by_log.iter().min_by_key(|(_, p)| p.last_used).map(|(k, _)| *k) else {
                break;
            };
            if let Some(gone) = entries.by_log.remove(&oldest) {
                entries.bytes -= gone.json.len();
            }
        }
    }
}

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
        last_used: 0,
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
