//! `noetic demo` shows all three capabilities, from the outside: the binary's output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};

#[test]
fn the_demo_shows_a_deny_a_guide_a_live_steer_skipping_two_tools_and_the_ledger() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_noetic")).args(["demo", "--plain"]).stdin(Stdio::null()).output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for expected in [
        "fork  research: paths start",
        "delete_file [c2] → Steering denied: Deletion outside /workspace/ is not allowed.",
        "write_file [c3] → Steering guidance: Write the report under /workspace/drafts/ first.",
        "user  types:",
        "skip  [c7]",
        "skip  [c8]",
        "steer 1 message(s) handed to the model",
        "answer: Done:",
        "DENY    tool delete_file",
        "by no-delete-outside-workspace",
        "GUIDE   tool write_file",
        "by reports-go-to-drafts",
        "execution ended: Success",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(!text.contains("\x1b["), "--plain prints no colour codes");
    let first_read = text.find("read_file [c6] →").unwrap();
    let typed = text.find("user  types:").unwrap();
    let skipped = text.find("skip  [c7]").unwrap();
    assert!(typed < first_read && first_read < skipped, "the message lands between tool calls:\n{text}");
}

#[test]
fn an_unknown_command_fails_with_usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_noetic")).arg("frobnicate").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
}
