//! Request bodies as shared chunks, linear in what is new and never copying what an earlier request sent (see
//! `noetic::model::History::log_id`).
//!
//! A body is `{"model":…,"max_tokens":…,"system":…,"messages":[` (the *head*), the messages, then `]` and every
//! other field (the *suffix*: tool specs, tool choice, sampling parameters …) and `}`. The head and the suffix are
//! encoded once per (model, system prompt) and (tool set, settings) and reused as the same bytes ([`PartCache`](noetic_http::PartCache)).
//! Anthropic merges adjacent items of one role into one message, so a message is final only once the next one has
//! started. Per log, the encoded messages of the history up to the start of its last message are kept as a few
//! shared chunks ([`ChunkLog`]); the next request hands them on and encodes the rest. The reuse needs the history
//! to start the conversation (every context item is a system or developer message that joins the system prompt)
//! and the same number of leading system items in the history; otherwise the request is encoded whole. The bytes
//! are exactly those of [`request_body`](crate::request_body)'s JSON (with `model` replaced by the override).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use noetic_core::model::{Item, ModelRequest, Role, ToolSpec};
use noetic_core::model::{ModelParams, ToolChoice};
use noetic_http::{ChunkLog, ChunkedBody, is_key_text, key_text, write_json_str};
use serde_json::Value;

use crate::request::{DEFAULT_MAX_TOKENS, fields, model_id, system_prompt, turns};

/// The encoded history messages of one log.
pub struct Prefix {
    /// Leading system or developer items of the history (they join the system prompt).
    leading: usize,
    /// History items the messages cover (the next message starts here).
    items: usize,
    /// Messages in `log`.
    messages: usize,
    /// The messages, comma-separated, without brackets.
    log: ChunkLog,
}

/// What the head depends on.
struct HeadKey {
    model: String,
    max_tokens: u32,
    /// The request's instructions themselves when they alone are the system prompt (see [`key_text`]).
    system: Option<Arc<str>>,
}

/// What the suffix depends on.
struct SuffixKey {
    /// Held, so no other tool set can take its address while the key lives.
    tools: Arc<[ToolSpec]>,
    tool_choice: Option<ToolChoice>,
    params: ModelParams,
    stream: bool,
}

impl SuffixKey {
    fn matches(&self, request: &ModelRequest, stream: bool) -> bool {
        self.stream == stream
            && self.tool_choice == request.tool_choice
            && self.params == request.params
            // A runtime's per-thread copies of a tool set hold equal specs at another address.
            && (Arc::ptr_eq(&self.tools, &request.tools) || self.tools == request.tools)
    }
}

noetic_http::body_cache_type!(HistoryCache, Prefix, HeadKey, SuffixKey);

/// Appends any serialisable value as `serde_json` writes it.
fn write(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Writing to a Vec cannot fail; JSON values, numbers and strings always serialise.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// `{"model":…,"max_tokens":…,"system":…,"messages":[`.
fn head(model: &str, max_tokens: u32, system: Option<&str>) -> Bytes {
    let mut out = Vec::with_capacity(64 + system.map_or(0, str::len));
    out.extend_from_slice(b"{\"model\":");
    write_json_str(&mut out, model);
    out.extend_from_slice(b",\"max_tokens\":");
    write(&mut out, &max_tokens);
    if let Some(system) = system {
        out.extend_from_slice(b",\"system\":");
        write_json_str(&mut out, system);
    }
    out.extend_from_slice(b",\"messages\":[");
    Bytes::from(out)
}

/// `]`, every field but `model`, `max_tokens`, `system` and `messages`, and `}`.
fn suffix(request: &ModelRequest, stream: bool) -> Bytes {
    let mut out = b"]".to_vec();
    let rest = fields(request, stream);
    if rest.is_empty() {
        out.push(b'}');
    } else {
        out.push(b',');
        let at = out.len();
        write(&mut out, &Value::Object(rest));
        // The fields join the body's object: drop their own opening brace.
        out.remove(at);
    }
    Bytes::from(out)
}

/// How many items of `items` from the start are system or developer messages (they join the system prompt).
fn leading_system<'a>(items: impl Iterator<Item = &'a Item>) -> usize {
    items.take_while(|i| matches!(i.role(), Some(Role::System | Role::Developer))).count()
}

/// The JSON body of `POST /v1/messages` for `request` as shared chunks: the same JSON as
/// [`request_body`](crate::request_body) (with `model` replaced by `model_override` when given), its head and
/// suffix and the history's messages reused from `cache` where an earlier request encoded them.
pub fn encode_body(
    request: &ModelRequest,
    stream: bool,
    model_override: Option<&str>,
    cache: &HistoryCache,
) -> ChunkedBody {
    let leading = leading_system(request.messages());
    let leading_items: Vec<&Item> = request.messages().take(leading).collect();
    let system: Option<Cow<'_, str>> = match (&request.instructions, leading, &request.output_schema) {
        // The usual request: the instructions alone make the system prompt, with no copy of them.
        (Some(instructions), 0, None) => Some(&**instructions).filter(|s| !s.is_empty()).map(Cow::Borrowed),
        _ => system_prompt(request, &leading_items).map(Cow::Owned),
    };
    let model = model_override.unwrap_or_else(|| model_id(&request.model));
    let max_tokens = request.params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let head = cache.0.heads.get_or_encode(
        |key| {
            key.max_tokens == max_tokens && key.model == model && is_key_text(key.system.as_deref(), system.as_deref())
        },
        || {
            let kept = system.as_deref().map(|text| key_text(text, request.instructions.as_ref()));
            let key = HeadKey { model: model.to_owned(), max_tokens, system: kept };
            (key, head(model, max_tokens, system.as_deref()))
        },
    );
    let suffix = cache.0.suffixes.get_or_encode(
        |key| key.matches(request, stream),
        || {
            let key = SuffixKey {
                tools: request.tools.clone(),
                tool_choice: request.tool_choice.clone(),
                params: request.params.clone(),
                stream,
            };
            (key, suffix(request, stream))
        },
    );

    let (context, history) = (request.context.len(), request.history.len());
    // The history starts the conversation: its messages do not depend on the context.
    let history_leading = leading.checked_sub(context).filter(|l| *l < history);
    let log = request.history.log_id();
    let mut prefix = match history_leading {
        Some(leading) => cache
            .0
            .logs
            .take(log)
            .filter(|p| p.leading == leading && p.items <= history)
            .unwrap_or(Prefix { leading, items: leading, messages: 0, log: ChunkLog::default() }),
        None => Prefix { leading, items: leading, messages: 0, log: ChunkLog::default() },
    };
    let reused = prefix.messages > 0;
    // Without reuse this is every conversation item; with it, the history from its first uncached message on.
    let from = if history_leading.is_some() { context + prefix.items } else { leading };
    let items: Vec<&Item> = request.messages().skip(from).collect();
    let rest = turns(&items);
    let history_end = context + history;
    let mut out = Vec::with_capacity(1024);
    // Where the messages that became final lie in `out` (from the separator of the first).
    let mut finals: Option<(usize, usize)> = None;
    for (index, (message, _)) in rest.iter().enumerate() {
        let at = out.len();
        if reused || index > 0 {
            out.push(b',');
        }
        write(&mut out, message);
        // Final once the next message starts inside the history: later items can only join the last one.
        let next_in_history = rest.get(index + 1).is_some_and(|(_, next)| from + next < history_end);
        if history_leading.is_some() && next_in_history {
            finals = Some((finals.map_or(at, |(start, _)| start), out.len()));
            prefix.messages += 1;
            prefix.items = from + rest[index + 1].1 - context;
        }
    }
    let fresh = Bytes::from(out);
    // Head, the cached history (as it was before this request's final messages join it), the new bytes, suffix: a
    // list of known length, collected into the body's shared list in one allocation.
    let body = ChunkedBody::from_parts(
        std::iter::once(head).chain(prefix.log.chunks().iter().cloned()).chain([fresh.clone(), suffix]),
    );
    if let Some((start, end)) = finals {
        prefix.log.push(fresh.slice(start..end));
    }
    if history_leading.is_some() {
        cache.0.logs.put(log, prefix);
    }
    body
}

#[cfg(test)]
mod tests;
