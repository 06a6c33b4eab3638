//! Call ids as people and programs read them: the transcript shows a call's first 6 characters (providers' ids
//! run to 30 or more), `--json` keeps the whole id.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{answer, noetic, run, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

const LONG_ID: &str = "call_9f8e7d6c5b4a39281706f5e4d3c2b1a0";

async fn run_once(json_lines: bool) -> common::Output {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(tool_calls(&[(LONG_ID, "list_dir", json!({"path": "."}))]))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(answer("Empty.")).mount(&server).await;
    let ws = tempfile::tempdir().unwrap();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "model = \"test-model\"\ntools = [\"list_dir\"]\n").unwrap();
    let mut cmd = noetic();
    cmd.arg("run").arg(&flow).args(["--prompt", "What is here?", "--base-url", &format!("{}/v1", server.uri())]);
    cmd.arg("--workspace").arg(ws.path());
    if json_lines {
        cmd.arg("--json");
    }
    let out = tokio::task::spawn_blocking(move || run(&mut cmd)).await.unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_transcript_shows_a_call_by_its_first_six_characters_and_json_keeps_the_whole_id() {
    let out = run_once(false).await;
    assert!(out.stderr.contains("tool  list_dir [call_9] → flow.toml"), "{}", out.stderr);
    assert!(!out.stderr.contains(LONG_ID), "{}", out.stderr);
    let out = run_once(true).await;
    let lines: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let started = lines.iter().find(|l| l["type"] == "tool_call_started").unwrap();
    assert_eq!(started["call_id"], LONG_ID);
}
