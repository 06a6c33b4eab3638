//! Budgets in configuration (#31 item 4): a workflow's `[budget]` (over noetic.toml's) ends the run's turn before
//! the call past its limit, and a bad budget in either file is an error naming the file, the line and what to do
//! before anything runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{noetic, run};

/// A scripted workflow that lists the folder three times, then answers; `budget` is appended to it.
fn flow(dir: &Path, budget: &str) -> PathBuf {
    let path = dir.join("flow.toml");
    let mut text = String::from("model = \"scripted\"\n");
    for _ in 0..3 {
        text.push_str("[[scripted.response]]\ntool_calls = [{ name = \"list_dir\", args = { path = \".\" } }]\n");
    }
    text.push_str("[[scripted.response]]\ntext = \"Looked three times.\"\n");
    text.push_str(budget);
    std::fs::write(&path, text).unwrap();
    path
}

fn run_flow(dir: &Path, flow: &Path, config: &str) -> common::Output {
    let config_path = dir.join("noetic.toml");
    std::fs::write(&config_path, config).unwrap();
    run(noetic()
        .arg("--config")
        .arg(&config_path)
        .arg("run")
        .arg(flow)
        .args(["--prompt", "look", "--workspace"])
        .arg(dir))
}

#[test]
fn a_workflow_budget_over_noetic_toml_ends_the_turn_before_the_call_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limited = flow(dir.path(), "[budget.turn]\ntool_calls = 2\n");
    let out = run_flow(dir.path(), &limited, "[budget.turn]\ntool_calls = 10\nmodel_calls = 10\n");
    assert!(!out.status.success(), "the run went past its budget: {}", out.stdout);
    assert!(out.stderr.contains("the turn budget's tool_calls limit of 2 was reached (2 used)"), "{}", out.stderr);
    assert_eq!(
        out.stderr.matches("tool  list_dir [").count(),
        4,
        "two calls ran (each a start and an end line):\n{}",
        out.stderr
    );
    // noetic.toml's limit holds where the workflow sets none.
    let unlimited = flow(dir.path(), "");
    let out = run_flow(dir.path(), &unlimited, "[budget.turn]\nmodel_calls = 2\n");
    assert!(out.stderr.contains("the turn budget's model_calls limit of 2 was reached (2 used)"), "{}", out.stderr);
}

#[test]
fn a_bad_budget_in_noetic_toml_or_a_workflow_is_an_error_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let fine = flow(dir.path(), "");
    let out = run_flow(dir.path(), &fine, "[agents.defaults]\nmodel = \"m\"\n\n[budget.session]\ncost = 0\n");
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("noetic.toml:5:1: [budget.session] the budget limit cost = 0 must be a positive number"),
        "{}",
        out.stderr
    );
    let bad = flow(dir.path(), "[budget.turn]\nwall_time = \"a while\"\n");
    let out = run_flow(dir.path(), &bad, "");
    assert!(!out.status.success());
    let line = std::fs::read_to_string(&bad).unwrap().lines().position(|l| l.starts_with("wall_time")).unwrap() + 1;
    let says =
        format!("flow.toml:{line}:1: [budget.turn] the budget limit wall_time = a while is not a duration; write");
    assert!(out.stderr.contains(&says), "{}\nwanted {says}", out.stderr);
    let unknown = flow(dir.path(), "[budget.turn]\ntool_call = 3\n");
    let out = run_flow(dir.path(), &unknown, "");
    assert!(out.stderr.contains("'tool_call' is not a budget limit; use one of"), "{}", out.stderr);
}

#[test]
fn sessions_show_says_what_a_session_spent_and_the_limit_it_is_paused_over() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("noetic.db");
    let limited = flow(dir.path(), "[budget.turn]\ntool_calls = 2\n");
    std::fs::write(dir.path().join("noetic.toml"), "").unwrap();
    let out = run(noetic()
        .arg("--config")
        .arg(dir.path().join("noetic.toml"))
        .arg("run")
        .arg(&limited)
        .args(["--prompt", "look", "--session", "audit", "--db"])
        .arg(&db)
        .arg("--workspace")
        .arg(dir.path()));
    assert!(!out.status.success(), "the run went past its budget: {}", out.stdout);
    let shown = run(noetic().args(["sessions", "show", "audit", "--db"]).arg(&db));
    assert!(shown.status.success(), "{}", shown.stderr);
    assert!(shown.stdout.contains("none set for this session"), "{}", shown.stdout);
    assert!(shown.stdout.contains("2 tool calls, 3 model calls"), "{}", shown.stdout);
    assert!(
        shown.stdout.contains("paused: the turn budget's tool_calls limit of 2 was reached (2 used)"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("/budget turn.tool_calls=MORE in `noetic chat --session audit`"), "{}", shown.stdout);
}
