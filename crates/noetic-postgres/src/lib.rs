//! # noetic-postgres — noetic sessions shared by many workers through PostgreSQL
//!
//! [`PgLogStore`] is the session log's store (`noetic::agent::log::LogStore` with `Leases`) for several worker
//! processes (on one machine or many) that share one database, typically behind a load balancer: any worker accepts
//! any session's messages, a session's turn runs on exactly one worker at a time (the one holding its lease),
//! steering sent through any worker reaches the turn wherever it runs, and when a worker dies another takes its
//! unfinished turn over by replaying its log (SPEC 6).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! let store = noetic_postgres::PgLogStore::connect("postgres://noetic:noetic@127.0.0.1:54329/noetic").await?;
//! # let model: Arc<dyn noetic::model::Model> = Arc::new(noetic::model::ScriptedModel::new([]));
//! let runtime = noetic::agent::Runtime::builder().model(model).log_store(Arc::new(store)).build()?;
//! # Ok(()) }
//! ```
//!
//! It runs on the async driver `tokio-postgres` with a `deadpool-postgres` pool: group commit, LISTEN/NOTIFY on a reconnecting tokio
//! task, leases on the database's clock, and one row per append, and the conversion of existing sessions into logs (schema versions 3–4); see
//! [`log`].
//!
//! The first connection to a database makes the tables (or migrates an older schema), so its user needs the right
//! to create tables; from then on a user who may only read and write them (`SELECT`, `INSERT`, `UPDATE`, `DELETE`
//! on the tables, `USAGE` and `UPDATE` on the sequence) works on them too — production roles usually are so. A
//! storage setting that only the tables' owner may set is then left as it is (said in the log).

pub mod log;
mod schema;

/// For tests: a database as an earlier version left it, a database of one's own.
#[doc(hidden)]
pub mod testing {
    pub use crate::log::testing::{Throwaway, client, create_at_version, server_url};
    pub use crate::schema::MIGRATION_LOCK;
}

pub use log::{PgLogOptions, PgLogStats, PgLogStore};
pub use schema::{LOG_SCHEMA_VERSION, SCHEMA_VERSION};
