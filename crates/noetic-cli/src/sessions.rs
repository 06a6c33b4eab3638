//! Sessions on disk: where the database is (`--db`, `db` in noetic.toml, the user's data directory), and the
//! `noetic sessions` command (list, show, rm).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use noetic::agent::{SessionStore, SessionSummary};
use noetic::model::Item;
use noetic_sqlite::SqliteStore;

use crate::config::Defaults;
use crate::output::outln;
use crate::render;

/// Where sessions are kept.
#[derive(Args, Clone, Debug, Default)]
pub struct StoreArgs {
    /// The session database (default: `db` in noetic.toml, else $XDG_DATA_HOME/noetic/noetic.db, else
    /// ~/.local/share/noetic/noetic.db).
    #[arg(long, value_name = "FILE", conflicts_with = "no_store")]
    pub db: Option<PathBuf>,
    /// Keep the session in memory only: nothing is written, nothing can be continued later.
    #[arg(long)]
    pub no_store: bool,
}

/// The database file: the flag, else noetic.toml's `db`, else the user's data directory.
pub fn db_path(args: &StoreArgs, defaults: &Defaults) -> Result<PathBuf, String> {
    if let Some(path) = args.db.clone().or_else(|| defaults.db.clone()) {
        return Ok(path);
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .ok_or("no data directory: set XDG_DATA_HOME or HOME, or give --db FILE (or --no-store)")?;
    Ok(data.join("noetic").join("noetic.db"))
}

/// The store, unless `--no-store`.
pub fn open(args: &StoreArgs, defaults: &Defaults) -> Result<Option<Arc<SqliteStore>>, String> {
    if args.no_store {
        return Ok(None);
    }
    let path = db_path(args, defaults)?;
    SqliteStore::open(&path).map(|store| Some(Arc::new(store))).map_err(|e| e.to_string())
}

/// A fresh session name: the command, the time (UTC) and a random suffix (`chat-20261124-093015-k3x9`).
pub fn new_name(prefix: &str) -> String {
    let now = noetic::time::rfc3339(SystemTime::now());
    let digits: String = now.chars().take(19).filter(char::is_ascii_digit).collect();
    let (date, time) = digits.split_at(digits.len().min(8));
    let suffix: String = (0..4).map(|_| fastrand::alphanumeric().to_ascii_lowercase()).collect();
    format!("{prefix}-{date}-{time}-{suffix}")
}

/// `noetic sessions`.
#[derive(Args, Debug)]
pub struct SessionsArgs {
    #[command(flatten)]
    pub config: crate::config::ConfigArg,
    /// The session database (as for chat).
    #[arg(long, value_name = "FILE", global = true)]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<SessionsCommand>,
}

#[derive(Subcommand, Debug)]
enum SessionsCommand {
    /// List the sessions (the default).
    List,
    /// Print a session's transcript, queued steering messages, steering ledger and whether a turn was left
    /// unfinished.
    Show {
        /// The session.
        key: String,
    },
    /// Delete a session.
    Rm {
        /// The session.
        key: String,
    },
    /// Queue a steering message for a session, also one another process (a chat, `noetic serve`) is running:
    /// that process shows it to the model at its next checkpoint.
    Steer {
        /// The session.
        key: String,
        /// The message.
        text: String,
    },
    /// Stop a session's turn wherever it runs (at its next checkpoint) and clear its queue.
    Stop {
        /// The session.
        key: String,
    },
}

/// Runs `noetic sessions`.
pub fn run(args: SessionsArgs, defaults: &Defaults) -> Result<(), Box<dyn std::error::Error>> {
    let path = db_path(&StoreArgs { db: args.db, no_store: false }, defaults)?;
    let writes = matches!(args.command, Some(SessionsCommand::Steer { .. }));
    if !path.exists() && !writes {
        outln!("no sessions yet ({} does not exist)", path.display());
        return Ok(());
    }
    let store = SqliteStore::open(&path)?;
    match args.command.unwrap_or(SessionsCommand::List) {
        SessionsCommand::List => list(&store.list()?, &path),
        SessionsCommand::Show { key } => {
            let Some(stored) = store.peek(&key)? else {
                return Err(format!(
                    "no session '{}' in {}; `noetic sessions` lists them",
                    render::visible(&key),
                    path.display()
                )
                .into());
            };
            outln!(
                "session {} — {} turn(s), {} item(s)",
                render::visible(&key),
                stored.snapshot.turns,
                stored.snapshot.history.len()
            );
            for item in &stored.snapshot.history {
                outln!("  {}", transcript_line(item));
            }
            for message in &stored.snapshot.queued {
                outln!("  queued: {}", render::visible(&message.text));
            }
            if let Some(turn) = &stored.unfinished {
                outln!(
                    "  unfinished turn in step '{}' (left by a stopped process): `noetic chat --session {}` offers to resume it",
                    render::visible(&turn.step_id),
                    render::visible(&key)
                );
            }
            let ledger = store.ledger(&key)?;
            outln!("  steering ledger ({} decision(s)):", ledger.len());
            let style = render::Style::detect(true);
            let mut entries = Vec::new();
            for entry in ledger {
                match serde_json::from_str::<noetic::steering::LedgerEntry>(&entry) {
                    Ok(entry) => entries.push(entry),
                    Err(e) => outln!("  (an unreadable ledger entry: {e})"),
                }
            }
            for line in crate::ledger::view(&style, &entries, true, "") {
                outln!("  {line}");
            }
        }
        SessionsCommand::Steer { key, text } => {
            let message = noetic::agent::SteerMessage::new(text);
            store.steer_elsewhere(&key, &message)?;
            outln!("queued for session {} (message {})", render::visible(&key), message.id);
        }
        SessionsCommand::Stop { key } => {
            if store.request_stop(&key, "stopped with noetic sessions stop")? {
                outln!("asked session {} to stop; its queue is cleared", render::visible(&key));
            } else {
                return Err(format!("no session '{}' in {}", render::visible(&key), path.display()).into());
            }
        }
        SessionsCommand::Rm { key } => {
            if store.delete(&key)? {
                outln!("deleted session {}", render::visible(&key));
            } else {
                return Err(format!("no session '{}' in {}", render::visible(&key), path.display()).into());
            }
        }
    }
    Ok(())
}

/// One transcript line, with model-written text escaped.
fn transcript_line(item: &Item) -> String {
    render::visible(&item.to_string())
}

fn list(sessions: &[SessionSummary], path: &std::path::Path) {
    if sessions.is_empty() {
        outln!("no sessions in {}", path.display());
        return;
    }
    outln!("{:<34} {:>5} {:>6} {:>6}  {:<10}  last activity", "session", "turns", "items", "queued", "unfinished");
    let now = SystemTime::now();
    for s in sessions {
        let ago = now.duration_since(s.updated_at).map_or(0, |d| d.as_secs());
        outln!(
            "{:<34} {:>5} {:>6} {:>6}  {:<10}  {}",
            render::visible(&s.key),
            s.turns,
            s.items,
            s.queued,
            if s.unfinished { "yes" } else { "no" },
            describe_age(ago)
        );
    }
}

fn describe_age(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86_400),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_new_session_name_says_what_and_when_and_two_differ() {
        let (a, b) = (new_name("chat"), new_name("chat"));
        assert!(a.starts_with("chat-") && a.len() == "chat-20261124-093015-k3x9".len(), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn the_database_defaults_to_the_users_data_directory_and_the_flag_wins() {
        let defaults = Defaults::default();
        let flag = StoreArgs { db: Some(PathBuf::from("/tmp/x.db")), no_store: false };
        assert_eq!(db_path(&flag, &defaults).unwrap(), PathBuf::from("/tmp/x.db"));
        let path = db_path(&StoreArgs::default(), &defaults).unwrap();
        assert!(path.ends_with("noetic/noetic.db"), "{}", path.display());
    }
}
