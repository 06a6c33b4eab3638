//! `[[mcp_server]]` tables in noetic.toml: a real MCP server's tools join the agent's, and a bad table is an error
//! naming it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;

use common::{noetic, run};

/// The npm filesystem reference server (skipped with a reason when absent, unless `NOETIC_E2E_REQUIRED=1`).
fn filesystem_server() -> Option<PathBuf> {
    common::mcp_server("mcp-server-filesystem")
}

#[test]
fn a_workflow_calls_a_tool_of_an_mcp_server_from_noetic_toml_and_gets_its_real_result() {
    let Some(server) = filesystem_server() else { return };
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "from the MCP server\n").unwrap();
    let config = root.join("noetic.toml");
    std::fs::write(
        &config,
        format!(
            "[[mcp_server]]\nname = \"files\"\ncommand = {:?}\nargs = [{:?}]\n",
            server.display().to_string(),
            root.display().to_string()
        ),
    )
    .unwrap();
    let flow = root.join("flow.toml");
    std::fs::write(
        &flow,
        format!(
            "model = \"scripted\"\ntools = [\"list_dir\"]\n[[scripted.response]]\ntool_calls = [{{ id = \"m1\", name = \
             \"files__read_text_file\", args = {{ path = {:?} }} }}]\n[[scripted.response]]\ntext = \"read it\"\n",
            root.join("notes.txt").display().to_string()
        ),
    )
    .unwrap();
    let out = run(noetic()
        .arg("--config")
        .arg(&config)
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "Read the notes", "--json", "--workspace"])
        .arg(&root));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let completed = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["kind"]["type"] == "tool_call_completed" || e["type"] == "tool_call_completed")
        .unwrap_or_else(|| panic!("no tool_call_completed event: {}", out.stdout));
    let text = completed.to_string();
    assert!(text.contains("files__read_text_file") && text.contains("from the MCP server"), "{text}");
}

#[test]
fn an_mcp_server_table_without_a_command_or_url_is_an_error_naming_it() {
    let ws = tempfile::tempdir().unwrap();
    let config = ws.path().join("noetic.toml");
    std::fs::write(&config, "[[mcp_server]]\nname = \"broken\"\n").unwrap();
    let flow = ws.path().join("flow.toml");
    std::fs::write(&flow, "model = \"scripted\"\n[[scripted.response]]\ntext = \"hi\"\n").unwrap();
    let out = run(noetic().arg("--config").arg(&config).arg("run").arg(&flow).args(["--prompt", "x"]));
    assert!(!out.status.success());
    assert!(out.stderr.contains("[[mcp_server]] 'broken' needs exactly one of command"), "{}", out.stderr);
}

#[test]
fn a_workflow_file_can_bring_its_own_mcp_server() {
    let Some(server) = filesystem_server() else { return };
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("todo.txt"), "ship it\n").unwrap();
    let flow = root.join("flow.toml");
    std::fs::write(
        &flow,
        format!(
            "model = \"scripted\"\n[[mcp_server]]\nname = \"fs\"\ncommand = {:?}\nargs = [{:?}]\n\
             [[scripted.response]]\ntool_calls = [{{ id = \"m1\", name = \"fs__read_text_file\", args = {{ path = {:?} \
             }} }}]\n[[scripted.response]]\ntext = \"done\"\n",
            server.display().to_string(),
            root.display().to_string(),
            root.join("todo.txt").display().to_string()
        ),
    )
    .unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "Read it", "--json", "--workspace"]).arg(&root));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("ship it"), "the server's result is in the events: {}", out.stdout);
}

#[test]
fn the_offline_model_asked_for_a_tool_call_first_uses_an_mcp_servers_tool() {
    let Some(server) = filesystem_server() else { return };
    let Some(model_dir) = common::local_model_dir() else { return };
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "offline notes\n").unwrap();
    // Only the MCP server's tools are offered, so whichever tool the tiny model picks is one of them.
    let flow = root.join("flow.toml");
    std::fs::write(
        &flow,
        format!(
            "instructions = \"Use the tools to look at the folder.\"\ntools = []\nmax_rounds = 4\nmax_iterations = 1\n\
             [[mcp_server]]\nname = \"files\"\ncommand = {:?}\nargs = [{:?}]\n",
            server.display().to_string(),
            root.display().to_string()
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--prompt", "What files are in the folder?", "--local", "--json", "--workspace"])
        .arg(&root)
        .env("NOETIC_LOCAL_LLM_DIR", &model_dir)
        .env("NOETIC_LOCAL_LLM_PORT", port.to_string()));
    let _ = std::fs::remove_file(model_dir.join(format!("server-{port}.log")));
    let events: Vec<serde_json::Value> =
        out.stdout.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).collect();
    let started = events
        .iter()
        .find(|e| e["type"] == "tool_call_started")
        .unwrap_or_else(|| panic!("the model called no tool: {}\n{}", out.stdout, out.stderr));
    let tool = started["tool"].as_str().unwrap();
    assert!(tool.starts_with("files__"), "an MCP tool: {tool}");
    let completed = events
        .iter()
        .find(|e| e["type"] == "tool_call_completed" && e["call_id"] == started["call_id"])
        .unwrap_or_else(|| panic!("the call got no result: {}", out.stdout));
    // The tiny model's arguments may be wrong; either way the server answered or the call was refused with a typed
    // error the model can read.
    assert!(completed["output"].as_str().is_some_and(|o| !o.is_empty()), "{completed}");
    let requests = events.iter().filter(|e| e["type"] == "model_call_started").count();
    assert!(requests >= 2, "the model saw the result in a second, free round: {}", out.stdout);
}

#[test]
fn max_result_bytes_of_an_mcp_server_table_cuts_its_results_with_a_note() {
    let Some(server) = common::mcp_server("mcp-server-everything") else { return };
    let ws = tempfile::tempdir().unwrap();
    let flow = ws.path().join("flow.toml");
    std::fs::write(
        &flow,
        format!(
            "model = \"scripted\"\n[[mcp_server]]\nname = \"every\"\ncommand = {:?}\nmax_result_bytes = 100\n\
             [[scripted.response]]\ntool_calls = [{{ id = \"m1\", name = \"every__echo\", args = {{ message = {:?} }} \
             }}]\n[[scripted.response]]\ntext = \"done\"\n",
            server.display().to_string(),
            "y".repeat(5_000)
        ),
    )
    .unwrap();
    let out = run(noetic().arg("run").arg(&flow).args(["--prompt", "Echo it", "--json", "--workspace"]).arg(ws.path()));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let completed = out
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["type"] == "tool_call_completed")
        .unwrap_or_else(|| panic!("no tool_call_completed event: {}", out.stdout));
    let expected = format!(
        "Echo: {}\n[… truncated: the result has 5006 bytes; showing the first 100 (max_result_bytes of MCP server \
         'every' is 100); ask the tool for less]",
        "y".repeat(94)
    );
    assert_eq!(completed["output"], expected.as_str(), "{completed}");
}
