//! `noetic run`: an agent defined in a workflow file runs one turn and prints its answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{answer, example, noetic, run, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer};

/// A workspace with a README (which a rule of the example workflow protects) and a scratch file.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# project\n").unwrap();
    std::fs::write(dir.path().join("scratch.txt"), "junk\n").unwrap();
    dir
}

fn run_example(ws: &Path, extra: &[&str]) -> common::Output {
    run(noetic()
        .arg("run")
        .arg(example("workflow.toml"))
        .args(["--prompt", "Tidy up and write a note", "--workspace"])
        .arg(ws)
        .args(extra))
}

#[test]
fn a_scripted_workflow_prints_its_answer_and_its_tools_change_the_workspace() {
    let ws = workspace();
    let out = run_example(ws.path(), &[]);
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), "Wrote notes/today.md and deleted scratch.txt; README.md stays (a rule keeps it).");
    assert_eq!(std::fs::read_to_string(ws.path().join("notes/today.md")).unwrap(), "- tidy the workspace\n");
    assert!(!ws.path().join("scratch.txt").exists());
}

#[test]
fn a_rule_of_the_workflow_denies_a_tool_call_and_the_transcript_shows_it() {
    let ws = workspace();
    let out = run_example(ws.path(), &[]);
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(ws.path().join("README.md").exists(), "the denied delete did not run");
    for expected in [
        "rule  denied delete_file [d1] (layer steering): README files stay; delete only scratch files.",
        "delete_file [d1] → Steering denied: README files stay; delete only scratch files.",
        "delete_file [d2] → deleted scratch.txt",
    ] {
        assert!(out.stderr.contains(expected), "missing {expected:?} in the transcript:\n{}", out.stderr);
    }
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

#[test]
fn json_mode_prints_every_event_then_the_ledger_and_the_answer_as_json_lines() {
    let ws = workspace();
    let out = run_example(ws.path(), &["--json"]);
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let lines = json_lines(&out.stdout);
    let of_type = |t: &str| lines.iter().filter(|l| l["type"] == t).collect::<Vec<_>>();
    assert_eq!(of_type("turn_started").len(), 1);
    let rounds: Vec<u64> = of_type("model_call_started").iter().map(|l| l["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds.first(), Some(&1), "rounds count from 1, as the progress lines do: {rounds:?}");
    assert!(rounds.windows(2).all(|w| w[1] == w[0] + 1), "{rounds:?}");
    let started: Vec<&str> = of_type("tool_call_started").iter().map(|l| l["call_id"].as_str().unwrap()).collect();
    assert_eq!(started, ["w1", "d1", "d2", "l1"]);
    let denied = of_type("steering_denied");
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["tool"], "delete_file");
    let d1 = of_type("tool_call_completed").into_iter().find(|l| l["call_id"] == "d1").unwrap();
    assert_eq!(d1["is_error"], true);
    let ledger = &lines[lines.len() - 2];
    assert_eq!(ledger["type"], "ledger");
    let deny = ledger["entries"].as_array().unwrap().iter().find(|e| e["action"] == "deny").unwrap();
    assert_eq!((deny["rule_id"].as_str(), deny["tool_name"].as_str()), (Some("keep-readme"), Some("delete_file")));
    assert_eq!(
        lines.last().unwrap(),
        &json!({"type": "answer", "text": "Wrote notes/today.md and deleted scratch.txt; README.md stays (a rule keeps it)."})
    );
}

#[test]
fn an_llm_judged_rule_of_a_scripted_workflow_guides_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.toml");
    std::fs::write(
        &flow,
        r#"
model = "scripted"
tools = ["write_file"]

[[rule]]
id = "drafts-first"
prompt = "Reports go under drafts/ first."

[scripted]
judge = ["GUIDE: Write it under drafts/ first.", "ALLOW"]

[[scripted.response]]
tool_calls = [{ id = "w1", name = "write_file", args = { path = "report.md", content = "r" } }]
[[scripted.response]]
tool_calls = [{ id = "w2", name = "write_file", args = { path = "drafts/report.md", content = "r" } }]
[[scripted.response]]
text = "Drafted."
"#,
    )
    .unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "report", "--workspace"]).arg(dir.path()));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), "Drafted.");
    assert!(
        out.stderr.contains("write_file [w1] → Steering guidance: Write it under drafts/ first."),
        "{}",
        out.stderr
    );
    assert!(!dir.path().join("report.md").exists());
    assert!(dir.path().join("drafts/report.md").exists());
}

#[test]
fn a_workflow_naming_an_unknown_tool_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.toml");
    std::fs::write(&flow, "model = \"scripted\"\ntools = [\"read_file\", \"format_disk\"]\n").unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "x"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("flow.toml:2:1: there is no built-in tool 'format_disk'"), "{}", out.stderr);
}

#[test]
fn a_json_workflow_runs_too() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.json");
    let def = json!({
        "model": "scripted",
        "rule": [{"id": "no-delete", "deny_tool": "delete_file"}],
        "scripted": {"response": [
            {"tool_calls": [{"id": "d1", "name": "delete_file", "args": {"path": "a.txt"}}]},
            {"text": "Could not delete."}
        ]}
    });
    std::fs::write(&flow, def.to_string()).unwrap();
    std::fs::write(dir.path().join("a.txt"), "keep").unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "delete a.txt", "--workspace"]).arg(dir.path()));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), "Could not delete.");
    assert!(dir.path().join("a.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_on_a_local_openai_compatible_server_returns_the_answer() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(tool_calls(&[("call_1", "list_dir", json!({"path": "."}))]))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(answer("The workspace holds README.md and scratch.txt."))
        .mount(&server)
        .await;
    let ws = workspace();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "model = \"test-model\"\ninstructions = \"From the file.\"\ntools = [\"list_dir\"]\n")
        .unwrap();
    let url = format!("{}/v1", server.uri());
    let mut cmd = noetic();
    cmd.arg("run")
        .arg(&flow)
        .args(["--prompt", "What is here?", "--base-url", &url, "--instructions", "Be terse.", "--workspace"])
        .arg(ws.path());
    let out = tokio::task::spawn_blocking(move || run(&mut cmd)).await.unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert_eq!(out.stdout.trim(), "The workspace holds README.md and scratch.txt.");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(second["model"], "test-model");
    assert_eq!(
        second["messages"][0],
        json!({"role": "system", "content": "Be terse."}),
        "--instructions wins over the file"
    );
    let tool_result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool_result["content"].as_str().unwrap().contains("README.md"), "{tool_result}");
}

/// `noetic run --json` of a one-tool workflow on a local server answering a tool call, then `answer`; the JSON
/// lines it printed.
async fn run_json_on(first_usage: Value, then_usage: Value) -> Vec<Value> {
    let server = MockServer::start().await;
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}]});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(common::completion_using(call, "tool_calls", first_usage))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    let answer = json!({"role": "assistant", "content": "Two files."});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(common::completion_using(answer, "stop", then_usage))
        .mount(&server)
        .await;
    let ws = workspace();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "model = \"test-model\"\ntools = [\"list_dir\"]\n").unwrap();
    let url = format!("{}/v1", server.uri());
    let mut cmd = noetic();
    cmd.arg("run").arg(&flow).args(["--prompt", "What is here?", "--json", "--base-url", &url, "--workspace"]);
    cmd.arg(ws.path());
    let out = tokio::task::spawn_blocking(move || run(&mut cmd)).await.unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    json_lines(&out.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn run_json_gives_the_turn_s_cost_when_a_call_reported_one_and_none_when_no_call_did() {
    let tokens = json!({"prompt_tokens": 10, "completion_tokens": 5});
    let lines = run_json_on(common::usage_costing(0.001), tokens.clone()).await;
    let answer = lines.last().unwrap();
    assert_eq!(answer["type"], "answer");
    let cost = answer["cost"].as_f64().unwrap();
    assert!((cost - 0.001).abs() < 1e-12, "the one reported cost, not a made-up one for the other call: {answer}");
    let calls: Vec<&Value> = lines.iter().filter(|l| l["type"] == "model_call_completed").collect();
    assert_eq!(calls.len(), 2, "{lines:?}");
    assert_eq!((calls[0]["usage"]["cost"].as_f64(), calls[1]["usage"].get("cost")), (Some(0.001), None));

    let lines = run_json_on(common::usage_costing(0.001), common::usage_costing(0.0002)).await;
    let cost = lines.last().unwrap()["cost"].as_f64().unwrap();
    assert!((cost - 0.0012).abs() < 1e-12, "summed over the turn's calls: {cost}");

    let lines = run_json_on(tokens.clone(), tokens).await;
    let answer = lines.last().unwrap();
    assert_eq!((answer["type"].as_str(), answer.get("cost")), (Some("answer"), None), "{answer}");
    assert!(lines.iter().all(|l| l["usage"].get("cost").is_none()), "{lines:?}");
}

#[test]
fn a_workflow_on_openai_without_a_key_names_the_variable_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.toml");
    std::fs::write(&flow, "model = \"openai/gpt-4o-mini\"\n").unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "hi"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("OPENAI_API_KEY"), "{}", out.stderr);
}

/// Runs the example workflow with its text changed by `edit`, in the workspace `ws`.
fn run_edited_example(ws: &Path, edit: impl Fn(&str) -> String) -> common::Output {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("workflow.toml");
    let text = std::fs::read_to_string(example("workflow.toml")).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "the edit changed nothing");
    std::fs::write(&flow, edited).unwrap();
    run(noetic().arg("run").arg(&flow).args(["--prompt", "Tidy up", "--workspace"]).arg(ws))
}

#[cfg(unix)]
#[test]
fn the_example_keep_readme_rule_holds_for_an_absolute_or_symlinked_spelling_of_the_path() {
    let ws = workspace();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", ws.path().join("sub/link-to-root")).unwrap();
    let absolute = ws.path().join("README.md").to_str().unwrap().to_owned();
    for spelling in [absolute.as_str(), "sub/link-to-root/README.md"] {
        let out = run_edited_example(ws.path(), |text| {
            text.replace(r#"args = { path = "README.md" }"#, &format!("args = {{ path = {spelling:?} }}"))
        });
        assert!(out.status.success(), "stderr: {}", out.stderr);
        assert!(
            out.stderr.contains("delete_file [d1] → Steering denied: README files stay; delete only scratch files."),
            "{spelling}: {}",
            out.stderr
        );
        assert_eq!(std::fs::read_to_string(ws.path().join("README.md")).unwrap(), "# project\n");
    }
}

#[test]
fn the_example_llm_rule_is_judged_on_write_file_calls_only() {
    let ws = workspace();
    // A second judge reply would deny the next call it is asked about: no other call may reach the judge.
    let out = run_edited_example(ws.path(), |text| {
        text.replace(r#"judge = ["ALLOW"]"#, r#"judge = ["ALLOW", "DENY: this call is outside the rule's tools"]"#)
    });
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("delete_file [d2] → deleted scratch.txt"), "{}", out.stderr);
    assert!(!out.stderr.contains("outside the rule's tools"), "{}", out.stderr);
    assert!(!ws.path().join("scratch.txt").exists());
}

#[test]
fn run_adds_the_rules_of_a_flag_to_the_workflows_and_rules_and_ledger_print_json() {
    let ws = workspace();
    let rules = ws.path().join("extra-rules.toml");
    std::fs::write(&rules, "[[rule]]\nid = \"no-listing\"\ndeny_tool = \"list_dir\"\nguidance = \"No listings.\"\n")
        .unwrap();
    let ledger = ws.path().join("ledger.jsonl");
    let out = run_example(
        ws.path(),
        &[
            "--json",
            "--mode",
            "all",
            "--instructions",
            "Be terse.",
            "--ledger-out",
            ledger.to_str().unwrap(),
            "--rules",
            rules.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let lines = json_lines(&out.stdout);
    let entries = lines[lines.len() - 2]["entries"].as_array().unwrap().clone();
    let denied: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["action"] == "deny")
        .map(|e| (e["rule_id"].as_str().unwrap(), e["tool_name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        denied,
        [("keep-readme", "delete_file"), ("no-listing", "list_dir")],
        "the workflow's rule and the flag's"
    );

    let shown = run(noetic().arg("ledger").arg(&ledger).arg("--json"));
    assert!(shown.status.success(), "{}", shown.stderr);
    let shown = json_lines(&shown.stdout);
    assert_eq!(shown.len(), entries.len(), "one JSON line per entry, nothing else");
    assert!(shown.iter().any(|e| e["rule_id"] == "no-listing"));

    let described = run(noetic().arg("rules").arg(&rules).arg("--json"));
    assert!(described.status.success(), "{}", described.stderr);
    let described: Value = serde_json::from_str(described.stdout.trim()).unwrap();
    assert_eq!(described["rules"][0]["id"], "no-listing");
    assert!(described["rules"][0]["describes"].as_str().unwrap().contains("list_dir"));

    std::fs::write(&rules, "[[rule]]\nid = \"keep-readme\"\ndeny_tool = \"list_dir\"\n").unwrap();
    let clash_again = run_example(ws.path(), &["--rules", rules.to_str().unwrap()]);
    assert!(
        !clash_again.status.success() && clash_again.stderr.contains("two rules share the id 'keep-readme'"),
        "{}",
        clash_again.stderr
    );
}

#[test]
fn run_refuses_an_unknown_steering_mode() {
    let out = run(noetic().arg("run").arg(example("workflow.toml")).args(["--prompt", "x", "--mode", "sometimes"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("one-at-a-time") && out.stderr.contains("all"), "{}", out.stderr);
}

#[test]
fn chat_help_lists_every_slash_command() {
    let out = run(noetic().args(["chat", "--help"]));
    assert!(out.status.success());
    for command in ["/stop", "/mode", "/steer", "/ledger", "/status", "/help", "/quit"] {
        assert!(out.stdout.contains(command), "{command} in chat --help:\n{}", out.stdout);
    }
}
