//! The transcript lines of events and ledger entries, and the escaping of model-written text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::SystemTime;

use serde_json::json;

use super::*;

const PLAIN: Style = Style { colour: false };

#[test]
fn tool_output_in_the_transcript_cannot_emit_escape_sequences() {
    let kind = EventKind::ToolCallCompleted {
        step_id: "assistant".into(),
        call_id: "c1\u{1b}[2K".into(),
        tool: "read_file".into(),
        is_error: false,
        output: "fine\r\u{1b}]0;owned\u{7}\u{202e}".into(),
        error_kind: None,
    };
    assert_eq!(
        event_line(&PLAIN, &kind).unwrap(),
        "  tool  read_file [c1\\u001b[2K] → fine\\r\\u001b]0;owned\\u0007\\u202e"
    );
}

#[test]
fn a_long_text_keeps_its_beginning_and_its_end_and_loses_its_middle_at_word_boundaries() {
    let text = "needs the user's approval and stdin is not a terminal, so the call of run_command was rejected";
    let short = shorten(text, 60);
    assert!(short.chars().count() <= 60, "{short}");
    assert!(short.starts_with("needs the user's approval"), "{short}");
    assert!(short.ends_with("was rejected"), "the end survives: {short}");
    assert!(short.contains('…'));
    assert_eq!(shorten("short enough", 60), "short enough");
    // No spaces at all: cut inside, still both ends.
    let path = "/a/".repeat(40) + "target.txt";
    let short = shorten(&path, 30);
    assert!(short.starts_with("/a/") && short.ends_with("txt") && short.chars().count() <= 30, "{short}");
}

#[test]
fn a_tool_error_is_shown_whole_when_it_fits_and_is_never_cut_mid_word() {
    let error = "Error: the call of 'run_command' was rejected: 'run_command' needs the user's approval and stdin \
                 is not a terminal, so nobody can approve it; do without it";
    let kind = |output: &str| EventKind::ToolCallCompleted {
        step_id: "assistant".into(),
        call_id: "c1".into(),
        tool: "run_command".into(),
        is_error: true,
        output: output.into(),
        error_kind: None,
    };
    assert_eq!(event_line(&PLAIN, &kind(error)).unwrap(), format!("  tool  run_command [c1] → {error}"));
    let long = format!("{error}; {}", "tell the user what happened and wait for an answer ".repeat(8));
    let line = event_line(&PLAIN, &kind(&long)).unwrap();
    let (head, tail) = line.split_once('…').unwrap();
    let words: Vec<&str> = long.split_whitespace().collect();
    assert!(words.contains(&head.rsplit(' ').next().unwrap()), "the head ends with a whole word: {line}");
    assert!(words.contains(&tail.split(' ').next().unwrap()), "the tail starts with a whole word: {line}");
}

#[test]
fn a_call_id_is_shown_by_its_first_six_characters() {
    let kind = EventKind::ToolCallStarted {
        step_id: "assistant".into(),
        call_id: "call_9f8e7d6c5b4a39281706f5e4d3c2b1a0".into(),
        tool: "list_dir".into(),
        arguments: "{}".into(),
    };
    assert_eq!(event_line(&PLAIN, &kind).unwrap(), "  tool  list_dir [call_9] …");
}

#[test]
fn a_stopped_turn_reads_as_a_stop_and_not_as_a_failure() {
    let stopped = EventKind::TurnFailed {
        session: "s".into(),
        turn: 1,
        error: noetic::NoeticError::cancelled("stopped by the user"),
    };
    assert_eq!(event_line(&PLAIN, &stopped).unwrap(), "■ turn stopped (stopped by the user)");
}

#[test]
fn a_guided_tool_call_is_printed_as_guidance_and_a_denied_one_as_denied() {
    let event = |action| EventKind::SteeringDenied {
        call_id: "w1".into(),
        tool: "write_file".into(),
        layers: vec!["steering".into()],
        action,
        error: noetic::NoeticError::SteeringDenied { guidance: Some("keep notes short".into()) },
    };
    assert_eq!(
        event_line(&PLAIN, &event(SteeringAction::Guide)).unwrap(),
        "  rule  guided write_file [w1] (layer steering): keep notes short"
    );
    assert_eq!(
        event_line(&PLAIN, &event(SteeringAction::Deny)).unwrap(),
        "  rule  denied write_file [w1] (layer steering): keep notes short"
    );
}

#[test]
fn a_rewritten_call_shows_the_layer_the_new_arguments_and_the_reason_with_control_characters_escaped() {
    let event = EventKind::ToolCallRewritten {
        call_id: "c1".into(),
        tool: "rm".into(),
        layer: "dry-run".into(),
        arguments: "{\"path\":\"a\u{1b}[2J.txt\",\"dry_run\":true}".into(),
        reason: "deletions run dry".into(),
    };
    let line = event_line(&PLAIN, &event).unwrap();
    assert!(!line.contains('\u{1b}'), "{line:?}");
    assert!(line.starts_with("  rule  rewrote rm [c1] (layer dry-run) to {\"path\":\"a"), "{line}");
    assert!(line.ends_with("\"dry_run\":true}: deletions run dry"), "{line}");
}

#[test]
fn a_rewrite_in_the_ledger_reads_as_a_rewrite_with_the_arguments_before_and_after() {
    let entry = LedgerEntry {
        tool_name: Some("rm".into()),
        tool_args: Some(json!({"path": "a.txt"})),
        rewritten_args: Some(json!({"path": "a.txt", "dry_run": true})),
        rule_id: Some("dry-run".into()),
        guidance: Some("deletions run dry".into()),
        ..LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)
    };
    assert_eq!(
        ledger_line(&PLAIN, &entry),
        "  REWRITE tool rm {\"path\":\"a.txt\"} to {\"dry_run\":true,\"path\":\"a.txt\"} by dry-run: deletions run dry"
    );
}

#[test]
fn model_written_guidance_in_the_transcript_is_escaped() {
    let kind = EventKind::ModelResponseSteered {
        step_id: "assistant".into(),
        action: SteeringAction::Guide,
        guidance: Some("be brief\u{1b}[8m hidden".into()),
    };
    assert_eq!(event_line(&PLAIN, &kind).unwrap(), "  rule  Guide on the model's response: be brief\\u001b[8m hidden");
}

#[test]
fn tool_arguments_in_a_ledger_line_are_escaped() {
    let entry = LedgerEntry {
        timestamp: SystemTime::UNIX_EPOCH,
        tool_name: Some("run_command".into()),
        tool_args: Some(json!({"command": "ls\r\u{1b}[2Krm x\u{202e}"})),
        ..LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)
    };
    assert_eq!(
        ledger_line(&PLAIN, &entry),
        "  ALLOW   tool run_command {\"command\":\"ls\\r\\u001b[2Krm x\\u202e\"} (no rule objected)"
    );
}

#[test]
fn transcript_text_keeps_its_lines_tabs_and_backslashes_but_not_controls_or_bidi() {
    assert_eq!(
        printable("a\tb\nc\\n\r\u{1b}[31m\u{85}\u{2067}👨\u{200d}👩"),
        "a\tb\nc\\n\\r\\u001b[31m\\u0085\\u2067👨\u{200d}👩"
    );
}
