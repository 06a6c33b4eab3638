//! The built-in tools are confined to the workspace: `..`, absolute paths elsewhere and symbolic links out of it
//! are refused with a clear error the model reads, and nothing outside is touched.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::{noetic, run};
use serde_json::{Value, json};

/// Runs a scripted workflow making `calls` (name, args) in one batch; returns each call's result text by id.
fn call_tools(workspace: &Path, calls: &[(&str, Value)]) -> Vec<(bool, String)> {
    call_tools_with_rules(workspace, json!([]), calls)
}

/// Like [`call_tools`], with the workflow's inline `rule` tables.
fn call_tools_with_rules(workspace: &Path, rules: Value, calls: &[(&str, Value)]) -> Vec<(bool, String)> {
    call_tools_with(workspace, rules, &[], calls)
}

/// Like [`call_tools_with_rules`], with more flags for `noetic run`.
fn call_tools_with(workspace: &Path, rules: Value, flags: &[&str], calls: &[(&str, Value)]) -> Vec<(bool, String)> {
    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.json");
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({"id": format!("c{i}"), "name": name, "args": args}))
        .collect();
    let def = json!({"model": "scripted", "rule": rules, "scripted": {"response": [{"tool_calls": calls}, {"text": "done"}]}});
    std::fs::write(&flow, def.to_string()).unwrap();
    let out = run(noetic()
        .arg("run")
        .arg(&flow)
        .args(["--json", "--prompt", "go", "--workspace"])
        .arg(workspace)
        .args(flags));
    assert!(out.status.success(), "stderr: {}", out.stderr);
    // In call order: calls of concurrent tools (read_file, list_dir) may complete in any order.
    let mut completed: Vec<(usize, bool, String)> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            let call: usize = e["call_id"].as_str().unwrap().trim_start_matches('c').parse().unwrap();
            (call, e["is_error"].as_bool().unwrap(), e["output"].as_str().unwrap().to_owned())
        })
        .collect();
    completed.sort_by_key(|(call, ..)| *call);
    completed.into_iter().map(|(_, is_error, output)| (is_error, output)).collect()
}

#[test]
fn paths_climbing_out_or_absolute_elsewhere_are_refused() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(outer.path().join("secret.txt"), "secret").unwrap();
    let secret = outer.path().join("secret.txt");
    let results = call_tools(
        &ws,
        &[
            ("read_file", json!({"path": "../secret.txt"})),
            ("read_file", json!({"path": secret.to_str().unwrap()})),
            ("write_file", json!({"path": "../evil.txt", "content": "x"})),
            ("delete_file", json!({"path": "sub/../../secret.txt"})),
            ("list_dir", json!({"path": ".."})),
        ],
    );
    assert_eq!(results.len(), 5);
    for (is_error, output) in &results {
        assert!(*is_error, "{output}");
        assert!(output.contains("is outside the workspace"), "{output}");
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    assert!(!outer.path().join("evil.txt").exists());
}

#[cfg(unix)]
#[test]
fn a_symbolic_link_out_of_the_workspace_is_refused() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    let elsewhere = outer.path().join("elsewhere");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&elsewhere, ws.join("link")).unwrap();
    let results = call_tools(
        &ws,
        &[
            ("read_file", json!({"path": "link/secret.txt"})),
            ("write_file", json!({"path": "link/new.txt", "content": "x"})),
            ("delete_file", json!({"path": "link/secret.txt"})),
        ],
    );
    for (is_error, output) in &results {
        assert!(*is_error, "{output}");
        assert!(output.contains("symbolic link that points outside the workspace"), "{output}");
    }
    assert!(elsewhere.join("secret.txt").exists());
    assert!(!elsewhere.join("new.txt").exists());
}

#[test]
fn files_inside_are_written_read_listed_and_deleted() {
    let ws = tempfile::tempdir().unwrap();
    let results = call_tools(
        ws.path(),
        &[
            ("write_file", json!({"path": "a/b.txt", "content": "hello"})),
            ("read_file", json!({"path": "a/b.txt"})),
            ("list_dir", json!({"path": "a"})),
            ("delete_file", json!({"path": "a/b.txt"})),
        ],
    );
    let outputs: Vec<&str> = results.iter().map(|(_, o)| o.as_str()).collect();
    assert_eq!(outputs, ["wrote 5 bytes to a/b.txt", "hello", "b.txt", "deleted a/b.txt"]);
    assert!(!ws.path().join("a/b.txt").exists());
}

#[test]
fn run_command_needs_approval_and_is_rejected_without_a_terminal() {
    let ws = tempfile::tempdir().unwrap();
    let results = call_tools(ws.path(), &[("run_command", json!({"command": "touch ran.txt"}))]);
    assert!(results[0].0);
    assert!(results[0].1.contains("stdin is not a terminal"), "{}", results[0].1);
    assert!(!ws.path().join("ran.txt").exists());
}

/// The example workflow's `keep-readme` rule, as a rule table.
fn keep_readme() -> Value {
    json!([{"id": "keep-readme", "guidance": "README files stay.",
            "deny_arg": {"tool": "delete_file", "arg": "path", "glob": "README*"}}])
}

#[cfg(unix)]
#[test]
fn a_path_rule_sees_the_resolved_path_so_absolute_and_symlinked_spellings_are_denied() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README.md"), "# keep\n").unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", ws.path().join("sub/link-to-root")).unwrap();
    std::os::unix::fs::symlink(ws.path(), ws.path().join("sub/absolute-link-to-root")).unwrap();
    let absolute = ws.path().join("README.md");
    let results = call_tools_with_rules(
        ws.path(),
        keep_readme(),
        &[
            ("delete_file", json!({"path": absolute.to_str().unwrap()})),
            ("delete_file", json!({"path": "sub/link-to-root/README.md"})),
            ("delete_file", json!({"path": "sub/absolute-link-to-root/README.md"})),
            ("delete_file", json!({"path": "./sub/../README.md"})),
        ],
    );
    assert_eq!(results.len(), 4);
    for (is_error, output) in &results {
        assert!(*is_error, "{output}");
        assert_eq!(output, "Steering denied: README files stay.");
    }
    assert_eq!(std::fs::read_to_string(ws.path().join("README.md")).unwrap(), "# keep\n");
}

#[test]
fn a_path_rule_denies_a_path_it_cannot_resolve_inside_the_workspace() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(outer.path().join("README.md"), "outside").unwrap();
    let results = call_tools_with_rules(&ws, keep_readme(), &[("delete_file", json!({"path": "../README.md"}))]);
    assert_eq!(results.len(), 1);
    assert!(results[0].0);
    assert_eq!(
        results[0].1,
        "Steering denied: rule 'keep-readme' cannot check this delete_file call, so it is refused: the path \
         '../README.md' is outside the workspace; use a path relative to the workspace root (no '..' climbing out \
         of it, no absolute paths elsewhere)"
    );
    assert_eq!(std::fs::read_to_string(outer.path().join("README.md")).unwrap(), "outside");
}

/// A rule denying `tools` any `.env` file.
fn no_env(tools: &[&str]) -> Value {
    tools
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            json!({"id": format!("no-env-{i}"), "guidance": "Do not touch .env files.",
                   "deny_arg": {"tool": tool, "arg": "path", "glob": "**/.env"}})
        })
        .collect()
}

/// A hard link is a second name of the same file, which may be outside the workspace: writing through it would
/// change the file outside, and reading it would show a file of unknown location.
#[cfg(unix)]
#[test]
fn a_hard_link_to_a_file_outside_is_neither_written_nor_read() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let outside = outer.path().join("outside.txt");
    std::fs::write(&outside, "outside").unwrap();
    std::fs::hard_link(&outside, ws.join("link.txt")).unwrap();
    let results = call_tools(
        &ws,
        &[
            ("write_file", json!({"path": "link.txt", "content": "overwritten"})),
            ("read_file", json!({"path": "link.txt"})),
        ],
    );
    assert_eq!(
        results[0],
        (
            true,
            "Error: 'link.txt' is a hard link (the file has 2 names, and the others may be outside the workspace), so \
             write_file does not write through it; delete_file it first, then write_file makes a new file of that \
             name"
                .to_owned()
        )
    );
    assert_eq!(
        results[1],
        (
            true,
            "Error: 'link.txt' is a hard link (the file has 2 names): the others may be outside the workspace or \
             protected by a rule, so read_file does not read it; ask the user for what you need from it (they can \
             allow reading hard links with --hard-links allow)"
                .to_owned()
        )
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside");
}

#[cfg(unix)]
#[test]
fn a_hard_link_to_env_cannot_be_read_past_the_env_rule() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join(".env"), "SECRET=1").unwrap();
    std::fs::hard_link(ws.path().join(".env"), ws.path().join("notes.txt")).unwrap();
    let results =
        call_tools_with_rules(ws.path(), no_env(&["read_file"]), &[("read_file", json!({"path": "notes.txt"}))]);
    assert!(results[0].0, "{}", results[0].1);
    assert!(results[0].1.starts_with("Error: 'notes.txt' is a hard link (the file has 2 names)"), "{}", results[0].1);
}

#[cfg(unix)]
#[test]
fn reading_hard_links_can_be_allowed_but_writing_through_them_never() {
    let outer = tempfile::tempdir().unwrap();
    let ws = outer.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let outside = outer.path().join("outside.txt");
    std::fs::write(&outside, "outside").unwrap();
    std::fs::hard_link(&outside, ws.join("link.txt")).unwrap();
    let results = call_tools_with(
        &ws,
        json!([]),
        &["--hard-links", "allow"],
        &[
            ("read_file", json!({"path": "link.txt"})),
            ("write_file", json!({"path": "link.txt", "content": "overwritten"})),
        ],
    );
    assert_eq!(results[0], (false, "outside".to_owned()));
    assert!(results[1].0 && results[1].1.contains("does not write through it"), "{}", results[1].1);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside");
}
