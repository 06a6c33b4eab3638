//! Request bodies as bytes, linear in what is new: the history's messages are encoded once per item log and
//! reused by every later request of that log (see `noetic::model::History::log_id`).
//!
//! Anthropic merges adjacent items of one role into one message, so a message is final only once the next one
//! has started. [`HistoryCache`] keeps, per log, the encoded messages of the history up to the start of its last
//! message; the next request copies them and encodes the rest. The reuse needs the history to start the
//! conversation (every context item is a system or developer message that joins the system prompt) and the same
//! number of leading system items in the history; otherwise the request is encoded whole.

use noetic::model::{Item, ModelRequest};
use noetic_http::{LogCache, Weighed};
use serde_json::{Value, json};

use crate::request::{DEFAULT_MAX_TOKENS, fields, leading_system, model_id, system_prompt, turns};

/// The encoded history messages of one log.
pub struct Prefix {
    /// Leading system or developer items of the history (they join the system prompt).
    leading: usize,
    /// History items the messages cover (the next message starts here).
    items: usize,
    /// Messages in `json`.
    messages: usize,
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

/// The JSON body of `POST /v1/messages` for `request` as bytes: the same JSON as
/// [`request_body`](crate::request_body) (with `model` replaced by `model_override` when given), the history's
/// messages reused from `cache` where an earlier request of the same log encoded them.
pub fn encode_body(
    request: &ModelRequest,
    stream: bool,
    model_override: Option<&str>,
    cache: &HistoryCache,
) -> Vec<u8> {
    let items: Vec<&Item> = request.messages().collect();
    let leading = leading_system(&items);
    let (context, history) = (request.context.len(), request.history.len());
    let mut out = String::with_capacity(4096);
    out.push_str("{\"model\":");
    out.push_str(&json!(model_override.unwrap_or_else(|| model_id(&request.model))).to_string());
    out.push_str(",\"max_tokens\":");
    out.push_str(&request.params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS).to_string());
    if let Some(system) = system_prompt(request, &items[..leading]) {
        out.push_str(",\"system\":");
        out.push_str(&json!(system).to_string());
    }
    out.push_str(",\"messages\":[");
    // The history starts the conversation: its messages do not depend on the context.
    let history_leading = leading.checked_sub(context).filter(|l| *l < history);
    let log = request.history.log_id();
    let mut prefix = match history_leading {
        Some(leading) => cache.take(log).filter(|p| p.leading == leading && p.items <= history).unwrap_or(Prefix {
            leading,
            items: leading,
            messages: 0,
            json: String::new(),
        }),
        None => Prefix { leading, items: leading, messages: 0, json: String::new() },
    };
    out.push_str(&prefix.json);
    let reused = prefix.messages > 0;
    // Without reuse this is every conversation item; with it, the history from its first uncached message on.
    let from = if history_leading.is_some() { context + prefix.items } else { leading };
    let rest = turns(&items[from..]);
    let history_end = context + history;
    for (index, (message, _)) in rest.iter().enumerate() {
        if reused || index > 0 {
            out.push(',');
        }
        let at = out.len();
        out.push_str(&message.to_string());
        // Final once the next message starts inside the history: later items can only join the last one.
        let next_in_history = rest.get(index + 1).is_some_and(|(_, next)| from + next < history_end);
        if history_leading.is_some() && next_in_history {
            if prefix.messages > 0 {
                prefix.json.push(',');
            }
            prefix.json.push_str(&out[at..]);
            prefix.messages += 1;
            prefix.items = from + rest[index + 1].1 - context;
        }
    }
    if history_leading.is_some() {
        cache.put(log, prefix);
    }
    out.push(']');
    let rest = fields(request, stream);
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
