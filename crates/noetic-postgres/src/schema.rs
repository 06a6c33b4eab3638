//! The schema and its migrations, versioned in `noetic_schema`.
//!
//! * Version 1: sessions (settings, counts, a version bumped by every change, the running turn's journal, the
//!   turn lease: owner and expiry, a stop asked by another worker), items (one JSON item per row, numbered), the
//!   steering queue (one JSON message per row, in position order; `from_elsewhere` marks messages queued by a
//!   worker that did not hold the lease, which the lease holder takes at its next checkpoint), the steering ledger.
//! * Version 2: the state of layers whose scope is not `execution` (one JSON state per scope name —
//!   `thread:<session key>`, `global` — and layer id).
//! * Version 3: the session log ([`crate::PgLogStore`]): one row per entry (`noetic_log`), one summary row per
//!   session (`noetic_log_sessions`: the last position, the [`noetic::agent::log::Summary`] as JSON, a global append
//!   counter for the list's order, the transaction that last appended, for watchers catching up), snapshots and
//!   leases. Migrating to it converts every session of versions 1–2 (the store before the session log) into log
//!   entries (see [`crate::log`]); the tables of versions 1–2 stay as they were, unused.
//! * Version 4: a row of `noetic_log` holds one append: its entries one per line, from the row's `pos` on (a row
//!   of version 3 holds one entry, and reads the same). The table says so in its comment. A build that knows only
//!   version 3 would take a row of several entries for a damaged one, hence the new version.
//!
//! [`crate::PgLogStore`] refuses a database newer than [`LOG_SCHEMA_VERSION`].
//!
//! Workers that start together migrate one at a time: the migration runs under a transaction-scoped advisory
//! lock, and reads the version again once it holds it.

/// The last schema version of the store before the session log (its tables are complete at it).
pub const SCHEMA_VERSION: i32 = 2;

/// The schema version [`crate::PgLogStore`] migrates a database to: the newest this build knows.
pub const LOG_SCHEMA_VERSION: i32 = 4;

/// The advisory lock key migrations hold (an arbitrary constant: "noetic" in ASCII, folded).
pub const MIGRATION_LOCK: i64 = 0x6e6f_6574_6963;

/// Version 1, as it was first released (kept verbatim: migrations start from it).
pub(crate) const V1: &str = "
CREATE TABLE noetic_sessions (
    key TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    capacity BIGINT NOT NULL,
    batch_policy TEXT NOT NULL,
    turns BIGINT NOT NULL DEFAULT 0,
    items BIGINT NOT NULL DEFAULT 0,
    version BIGINT NOT NULL DEFAULT 1,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    journal_step TEXT,
    journal_core TEXT,
    owner TEXT,
    lease_until TIMESTAMPTZ,
    stop_requested TEXT
);
CREATE INDEX noetic_sessions_by_update ON noetic_sessions (updated_at DESC);
CREATE INDEX noetic_sessions_unfinished ON noetic_sessions (lease_until) WHERE journal_core IS NOT NULL;
CREATE TABLE noetic_items (
    session TEXT NOT NULL,
    seq BIGINT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE TABLE noetic_queue (
    session TEXT NOT NULL,
    pos BIGINT NOT NULL,
    id TEXT NOT NULL,
    message TEXT NOT NULL,
    from_elsewhere BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (session, pos),
    UNIQUE (session, id)
);
CREATE TABLE noetic_ledger (
    session TEXT NOT NULL,
    seq BIGINT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
";

/// Version 1 → 2.
pub(crate) const V2: &str = "
CREATE TABLE noetic_layer_state (
    scope TEXT NOT NULL,
    layer TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, layer)
);
";

/// Version 2 → 3: the session log's tables (the conversion of old sessions is [`crate::log`]'s migration). Needs
/// PostgreSQL 13 or newer (`xid8`).
pub(crate) const V3: &str = "
CREATE SEQUENCE noetic_log_appends;
CREATE TABLE noetic_log_sessions (
    key TEXT PRIMARY KEY,
    last BIGINT NOT NULL,
    summary TEXT NOT NULL,
    seq BIGINT NOT NULL,
    written_by XID8 NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE noetic_log (
    session TEXT NOT NULL,
    pos BIGINT NOT NULL,
    entry TEXT NOT NULL,
    PRIMARY KEY (session, pos)
);
CREATE TABLE noetic_log_snapshots (
    session TEXT PRIMARY KEY,
    pos BIGINT NOT NULL,
    bytes BYTEA NOT NULL
);
CREATE TABLE noetic_log_leases (
    key TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL
);
";

/// Version 3 → 4: rows of an append's entries (see the module docs); the rows of version 3 stay as they are.
pub(crate) const V4: &str = "COMMENT ON TABLE noetic_log IS \
    'noetic session log (schema version 4): one row per append, its entries one JSON text per line from pos on';";
