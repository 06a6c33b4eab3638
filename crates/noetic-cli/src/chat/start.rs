//! The chat's start: which session (`--session`, or `--resume` with a picker of recent ones), refusing one another
//! process holds, the help once per first start, and the transcript of a reopened session's last turns.

use std::io::BufRead;
use std::path::PathBuf;
use std::time::SystemTime;

use noetic::model::{Item, Role};

use crate::output::render::{Style, markdown, printable, short_id, shorten};
use crate::output::{out, outln};
use crate::sessions::Store;

/// Turns of a reopened session shown when `--history` is not given.
pub const DEFAULT_HISTORY: usize = 3;

/// Sessions the `--resume` picker offers, most recent first.
const PICKER_SIZE: usize = 9;

/// The lines that show the last `turns` turns of `history` (a turn starts with a user message): the user's
/// messages, the model's answers rendered as markdown, tool calls and their results shortened; first a line
/// saying how many earlier turns are not shown.
pub fn transcript(style: Style, history: &[Item], turns: usize) -> Vec<String> {
    let starts: Vec<usize> = history.iter().enumerate().filter(|(_, i)| is_user(i)).map(|(at, _)| at).collect();
    let shown = starts.len().min(turns);
    let from = if shown == 0 { history.len() } else { starts[starts.len() - shown] };
    let mut lines = Vec::new();
    let earlier = starts.len() - shown;
    if earlier > 0 {
        lines.push(style.dim(&format!("({earlier} earlier turn(s) not shown; --history N shows the last N)")));
    }
    for item in &history[from..] {
        match item {
            Item::Message { role: Role::User, .. } => {
                lines.push(style.cyan(&format!("you   {}", printable(item.text().unwrap_or_default()))));
            }
            Item::Message { role: Role::Assistant, .. } => {
                lines.push(markdown::render(style, item.text().unwrap_or_default()));
            }
            Item::Message { .. } => {}
            Item::ToolCall(call) => lines.push(style.dim(&format!(
                "  tool  {} [{}] {}",
                printable(&call.name),
                short_id(&call.id),
                shorten(&call.arguments, 80)
            ))),
            Item::ToolResult(result) => {
                let line = format!("        [{}] → {}", short_id(&result.call_id), shorten(&result.content, 90));
                lines.push(if result.is_error { style.yellow(&line) } else { style.dim(&line) });
            }
        }
    }
    lines
}

fn is_user(item: &Item) -> bool {
    matches!(item, Item::Message { role: Role::User, .. })
}

/// Refuses a session whose turn another live process runs now, before anything is shown (the store's lease names
/// it). A session another process has open but does not run a turn of is shared: what either runs, the other sees.
pub async fn refuse_if_held(store: &Store, key: &str) -> Result<(), String> {
    let shared = store.shared();
    let Some(leases) = shared.leases() else { return Ok(()) };
    let holder = leases
        .holder(key)
        .await
        .map_err(|e| format!("cannot open session {}: {e}", crate::output::render::visible(key)))?;
    match holder {
        None => Ok(()),
        Some(holder) => Err(format!(
            "cannot open session {}: a turn of it runs in {} now. Wait for it to end (or stop it with `noetic \
             sessions stop {}`), steer it with `noetic sessions steer {} TEXT`, or start a new session with `noetic chat`",
            crate::output::render::visible(key),
            crate::output::render::visible(&holder),
            crate::output::render::visible(key),
            crate::output::render::visible(key)
        )),
    }
}

/// `--resume`: lists the most recent sessions, numbered, and reads the number typed; `None` starts a new session
/// (an empty line, or no session to offer).
pub async fn pick_session(store: &Store) -> Result<Option<String>, String> {
    let mut sessions = store.shared().list().await.map_err(|e| e.to_string())?;
    if sessions.is_empty() {
        outln!("no sessions in {} yet: starting a new one", store.describe());
        return Ok(None);
    }
    sessions.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    sessions.truncate(PICKER_SIZE);
    outln!("recent sessions in {}:", store.describe());
    let now = SystemTime::now();
    for (n, s) in sessions.iter().enumerate() {
        let ago = now.duration_since(s.updated_at).map_or(0, |d| d.as_secs());
        let unfinished = if s.summary.open_turn.is_some() { ", a turn left unfinished" } else { "" };
        let title = s.summary.title.as_deref().map(|t| format!(" “{}”", printable(t))).unwrap_or_default();
        outln!(
            "  {}. {}{title}  ({} turn(s), {}{unfinished})",
            n + 1,
            printable(&s.key),
            s.summary.turns,
            crate::sessions::describe_age(ago)
        );
    }
    loop {
        out!("type a number and press Enter (Enter alone starts a new session): ");
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).map(|n| (n > 0).then_some(line))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("could not read the choice: {e}"))?;
        let Some(line) = line else { return Err("no session was picked (the input ended)".to_owned()) };
        let choice = line.trim();
        if choice.is_empty() {
            return Ok(None);
        }
        match choice.parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|i| sessions.get(i)) {
            Some(s) => return Ok(Some(s.key.clone())),
            None => outln!("'{}' is not one of the numbers 1 to {}", printable(choice), sessions.len()),
        }
    }
}

/// The file whose presence says the chat's help was shown once (in the user's data directory).
fn help_seen_marker() -> Option<PathBuf> {
    crate::sessions::data_dir().map(|dir| dir.join("noetic").join("chat-help-shown"))
}

/// Whether this is the first start (the help is shown in full); the first start is remembered.
pub fn first_start() -> bool {
    let Some(marker) = help_seen_marker() else { return true };
    if marker.exists() {
        return false;
    }
    // Not remembering (a read-only home) only means the help shows again next time.
    if let Some(dir) = marker.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&marker, "noetic chat showed its help here once\n");
    true
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use noetic::model::{ToolCall, ToolResult};

    use super::*;

    const PLAIN: Style = Style::plain();

    #[test]
    fn a_reopened_session_shows_its_last_turns_with_answers_tools_and_a_count_of_the_rest() {
        let call =
            ToolCall { id: "call_abcdef123456".into(), name: "list_dir".into(), arguments: "{\"path\":\".\"}".into() };
        let history = vec![
            Item::user("first question"),
            Item::assistant("first answer"),
            Item::user("list the files"),
            Item::ToolCall(call),
            Item::ToolResult(ToolResult::new("call_abcdef123456".to_owned(), "a.txt\nb.txt".to_owned(), false)),
            Item::assistant("Two files:\n- a.txt\n- b.txt"),
            Item::user("thanks\u{1b}[2J"),
            Item::assistant("**You're welcome.**"),
        ];
        assert_eq!(
            transcript(PLAIN, &history, 2),
            [
                "(1 earlier turn(s) not shown; --history N shows the last N)",
                "you   list the files",
                "  tool  list_dir [call_a] {\"path\":\".\"}",
                "        [call_a] → a.txt b.txt",
                "Two files:\n• a.txt\n• b.txt",
                "you   thanks\\u001b[2J",
                "You're welcome.",
            ]
        );
        assert_eq!(transcript(PLAIN, &history, 5).len(), history.len(), "every turn, no count");
        assert!(transcript(PLAIN, &[], 3).is_empty());
    }
}
