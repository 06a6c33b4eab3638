//! Several `noetic serve` worker processes on one PostgreSQL database, as users run them behind a load balancer:
//! claim races through different workers, steering and stopping a turn through a worker that does not run it, and
//! kill -9 of the worker running a turn — another worker takes the turn over and finishes it, with no completed
//! tool call re-run, no steering message lost or shown twice, and exactly one result per tool call id.
//!
//! Needs a server (`scripts/postgres.sh setup && scripts/postgres.sh start`; URL from `NOETIC_POSTGRES_URL`).
//! Without one the tests say so and pass, unless `NOETIC_E2E_REQUIRED=1` (as in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::workers::*;
use noetic::model::Item;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_for_one_idle_session_through_three_workers_start_one_turn_and_every_other_one_steers_it() {
    let Some(server) = database() else { return };
    let db = Database::new(&server, "race");
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("release"), "").unwrap();
    let flow = workflow(dir.path());
    let workers: Vec<Worker> = (0..3).map(|_| Worker::start(&url, &flow, &workspace)).collect();
    let client = reqwest::Client::new();
    let k = unique_key("race");
    let posts = (0..9).map(|i| {
        let (client, target) = (client.clone(), workers[i % 3].url(&format!("/api/sessions/{k}/messages")));
        async move { post(&client, target, json!({ "text": format!("message {i}") })).await }
    });
    let answers = futures::future::join_all(posts).await;
    let started = answers.iter().filter(|(_, a)| a["routed"] == "started").count();
    let steered = answers.iter().filter(|(_, a)| a["routed"] == "steered").count();
    assert!(answers.iter().all(|(status, _)| *status == 202), "{answers:?}");
    assert_eq!((started, steered), (1, 8), "{answers:?}");
    // The turn runs on one worker: approve its first command there, decline the others.
    let owner = who_asks(&client, &workers, &k, "c1").await;
    approve_on(&client, &workers[owner], &k, "c1", true).await;
    let stored = settled(&url, &k).await;
    for i in 0..9 {
        let n = stored.conversation.iter().filter(|item| **item == Item::user(format!("message {i}"))).count();
        assert_eq!(n, 1, "message {i} is in the conversation {n} times");
    }
    let results = tool_results(&stored.conversation);
    let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["c1", "c2", "c3"], "one result per call (the rest of the batch skipped by the steering)");
    let runs = std::fs::read_to_string(workspace.join("runs.txt")).unwrap();
    assert_eq!(runs, "c1\nc1-end\n", "only the first command ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_and_a_stop_through_a_worker_that_does_not_run_the_turn_reach_it() {
    let Some(server) = database() else { return };
    let db = Database::new(&server, "steer");
    let url = db.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let flow = workflow(dir.path());
    let workers: Vec<Worker> = (0..2).map(|_| Worker::start(&url, &flow, &workspace)).collect();
    let client = reqwest::Client::new();

    // Steering: the turn starts on worker 0; a message through worker 1 lands at its next checkpoint.
    let k = unique_key("steer");
    let (_, started) =
        post(&client, workers[0].url(&format!("/api/sessions/{k}/messages")), json!({"text": "go"})).await;
    assert_eq!(started["routed"], "started");
    approve_on(&client, &workers[0], &k, "c1", true).await;
    let (_, steered) =
        post(&client, workers[1].url(&format!("/api/sessions/{k}/messages")), json!({"text": "stop after this one"}))
            .await;
    assert_eq!(steered["routed"], "steered", "{steered}");
    std::fs::write(workspace.join("release"), "").unwrap();
    let stored = settled(&url, &k).await;
    let history = &stored.conversation;
    assert_eq!(history.iter().filter(|i| **i == Item::user("stop after this one")).count(), 1);
    let results = tool_results(history);
    assert!(results[1].1.contains("Skipped") && results[2].1.contains("Skipped"), "{results:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("runs.txt")).unwrap(), "c1\nc1-end\n");

    // Stopping: the turn runs on worker 1; a stop through worker 0 cancels it at its next checkpoint.
    std::fs::remove_file(workspace.join("release")).unwrap();
    std::fs::remove_file(workspace.join("runs.txt")).unwrap();
    let k = unique_key("stop");
    let (_, started) =
        post(&client, workers[1].url(&format!("/api/sessions/{k}/messages")), json!({"text": "go"})).await;
    assert_eq!(started["routed"], "started");
    approve_on(&client, &workers[1], &k, "c1", true).await;
    // Stopped once c1 runs (a stop before it starts would rightly keep it from running at all).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(workspace.join("runs.txt")).unwrap_or_default().contains("c1\n") {
        assert!(Instant::now() < deadline, "c1 did not start within 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, stopped) = post(&client, workers[0].url(&format!("/api/sessions/{k}/stop")), json!({})).await;
    assert_eq!((status, stopped["cancelled"].clone()), (200, json!(true)), "{stopped}");
    std::fs::write(workspace.join("release"), "").unwrap();
    let stored = settled(&url, &k).await;
    // A stop cancels the running turn, its running tool included (SPEC 4.8): c1 is cancelled (or had just ended),
    // and nothing runs after it.
    let runs = std::fs::read_to_string(workspace.join("runs.txt")).unwrap();
    assert!(runs == "c1\n" || runs == "c1\nc1-end\n", "nothing after the stop: {runs:?}");
    let results = tool_results(&stored.conversation);
    assert_eq!(results.len(), 3, "every call has a result: {results:?}");
    let skipped = |r: &(String, String)| {
        let text = r.1.to_lowercase();
        text.contains("stopped") || text.contains("cancel") || text.contains("skipped")
    };
    assert!(skipped(&results[1]) && skipped(&results[2]), "{results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_worker_running_a_turn_is_killed_another_takes_it_over_and_finishes_it() {
    let Some(server) = database() else { return };
    let db = Database::new(&server, "takeover");
    let url = db.url.clone();
    // Kill points: while the first command waits for its approval, while it runs, while the second waits.
    for kill_point in ["c1 asked", "c1 running", "c2 asked"] {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir(&workspace).unwrap();
        let (flow, answers) = (workflow(dir.path()), workflow_file(dir.path(), true));
        let mut workers = vec![Worker::start(&url, &flow, &workspace), Worker::start(&url, &answers, &workspace)];
        let client = reqwest::Client::new();
        let k = unique_key("takeover");
        let (_, started) =
            post(&client, workers[0].url(&format!("/api/sessions/{k}/messages")), json!({"text": "go"})).await;
        assert_eq!(started["routed"], "started");
        let who = who_asks(&client, &workers, &k, "c1").await;
        assert_eq!(who, 0);
        if kill_point != "c1 asked" {
            approve_on(&client, &workers[0], &k, "c1", true).await;
            // c1 has started when its first line is written.
            let deadline = Instant::now() + Duration::from_secs(30);
            while !std::fs::read_to_string(workspace.join("runs.txt")).is_ok_and(|r| r.starts_with("c1")) {
                assert!(Instant::now() < deadline, "c1 did not start");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if kill_point == "c2 asked" {
            std::fs::write(workspace.join("release"), "").unwrap();
            let _ = who_asks(&client, &workers[..1], &k, "c2").await;
        }
        // A steering message queued before the kill must survive it, and be shown once.
        let (_, steered) =
            post(&client, workers[1].url(&format!("/api/sessions/{k}/messages")), json!({"text": "keep going"})).await;
        assert_eq!(steered["routed"], "steered", "{kill_point}: {steered}");
        let killed_at = Instant::now();
        workers[0].kill9();
        std::fs::write(workspace.join("release"), "").unwrap();
        // Worker 1 takes the turn over once the lease (2 s) expired; what waits for approval there is answered.
        let deadline = Instant::now() + Duration::from_secs(30);
        let stored = loop {
            for (call, _) in pending_calls(&client, &workers[1].base, Some(&k)).await {
                if call == "c2" || call == "c3" {
                    approve_on(&client, &workers[1], &k, &call, false).await;
                }
            }
            let store = noetic_postgres::PgLogStore::connect(&url).await.unwrap();
            let (stored, holder) = view(&store, &k).await;
            if stored.open_turn.is_none() && holder.is_none() {
                break stored;
            }
            assert!(Instant::now() < deadline, "{kill_point}: not taken over within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        eprintln!("{kill_point}: taken over and finished {} ms after kill -9", killed_at.elapsed().as_millis());
        let history = &stored.conversation;
        let results = tool_results(history);
        let mut ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), results.len(), "{kill_point}: one result per call id: {results:?}");
        assert_eq!(ids, ["c1", "c2", "c3"], "{kill_point}: every call has its result: {results:?}");
        let runs = std::fs::read_to_string(workspace.join("runs.txt")).unwrap_or_default();
        assert!(runs.matches("c1\n").count() <= 1, "{kill_point}: c1 never re-run: {runs}");
        assert!(!runs.contains("c2\n") || kill_point == "c2 asked", "{kill_point}: {runs}");
        let shown = history.iter().filter(|i| **i == Item::user("keep going")).count()
            + stored.queue.iter().filter(|m| m.text == "keep going").count();
        assert_eq!(shown, 1, "{kill_point}: the steering message survives the kill, once");
        assert!(
            matches!(history.last(), Some(Item::Message { role: noetic::model::Role::Assistant, .. })),
            "{kill_point}: the turn finished with an answer: {:?}",
            history.last()
        );
    }
}

/// Approves every pending approval on `workers` until `stop` is set (so turns run through without the test
/// choosing when).
fn approve_everything(
    workers: Vec<String>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for base in &workers {
                for (call, session) in pending_calls(&client, base, None).await {
                    let body = json!({ "approve": true, "session": session });
                    let _ = client.post(format!("{base}/api/approvals/{call}")).json(&body).send().await;
                }
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_at_random_moments_never_makes_a_tool_run_twice_or_a_message_vanish() {
    let Some(server) = database() else { return };
    let db = Database::new(&server, "random");
    let url = db.url.clone();
    let trials: u64 = std::env::var("NOETIC_PG_KILL_TRIALS").ok().and_then(|t| t.parse().ok()).unwrap_or(4);
    for trial in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir(&workspace).unwrap();
        std::fs::write(workspace.join("release"), "").unwrap();
        let (flow, answers) = (workflow(dir.path()), workflow_file(dir.path(), true));
        let mut workers = vec![Worker::start(&url, &flow, &workspace), Worker::start(&url, &answers, &workspace)];
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let approver = approve_everything(workers.iter().map(|w| w.base.clone()).collect(), stop.clone());
        let client = reqwest::Client::new();
        let k = unique_key("random");
        let (_, started) =
            post(&client, workers[0].url(&format!("/api/sessions/{k}/messages")), json!({"text": "go"})).await;
        assert_eq!(started["routed"], "started");
        // A random moment in the turn (model answer, approvals, the three commands, the end), then a message
        // through the other worker, then kill -9.
        let delay = Duration::from_millis((trial * 37 + u64::from(std::process::id())) % 150);
        tokio::time::sleep(delay).await;
        let (status, _) =
            post(&client, workers[1].url(&format!("/api/sessions/{k}/messages")), json!({"text": "keep going"})).await;
        assert_eq!(status, 202);
        workers[0].kill9();
        // Worker 1 takes over what is left (an unfinished turn, or the message queued for the dead worker).
        let stored = settled(&url, &k).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        approver.await.unwrap();
        let history = &stored.conversation;
        let calls: Vec<String> = history
            .iter()
            .filter_map(|i| match i {
                Item::ToolCall(c) => Some(c.id.to_string()),
                _ => None,
            })
            .collect();
        let results = tool_results(history);
        for call in &calls {
            let n = results.iter().filter(|(id, _)| id == call).count();
            assert_eq!(n, 1, "trial {trial} ({delay:?}): call {call} has {n} results: {results:?}");
        }
        let runs = std::fs::read_to_string(workspace.join("runs.txt")).unwrap_or_default();
        for c in ["c1\n", "c2\n", "c3\n"] {
            assert!(runs.matches(c).count() <= 1, "trial {trial} ({delay:?}): {c} ran twice: {runs}");
        }
        let go = history.iter().filter(|i| **i == Item::user("go")).count();
        let keep = history.iter().filter(|i| **i == Item::user("keep going")).count();
        assert!(go <= 1, "trial {trial} ({delay:?}): the first message is in the conversation {go} times");
        assert_eq!(keep, 1, "trial {trial} ({delay:?}): the steering message is shown once: {history:?}");
        eprintln!("trial {trial}: killed {} ms in, {} items, runs {:?}", delay.as_millis(), history.len(), runs);
        drop(workers);
    }
}

/// Two workers on a throwaway database, and a turn started on the first that waits for c1's approval there.
struct TwoWorkers {
    _db: Database,
    _dir: tempfile::TempDir,
    workspace: std::path::PathBuf,
    workers: Vec<Worker>,
    client: reqwest::Client,
    key: String,
    url: String,
}

/// [`TwoWorkers`]; the second worker's script only answers when `second_answers_only` (it takes turns over).
async fn two_workers_with_a_turn(server: &str, tag: &str, second_answers_only: bool) -> TwoWorkers {
    let db = Database::new(server, tag);
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let (flow, second) = (workflow(dir.path()), workflow_file(dir.path(), second_answers_only));
    let workers = vec![Worker::start(&db.url, &flow, &workspace), Worker::start(&db.url, &second, &workspace)];
    let client = reqwest::Client::new();
    let key = unique_key(tag);
    let (_, started) =
        post(&client, workers[0].url(&format!("/api/sessions/{key}/messages")), json!({"text": "go"})).await;
    assert_eq!(started["routed"], "started");
    assert_eq!(who_asks(&client, &workers, &key, "c1").await, 0);
    let url = db.url.clone();
    TwoWorkers { _db: db, _dir: dir, workspace, workers, client, key, url }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_posted_while_a_dead_workers_turn_waits_to_be_taken_over_are_accepted_and_each_shown_once() {
    let Some(server) = database() else { return };
    let TwoWorkers { _db, _dir, workspace, mut workers, client, key: k, url } =
        two_workers_with_a_turn(&server, "takeover_window", true).await;
    workers[0].kill9();
    std::fs::write(workspace.join("release"), "").unwrap();
    // One message while the dead worker's lease still runs, one in the window after it lapsed and before the
    // survivor (which looks every 2 s) took the turn over: both are accepted, neither refused.
    let store = noetic_postgres::PgLogStore::connect(&url).await.unwrap();
    let mut sent = Vec::new();
    let mut in_the_window = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (stored, holder) = view(&store, &k).await;
        let (unfinished, lapsed) = (stored.open_turn.is_some(), holder.is_none());
        if sent.is_empty() || (unfinished && lapsed && !in_the_window) {
            in_the_window = !sent.is_empty();
            let text = format!("note {}", sent.len());
            let (status, routed) =
                post(&client, workers[1].url(&format!("/api/sessions/{k}/messages")), json!({"text": text})).await;
            assert_eq!(status, 202, "{text} accepted while the turn waits for a new owner: {routed}");
            sent.push(text);
        }
        if !unfinished && !sent.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "not taken over within 30 s");
        for (call, _) in pending_calls(&client, &workers[1].base, Some(&k)).await {
            approve_on(&client, &workers[1], &k, &call, false).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !in_the_window {
        eprintln!("the takeover came before this test saw the lapsed lease: only the message before it was sent");
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let approver = approve_everything(vec![workers[1].base.clone()], stop.clone());
    let stored = settled(&url, &k).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    approver.await.unwrap();
    for text in &sent {
        let shown = stored.conversation.iter().filter(|i| **i == Item::user(text.as_str())).count();
        assert_eq!(shown, 1, "{text} shown once: {:?}", stored.conversation);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_through_different_workers_reaches_the_model_in_the_order_it_was_accepted() {
    let Some(server) = database() else { return };
    let TwoWorkers { _db, _dir, workspace, workers, client, key: k, url } =
        two_workers_with_a_turn(&server, "order", false).await;
    approve_on(&client, &workers[0], &k, "c1", true).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(workspace.join("runs.txt")).is_ok_and(|r| r.starts_with("c1")) {
        assert!(Instant::now() < deadline, "c1 did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While c1 runs on worker 0: elsewhere, here, elsewhere — each answered before the next is sent.
    let texts = ["first: do X", "no, do Y instead", "and then Z"];
    for (text, through) in texts.iter().zip([1, 0, 1]) {
        let (status, routed) =
            post(&client, workers[through].url(&format!("/api/sessions/{k}/messages")), json!({"text": text})).await;
        assert_eq!((status, routed["routed"].as_str()), (202, Some("steered")), "{text}: {routed}");
    }
    std::fs::write(workspace.join("release"), "").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let approver = approve_everything(workers.iter().map(|w| w.base.clone()).collect(), stop.clone());
    let stored = settled(&url, &k).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    approver.await.unwrap();
    let users: Vec<&str> = stored
        .conversation
        .iter()
        .filter_map(|i| match i {
            Item::Message { role: noetic::model::Role::User, .. } => i.text(),
            _ => None,
        })
        .filter(|t| texts.contains(t))
        .collect();
    assert_eq!(users, texts, "the model sees the messages in acceptance order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_does_not_run_a_sessions_turn_shows_it_as_stored_running_while_it_runs_and_finished_after() {
    let Some(server) = database() else { return };
    let TwoWorkers { _db, _dir, workspace, workers, client, key: k, url } =
        two_workers_with_a_turn(&server, "views", false).await;
    let during: Value =
        client.get(workers[1].url(&format!("/api/sessions/{k}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(during["busy"], true, "worker 1 sees the turn worker 0 runs: {during}");
    assert!(during["running_on"].is_string(), "and says where it runs: {during}");
    assert!(during["unfinished_turn"].is_null(), "a running turn is not one left behind: {during}");
    std::fs::write(workspace.join("release"), "").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let approver = approve_everything(workers.iter().map(|w| w.base.clone()).collect(), stop.clone());
    let stored = settled(&url, &k).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    approver.await.unwrap();
    for (i, worker) in workers.iter().enumerate() {
        let after: Value =
            client.get(worker.url(&format!("/api/sessions/{k}"))).send().await.unwrap().json().await.unwrap();
        assert_eq!(after["busy"], false, "worker {i}: {after}");
        assert!(after["unfinished_turn"].is_null(), "worker {i} shows no unfinished turn: {after}");
        assert_eq!(
            after["history"].as_array().unwrap().len(),
            stored.conversation.len(),
            "worker {i} shows the whole conversation: {after}"
        );
    }
}
