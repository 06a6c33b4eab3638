//! Runtimes sharing sessions through the PostgreSQL session log (#30), each test in a database of its own: two
//! workers (two stores, two runtimes) on one session — the second is told who runs the turn and steers it through the
//! log, and takes over the turn once the first's lease ran out, without running its call again.
//!
//! Needs a server: `scripts/postgres.sh setup && scripts/postgres.sh start`. Without one these tests say so and pass,
//! unless `NOETIC_E2E_REQUIRED=1` (as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::{Routed, SessionError};
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::testing::{Gate, transcript};
use noetic::turn::INTERRUPTED_RESULT;
use noetic_postgres::PgLogStore;
use noetic_postgres::testing::Throwaway;
use serde_json::json;

/// A database of the test's own, or `None` (with the reason printed) when there is no server and none is required.
async fn database(name: &str) -> Option<Throwaway> {
    Throwaway::or_skip(name).await.unwrap_or_else(|e| panic!("{e}"))
}

async fn worker(name: &str, model: &ScriptedModel, url: &str, gate: &Gate, term: Duration) -> Runtime {
    Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool(gate.tool("slow").unwrap())
        .log_store(Arc::new(PgLogStore::connect(url).await.unwrap()))
        .worker_id(name)
        .lease_term(term)
        .build()
        .unwrap()
}

fn call(id: &str) -> ModelResponse {
    ModelResponse::tool_calls([(id, "slow", json!({}))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_worker_steers_the_turn_the_first_runs_through_the_postgres_log() {
    let Some(db) = database("logsteer").await else { return };
    let gate = Gate::new();
    let model_a = ScriptedModel::new([call("c1"), ModelResponse::text("done")]);
    let a = worker("a", &model_a, &db.url, &gate, Duration::from_secs(15)).await;
    let b = worker("b", &ScriptedModel::new([]), &db.url, &Gate::new(), Duration::from_secs(15)).await;
    let turn = a.open("s").await.unwrap().send("go").await.unwrap();
    gate.started().await;
    let on_b = b.open("s").await.unwrap();
    assert!(matches!(on_b.send("direct").await, Err(SessionError::BusyElsewhere { owner, .. }) if owner == "a"));
    assert!(matches!(on_b.send_or_steer("from b").await.unwrap(), Routed::Steered(_)));
    let on_a = a.session("s");
    // A hears B's append through LISTEN/NOTIFY (bounded: a real server).
    for _ in 0..3000 {
        if on_a.queued() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(on_a.queued(), 1, "A took in B's message");
    gate.release();
    assert_eq!(turn.await.unwrap(), "done");
    let history = transcript(model_a.requests()[1].history.as_slice());
    assert_eq!(history.last().map(String::as_str), Some("User: from b"));
    drop((a, b));
    db.remove().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_turn_is_taken_over_on_postgres_once_its_lease_ran_out() {
    let Some(db) = database("logtakeover").await else { return };
    let gate = Gate::new();
    let term = Duration::from_millis(600);
    // A runs on a tokio runtime of its own, shut down mid-call as a killed process would stop: nothing more is
    // written, its lease is no longer renewed.
    let process_a = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let (url, a_gate) = (db.url.clone(), gate.clone());
    let started = process_a.spawn(async move {
        let a = worker("a", &ScriptedModel::new([call("c1")]), &url, &a_gate, term).await;
        let turn = a.open("s").await.unwrap().send("go").await.unwrap();
        a_gate.started().await;
        (a, turn)
    });
    let held = started.await.unwrap();
    process_a.shutdown_background();
    drop(held);
    let model_b = ScriptedModel::new([ModelResponse::text("finished on b")]);
    let b_gate = Gate::new();
    let b = worker("b", &model_b, &db.url, &b_gate, term).await;
    let on_b = b.open("s").await.unwrap();
    let mut resumed = None;
    for _ in 0..500 {
        match on_b.resume().await {
            Ok(Some(turn)) => {
                resumed = Some(turn);
                break;
            }
            Ok(None) => break,
            Err(SessionError::BusyElsewhere { .. }) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("{e}"),
        }
    }
    let resumed = resumed.expect("B takes the turn over once A's lease ran out");
    assert_eq!(resumed.number(), 1);
    assert_eq!(resumed.await.unwrap(), "finished on b");
    assert_eq!(b_gate.runs(), 0, "the call A started is not run again");
    let history = transcript(model_b.requests()[0].history.as_slice());
    assert_eq!(history.last().unwrap(), &format!("result c1 (error) {INTERRUPTED_RESULT}"));
    gate.release();
    drop(b);
    db.remove().await.unwrap();
}
