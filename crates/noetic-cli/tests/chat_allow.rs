//! `[[allow]]` in noetic.toml: calls a pattern covers run without an approval question in every chat and run (also
//! with no terminal to ask at), the decision is in the ledger, and a chained command is still not covered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Driven, answer, noetic, tool_calls};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn server(responses: Vec<ResponseTemplate>) -> MockServer {
    let server = MockServer::start().await;
    let last = responses.len() - 1;
    for (i, response) in responses.into_iter().enumerate() {
        let mock = Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(response);
        if i < last { mock.up_to_n_times(1).mount(&server).await } else { mock.mount(&server).await }
    }
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allow_in_noetic_toml_runs_the_commands_it_covers_without_a_question_and_the_ledger_says_so() {
    let server = server(vec![
        tool_calls(&[
            ("c1", "run_command", json!({"command": "echo allowed"})),
            ("c2", "run_command", json!({"command": "echo chained; echo more"})),
        ]),
        answer("Ran what I could."),
    ])
    .await;
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join("noetic.toml");
    std::fs::write(&config, "[[allow]]\ntool = \"run_command\"\nmatches = \"echo *\"\n").unwrap();
    let ledger = ws.path().join("ledger.jsonl");
    let mut cmd = noetic();
    cmd.args(["chat", "--plain", "--no-store", "--model", "test-model", "--base-url", &format!("{}/v1", server.uri())])
        .arg("--config")
        .arg(&config)
        .arg("--ledger-out")
        .arg(&ledger)
        .arg("--workspace")
        .arg(ws.path());
    let mut driven = Driven::spawn(cmd);
    let out = tokio::task::spawn_blocking(move || {
        driven.send("Echo things.");
        driven.wait_for("approved without asking: noetic.toml allows run_command matching \"echo *\"");
        driven.wait_for("■ turn done");
        driven.send("/ledger");
        driven.wait_for("by [[allow]] run_command matching \"echo *\" of noetic.toml: approved without a question");
        driven.send("/quit");
        driven.finish()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let requests: Vec<Value> =
        server.received_requests().await.unwrap().iter().map(|r| serde_json::from_slice(&r.body).unwrap()).collect();
    let results: Vec<String> = requests[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(results[0].contains("allowed"), "{results:?}");
    assert!(results[1].contains("stdin is not a terminal"), "the chained command is not covered: {results:?}");
    let kept = std::fs::read_to_string(&ledger).unwrap();
    assert!(kept.contains("[[allow]] run_command matching \\\"echo *\\\" of noetic.toml"), "{kept}");
    // The [[allow]] decision is chained with the steering layer's: the file verifies.
    let verify = common::run(noetic().args(["ledger", "verify"]).arg(&ledger));
    assert!(verify.status.success(), "{}{}", verify.stdout, verify.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_follows_the_allow_of_noetic_toml_without_a_terminal_and_its_json_ledger_has_the_decision() {
    let server =
        server(vec![tool_calls(&[("c1", "run_command", json!({"command": "echo allowed"}))]), answer("Echoed.")]).await;
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join("noetic.toml");
    std::fs::write(&config, "[[allow]]\ntool = \"run_command\"\nmatches = \"echo *\"\n").unwrap();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "model = \"test-model\"\ntools = [\"run_command\"]\n").unwrap();
    let mut cmd = noetic();
    cmd.arg("run").arg(&flow).args(["--prompt", "Echo.", "--json", "--base-url", &format!("{}/v1", server.uri())]);
    cmd.arg("--config").arg(&config).arg("--workspace").arg(ws.path());
    let out = tokio::task::spawn_blocking(move || common::run(&mut cmd)).await.unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stderr.contains("approved without asking: noetic.toml allows run_command matching \"echo *\""));
    let lines: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ledger = lines.iter().find(|l| l["type"] == "ledger").unwrap();
    let allowed = ledger["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["rule_id"] == "[[allow]] run_command matching \"echo *\" of noetic.toml")
        .unwrap_or_else(|| panic!("{ledger}"));
    assert_eq!((allowed["action"].as_str(), allowed["tool_name"].as_str()), (Some("allow"), Some("run_command")));
    let completed = lines.iter().find(|l| l["type"] == "tool_call_completed").unwrap();
    assert!(completed["output"].as_str().unwrap().contains("allowed"), "{completed}");
}
