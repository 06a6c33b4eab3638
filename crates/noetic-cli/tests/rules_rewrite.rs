//! `rewrite_arg` rules (issue 35, item 3): a call runs with its string argument rewritten, after every rule has
//! judged the rewritten arguments; the rewrite is reported as an event and kept in the chained ledger; a rule whose
//! rewrite would never settle denies the call instead.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{noetic, run};
use serde_json::{Value, json};

/// What one `noetic run` of a scripted `write_file` call left: the JSON events and the ledger file's entries.
struct Ran {
    events: Vec<Value>,
    ledger: Vec<Value>,
}

impl Ran {
    fn completed(&self) -> &Value {
        self.events.iter().find(|e| e["type"] == "tool_call_completed").expect("the call completed")
    }
}

/// Runs a scripted workflow whose model asks once for `write_file` with `args`, under the inline `rules`.
fn write_with_rules(workspace: &Path, rules: Value, args: Value) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.json");
    let ledger = dir.path().join("ledger.jsonl");
    let call = json!({"id": "c0", "name": "write_file", "args": args});
    let def = json!({"model": "scripted", "rule": rules, "scripted": {"response": [{"tool_calls": [call]}, {"text": "done"}]}});
    std::fs::write(&flow, def.to_string()).unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--json", "--prompt", "go", "--workspace"])
        .arg(workspace)
        .arg("--ledger-out")
        .arg(&ledger));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let events = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ledger = std::fs::read_to_string(&ledger).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    Ran { events, ledger }
}

fn redact_keys() -> Value {
    json!({
        "id": "redact-keys",
        "rewrite_arg": {"tool": "write_file", "arg": "content", "regex": "(?m)^(API_KEY=).*$", "replace": "${1}<redacted>"},
        "guidance": "Keys are not written to files."
    })
}

#[test]
fn a_rewrite_rule_makes_the_call_run_with_the_rewritten_argument_and_ledgers_it() {
    let ws = tempfile::tempdir().unwrap();
    let ran = write_with_rules(
        ws.path(),
        json!([redact_keys()]),
        json!({"path": "env.txt", "content": "API_KEY=sk-secret\nMODE=dev\n"}),
    );
    assert_eq!(std::fs::read_to_string(ws.path().join("env.txt")).unwrap(), "API_KEY=<redacted>\nMODE=dev\n");
    assert_eq!(ran.completed()["is_error"], json!(false), "{:?}", ran.completed());

    let rewritten = ran.events.iter().find(|e| e["type"] == "tool_call_rewritten").expect("a rewrite event");
    assert_eq!(rewritten["layer"], json!("rule:redact-keys"));
    assert!(!rewritten["arguments"].as_str().unwrap().contains("sk-secret"), "{rewritten}");

    let entry = ran.ledger.iter().find(|e| e.get("rewritten_args").is_some()).expect("a rewrite in the ledger");
    assert_eq!(entry["rule_id"], json!("rule:redact-keys"));
    assert_eq!(entry["guidance"], json!("Keys are not written to files."));
    assert_eq!(entry["tool_args"]["content"], json!("API_KEY=sk-secret\nMODE=dev\n"));
    assert_eq!(entry["rewritten_args"]["content"], json!("API_KEY=<redacted>\nMODE=dev\n"));
    assert!(entry["sha256"].is_string(), "the rewrite is in the chain: {entry}");
}

#[test]
fn a_call_the_rule_leaves_alone_is_not_rewritten_and_leaves_no_rewrite_entry() {
    let ws = tempfile::tempdir().unwrap();
    let ran = write_with_rules(ws.path(), json!([redact_keys()]), json!({"path": "a.txt", "content": "MODE=dev\n"}));
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "MODE=dev\n");
    assert!(ran.events.iter().all(|e| e["type"] != "tool_call_rewritten"));
    assert!(ran.ledger.iter().all(|e| e.get("rewritten_args").is_none()), "{:?}", ran.ledger);
}

#[test]
fn the_deny_rules_judge_the_rewritten_arguments() {
    let ws = tempfile::tempdir().unwrap();
    // Drafts are moved to private/, which a deny rule guards: the original path would pass it, the rewritten not.
    let rules = json!([
        {"id": "drafts-are-private", "rewrite_arg": {"tool": "write_file", "arg": "path", "regex": "^drafts/", "replace": "private/"}},
        {"id": "no-private", "deny_arg": {"tool": "write_file", "arg": "path", "glob": "private/**"}, "guidance": "private/ is read-only."}
    ]);
    let ran = write_with_rules(ws.path(), rules, json!({"path": "drafts/plan.md", "content": "x"}));
    assert_eq!(ran.completed()["is_error"], json!(true), "{:?}", ran.completed());
    assert!(ran.completed()["output"].as_str().unwrap().contains("private/ is read-only."), "{:?}", ran.completed());
    assert!(!ws.path().join("drafts").exists() && !ws.path().join("private").exists(), "nothing was written");
    let deny = ran.ledger.iter().find(|e| e["action"] == "deny").expect("the deny is ledgered");
    assert_eq!(deny["rule_id"], json!("no-private"));
    assert_eq!(deny["tool_args"]["path"], json!("private/plan.md"), "the deny judged the rewritten path");
}

#[test]
fn a_rewrite_that_would_never_settle_denies_the_call_naming_the_rule() {
    let ws = tempfile::tempdir().unwrap();
    let rules = json!([
        {"id": "shout", "rewrite_arg": {"tool": "write_file", "arg": "content", "regex": "!", "replace": "!!"}}
    ]);
    let ran = write_with_rules(ws.path(), rules, json!({"path": "a.txt", "content": "hi!"}));
    let output = ran.completed()["output"].as_str().unwrap();
    assert_eq!(ran.completed()["is_error"], json!(true), "{output}");
    assert!(output.contains("rule 'shout' would rewrite write_file's content again and again"), "{output}");
    assert!(output.contains("unless"), "the message says how to fix it: {output}");
    assert!(output.contains(r#"("hi!" → "hi!!" → "hi!!!!")"#), "{output}");
    assert!(!ws.path().join("a.txt").exists());
}

#[test]
fn a_long_argument_in_the_refusal_is_cut_to_a_glance() {
    let ws = tempfile::tempdir().unwrap();
    let rules = json!([
        {"id": "shout", "rewrite_arg": {"tool": "write_file", "arg": "content", "regex": "!", "replace": "!!"}}
    ]);
    let ran = write_with_rules(ws.path(), rules, json!({"path": "a.txt", "content": "x".repeat(5_000) + "!"}));
    let output = ran.completed()["output"].as_str().unwrap();
    assert!(output.contains(&format!("(\"{}\"… → ", "x".repeat(60))), "{output}");
    assert!(output.len() < 600, "the refusal stays short: {} bytes", output.len());
}

#[test]
fn unless_leaves_a_value_that_already_carries_the_rewrite_alone() {
    let ws = tempfile::tempdir().unwrap();
    let rules = json!([
        {"id": "sign", "rewrite_arg": {"tool": "write_file", "arg": "content", "regex": "$", "replace": "\n-- bot", "unless": "-- bot"}}
    ]);
    let ran = write_with_rules(ws.path(), rules, json!({"path": "a.txt", "content": "hello"}));
    assert_eq!(ran.completed()["is_error"], json!(false), "{:?}", ran.completed());
    assert_eq!(std::fs::read_to_string(ws.path().join("a.txt")).unwrap(), "hello\n-- bot");
}
