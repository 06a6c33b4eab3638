//! `--ledger-out FILE` writes the steering ledger as JSON lines; `noetic ledger FILE` shows it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{example, noetic, run};

fn write_ledger(ledger: &std::path::Path) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# project\n").unwrap();
    std::fs::write(ws.path().join("scratch.txt"), "junk\n").unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(example("workflow.toml"))
        .args(["--prompt", "Tidy up", "--workspace"])
        .arg(ws.path())
        .arg("--ledger-out")
        .arg(ledger));
    assert!(out.status.success(), "stderr: {}", out.stderr);
}

#[test]
fn a_ledger_written_by_run_is_shown_by_turn_one_decision_a_line_with_its_time_rule_and_evaluator() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    write_ledger(&ledger);
    let lines = std::fs::read_to_string(&ledger).unwrap();
    assert!(lines.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    let out = run(noetic().arg("ledger").arg(&ledger));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    for expected in [
        "ALLOW   tool write_file",
        "DENY    tool delete_file {\"path\":\"README.md\"} by keep-readme (predicate): README files stay",
        "ALLOW   tool delete_file {\"path\":\"scratch.txt\"} (no rule objected)",
        "execution ended: Success",
        "model answer(s) passed every rule; --verbose shows them",
    ] {
        assert!(out.stdout.contains(expected), "missing {expected:?} in:\n{}", out.stdout);
    }
    assert!(!out.stdout.contains("ALLOW   model turn"), "routine allows are left out:\n{}", out.stdout);
    let mut lines = out.stdout.lines();
    let heading = lines.next().unwrap();
    assert!(heading.starts_with("turn 1 · started 20") && heading.ends_with('Z'), "{heading}");
    let deny = out.stdout.lines().find(|l| l.contains("DENY")).unwrap();
    let time = deny.trim_start().split(' ').next().unwrap();
    assert!(time.len() == 12 && time.as_bytes()[2] == b':' && time.as_bytes()[8] == b'.', "a time of day: {deny}");
    assert!(!out.stdout.contains("turn 2"), "one run is one turn:\n{}", out.stdout);
    let verbose = run(noetic().arg("ledger").arg(&ledger).arg("--verbose"));
    assert!(verbose.stdout.contains("ALLOW   model turn"), "{}", verbose.stdout);
    assert!(!verbose.stdout.contains("passed every rule"), "{}", verbose.stdout);
}

#[test]
fn a_second_run_appends_to_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    write_ledger(&ledger);
    let once = std::fs::read_to_string(&ledger).unwrap().lines().count();
    write_ledger(&ledger);
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 2 * once);
}

#[test]
fn bad_lines_are_reported_with_their_number_and_the_good_ones_still_shown() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    write_ledger(&ledger);
    let mut text = std::fs::read_to_string(&ledger).unwrap();
    let good = text.lines().count();
    text.push_str("{\"not\": \"an entry\"}\n");
    std::fs::write(&ledger, text).unwrap();
    let out = run(noetic().arg("ledger").arg(&ledger));
    assert!(!out.status.success());
    assert!(out.stderr.contains(&format!("ledger.jsonl:{}: not a ledger entry", good + 1)), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("{good} entries")), "{}", out.stdout);
}

#[test]
fn a_missing_ledger_file_says_how_to_write_one() {
    let out = run(noetic().args(["ledger", "/nonexistent/ledger.jsonl"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("--ledger-out"), "{}", out.stderr);
}

#[test]
fn a_shadow_rule_in_a_run_is_shown_beside_the_live_decisions_with_the_disagreements_counted() {
    let dir = tempfile::tempdir().unwrap();
    let workflow = std::fs::read_to_string(example("workflow.toml")).unwrap().replace(
        "[scripted]\n",
        "[[rule]]\nid = \"no-deletes\"\nmode = \"shadow\"\ndeny_tool = \"delete_file\"\nguidance = \"Trial: keep \
         everything.\"\n\n[scripted]\n",
    );
    let (path, ledger, ws) = (dir.path().join("workflow.toml"), dir.path().join("ledger.jsonl"), dir.path().join("ws"));
    std::fs::write(&path, workflow).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# project\n").unwrap();
    std::fs::write(ws.join("scratch.txt"), "junk\n").unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(&path)
        .args(["--prompt", "Tidy up", "--workspace"])
        .arg(&ws)
        .arg("--ledger-out")
        .arg(&ledger));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(!ws.join("scratch.txt").exists(), "the shadow rule's deny was not enforced");
    let out = run(noetic().arg("ledger").arg(&ledger));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().map(str::trim).collect();
    let readme = lines.iter().position(|l| l.contains("DENY    tool delete_file {\"path\":\"README.md\"}")).unwrap();
    assert_eq!(lines[readme + 1], "shadow DENY    by no-deletes (predicate): Trial: keep everything. = live DENY");
    let scratch = lines.iter().position(|l| l.contains("ALLOW   tool delete_file {\"path\":\"scratch.txt\"}")).unwrap();
    assert_eq!(lines[scratch + 1], "shadow DENY    by no-deletes (predicate): Trial: keep everything. ≠ live ALLOW");
    assert!(
        out.stdout.contains("shadow rules: 2 decision(s), 1 disagree(s) with the live decision\n"),
        "{}",
        out.stdout
    );
}
