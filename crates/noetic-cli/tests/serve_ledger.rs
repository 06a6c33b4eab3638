//! The page `noetic serve` serves, in a real browser: the ledger table marks a shadow rule's rows and counts where
//! they disagree with the live decision (issue 31, item 2); a rewrite rule's rewrite shows in the timeline and the
//! ledger with the arguments before and after (issue 35, item 3).
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

/// A rewrite rule redacts keys from what is written; the model's text carries markup that must stay text.
const REWRITE_WORKFLOW: &str = r#"instructions = "You keep settings."
model = "scripted"
tools = ["write_file"]

[[rule]]
id = "redact-keys"
rewrite_arg = { tool = "write_file", arg = "content", regex = '(?m)^(API_KEY=).*$', replace = "${1}<redacted>" }
guidance = "Keys are not written to files."

[[scripted.response]]
tool_calls = [
  { id = "w1", name = "write_file", args = { path = "settings.env", content = "API_KEY=sk-live-123\nNOTE=<img src=x onerror=alert(1)>\n" } },
]

[[scripted.response]]
text = "Saved."
"#;

#[test]
fn a_rewrite_shows_in_the_timeline_and_as_a_rewrite_row_with_the_arguments_before_and_after() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (workflow, ws) = (dir.path().join("rewrite.toml"), dir.path().join("ws"));
    std::fs::write(&workflow, REWRITE_WORKFLOW).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let served = Served::spawn(workflow_command(&workflow, &ws, &dir.path().join("noetic.db"), &[]));
    let shots = screenshots("rewrite");
    let seen = page_test(&browser_dir, served, "rewrite_page.mjs", &[&shots]);
    eprintln!("screenshots: {}", shots.display());
    assert_eq!(seen["chat"]["summary"], "settings.env");
    assert_eq!(seen["chat"]["note"], "arguments rewritten by rule:redact-keys: Keys are not written to files.");
    let runs = seen["chat"]["runs"].as_str().unwrap();
    assert!(runs.contains("API_KEY=<redacted>") && !runs.contains("sk-live-123"), "{runs}");
    assert!(seen["chat"]["status"].as_str().unwrap().starts_with("done"), "{}", seen["chat"]["status"]);
    assert_eq!(seen["timeline"]["kind"], "arguments rewritten");
    let timeline = seen["timeline"]["text"].as_str().unwrap();
    assert!(timeline.contains("write_file (w1) · rule:redact-keys"), "{timeline}");
    assert!(timeline.contains("Keys are not written to files."), "{timeline}");
    assert!(timeline.contains("API_KEY=<redacted>") && !timeline.contains("sk-live-123"), "{timeline}");
    let row = &seen["rewrite"];
    assert_eq!(row["pill"], "rewrite");
    assert_eq!(row["rule"], "rule:redact-keys");
    assert_eq!(row["guidance"], "Keys are not written to files.");
    let subjects: Vec<&str> = row["subjects"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert_eq!(subjects[0], "write_file settings.env", "the call, as the model wrote it");
    assert_eq!(
        subjects[1], "→ content: API_KEY=<redacted> NOTE=<img src=x onerror=alert(1)> ",
        "what the rewrite changed"
    );
    assert_eq!(seen["injected"], 0, "the model's markup stayed text");
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
    assert_eq!(
        std::fs::read_to_string(ws.join("settings.env")).unwrap(),
        "API_KEY=<redacted>\nNOTE=<img src=x onerror=alert(1)>\n"
    );
}
