//! `noetic rules test RULES --against DB|LEDGER_FILE` (#31 item 1): a session of 1000 tool calls recorded by
//! `noetic run` (scripted model, real runtime, SQLite session database) replayed through rules files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{answer, noetic, run};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

const CALLS: usize = 1000;
const PER_RESPONSE: usize = 100;

/// The path call `i` reads: every 10th is under `secret/`, every 10th (others) ends with `.key`.
fn path(i: usize) -> String {
    match i % 10 {
        0 => format!("secret/{i}.txt"),
        3 => format!("notes/{i}.key"),
        _ => format!("notes/{i}.txt"),
    }
}

/// The recorded rules: secrets are denied (a predicate), reads are judged (an LLM rule, judge "judge").
const RULES: &str = r#"
[[rule]]
id = "no-secrets"
deny_arg = { tool = "read_file", arg = "path", glob = "secret/**" }

[[rule]]
id = "careful-reads"
prompt = "Reads must be careful."
model = "judge"
tools = ["read_file"]
"#;

/// One recorded session, shared by the tests of this file: its folder (workspace `ws`, database `db.sqlite`,
/// ledger `ledger.jsonl`).
fn recorded() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        for folder in ["notes", "secret"] {
            std::fs::create_dir_all(ws.join(folder)).unwrap();
        }
        for i in 0..CALLS {
            std::fs::write(ws.join(path(i)), "x").unwrap();
        }
        std::fs::write(dir.path().join("rules.toml"), RULES).unwrap();
        let mut workflow = String::from(
            "instructions = \"Read.\"\nmodel = \"scripted\"\ntools = [\"read_file\"]\nmax_rounds = 12\n\
             rules_file = \"rules.toml\"\n\n[scripted]\njudge = []\n",
        );
        for r in 0..CALLS / PER_RESPONSE {
            let calls: Vec<String> = (0..PER_RESPONSE)
                .map(|k| r * PER_RESPONSE + k)
                .map(|i| format!("{{ id = \"c{i}\", name = \"read_file\", args = {{ path = \"{}\" }} }}", path(i)))
                .collect();
            workflow.push_str(&format!("\n[[scripted.response]]\ntool_calls = [\n{}\n]\n", calls.join(",\n")));
        }
        workflow.push_str("\n[[scripted.response]]\ntext = \"Done reading.\"\n");
        std::fs::write(dir.path().join("workflow.toml"), workflow).unwrap();
        let out = run(noetic()
            .current_dir(dir.path())
            .args(["run", "workflow.toml", "--prompt", "read everything", "--workspace", "ws"])
            .args(["--session", "reads", "--db", "db.sqlite", "--ledger-out", "ledger.jsonl"]));
        assert!(out.status.success(), "stderr: {}", out.stderr);
        dir
    })
    .path()
}

/// `noetic rules test` of `rules` (written beside the recording) against `against`, with `extra` flags.
fn replay(rules: &str, against: &str, extra: &[&str]) -> common::Output {
    let dir = recorded();
    let file = dir.join(format!("rules-{:016x}.toml", fastrand::u64(..)));
    std::fs::write(&file, rules).unwrap();
    run(noetic()
        .current_dir(dir)
        .args(["rules", "test"])
        .arg(&file)
        .args(["--against", against, "--workspace", "ws", "--model", "scripted"])
        .args(extra))
}

fn summary(out: &common::Output) -> Value {
    let value: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    value["summary"].clone()
}

#[test]
fn the_same_rules_replayed_against_1000_recorded_tool_calls_change_nothing_and_exit_0() {
    let out = replay(RULES, "db.sqlite", &["--json"]);
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let summary = summary(&out);
    // 1000 tool calls and 11 model turns.
    assert_eq!(summary["replayed"], json!(CALLS + 11), "{summary}");
    assert_eq!(summary["changed"], json!(0), "{summary}");
    assert_eq!(summary["not_replayable"], json!({}), "{summary}");
    assert_eq!(summary["verdicts_reused"], json!(CALLS - CALLS / 10), "every judged read reuses its verdict");

    let text = replay(RULES, "db.sqlite", &[]);
    assert!(text.status.success(), "stderr: {}", text.stderr);
    assert_eq!(
        text.stdout.lines().next(),
        Some("replayed 1011 decision(s): 1011 unchanged, 0 changed (allow→deny 0, deny→allow 0, guide changes 0)")
    );
}

#[test]
fn a_tightened_rule_flips_exactly_the_calls_it_catches_and_exits_1_unless_changes_are_accepted() {
    let tightened = format!(
        "{RULES}\n[[rule]]\nid = \"no-keys\"\ndeny_arg = {{ tool = \"read_file\", arg = \"path\", glob = \"**/*.key\" }}\n"
    );
    let out = replay(&tightened, "db.sqlite", &[]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("100 recorded decision(s) change under"), "{}", out.stderr);
    let flipped: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("session ")).collect();
    let expected: Vec<String> = (0..CALLS)
        .filter(|i| i % 10 == 3)
        .map(|i| {
            format!(
                "session reads · turn 1 · tool read_file {{\"path\":\"{}\"}}: ALLOW → DENY by no-keys (was by careful-reads)",
                path(i)
            )
        })
        .collect();
    assert!(flipped == expected, "flipped:\n{}", flipped.join("\n"));
    assert!(
        out.stdout
            .contains("1011 decision(s): 911 unchanged, 100 changed (allow→deny 100, deny→allow 0, guide changes 0)"),
        "{}",
        out.stdout
    );

    let accepted = replay(&tightened, "db.sqlite", &["--accept-changes", "--json"]);
    assert!(accepted.status.success(), "stderr: {}", accepted.stderr);
    let value: Value = serde_json::from_str(&accepted.stdout).unwrap();
    assert_eq!(value["changes"].as_array().unwrap().len(), 100);
    let first = &value["changes"][0];
    assert_eq!(
        (
            &first["session"],
            &first["turn"],
            &first["tool"],
            &first["args"],
            &first["old"],
            &first["new"],
            &first["rule"]
        ),
        (
            &json!("reads"),
            &json!(1),
            &json!("read_file"),
            &json!({"path": "notes/3.key"}),
            &json!("allow"),
            &json!("deny"),
            &json!("no-keys")
        )
    );
}

/// A judge server answering every request with `verdict`.
async fn judge(verdict: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST")).respond_with(answer(verdict)).mount(&server).await;
    server
}

fn rejudging(server: &MockServer) -> Vec<String> {
    vec!["--provider".into(), "openai".into(), "--base-url".into(), format!("{}/v1", server.uri())]
}

async fn calls(server: &MockServer) -> usize {
    server.received_requests().await.unwrap_or_default().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unchanged_llm_rule_costs_no_judge_call_and_a_changed_one_is_judged_only_with_rejudge() {
    let server = judge("DENY").await;
    let flags = rejudging(&server);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let same = replay(RULES, "db.sqlite", &[&["--rejudge", "--yes", "--json"], flags.as_slice()].concat());
    assert!(same.status.success(), "stderr: {}", same.stderr);
    assert_eq!(summary(&same)["judge_calls_needed"], json!(0));
    assert_eq!(calls(&server).await, 0, "an unchanged rule replays its recorded verdicts");

    let changed = RULES.replace("Reads must be careful.", "Reads must be very careful.");
    let unjudged = replay(&changed, "db.sqlite", &[]);
    assert!(unjudged.status.success(), "nothing decided differently: {}", unjudged.stderr);
    let judged_reads = CALLS - CALLS / 10;
    assert!(
        unjudged.stdout.contains(&format!(
            "not replayable: {judged_reads} decision(s): new or changed LLM rule(s) careful-reads not judged"
        )),
        "{}",
        unjudged.stdout
    );
    assert!(
        unjudged.stdout.contains(&format!("--rejudge would make {judged_reads} judge call(s)")),
        "{}",
        unjudged.stdout
    );
    assert_eq!(calls(&server).await, 0, "nothing is judged without --rejudge");

    let refused = replay(&changed, "db.sqlite", &[&["--rejudge"], flags.as_slice()].concat());
    assert_eq!(refused.status.code(), Some(1));
    assert!(refused.stderr.contains(&format!("--rejudge: {judged_reads} judge call(s) to make")), "{}", refused.stderr);
    assert!(refused.stderr.contains("pass --yes"), "no terminal to ask at: {}", refused.stderr);
    assert_eq!(calls(&server).await, 0, "fails closed without an answer");

    let rejudged = replay(&changed, "db.sqlite", &[&["--rejudge", "--yes", "--json"], flags.as_slice()].concat());
    assert_eq!(rejudged.status.code(), Some(1), "the judge denies now: {}", rejudged.stderr);
    assert_eq!(calls(&server).await, judged_reads, "one judge call per changed rule and decision");
    let summary = summary(&rejudged);
    assert_eq!((&summary["allow_to_deny"], &summary["verdicts_fresh"]), (&json!(judged_reads), &json!(judged_reads)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_turn_rule_is_replayed_from_the_database_against_the_recorded_responses() {
    let server = judge("DENY: do not read so much").await;
    let flags = rejudging(&server);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let answers = format!(
        "{RULES}\n[[rule]]\nid = \"short-answers\"\nprompt = \"Answers must be short.\"\nmodel = \"judge\"\n\
         applies_to = [\"after_model_call\"]\n"
    );
    let out = replay(&answers, "db.sqlite", &[&["--rejudge", "--yes"], flags.as_slice()].concat());
    assert_eq!(out.status.code(), Some(1), "stderr: {}", out.stderr);
    assert_eq!(calls(&server).await, 11, "one judge call per recorded response");
    let turns: Vec<&str> =
        out.stdout.lines().filter(|l| l.contains("· model turn: ALLOW → DENY by short-answers")).collect();
    assert_eq!(turns.len(), 11, "{}", out.stdout);
    let bodies: Vec<String> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert!(bodies.iter().any(|b| b.contains("Response text: Done reading.")), "the judge saw the recorded answer");
    assert!(bodies.iter().any(|b| b.contains("notes/99.txt")), "and the recorded tool calls");
}

#[test]
fn a_ledger_file_replays_its_tool_calls_and_reports_model_turns_as_needing_the_database() {
    let text = std::fs::read_to_string(recorded().join("ledger.jsonl")).unwrap();
    let entries: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |kind: &str| entries.iter().filter(|e| e["kind"] == json!(kind)).count();
    let keys = entries.iter().filter(|e| e["tool_args"]["path"].as_str().is_some_and(|p| p.ends_with(".key"))).count();
    assert!(keys > 0 && of("model_turn") > 0, "the file holds reads of keys and model turns");
    let tightened = format!(
        "{RULES}\n[[rule]]\nid = \"no-keys\"\ndeny_arg = {{ tool = \"read_file\", arg = \"path\", glob = \"**/*.key\" }}\n"
    );
    let out = replay(&tightened, "ledger.jsonl", &["--json"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", out.stderr);
    let summary = summary(&out);
    assert_eq!((&summary["replayed"], &summary["allow_to_deny"]), (&json!(of("tool_call")), &json!(keys)));
    assert_eq!(summary["not_replayable"], json!({"no_response": of("model_turn")}));
    let text = replay(&tightened, "ledger.jsonl", &["--accept-changes"]);
    assert!(text.status.success(), "{}", text.stderr);
    let line = format!(
        "not replayable: {} decision(s): model-turn decision without its response (a ledger file has none; replay \
         against the database)",
        of("model_turn")
    );
    assert!(text.stdout.contains(&line), "{}", text.stdout);
}

#[test]
fn arguments_are_printed_with_control_characters_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.jsonl");
    let entry = json!({
        "kind": "tool_call", "timestamp": "2026-11-25T18:30:05.123Z", "tool_name": "read_file",
        "tool_args": {"path": "a\u{1b}[2J\u{202e}b.key"}, "usage": null, "action": "allow", "guidance": null,
        "rule_id": null, "evaluator": null, "failures": [], "duration": {"secs": 0, "nanos": 0}, "outcome": null
    });
    std::fs::write(&ledger, format!("{entry}\n")).unwrap();
    std::fs::write(dir.path().join("rules.toml"), "[[rule]]\nid = \"k\"\ndeny_tool = \"read_file\"\n").unwrap();
    let out = run(noetic().current_dir(dir.path()).args(["rules", "test", "rules.toml", "--against", "ledger.jsonl"]));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    let line = out.stdout.lines().next().unwrap();
    assert!(!line.contains('\u{1b}') && !line.contains('\u{202e}'), "{line:?}");
    assert!(line.contains("tool read_file {\"path\":\"a\\u001b[2J\\u202eb.key\"}: ALLOW → DENY by k"), "{line}");
}

fn bad_input(rules: &str, against: &Path, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.toml");
    std::fs::write(&file, rules).unwrap();
    let out = run(noetic().args(["rules", "test"]).arg(&file).arg("--against").arg(against).args(extra));
    assert!(!out.status.success(), "{}", out.stderr);
    out.stderr
}

#[test]
fn bad_input_is_refused_with_what_is_wrong_and_what_to_do() {
    let db = recorded().join("db.sqlite");
    let stderr = bad_input("[[rule]]\nid = \"x\"\ndeny_tool = \"nosuch\"\n", &db, &[]);
    assert!(stderr.contains("rules.toml:3:1: rule 'x': there is no tool 'nosuch'"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("ledger.jsonl");
    let mut text = std::fs::read_to_string(recorded().join("ledger.jsonl")).unwrap();
    let good = text.lines().count();
    text.push_str("{\"kind\": \"tool_call\"\n");
    std::fs::write(&broken, text).unwrap();
    let stderr = bad_input(RULES, &broken, &[]);
    assert!(stderr.contains(&format!("ledger.jsonl:{}: not a ledger entry", good + 1)), "{stderr}");
    assert!(stderr.contains("fix or delete that line"), "{stderr}");

    let foreign = dir.path().join("other.db");
    sqlite(&foreign, 0);
    let stderr = bad_input(RULES, &foreign, &[]);
    assert!(stderr.contains("is an SQLite database but not a noetic session database"), "{stderr}");
    let newer = dir.path().join("newer.db");
    sqlite(&newer, 99);
    let stderr = bad_input(RULES, &newer, &[]);
    assert!(stderr.contains("was written by a newer noetic (schema version 99"), "{stderr}");
    assert!(stderr.contains("upgrade noetic"), "{stderr}");

    let stderr = bad_input(RULES, &db, &["--session", "nope"]);
    assert!(stderr.contains("the store has no session 'nope'; its sessions are: reads"), "{stderr}");
    let stderr = bad_input(RULES, &dir.path().join("missing.db"), &[]);
    assert!(stderr.contains("missing.db': No such file"), "{stderr}");
    let stderr = bad_input(RULES, &db, &["--since", "yesterday"]);
    assert!(stderr.contains("'yesterday' is not a time"), "{stderr}");
}

/// An SQLite file with a table of its own and this `user_version`.
fn sqlite(path: &PathBuf, version: i64) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(&format!("CREATE TABLE t (x); PRAGMA user_version = {version};")).unwrap();
}

#[test]
fn a_rewrite_rule_in_the_file_is_named_as_not_replayed_and_changes_nothing() {
    let rules = format!(
        "{RULES}\n[[rule]]\nid = \"read-drafts\"\nrewrite_arg = {{ tool = \"read_file\", arg = \"path\", regex = \
         '^notes/', replace = \"drafts/\" }}\n"
    );
    let out = replay(&rules, "db.sqlite", &["--json"]);
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(
        out.stderr.contains("note: rewrite rule(s) read-drafts are not replayed"),
        "the user is told: {}",
        out.stderr
    );
    assert_eq!(summary(&out)["changed"], json!(0), "stdout stays one JSON object: {}", out.stdout);
}
