//! The database server restarts in the middle of a turn (`scripts/postgres.sh restart`): the turn's writes after it
//! go to new connections, nothing is lost or written twice, the tool runs once, and the next turn works.
//!
//! A binary of its own (test binaries run one after another, so no other test loses its connections), and only
//! against the repository's throwaway server (`NOETIC_POSTGRES_URL` unset): it is never restarted elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use noetic::agent::SessionStore;
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::Gate;
use noetic_postgres::PgStore;
use serde_json::json;

const URL: &str = "postgres://noetic:noetic@127.0.0.1:54329/noetic";

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres.sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_turn_loses_nothing_and_repeats_nothing() {
    let required = std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1");
    if std::env::var("NOETIC_POSTGRES_URL").is_ok_and(|u| u != URL) {
        let _ =
            writeln!(std::io::stderr(), "skipped: NOETIC_POSTGRES_URL points at a server this test must not restart");
        return;
    }
    let up = std::thread::spawn(|| postgres::Client::connect(URL, postgres::NoTls).is_ok()).join().unwrap();
    if !up {
        assert!(!required, "NOETIC_E2E_REQUIRED=1 but no PostgreSQL at {URL}");
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no PostgreSQL at {URL}; run scripts/postgres.sh setup && scripts/postgres.sh start"
        );
        return;
    }
    let key = format!("restart-{}", std::process::id());
    let gate = Gate::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "build", json!({}))]),
        ModelResponse::text("built"),
        ModelResponse::text("after the restart"),
    ]);
    let store = Arc::new(PgStore::connect(URL).unwrap());
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(gate.tool("build").unwrap())
        .store(store.clone())
        .build()
        .unwrap();
    let session = runtime.session(&key);
    let turn = session.send("build").await.unwrap();
    gate.started().await;
    let restarted = tokio::process::Command::new(script()).arg("restart").output().await.unwrap();
    assert!(restarted.status.success(), "{}", String::from_utf8_lossy(&restarted.stderr));
    gate.release();
    assert_eq!(turn.await.unwrap(), "built", "the turn's writes went to new connections");
    assert_eq!(gate.runs(), 1);
    assert_eq!(session.send("again").await.unwrap().await.unwrap(), "after the restart");
    let stored = store.peek(&key).unwrap().unwrap();
    assert_eq!(stored.snapshot.history, session.history(), "everything stored, once");
    assert!(stored.unfinished.is_none());
    store.delete(&key).unwrap();
}
