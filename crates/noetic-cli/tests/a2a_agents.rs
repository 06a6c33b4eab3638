//! `[[a2a_agent]]` tables in noetic.toml: other agents' skills are tools. A workflow calls a second `noetic serve`
//! (over A2A, with its token) and an agent built with the official A2A SDK (`@a2a-js/sdk`, from
//! `scripts/a2a-sdk.sh setup`), and gets their answers as results, with their streamed updates as progress.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::served::{Served, workflow_command};
use common::{noetic, run, skip};
use serde_json::Value;

/// The A2A SDK's directory, or a printed reason to skip (a failure with `NOETIC_E2E_REQUIRED=1`).
fn a2a_sdk() -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_A2A_SDK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-a2a"));
    let node = Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if node && dir.join("node_modules/@a2a-js/sdk").exists() && dir.join("node_modules/express").exists() {
        return Some(dir);
    }
    skip(&format!("@a2a-js/sdk and express in {} or node are missing: run scripts/a2a-sdk.sh setup", dir.display()))
}

/// Kills the SDK agent when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_workflow_calls_the_skills_of_a_noetic_server_and_an_sdk_agent_as_tools_and_reads_their_answers() {
    let Some(dir) = a2a_sdk() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir(root.join("ws")).unwrap();

    // The second agent: `noetic serve` with a scripted answer, behind a token.
    let helper_flow = root.join("helper.toml");
    std::fs::write(&helper_flow, "model = \"scripted\"\n[scripted]\nper_conversation = true\n[[scripted.response]]\ntext = \"The answer is 42.\"\n").unwrap();
    let helper =
        Served::spawn(workflow_command(&helper_flow, &root.join("ws"), &root.join("helper.db"), &["--token", "t0k"]));

    // The SDK agent.
    let mut sdk = Command::new("node")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../noetic-a2a/tests/sdk/sdk_agent.mjs"))
        .env("NOETIC_A2A_SDK_DIR", &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(sdk.stdout.take().unwrap()).lines();
    let sdk_base = lines.next().unwrap().unwrap().strip_prefix("listening on ").unwrap().to_owned();
    let _sdk = Killed(sdk);

    let config = root.join("noetic.toml");
    std::fs::write(
        &config,
        format!(
            "[[a2a_agent]]\nurl = {:?}\nname = \"helper\"\nheaders = {{ Authorization = \"Bearer t0k\" }}\n\n\
             [[a2a_agent]]\nurl = {sdk_base:?}\nname = \"sdk\"\ntimeout = 60\n",
            helper.base
        ),
    )
    .unwrap();
    let flow = root.join("flow.toml");
    std::fs::write(
        &flow,
        "model = \"scripted\"\ntools = [\"list_dir\"]\n[[scripted.response]]\ntool_calls = [\
         { id = \"a1\", name = \"helper__chat\", args = { message = \"What is the answer?\" } }, \
         { id = \"a2\", name = \"sdk__echo\", args = { message = \"hello\" } }]\n\
         [[scripted.response]]\ntext = \"Both agents answered.\"\n",
    )
    .unwrap();
    let out = run(noetic()
        .arg("--config")
        .arg(&config)
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "Ask the other agents", "--json", "--workspace"])
        .arg(root.join("ws")));
    let (_, helper_stderr) = helper.terminate();
    assert!(out.status.success(), "stderr: {}\nhelper: {helper_stderr}", out.stderr);
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let completed = |call: &str| -> Value {
        let event = events
            .iter()
            .find(|e| e["type"] == "tool_call_completed" && e["call_id"] == call)
            .unwrap_or_else(|| panic!("no result of {call}: {}", out.stdout));
        assert_eq!(event["is_error"], false, "{event}");
        serde_json::from_str(event["output"].as_str().unwrap()).unwrap()
    };
    let helper_result = completed("a1");
    assert_eq!(helper_result["state"], "completed");
    assert_eq!(helper_result["answer"], "The answer is 42.");
    assert!(helper_result["task_id"].as_str().unwrap().ends_with(":1"), "{helper_result}");
    let sdk_result = completed("a2");
    assert_eq!(sdk_result["state"], "completed");
    assert_eq!(sdk_result["answer"], "echo: hello");
    let progress: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "tool_progress" && e["call_id"] == "a2").map(|e| &e["data"]).collect();
    assert!(progress.iter().any(|d| d["says"] == "thinking"), "{progress:?}");
    assert!(progress.iter().any(|d| d["artifact"] == "answer"), "{progress:?}");
}

#[test]
fn an_a2a_agent_table_with_a_url_that_is_not_http_is_an_error_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("noetic.toml");
    std::fs::write(&config, "[[a2a_agent]]\nurl = \"ftp://agents.example/\"\n").unwrap();
    let out = run(noetic().arg("--config").arg(&config).args(["run", "x.toml", "--prompt", "hi"]));
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("[[a2a_agent]] url 'ftp://agents.example/' is not an http:// or https:// URL"),
        "{}",
        out.stderr
    );
}

/// A workflow of `rules` (inline `[[rule]]` tables) calling `helper__chat` of a second `noetic serve` configured as
/// `[[a2a_agent]]` named `helper`: its output and stderr.
fn run_with_rules(rules: &str) -> common::Output {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir(root.join("ws")).unwrap();
    let helper_flow = root.join("helper.toml");
    std::fs::write(&helper_flow, "model = \"scripted\"\n[scripted]\nper_conversation = true\n[[scripted.response]]\ntext = \"The answer is 42.\"\n").unwrap();
    let helper = Served::spawn(workflow_command(&helper_flow, &root.join("ws"), &root.join("helper.db"), &[]));
    let config = root.join("noetic.toml");
    std::fs::write(&config, format!("[[a2a_agent]]\nurl = {:?}\nname = \"helper\"\n", helper.base)).unwrap();
    let flow = root.join("flow.toml");
    std::fs::write(
        &flow,
        format!(
            "model = \"scripted\"\ntools = [\"list_dir\"]\n[[scripted.response]]\ntool_calls = [\
             {{ id = \"a1\", name = \"helper__chat\", args = {{ message = \"What is the answer?\" }} }}]\n\
             [[scripted.response]]\ntext = \"Done.\"\n\n{rules}"
        ),
    )
    .unwrap();
    let out = run(noetic()
        .arg("--config")
        .arg(&config)
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "Ask the other agent", "--json", "--workspace"])
        .arg(root.join("ws")));
    helper.terminate();
    out
}

#[test]
fn a_rule_denying_an_a2a_agents_tool_blocks_its_call() {
    let out = run_with_rules("[[rule]]\nid = \"no-helper\"\ndeny_tool = \"helper__chat\"\n");
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let done = events
        .iter()
        .find(|e| e["type"] == "tool_call_completed" && e["call_id"] == "a1")
        .unwrap_or_else(|| panic!("no result of a1: {}", out.stdout));
    assert_eq!(done["is_error"], true, "{done}");
    let output = done["output"].as_str().unwrap();
    assert!(output.contains("The tool 'helper__chat' is not allowed here."), "{output}");
}

#[test]
fn a_rule_naming_a_misspelt_a2a_tool_is_refused_naming_the_tools_there_are() {
    let out = run_with_rules("[[rule]]\nid = \"no-helper\"\ndeny_tool = \"helper__chta\"\n");
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("rule 'no-helper': there is no tool 'helper__chta'"), "{}", out.stderr);
    assert!(out.stderr.contains("helper__chat"), "the error names the agent's tools: {}", out.stderr);
    assert!(out.stderr.contains("list_dir"), "the error names the built-in tools: {}", out.stderr);
    assert!(!out.stdout.contains("tool_call_completed"), "no call ran: {}", out.stdout);
}

#[test]
fn a_require_approval_rule_on_an_a2a_agents_tool_makes_its_call_wait_for_approval() {
    let out = run_with_rules("[[rule]]\nid = \"ask-helper\"\nrequire_approval = \"helper__chat\"\n");
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let done = events
        .iter()
        .find(|e| e["type"] == "tool_call_completed" && e["call_id"] == "a1")
        .unwrap_or_else(|| panic!("no result of a1: {}", out.stdout));
    assert_eq!(done["is_error"], true, "no one approved it in a run without a terminal: {done}");
    let output = done["output"].as_str().unwrap();
    assert!(output.contains("'helper__chat' needs the user's approval"), "{output}");
}
