//! Request bodies as shared chunks, linear in what is new and never copying what an earlier request sent.
//!
//! A body is `{"model":…,"messages":[` and the leading system message (the *head*), the context messages, the
//! history's messages, the tail's messages, then `]` and every other field (the *suffix*: tool specs, tool choice,
//! sampling parameters …) and `}`. The head and the suffix are encoded once per model, instructions and
//! (tool set, settings) and reused as the same bytes ([`PartCache`](noetic_http::PartCache)). A session's history only grows during a turn
//! and across turns, and [`History::log_id`] names such an append-only sequence: per log id, the encoded messages
//! of the history up to the last point where a message is closed (a tool result, a user or developer message) are
//! kept as a few shared chunks ([`ChunkLog`]); the next request of the same log hands those chunks on and encodes
//! only the items after them. A request whose log is unknown, or whose leading messages changed in a way that
//! moves the history (see `at_zero`), is encoded whole and starts a new entry. Every cache is bounded. The bytes
//! are exactly those of [`request_body`](super::request_body)'s JSON (sorted keys, compact) with the options
//! applied.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use noetic_core::model::{History, Item, ModelRequest, Role, ToolSpec};
use noetic_core::model::{ModelParams, ToolChoice};
use noetic_http::{ChunkLog, ChunkedBody, is_key_text, key_text};
use serde_json::Value;

use super::escaped::EscapedArguments;
use super::message::{Message, string, value};
use super::request::{closes_message, float, walk};

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
    /// `System` items among the covered items (their text joins the leading message, so a request with none
    /// there looks for them only among the items after).
    systems: usize,
    /// The history's first message was the body's first message (it then keeps a `system` role even with
    /// `late_system_as_user`).
    at_zero: bool,
    /// Encoded with `late_system_as_user`.
    late_system_as_user: bool,
    /// The messages, comma-separated, without brackets.
    log: ChunkLog,
}

/// What the head depends on: the model id sent and the leading system message's text.
struct HeadKey {
    model: String,
    /// The request's instructions themselves when they alone are the system message (see [`key_text`]).
    system: Option<Arc<str>>,
}

/// What the suffix depends on.
struct SuffixKey {
    /// Held, so no other tool set can take its address while the key lives.
    tools: Arc<[ToolSpec]>,
    tool_choice: Option<ToolChoice>,
    params: ModelParams,
    output_schema: Option<Value>,
    /// Only when the options keep it.
    grammar: Option<String>,
    stream: bool,
    narrow_named_tool_choice: bool,
}

impl SuffixKey {
    fn matches(&self, request: &ModelRequest, stream: bool, options: &BodyOptions) -> bool {
        self.stream == stream
            && self.narrow_named_tool_choice == options.narrow_named_tool_choice
            && self.tool_choice == request.tool_choice
            && self.params == request.params
            && self.grammar.as_deref() == kept_grammar(request, options)
            && self.output_schema == request.output_schema
            // A runtime's per-thread copies of a tool set hold equal specs at another address.
            && (Arc::ptr_eq(&self.tools, &request.tools) || self.tools == request.tools)
    }
}

noetic_http::body_cache_type!(HistoryCache, Prefix, HeadKey, SuffixKey, super::escaped::EscapedArguments);

/// Writes the body's messages, demoting late `system` messages when asked.
struct Messages<'c> {
    out: Vec<u8>,
    /// Calls' arguments as answers escaped them (see `escaped`).
    escaped: &'c EscapedArguments,
    count: usize,
    late_system_as_user: bool,
}

impl Messages<'_> {
    /// Appends one message (with its separator) and returns where it starts (at the separator).
    fn push(&mut self, message: Message<'_>) -> usize {
        let start = self.out.len();
        if self.count > 0 {
            self.out.push(b',');
        }
        message.write(self.late_system_as_user && self.count > 0, &mut self.out, Some(self.escaped));
        self.count += 1;
        start
    }
}

/// The largest number of leading history items after which a message is closed.
fn closed_prefix(history: &History) -> usize {
    history.as_slice().iter().rposition(closes_message).map_or(0, |i| i + 1)
}

fn system_text(item: &Item) -> Option<&str> {
    match item {
        Item::Message { role: Role::System, content } => Some(content),
        _ => None,
    }
}

/// The leading `system` message's text: the instructions and every `System` item (of the context, the history
/// from `history_from` on — the caller knows there are none before — and the tail), joined by a blank line.
fn system_message(request: &ModelRequest, history_from: usize) -> Option<Cow<'_, str>> {
    let instructions = request.instructions.as_deref().filter(|text| !text.is_empty());
    let items = request.context.iter().chain(&request.history.as_slice()[history_from..]).chain(&request.tail);
    let mut others = items.filter_map(system_text).filter(|text| !text.is_empty()).peekable();
    if others.peek().is_none() {
        return instructions.map(Cow::Borrowed);
    }
    let joined: Vec<&str> = instructions.into_iter().chain(others).collect();
    Some(Cow::Owned(joined.join("\n\n")))
}

/// The grammar the body carries: the request's, when the options keep it.
fn kept_grammar<'a>(request: &'a ModelRequest, options: &BodyOptions) -> Option<&'a str> {
    request.grammar.as_deref().filter(|_| options.grammar)
}

/// `{"model":…,"messages":[` and the leading system message.
fn head(model: &str, system: Option<&str>) -> Bytes {
    let mut out = Vec::with_capacity(64 + system.map_or(0, str::len));
    out.extend_from_slice(b"{\"model\":");
    string(&mut out, model);
    out.extend_from_slice(b",\"messages\":[");
    if let Some(system) = system {
        Message::Text { role: "system", content: system }.write(false, &mut out, None);
    }
    Bytes::from(out)
}

/// Starts the field `name` of an object that already has one.
fn field(out: &mut Vec<u8>, name: &str) {
    out.push(b',');
    string(out, name);
    out.push(b':');
}

/// `]`, every field of the body but `model` and `messages` (in the sorted order of a JSON object), and `}`.
fn suffix(request: &ModelRequest, stream: bool, options: &BodyOptions) -> Bytes {
    let mut out = Vec::with_capacity(256);
    out.push(b']');
    // A named choice narrowed to the one tool offered, when the options ask and the tool is there.
    let narrowed = match &request.tool_choice {
        Some(ToolChoice::Named(name)) if options.narrow_named_tool_choice => {
            request.tools.iter().position(|t| t.name == *name)
        }
        _ => None,
    };
    if let Some(grammar) = kept_grammar(request, options) {
        field(&mut out, "grammar");
        string(&mut out, grammar);
    }
    let params = &request.params;
    if let Some(max) = params.max_tokens {
        field(&mut out, "max_tokens");
        value(&mut out, &max);
    }
    if let Some(schema) = &request.output_schema {
        field(&mut out, "response_format");
        out.extend_from_slice(b"{\"json_schema\":{\"name\":\"output\",\"schema\":");
        value(&mut out, schema);
        out.extend_from_slice(b",\"strict\":false},\"type\":\"json_schema\"}");
    }
    if !params.stop_sequences.is_empty() {
        field(&mut out, "stop");
        value(&mut out, &params.stop_sequences);
    }
    if stream {
        field(&mut out, "stream");
        out.extend_from_slice(b"true");
        field(&mut out, "stream_options");
        out.extend_from_slice(b"{\"include_usage\":true}");
    }
    if let Some(t) = params.temperature.and_then(float) {
        field(&mut out, "temperature");
        value(&mut out, &t);
    }
    if let Some(choice) = &request.tool_choice {
        field(&mut out, "tool_choice");
        match choice {
            _ if narrowed.is_some() => out.extend_from_slice(b"\"required\""),
            ToolChoice::Auto => out.extend_from_slice(b"\"auto\""),
            ToolChoice::Required => out.extend_from_slice(b"\"required\""),
            ToolChoice::None => out.extend_from_slice(b"\"none\""),
            ToolChoice::Named(name) => {
                out.extend_from_slice(b"{\"function\":{\"name\":");
                string(&mut out, name);
                out.extend_from_slice(b"},\"type\":\"function\"}");
            }
        }
    }
    if !request.tools.is_empty() {
        field(&mut out, "tools");
        let offered = match narrowed {
            Some(at) => &request.tools[at..=at],
            None => &request.tools[..],
        };
        out.push(b'[');
        for (i, tool) in offered.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"function\":{\"description\":");
            string(&mut out, &tool.description);
            out.extend_from_slice(b",\"name\":");
            string(&mut out, &tool.name);
            out.extend_from_slice(b",\"parameters\":");
            value(&mut out, &tool.parameters);
            out.extend_from_slice(b"},\"type\":\"function\"}");
        }
        out.push(b']');
    }
    if let Some(p) = params.top_p.and_then(float) {
        field(&mut out, "top_p");
        value(&mut out, &p);
    }
    out.push(b'}');
    Bytes::from(out)
}

/// The JSON body of `POST /chat/completions` for `request` as shared chunks: the same JSON as
/// [`request_body`](super::request_body) with `options` applied, its head and suffix and the history's messages
/// reused from `cache` where an earlier request encoded them.
pub fn encode_body(request: &ModelRequest, stream: bool, options: &BodyOptions, cache: &HistoryCache) -> ChunkedBody {
    let history = &request.history;
    let cached = cache.0.logs.take(history.log_id()).filter(|p| p.items <= history.len());
    // The cached items of this log hold no `System` item: only the items after them can add to the system text.
    let system_from = cached.as_ref().filter(|p| p.systems == 0).map_or(0, |p| p.items);
    let system = system_message(request, system_from);
    let model = options.model.as_deref().unwrap_or(&request.model);
    let head = cache.0.heads.get_or_encode(
        |key| key.model == model && is_key_text(key.system.as_deref(), system.as_deref()),
        || {
            let kept = system.as_deref().map(|text| key_text(text, request.instructions.as_ref()));
            let key = HeadKey { model: model.to_owned(), system: kept };
            let bytes = head(model, system.as_deref());
            (key, bytes)
        },
    );
    let suffix = cache.0.suffixes.get_or_encode(
        |key| key.matches(request, stream, options),
        || {
            let key = SuffixKey {
                tools: request.tools.clone(),
                tool_choice: request.tool_choice.clone(),
                params: request.params.clone(),
                output_schema: request.output_schema.clone(),
                grammar: kept_grammar(request, options).map(str::to_owned),
                stream,
                narrow_named_tool_choice: options.narrow_named_tool_choice,
            };
            (key, suffix(request, stream, options))
        },
    );

    let mut messages = Messages {
        out: Vec::with_capacity(1024),
        escaped: &cache.1,
        count: usize::from(system.is_some()),
        late_system_as_user: options.late_system_as_user,
    };
    walk(&request.context, |message, _| {
        messages.push(message);
    });
    let at_zero = messages.count == 0;
    let usable = cached.filter(|p| p.at_zero == at_zero && p.late_system_as_user == options.late_system_as_user);
    let mut prefix = usable.unwrap_or(Prefix {
        items: 0,
        messages: 0,
        systems: 0,
        at_zero,
        late_system_as_user: options.late_system_as_user,
        log: ChunkLog::default(),
    });
    // The cached history goes between the context's bytes and the new ones: where `messages.out` splits.
    let mut cached_at = None;
    if prefix.messages > 0 {
        if messages.count > 0 {
            messages.out.push(b',');
        }
        cached_at = Some(messages.out.len());
        messages.count += prefix.messages;
    }
    let closed = closed_prefix(history).max(prefix.items);
    let from = prefix.items;
    // Where the newly closed messages lie in `messages.out` (from the separator of the first).
    let mut newly_closed: Option<(usize, usize)> = None;
    walk(&history.as_slice()[from..], |message, consumed| {
        let start = messages.push(message);
        if from + consumed <= closed {
            let end = messages.out.len();
            newly_closed = Some((newly_closed.map_or(start, |(s, _)| s), end));
            prefix.messages += 1;
        }
    });
    prefix.systems += history.as_slice()[from..closed].iter().filter(|i| system_text(i).is_some()).count();
    prefix.items = closed;
    walk(&request.tail, |message, _| {
        messages.push(message);
    });
    // One buffer for everything new, its parts handed on as slices of it.
    let fresh = Bytes::from(messages.out);
    // Head, the context's bytes, the cached history, the new bytes, suffix: a list of known length, collected
    // into the body's shared list in one allocation.
    let (before, after) = match cached_at {
        Some(at) => (Some(fresh.slice(..at)), fresh.slice(at..)),
        None => (None, fresh.clone()),
    };
    let body = ChunkedBody::from_parts(
        std::iter::once(head).chain(before).chain(prefix.log.chunks().iter().cloned()).chain([after, suffix]),
    );
    if let Some((mut start, end)) = newly_closed {
        // The log's first chunk starts with its first message, later ones with the separator before theirs.
        if prefix.log.is_empty() && fresh.get(start) == Some(&b',') {
            start += 1;
        }
        prefix.log.push(fresh.slice(start..end));
    }
    cache.0.logs.put(history.log_id(), prefix);
    body
}

#[cfg(test)]
mod tests;
