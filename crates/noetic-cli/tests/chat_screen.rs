//! `noetic chat` at a real terminal (tmux), what the screen shows while the agent works: the model's markdown
//! rendered, a status row with a spinner and the time of what runs, and a command's processes ending with the
//! chat even when it is killed.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::streaming::StreamingModel;
use common::terminal::Terminal;
use common::{answer, noetic, tool_calls};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// `noetic chat` on `base_url` in a terminal, working in `workspace`.
fn chat(base_url: &str, workspace: &Path) -> Option<Terminal> {
    chat_with(base_url, workspace, &["--no-store"])
}

fn chat_with(base_url: &str, workspace: &Path, extra: &[&str]) -> Option<Terminal> {
    let mut cmd = noetic();
    cmd.args(["chat", "--model", "test-model", "--base-url", base_url, "--workspace"]).arg(workspace).args(extra);
    Terminal::start(&cmd)
}

/// Whether a row is the status row: a spinner frame, then what runs.
fn status_row(row: &str) -> bool {
    row.starts_with(['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_answer_s_markdown_is_rendered_and_a_spinner_row_shows_the_model_call_s_time_until_the_turn_ends() {
    let model = StreamingModel::start().await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&model.base_url, ws.path()) else { return };
    tokio::task::spawn_blocking(move || {
        term.wait_for_input_line(">");
        term.type_line("How do I list files?");
        let (_, reply) = model.next_request();
        reply.text("Like **this**:\n```sh\nls -la\n```\n- one `item`\n1. step\n## Done");
        term.wait_for("  │ ls -la");
        let rows = term.wait_until("the status row", |rows| {
            rows.iter().any(|r| status_row(r) && r.contains(" model ") && r.ends_with(" s · Esc stops"))
        });
        let spinner = rows.iter().find(|r| status_row(r)).unwrap();
        let time = spinner.split(" model ").nth(1).and_then(|t| t.strip_suffix(" s · Esc stops")).unwrap();
        assert!(time.parse::<f64>().is_ok() && time.contains('.'), "seconds with a tenth: {spinner}");
        reply.finish();
        term.wait_for("■ turn done");
        term.wait_for_input_line(">");
        let history = term.history();
        let start = history.iter().position(|r| r == "Like this:").unwrap_or_else(|| panic!("{}", history.join("\n")));
        assert_eq!(
            history[start..start + 7],
            ["Like this:", "  ┌─ sh", "  │ ls -la", "  └─", "• one `item`", "1. step", "Done"],
            "{}",
            history.join("\n")
        );
        assert!(!history.iter().any(|r| r.contains("```") || r.contains("**")), "{}", history.join("\n"));
        let screen = term.screen();
        assert!(!screen.iter().any(|r| status_row(r)), "the status row goes with the turn:\n{}", screen.join("\n"));
        term.press("C-d");
        term.wait_for("this chat was kept in memory only (--no-store): it cannot be continued");
        eprintln!("captured chat: {}", term.keep_capture("markdown_and_spinner").display());
        assert_eq!(term.exit_status(), 0);
    })
    .await
    .unwrap();
}

/// The pid of a running `sleep SECONDS` (its command line is exactly that), if there is one.
fn sleep_pid(seconds: &str) -> Option<i32> {
    let wanted = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        (cmdline == wanted.as_bytes()).then_some(pid)
    })
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| stat.rsplit(") ").next().is_some_and(|rest| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Starts a chat whose model asks for `sleep SECONDS`, approves it, waits until it runs, and kills the chat with
/// SIGKILL; returns the sleep's pid.
fn kill_the_chat_while_a_command_runs(term: &Terminal, seconds: &str) -> i32 {
    term.wait_for_input_line(">");
    term.type_line("Wait a while.");
    term.wait_for(&format!("approve: run `sleep {seconds}`?"));
    term.type_line("y");
    term.wait_until("the status row naming the running call", |rows| {
        rows.iter().any(|r| status_row(r) && r.contains("run_command [call_s] "))
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let sleeping = loop {
        if let Some(pid) = sleep_pid(seconds) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let pid = rustix::process::Pid::from_raw(term.program_pid().unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    term.wait_for("[exit status 137]");
    sleeping
}

/// A model that asks for `sleep SECONDS` once, then answers.
async fn sleepy_model(seconds: &str) -> MockServer {
    let server = MockServer::start().await;
    let call = tool_calls(&[("call_sleeping_1", "run_command", json!({"command": format!("sleep {seconds}")}))]);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(call)
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(answer("Resumed.")).mount(&server).await;
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_the_chat_started_dies_with_the_chat_even_when_it_is_killed() {
    // A duration no other test uses, so the process is this test's.
    let seconds = format!("97.{}", std::process::id() % 1000);
    let server = sleepy_model(&seconds).await;
    let ws = tempfile::tempdir().unwrap();
    let Some(term) = chat(&format!("{}/v1", server.uri()), ws.path()) else { return };
    tokio::task::spawn_blocking(move || {
        let sleeping = kill_the_chat_while_a_command_runs(&term, &seconds);
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(sleeping) {
            assert!(Instant::now() < deadline, "sleep {seconds} (pid {sleeping}) outlived the killed chat");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_after_a_killed_chat_says_which_call_was_interrupted() {
    let seconds = format!("98.{}", std::process::id() % 1000);
    let server = sleepy_model(&seconds).await;
    let ws = tempfile::tempdir().unwrap();
    let db = ws.path().join("sessions.db");
    let base_url = format!("{}/v1", server.uri());
    let stored = ["--session", "killed", "--db", db.to_str().unwrap()];
    let Some(term) = chat_with(&base_url, ws.path(), &stored) else { return };
    let seconds_killed = seconds.clone();
    tokio::task::spawn_blocking(move || kill_the_chat_while_a_command_runs(&term, &seconds_killed)).await.unwrap();
    let mut cmd = noetic();
    cmd.args(["chat", "--plain", "--model", "test-model", "--base-url", &base_url, "--workspace"])
        .arg(ws.path())
        .args(stored);
    let mut driven = common::Driven::spawn(cmd);
    let out = tokio::task::spawn_blocking(move || {
        driven.wait_for("this session has a turn a stopped process left unfinished: /resume finishes it");
        driven.send("/resume");
        driven.wait_for("Resumed.");
        driven.wait_for("■ turn done");
        driven.wait_for(&format!(
            "interrupted: run_command [call_s] `sleep {seconds}` was running when the previous process stopped; it \
             was not run again"
        ));
        driven.send("/quit");
        driven.finish()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", out.stderr);
}
