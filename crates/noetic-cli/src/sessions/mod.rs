//! Where sessions are kept: an SQLite file (`--db FILE`, `db` in noetic.toml, the user's data directory) or a
//! PostgreSQL database several workers share (`--db postgres://…`), and the `noetic sessions` command (list, show,
//! rm, rename, steer, stop).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use noetic::agent::log::{LogStore, Projection, SessionLine, StoreError, queue_message, rename, request_stop};
use noetic::model::Item;
use noetic_postgres::PgLogStore;
use noetic_sqlite::SqliteLogStore;

use crate::config::Defaults;
use crate::output::outln;
use crate::output::render;

/// Where sessions are kept.
#[derive(Args, Clone, Debug)]
pub struct StoreArgs {
    /// The session database: an SQLite file, or a PostgreSQL URL (postgres://user:password@host:port/db) that
    /// several workers share (default: `db` in noetic.toml, else $XDG_DATA_HOME/noetic/noetic.db, else
    /// ~/.local/share/noetic/noetic.db).
    #[arg(long, value_name = "FILE|URL", conflicts_with = "no_store")]
    pub db: Option<PathBuf>,
    /// Keep the session in memory only: nothing is written, nothing can be continued later.
    #[arg(long)]
    pub no_store: bool,
    /// With a PostgreSQL database: how long a worker's hold on a running turn lasts without renewal, so how soon
    /// another worker takes over the turns of one that died.
    #[arg(long, value_name = "SECONDS", default_value = "15", value_parser = lease_seconds)]
    pub lease: std::time::Duration,
}

impl Default for StoreArgs {
    fn default() -> Self {
        StoreArgs { db: None, no_store: false, lease: std::time::Duration::from_secs(15) }
    }
}

/// The lease a PostgreSQL worker holds on a running turn: from 0.3 s (renewed every 0.1 s) to an hour.
const LEASE: crate::config::duration::Range =
    crate::config::duration::Range { min: 0.3, min_allowed: true, max: 3600.0, example: "15" };

fn lease_seconds(text: &str) -> Result<std::time::Duration, String> {
    crate::config::duration::parse("--lease", text, LEASE)
}

/// An open session store: session logs in an SQLite file or a PostgreSQL database.
#[derive(Clone)]
pub struct Store {
    log: Arc<dyn LogStore>,
    /// Where it is (a path, or a URL without its password).
    place: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("place", &self.place).finish_non_exhaustive()
    }
}

impl Store {
    /// The store, for a runtime.
    pub fn shared(&self) -> Arc<dyn LogStore> {
        self.log.clone()
    }

    /// Where it is (a path, or a URL without its password).
    pub fn describe(&self) -> String {
        self.place.clone()
    }
}

/// True for a `postgres://` or `postgresql://` URL.
pub fn is_postgres(db: &std::path::Path) -> bool {
    db.to_str().is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Opens the store at `db` (a file or a PostgreSQL URL).
pub async fn open_at(db: &std::path::Path) -> Result<Store, StoreError> {
    if is_postgres(db) {
        let url = db.to_str().unwrap_or_default();
        let store = PgLogStore::connect(url).await?;
        let place = store.target().to_owned();
        return Ok(Store { log: Arc::new(store), place });
    }
    let store = SqliteLogStore::open(db).await?;
    Ok(Store { place: store.path().display().to_string(), log: Arc::new(store) })
}

/// The database file: the flag, else noetic.toml's `db`, else the user's data directory.
pub fn db_path(args: &StoreArgs, defaults: &Defaults) -> Result<PathBuf, String> {
    if let Some(path) = args.db.clone().or_else(|| defaults.db.clone()) {
        return Ok(path);
    }
    let data = data_dir().ok_or("no data directory: set XDG_DATA_HOME or HOME, or give --db FILE (or --no-store)")?;
    Ok(data.join("noetic").join("noetic.db"))
}

/// The user's data directory: $XDG_DATA_HOME, else ~/.local/share.
pub fn data_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_DATA_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
}

/// The store, unless `--no-store`. A database named by `--db` or noetic.toml in a folder that does not exist is
/// an error: a typo must not quietly start a new, empty database (only the default folder is created).
pub async fn open(args: &StoreArgs, defaults: &Defaults) -> Result<Option<Store>, String> {
    if args.no_store {
        return Ok(None);
    }
    let path = db_path(args, defaults)?;
    if args.db.is_some() || defaults.db.is_some() {
        named_folder_exists(&path)?;
    }
    open_at(&path).await.map(Some).map_err(|e| e.to_string())
}

/// Whether the folder of a named SQLite database exists (a PostgreSQL URL has none); the error says what to do.
pub fn named_folder_exists(path: &std::path::Path) -> Result<(), String> {
    if is_postgres(path) {
        return Ok(());
    }
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if folder.is_dir() {
        return Ok(());
    }
    Err(format!(
        "the session database {} is in a folder that does not exist ({}); check the path, or create the folder \
         (mkdir -p {}) to start a new database there",
        path.display(),
        folder.display(),
        folder.display()
    ))
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
    /// The session database (as for chat): a file or a postgres:// URL.
    #[arg(long, value_name = "FILE|URL", global = true)]
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
    /// Give a session a title (shown in lists and on the page; its key stays its key), also while a turn runs.
    Rename {
        /// The session.
        key: String,
        /// The title: one line, at most 120 characters.
        title: String,
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
pub async fn run(args: SessionsArgs, defaults: &Defaults) -> Result<(), Box<dyn std::error::Error>> {
    let path = db_path(&StoreArgs { db: args.db, ..StoreArgs::default() }, defaults)?;
    let writes = matches!(args.command, Some(SessionsCommand::Steer { .. } | SessionsCommand::Rename { .. }));
    if writes {
        named_folder_exists(&path)?;
    }
    if !is_postgres(&path) && !path.exists() && !writes {
        outln!("no sessions yet ({} does not exist)", path.display());
        return Ok(());
    }
    let opened = open_at(&path).await?;
    let store = opened.shared();
    let path = opened.describe();
    let missing =
        |key: &str| format!("no session '{}' in {}; `noetic sessions` lists them", render::visible(key), path);
    match args.command.unwrap_or(SessionsCommand::List) {
        SessionsCommand::List => list(&store.list().await?, &path),
        SessionsCommand::Show { key } => {
            let session = Projection::load(store.as_ref(), &key).await?;
            if session.last == 0 {
                return Err(missing(&key).into());
            }
            show(&key, &session);
        }
        SessionsCommand::Steer { key, text } => {
            let message = noetic::agent::SteerMessage::new(text);
            queue_message(store.as_ref(), &key, &message).await?;
            outln!("queued for session {} (message {})", render::visible(&key), message.id);
        }
        SessionsCommand::Rename { key, title } => match rename(store.as_ref(), &key, &title).await? {
            Some(title) => outln!("session {} is now titled {}", render::visible(&key), render::visible(&title)),
            None => return Err(missing(&key).into()),
        },
        SessionsCommand::Stop { key } => {
            if !request_stop(store.as_ref(), &key, "stopped with noetic sessions stop").await? {
                return Err(missing(&key).into());
            }
            outln!("asked session {} to stop; its queue is cleared", render::visible(&key));
        }
        SessionsCommand::Rm { key } => {
            let holder = match store.leases() {
                Some(leases) => leases.holder(&key).await?,
                None => None,
            };
            if let Some(holder) = holder {
                return Err(format!(
                    "session {} is running a turn in {}; stop it first (`noetic sessions stop {}`)",
                    render::visible(&key),
                    render::visible(&holder),
                    render::visible(&key)
                )
                .into());
            }
            if !store.delete(&key).await? {
                return Err(missing(&key).into());
            }
            outln!("deleted session {}", render::visible(&key));
        }
    }
    Ok(())
}

/// `noetic sessions show`: the transcript, the queue, a turn left open, the ledger.
fn show(key: &str, session: &Projection) {
    let title = session.title.as_deref().map(|t| format!(" “{}”", render::visible(t))).unwrap_or_default();
    outln!(
        "session {}{title} — {} turn(s), {} item(s)",
        render::visible(key),
        session.turns,
        session.conversation.len()
    );
    for item in &session.conversation {
        outln!("  {}", transcript_line(item));
    }
    for message in &session.queue {
        outln!("  queued: {}", render::visible(&message.text));
    }
    if session.open_turn.is_some() {
        outln!(
            "  unfinished turn (running, or left by a stopped process): `noetic chat --session {}` offers to resume it",
            render::visible(key)
        );
    }
    for line in budget_lines(key, &session.budget) {
        outln!("  {line}");
    }
    outln!("  steering ledger ({} decision(s)):", session.ledger.len());
    let style = render::Style::detect(true);
    for line in crate::ledger::view(&style, &session.ledger, true, "") {
        outln!("  {line}");
    }
}

/// What `sessions show` says of a session's budget: the limits set for it (else that the process's default holds,
/// which the log does not know), what it spent, and the limit it is paused over with how to raise it.
fn budget_lines(key: &str, account: &noetic::budget::Account) -> Vec<String> {
    let mut lines = Vec::new();
    let status =
        noetic::budget::BudgetStatus { budget: account.budget.unwrap_or_default(), spent: account.spent, paused: None };
    let described = crate::config::budget::describe(&status);
    let mut described = described.lines();
    let limits = described.next().unwrap_or_default();
    lines.push(match account.budget {
        Some(_) => limits.to_owned(),
        None => "budget — none set for this session (the default of the process that runs it holds)".to_owned(),
    });
    lines.extend(described.map(str::to_owned));
    if let Some(reached) = &account.paused {
        lines.push(format!(
            "paused: {reached}; its messages queue until the limit is raised: /budget {}.{}=MORE in `noetic chat \
             --session {}`, Raise on `noetic serve`'s page, or PUT /api/sessions/{}/budget",
            reached.scope.name(),
            reached.limit,
            render::visible(key),
            render::visible(key)
        ));
    }
    lines
}

/// One transcript entry, with model-written text made printable: its line breaks are real (indented under the
/// entry's first line), controls and escape codes are shown escaped.
fn transcript_line(item: &Item) -> String {
    render::printable(&item.to_string()).replace('\n', "\n    ")
}

fn list(sessions: &[SessionLine], path: &str) {
    if sessions.is_empty() {
        outln!("no sessions in {path}");
        return;
    }
    outln!(
        "{:<34} {:<TITLE_WIDTH$} {:>5} {:>6} {:>6}  {:<10}  last activity",
        "session",
        "title",
        "turns",
        "items",
        "queued",
        "unfinished"
    );
    let now = SystemTime::now();
    for s in sessions {
        let ago = now.duration_since(s.updated_at).map_or(0, |d| d.as_secs());
        outln!(
            "{:<34} {:<TITLE_WIDTH$} {:>5} {:>6} {:>6}  {:<10}  {}",
            render::visible(&s.key),
            clipped(s.summary.title.as_deref().unwrap_or("-")),
            s.summary.turns,
            s.summary.items,
            s.summary.queued,
            if s.summary.open_turn.is_some() { "yes" } else { "no" },
            describe_age(ago)
        );
    }
}

/// How wide the list's title column is.
const TITLE_WIDTH: usize = 28;

/// A title as the list shows it: printable, cut with an ellipsis to fit its column.
fn clipped(title: &str) -> String {
    let title = render::visible(title);
    match title.chars().count() > TITLE_WIDTH {
        true => format!("{}…", title.chars().take(TITLE_WIDTH - 1).collect::<String>()),
        false => title,
    }
}

/// An age in seconds, in words (`5 s ago`, `3 min ago`).
pub fn describe_age(secs: u64) -> String {
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
        let flag = StoreArgs { db: Some(PathBuf::from("/tmp/x.db")), ..StoreArgs::default() };
        assert_eq!(db_path(&flag, &defaults).unwrap(), PathBuf::from("/tmp/x.db"));
        let path = db_path(&StoreArgs::default(), &defaults).unwrap();
        assert!(path.ends_with("noetic/noetic.db"), "{}", path.display());
    }
}
