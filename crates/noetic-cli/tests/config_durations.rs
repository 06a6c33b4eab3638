//! Durations in configuration (#29 item 14): whichever way a number of seconds reaches the command — noetic.toml,
//! its environment override, a workflow file, an `[[mcp_server]]` table, a flag — a NaN, infinite, negative, zero
//! or huge value is refused with status 1 (a file) or 2 (a flag) and a message naming the key, the value and the
//! range, before anything starts; none panics (`[[mcp_server]] timeout = 1e20` used to exit with 101).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{noetic, run};

/// The bad values, as TOML numbers (the flags and the environment take the same text).
const BAD: [&str; 6] = ["1e20", "nan", "inf", "-1", "0", "-inf"];

const TIMEOUT_RANGE: &str = "give a number of seconds more than 0 and at most 86400 (a day)";

/// A workflow with the scripted model, holding `extra` keys.
fn flow(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("flow.toml");
    std::fs::write(&path, format!("model = \"scripted\"\n{extra}\n[[scripted.response]]\ntext = \"hi\"\n")).unwrap();
    path
}

/// `noetic.toml` holding `text`.
fn config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("noetic.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the command `configure` sets up, in a folder of its own (so no other case's noetic.toml is read).
fn run_in(configure: impl FnOnce(&Path, &mut Command)) -> common::Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = noetic();
    cmd.current_dir(dir.path()).env_remove("NOETIC_AGENTS_DEFAULTS_TIMEOUT");
    configure(dir.path(), &mut cmd);
    run(&mut cmd)
}

#[test]
fn a_bad_duration_anywhere_in_the_configuration_is_refused_naming_the_key_and_the_range() {
    let mcp_table = |bad: &str| format!("[[mcp_server]]\nname = \"files\"\ncommand = \"npx\"\ntimeout = {bad}\n");
    for bad in BAD {
        let cases: Vec<(&str, common::Output, i32, Vec<String>)> = vec![
            (
                "noetic.toml [[mcp_server]] timeout",
                run_in(|dir, c| {
                    c.arg("--config").arg(config(dir, &mcp_table(bad))).arg("run").arg(flow(dir, ""));
                    c.args(["--prompt", "x"]);
                }),
                1,
                vec!["noetic.toml: '".into(), "is not a valid timeout of [[mcp_server]] 'files'".into()],
            ),
            (
                "workflow [[mcp_server]] timeout",
                run_in(|dir, c| {
                    c.arg("run").arg(flow(dir, &mcp_table(bad))).args(["--prompt", "x"]);
                }),
                1,
                vec!["flow.toml:2:1: '".into(), "is not a valid timeout of [[mcp_server]] 'files'".into()],
            ),
            (
                "workflow timeout",
                run_in(|dir, c| {
                    c.arg("run").arg(flow(dir, &format!("timeout = {bad}"))).args(["--prompt", "x"]);
                }),
                1,
                vec!["flow.toml:2:1: '".into(), "is not a valid timeout".into()],
            ),
            (
                "agents.defaults.timeout",
                run_in(|dir, c| {
                    c.arg("--config").arg(config(dir, &format!("[agents.defaults]\ntimeout = {bad}\n")));
                    c.arg("run").arg(flow(dir, "")).args(["--prompt", "x"]);
                }),
                1,
                vec!["agents.defaults.timeout (from noetic.toml or NOETIC_AGENTS_DEFAULTS_TIMEOUT)".into()],
            ),
            (
                "NOETIC_AGENTS_DEFAULTS_TIMEOUT",
                run_in(|dir, c| {
                    c.env("NOETIC_AGENTS_DEFAULTS_TIMEOUT", bad).arg("run").arg(flow(dir, "")).args(["--prompt", "x"]);
                }),
                1,
                vec![format!("'{bad}' is not a valid timeout"), "NOETIC_AGENTS_DEFAULTS_TIMEOUT".into()],
            ),
            (
                "--timeout",
                run_in(|dir, c| {
                    c.arg("run").arg(flow(dir, "")).args(["--prompt", "x", &format!("--timeout={bad}")]);
                }),
                2,
                vec![format!("for '--timeout <SECONDS>': '{bad}' is not a valid timeout")],
            ),
            (
                "--approval-timeout",
                run_in(|_, c| {
                    c.args(["serve", "--bind", "127.0.0.1:0", &format!("--approval-timeout={bad}")]);
                }),
                2,
                vec![format!("'{bad}' is not a valid --approval-timeout")],
            ),
        ];
        for (key, out, status, expected) in cases {
            assert_eq!(out.status.code(), Some(status), "{key} = {bad}: {}", out.stderr);
            assert!(!out.stderr.contains("panicked"), "{key} = {bad}: {}", out.stderr);
            for part in expected.iter().map(String::as_str).chain([TIMEOUT_RANGE]) {
                assert!(out.stderr.contains(part), "{key} = {bad}: no {part:?} in {}", out.stderr);
            }
        }
    }
}

#[test]
fn a_bad_lease_pace_or_result_size_is_refused_naming_the_key_and_the_range() {
    for bad in BAD {
        let out = run_in(|_, c| {
            c.args(["serve", "--bind", "127.0.0.1:0", &format!("--lease={bad}")]);
        });
        assert_eq!(out.status.code(), Some(2), "--lease {bad}: {}", out.stderr);
        assert!(out.stderr.contains(&format!("'{bad}' is not a valid --lease: ")), "{}", out.stderr);
        assert!(out.stderr.contains("give a number of seconds from 0.3 to 3600, e.g. 15"), "{}", out.stderr);
        if bad != "0" {
            let out = run_in(|_, c| {
                c.args(["demo", &format!("--pace={bad}")]);
            });
            assert_eq!(out.status.code(), Some(2), "--pace {bad}: {}", out.stderr);
            assert!(out.stderr.contains("give a number of seconds from 0 to 60, e.g. 2"), "{}", out.stderr);
        }
    }
    for bad in ["0", "16777217", "-5"] {
        let table = format!("[[mcp_server]]\nname = \"files\"\ncommand = \"npx\"\nmax_result_bytes = {bad}\n");
        let out = run_in(|dir, c| {
            c.arg("--config").arg(config(dir, &table)).arg("run").arg(flow(dir, ""));
            c.args(["--prompt", "x"]);
        });
        assert_eq!(out.status.code(), Some(1), "max_result_bytes = {bad}: {}", out.stderr);
        assert!(out.stderr.contains("max_result_bytes"), "{}", out.stderr);
    }
}
