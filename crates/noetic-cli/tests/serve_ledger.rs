//! The page `noetic serve` serves, in a real browser: the ledger table marks a shadow rule's rows and counts where
//! they disagree with the live decision (issue 31, item 2).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::served::{Served, browser, page_test, screenshots, workflow_command};
use serde_json::{Value, json};

/// A live rule keeps README files; a shadow rule under trial would refuse every delete.
const SHADOW_WORKFLOW: &str = r#"instructions = "You tidy the workspace."
model = "scripted"
tools = ["delete_file"]

[[rule]]
id = "keep-readme"
deny_arg = { tool = "delete_file", arg = "path", glob = "README*" }
guidance = "README files stay."

[[rule]]
id = "no-deletes"
mode = "shadow"
deny_tool = "delete_file"
guidance = "Trial: keep everything."

[[scripted.response]]
tool_calls = [
  { id = "d1", name = "delete_file", args = { path = "README.md" } },
  { id = "d2", name = "delete_file", args = { path = "scratch.txt" } },
]

[[scripted.response]]
text = "Tidied."
"#;

#[test]
fn the_ledger_table_marks_shadow_rows_beside_the_live_ones_and_counts_the_disagreements() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (workflow, ws) = (dir.path().join("shadow.toml"), dir.path().join("ws"));
    std::fs::write(&workflow, SHADOW_WORKFLOW).unwrap();
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# project\n").unwrap();
    std::fs::write(ws.join("scratch.txt"), "junk\n").unwrap();
    let served = Served::spawn(workflow_command(&workflow, &ws, &dir.path().join("noetic.db"), &[]));
    let shots = screenshots("ledger");
    let seen = page_test(&browser_dir, served, "ledger_page.mjs", &[&shots]);
    eprintln!("screenshots: {}", shots.display());
    let rows: Vec<(Value, Value, Value, Value)> = seen["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["subject"].as_str().is_some_and(|s| s.starts_with("delete_file")))
        .map(|r| (r["classes"].clone(), r["decision"].clone(), r["rule"].clone(), r["shadowNote"].clone()))
        .collect();
    assert_eq!(
        rows,
        [
            (json!([]), json!("deny"), json!("keep-readme"), Value::Null),
            (json!(["shadow"]), json!("deny"), json!("no-deletes"), json!("shadow rule, not enforced · live: deny")),
            (json!(["quiet"]), json!("allow"), json!("no rule objected"), Value::Null),
            (
                json!(["disagrees", "shadow"]),
                json!("deny"),
                json!("no-deletes"),
                json!("shadow rule, not enforced · live: allow · differs")
            ),
        ]
    );
    assert_eq!(seen["summary"], "Shadow rules: 2 decision(s), 1 disagree(s) with the live decision.");
    assert_eq!(seen["phoneRowsFit"], true, "on a 390 px phone each row and its rule fit the width");
    assert_eq!(seen["summaryVisible"], true);
    assert!(seen["marked"].as_str().is_some_and(|s| s.contains("inset")), "{}", seen["marked"]);
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
    assert!(!ws.join("scratch.txt").exists(), "the shadow rule's deny was not enforced");
}
