//! `--timeout` / workflow `timeout` / `agents.defaults.timeout` (#13 item 14): a stalled provider is given up on
//! (and retried) after the configured time instead of holding the command for ten minutes; bad values are errors
//! naming them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{noetic, run};

/// A server that accepts connections, reads the request and never answers. Counts connections.
fn stalled_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                // Hold the connection until the client closes it (at most 20 s).
                let _ = socket.set_read_timeout(Some(Duration::from_secs(20)));
                let mut buf = [0u8; 8192];
                while socket.read(&mut buf).is_ok_and(|n| n > 0) {}
            });
        }
    });
    (base, connections)
}

/// `noetic run` of a workflow holding `extra_keys`, from `dir` (so no stray noetic.toml is read), against `base`.
fn run_flow(dir: &Path, extra_keys: &str, base: &str, flags: &[&str], env: &[(&str, &str)]) -> common::Output {
    let flow = dir.join("flow.toml");
    std::fs::write(&flow, format!("model = \"test-model\"\ntools = [\"list_dir\"]\n{extra_keys}")).unwrap();
    let mut cmd = noetic();
    cmd.current_dir(dir).env_remove("NOETIC_AGENTS_DEFAULTS_TIMEOUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.arg("run").arg(&flow).args(["--prompt", "hi", "--base-url", base, "--workspace"]).arg(dir).args(flags);
    run(&mut cmd)
}

#[test]
fn run_gives_up_on_a_stalled_provider_after_the_timeout_and_retries_it() {
    let dir = tempfile::tempdir().unwrap();
    let (base, connections) = stalled_server();
    let out = run_flow(dir.path(), "", &base, &["--timeout", "0.2"], &[]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("did not answer within 200 ms"), "{}", out.stderr);
    assert_eq!(connections.load(Ordering::SeqCst), 3, "three attempts, each given up on after the timeout");
}

#[test]
fn the_timeout_comes_from_the_flag_then_the_workflow_then_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = stalled_server();
    let env = [("NOETIC_AGENTS_DEFAULTS_TIMEOUT", "0.1")];
    let out = run_flow(dir.path(), "", &base, &[], &env);
    assert!(out.stderr.contains("did not answer within 100 ms"), "from the environment: {}", out.stderr);
    let out = run_flow(dir.path(), "timeout = 0.15\n", &base, &[], &env);
    assert!(out.stderr.contains("did not answer within 150 ms"), "the workflow wins: {}", out.stderr);
    let out = run_flow(dir.path(), "timeout = 0.15\n", &base, &["--timeout", "0.2"], &env);
    assert!(out.stderr.contains("did not answer within 200 ms"), "the flag wins: {}", out.stderr);
}

#[test]
fn a_bad_timeout_anywhere_is_an_error_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let (base, connections) = stalled_server();
    for bad in ["0", "-3", "abc", "inf"] {
        let out = run_flow(dir.path(), "", &base, &["--timeout", bad], &[]);
        assert!(!out.status.success());
        assert!(out.stderr.contains(&format!("'{bad}' is not a valid timeout")), "{bad}: {}", out.stderr);
        let out = run(noetic().args(["chat", "--plain", "--timeout", bad]));
        assert!(!out.status.success());
        assert!(out.stderr.contains(&format!("'{bad}' is not a valid timeout")), "chat {bad}: {}", out.stderr);
    }
    let out = run_flow(dir.path(), "timeout = 0\n", &base, &[], &[]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("flow.toml:3") && out.stderr.contains("'0' is not a valid timeout"), "{}", out.stderr);
    let out = run_flow(dir.path(), "", &base, &[], &[("NOETIC_AGENTS_DEFAULTS_TIMEOUT", "soon")]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("'soon' is not a valid timeout") && out.stderr.contains("NOETIC_AGENTS_DEFAULTS_TIMEOUT"),
        "{}",
        out.stderr
    );
    assert_eq!(connections.load(Ordering::SeqCst), 0, "nothing is sent with a bad timeout");
}
