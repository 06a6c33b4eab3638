//! `noetic demo` shows all three capabilities, from the outside: the binary's output.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

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
        // The LLM judge also ran on the calls it allowed: the ledger names it there too.
        "ALLOW   tool write_file {\"content\":\"…\",\"path\":\"/workspace…afts/report.md\"} by reports-go-to-drafts (LLM judge)",
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

#[cfg(unix)]
#[test]
fn at_a_terminal_the_paced_demo_waits_for_a_typed_line_and_steers_it_instead_of_the_scripted_one() {
    let mut demo = common::noetic();
    demo.args(["demo", "--pace", "0.1"]);
    let Some(term) = common::terminal::Terminal::start(&demo) else { return };
    term.wait_for("each tool takes 0.1 s (--pace changes it)");
    term.wait_for("demo  waiting up to 20 s for you");
    term.type_line("Only tokio, please.");
    term.wait_for("answer: You said: \"Only tokio, please.\". I stopped the plan there. Before your message I");
    assert_eq!(term.exit_status(), 0);
    let history = term.history();
    let at = |needle: &str| history.iter().position(|r| r.contains(needle));
    let (echoed, queued, skipped) = (at("you   Only tokio, please."), at("steer message queued"), at("skip  [c7]"));
    assert!(echoed.is_some() && echoed < queued && queued < skipped, "{}", history.join("\n"));
    assert_eq!(at("user  types:"), None, "the scripted user did not type:\n{}", history.join("\n"));
}

#[cfg(unix)]
#[test]
fn stopping_the_paced_demo_with_esc_or_ctrl_c_says_so_and_exits_with_status_0() {
    for key in ["Escape", "C-c"] {
        let mut demo = common::noetic();
        demo.args(["demo", "--pace", "0.1"]);
        let Some(term) = common::terminal::Terminal::start(&demo) else { return };
        term.wait_for("demo  waiting up to 20 s for you");
        term.press(key);
        term.wait_for("stopping the demo");
        term.wait_for("stopped: you stopped the demo before it finished");
        assert_eq!(term.exit_status(), 0, "after {key}");
        let history = term.history();
        // The stopped turn reads as a stop, not as a failure; the demo itself does not fail.
        assert!(history.iter().any(|r| r.starts_with("■ turn stopped")), "{}", history.join("\n"));
        for absent in ["failed:", "noetic:", "answer:", "  user  types:", "■ turn failed"] {
            let seen = history.iter().any(|r| r.starts_with(absent));
            assert!(!seen, "{absent} after {key}:\n{}", history.join("\n"));
        }
    }
}

#[cfg(unix)]
#[test]
fn steered_early_to_stop_deleting_the_demo_deletes_nothing_more_and_its_answer_says_only_what_happened() {
    let mut demo = common::noetic();
    demo.args(["demo", "--pace", "0.1"]);
    let Some(term) = common::terminal::Terminal::start(&demo) else { return };
    term.wait_for("each tool takes 0.1 s");
    term.type_line("stop deleting anything");
    let answer = term.wait_for("answer: ");
    assert_eq!(term.exit_status(), 0);
    let history = term.history();
    let shown = history.join("\n");
    assert!(shown.contains("the model is scripted: its replies are canned, but they follow what you type"), "{shown}");
    assert!(
        answer.starts_with("answer: You said: \"stop deleting anything\". I deleted nothing more and stopped the plan"),
        "{shown}"
    );
    assert!(!shown.contains("delete_file [c4]"), "no deletion after the message:\n{shown}");
    let refused = shown.contains("delete_file [c2] → Steering denied");
    let claims_refusal = shown.contains("left /etc alone (a rule refused deleting /etc/hosts)");
    assert_eq!(refused, claims_refusal, "the answer claims a refusal exactly when there was one:\n{shown}");
}

#[test]
fn a_pace_that_is_not_a_number_of_seconds_is_refused() {
    for bad in ["-1", "soon", "1000"] {
        let out = Command::new(env!("CARGO_BIN_EXE_noetic")).args(["demo", &format!("--pace={bad}")]).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("is not a valid --pace") && stderr.contains("from 0 to 60"), "{bad}: {stderr}");
    }
}
