//! `noetic chat` at a real terminal (tmux): the input line stays at the bottom while the agent's output scrolls
//! above it, keys stop turns, and approval questions take y, n, always or a message. The model is a local server:
//! a streaming one the test writes piece by piece, or wiremock with whole answers.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::streaming::StreamingModel;
use common::terminal::Terminal;
use common::{answer, noetic, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// `noetic chat` on `base_url` in a terminal, working in `workspace`.
fn chat(base_url: &str, workspace: &Path, extra: &[&str]) -> Option<Terminal> {
    let mut cmd = noetic();
    cmd.args(["chat", "--no-store", "--model", "test-model", "--base-url", base_url, "--workspace"])
        .arg(workspace)
        .args(extra);
    Terminal::start(&cmd)
}

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

async fn bodies(server: &MockServer) -> Vec<Value> {
    server.received_requests().await.unwrap().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
}

/// The messages of a request as (role, content) pairs.
fn messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or("").to_owned(), m["content"].as_str().unwrap_or("").to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn text_typed_while_the_answer_streams_stays_on_the_input_line_and_a_sent_line_is_steered_into_the_turn() {
    let model = StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&model.base_url, ws.path(), &[]) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Write hello to a file.");
        term.wait_for("you   Write hello to a file.");
        let (_, reply) = model.next_request();
        reply.text("To write hello");
        term.wait_for("To write hello");
        // Typed while the answer is half-way through its line.
        term.type_text("actually, call it greeting.txt");
        term.wait_for_input_line("steer (Esc stops)> actually, call it greeting.txt");
        reply.text(" I will use write_file.\nOne moment");
        term.wait_for("One moment");
        let screen = term.screen();
        let streamed: Vec<&String> = screen.iter().filter(|r| r.contains("To write hello")).collect();
        assert_eq!(streamed, ["To write hello I will use write_file."], "the streamed line stays whole:\n{screen:#?}");
        let typed: Vec<&String> = screen.iter().filter(|r| r.contains("actually")).collect();
        assert_eq!(
            typed,
            ["steer (Esc stops)> actually, call it greeting.txt"],
            "only on the input line:\n{screen:#?}"
        );

        // Sent while the turn runs: echoed as the user's, queued, then handed to the model.
        term.press("Enter");
        term.wait_for("you   actually, call it greeting.txt");
        term.wait_for("steer message queued");
        reply.text(", please.");
        reply.finish();
        let (second, reply) = model.next_request();
        let said = messages(&second);
        assert_eq!(said.last().unwrap(), &("user".to_owned(), "actually, call it greeting.txt".to_owned()));
        reply.text("greeting.txt it is.");
        reply.finish();
        term.wait_for("greeting.txt it is.");
        term.wait_for("■ turn done");
        term.wait_for_input_line(">");
        let history = term.history();
        let queued = history.iter().position(|r| r.contains("steer message queued")).unwrap();
        let echoed = history.iter().position(|r| r.contains("you   actually")).unwrap();
        assert!(echoed < queued, "the echo comes first:\n{}", history.join("\n"));

        // Ctrl-C at an idle prompt asks for a second one, which quits.
        term.press("C-c");
        term.wait_for("press Ctrl-C again (or Ctrl-D) to quit");
        term.press("C-c");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn esc_or_ctrl_c_stops_the_running_turn_and_the_chat_takes_the_next_message() {
    let model = StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&model.base_url, ws.path(), &[]) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Think for a long time.");
        let (_, reply) = model.next_request();
        reply.text("Thinking");
        term.wait_for("Thinking");
        term.wait_for_input_line("steer (Esc stops)>");
        term.press("Escape");
        term.wait_for("stopping the turn");
        term.wait_for("■ turn stopped (stopped by the user)");
        term.wait_for_input_line(">");
        drop(reply);
        term.type_line("Something else, then.");
        let (_, reply) = model.next_request();
        reply.text("Second answer.");
        reply.finish();
        term.wait_for("Second answer.");
        term.wait_for("■ turn done");
        term.type_line("And a third thing.");
        let (_, reply) = model.next_request();
        reply.text("Working on the third");
        term.wait_for("Working on the third");
        term.press("C-c");
        term.wait_until("a second stopped turn", |rows| {
            rows.iter().filter(|r| r.contains("■ turn stopped")).count() == 2
        });
        term.wait_for_input_line(">");
        assert!(!term.history().iter().any(|r| r.contains("press Ctrl-C again")), "Ctrl-C in a turn only stops it");
        drop(reply);
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_y_typed_while_a_turn_runs_and_no_question_waits_is_not_sent_and_steer_sends_it() {
    let model = StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&model.base_url, ws.path(), &[]) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Tidy up.");
        let (_, reply) = model.next_request();
        reply.text("Looking around");
        term.wait_for("Looking around");
        term.wait_for_input_line("steer (Esc stops)>");
        term.type_line("y");
        term.wait_for(
            "no approval question is waiting, so 'y' was not sent; to send it to the agent as a message, type /steer y",
        );
        term.type_line("/steer y");
        term.wait_for("steer message queued");
        let history = term.history();
        assert_eq!(
            history.iter().filter(|r| r.contains("steer message queued")).count(),
            1,
            "only /steer y was queued:\n{}",
            history.join("\n")
        );
        reply.finish();
        let (second, reply) = model.next_request();
        assert_eq!(messages(&second).last().unwrap(), &("user".to_owned(), "y".to_owned()));
        reply.text("Done.");
        reply.finish();
        term.wait_for("■ turn done");
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_answered_with_free_text_declines_the_call_and_steers_the_turn() {
    let server = server(vec![
        tool_calls(&[("c1", "run_command", json!({"command": "rm -rf build"}))]),
        answer("Understood, I will only list it."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path(), &[]) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Clean the build folder.");
        term.wait_for("approve: run `rm -rf build`? [y]es / [N]o / [a]lways these args / a matching \"GLOB\" / or type what to do instead");
        term.wait_for_input_line("answer y/n/a or type what to do instead>");
        term.type_line("no, just list the folder");
        term.wait_for("the call is rejected and your line goes to the agent as a message");
        term.wait_for("Understood, I will only list it.");
        term.wait_for("■ turn done");
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
    let requests = bodies(&server).await;
    assert_eq!(requests.len(), 2);
    let said = messages(&requests[1]);
    assert_eq!(said.last().unwrap(), &("user".to_owned(), "no, just list the folder".to_owned()));
    let rejected = said.iter().find(|(role, _)| role == "tool").unwrap();
    assert!(rejected.1.contains("was rejected"), "{rejected:?}");
    assert!(!ws.path().join("build").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn always_allow_runs_the_same_call_again_without_asking_but_asks_about_other_arguments() {
    let server = server(vec![
        tool_calls(&[("c1", "run_command", json!({"command": "echo first"}))]),
        tool_calls(&[("c2", "run_command", json!({"command": "echo first"}))]),
        tool_calls(&[("c3", "run_command", json!({"command": "echo second"}))]),
        answer("All ran."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path(), &[]) else { return };
    let history = tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Run them.");
        term.wait_for("approve: run `echo first`?");
        term.type_line("a");
        term.wait_for("approved without asking: you allowed run_command with exactly these arguments in this chat");
        term.wait_for("approve: run `echo second`?");
        term.type_line("y");
        term.wait_for("All ran.");
        term.wait_for("■ turn done");
        let history = term.history();
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
        history
    })
    .await
    .unwrap();
    let questions = history.iter().filter(|r| r.contains("approve: run")).count();
    assert_eq!(questions, 2, "no question for the repeated call:\n{}", history.join("\n"));
    let requests = bodies(&server).await;
    let said = messages(&requests[3]);
    let outputs: Vec<&String> = said.iter().filter(|(role, _)| role == "tool").map(|(_, c)| c).collect();
    assert!(outputs[0].contains("first") && outputs[1].contains("first"), "{outputs:?}");
    assert!(outputs[2].contains("second"), "{outputs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_file_approval_shows_the_diff_against_the_current_file_with_escape_codes_escaped() {
    let server = server(vec![
        tool_calls(&[(
            "w1",
            "write_file",
            json!({"path": "notes.txt", "content": "one\n2\nthree\n\u{1b}[31mred\u{1b}[0m\n"}),
        )]),
        answer("Updated the notes."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    let rules = ws.path().join("rules.toml");
    std::fs::write(&rules, "[[rule]]\nid = \"ask-before-writing\"\nrequire_approval = \"write_file\"\n").unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path(), &["--rules", rules.to_str().unwrap()]) else {
        return;
    };
    let screen = tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Fix the notes.");
        term.wait_for("approve: call write_file with");
        let screen = term.screen();
        term.type_line("y");
        term.wait_for("Updated the notes.");
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
        screen
    })
    .await
    .unwrap();
    let start = screen.iter().position(|r| r.starts_with("write_file changes notes.txt:")).unwrap();
    let diff: Vec<&str> = screen[start + 1..].iter().take(8).map(String::as_str).collect();
    assert_eq!(
        diff,
        [
            "--- notes.txt",
            "+++ notes.txt",
            "@@ -1,3 +1,4 @@",
            " one",
            "-two",
            "+2",
            " three",
            "+\\u001b[31mred\\u001b[0m",
        ],
        "{}",
        screen.join("\n")
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "one\n2\nthree\n\u{1b}[31mred\u{1b}[0m\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_plain_a_chat_at_a_terminal_prints_plain_lines_and_reads_typed_lines() {
    let server = server(vec![answer("Plain hello.")]).await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path(), &["--plain"]) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for("steering mode one-at-a-time");
        term.type_line("hi");
        term.wait_for("Plain hello.");
        term.wait_for("■ turn done");
        let history = term.history();
        assert!(!history.iter().any(|r| r.contains("steer (Esc stops)>") || r.starts_with("you   ")), "{history:#?}");
        term.type_line("/quit");
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn always_matching_a_pattern_runs_the_calls_it_covers_and_still_asks_about_a_chained_command() {
    let server = server(vec![
        tool_calls(&[("c1", "run_command", json!({"command": "echo one"}))]),
        tool_calls(&[("c2", "run_command", json!({"command": "echo two"}))]),
        tool_calls(&[("c3", "run_command", json!({"command": "echo three; echo four"}))]),
        answer("Done."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path(), &[]) else { return };
    let history = tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("Echo.");
        term.wait_for("approve: run `echo one`?");
        term.type_line("always allow run_command matching \"echo *\"");
        term.wait_for("approved without asking: you allowed run_command matching \"echo *\" in this chat");
        term.wait_for("approve: run `echo three; echo four`?");
        term.type_line("n");
        term.wait_for("Done.");
        term.wait_for("■ turn done");
        let history = term.history();
        term.press("C-d");
        assert_eq!(term.exit_status(), 0);
        history
    })
    .await
    .unwrap();
    let questions = history.iter().filter(|r| r.contains("approve: run")).count();
    assert_eq!(questions, 2, "echo two ran without a question:\n{}", history.join("\n"));
    let requests = bodies(&server).await;
    let said = messages(&requests[3]);
    let outputs: Vec<&String> = said.iter().filter(|(role, _)| role == "tool").map(|(_, c)| c).collect();
    assert!(outputs[0].contains("one") && outputs[1].contains("two"), "{outputs:?}");
    assert!(outputs[2].contains("declined"), "{outputs:?}");
}
