//! `--local`: the offline model. Without a set-up, the error names the command that sets it up; with one, the
//! command starts the server, gets a real answer, and stops the server again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{TcpListener, TcpStream};

use common::{Driven, example, local_model_dir as set_up_dir, noetic, run};

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn local_without_a_setup_names_the_command_that_sets_it_up() {
    let empty = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    for args in [
        vec!["run".into(), example("workflow.toml").display().to_string(), "--prompt".into(), "hi".into()],
        vec!["chat".into()],
    ] {
        let out = run(noetic()
            .args(&args)
            .arg("--local")
            .env("NOETIC_LOCAL_LLM_DIR", empty.path())
            .env("NOETIC_LOCAL_LLM_PORT", &port));
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stderr.contains("the local model is not set up"), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("scripts/local-llm.sh setup"), "{args:?}: {}", out.stderr);
    }
}

#[test]
fn local_conflicts_with_an_explicit_server_or_model() {
    for flags in [["--base-url", "http://localhost:1/v1"], ["--model", "llama3.2"], ["--provider", "openai"]] {
        let out = run(noetic().args(["chat", "--local"]).args(flags));
        assert!(!out.status.success(), "{flags:?}");
        assert!(out.stderr.contains("cannot be used with"), "{flags:?}: {}", out.stderr);
    }
    let out = run(noetic().arg("run").arg(example("workflow.toml")).args(["--prompt", "x", "--local", "--model", "m"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("cannot be used with"), "{}", out.stderr);
}

#[test]
fn run_local_starts_the_server_answers_with_the_real_model_and_stops_it() {
    let Some(dir) = set_up_dir() else { return };
    let port = free_port();
    let ws = tempfile::tempdir().unwrap();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "instructions = \"You are brief.\"\ntools = [\"list_dir\"]\nmax_rounds = 4\n").unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "Say hello.", "--local", "--plain", "--workspace"])
        .arg(ws.path())
        .env("NOETIC_LOCAL_LLM_DIR", &dir)
        .env("NOETIC_LOCAL_LLM_PORT", port.to_string()));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stderr.contains(&format!("starting the local model on 127.0.0.1:{port}")), "{}", out.stderr);
    assert!(!out.stdout.trim().is_empty(), "the model answered: {}", out.stderr);
    assert!(!listening(port), "the server this run started is stopped when it ends");
    assert!(!dir.join(format!("server-{port}.pid")).exists(), "its pid file (named by port) is removed");
    let _ = std::fs::remove_file(dir.join(format!("server-{port}.log")));
}

#[test]
fn chat_local_answers_a_typed_message_with_the_real_model_and_stops_the_server() {
    let Some(dir) = set_up_dir() else { return };
    let port = free_port();
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = noetic();
    cmd.args(["chat", "--local", "--plain", "--workspace"])
        .arg(ws.path())
        .env("NOETIC_LOCAL_LLM_DIR", &dir)
        .env("NOETIC_LOCAL_LLM_PORT", port.to_string());
    let mut driven = Driven::spawn(cmd);
    driven.send("Say hello in a few words.");
    let out = driven.finish();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stdout.contains(&format!("smollm2-135m (local, http://127.0.0.1:{port}/v1)")), "{}", out.stdout);
    assert!(out.stdout.contains("■ turn done"), "{}", out.stdout);
    assert!(!listening(port), "the server this chat started is stopped when it ends");
    let _ = std::fs::remove_file(dir.join(format!("server-{port}.log")));
}
