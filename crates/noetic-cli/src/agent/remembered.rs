//! Approvals remembered for the rest of a chat or run. A remembered approval is bound to what was approved:
//!
//! * `a` / `always` remembers the tool with the exact arguments shown (their SHA-256, see
//!   [`ApprovalRequest::arguments_sha256`]): the same call again runs without a question, a call with any other
//!   arguments is asked about.
//! * `always matching "PATTERN"` (also written `always allow TOOL matching "PATTERN"`) remembers the calls of the
//!   tool whose subject matches the glob (`*` any text, `?` one character): `run_command`'s command, a file
//!   tool's path, or else the arguments' canonical JSON. A command that chains or redirects (`;`, `&`, `|`, `` ` ``,
//!   `$(`, `>`, `<`, a newline) is covered only when the pattern itself has that character: `cargo test*` never
//!   covers `cargo test && rm -rf ~`.

use std::sync::{Arc, Mutex};

use globset::{GlobBuilder, GlobMatcher};
use noetic::steering::{LedgerEntry, LedgerKind, SteeringAction};
use noetic::tool::ApprovalRequest;
use serde::Deserialize;

use crate::output::render::visible;

/// An `[[allow]]` table: calls of `tool` whose command (or path) matches the glob `matches` run without an
/// approval question, in every chat and run that reads this file.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AllowToml {
    /// The tool (`run_command`, `write_file`, a tool a `require_approval` rule names).
    pub tool: String,
    /// The glob (`*` any text, `?` one character).
    pub matches: String,
}

/// One remembered approval.
#[derive(Debug, Clone)]
enum Grant {
    /// This tool with exactly these arguments.
    Exact { tool: String, arguments_sha256: String },
    /// Calls of this tool whose subject matches; `configured`: an `[[allow]]` of noetic.toml.
    Matching { tool: String, pattern: String, glob: GlobMatcher, configured: bool },
}

/// The approvals remembered so far.
#[derive(Debug, Clone, Default)]
pub struct Remembered {
    grants: Vec<Grant>,
}

/// The ledger entries of the calls an `[[allow]]` of noetic.toml approved, shared by the approver that gave them and
/// the command that keeps the ledger; also chained into the session's ledger once [`Allowed::chain_into`] named it.
pub type AllowLog = Arc<Allowed>;

/// What [`AllowLog`] holds.
#[derive(Default)]
pub struct Allowed {
    entries: Mutex<Vec<LedgerEntry>>,
    session: std::sync::OnceLock<noetic::agent::Session>,
}

impl Allowed {
    /// From now on each entry is also added to `session`'s ledger (chained in its log, as the steering layer's).
    pub fn chain_into(&self, session: noetic::agent::Session) {
        let _ = self.session.set(session);
    }
}

/// The ledger entry for `request`, approved without a question by the `[[allow]]` described as `allow`.
pub fn allowed_entry(request: &ApprovalRequest, allow: &str) -> LedgerEntry {
    LedgerEntry {
        tool_name: Some(request.tool.clone()),
        tool_args: Some(request.arguments.clone()),
        rule_id: Some(format!("[[allow]] {allow} of noetic.toml")),
        guidance: Some("approved without a question".to_owned()),
        ..LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)
    }
}

/// Keeps `entry` in `log` and the session's ledger (a poisoned log is still written: it only holds entries).
pub fn record(log: &AllowLog, entry: LedgerEntry) {
    if let Some(session) = log.session.get() {
        session.record_decision(&entry);
    }
    log.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(entry);
}

/// Takes the entries `log` holds.
pub fn take(log: &AllowLog) -> Vec<LedgerEntry> {
    std::mem::take(&mut *log.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

/// Characters that chain, substitute or redirect in a shell command.
const SHELL_CONTROL: &[&str] = &[";", "&", "|", "`", "$(", ">", "<", "\n", "\r"];

/// What a pattern is matched against: `run_command`'s command, a file tool's path, else the canonical JSON.
fn subject(request: &ApprovalRequest) -> String {
    let text = |key: &str| request.arguments.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let named = if request.tool == "run_command" { text("command") } else { text("path") };
    named.unwrap_or_else(|| noetic::digest::canonical_json(&request.arguments))
}

/// A glob for an always-allow pattern: `*` crosses `/` (a command or a path anywhere below).
pub fn compile(pattern: &str) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("the pattern {pattern:?} is not a valid glob ({e}); write it like \"cargo test*\""))
}

impl Grant {
    fn covers(&self, request: &ApprovalRequest) -> bool {
        match self {
            Grant::Exact { tool, arguments_sha256 } => {
                *tool == request.tool && *arguments_sha256 == request.arguments_sha256
            }
            Grant::Matching { tool, pattern, glob, .. } => {
                if *tool != request.tool {
                    return false;
                }
                let subject = subject(request);
                let chains = request.tool == "run_command"
                    && SHELL_CONTROL.iter().any(|c| subject.contains(c) && !pattern.contains(c));
                !chains && glob.is_match(&subject)
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Grant::Exact { tool, .. } => format!("{} with exactly these arguments", visible(tool)),
            Grant::Matching { tool, pattern, .. } => format!("{} matching {:?}", visible(tool), visible(pattern)),
        }
    }
}

impl Remembered {
    /// The `[[allow]]` tables of noetic.toml, remembered from the start (their patterns were checked when the
    /// file was read; one that does not compile is an error here too).
    pub fn configured(allow: &[AllowToml]) -> Result<Self, String> {
        let grants = allow
            .iter()
            .map(|a| {
                let glob = compile(&a.matches)?;
                Ok(Grant::Matching { tool: a.tool.clone(), pattern: a.matches.clone(), glob, configured: true })
            })
            .collect::<Result<_, String>>()?;
        Ok(Remembered { grants })
    }

    /// The `[[allow]]` of noetic.toml that covers `request`, described (`run_command matching "cargo test*"`).
    pub fn configured_covering(&self, request: &ApprovalRequest) -> Option<String> {
        self.grants
            .iter()
            .find(|g| matches!(g, Grant::Matching { configured: true, .. }) && g.covers(request))
            .map(Grant::describe)
    }

    /// The remembered approval that covers `request`, described for the user; `None`: ask.
    pub fn covering(&self, request: &ApprovalRequest) -> Option<String> {
        self.grants.iter().find(|g| g.covers(request)).map(Grant::describe)
    }

    /// Remembers the approval of `request` with exactly its arguments.
    pub fn exact(&mut self, request: &ApprovalRequest) {
        let (tool, arguments_sha256) = (request.tool.clone(), request.arguments_sha256.clone());
        self.grants.push(Grant::Exact { tool, arguments_sha256 });
    }

    /// Remembers calls of `tool` matching `pattern`; true when it covers `request` (the call being answered).
    pub fn matching(&mut self, request: &ApprovalRequest, pattern: &str) -> Result<bool, String> {
        let grant = Grant::Matching {
            tool: request.tool.clone(),
            pattern: pattern.to_owned(),
            glob: compile(pattern)?,
            configured: false,
        };
        let covers = grant.covers(request);
        self.grants.push(grant);
        Ok(covers)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    fn command(text: &str) -> ApprovalRequest {
        ApprovalRequest::new("run_command", "c", json!({ "command": text }), None)
    }

    #[test]
    fn an_exact_approval_covers_the_same_arguments_only() {
        let mut remembered = Remembered::default();
        remembered.exact(&command("echo first"));
        assert_eq!(
            remembered.covering(&command("echo first")).as_deref(),
            Some("run_command with exactly these arguments")
        );
        assert_eq!(remembered.covering(&command("echo second")), None);
        assert_eq!(remembered.covering(&command("echo first ")), None);
        let same_args_other_tool = ApprovalRequest::new("write_file", "c", json!({"command": "echo first"}), None);
        assert_eq!(remembered.covering(&same_args_other_tool), None);
    }

    #[test]
    fn a_pattern_covers_matching_commands_but_never_a_chained_or_redirected_one() {
        let mut remembered = Remembered::default();
        assert!(remembered.matching(&command("cargo test -p noetic"), "cargo test*").unwrap());
        assert!(remembered.covering(&command("cargo test")).is_some());
        assert!(remembered.covering(&command("cargo test --workspace -- --nocapture")).is_some());
        for other in [
            "cargo build",
            "cargo test && rm -rf ~",
            "cargo test; curl x",
            "cargo test | sh",
            "cargo test > /etc/passwd",
            "cargo test $(rm -rf ~)",
            "cargo test `id`",
            "cargo test\nrm -rf ~",
        ] {
            assert_eq!(remembered.covering(&command(other)), None, "{other:?}");
        }
    }

    #[test]
    fn an_allow_of_the_configuration_covers_what_its_pattern_does_and_says_where_it_comes_from() {
        let allow = [AllowToml { tool: "run_command".into(), matches: "cargo test*".into() }];
        let mut remembered = Remembered::configured(&allow).unwrap();
        assert_eq!(
            remembered.configured_covering(&command("cargo test -p noetic")).as_deref(),
            Some("run_command matching \"cargo test*\"")
        );
        assert_eq!(remembered.configured_covering(&command("cargo test && curl x | sh")), None);
        assert_eq!(remembered.configured_covering(&command("cargo build")), None);
        remembered.exact(&command("cargo build"));
        assert!(remembered.covering(&command("cargo build")).is_some());
        assert_eq!(remembered.configured_covering(&command("cargo build")), None, "a chat's answer is not the file's");
    }

    #[test]
    fn a_pattern_for_a_file_tool_matches_the_path() {
        let mut remembered = Remembered::default();
        let write = |path: &str| ApprovalRequest::new("write_file", "c", json!({"path": path, "content": "x"}), None);
        assert!(remembered.matching(&write("notes/a.md"), "notes/*").unwrap());
        assert!(remembered.covering(&write("notes/sub/b.md")).is_some());
        assert!(remembered.covering(&write("src/main.rs")).is_none());
        assert!(!remembered.matching(&write("x"), "nope").unwrap(), "a pattern that does not cover the call");
        assert!(remembered.matching(&write("x"), "a[").unwrap_err().contains("is not a valid glob"));
    }
}
