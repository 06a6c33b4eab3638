//! `noetic serve` after a crash: a message for a session whose turn a killed process left is accepted (not refused
//! with 503) and resumes that turn here, which shows the message to the model once (issue #29 item 5).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::served::{Served, workflow_command};
use serde_json::{Value, json};

/// The first process's script: three commands, each needing approval. The second one's: only the answer (the
/// journaled response is not asked for again, and each process's script counts from its own first call).
const WORKFLOW: &str = r#"
instructions = "You run the project's checks."
model = "scripted"
tools = ["run_command"]
max_rounds = 8
"#;
const CHECKS: &str = r#"
[[scripted.response]]
text = "Running the checks."
tool_calls = [
  { id = "c1", name = "run_command", args = { command = "echo one" } },
  { id = "c2", name = "run_command", args = { command = "echo two" } },
]
"#;
const ANSWER: &str = r#"
[[scripted.response]]
text = "Resumed, and noted your message."
"#;

/// `noetic serve` of `workflow`; a test that fails stops it too (`Served` kills it when dropped).
fn start(workflow: &Path, workspace: &Path, db: &Path) -> (Served, String) {
    let served = Served::spawn(workflow_command(workflow, workspace, db, &[]));
    let base = served.base.clone();
    (served, base)
}

/// Polls `GET path` until `done` holds of the answer (a real process: bounded by a generous deadline).
async fn until(client: &reqwest::Client, url: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: Value = client.get(url).send().await.unwrap().json().await.unwrap_or(Value::Null);
        if done(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within 30 s: {got}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_for_a_turn_a_killed_server_left_is_accepted_and_resumes_the_turn_which_shows_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let db = dir.path().join("noetic.db");
    let (first, second) = (dir.path().join("first.toml"), dir.path().join("second.toml"));
    std::fs::write(&first, format!("{WORKFLOW}{CHECKS}")).unwrap();
    std::fs::write(&second, format!("{WORKFLOW}{ANSWER}")).unwrap();
    let client = reqwest::Client::new();

    let (mut killed, base) = start(&first, &workspace, &db);
    let (status, _) =
        post(&client, &format!("{base}/api/sessions/r1/messages"), json!({"text": "run the checks"})).await;
    assert_eq!(status, 202);
    until(&client, &format!("{base}/api/approvals"), "c1 waiting for approval", |a| {
        a["approvals"].as_array().is_some_and(|l| l.iter().any(|p| p["call_id"] == "c1"))
    })
    .await;
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    let (served, base) = start(&second, &workspace, &db);
    let session_url = format!("{base}/api/sessions/r1");
    let before: Value = client.get(&session_url).send().await.unwrap().json().await.unwrap();
    assert!(before["unfinished_turn"].is_string(), "the killed server left the turn unfinished: {before}");
    let (status, routed) =
        post(&client, &format!("{session_url}/messages"), json!({"text": "only the first check, please"})).await;
    assert_eq!(status, 202, "accepted, not refused: {routed}");
    assert_eq!(routed["routed"], "steered", "queued for the unfinished turn: {routed}");
    assert_eq!(routed["turn"], 1, "the resumed turn keeps its number");
    // The call that waited for approval when the process died is not run unknowingly: it gets the interrupted
    // result, the checkpoint after it injects the message and skips the rest, and the model answers.
    let after = until(&client, &session_url, "the resumed turn's end", |s| {
        s["busy"] == false && s["unfinished_turn"].is_null() && s["history"].as_array().is_some_and(|h| h.len() > 3)
    })
    .await;
    let history = after["history"].as_array().unwrap();
    let results: Vec<(&str, &str)> = history
        .iter()
        .filter(|i| i["type"] == "tool_result")
        .map(|i| (i["call_id"].as_str().unwrap(), i["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        results,
        [("c1", noetic::turn::INTERRUPTED_RESULT), ("c2", "Skipped due to queued user message.")],
        "one result per call: the interrupted one, then the rest of the batch skipped for the message"
    );
    let shown = history.iter().filter(|i| i["content"] == "only the first check, please").count();
    assert_eq!(shown, 1, "the message reached the conversation once: {history:?}");
    assert_eq!(history.last().unwrap()["content"], "Resumed, and noted your message.", "{history:?}");
    assert_eq!(after["queued"], json!([]));
    drop(served);
}

async fn post(client: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}
