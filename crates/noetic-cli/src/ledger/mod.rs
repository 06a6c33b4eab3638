//! Steering ledgers as JSON lines: written by `chat`/`run` with `--ledger-out FILE` (chained: see [`audit`]),
//! shown by `noetic ledger`.

pub(crate) mod audit;
pub(crate) mod key;

use std::io::Write;
use std::path::Path;

use noetic::steering::LedgerEntry;

use crate::output::render::{Style, is_routine, ledger_line, routine_left_out};
use crate::output::{errln, outln};

/// Appends entries to `path`, one JSON object a line (the file is created if needed).
pub fn append(path: &Path, entries: &[LedgerEntry]) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open the ledger file '{}': {e}", path.display()))?;
    let mut text = String::new();
    for entry in entries {
        let line = serde_json::to_string(entry).map_err(|e| format!("cannot write a ledger entry as JSON: {e}"))?;
        text.push_str(&line);
        text.push('\n');
    }
    file.write_all(text.as_bytes()).map_err(|e| format!("cannot write to the ledger file '{}': {e}", path.display()))
}

/// A `--ledger-out` file: the session's ledger entries as its log chained them (see `noetic ledger verify`),
/// appended after each turn — those not written yet, an async verdict that landed after its turn included.
pub struct LedgerOut {
    path: std::path::PathBuf,
    /// The session whose entries were written, and how many of them.
    session: String,
    written: usize,
}

impl LedgerOut {
    /// A file for `session`'s entries from now on (those it holds already are not written).
    pub fn new(path: std::path::PathBuf, session: &noetic::agent::Session) -> Self {
        LedgerOut { path, session: session.key().to_owned(), written: session.ledger().len() }
    }

    /// Appends the entries of `session` not written yet (all of them for a session other than the last one).
    pub fn flush(&mut self, session: &noetic::agent::Session) -> Result<(), String> {
        if session.key() != self.session {
            self.session = session.key().to_owned();
            self.written = 0;
        }
        let ledger = session.ledger();
        let new = ledger.get(self.written..).unwrap_or_default();
        append(&self.path, new)?;
        self.written = ledger.len();
        Ok(())
    }
}

/// A ledger as a person reads it: the entries of each turn (an execution; its last entry says how it ended)
/// under a heading with the turn's start, each entry with its time of day, the deciding rule and how it
/// evaluated; a shadow rule's would-be decision under the live one, marked where it differs, and a count of the
/// disagreements at the end. Model answers that passed every rule are counted on one line unless `verbose`; `how` says what
/// shows them.
pub fn view(style: &Style, entries: &[LedgerEntry], verbose: bool, how: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let turns = entries.split_inclusive(|e| e.outcome.is_some()).filter(|turn| !turn.is_empty());
    for (number, turn) in turns.enumerate() {
        let started = noetic::time::rfc3339(turn[0].timestamp);
        let running = if turn.last().is_some_and(|e| e.outcome.is_some()) { "" } else { " (not ended)" };
        lines.push(style.bold(&format!("turn {} · started {started}{running}", number + 1)));
        let routine = if verbose { 0 } else { turn.iter().filter(|e| is_routine(e)).count() };
        for entry in turn.iter().filter(|e| verbose || !is_routine(e)) {
            // `…T18:30:05.123Z` → `18:30:05.123`: the day is in the heading.
            let at = noetic::time::rfc3339(entry.timestamp);
            let time = at.get(11..23).unwrap_or(&at);
            // A shadow decision sits under the live one it was made beside, at the same moment.
            let time = if entry.shadow.is_some() { " ".repeat(time.len()) } else { style.dim(time) };
            lines.push(format!("  {time}{}", ledger_line(style, entry)));
        }
        if let Some(line) = routine_left_out(routine, how) {
            lines.push(style.dim(&line));
        }
    }
    if let Some(line) = shadow_summary(entries) {
        lines.push(style.bold(&line));
    }
    lines
}

/// How many shadow decisions the entries hold and how many differ from the live decision beside them; `None`
/// without shadow rules.
pub fn shadow_summary(entries: &[LedgerEntry]) -> Option<String> {
    let shadows = entries.iter().filter(|e| e.shadow.is_some()).count();
    let differ = entries.iter().filter(|e| e.disagrees()).count();
    (shadows > 0).then(|| format!("shadow rules: {shadows} decision(s), {differ} disagree(s) with the live decision"))
}

/// Prints the entries of a JSON-lines ledger file. Lines that are not ledger entries are reported with their
/// number (on stderr) and make the command fail after the good ones are shown.
pub fn show(path: &Path, plain: bool, json: bool, verbose: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("cannot read the ledger file '{}': {e}; write one with --ledger-out FILE", path.display())
    })?;
    let style = Style::detect(plain);
    let (mut entries, mut bad) = (Vec::new(), 0);
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<LedgerEntry>(line) {
            Ok(entry) => entries.push(entry),
            Err(e) => {
                errln!("{}:{}: not a ledger entry: {e}", path.display(), number + 1);
                bad += 1;
            }
        }
    }
    if json {
        for entry in &entries {
            let line = serde_json::to_string(entry).map_err(|e| format!("cannot write a ledger entry as JSON: {e}"))?;
            outln!("{line}");
        }
    } else {
        for line in view(&style, &entries, verbose, "--verbose") {
            outln!("{line}");
        }
        let all = entries.len();
        outln!("{}", style.dim(&format!("{all} entr{} in {}", if all == 1 { "y" } else { "ies" }, path.display())));
    }
    if bad > 0 {
        return Err(format!(
            "{bad} line(s) of '{}' are not ledger entries (see above); the file should hold one JSON entry a line as \
             written by --ledger-out",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::{Duration, SystemTime};

    use noetic::layer::Outcome;
    use noetic::steering::{Evaluator, LedgerKind, SteeringAction};

    use super::*;

    fn entry(kind: LedgerKind, action: SteeringAction, at_ms: u64) -> LedgerEntry {
        LedgerEntry {
            timestamp: SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_000_000_000 + at_ms),
            tool_name: Some("delete_file".into()),
            ..LedgerEntry::new(kind, action)
        }
    }

    fn end(at_ms: u64) -> LedgerEntry {
        LedgerEntry { outcome: Some(Outcome::Success), ..entry(LedgerKind::Custom, SteeringAction::Allow, at_ms) }
    }

    #[test]
    fn the_view_groups_entries_by_turn_with_times_and_counts_routine_allows_per_turn() {
        let denied = LedgerEntry {
            rule_id: Some("keep".into()),
            evaluator: Some(Evaluator::LlmSync),
            guidance: Some("no".into()),
            ..entry(LedgerKind::ToolCall, SteeringAction::Deny, 5)
        };
        let entries = vec![
            entry(LedgerKind::ModelTurn, SteeringAction::Allow, 0),
            denied,
            end(9),
            entry(LedgerKind::ToolCall, SteeringAction::Allow, 61_000),
        ];
        let plain = Style::detect(true);
        assert_eq!(
            view(&plain, &entries, false, "--verbose"),
            [
                "turn 1 · started 2026-11-18T11:06:40.000Z",
                "  11:06:40.005  DENY    tool delete_file by keep (LLM judge): no",
                "  11:06:40.009  ALLOW   execution ended: Success",
                "  (1 model answer(s) passed every rule; --verbose shows them)",
                "turn 2 · started 2026-11-18T11:07:41.000Z (not ended)",
                "  11:07:41.000  ALLOW   tool delete_file (no rule objected)",
            ]
        );
        let verbose = view(&plain, &entries, true, "--verbose");
        assert_eq!(verbose[1], "  11:06:40.000  ALLOW   model turn (0 tokens out) (no rule objected)");
    }

    #[test]
    fn shadow_decisions_sit_under_the_live_one_and_disagreements_are_counted() {
        use noetic::steering::Shadow;
        let live = LedgerEntry {
            tool_args: Some(serde_json::json!({"path": "a"})),
            ..entry(LedgerKind::ToolCall, SteeringAction::Allow, 5)
        };
        let shadow = |rule: &str, action, guidance: Option<&str>| LedgerEntry {
            rule_id: Some(rule.into()),
            evaluator: Some(Evaluator::Predicate),
            guidance: guidance.map(Into::into),
            shadow: Some(Shadow { live: SteeringAction::Allow }),
            ..entry(LedgerKind::ToolCall, action, 5)
        };
        let escalated = LedgerEntry {
            rule_id: Some("dry".into()),
            guidance: Some("ignored twice".into()),
            escalated: true,
            ..entry(LedgerKind::ToolCall, SteeringAction::Deny, 7)
        };
        let entries = vec![
            live,
            shadow("keep-notes", SteeringAction::Deny, Some("notes are kept")),
            shadow("also", SteeringAction::Allow, None),
            escalated,
            end(9),
        ];
        assert_eq!(
            view(&Style::detect(true), &entries, false, "--verbose"),
            [
                "turn 1 · started 2026-11-18T11:06:40.005Z",
                "  11:06:40.005  ALLOW   tool delete_file {\"path\":\"a\"} (no rule objected)",
                "                  shadow DENY    by keep-notes (predicate): notes are kept ≠ live ALLOW",
                "                  shadow ALLOW   by also (predicate) = live ALLOW",
                "  11:06:40.007  DENY    tool delete_file by dry (escalated): ignored twice",
                "  11:06:40.009  ALLOW   execution ended: Success",
                "shadow rules: 2 decision(s), 1 disagree(s) with the live decision",
            ]
        );
    }

    #[test]
    fn an_allow_llm_judges_decided_names_the_judged_rules_and_the_evaluator() {
        let judged = LedgerEntry {
            rule_id: Some("reports-go-to-drafts,no-secrets".into()),
            evaluator: Some(Evaluator::LlmSync),
            ..entry(LedgerKind::ToolCall, SteeringAction::Allow, 5)
        };
        let lines = view(&Style::detect(true), &[judged, end(9)], false, "--verbose");
        assert_eq!(lines[1], "  11:06:40.005  ALLOW   tool delete_file by reports-go-to-drafts,no-secrets (LLM judge)");
    }
}
