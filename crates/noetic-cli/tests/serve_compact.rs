//! A compaction on the page `noetic serve` serves, in a real browser (#33): the timeline says how much was folded,
//! live, after a reload, and after the server restarted (from the session log).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;

use common::served::{Served, browser, page_test, screenshots, workflow_command};
use serde_json::json;

/// Two answers, then the summary the compaction asks for (one script for the whole process).
const COMPACT_WORKFLOW: &str = r#"instructions = "You answer."
model = "scripted"
tools = []

[[scripted.response]]
text = "First answer."

[[scripted.response]]
text = "Second answer."

[[scripted.response]]
text = "The user said first; the agent answered."
"#;

#[test]
fn a_compaction_shows_in_the_timeline_live_after_a_reload_and_after_a_restart() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("compact.toml");
    std::fs::write(&workflow, COMPACT_WORKFLOW).unwrap();
    let db = dir.path().join("noetic.db");
    let shots = screenshots("compact");
    let serve = || Served::spawn(workflow_command(&workflow, dir.path(), &db, &[]));
    let seen = page_test(&browser_dir, serve(), "compact_page.mjs", &[&shots, Path::new("compact")]);
    eprintln!("screenshots: {}", shots.display());
    assert_eq!(
        (seen["compacted"]["folded"].clone(), seen["compacted"]["upto"].clone()),
        (json!(2), json!(2)),
        "{seen}"
    );
    let live = seen["live"].as_str().unwrap();
    assert!(live.contains("context compacted") && live.contains("2 earlier item(s) replaced by a summary"), "{live}");
    assert!(live.contains(" tokens · the conversation keeps them"), "live, the tokens are known: {live}");
    assert_eq!(seen["afterReload"], seen["live"], "the same line after a reload");
    assert_eq!(seen["chatAfterReload"], 2, "the conversation keeps every answer");
    assert_eq!(seen["consoleErrors"], json!([]));

    let seen = page_test(&browser_dir, serve(), "compact_page.mjs", &[&shots, Path::new("restarted")]);
    let restarted = seen["afterRestart"].as_str().unwrap();
    assert!(restarted.contains("2 earlier item(s) replaced by a summary · the conversation keeps them"), "{restarted}");
    // Events of the first run that the log does not keep are gone: the page says so in words, not in log positions.
    let gaps = seen["gaps"].as_array().unwrap();
    assert!(!gaps.is_empty(), "the restarted server kept no events of the first run, and the page says so");
    for gap in gaps {
        let gap = gap.as_str().unwrap();
        assert!(
            gap.starts_with("Some earlier events (streamed text, progress) are no longer kept by the server"),
            "{gap}"
        );
        assert!(!gap.chars().any(|c| c.is_ascii_digit()), "no positions in the text: {gap}");
    }
    assert_eq!(seen["consoleErrors"], json!([]));
}
