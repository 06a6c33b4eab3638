//! What the page reads to show a session as it is: which turns run, the time left on an approval and what the call
//! would change, a failed turn's error as a sentence, and deleting a session.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use noetic::agent::Runtime;
use noetic::model::ModelResponse;
use noetic::testing::{ScriptedModel, gated_tool};
use noetic::tool::{FnTool, Tool};
use noetic_server::{Approvals, ServerConfig};
use serde_json::{Value, json};
use support::Running;

const LONG: Duration = Duration::from_secs(300);

fn line<'a>(list: &'a Value, key: &str) -> &'a Value {
    list["sessions"].as_array().unwrap().iter().find(|s| s["key"] == key).unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_list_shows_a_running_turn_as_running_not_as_unfinished() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("built")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model)).tool(tool), ServerConfig::default(), LONG).await;
    s.say("r1", "build it").await;
    gate.started().await;
    let (_, list) = s.get("/api/sessions").await;
    assert_eq!(
        (line(&list, "r1")["running"].clone(), line(&list, "r1")["unfinished"].clone()),
        (json!(true), json!(false))
    );
    gate.release();
    s.server.runtime().session("r1").idle().await;
    let (_, list) = s.get("/api/sessions").await;
    assert_eq!(
        (line(&list, "r1")["running"].clone(), line(&list, "r1")["unfinished"].clone()),
        (json!(false), json!(false))
    );
}

fn approval_tool() -> Arc<dyn Tool> {
    let tool = FnTool::builder("delete", "Deletes a file (needs approval).")
        .needs_approval(true)
        .handler(|_, _| async { Ok(json!("deleted")) })
        .build()
        .unwrap();
    Arc::new(tool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_says_how_long_is_left_and_what_the_call_would_change() {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "delete", json!({ "path": "notes.txt" }))]),
        ModelResponse::text("kept it"),
    ]);
    let approvals = Approvals::new(LONG).with_preview(Arc::new(|request| {
        Some(format!("removes {}", request.arguments["path"].as_str().unwrap_or("?")))
    }));
    let builder = Runtime::builder().model(Arc::new(model)).tool(approval_tool());
    let s = Running::start_with(builder, ServerConfig::default(), approvals).await;
    let mut events = s.events("a1", 0, false).await;
    s.say("a1", "tidy up").await;
    events.until("approval_requested").await;
    let (_, listed) = s.get("/api/approvals?session=a1").await;
    let pending = &listed["approvals"][0];
    assert_eq!(pending["preview"], "removes notes.txt");
    let left = pending["expires_in_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 300_000, "the time left, by the server's clock: {left}");
    let (_, session) = s.get("/api/sessions/a1").await;
    assert_eq!(session["pending_approvals"][0]["preview"], "removes notes.txt");
    assert!(session["pending_approvals"][0]["expires_in_ms"].is_u64());
    s.post("/api/approvals/c1", json!({ "approve": false })).await;
    events.until("turn_completed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_event_says_what_went_wrong_in_one_sentence() {
    let s =
        Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), ServerConfig::default(), LONG).await;
    let mut events = s.events("e1", 0, false).await;
    s.say("e1", "hello").await;
    let seen = events.until("turn_failed").await;
    let failed = &seen.last().unwrap().data;
    let text = failed["error_text"].as_str().unwrap_or_default();
    assert!(!text.is_empty() && !text.starts_with('{'), "a sentence, not JSON: {failed}");
    assert!(failed["error"].is_object(), "the error's fields stay: {failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_removes_an_idle_session_and_refuses_a_running_one() {
    let (tool, gate) = gated_tool("build").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "build", json!({}))]), ModelResponse::text("built")]);
    let s = Running::start(Runtime::builder().model(Arc::new(model)).tool(tool), ServerConfig::default(), LONG).await;
    s.say("d1", "build it").await;
    gate.started().await;
    let (status, refused) = s.delete("/api/sessions/d1").await;
    assert_eq!((status, refused["error"]["code"].clone()), (409, json!("busy")), "{refused}");
    gate.release();
    s.server.runtime().session("d1").idle().await;
    let (_, list) = s.get("/api/sessions").await;
    assert_eq!(line(&list, "d1")["turns"], 1, "kept until deleted");

    let (status, deleted) = s.delete("/api/sessions/d1").await;
    assert_eq!((status, deleted), (200, json!({ "deleted": "d1" })));
    let (_, list) = s.get("/api/sessions").await;
    assert!(line(&list, "d1").is_null(), "gone from the store: {list}");
    let (_, session) = s.get("/api/sessions/d1").await;
    assert_eq!((session["turns"].clone(), session["history"].clone()), (json!(0), json!([])), "and from memory");
    let (status, missing) = s.delete("/api/sessions/nobody").await;
    assert_eq!((status, missing["error"]["code"].clone()), (404, json!("no_such_session")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_events_were_followed_is_deleted_from_the_store_and_from_memory() {
    let s = Running::start(
        Runtime::builder().model(Arc::new(ScriptedModel::new([ModelResponse::text("hi")]))),
        ServerConfig::default(),
        LONG,
    )
    .await;
    let mut events = s.events("f1", 0, false).await;
    s.say("f1", "hello").await;
    events.until("turn_completed").await;
    drop(events);
    let (status, deleted) = s.delete("/api/sessions/f1").await;
    assert_eq!((status, deleted), (200, json!({ "deleted": "f1" })));
    let (_, session) = s.get("/api/sessions/f1").await;
    assert_eq!(session["history"], json!([]), "gone from memory too: {session}");
    let (_, list) = s.get("/api/sessions").await;
    assert!(line(&list, "f1").is_null(), "gone from the store: {list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_without_the_page_mark_or_json_is_refused() {
    let s =
        Running::start(Runtime::builder().model(Arc::new(ScriptedModel::new([]))), ServerConfig::default(), LONG).await;
    let plain = s.client.delete(s.url("/api/sessions/x1")).send().await.unwrap();
    assert_eq!(plain.status().as_u16(), 415, "a page on another site could send this one");
}
