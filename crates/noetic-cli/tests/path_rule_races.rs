//! A path rule and the tool it guards act on the same opened file: a symbolic link flipped between the rule's check
//! and the tool's open (what a racing process does) never gets a call past the rule.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use common::{noetic, run};
use serde_json::{Value, json};

/// Calls per test: enough for a race window of a few percent to be hit many times.
const CALLS: usize = 2_000;

/// Runs a scripted workflow with `rules` making `CALLS` calls of `tool` with `args` in one batch; returns each
/// call's result line from the stored session's transcript (`ERROR …` for an error), which, unlike the event
/// stream, drops nothing when the calls come fast.
fn call_many(workspace: &Path, rules: Value, tool: &str, args: Value) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let (flow, db) = (dir.path().join("flow.json"), dir.path().join("sessions.db"));
    let calls: Vec<Value> =
        (0..CALLS).map(|i| json!({"id": format!("c{i}"), "name": tool, "args": args.clone()})).collect();
    let def = json!({"model": "scripted", "rule": rules, "scripted": {"response": [{"tool_calls": calls}, {"text": "done"}]}});
    std::fs::write(&flow, def.to_string()).unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "go", "--session", "race", "--db"])
        .arg(&db)
        .arg("--workspace")
        .arg(workspace));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let shown = run(noetic().args(["sessions", "show", "race", "--db"]).arg(&db));
    assert!(shown.status.success(), "stderr: {}", shown.stderr);
    shown
        .stdout
        .lines()
        .filter_map(|line| line.strip_prefix("  <- c"))
        .map(|rest| rest.split_once(' ').map_or("", |(_, result)| result).to_owned())
        .collect()
}

/// Flips the link `dir/name` between pointing at `targets[0]` and `targets[1]` until stopped, each time by renaming
/// a fresh link over it (so the name always exists); returns how many flips it made.
struct Flipper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl Flipper {
    fn start(dir: &Path, name: &str, targets: [&'static str; 2]) -> Flipper {
        let (link, spare): (PathBuf, PathBuf) = (dir.join(name), dir.join(format!("{name}.flip")));
        std::os::unix::fs::symlink(targets[0], &link).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut flips = 0u64;
            while !flag.load(Ordering::Relaxed) {
                // The link starts at targets[0], so the first flip goes to targets[1].
                let _ = std::fs::remove_file(&spare);
                std::os::unix::fs::symlink(targets[((flips + 1) % 2) as usize], &spare).unwrap();
                std::fs::rename(&spare, &link).unwrap();
                flips += 1;
            }
            flips
        });
        Flipper { stop, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

fn no_env(tool: &str) -> Value {
    json!([{"id": "no-env", "guidance": "Do not touch .env files.",
            "deny_arg": {"tool": tool, "arg": "path", "glob": "**/.env"}}])
}

#[test]
fn a_link_flipped_to_env_never_gets_read_file_past_the_env_rule() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("plain.txt"), "plain").unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1").unwrap();
    let flipper = Flipper::start(ws.path(), "x", ["plain.txt", ".env"]);
    let results = call_many(ws.path(), no_env("read_file"), "read_file", json!({"path": "x"}));
    let flips = flipper.stop();
    assert_eq!(results.len(), CALLS);
    let leaked = results.iter().filter(|out| out.contains("SECRET")).count();
    let plain = results.iter().filter(|out| *out == "plain").count();
    eprintln!("{flips} flips: {plain} plain reads, {leaked} leaked");
    assert_eq!(leaked, 0, "{leaked} of {CALLS} reads returned .env's content");
    // Each call read the file the rule checked, or the rule denied it at the gate (so the ledger has the
    // decision): the tool never found something else than what the rule saw.
    let other: Vec<_> = results
        .iter()
        .filter(|out| *out != "plain" && *out != "ERROR Steering denied: Do not touch .env files.")
        .collect();
    assert!(other.is_empty(), "{} calls ended otherwise, such as {:?}", other.len(), other.first());
}

#[test]
fn a_link_flipped_to_env_never_gets_write_file_past_the_env_rule() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("plain.txt"), "plain").unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1").unwrap();
    let flipper = Flipper::start(ws.path(), "x", ["plain.txt", ".env"]);
    let results = call_many(ws.path(), no_env("write_file"), "write_file", json!({"path": "x", "content": "pwned"}));
    let flips = flipper.stop();
    assert_eq!(results.len(), CALLS);
    let written = results.iter().filter(|out| out.starts_with("wrote")).count();
    eprintln!("{flips} flips: {written} writes");
    assert_eq!(std::fs::read_to_string(ws.path().join(".env")).unwrap(), "SECRET=1");
}

#[test]
fn a_folder_link_flipped_to_a_protected_folder_never_gets_delete_file_past_its_rule() {
    let ws = tempfile::tempdir().unwrap();
    for folder in ["plain", "secret"] {
        std::fs::create_dir(ws.path().join(folder)).unwrap();
        std::fs::write(ws.path().join(folder).join("f"), folder).unwrap();
    }
    let rules = json!([{"id": "keep-secret", "guidance": "secret/ stays.",
                        "deny_arg": {"tool": "delete_file", "arg": "path", "glob": "secret/**"}}]);
    let flipper = Flipper::start(ws.path(), "d", ["plain", "secret"]);
    let results = call_many(ws.path(), rules, "delete_file", json!({"path": "d/f"}));
    let flips = flipper.stop();
    assert_eq!(results.len(), CALLS);
    eprintln!("{flips} flips");
    assert_eq!(std::fs::read_to_string(ws.path().join("secret/f")).unwrap(), "secret");
}
