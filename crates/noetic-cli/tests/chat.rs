//! `noetic chat` driven through stdin (a pipe, or a pseudo-terminal where approvals are needed) against a local server speaking OpenAI chat completions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{Driven, answer, noetic, run, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn server(first: ResponseTemplate, then: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(first)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(then).mount(&server).await;
    server
}

fn chat(server: &MockServer, workspace: &Path, extra: &[&str]) -> Driven {
    let mut cmd = noetic();
    cmd.args(["chat", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri()), "--workspace"])
        .arg(workspace)
        .args(extra);
    Driven::spawn(cmd)
}

/// The request bodies the server received, as JSON.
/// Runs a script that drives a chat (its reads block) on a blocking thread, and gives back what it returns.
async fn drive<T: Send + 'static>(script: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(script).await.unwrap()
}

/// The session database a test's chats share, in its workspace, as a `--db` argument.
fn store_in(workspace: &Path) -> String {
    workspace.join("sessions.db").to_str().unwrap().to_owned()
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server.received_requests().await.unwrap().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_runs_a_turn_ledger_prints_the_decisions_and_quit_exits_cleanly() {
    let server =
        server(tool_calls(&[("call_1", "list_dir", json!({"path": "."}))]), answer("One file: hello.txt.")).await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "hi").unwrap();
    let rules = ws.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nid = \"no-delete\"\ndeny_tool = \"delete_file\"\n").unwrap();
    let ledger = ws.path().join("ledger.jsonl");
    let mut args = vec!["--rules", rules.to_str().unwrap(), "--ledger-out", ledger.to_str().unwrap()];
    args.push("--plain");
    let mut driven = chat(&server, ws.path(), &args);
    let out = drive(move || {
        driven.wait_for("noetic chat — test-model");
        driven.send("What is in the workspace?");
        driven.wait_for("tool  list_dir [call_1] → hello.txt rules.toml");
        driven.wait_for("One file: hello.txt.");
        driven.wait_for("■ turn done");
        driven.send("/ledger");
        driven.wait_for("steering ledger (");
        driven.wait_for("ALLOW   tool list_dir");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let requests = bodies(&server).await;
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["model"], "test-model");
    assert!(std::fs::read_to_string(&ledger).unwrap().contains("\"tool_name\":\"list_dir\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn end_of_input_waits_for_the_running_turn_then_exits() {
    let server = server(answer("Hello there."), answer("unused")).await;
    let ws = tempfile::tempdir().unwrap();
    let mut driven = chat(&server, ws.path(), &[]);
    let out = drive(move || {
        driven.send("hi");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("Hello there."), "{}", out.stdout);
    assert!(out.stdout.contains("■ turn done"), "{}", out.stdout);
    assert!(out.stdout.contains("· 10 tokens in, 5 out"), "the turn's tokens: {}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_turn_line_shows_the_cost_the_streamed_answer_reported_and_no_cost_when_none_was_reported() {
    let model = common::streaming::StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = noetic();
    cmd.args(["chat", "--no-store", "--plain", "--model", "test-model", "--base-url", &model.base_url, "--workspace"])
        .arg(ws.path());
    let mut driven = Driven::spawn(cmd);
    let (priced, unpriced) = drive(move || {
        driven.send("hi");
        let (_, reply) = model.next_request();
        reply.text("Hello.");
        reply.finish_using(common::usage_costing(0.00123));
        let priced = driven.wait_for("■ turn done");
        driven.send("again");
        let (_, reply) = model.next_request();
        reply.text("Hello again.");
        reply.finish();
        let unpriced = driven.wait_for("■ turn done");
        driven.send("/quit");
        assert!(driven.finish().status.success());
        (priced, unpriced)
    })
    .await;
    // The context meter: what the last model call read and wrote is what the next one starts from.
    assert!(priced.ends_with("· 10 tokens in, 5 out, $0.0012 · context 15 tokens"), "{priced}");
    assert!(unpriced.ends_with("· 10 tokens in, 5 out · context 15 tokens"), "no made-up cost: {unpriced}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_context_meter_shows_the_context_used_out_of_the_models_window() {
    let model = common::streaming::StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = noetic();
    cmd.args(["chat", "--no-store", "--plain", "--model", "gpt-4o-mini", "--base-url", &model.base_url, "--workspace"])
        .arg(ws.path());
    let mut driven = Driven::spawn(cmd);
    let line = drive(move || {
        driven.send("hi");
        let (_, reply) = model.next_request();
        reply.text("Hello.");
        reply.finish();
        let line = driven.wait_for("■ turn done");
        driven.send("/quit");
        assert!(driven.finish().status.success());
        line
    })
    .await;
    assert!(line.ends_with("· context 15 / 128k"), "gpt-4o-mini's window is 128k tokens: {line}");
}

/// Makes a named pipe: `run_command` with `cat` on it blocks until the test writes, so a tool is "slow" exactly as
/// long as the test wants, without sleeping (`read_file` refuses anything but regular files).
#[cfg(unix)]
fn fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

/// A chat typing into a terminal, so that `run_command` asks for approval and can be approved.
#[cfg(unix)]
fn chat_on_terminal(server: &MockServer, workspace: &Path) -> Driven {
    let mut cmd = noetic();
    cmd.args(["chat", "--plain", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri())])
        .arg("--workspace")
        .arg(workspace);
    Driven::spawn_on_terminal(cmd)
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_line_typed_during_a_slow_tool_is_steered_into_the_turn_and_skips_the_rest_of_the_batch() {
    let server = server(
        tool_calls(&[
            ("c1", "run_command", json!({"command": "cat slow.pipe"})),
            ("c2", "list_dir", json!({"path": "."})),
        ]),
        answer("Stopping there, as you asked."),
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    let pipe = ws.path().join("slow.pipe");
    fifo(&pipe);
    let mut driven = chat_on_terminal(&server, ws.path());
    let out = drive(move || {
        driven.send("Read slow.pipe, then list the folder.");
        driven.wait_for("approve: run `cat slow.pipe`?");
        driven.send("y");
        // The command now waits for the pipe's writer; the line arrives while it runs.
        driven.send("Skip the listing and stop.");
        driven.wait_for("steer message queued");
        std::fs::write(&pipe, "pipe contents").unwrap();
        driven.wait_for("tool  run_command [c1] →");
        driven.wait_for("skip  [c2]");
        driven.wait_for("steer 1 message(s) handed to the model");
        driven.wait_for("■ turn done");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(!out.stdout.contains("tool  list_dir [c2] …"), "the skipped tool never started:\n{}", out.stdout);
    let requests = bodies(&server).await;
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().unwrap();
    let ran = messages.iter().find(|m| m["tool_call_id"] == "c1").unwrap();
    assert!(ran["content"].as_str().unwrap().contains("pipe contents"), "{ran}");
    let last = messages.last().unwrap();
    assert_eq!((last["role"].as_str(), last["content"].as_str()), (Some("user"), Some("Skip the listing and stop.")));
    let skipped = messages.iter().find(|m| m["tool_call_id"] == "c2").unwrap();
    assert_eq!(skipped["content"], "Skipped due to queued user message.");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn stop_cancels_the_running_turn_and_the_chat_goes_on() {
    let server = server(
        tool_calls(&[("c1", "run_command", json!({"command": "cat never.pipe"}))]),
        answer("Second turn answer."),
    )
    .await;
    let ws = tempfile::tempdir().unwrap();
    fifo(&ws.path().join("never.pipe"));
    let mut driven = chat_on_terminal(&server, ws.path());
    let out = drive(move || {
        driven.send("Read never.pipe.");
        driven.wait_for("approve: run `cat never.pipe`?");
        driven.send("y");
        // Nobody ever writes the pipe: only /stop ends the command.
        driven.send("/stop");
        driven.wait_for("■ turn stopped");
        driven.send("Something else, then.");
        driven.wait_for("Second turn answer.");
        driven.wait_for("■ turn done");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("stopping the turn"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn mode_switches_the_steering_mode_and_unknown_commands_are_explained() {
    let server = server(answer("unused"), answer("unused")).await;
    let ws = tempfile::tempdir().unwrap();
    let mut driven = chat(&server, ws.path(), &["--mode", "one-at-a-time"]);
    let out = drive(move || {
        driven.wait_for("steering mode one-at-a-time");
        driven.send("/mode all");
        driven.wait_for("steering mode: all");
        driven.send("/mode sometimes");
        driven.wait_for("unknown mode 'sometimes'");
        driven.send("/frobnicate");
        driven.wait_for("unknown command /frobnicate");
        driven.send("/ledger");
        driven.wait_for("steering ledger: empty");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[test]
fn a_missing_api_key_is_an_error_naming_the_variable() {
    let out = run(noetic().args(["chat", "--model", "openai/gpt-4o-mini"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("set OPENAI_API_KEY"), "{}", out.stderr);
    let out = run(noetic().args(["chat", "--model", "anthropic/claude-sonnet-4-5"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("set ANTHROPIC_API_KEY"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_session_continues_across_two_chat_runs_and_noetic_sessions_lists_shows_and_removes_it() {
    let server = server(answer("Nice to meet you, Ada."), answer("You told me: Ada.")).await;
    let ws = tempfile::tempdir().unwrap();
    let db_arg = store_in(ws.path());
    for (said, expected) in [("My name is Ada.", "Nice to meet you, Ada."), ("What is my name?", "You told me: Ada.")] {
        let mut driven = chat(&server, ws.path(), &["--plain", "--session", "ada", "--db", &db_arg]);
        let out = drive(move || {
            driven.wait_for("continue it later with: noetic chat --session ada");
            driven.send(said);
            driven.wait_for(expected);
            driven.wait_for("■ turn done");
            driven.send("/quit");
            driven.finish()
        })
        .await;
        assert!(out.status.success(), "stderr: {}", out.stderr);
    }
    // The second run's request carried the first run's conversation.
    let second = &bodies(&server).await[1];
    let said: Vec<&str> = second["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(said.contains(&"My name is Ada.") && said.contains(&"Nice to meet you, Ada."), "{said:?}");

    let listed = run(noetic().args(["sessions", "--db", &db_arg]));
    assert!(listed.status.success(), "{}", listed.stderr);
    let row = listed.stdout.lines().find(|l| l.starts_with("ada ")).unwrap_or_else(|| panic!("{}", listed.stdout));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[..6], ["ada", "-", "2", "4", "0", "no"], "{row}");
    let shown = run(noetic().args(["sessions", "show", "ada", "--db", &db_arg]));
    assert!(shown.stdout.contains("User: What is my name?") && shown.stdout.contains("Assistant: You told me: Ada."));
    assert!(shown.stdout.contains("steering ledger ("), "{}", shown.stdout);
    let removed = run(noetic().args(["sessions", "rm", "ada", "--db", &db_arg]));
    assert!(removed.status.success() && removed.stdout.contains("deleted session ada"), "{}", removed.stderr);
    let missing = run(noetic().args(["sessions", "show", "ada", "--db", &db_arg]));
    assert!(!missing.status.success() && missing.stderr.contains("no session 'ada'"), "{}", missing.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_session_name_each_chat_is_a_new_named_session_and_no_store_writes_nothing() {
    let server = server(answer("Hello."), answer("Hello again.")).await;
    let ws = tempfile::tempdir().unwrap();
    let db_arg = store_in(ws.path());
    let mut driven = chat(&server, ws.path(), &["--plain", "--db", &db_arg]);
    let out = drive(move || {
        driven.send("hi");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let name = out.stdout.split("noetic chat --session ").nth(1).unwrap().split_whitespace().next().unwrap().to_owned();
    assert!(name.starts_with("chat-"), "{}", out.stdout);
    assert!(run(noetic().args(["sessions", "--db", &db_arg])).stdout.contains(&name));

    let scratch = ws.path().join("never.db");
    let mut driven = chat(&server, ws.path(), &["--plain", "--no-store", "--db", scratch.to_str().unwrap()]);
    let out = drive(move || {
        driven.send("hi");
        driven.finish()
    })
    .await;
    assert!(!out.status.success() && out.stderr.contains("cannot be used with"), "{}", out.stderr);
    let mut driven = chat(&server, ws.path(), &["--plain", "--no-store"]);
    let out = drive(move || {
        driven.send("hi");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(!out.stdout.contains("--session"), "a throwaway chat offers no continuation: {}", out.stdout);
    assert!(!scratch.exists());
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_message_queued_by_another_process_runs_in_the_idle_chat_that_owns_the_session() {
    let server = server(answer("Hello."), answer("Tidied up, as asked from elsewhere.")).await;
    let ws = tempfile::tempdir().unwrap();
    let db_arg = store_in(ws.path());
    let mut driven = chat(&server, ws.path(), &["--plain", "--session", "kept", "--db", &db_arg]);
    let out = drive(move || {
        driven.send("Hi.");
        driven.wait_for("■ turn done");
        // The chat is idle, waiting for a line; another process queues a message for its session.
        let steer = run(noetic().args(["sessions", "--db", &db_arg, "steer", "kept", "tidy up the notes"]));
        assert!(steer.status.success(), "{}", steer.stderr);
        driven.wait_for("a message another process queued for this session: running it");
        driven.wait_for("Tidied up, as asked from elsewhere.");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let second = &bodies(&server).await[1];
    let last = second["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["role"].as_str(), last["content"].as_str()), (Some("user"), Some("tidy up the notes")));
}
