//! Renaming a session on the page `noetic serve` serves, in a real browser (#33): from the list and from the
//! session bar (keyboard only), a title carrying markup shown as text and never run, a refused title said beside
//! the field, at 1400 px and 390 px.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::served::{Served, browser, page_test, screenshots, workflow_command};
use serde_json::json;

const HELLO_WORKFLOW: &str = r#"instructions = "You greet."
model = "scripted"
tools = []

[scripted]
per_conversation = true

[[scripted.response]]
text = "Hello there."
"#;

const XSS_TITLE: &str =
    r#"<img src=x onerror="window.__xss='img'"><script>window.__xss='script'</script> **Q3** notes"#;

#[test]
fn a_session_renamed_on_the_page_shows_its_title_as_text_in_the_list_and_the_bar_at_1400_and_390_px() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("hello.toml");
    std::fs::write(&workflow, HELLO_WORKFLOW).unwrap();
    let served = Served::spawn(workflow_command(&workflow, dir.path(), &dir.path().join("noetic.db"), &[]));
    let shots = screenshots("rename");
    let seen = page_test(&browser_dir, served, "rename_page.mjs", &[&shots]);
    eprintln!("screenshots: {}", shots.display());
    assert_eq!(seen["fieldFocused"], "New title for session rename-1", "the field takes the keyboard at once");
    let markup = json!({ "list": XSS_TITLE, "listKey": "rename-1", "bar": XSS_TITLE, "elements": 0, "xss": null });
    assert_eq!(seen["afterList"], markup, "the title is text: no element made, nothing ran");
    assert!(seen["status"].as_str().unwrap().starts_with("Session rename-1 is now titled"), "{seen}");
    assert_eq!(seen["afterEscape"], markup, "Esc kept the old title");
    assert_eq!(seen["focusAfterEscape"], "rename-session", "Esc gives the focus back");
    let titled =
        json!({ "list": "Release notes", "listKey": "rename-1", "bar": "Release notes", "elements": 0, "xss": null });
    assert_eq!(seen["afterKeyboard"], titled);
    let refused = seen["refused"].as_str().unwrap();
    assert!(refused.starts_with("Not renamed:") && refused.contains("control character U+0007"), "{refused}");
    assert_eq!(seen["afterRefused"], titled, "a refused title changes nothing");
    assert_eq!(seen["phone"], titled);
    assert_eq!((seen["phoneBarFits"].clone(), seen["phoneFieldFits"].clone()), (json!(true), json!(true)));
    let refused_request = "Failed to load resource: the server responded with a status of 400 (Bad Request)";
    assert_eq!(seen["consoleErrors"], json!([refused_request]), "the page logged no error but the refused rename's");
}
