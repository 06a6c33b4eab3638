//! Budgets in `noetic chat` at a real terminal (tmux; #31 item 4): noetic.toml's `[budget]` ends a turn before the
//! call past its limit, a message typed while the session is paused queues (and says why), and `/budget` shows the
//! pause and raises the limit, which runs the queued message.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::terminal::Terminal;
use common::{answer, noetic, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Answers each request with the next response; the last one repeats.
async fn server(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    let last = responses.len() - 1;
    for (i, response) in responses.into_iter().enumerate() {
        let mock = Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(response);
        if i < last { mock.up_to_n_times(1).mount(&server).await } else { mock.mount(&server).await }
    }
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_over_its_budget_pauses_the_chat_and_slash_budget_raises_it_and_runs_what_queued() {
    let server = server(vec![
        tool_calls(&[("c1", "list_dir", json!({"path": "."}))]),
        tool_calls(&[("c2", "list_dir", json!({"path": "."}))]),
        answer("All looked at."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join("noetic.toml");
    std::fs::write(&config, "[budget.turn]\ntool_calls = 1\n").unwrap();
    let mut cmd = noetic();
    cmd.args(["chat", "--no-store", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri())])
        .arg("--config")
        .arg(&config)
        .arg("--workspace")
        .arg(ws.path());
    let Some(term) = Terminal::start(&cmd) else { return };
    let requests = tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Look around twice.");
        term.wait_for("tool_calls limit of 1 was reached (1 used)");
        term.wait_for_input_line(">");
        term.type_line("And now?");
        term.wait_for("paused over its budget");
        term.type_line("/budget");
        term.wait_for("paused: the turn budget's tool_calls limit of 1 was reached");
        term.type_line("/budget turn.tool_calls=5");
        term.wait_for("budget raised; the queued messages run now");
        term.wait_for("All looked at.");
        term.keep_capture("budget");
        term.type_line("/quit");
        term.wait_for("[exit status 0]");
    });
    requests.await.unwrap();
    let bodies: Vec<Value> =
        server.received_requests().await.unwrap().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect();
    assert_eq!(bodies.len(), 3, "no model call while the session was paused");
    let last = bodies[2]["messages"].as_array().unwrap().last().cloned().unwrap();
    assert_eq!(last["content"], "And now?", "the queued message ran once the limit was raised");
}
