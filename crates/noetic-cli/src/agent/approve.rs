//! Approving tool calls at the terminal (`run_command`, and tools a `require_approval` rule names).

use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, Mutex, OnceLock};

use noetic::agent::Session;
use noetic::tool::{Approval, ApprovalRequest, Approver, FnApprover};
use tokio::sync::{mpsc, oneshot};

use crate::agent::remembered::{AllowLog, Remembered, allowed_entry, record};
use crate::agent::workspace::Workspace;
use crate::output::render::{has_hidden, json_has_hidden, visible, visible_json};
use crate::output::{err, errln};

/// A call waiting for the user's answer, and where the answer goes.
pub struct Pending {
    /// The call.
    pub request: ApprovalRequest,
    /// Receives the decision.
    pub reply: oneshot::Sender<Approval>,
}

/// The question shown to the user. The model wrote the arguments, so they are shown through [`visible`]: a
/// carriage return or an escape code cannot redraw the question to show something other than what runs.
pub fn question(request: &ApprovalRequest) -> String {
    let (what, hidden) = match request.arguments.get("command").and_then(|c| c.as_str()) {
        Some(command) if request.tool == "run_command" => (format!("run `{}`", visible(command)), has_hidden(command)),
        _ => {
            let arguments = visible_json(&request.arguments);
            let hidden = has_hidden(&request.tool) || json_has_hidden(&request.arguments);
            (format!("call {} with {arguments}", visible(&request.tool)), hidden)
        }
    };
    let warning = if hidden { " (hidden characters shown escaped)" } else { "" };
    format!("approve: {what}{warning}? {CHOICES}")
}

/// The answers a question takes, as it offers them.
pub const CHOICES: &str = "[y]es / [N]o / [a]lways these args / a matching \"GLOB\" / or type what to do instead ";

/// Largest file a `write_file` approval shows a diff against.
const MAX_DIFF_SOURCE: u64 = 1024 * 1024;

/// What a call would change, shown before its question: for `write_file`, a unified diff of the new content
/// against the file as it is now (every line through [`visible`], so the diff shows exactly what is written and
/// no escape code reaches the terminal). `None` for other tools.
pub fn preview(request: &ApprovalRequest, workspace: &Workspace) -> Option<String> {
    if request.tool != "write_file" {
        return None;
    }
    let (Some(raw), Some(content)) = (request.arguments["path"].as_str(), request.arguments["content"].as_str()) else {
        return Some("(no diff: the call has no text path and content; the tool will refuse it)".to_owned());
    };
    let target = match workspace.locate(raw, true) {
        Ok(target) => target,
        Err(why) => return Some(format!("(no diff: {}; the tool will refuse the call)", visible(&why))),
    };
    let shown = visible(&target.path().to_string());
    let current = match workspace.current_text(&target, MAX_DIFF_SOURCE) {
        Ok(current) => current,
        Err(why) => return Some(format!("(no diff: {})", visible(&why))),
    };
    let escaped = |text: &str| text.split('\n').map(visible).collect::<Vec<_>>().join("\n");
    let (old, new) = (current.as_deref().map(escaped).unwrap_or_default(), escaped(content));
    if current.is_some() && old == new {
        return Some(format!("(no change: {shown} already has exactly this content)"));
    }
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(old.as_str(), new.as_str())
        .unified_diff()
        .context_radius(3)
        .header(if current.is_some() { &shown } else { "/dev/null" }, &shown)
        .to_string();
    let what = if current.is_some() { "changes" } else { "creates" };
    Some(format!("write_file {what} {shown}:\n{}", diff.trim_end()))
}

/// Why a call the user answered "no" did not run.
pub const DECLINED: &str = "the user declined it at the terminal; ask what to do instead";

/// Why a call did not run when the user answered its question with a message (which reaches the model next).
pub const ANSWERED_WITH_A_MESSAGE: &str = "the user answered the approval question with a message instead of yes or \
                                           no; it follows as a user message: read it before anything else";

/// What a line typed at an approval question means.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// `y` or `yes` (any case): run the call.
    Yes,
    /// `a` or `always` (any case): run the call, and the same call with exactly these arguments again later
    /// without asking.
    Always,
    /// `always matching "PATTERN"` or `always allow TOOL matching "PATTERN"` (quotes optional): run the call if
    /// the pattern covers it, and every later call of the tool it covers (see [`crate::agent::remembered`]).
    AlwaysMatching {
        /// The tool named, if any.
        tool: Option<&'a str>,
        /// The glob.
        pattern: &'a str,
    },
    /// `n`, `no` (any case) or an empty line — `[y/N]`: no is the default. The call does not run.
    No,
    /// Any other line is not an answer but a message for the agent (trimmed); the call does not run.
    Message(&'a str),
}

/// Reads a typed line as an [`Answer`].
pub fn answer(line: &str) -> Answer<'_> {
    let text = line.trim();
    match text.to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        "a" | "always" => Answer::Always,
        "" | "n" | "no" => Answer::No,
        _ => match always_matching(text) {
            Some((tool, pattern)) => Answer::AlwaysMatching { tool, pattern },
            None => Answer::Message(text),
        },
    }
}

/// `always matching P`, `a matching P` or `always allow TOOL matching P`: the tool named and the pattern (its
/// quotes removed); `None` for any other line.
fn always_matching(text: &str) -> Option<(Option<&str>, &str)> {
    const MATCHING: &str = " matching ";
    let at = text.to_ascii_lowercase().find(MATCHING)?;
    let head: Vec<&str> = text[..at].split_whitespace().collect();
    let tool = match head.as_slice() {
        [a] if a.eq_ignore_ascii_case("a") || a.eq_ignore_ascii_case("always") => None,
        [always, allow, tool] if always.eq_ignore_ascii_case("always") && allow.eq_ignore_ascii_case("allow") => {
            Some(*tool)
        }
        _ => return None,
    };
    let pattern = text[at + MATCHING.len()..].trim();
    let unquoted = ['"', '\''].iter().find_map(|q| pattern.strip_prefix(*q).and_then(|p| p.strip_suffix(*q)));
    let pattern = unquoted.unwrap_or(pattern);
    (!pattern.is_empty()).then_some((tool, pattern))
}

/// Whether a line is an answer to a question (`y`, `n`, `a`, `yes`, `no`, `always`, any case) rather than a
/// message; an empty line is neither.
pub fn is_answer(line: &str) -> bool {
    !line.trim().is_empty() && !matches!(answer(line), Answer::Message(_))
}

/// The decision a call gets when nobody answered (the input ended, the user quit or stopped the turn).
pub fn declined() -> Approval {
    Approval::Reject { reason: DECLINED.to_owned() }
}

/// The decision for a line typed at the question of a call of `session`'s running turn. A message is steered
/// into the session before the call is rejected, so the rejected call's outcome (a checkpoint) finds it: the
/// rest of the batch is skipped and the model reads it next. `Err` carries the decision and why the message
/// could not be steered (then the reason carries the message, so it is not lost).
async fn decide(line: &str, session: Option<&Session>) -> Result<Approval, (Approval, String)> {
    match answer(line) {
        Answer::Yes | Answer::Always => Ok(Approval::Approve),
        // Only `decide_call` knows the call a pattern must cover: without it, fail closed.
        Answer::AlwaysMatching { .. } => Ok(declined()),
        Answer::No => Ok(declined()),
        Answer::Message(text) => {
            let steered = match session {
                Some(s) => Some(s.steer(text).await),
                None => None,
            };
            let not_steered = match steered {
                Some(Ok(_)) => return Ok(Approval::Reject { reason: ANSWERED_WITH_A_MESSAGE.to_owned() }),
                Some(Err(e)) => e.to_string(),
                None => "there is no session to steer into".to_owned(),
            };
            let reason = format!(
                "the user answered the approval question with a message instead of yes or no: {text:?}; do what \
                 it says"
            );
            Err((
                Approval::Reject { reason },
                format!("the message was not steered ({not_steered}); the call was rejected with it"),
            ))
        }
    }
}

/// [`decide`] for a line typed at the question of `request`, remembering an "always" answer in `remembered`:
/// `a` for exactly these arguments, `always matching "PATTERN"` for the calls the pattern covers (this one is
/// approved only if it is among them).
pub async fn decide_call(
    line: &str,
    request: &ApprovalRequest,
    session: Option<&Session>,
    remembered: &mut Remembered,
) -> Result<Approval, (Approval, String)> {
    match decide_always(line, request, remembered) {
        Some(decided) => decided,
        None => decide(line, session).await,
    }
}

/// The decision for an "always" answer, remembered in `remembered`; `None` for any other line.
fn decide_always(
    line: &str,
    request: &ApprovalRequest,
    remembered: &mut Remembered,
) -> Option<Result<Approval, (Approval, String)>> {
    Some(match answer(line) {
        Answer::Always => {
            remembered.exact(request);
            Ok(Approval::Approve)
        }
        Answer::AlwaysMatching { tool: Some(tool), .. } if tool != request.tool => Err((
            declined(),
            format!(
                "the answer allows {}, but this call is of {}; nothing is remembered and the call is declined",
                visible(tool),
                visible(&request.tool)
            ),
        )),
        Answer::AlwaysMatching { pattern, .. } => match remembered.matching(request, pattern) {
            Ok(true) => Ok(Approval::Approve),
            Ok(false) => Err((
                Approval::Reject {
                    reason: "the user allowed calls matching a pattern that does not cover this call, so it did not \
                             run; ask before trying it another way"
                        .to_owned(),
                },
                format!(
                    "remembered {} matching {:?}; it does not cover this call, so this call is declined",
                    visible(&request.tool),
                    visible(pattern)
                ),
            )),
            Err(why) => Err((declined(), format!("{why}; nothing is remembered and the call is declined"))),
        },
        _ => return None,
    })
}

/// The decision for a call nobody can be asked about: stdin is not a terminal.
pub fn no_terminal(request: &ApprovalRequest) -> Approval {
    Approval::Reject {
        reason: format!(
            "'{}' needs the user's approval and stdin is not a terminal, so nobody can approve it; do without it",
            visible(&request.tool)
        ),
    }
}

/// Approves the calls an `[[allow]]` of noetic.toml covers (keeping the decision in `log`) and rejects the rest:
/// there is no terminal to ask.
pub fn without_terminal(allowed: Remembered, log: AllowLog) -> Arc<dyn Approver> {
    Arc::new(FnApprover(move |request: ApprovalRequest| {
        let decision = match allowed.configured_covering(&request) {
            Some(allow) => approve_configured(&request, &allow, &log),
            None => no_terminal(&request),
        };
        async move { decision }
    }))
}

/// Approves a call an `[[allow]]` of noetic.toml covers: said on stderr, kept in `log` for the ledger.
fn approve_configured(request: &ApprovalRequest, allow: &str, log: &AllowLog) -> Approval {
    errln!("approved without asking: noetic.toml allows {allow}");
    record(log, allowed_entry(request, allow));
    Approval::Approve
}

/// Sends each call to `tx` (the chat loop asks the user) and waits for the answer.
pub fn via_channel(tx: mpsc::UnboundedSender<Pending>) -> Arc<dyn Approver> {
    Arc::new(FnApprover(move |request: ApprovalRequest| {
        let tx = tx.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            if tx.send(Pending { request, reply }).is_err() {
                return Approval::Reject { reason: "the terminal is gone; nobody can approve the call".to_owned() };
            }
            answer.await.unwrap_or(Approval::Reject { reason: "the question was dropped unanswered".to_owned() })
        }
    }))
}

/// Asks on the terminal (stderr for a `write_file` diff and the question, a line of stdin for the answer);
/// rejects without a terminal. A line that is not an answer is steered into the session set in `session` (see
/// [`decide`]); `a` approves the call and the same call again, `always matching "PATTERN"` the calls the
/// pattern covers (see [`decide_call`]).
pub fn at_terminal(
    session: Arc<OnceLock<Session>>,
    workspace: Workspace,
    allowed: Remembered,
    log: AllowLog,
) -> Arc<dyn Approver> {
    if !std::io::stdin().is_terminal() {
        return without_terminal(allowed, log);
    }
    let always: Arc<Mutex<Remembered>> = Arc::new(Mutex::new(allowed));
    Arc::new(FnApprover(move |request: ApprovalRequest| {
        let (session, workspace, always, log) = (session.clone(), workspace.clone(), always.clone(), log.clone());
        async move {
            let covering = always.lock().ok().map(|a| (a.configured_covering(&request), a.covering(&request)));
            match covering {
                Some((Some(allow), _)) => return approve_configured(&request, &allow, &log),
                Some((None, Some(grant))) => {
                    errln!("approved without asking: you allowed {grant} in this run");
                    return Approval::Approve;
                }
                _ => {}
            }
            let shown = request.clone();
            let asked = tokio::task::spawn_blocking(move || {
                if let Some(preview) = preview(&shown, &workspace) {
                    errln!("{preview}");
                }
                err!("{}", question(&shown));
                let mut line = String::new();
                if std::io::stdin().lock().read_line(&mut line)? == 0 {
                    return Ok(None);
                }
                Ok::<_, std::io::Error>(Some(line))
            })
            .await;
            match asked {
                Ok(Ok(Some(line))) => {
                    // The lock is let go before the await: an "always" answer needs no session.
                    let always = always.lock().ok().and_then(|mut a| decide_always(&line, &request, &mut a));
                    let decided = match always {
                        Some(decided) => decided,
                        None => decide(&line, session.get()).await,
                    };
                    decided.unwrap_or_else(|(decision, why)| {
                        errln!("{why}");
                        decision
                    })
                }
                Ok(Ok(None)) => declined(),
                _ => Approval::Reject { reason: "the terminal could not be read".to_owned() },
            }
        }
    }))
}

#[cfg(test)]
mod tests;
