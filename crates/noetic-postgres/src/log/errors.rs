//! Database failures as [`StoreError`]s that keep the driver's error and say what to do.

use std::sync::Arc;

use noetic_runtime::agent::log::StoreError;

/// A database failure: the driver's error (kept as the source), where, and what to do about it. It says the
/// server's own words for an error the server answered with (the driver's text is only "db error").
#[derive(Debug, thiserror::Error)]
#[error("{said} ({target}); {hint}", said = said(.source))]
pub(crate) struct DbFailure {
    target: String,
    hint: &'static str,
    #[source]
    source: tokio_postgres::Error,
}

impl DbFailure {
    pub(crate) fn new(target: &str, source: tokio_postgres::Error) -> DbFailure {
        DbFailure { target: target.to_owned(), hint: hint(&source), source }
    }

    /// True when trying again on another connection may succeed and the failed attempt wrote nothing: the
    /// connection was gone, or the server gave the transaction up (a deadlock, a serialization failure).
    pub(crate) fn retryable(&self) -> bool {
        connection_lost(&self.source) || self.source.code().is_some_and(|c| matches!(c.code(), "40001" | "40P01"))
    }
}

/// What `e` says: the server's message (and its detail) for an error the server answered with, else the driver's.
pub(crate) fn said(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("the server said: {} ({detail})", db.message()),
            None => format!("the server said: {}", db.message()),
        },
        None => e.to_string(),
    }
}

/// True when `e` says the connection is gone rather than that a statement failed.
pub(crate) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error().is_none()
        || e.code().is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57P"))
}

fn hint(e: &tokio_postgres::Error) -> &'static str {
    if e.as_db_error().is_none() {
        return "the connection to the database failed or dropped; check that the server is up (the next call \
                reconnects)";
    }
    match e.code().map(tokio_postgres::error::SqlState::code) {
        Some("28P01" | "28000") => "the database refused the credentials; check the URL's user and password",
        Some("3D000") => "the database does not exist; create it or fix the URL",
        Some("53300") => "the server has too many connections; use fewer or raise max_connections",
        Some("42501") => {
            "the database user may not do this; grant it the right, or connect once as a user who may create and \
             alter the tables (noetic makes and migrates its tables on connecting; a user who may only read and \
             write them works on tables at the current schema version)"
        }
        Some(code) if code.starts_with("40") => "the transaction was rolled back by a conflict; try again",
        Some(code) if code.starts_with("57P") => "the server ended the connection; the next call reconnects",
        _ => "check the server's log",
    }
}

/// `e` while `doing`, as a [`StoreError`].
pub(crate) fn db_error(target: &str, doing: impl Into<String>, e: tokio_postgres::Error) -> StoreError {
    StoreError::unavailable(doing, DbFailure::new(target, e))
}

/// A pool's failure to give a connection while `doing`.
pub(crate) fn pool_error(target: &str, doing: impl Into<String>, e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_error(target, doing, e),
        other => StoreError::unavailable(doing, format!("no connection to {target}: {other}")),
    }
}

/// One failure answered to every request of a batch: each gets a [`StoreError`] whose source is the same failure.
#[derive(Debug, Clone)]
pub(crate) struct Shared(pub Arc<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `postgres://user@host:port/db`, without the password (for messages).
pub(crate) fn describe(config: &tokio_postgres::Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("");
    let db = config.get_dbname().unwrap_or("");
    format!("postgres://{user}@{host}:{port}/{db}")
}
