//! What the demo's scripted agent says: its plan, and an answer made from what really happened. The replies are
//! canned (the demo says so on screen), but they follow the person: a message the person typed ends the plan
//! at once, quoted in the answer, and the answer only claims what the tool results in the conversation show
//! (a file deleted, a deletion refused, a call skipped).

use noetic::agent::SKIPPED_RESULT;
use noetic::model::{Item, Role};

/// What the conversation says happened to the demo's files.
#[derive(Default)]
struct Facts {
    cache_deleted: bool,
    etc_refused: bool,
    draft_written: bool,
    notes_read: Vec<String>,
    notes_skipped: Vec<String>,
}

/// The tool results of `history`, with the arguments of their calls.
fn facts(history: &[Item]) -> Facts {
    let mut facts = Facts::default();
    for item in history {
        let Item::ToolResult(result) = item else { continue };
        let call = history.iter().find_map(|i| match i {
            Item::ToolCall(c) if c.id == result.call_id => Some(c),
            _ => None,
        });
        let Some(call) = call else { continue };
        let path = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|a| a["path"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let skipped = &*result.content == SKIPPED_RESULT;
        match &*call.name {
            "delete_file" if result.content.starts_with("deleted ") => facts.cache_deleted = true,
            "delete_file" if path.starts_with("/etc") && result.content.starts_with("Steering denied") => {
                facts.etc_refused = true
            }
            "write_file" if result.content.starts_with("wrote /workspace/drafts/") => facts.draft_written = true,
            "read_file" if skipped => facts.notes_skipped.push(note_name(&path)),
            "read_file" if !result.is_error => facts.notes_read.push(note_name(&path)),
            _ => {}
        }
    }
    facts
}

/// `tokio` for `/workspace/notes/tokio.md`.
fn note_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).trim_end_matches(".md").to_owned()
}

/// What was done, in words, from the facts alone.
fn done(facts: &Facts) -> Vec<String> {
    let mut done = Vec::new();
    if facts.cache_deleted {
        done.push("removed the cache".to_owned());
    }
    if facts.draft_written {
        let leads = facts.notes_read.first().map(|n| format!(" ({n} leads)")).unwrap_or_default();
        done.push(format!("drafted /workspace/drafts/report.md{leads}"));
    }
    done.push(if facts.etc_refused {
        "left /etc alone (a rule refused deleting /etc/hosts)".to_owned()
    } else {
        "did not touch /etc".to_owned()
    });
    done
}

/// The agent's answer once a line the person `typed` has reached the model (it is in the conversation): the
/// line, quoted, and what happened before it; `None` while none has.
pub fn answer_to_the_person(history: &[Item], typed: &[String]) -> Option<String> {
    let delivered = |text: &String| {
        history.iter().any(|i| matches!(i, Item::Message { role: Role::User, .. }) && i.text() == Some(text.as_str()))
    };
    let said = typed.iter().rev().find(|t| delivered(t))?;
    let facts = facts(history);
    let stopped = if said.to_ascii_lowercase().contains("delet") {
        "I deleted nothing more and stopped the plan there"
    } else {
        "I stopped the plan there"
    };
    Some(format!("You said: \"{said}\". {stopped}. Before your message I {}.", join(&done(&facts))))
}

/// The agent's last answer on the scripted path: what it did, from the facts.
pub fn final_answer(history: &[Item]) -> String {
    let facts = facts(history);
    let mut done = done(&facts);
    if !facts.notes_skipped.is_empty() {
        let skipped = facts.notes_skipped.join(" and ");
        if let Some(draft) = done.iter_mut().find(|d| d.starts_with("drafted")) {
            draft.insert_str(draft.len() - 1, &format!("; {skipped} skipped as you asked"));
        }
    }
    format!("Done: {}.", join(&done))
}

/// `a`, `a and b`, `a, b, and c`.
fn join(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [a, b] => format!("{a} and {b}"),
        [rest @ .., last] => format!("{}, and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use noetic::model::{ToolCall, ToolResult};

    use super::*;

    fn call(id: &str, name: &str, path: &str, result: &str, is_error: bool) -> [Item; 2] {
        let arguments = serde_json::json!({ "path": path }).to_string();
        [
            Item::ToolCall(ToolCall::new(id, name, arguments)),
            Item::ToolResult(ToolResult::new(id.to_owned(), result.to_owned(), is_error)),
        ]
    }

    #[test]
    fn steered_early_to_stop_deleting_the_answer_quotes_it_and_claims_only_what_happened() {
        let mut history = vec![Item::user("Tidy the workspace.")];
        history.extend(call("c1", "search", "", "3 articles", false));
        history.extend(call("c2", "delete_file", "/etc/hosts", SKIPPED_RESULT, true));
        history.push(Item::user("stop deleting anything"));
        assert_eq!(answer_to_the_person(&history, &["not delivered yet".to_owned()]), None);
        assert_eq!(
            answer_to_the_person(&history, &["stop deleting anything".to_owned()]).unwrap(),
            "You said: \"stop deleting anything\". I deleted nothing more and stopped the plan there. Before your \
             message I did not touch /etc."
        );
    }

    #[test]
    fn the_scripted_path_ends_with_what_the_tool_results_show() {
        let mut history = vec![Item::user("Tidy the workspace.")];
        history.extend(call("c2", "delete_file", "/etc/hosts", "Steering denied: no", true));
        history.extend(call(
            "c4",
            "delete_file",
            "/workspace/tmp/cache.bin",
            "deleted /workspace/tmp/cache.bin",
            false,
        ));
        history.extend(call(
            "c5",
            "write_file",
            "/workspace/drafts/report.md",
            "wrote /workspace/drafts/report.md",
            false,
        ));
        history.extend(call("c6", "read_file", "/workspace/notes/tokio.md", "contents", false));
        history.extend(call("c7", "read_file", "/workspace/notes/smol.md", SKIPPED_RESULT, true));
        history.extend(call("c8", "read_file", "/workspace/notes/glommio.md", SKIPPED_RESULT, true));
        history.push(Item::user("scripted"));
        assert_eq!(answer_to_the_person(&history, &[]), None, "only the scripted user steered");
        assert_eq!(
            final_answer(&history),
            "Done: removed the cache, drafted /workspace/drafts/report.md (tokio leads; smol and glommio skipped as \
             you asked), and left /etc alone (a rule refused deleting /etc/hosts)."
        );
    }
}
