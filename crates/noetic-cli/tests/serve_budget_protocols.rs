//! A session paused over its budget (#34 item 2), seen through the standard protocols with their official clients:
//! AG-UI's second run input is queued and answered with `noetic.run_routed` `paused` and `RUN_ERROR`
//! `budget_paused`; an A2A message is queued and answered with the task it will run as, `TASK_STATE_SUBMITTED`,
//! saying it is paused over its budget and how it continues. Raising the limit runs the queued message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::served::{Served, workflow_command};
use common::skip;
use serde_json::{Value, json};

/// One tool call per turn; the model asks for a second one (over the turn's budget), then answers.
const BUDGET_WORKFLOW: &str = r#"instructions = "You look around."
model = "scripted"
tools = ["list_dir"]

[budget.turn]
tool_calls = 1

[[scripted.response]]
tool_calls = [{ id = "l1", name = "list_dir", args = { path = "." } }]

[[scripted.response]]
tool_calls = [{ id = "l2", name = "list_dir", args = { path = "." } }]

[[scripted.response]]
text = "Looked twice."
"#;

/// The node package directory `var` (default `$HOME/.cache/DEFAULT`) when it holds `package` and node runs, or a
/// printed reason to skip.
fn client_dir(var: &str, default: &str, package: &str, setup: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache").join(default));
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules").join(package).exists() {
        return Some(dir);
    }
    skip(&format!("{package} in {} or node is missing: run {setup}", dir.display()))
}

/// The budget workflow served; `script` (tests/`script`) run with node against it, `var` pointing at `dir`; the
/// JSON line it printed last.
fn client_test(dir: &Path, var: &str, script: &str) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let (workflow, ws) = (tmp.path().join("budget.toml"), tmp.path().join("ws"));
    std::fs::write(&workflow, BUDGET_WORKFLOW).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let served = Served::spawn(workflow_command(&workflow, &ws, &tmp.path().join("noetic.db"), &[]));
    let out = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(script))
        .arg(&served.base)
        .env(var, dir)
        .output()
        .unwrap();
    let (_, server_stderr) = served.terminate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stderr}\nseen: {stdout}\nserver: {server_stderr}");
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn an_agui_run_to_a_thread_paused_over_its_budget_is_queued_and_ends_with_run_error_budget_paused() {
    let Some(dir) =
        client_dir("NOETIC_AGUI_CLIENT_DIR", "noetic-agui-client", "@ag-ui/core", "scripts/agui-client.sh setup")
    else {
        return;
    };
    let seen = client_test(&dir, "NOETIC_AGUI_CLIENT_DIR", "agui/agui_budget.mjs");
    assert_eq!(seen["firstEnd"]["type"], "RUN_ERROR", "the turn that reached the budget: {seen}");
    assert_eq!(seen["firstEnd"]["code"], "budget_reached", "{seen}");
    assert_eq!(
        seen["second"],
        json!(["RUN_STARTED", "CUSTOM:noetic.run_routed", "STATE_SNAPSHOT", "RUN_ERROR"]),
        "{seen}"
    );
    let routed = &seen["routed"];
    assert_eq!(routed["routed"], "paused", "{seen}");
    assert_eq!(routed["message_ids"].as_array().map(Vec::len), Some(1), "{seen}");
    assert_eq!(routed["budget"]["limit"], "tool_calls", "{seen}");
    assert_eq!(routed["budget"]["scope"], "turn", "{seen}");
    assert_eq!(seen["snapshotPaused"]["limit"], "tool_calls", "the state says so too: {seen}");
    assert_eq!(seen["snapshotQueued"], json!(["look again"]), "{seen}");
    assert_eq!(seen["error"]["code"], "budget_paused", "{seen}");
    let message = seen["error"]["message"].as_str().unwrap();
    assert!(message.contains("paused over its budget") && message.contains("tool_calls limit of 1"), "{message}");
    assert!(message.contains("queued") && message.contains("/budget"), "says how it continues: {message}");
    assert_eq!(seen["raised"], true, "{seen}");
    assert_eq!(seen["after"], json!({ "turns": 2, "busy": false, "paused": null, "answer": "Looked twice." }));
    assert_eq!(seen["warnings"], json!([]), "{seen}");
}

#[test]
fn an_a2a_message_to_a_context_paused_over_its_budget_is_a_submitted_task_saying_how_it_continues() {
    let Some(dir) = client_dir("NOETIC_A2A_SDK_DIR", "noetic-a2a", "@a2a-js/sdk", "scripts/a2a-sdk.sh setup") else {
        return;
    };
    let seen = client_test(&dir, "NOETIC_A2A_SDK_DIR", "a2a/a2a_budget.mjs");
    let context = seen["first"]["id"].as_str().unwrap().trim_end_matches(":1").to_owned();
    assert_eq!(seen["first"]["state"], "TASK_STATE_FAILED", "{seen}");
    assert!(seen["first"]["status"].as_str().unwrap().contains("tool_calls limit of 1"), "{seen}");
    let paused = &seen["paused"];
    assert_eq!(paused["id"], format!("{context}:2"), "the task the queued message runs as: {seen}");
    assert_eq!(paused["state"], "TASK_STATE_SUBMITTED", "{seen}");
    let status = paused["status"].as_str().unwrap();
    assert!(status.contains("paused over its budget") && status.contains("tool_calls limit of 1"), "{status}");
    assert!(status.contains("queued") && status.contains(&format!("/api/sessions/{context}/budget")), "{status}");
    assert_eq!(paused["noetic"]["routed"], "paused", "{seen}");
    assert_eq!(paused["noetic"]["budget"]["limit"], "tool_calls", "{seen}");
    assert_eq!(seen["got"], "TASK_STATE_SUBMITTED", "{seen}");
    assert_eq!(seen["raised"], true, "{seen}");
    assert_eq!(seen["after"], json!({ "state": "TASK_STATE_COMPLETED", "answer": "Looked twice." }), "{seen}");
}
