//! `noetic rules test RULES --against DB|LEDGER_FILE`: the recorded decisions of a session database (SQLite file
//! or PostgreSQL URL) or of a `--ledger-out` file decided again by a rules file; the decisions that change are
//! printed, then a summary. Exit status 1 when a decision changes, unless `--accept-changes`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use noetic::agent::log::{Recording, RecordingFilter};
use noetic::steering::replay::{Recorded, Replay, Replayed, Verdicts};
use noetic::steering::{LedgerEntry, LedgerKind, SteeringAction, SteeringConfig, SteeringLayer, steering};

use super::ToolNames;
use crate::agent::workspace::Workspace;
use crate::config::source::Source;
use crate::output::render::printable;
use crate::output::{errln, outln};

/// The flags of `noetic rules test`.
#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// The rules file to try (TOML, or JSON with a .json extension).
    pub rules: PathBuf,
    /// The recorded decisions: a session database (an SQLite file or a postgres:// URL) or a ledger file
    /// written with --ledger-out (JSON lines; its model-turn decisions cannot be replayed: it keeps no responses).
    #[arg(long, value_name = "DB|LEDGER_FILE")]
    pub against: PathBuf,
    /// Only this session of the database (repeat for more; default: every session).
    #[arg(long = "session", value_name = "KEY")]
    pub sessions: Vec<String>,
    /// Only decisions made at or after this time (RFC 3339, e.g. 2026-11-25T18:30:00Z, or a date, 2026-11-25).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<SystemTime>,
    /// Ask the judges of new or changed LLM rules (one call per rule and decision; the count is printed first).
    /// Needs a model: --model, --provider, --base-url as for chat.
    #[arg(long)]
    pub rejudge: bool,
    /// Make the --rejudge calls without asking (needed when there is no terminal to ask at).
    #[arg(long, requires = "rejudge")]
    pub yes: bool,
    /// Exit 0 even when decisions change.
    #[arg(long)]
    pub accept_changes: bool,
    /// Print one JSON object: the changes, the decisions that could not be replayed, and the summary.
    #[arg(long)]
    pub json: bool,
    /// The workspace rules on file paths resolve paths in, as the recorded agent's was (default: .).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub workspace: PathBuf,
    #[command(flatten)]
    pub model: crate::provider::ModelArgs,
}

fn parse_since(text: &str) -> Result<SystemTime, String> {
    let text = text.trim();
    let full = if text.len() == 10 { format!("{text}T00:00:00Z") } else { text.to_owned() };
    noetic::time::parse_rfc3339(&full).ok_or_else(|| {
        format!("'{text}' is not a time; give an RFC 3339 time (2026-11-25T18:30:00Z) or a date (2026-11-25)")
    })
}

/// Runs `noetic rules test`.
pub async fn run(args: TestArgs) -> Result<(), Box<dyn std::error::Error>> {
    let set = super::load(&Source::read(&args.rules)?, &ToolNames::any_server())?;
    let workspace = Workspace::open(&args.workspace)?;
    // LLM rules without a `model` are judged by the agent's model, as chat and run do: its id is in their
    // fingerprint, so give the --model the sessions were recorded with.
    let judge_model = if args.model.local {
        crate::provider::local::LOCAL_MODEL_ID.to_owned()
    } else {
        crate::provider::model_id(args.model.model.as_deref())
    };
    let layer = steering(SteeringConfig::new(set.steering_rules(&judge_model, &workspace)))
        .map_err(|e| format!("{}: {e}", args.rules.display()))?;
    let rewrites = set.rewrite_ids();
    if !rewrites.is_empty() {
        crate::output::errln!(
            "note: rewrite rule(s) {} are not replayed: a replay decides recorded calls again, it does not change them",
            rewrites.join(", ")
        );
    }
    let source = Against::open(&args).await?;
    let recorded = source.decisions();
    let mut verdicts = Verdicts::default();
    let mut replay = noetic::steering::replay(&layer, recorded.iter().copied(), &verdicts);
    let needed = replay.summary.judge_calls_needed;
    if args.rejudge && needed > 0 {
        verdicts = rejudge(&args, &layer, &recorded, &replay, &judge_model).await?;
        replay = noetic::steering::replay(&layer, recorded.iter().copied(), &verdicts);
    }
    if args.json {
        outln!("{}", json(&args, source.describe(), &replay));
    } else {
        for line in lines(&replay, args.rejudge) {
            outln!("{line}");
        }
    }
    let changed = replay.summary.changed();
    if changed > 0 && !args.accept_changes {
        return Err(format!(
            "{changed} recorded decision(s) change under {}; review them, then pass --accept-changes to accept them",
            args.rules.display()
        )
        .into());
    }
    Ok(())
}

/// Asks the judges replay needs, after saying how many calls that is and getting a yes.
async fn rejudge(
    args: &TestArgs,
    layer: &SteeringLayer,
    recorded: &[Recorded<'_>],
    replay: &Replay<'_>,
    judge_model: &str,
) -> Result<Verdicts, Box<dyn std::error::Error>> {
    let needed = replay.summary.judge_calls_needed;
    errln!(
        "--rejudge: {needed} judge call(s) to make (new or changed LLM rules; judge model {judge_model} unless a rule names one)"
    );
    if !args.yes && !confirmed().await? {
        return Err(format!(
            "nothing was judged: the {needed} judge call(s) were not confirmed; answer y, or pass --yes to make them \
             without asking"
        )
        .into());
    }
    let resolved = args.model.resolve(&crate::config::Defaults::default(), None).await?;
    let model: Arc<dyn noetic::model::Model> = resolved.model;
    Ok(noetic::steering::rejudge(layer, model, recorded, replay).await?)
}

/// Asks at the terminal; false without one (fail closed).
async fn confirmed() -> Result<bool, String> {
    use std::io::{BufRead, IsTerminal};
    if !std::io::stdin().is_terminal() {
        return Ok(false);
    }
    crate::output::err!("Make them? [y/N] ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| format!("cannot read the answer: {e}"))?
    .map_err(|e| format!("cannot read the answer: {e}"))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Where the recorded decisions come from.
enum Against {
    /// A session store's decisions, and where the store is (a URL without its password).
    Database(Recording, String),
    /// A ledger file's decisions, with their turn (counted from the file's execution ends).
    File { name: String, entries: Vec<(u64, LedgerEntry)> },
}

impl Against {
    async fn open(args: &TestArgs) -> Result<Against, Box<dyn std::error::Error>> {
        let path = &args.against;
        let filter = RecordingFilter { sessions: args.sessions.clone(), since: args.since };
        if crate::sessions::is_postgres(path) {
            let store = crate::sessions::open_at(path).await?;
            return Ok(Against::Database(Recording::load(store.shared().as_ref(), &filter).await?, store.describe()));
        }
        let shown = path.display();
        let mut head = [0u8; 16];
        let read = std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).map_err(|e| {
            format!(
                "cannot read '{shown}': {e}; give a session database (an SQLite file or a postgres:// URL) or a \
                 ledger file written with --ledger-out"
            )
        })?;
        if read == 16 && &head == b"SQLite format 3\0" {
            noetic_database(path)?;
            let store = crate::sessions::open_at(path).await?;
            return Ok(Against::Database(Recording::load(store.shared().as_ref(), &filter).await?, store.describe()));
        }
        if !args.sessions.is_empty() {
            return Err(format!(
                "'{shown}' is a ledger file, whose entries name no session; --session applies to a session database"
            )
            .into());
        }
        let entries = read_ledger(path)?;
        let entries = entries.into_iter().filter(|(_, e)| args.since.is_none_or(|s| e.timestamp >= s)).collect();
        Ok(Against::File { name: shown.to_string(), entries })
    }

    /// What it is, for output.
    fn describe(&self) -> &str {
        match self {
            Against::Database(_, place) => place,
            Against::File { name, .. } => name,
        }
    }

    fn decisions(&self) -> Vec<Recorded<'_>> {
        match self {
            Against::Database(recording, _) => recording.decisions().collect(),
            Against::File { name, entries } => {
                entries.iter().map(|(turn, entry)| Recorded::new(name, Some(*turn), entry)).collect()
            }
        }
    }
}

/// Refuses an SQLite file that is not a noetic session database, or is of a newer noetic, before the store
/// opens it (which would add its tables to a foreign file).
fn noetic_database(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let version: i64 = rusqlite::Connection::open_with_flags(path, flags)
        .and_then(|conn| conn.query_row("PRAGMA user_version", [], |r| r.get(0)))
        .map_err(|e| format!("cannot read the database '{shown}': {e}"))?;
    if version == 0 {
        return Err(format!(
            "'{shown}' is an SQLite database but not a noetic session database (it has no noetic schema); give the \
             file chat, run or serve keep sessions in (--db), or a ledger file"
        ));
    }
    let newest = noetic_sqlite::LOG_SCHEMA_VERSION;
    if version > newest {
        return Err(format!(
            "'{shown}' was written by a newer noetic (schema version {version}; this one reads up to {newest}); \
             upgrade noetic to replay it (nothing was changed)"
        ));
    }
    Ok(())
}

/// The entries of a `--ledger-out` file, each with its turn. A line that is not an entry is an error naming
/// the file and line.
fn read_ledger(path: &Path) -> Result<Vec<(u64, LedgerEntry)>, String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read the ledger file '{shown}': {e}"))?;
    let (mut entries, mut turn) = (Vec::new(), 1);
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry: LedgerEntry = serde_json::from_str(line).map_err(|e| {
            format!(
                "{shown}:{}: not a ledger entry ({e}); the file should hold one JSON entry a line as --ledger-out \
                 writes them: fix or delete that line, or replay against the session database",
                number + 1
            )
        })?;
        let ends_turn = entry.outcome.is_some();
        entries.push((turn, entry));
        if ends_turn {
            turn += 1;
        }
    }
    Ok(entries)
}

fn action(action: SteeringAction) -> &'static str {
    match action {
        SteeringAction::Allow => "ALLOW",
        SteeringAction::Guide => "GUIDE",
        SteeringAction::Deny => "DENY",
    }
}

/// Where a decision was made and what it was about, on one line; the arguments are untrusted model text.
fn place(d: &Replayed<'_>) -> String {
    let turn = d.turn.map(|t| format!(" · turn {t}")).unwrap_or_default();
    let what = match (d.kind, d.tool) {
        (LedgerKind::ModelTurn, _) => "model turn".to_owned(),
        (_, Some(tool)) => {
            let args = d.args.map(|a| format!(" {a}")).unwrap_or_default();
            format!("tool {tool}{args}")
        }
        (_, None) => "tool call".to_owned(),
    };
    printable(&format!("session {}{turn} · {what}", d.session)).replace('\n', "\\n")
}

/// The changed decisions, then the summary, for a person.
fn lines(replay: &Replay<'_>, rejudged: bool) -> Vec<String> {
    let mut lines = Vec::new();
    for d in replay.decisions.iter().filter(|d| d.changed()) {
        let Ok(new) = &d.new else { continue };
        let by = new.rule_id.as_deref().map(|r| format!(" by {r}")).unwrap_or_else(|| " (no rule objects)".into());
        let was = d.old_rule.map(|r| format!(" (was by {r})")).unwrap_or_default();
        let escalated = if new.escalated { " (escalated)" } else { "" };
        lines.push(format!("{}: {} → {}{by}{escalated}{was}", place(d), action(d.old), action(new.action)));
    }
    let s = &replay.summary;
    lines.push(format!(
        "replayed {} decision(s): {} unchanged, {} changed (allow→deny {}, deny→allow {}, guide changes {})",
        s.replayed,
        s.unchanged,
        s.changed(),
        s.allow_to_deny,
        s.deny_to_allow,
        s.guide_changes
    ));
    if s.verdicts_reused + s.verdicts_fresh > 0 {
        lines.push(format!(
            "LLM judges: {} recorded verdict(s) reused, {} judged again",
            s.verdicts_reused, s.verdicts_fresh
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for d in &replay.decisions {
        let Err(why) = &d.new else { continue };
        let text = why.describe();
        if seen.insert(text.clone()) {
            let count = replay.decisions.iter().filter(|o| o.new.as_ref().err() == Some(why)).count();
            lines.push(format!("not replayable: {count} decision(s): {text}"));
        }
    }
    if s.judge_calls_needed > 0 && !rejudged {
        lines.push(format!("--rejudge would make {} judge call(s)", s.judge_calls_needed));
    }
    lines
}

/// The replay as one JSON object.
fn json(args: &TestArgs, against: &str, replay: &Replay<'_>) -> serde_json::Value {
    let place = |d: &Replayed<'_>| {
        serde_json::json!({
            "index": d.index, "session": d.session, "turn": d.turn, "kind": d.kind, "tool": d.tool, "args": d.args,
            "old": d.old, "old_rule": d.old_rule,
        })
    };
    let changes: Vec<serde_json::Value> = replay
        .decisions
        .iter()
        .filter(|d| d.changed())
        .filter_map(|d| {
            let new = d.new.as_ref().ok()?;
            let mut value = place(d);
            value["new"] = serde_json::json!(new.action);
            value["rule"] = serde_json::json!(new.rule_id);
            value["guidance"] = serde_json::json!(new.guidance);
            value["escalated"] = serde_json::json!(new.escalated);
            Some(value)
        })
        .collect();
    let unreplayable: Vec<serde_json::Value> = replay
        .decisions
        .iter()
        .filter_map(|d| {
            let why = d.new.as_ref().err()?;
            let mut value = place(d);
            value["why"] = serde_json::json!(why);
            Some(value)
        })
        .collect();
    let mut summary = serde_json::json!(replay.summary);
    summary["changed"] = serde_json::json!(replay.summary.changed());
    serde_json::json!({
        "rules": args.rules.display().to_string(),
        "against": against,
        "changes": changes,
        "not_replayable": unreplayable,
        "summary": summary,
    })
}
