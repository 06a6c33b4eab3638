//! `noetic chat` across sessions, driven through stdin: a reopened session's transcript, the `--resume` picker,
//! a session another chat holds, `/clear`, `/model`, the help once, and the way back said at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{Driven, answer, noetic, run};
use serde_json::Value;
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

/// A chat on `server` in `workspace`, its sessions and help marker in `data` (so that runs share them).
fn chat(server: &MockServer, workspace: &Path, data: &Path, extra: &[&str]) -> Driven {
    let mut cmd = noetic();
    cmd.env("XDG_DATA_HOME", data)
        .args(["chat", "--plain", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri())])
        .arg("--workspace")
        .arg(workspace)
        .args(extra);
    Driven::spawn(cmd)
}

async fn drive<T: Send + 'static>(script: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(script).await.unwrap()
}

async fn bodies(server: &MockServer) -> Vec<Value> {
    server.received_requests().await.unwrap().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect()
}

/// One chat run: says each line, waiting for the turn's end after each, then quits; returns its stdout.
async fn chat_once(server: &MockServer, ws: &Path, data: &Path, extra: &[&str], lines: &[&str]) -> String {
    let mut driven = chat(server, ws, data, extra);
    let lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let out = drive(move || {
        for line in lines {
            driven.send(&line);
            driven.wait_for("■ turn done");
        }
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    out.stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reopened_session_shows_the_transcript_of_its_last_turns_and_the_help_only_on_the_first_start() {
    let server = server(vec![answer("First answer."), answer("Second answer with `code`."), answer("Third.")]).await;
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = chat_once(&server, ws.path(), data.path(), &["--session", "notes"], &["one?", "two?"]).await;
    assert!(first.contains("Type a message and press Enter."), "the help, in full, on the first start:\n{first}");
    assert!(
        first.ends_with("session notes is kept; come back to it with: noetic chat --session notes"),
        "the way back, said at the end:\n{first}"
    );
    let second = chat_once(&server, ws.path(), data.path(), &["--session", "notes", "--history", "1"], &[]).await;
    assert!(!second.contains("Type a message and press Enter."), "no help again:\n{second}");
    assert!(second.contains("type a message; /help lists the commands"), "{second}");
    let lines: Vec<&str> = second.lines().collect();
    let start =
        lines.iter().position(|l| l.contains("earlier turn(s) not shown")).unwrap_or_else(|| panic!("{second}"));
    assert_eq!(
        lines[start..start + 3],
        ["(1 earlier turn(s) not shown; --history N shows the last N)", "you   two?", "Second answer with `code`.",],
        "{second}"
    );
    assert!(!second.contains("you   one?"), "only the last turn:\n{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_offers_the_recent_sessions_by_number_and_continues_the_one_picked() {
    let server = server(vec![answer("Noted.")]).await;
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    chat_once(&server, ws.path(), data.path(), &["--session", "older"], &["about the older one"]).await;
    chat_once(&server, ws.path(), data.path(), &["--session", "newer"], &["about the newer one"]).await;
    let db = data.path().join("noetic/noetic.db");
    let renamed = common::run(noetic().arg("sessions").arg("--db").arg(&db).args(["rename", "newer", "The newer one"]));
    assert!(renamed.status.success(), "{}", renamed.stderr);
    let mut driven = chat(&server, ws.path(), data.path(), &["--resume"]);
    let out = drive(move || {
        driven.wait_for("recent sessions in ");
        driven.wait_for("1. newer “The newer one”  (1 turn(s), ");
        driven.wait_for("2. older  (1 turn(s), ");
        driven.send("7");
        driven.send("2");
        driven.wait_for("you   about the older one");
        driven.wait_for("session older; continue it later with: noetic chat --session older");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("'7' is not one of the numbers 1 to 2"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_chat_on_a_session_whose_turn_runs_in_another_chat_is_refused_at_start_naming_the_holder() {
    let model = common::streaming::StreamingModel::start().await;
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let base_url = model.base_url.clone();
    let chat_on = |data: &Path, ws: &Path| {
        let mut cmd = noetic();
        cmd.env("XDG_DATA_HOME", data)
            .args(["chat", "--plain", "--model", "test-model", "--base-url", &base_url])
            .args(["--session", "shared", "--workspace"])
            .arg(ws);
        cmd
    };
    let mut holder = Driven::spawn(chat_on(data.path(), ws.path()));
    holder.send("hello");
    // The holder's turn waits for the model's answer: it runs, and holds the session's lease, until the reply ends.
    let (_model, (_, reply)) = drive(move || {
        let request = model.next_request();
        (model, request)
    })
    .await;
    let refused = run(&mut chat_on(data.path(), ws.path()));
    assert!(!refused.status.success(), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("cannot open session shared: a turn of it runs in")
            && refused.stderr.contains("steer it with `noetic sessions steer shared TEXT`")
            && refused.stderr.contains("or start a new session with `noetic chat`"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stdout.contains("noetic chat —"), "refused before the chat starts:\n{}", refused.stdout);
    reply.text("Working on it.");
    reply.finish();
    let out = drive(move || {
        holder.wait_for("■ turn done");
        holder.send("/quit");
        holder.finish()
    })
    .await;
    assert!(out.status.success(), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_another_chat_has_open_but_is_not_running_a_turn_of_is_shared() {
    let server = server(vec![answer("First answer."), answer("Second answer.")]).await;
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut first = chat(&server, ws.path(), data.path(), &["--session", "shared"]);
    let first = drive(move || {
        first.send("hello");
        first.wait_for("■ turn done");
        first
    })
    .await;
    // The second chat opens the session while the first still has it open, idle: it sees the first's turn.
    let second = chat_once(&server, ws.path(), data.path(), &["--session", "shared"], &["and you?"]).await;
    assert!(second.contains("you   hello") && second.contains("First answer."), "{second}");
    assert!(second.contains("Second answer."), "{second}");
    let mut first = first;
    let out = drive(move || {
        first.send("/quit");
        first.finish()
    })
    .await;
    assert!(out.status.success(), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn model_switches_the_model_asked_for_and_clear_starts_a_new_session_without_the_conversation() {
    let server = server(vec![answer("Sure.")]).await;
    let (ws, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut driven = chat(&server, ws.path(), data.path(), &["--session", "before-clear"]);
    let out = drive(move || {
        driven.send("remember the number 7");
        driven.wait_for("■ turn done");
        driven.send("/model other-model");
        driven.wait_for("model: other-model from the next model call on");
        driven.send("/clear");
        driven.wait_for("the previous one stays: noetic chat --session before-clear");
        driven.send("what number?");
        driven.wait_for("■ turn done");
        driven.send("/quit");
        driven.finish()
    })
    .await;
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let requests = bodies(&server).await;
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[0]["model"].as_str(), requests[1]["model"].as_str()),
        (Some("test-model"), Some("other-model"))
    );
    let said = requests[1]["messages"].to_string();
    assert!(said.contains("what number?") && !said.contains("remember the number 7"), "a new session: {said}");
}
