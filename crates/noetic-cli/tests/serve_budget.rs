//! The page `noetic serve` serves, in a real browser (#31 item 4): a session paused over its workflow's budget
//! shows which limit it reached, a message sent meanwhile queues, and raising the limit from the page runs it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::served::{Served, browser, page_test, screenshots, workflow_command};
use serde_json::json;

/// One tool call per turn; the model asks for a second one, then (after the raise) answers.
const BUDGET_WORKFLOW: &str = r#"instructions = "You look around."
model = "scripted"
tools = ["list_dir"]

[budget.turn]
tool_calls = 1

[[scripted.response]]
tool_calls = [{ id = "l1", name = "list_dir", args = { path = "." } }]

[[scripted.response]]
tool_calls = [{ id = "l2", name = "list_dir", args = { path = "." } }]

[[scripted.response]]
text = "Looked twice."
"#;

#[test]
fn a_session_paused_over_its_budget_shows_the_limit_and_the_page_raises_it_and_runs_what_queued() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (workflow, ws) = (dir.path().join("budget.toml"), dir.path().join("ws"));
    std::fs::write(&workflow, BUDGET_WORKFLOW).unwrap();
    std::fs::create_dir(&ws).unwrap();
    let served = Served::spawn(workflow_command(&workflow, &ws, &dir.path().join("noetic.db"), &[]));
    let shots = screenshots("budget");
    let seen = page_test(&browser_dir, served, "budget_page.mjs", &[&shots]);
    eprintln!("screenshots: {}", shots.display());
    assert_eq!(seen["limitName"], "turn.tool_calls");
    assert!(seen["reason"].as_str().unwrap().contains("tool_calls limit of 1 was reached (1 used)"), "{seen}");
    assert!(seen["queuedStatus"].as_str().unwrap().contains("the message was queued"), "{seen}");
    assert_eq!(seen["bannerHidden"], true);
    assert_eq!(seen["chatSays"], "Paused over its budget: ", "the conversation says paused, not failed");
    assert_eq!(seen["chatFailures"], 0);
    assert_eq!(seen["bannerFits390"], true, "the banner fits a 390 px phone");
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
}
