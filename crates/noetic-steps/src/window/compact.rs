//! Which items compaction folds, and the request that asks the model to summarise them. Pure functions: the
//! driver ([`super::fit`]) calls the model and records the result.

use std::collections::HashSet;

use crate::model::{Item, ModelParams, ModelRequest, Role, starts_turn};

/// How a history that does not fit the window is made to fit. Either way only what is *sent* changes: the
/// conversation, the session log, the ledger and replay keep every item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compaction {
    /// The model summarises the oldest turns; the summary is sent in their place (the default).
    #[default]
    Summarize,
    /// Only the last `n` turns before the current one are sent (fewer when even those do not fit); the current
    /// turn always is. Asks the model for nothing.
    KeepLastTurns(usize),
}

/// Where the current turn starts: after the last answer of an earlier turn (an assistant message followed by a
/// user message). Steering injected during the turn, the messages a continuation starts with and the turn's own
/// calls all come after it. 0 when the whole conversation is one turn.
pub fn turn_start(items: &[Item]) -> usize {
    (1..items.len()).rev().find(|&i| starts_turn(items, i)).unwrap_or(0)
}

/// The indexes in `from..=to` where the items may be cut: no tool call before the cut has its result after it,
/// and the cut does not start with a result. Turn starts are among them.
pub fn cut_points(items: &[Item], from: usize, to: usize) -> Vec<usize> {
    let to = to.min(items.len());
    let mut open: HashSet<&str> = HashSet::new();
    let mut cuts = Vec::new();
    for (i, item) in items.iter().enumerate().take(to + 1) {
        if i >= from && open.is_empty() && !matches!(item, Item::ToolResult(_)) {
            cuts.push(i);
        }
        match item {
            Item::ToolCall(c) => {
                open.insert(&*c.id);
            }
            Item::ToolResult(r) => {
                open.remove(&*r.call_id);
            }
            // A call left without a result (a turn that failed) does not hold every later cut.
            Item::Message { role: Role::User, .. } => open.clear(),
            Item::Message { .. } => {}
        }
    }
    if to == items.len() && open.is_empty() && from <= to && cuts.last() != Some(&to) {
        cuts.push(to);
    }
    cuts
}

/// The starts of the turns in `items[..end]`, oldest first.
pub fn turn_starts(items: &[Item], end: usize) -> Vec<usize> {
    let end = end.min(items.len());
    (1..end).filter(|&i| starts_turn(items, i)).collect()
}

/// The item sent in place of the folded ones.
pub fn folded_item(summary: Option<&str>, folded: usize) -> Item {
    match summary {
        Some(summary) => Item::user(format!(
            "[The {folded} oldest messages of this conversation were compacted to fit the context window. Summary \
             of them:]\n{summary}"
        )),
        None => Item::user(format!(
            "[The {folded} oldest messages of this conversation were left out to fit the context window.]"
        )),
    }
}

/// What the summariser is told.
const SUMMARISE: &str = "You compact a conversation between a user and an assistant that uses tools, so that the \
assistant can go on without the original messages. Write a concise summary: the user's goals and requests, \
decisions made, facts learned (names, paths, values, results of tool calls), and what remains to do. Plain text, \
no preamble. Do not answer or continue the conversation.";

/// Longest text of one item in the transcript the summariser reads.
const ITEM_CHARS: usize = 2_000;

/// The request that asks the model to summarise `items` (the folded turns), after the summary of what was folded
/// before (`previous`). The transcript is cut to `room_chars` characters, the oldest lines first; the answer is
/// asked to stay under `max_tokens`.
pub fn summary_request(
    model: &str,
    previous: Option<&str>,
    items: &[Item],
    room_chars: usize,
    max_tokens: u32,
) -> ModelRequest {
    let mut lines: Vec<String> = items.iter().map(transcript_line).collect();
    let mut used: usize = lines.iter().map(|l| l.chars().count() + 1).sum();
    let previous_chars = previous.map_or(0, |p| p.chars().count());
    let mut dropped = 0;
    while used + previous_chars > room_chars && !lines.is_empty() {
        used -= lines.remove(0).chars().count() + 1;
        dropped += 1;
    }
    let mut text = String::new();
    if let Some(previous) = previous {
        text.push_str("Summary of what came before:\n");
        text.push_str(previous);
        text.push_str("\n\n");
    }
    if dropped > 0 {
        text.push_str(&format!("({dropped} earlier messages left out)\n"));
    }
    text.push_str("The conversation to summarise:\n");
    text.push_str(&lines.join("\n"));
    ModelRequest {
        model: model.into(),
        instructions: Some(SUMMARISE.into()),
        history: crate::model::History::new(vec![Item::user(text)]),
        params: ModelParams { max_tokens: Some(max_tokens), ..ModelParams::default() },
        ..ModelRequest::default()
    }
}

fn transcript_line(item: &Item) -> String {
    let (who, text) = match item {
        Item::Message { role, content } => (role_name(*role), content.as_str()),
        Item::ToolCall(c) => return cut(&format!("assistant called {}({})", c.name, c.arguments)),
        Item::ToolResult(r) if r.is_error => ("tool error", &*r.content),
        Item::ToolResult(r) => ("tool result", &*r.content),
    };
    cut(&format!("{who}: {text}"))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System | Role::Developer => "instructions",
    }
}

fn cut(text: &str) -> String {
    if text.chars().count() <= ITEM_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(ITEM_CHARS).collect();
    cut.push_str(" …");
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ToolCall, ToolResult};

    fn call(id: &str) -> Item {
        Item::ToolCall(ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() })
    }

    fn result(id: &str) -> Item {
        Item::ToolResult(ToolResult::ok(id, "x"))
    }

    /// Two turns: "q1" with a call, then "q2" with two calls in one batch.
    fn conversation() -> Vec<Item> {
        vec![
            Item::user("q1"),
            call("a"),
            result("a"),
            Item::assistant("a1"),
            Item::user("q2"),
            call("b"),
            call("c"),
            result("b"),
            result("c"),
        ]
    }

    #[test]
    fn the_current_turn_starts_after_the_last_answer() {
        assert_eq!(turn_start(&conversation()), 4);
        assert_eq!(turn_start(&conversation()[..4]), 0);
        let mut continued = conversation();
        continued.extend([Item::assistant("a2"), Item::user("steer 1"), Item::user("steer 2")]);
        assert_eq!(turn_start(&continued), 10);
    }

    #[test]
    fn cuts_never_split_a_call_from_its_result() {
        assert_eq!(cut_points(&conversation(), 0, 9), vec![0, 1, 3, 4, 5, 9]);
        assert_eq!(cut_points(&conversation(), 2, 4), vec![3, 4]);
        assert_eq!(turn_starts(&conversation(), 9), vec![4]);
    }

    #[test]
    fn the_summary_request_keeps_the_previous_summary_and_drops_the_oldest_lines_that_do_not_fit() {
        let r = summary_request("m", Some("earlier"), &conversation(), 60, 100);
        let text = r.history.as_slice().first().and_then(Item::text).unwrap_or_default().to_owned();
        assert!(text.starts_with("Summary of what came before:\nearlier"), "{text}");
        assert!(text.contains("earlier messages left out") && text.contains("tool result: x"), "{text}");
        assert!(!text.contains("user: q1"), "{text}");
        assert_eq!(r.params.max_tokens, Some(100));
    }
}
