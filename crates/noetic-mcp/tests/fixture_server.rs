//! MCP tools end to end against the fixture server (`src/bin/noetic-mcp-fixture.rs`), a real rmcp server spawned
//! over stdio: the cases the reference servers cannot produce.
//!
//! These tests talk to a real process, so they run on real time: waits are on the server handle's watch channels
//! (restart, tool-list change) or, where only the server's own log can tell, on that log with a generous upper
//! bound that only decides when to give up, never whether something was fast enough.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use noetic::model::{ContentBlock, Item, ModelResponse, ScriptedModel, ToolErrorKind, ToolResult};
use noetic::prelude::*;
use noetic::testing::EventCollector;
use noetic::tool::{Approval, ApprovalRequest, FnApprover, ToolSource};
use noetic_mcp::{McpError, McpServer, McpServerConfig};
use serde_json::json;

/// Upper bound for things a real process does (start, restart, answer): only when to give up.
const GIVE_UP: Duration = Duration::from_secs(30);

struct Fixture {
    server: Arc<McpServer>,
    log: PathBuf,
    _dir: TempDir,
}

/// A directory removed at the end of the test.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(test: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("noetic-mcp-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

fn config(log: &std::path::Path) -> McpServerConfig {
    McpServerConfig::stdio("fix", env!("CARGO_BIN_EXE_noetic-mcp-fixture"))
        .env("FIXTURE_LOG", log.display().to_string())
}

async fn fixture(test: &str, adjust: impl FnOnce(McpServerConfig) -> McpServerConfig) -> Fixture {
    let dir = temp_dir(test);
    let log = dir.0.join("calls.log");
    let server = McpServer::start(adjust(config(&log))).await.unwrap();
    Fixture { server: Arc::new(server), log, _dir: dir }
}

impl Fixture {
    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Waits until the server's log holds `line`.
    async fn logged(&self, line: &str) {
        let deadline = tokio::time::Instant::now() + GIVE_UP;
        while !self.log().iter().any(|l| l == line) {
            assert!(tokio::time::Instant::now() < deadline, "the server never logged '{line}': {:?}", self.log());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn runtime(&self, model: &ScriptedModel) -> Runtime {
        Runtime::builder().model(Arc::new(model.clone())).tool_source(self.server.clone()).build().unwrap()
    }
}

fn results(items: &[Item]) -> Vec<ToolResult> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Runs one turn in which the model calls `tool` with `args`, and returns the result it got.
async fn call_once(fixture: &Fixture, tool: &str, args: serde_json::Value) -> ToolResult {
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", tool, args)]), ModelResponse::text("ok")]);
    let session = fixture.runtime(&model).session("s");
    session.send("go").await.unwrap().await.unwrap();
    results(model.requests()[1].history.as_slice()).remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_turn_calls_a_server_tool_by_its_prefixed_name_and_gets_its_result_and_structured_content() {
    let fixture = fixture("echo", |c| c).await;
    let names: Vec<String> = fixture.server.snapshot().names().map(str::to_owned).collect();
    assert_eq!(
        names,
        [
            "fix__echo",
            "fix__slow",
            "fix__crash",
            "fix__fail",
            "fix__image",
            "fix__progress",
            "fix__add_tool",
            "fix__big"
        ]
    );
    let echo = fixture.server.snapshot().get("fix__echo").cloned().unwrap();
    assert!(echo.idempotent(), "the idempotentHint annotation makes the tool idempotent");
    assert!(echo.concurrent(), "the readOnlyHint annotation makes the tool safe to run concurrently");
    let slow = fixture.server.snapshot().get("fix__slow").cloned().unwrap();
    assert!(!slow.concurrent(), "a tool without readOnlyHint runs alone");
    let result = call_once(&fixture, "fix__echo", json!({"text": "hello"})).await;
    assert_eq!(&*result.content, "hello");
    assert!(!result.is_error);
    assert_eq!(result.structured, Some(json!({"echoed": "hello"})));
    assert_eq!(fixture.log(), ["call echo"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_break_the_tool_schema_are_rejected_before_anything_is_sent() {
    let fixture = fixture("invalid", |c| c).await;
    let result = call_once(&fixture, "fix__echo", json!({"text": 5})).await;
    assert!(result.is_error);
    assert!(result.content.starts_with("Error: invalid arguments for tool 'fix__echo'"), "{}", result.content);
    // A call that is sent after it shows that nothing came before it.
    call_once(&fixture, "fix__fail", json!({})).await;
    assert_eq!(fixture.log(), ["call fail"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steering_rule_denying_an_mcp_tool_keeps_the_call_from_the_server() {
    let fixture = fixture("deny", |c| c).await;
    let rule = SteeringRule::predicate("no-echo", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "fix__echo" => SteeringDecision::deny("echo is not allowed here"),
        _ => SteeringDecision::allow(),
    });
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "fix__echo", json!({"text": "x"})), ("c2", "fix__fail", json!({}))]),
        ModelResponse::text("ok"),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool_source(fixture.server.clone())
        .layer(steering(SteeringConfig::new([rule])).unwrap())
        .build()
        .unwrap();
    runtime.session("s").send("go").await.unwrap().await.unwrap();
    let results = results(model.requests()[1].history.as_slice());
    assert_eq!(&*results[0].content, "Steering denied: echo is not allowed here");
    assert_eq!(fixture.log(), ["call fail"], "the server saw only the allowed call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_requires_approval_reaches_the_server_only_when_the_approver_says_so() {
    let fixture = fixture("approval", |c| c.require_approval(["echo"])).await;
    let approver = Arc::new(FnApprover(|request: ApprovalRequest| async move {
        if request.arguments["text"] == "rm -rf" {
            Approval::Reject { reason: "not that".into() }
        } else {
            Approval::Approve
        }
    }));
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([
            ("c1", "fix__echo", json!({"text": "rm -rf"})),
            ("c2", "fix__echo", json!({"text": "ls"})),
        ]),
        ModelResponse::text("ok"),
    ]);
    let runtime = Runtime::builder()
        .model(Arc::new(model.clone()))
        .tool_source(fixture.server.clone())
        .approver(approver)
        .build()
        .unwrap();
    runtime.session("s").send("go").await.unwrap().await.unwrap();
    let results = results(model.requests()[1].history.as_slice());
    assert_eq!(&*results[0].content, "Error: the call of 'fix__echo' was rejected: not that");
    assert_eq!(&*results[1].content, "ls");
    assert_eq!(fixture.log(), ["call echo"], "only the approved call reached the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_result_is_a_tool_error_the_model_reads_and_an_image_is_a_rich_result() {
    let fixture = fixture("rich", |c| c).await;
    let failed = call_once(&fixture, "fix__fail", json!({})).await;
    assert_eq!((failed.is_error, &*failed.content), (true, "Error: the disk is full"));
    let image = call_once(&fixture, "fix__image", json!({})).await;
    assert_eq!(&*image.content, "a red dot:\n[image image/png, 8 bytes]");
    assert_eq!(image.blocks[1], ContentBlock::image_base64("image/png", "iVBORw0KGgo="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_become_tool_progress_events_of_the_call() {
    let fixture = fixture("progress", |c| c).await;
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "fix__progress", json!({}))]),
        ModelResponse::text("ok"),
    ]);
    let session = fixture.runtime(&model).session("s");
    let mut events = EventCollector::of(&session);
    session.send("go").await.unwrap().await.unwrap();
    let progress: Vec<serde_json::Value> = events
        .kinds()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::ToolProgress { call_id, data, .. } if &*call_id == "c1" => Some(data["progress"].clone()),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [json!(1.0), json!(2.0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_ends_the_call_at_once_and_the_server_is_told() {
    let fixture = fixture("cancel", |c| c).await;
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", "fix__slow", json!({}))])]);
    let session = fixture.runtime(&model).session("s");
    let turn = session.send("go").await.unwrap();
    fixture.logged("call slow").await;
    turn.cancel();
    let outcome = tokio::time::timeout(GIVE_UP, turn).await.expect("the turn ended");
    assert!(outcome.is_err(), "a stopped turn ends with an error: {outcome:?}");
    fixture.logged("cancelled slow").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_server_timeout_ends_with_a_timeout_error_and_is_cancelled_on_the_server() {
    let fixture = fixture("timeout", |c| c.timeout(Duration::from_millis(300))).await;
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "fix__slow", json!({}))]), ModelResponse::text("ok")]);
    let session = fixture.runtime(&model).session("s");
    let mut events = EventCollector::of(&session);
    session.send("go").await.unwrap().await.unwrap();
    let result = results(model.requests()[1].history.as_slice()).remove(0);
    assert!(
        result.content.starts_with("Error: MCP server 'fix' did not answer the call of 'slow' within 0.3 s"),
        "{}",
        result.content
    );
    let kind = events.kinds().into_iter().find_map(|k| match k {
        EventKind::ToolCallCompleted { error_kind, .. } => error_kind,
        _ => None,
    });
    assert_eq!(kind, Some(ToolErrorKind::Timeout));
    fixture.logged("cancelled slow").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_fails_the_call_naming_it_and_is_restarted() {
    let fixture = fixture("crash", |c| c).await;
    let mut connections = fixture.server.watch_connections();
    let crashed = call_once(&fixture, "fix__crash", json!({})).await;
    assert!(crashed.is_error);
    assert!(crashed.content.contains("MCP server 'fix'"), "{}", crashed.content);
    tokio::time::timeout(GIVE_UP, connections.wait_for(|n| *n >= 2)).await.expect("restarted").unwrap();
    assert!(fixture.server.is_connected());
    let echoed = call_once(&fixture, "fix__echo", json!({"text": "back"})).await;
    assert_eq!(&*echoed.content, "back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_change_offers_the_new_tool_in_the_next_request_and_it_runs() {
    let fixture = fixture("changed", |c| c).await;
    let mut listings = fixture.server.watch_listings();
    assert!(fixture.server.snapshot().get("fix__late").is_none());
    call_once(&fixture, "fix__add_tool", json!({})).await;
    tokio::time::timeout(GIVE_UP, listings.wait_for(|n| *n >= 2)).await.expect("listed again").unwrap();
    let model =
        ScriptedModel::new([ModelResponse::tool_calls([("c1", "fix__late", json!({}))]), ModelResponse::text("ok")]);
    fixture.runtime(&model).session("s").send("go").await.unwrap().await.unwrap();
    assert!(model.requests()[0].tools.iter().any(|t| t.name == "fix__late"), "offered in the next request");
    assert_eq!(&*results(model.requests()[1].history.as_slice())[0].content, "late result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_fails_to_start_is_an_error_naming_the_command_and_quoting_its_stderr() {
    let dir = temp_dir("nostart");
    let config = config(&dir.0.join("log")).env("FIXTURE_FAIL_START", "boom: FIXTURE_TOKEN is not set");
    let err = McpServer::start(config).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, McpError::Start { .. }), "{err:?}");
    assert!(text.contains("MCP server 'fix' did not start (command: "), "{text}");
    assert!(text.contains("noetic-mcp-fixture"), "{text}");
    assert!(text.contains("boom: FIXTURE_TOKEN is not set"), "the stderr tail is quoted: {text}");

    let err = McpServer::start(McpServerConfig::stdio("none", "/nonexistent/mcp-server")).await.unwrap_err();
    assert!(err.to_string().contains("the command could not be run"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_result_bytes_is_cut_with_a_note_saying_how_much_there_was() {
    let default = fixture("big", |c| c).await;
    let result = call_once(&default, "fix__big", json!({"bytes": 200_000})).await;
    // The end of the text is shown on failure: the rest is megabytes of x.
    let end = |text: &str| text[text.len().saturating_sub(300)..].to_owned();
    let note = "[… truncated: the result has 200000 bytes; showing the first 65536 (max_result_bytes of MCP server \
                'fix' is 65536); ask the tool for less]";
    let expected = format!("{}\n{note}", "x".repeat(65_536));
    assert!(
        !result.is_error && *result.content == *expected,
        "64 KiB by default, like read_file: {}",
        end(&result.content)
    );

    let small = fixture("big-configured", |c| c.max_result_bytes(1_000)).await;
    let result = call_once(&small, "fix__big", json!({"bytes": 5_000})).await;
    let expected = format!("{}\n[… truncated: the result has 5000 bytes; showing the first 1000", "x".repeat(1_000));
    assert!(result.content.starts_with(&expected), "{}", end(&result.content));
    let whole = call_once(&small, "fix__big", json!({"bytes": 1_000})).await;
    assert!(*whole.content == "x".repeat(1_000), "within the limit: whole, without a note: {}", end(&whole.content));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_16_mib_fails_its_call_at_once_naming_the_size_and_the_limit() {
    // A timeout the call must not wait for: the answer is known to be lost as soon as it has been read.
    let fixture = fixture("huge", |c| c.timeout(Duration::from_secs(600))).await;
    let bytes = 17 * 1024 * 1024;
    let call = call_once(&fixture, "fix__big", json!({"bytes": bytes}));
    let result = tokio::time::timeout(GIVE_UP * 4, call).await.expect("the call ended without waiting out 600 s");
    assert!(result.is_error);
    assert!(
        result.content.starts_with(
            "Error: MCP server 'fix' could not deliver its answer to the call of 'big': the server \
                                    answered with a message of "
        ) && result.content.contains("bytes, more than the 16777216 bytes (16 MiB) a message may have"),
        "{}",
        result.content
    );
    let echoed = call_once(&fixture, "fix__echo", json!({"text": "still there"})).await;
    assert_eq!(echoed.content, "still there".into(), "the connection goes on");
}
