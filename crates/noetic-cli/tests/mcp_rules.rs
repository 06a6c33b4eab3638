//! Rules naming tools of MCP servers (#29 item 11): `deny_tool`, `require_approval` and an LLM rule scoped with
//! `tools = [...]` name `<server>__<tool>` in a workflow file and in a `--rules` file, and guard the calls of the
//! npm `everything` server's tools; a name the server does not list is an error naming the tools it does
//! (fail closed), and a prefix no configured server has is an error before anything starts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};

use common::{noetic, run};
use serde_json::Value;

/// The three rules, on tools of the server named `bad`.
const RULES: &str = "[[rule]]\nid = \"no-echo\"\ndeny_tool = \"bad__echo\"\n\n\
                     [[rule]]\nid = \"ask-sum\"\nrequire_approval = \"bad__get-sum\"\n\n\
                     [[rule]]\nid = \"judge-env\"\nprompt = \"Never print the environment.\"\n\
                     tools = [\"bad__get-env\"]\n";

/// The scripted model calls four tools of `bad` at once, then answers; the judge denies what it is asked about.
const SCRIPT: &str = "[[scripted.response]]\ntool_calls = [\n\
                      { id = \"c1\", name = \"bad__echo\", args = { message = \"hi\" } },\n\
                      { id = \"c2\", name = \"bad__get-sum\", args = { a = 1, b = 2 } },\n\
                      { id = \"c3\", name = \"bad__get-env\", args = {} },\n\
                      { id = \"c4\", name = \"bad__get-structured-content\", args = { location = \"New York\" } },\n\
                      ]\n[[scripted.response]]\ntext = \"done\"\n\n\
                      [scripted]\njudge = [\"DENY: not the environment\"]\n";

fn server_table(bin: &Path) -> String {
    format!("[[mcp_server]]\nname = \"bad\"\ncommand = {:?}\n", bin.display().to_string())
}

/// What each call's `tool_call_completed` event says, by call id.
fn outputs(stdout: &str) -> Vec<(String, bool, String)> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            let output = e["output"].as_str().map_or_else(|| e["output"].to_string(), str::to_owned);
            (e["call_id"].as_str().unwrap_or_default().to_owned(), e["is_error"] == true, output)
        })
        .collect()
}

fn assert_guarded(out: &common::Output) {
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let outputs = outputs(&out.stdout);
    let by_id =
        |id: &str| outputs.iter().find(|(c, ..)| c == id).cloned().unwrap_or_else(|| panic!("no {id}: {outputs:?}"));
    let (_, denied, echo) = by_id("c1");
    assert!(denied && echo.contains("The tool 'bad__echo' is not allowed here."), "deny_tool: {echo}");
    let (_, rejected, sum) = by_id("c2");
    assert!(rejected && sum.contains("'bad__get-sum' needs the user's approval"), "require_approval: {sum}");
    let (_, judged, env) = by_id("c3");
    assert!(judged && env.contains("not the environment"), "the LLM rule judged it: {env}");
    let (_, failed, weather) = by_id("c4");
    assert!(!failed && weather.contains("temperature"), "a tool no rule names runs: {weather}");
    let ledger: Value = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "ledger")
        .unwrap_or_else(|| panic!("no ledger: {}", out.stdout));
    let rules: Vec<&str> = ledger["entries"].as_array().unwrap().iter().filter_map(|e| e["rule_id"].as_str()).collect();
    assert!(rules.contains(&"no-echo") && rules.contains(&"judge-env"), "{ledger}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn rules_in_a_workflow_file_deny_ask_approval_for_and_judge_calls_of_an_mcp_servers_tools() {
    let Some(bin) = common::mcp_server("mcp-server-everything") else { return };
    let dir = tempfile::tempdir().unwrap();
    let flow =
        write(dir.path(), "flow.toml", &format!("model = \"scripted\"\n{}\n{RULES}\n{SCRIPT}", server_table(&bin)));
    let out = run(noetic().current_dir(dir.path()).arg("run").arg(&flow).args(["--prompt", "go", "--json"]));
    assert_guarded(&out);
}

#[test]
fn rules_given_with_rules_name_tools_of_the_mcp_servers_of_noetic_toml() {
    let Some(bin) = common::mcp_server("mcp-server-everything") else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "noetic.toml", &server_table(&bin));
    let rules = write(dir.path(), "rules.toml", RULES);
    let flow = write(dir.path(), "flow.toml", &format!("model = \"scripted\"\n{SCRIPT}"));
    let out = run(noetic()
        .current_dir(dir.path())
        .arg("--config")
        .arg(&config)
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "go", "--json", "--rules"])
        .arg(&rules));
    assert_guarded(&out);
}

#[test]
fn a_misspelt_mcp_tool_in_a_rule_is_an_error_naming_the_servers_tools_and_nothing_runs() {
    let Some(bin) = common::mcp_server("mcp-server-everything") else { return };
    let dir = tempfile::tempdir().unwrap();
    let rules = "[[rule]]\nid = \"no-echo\"\ndeny_tool = \"bad__ecoh\"\n";
    let flow =
        write(dir.path(), "flow.toml", &format!("model = \"scripted\"\n{}\n{rules}\n{SCRIPT}", server_table(&bin)));
    let out = run(noetic().current_dir(dir.path()).arg("run").arg(&flow).args(["--prompt", "go", "--json"]));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("flow.toml:8:1: rule 'no-echo': there is no tool 'bad__ecoh': MCP server 'bad' offers ")
            && out.stderr.contains("bad__echo, "),
        "{}",
        out.stderr
    );
    assert!(outputs(&out.stdout).is_empty(), "no call ran: {}", out.stdout);

    let rules = "[[rule]]\nid = \"no-echo\"\ndeny_tool = \"bda__echo\"\n";
    let flow =
        write(dir.path(), "flow.toml", &format!("model = \"scripted\"\n{}\n{rules}\n{SCRIPT}", server_table(&bin)));
    let out = run(noetic().current_dir(dir.path()).arg("run").arg(&flow).args(["--prompt", "go"]));
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("rule 'no-echo': there is no tool 'bda__echo'; the tools are read_file")
            && out.stderr.contains("and those of the configured MCP servers: bad__<tool>"),
        "{}",
        out.stderr
    );
}
