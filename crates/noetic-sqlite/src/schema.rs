//! The schema and its migrations, versioned with `PRAGMA user_version`.
//!
//! * Version 1: sessions (settings, turn and item counts, the running turn's journal, the owner), items
//!   (one JSON item per row, numbered), the steering queue (one JSON message per row, in position order).
//! * Version 2: indexes for the session list (most recent first) and for removing queued messages by id.
//! * Version 3: the steering ledger (one JSON entry per row, numbered).
//! * Version 4: steering queued by processes that do not own the session (`queue.from_elsewhere`) and a stop they
//!   asked for (`sessions.stop_requested`), which the owner takes at its next checkpoint.
//! * Version 5: the state of layers whose scope is not `execution` (`layer_state`: one JSON state per scope name —
//!   `thread:<session key>`, `global` — and layer id).
//! * Version 6: the session log (`log_sessions`: each log's end, summary and place in the append order;
//!   `log_entries`: one encoded entry per row; `log_snapshots`; `log_clock`: the highest append counter a
//!   deleted session held), written by
//!   [`crate::SqliteLogStore`] only, which converts the sessions of the tables above into logs when it adds them
//!   ([`crate::log`] has the mapping).
//! * Version 7: the sessions' leases (`log_leases`), so several processes can share one file's sessions.
//! * Version 8: a row of `log_entries` holds one append: its entries one per line from the row's `pos` on
//!   ([`noetic_runtime::agent::log::encode_row`]); rows of version 7 hold one entry each and read the same. No table
//!   changes; a build that knows only version 7 would take a row of several entries for a damaged one, hence the
//!   new version.

use rusqlite::Connection;

/// The last schema version of the store before the session log (its tables, up to version 5).
pub const SCHEMA_VERSION: i64 = 5;

/// The schema version [`crate::SqliteLogStore`] writes: version 5 and the session log. The newest version this
/// build opens; a newer file is refused untouched.
pub const LOG_SCHEMA_VERSION: i64 = 8;

/// Version 6 → 7: who holds each session's turn (see `crate::log`'s leases): the holder's name, until when, and
/// the process that took it (pid, host, start time), so a holder that died is known at once on its own host.
pub(crate) const V7: &str = "
CREATE TABLE log_leases (
    session TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    until_ms INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    started INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Version 5 → 6: the session log. Entries are a plain rowid table (they are often larger than the small rows
/// `WITHOUT ROWID` suits); `counter` orders the list and lets another process find what changed.
pub(crate) const V6: &str = "
CREATE TABLE log_sessions (
    key TEXT PRIMARY KEY NOT NULL,
    last INTEGER NOT NULL,
    summary TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    counter INTEGER NOT NULL,
    writer TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX log_sessions_by_counter ON log_sessions (counter);
CREATE TABLE log_entries (
    session TEXT NOT NULL,
    pos INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session, pos)
);
CREATE TABLE log_snapshots (
    session TEXT PRIMARY KEY NOT NULL,
    pos INTEGER NOT NULL,
    bytes BLOB NOT NULL
);
CREATE TABLE log_clock (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    counter INTEGER NOT NULL
);
INSERT INTO log_clock (id, counter) VALUES (1, 0);
";

/// Version 1, as it was first released (kept verbatim: migrations start from it).
pub(crate) const V1: &str = "
CREATE TABLE sessions (
    key TEXT PRIMARY KEY NOT NULL,
    mode TEXT NOT NULL,
    capacity INTEGER NOT NULL,
    batch_policy TEXT NOT NULL,
    turns INTEGER NOT NULL,
    items INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    journal_step TEXT,
    journal_core TEXT,
    owner_pid INTEGER,
    owner_host TEXT,
    owner_started INTEGER
);
CREATE TABLE items (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE queue (
    session TEXT NOT NULL,
    pos INTEGER NOT NULL,
    id TEXT NOT NULL,
    message TEXT NOT NULL,
    PRIMARY KEY (session, pos)
) WITHOUT ROWID;
";

/// Version 1 → 2.
const V2: &str = "
CREATE INDEX sessions_by_update ON sessions (updated_ms DESC);
CREATE UNIQUE INDEX queue_by_id ON queue (session, id);
";

/// Version 2 → 3.
const V3: &str = "
CREATE TABLE ledger (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
";

/// Version 3 → 4.
const V4: &str = "
ALTER TABLE queue ADD COLUMN from_elsewhere INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN stop_requested TEXT;
";

/// Version 4 → 5.
const V5: &str = "
CREATE TABLE layer_state (
    scope TEXT NOT NULL,
    layer TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (scope, layer)
) WITHOUT ROWID;
";

/// The steps from version 1 to [`SCHEMA_VERSION`], each with the version it makes.
const STEPS: [(i64, &str); 5] = [(1, V1), (2, V2), (3, V3), (4, V4), (5, V5)];

/// Brings a file at `from` up to `to` (at most [`SCHEMA_VERSION`]), one version per transaction.
pub(crate) fn migrate_to(conn: &mut Connection, from: i64, to: i64) -> rusqlite::Result<()> {
    for (version, sql) in STEPS {
        if from >= version || version > to {
            continue;
        }
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated meanwhile: read the version again under the write lock.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now < version {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", version)?;
        }
        tx.commit()?;
    }
    Ok(())
}

/// Runs the steps after `from` up to [`SCHEMA_VERSION`] inside the caller's transaction (the log's migration
/// makes the whole way to version 6 one transaction).
pub(crate) fn steps_after(conn: &Connection, from: i64) -> rusqlite::Result<()> {
    STEPS.iter().filter(|(version, _)| *version > from).try_for_each(|(_, sql)| conn.execute_batch(sql))
}
