//! The page `noetic serve` serves, in a real browser, with an answer in markdown: rendered safely, on screens from
//! 360 px to wide, and a failed turn said in the conversation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::served::{Served, browser, page_test, screenshots, workflow_command};
use serde_json::{Value, json};

/// An agent whose one scripted answer is markdown carrying attacks: markup, a script, event handlers, an iframe and
/// `javascript:` links (in the text, in a table, in a code block).
const MARKDOWN_WORKFLOW: &str = r##"instructions = "You answer in markdown."
model = "scripted"
tools = ["read_file"]

[scripted]
per_conversation = true

[[scripted.response]]
text = '''
## Checks

All **three** checks passed, *nothing* to fix. See [the docs](https://example.com/docs?a=1&b=2) or <https://example.org>.

1. lint
2. unit tests
   - fast ones
   - slow ones
3. docs

| check | result |
|-------|--------|
| lint  | `ok`   |
| docs  | <b>ok</b> |

```rust
fn main() {
    println!("<script>window.__xss = 'code'</script>");
}
```

> Quoted <em>text</em>.

<img src=x onerror="window.__xss='img'"> <script>window.__xss='script'</script>
[click me](javascript:window.__xss='link') and ![pixel](https://evil.example/p.png?leak=1)
<iframe src="javascript:window.__xss='iframe'"></iframe> <a href="javascript:window.__xss='a'">raw link</a>
'''
"##;

#[test]
fn the_page_renders_markdown_without_running_what_it_carries_shows_a_failed_turn_in_the_chat_and_fits_360_px_to_wide() {
    let Some(browser_dir) = browser() else { return };
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("markdown.toml");
    std::fs::write(&workflow, MARKDOWN_WORKFLOW).unwrap();
    let served = Served::spawn(workflow_command(&workflow, dir.path(), &dir.path().join("noetic.db"), &[]));
    let shots = screenshots("markdown");
    let seen = page_test(&browser_dir, served, "markdown_page.mjs", &[&shots]);
    eprintln!("screenshots: {}", shots.display());
    a_model_s_markdown_is_rendered_and_nothing_it_carries_runs(&seen);
    a_failed_turn_says_why_in_the_conversation(&seen);
    the_layout_keeps_every_pane_and_send_reachable_from_360_px_to_wide(&seen);
    assert_eq!(seen["consoleErrors"], json!([]), "the page logged no error");
    assert_eq!(std::fs::read_dir(&shots).unwrap().count(), 8, "a screenshot per step");
}

fn a_model_s_markdown_is_rendered_and_nothing_it_carries_runs(seen: &Value) {
    let md = &seen["markdown"];
    assert_eq!(md["heading"], "Checks");
    assert_eq!((md["strong"].clone(), md["em"].clone()), (json!(["three"]), json!(["nothing"])));
    assert_eq!(md["nestedList"], 2);
    assert_eq!(md["tableCells"], json!(["lint", "ok", "docs", "<b>ok</b>"]), "markup in a cell is text");
    assert_eq!(md["code"], "fn main() {\n    println!(\"<script>window.__xss = 'code'</script>\");\n}");
    assert_eq!(seen["copied"], md["code"], "Copy puts the code on the clipboard");
    let links: Vec<&str> = md["links"].as_array().unwrap().iter().filter_map(|l| l["href"].as_str()).collect();
    assert_eq!(
        links,
        ["https://example.com/docs?a=1&b=2", "https://example.org/", "https://evil.example/p.png?leak=1"]
    );
    for link in md["links"].as_array().unwrap() {
        assert!(link["rel"].as_str().unwrap().contains("noopener"), "{link}");
    }
    let text = md["text"].as_str().unwrap();
    for shown in [
        r#"<img src=x onerror="window.__xss='img'">"#,
        "<script>window.__xss='script'</script>",
        "click me (javascript:",
    ] {
        assert!(text.contains(shown), "shown as text: {shown}");
    }
    assert_eq!(seen["attack"], json!({ "xss": null, "markup": 0, "unsafeLinks": 0 }), "no attack ran or became markup");
    assert_eq!((seen["dialogs"].clone(), seen["requestsElsewhere"].clone()), (json!(0), json!([])));
    assert_eq!(seen["chatLive"], "polite", "streamed text is announced");
    assert_eq!(seen["answerBusy"], "false", "a streamed answer is announced once it is whole");
    assert_eq!(seen["order"], json!(["user", "assistant"]));
    assert_eq!(seen["extremes"], json!([true, true, true, true, true]), "deep nesting and long runs of markers render");
}

fn a_failed_turn_says_why_in_the_conversation(seen: &Value) {
    let failure = seen["failure"].as_str().unwrap();
    assert!(failure.starts_with("The turn failed: ") && failure.contains("scripted response"), "{failure}");
    assert_eq!(seen["failureIsLast"], true);
    assert_eq!(seen["failureAfterReload"], 1, "still there when the page reads the session again");
    assert_eq!(seen["timelineFailed"], 1);
}

fn the_layout_keeps_every_pane_and_send_reachable_from_360_px_to_wide(seen: &Value) {
    assert_eq!(seen["sendVisible"], json!({ "360": true, "390": true, "420": true, "1400": true }));
    assert_eq!(seen["noSideScroll"], json!({ "360": true, "390": true, "420": true }), "nothing sticks out sideways");
    assert_eq!((seen["drawerClosedOnOpen"].clone(), seen["sideFits"].clone()), (json!(true), json!(true)));
    assert_eq!(seen["wideColumns"], json!([true, true, true]), "three panes side by side when wide");
}
