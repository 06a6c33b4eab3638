//! `/resume` after a process died mid-turn: the calls that were running when it stopped are not run again (unless
//! their tool is idempotent); they get the interrupted result, and the chat says which they were.

use noetic::model::{Item, ToolCall};
use noetic::turn::INTERRUPTED_RESULT;

use super::Chat;
use crate::output::render::{printable, short_id, shorten};

/// The calls of `history` that got the interrupted result, in order.
pub(super) fn interrupted(history: &[Item]) -> Vec<&ToolCall> {
    history
        .iter()
        .filter_map(|item| match item {
            Item::ToolResult(r) if &*r.content == INTERRUPTED_RESULT => Some(&*r.call_id),
            _ => None,
        })
        .filter_map(|id| {
            history.iter().find_map(|item| match item {
                Item::ToolCall(call) if *call.id == *id => Some(call),
                _ => None,
            })
        })
        .collect()
}

/// What the chat says about an interrupted call.
pub(super) fn interrupted_line(call: &ToolCall) -> String {
    let what = match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(args) if &*call.name == "run_command" && args["command"].is_string() => {
            format!("`{}`", shorten(args["command"].as_str().unwrap_or_default(), 80))
        }
        _ => shorten(&call.arguments, 80),
    };
    format!(
        "interrupted: {} [{}] {what} was running when the previous process stopped; it was not run again (it may or \
         may not have taken effect) and the model was told so",
        printable(&call.name),
        short_id(&call.id)
    )
}

impl Chat {
    /// Says which calls the resumed turn found interrupted (those after the first `before` of the conversation).
    pub(super) fn say_interrupted(&mut self, before: usize) {
        let history = self.session.history();
        let lines: Vec<String> = interrupted(&history).into_iter().skip(before).map(interrupted_line).collect();
        for line in lines {
            self.say(&self.style.yellow(&line));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use noetic::model::ToolResult;

    use super::*;

    #[test]
    fn an_interrupted_call_is_named_with_its_command() {
        let call = ToolCall {
            id: "call_sleeping_1".into(),
            name: "run_command".into(),
            arguments: "{\"command\":\"sleep 30\"}".into(),
        };
        let history = vec![
            Item::user("wait"),
            Item::ToolCall(call.clone()),
            Item::ToolResult(ToolResult::error("call_sleeping_1", INTERRUPTED_RESULT)),
        ];
        assert_eq!(interrupted(&history), [&call]);
        assert_eq!(
            interrupted_line(&call),
            "interrupted: run_command [call_s] `sleep 30` was running when the previous process stopped; it was not \
             run again (it may or may not have taken effect) and the model was told so"
        );
    }
}
