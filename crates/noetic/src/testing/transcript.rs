//! A conversation as text lines, to assert a whole history (or a request's) in one comparison.

use crate::model::Item;

/// One line for one item:
/// - a message: `<Role>: <text>` (`User: hi`, `Assistant: hello`, `Developer: …`, `System: …`);
/// - a tool call: `call <id> <name>(<arguments as the model wrote them>)`;
/// - a tool result: `result <id> <content>`, or `result <id> (error) <content>` for a failed, denied or skipped
///   call.
///
/// Text is kept verbatim (a message with several lines stays one entry), so what the model wrote is compared
/// exactly, never interpreted.
pub fn transcript_line(item: &Item) -> String {
    match item {
        Item::Message { role, content } => format!("{role:?}: {content}"),
        Item::ToolCall(c) => format!("call {} {}({})", c.id, c.name, c.arguments),
        Item::ToolResult(r) => {
            format!("result {} {}{}", r.call_id, if r.is_error { "(error) " } else { "" }, r.content)
        }
    }
}

/// The [`transcript_line`] of every item, in order.
pub fn transcript(items: &[Item]) -> Vec<String> {
    items.iter().map(transcript_line).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::model::{Role, ToolCall, ToolResult};

    #[test]
    fn the_transcript_has_one_stable_line_per_item() {
        let items = [
            Item::message(Role::System, "be brief"),
            Item::user("hi"),
            Item::ToolCall(ToolCall { id: "c1".into(), name: "add".into(), arguments: r#"{"a":1}"#.into() }),
            Item::ToolResult(ToolResult::ok("c1", "1")),
            Item::ToolResult(ToolResult::error("c2", "no such tool")),
            Item::developer("two\nlines"),
            Item::assistant("done"),
        ];
        assert_eq!(
            transcript(&items),
            [
                "System: be brief",
                "User: hi",
                r#"call c1 add({"a":1})"#,
                "result c1 1",
                "result c2 (error) no such tool",
                "Developer: two\nlines",
                "Assistant: done",
            ]
        );
    }
}
