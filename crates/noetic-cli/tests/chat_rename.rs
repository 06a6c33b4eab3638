//! `/rename TITLE` in `noetic chat` at a real terminal (tmux; #33): the session gets a title, also while its turn
//! waits at an approval question (which is asked again, and the turn goes on), and `noetic sessions` lists it.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::terminal::Terminal;
use common::{answer, noetic, run, tool_calls};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

#[tokio::test(flavor = "multi_thread")]
async fn slash_rename_titles_the_session_while_its_turn_waits_for_an_approval_and_the_list_shows_it() {
    let server = MockServer::start().await;
    let call = tool_calls(&[("c1", "run_command", json!({"command": "rm -rf build"}))]);
    let chat_completions = || Mock::given(method("POST")).and(path("/v1/chat/completions"));
    chat_completions().respond_with(call).up_to_n_times(1).mount(&server).await;
    chat_completions().respond_with(answer("Left it alone.")).mount(&server).await;
    let ws = tempfile::tempdir().unwrap();
    let db = ws.path().join("sessions.db");
    let mut cmd = noetic();
    cmd.args(["chat", "--session", "notes", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri())])
        .arg("--db")
        .arg(&db)
        .arg("--workspace")
        .arg(ws.path());
    let Some(term) = Terminal::start(&cmd) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("/rename");
        term.wait_for("this session has no title; /rename TITLE gives it one");
        term.type_line("Clean the build folder.");
        term.wait_for("approve: run `rm -rf build`?");
        term.type_line("/rename Build cleanup");
        term.wait_for("session notes is now titled Build cleanup");
        term.wait_for_input_line("answer y/n/a or type what to do instead>");
        term.type_line("n");
        term.wait_for("Left it alone.");
        term.wait_for("■ turn done");
        term.type_line("/rename");
        term.wait_for("title: Build cleanup; /rename TITLE changes it");
        term.keep_capture("rename");
        term.type_line("/quit");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
    let listed = run(noetic().arg("sessions").arg("--db").arg(&db));
    let row = listed.stdout.lines().find(|l| l.starts_with("notes ")).unwrap_or_else(|| panic!("{}", listed.stdout));
    assert!(row.contains(" Build cleanup "), "{row}");
    assert!(!row.contains(" yes "), "the turn finished: {row}");
}
