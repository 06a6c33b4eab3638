//! For tests: a database of one's own on the test server, and databases as earlier versions left them.

use crate::schema::{V1, V2, V3};

/// The URL of the test server: `NOETIC_POSTGRES_URL`, or the one `scripts/postgres.sh` starts.
pub fn server_url() -> String {
    std::env::var("NOETIC_POSTGRES_URL").unwrap_or_else(|_| "postgres://noetic:noetic@127.0.0.1:54329/noetic".into())
}

/// Connects to `url`, driving the connection on a task of its own.
pub async fn client(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        // A connection that ends fails the client's next query, which says why.
        let _ = connection.await;
    });
    Ok(client)
}

/// An empty database for one test, made on the server at `url` and dropped by [`Throwaway::remove`] (a test that
/// fails leaves it behind; the next run with the same name replaces it).
#[derive(Debug)]
pub struct Throwaway {
    /// Its URL.
    pub url: String,
    /// Its name.
    pub name: String,
    /// A connection to the server's own database, for what a test does from outside (terminating connections,
    /// refusing new ones).
    pub admin: tokio_postgres::Client,
}

impl Throwaway {
    /// Makes the database `noetic_<name>_<pid>` on the server at `url`.
    pub async fn new(url: &str, name: &str) -> Result<Throwaway, tokio_postgres::Error> {
        let admin = client(url).await?;
        let name = format!("noetic_{name}_{}", std::process::id());
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await?;
        admin.batch_execute(&format!("CREATE DATABASE {name}")).await?;
        let base = url.rsplit_once('/').map_or(url, |(base, _)| base);
        Ok(Throwaway { url: format!("{base}/{name}"), name, admin })
    }

    /// A database of the test `name`'s own on [`server_url`], or `Ok(None)` when there is no server — said on stderr
    /// past the test harness's capture — unless `NOETIC_E2E_REQUIRED=1`, when no server is the error.
    pub async fn or_skip(name: &str) -> Result<Option<Throwaway>, String> {
        let url = server_url();
        match Throwaway::new(&url, name).await {
            Ok(db) => Ok(Some(db)),
            Err(e) if std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1") => {
                Err(format!("PostgreSQL is required (NOETIC_E2E_REQUIRED=1) but {url} is unusable: {e}"))
            }
            Err(e) => {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: no PostgreSQL at {url} ({e}); run scripts/postgres.sh setup && scripts/postgres.sh start"
                );
                Ok(None)
            }
        }
    }

    /// A connection to it.
    pub async fn client(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        client(&self.url).await
    }

    /// Drops it, ending the connections still open to it.
    pub async fn remove(self) -> Result<(), tokio_postgres::Error> {
        self.admin.batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name)).await
    }
}

/// Creates the schema of `version` (1, 2 or 3), as those versions wrote it, in the database `client` is connected
/// to (empty: a test adds the rows that version would hold).
pub async fn create_at_version(client: &tokio_postgres::Client, version: i32) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(V1).await?;
    if version >= 2 {
        client.batch_execute(V2).await?;
    }
    if version >= 3 {
        client.batch_execute(V3).await?;
    }
    client.batch_execute("CREATE TABLE noetic_schema (version INTEGER NOT NULL)").await?;
    client.execute("INSERT INTO noetic_schema VALUES ($1)", &[&version]).await.map(drop)
}
