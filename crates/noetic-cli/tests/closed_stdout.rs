//! A reader that stops early (`noetic … | head -1`) ends the command quietly, as it ends other Unix tools.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::{example, noetic};

/// The status `noetic` ends with when its output is closed (what a shell reports for a tool killed by SIGPIPE).
const CLOSED_OUTPUT: i32 = 141;

/// Runs `cmd` with stdout a pipe, reads its first line, closes the pipe, and returns the exit code and stderr.
fn first_line_then_close(cmd: &mut Command) -> (String, Option<i32>, String) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    drop(stdout);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (first, status.code(), stderr)
}

fn assert_quiet_end(what: &str, code: Option<i32>, stderr: &str) {
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{what} complained:\n{stderr}");
    assert_eq!(code, Some(CLOSED_OUTPUT), "{what} ended with {code:?}; stderr:\n{stderr}");
}

#[test]
fn closing_the_demos_output_ends_it_quietly() {
    // The demo prints its first lines at once and the rest over a few seconds, so later lines meet the closed pipe.
    let (first, code, stderr) = first_line_then_close(noetic().args(["demo", "--plain"]));
    assert!(first.starts_with("noetic demo"), "{first}");
    assert_quiet_end("demo", code, &stderr);
}

/// More output than a pipe holds (64 KiB on Linux), so the writer is still writing when the reader leaves.
const LONG: usize = 256 * 1024;

#[test]
fn closing_the_output_of_run_json_ends_it_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("long.toml");
    let text = "x".repeat(LONG);
    std::fs::write(&flow, format!("model = \"scripted\"\ntools = []\n[[scripted.response]]\ntext = \"{text}\"\n"))
        .unwrap();
    let (first, code, stderr) = first_line_then_close(
        noetic().arg("run").arg(&flow).args(["--prompt", "Say a lot", "--json", "--workspace"]).arg(dir.path()),
    );
    assert!(first.starts_with('{'), "{first}");
    assert_quiet_end("run --json", code, &stderr);
}

#[test]
fn closing_the_output_of_ledger_ends_it_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    // One entry written by a real run, repeated until the shown lines outgrow the pipe.
    let out = common::run(
        noetic()
            .arg("run")
            .arg(example("workflow.toml"))
            .args(["--prompt", "Tidy up", "--workspace"])
            .arg(dir.path())
            .arg("--ledger-out")
            .arg(&ledger),
    );
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let entry = std::fs::read_to_string(&ledger).unwrap().lines().next().unwrap().to_owned();
    std::fs::write(&ledger, format!("{entry}\n").repeat(LONG / 40)).unwrap();
    let (first, code, stderr) = first_line_then_close(noetic().args(["ledger", "--plain", "--verbose"]).arg(&ledger));
    assert!(first.starts_with("turn 1 · started "), "the view starts with the first turn's heading: {first}");
    assert_quiet_end("ledger", code, &stderr);
}
