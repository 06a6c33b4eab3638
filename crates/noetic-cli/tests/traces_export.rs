//! `noetic run` exports its turn over OTLP/HTTP: a receiver built on the official protobuf definitions
//! (`opentelemetry-proto`) decodes what the command sent and the test checks the span tree — names, parent links,
//! GenAI attributes, steering decisions and queue events as span events, and no content unless opted in.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(unix)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Driven, noetic};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// An OTLP/HTTP receiver: accepts `POST /v1/traces` with a protobuf body and answers as a collector does.
async fn receiver() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .and(header("content-type", "application/x-protobuf"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "application/x-protobuf")
                .set_body_bytes(ExportTraceServiceResponse::default().encode_to_vec()),
        )
        .mount(&server)
        .await;
    server
}

/// One exported span, flattened: attribute and event values as text.
#[derive(Debug, Clone)]
struct Span {
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
    attributes: BTreeMap<String, String>,
    events: Vec<(String, BTreeMap<String, String>)>,
    error: bool,
    service: String,
    start: u64,
    end: u64,
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

/// Every span the receiver decoded, in the order the requests came.
async fn received(server: &MockServer) -> Vec<Span> {
    let mut spans = Vec::new();
    for request in server.received_requests().await.unwrap() {
        let export = ExportTraceServiceRequest::decode(request.body.as_slice()).unwrap();
        for resource in export.resource_spans {
            let resource_attrs = resource.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
            for scope in resource.scope_spans {
                for s in scope.spans {
                    spans.push(Span {
                        id: s.span_id,
                        parent: s.parent_span_id,
                        name: s.name,
                        attributes: attributes(&s.attributes),
                        events: s.events.iter().map(|e| (e.name.clone(), attributes(&e.attributes))).collect(),
                        error: s.status.is_some_and(|st| st.code == StatusCode::Error as i32),
                        service: resource_attrs.get("service.name").cloned().unwrap_or_default(),
                        start: s.start_time_unix_nano,
                        end: s.end_time_unix_nano,
                    });
                }
            }
        }
    }
    spans
}

/// The tree as indented names, children ordered by name (export order is end order, not start order).
fn tree(spans: &[Span]) -> Vec<String> {
    fn walk(spans: &[Span], parent: &[u8], depth: usize, lines: &mut Vec<String>) {
        let mut children: Vec<&Span> = spans.iter().filter(|s| s.parent == parent).collect();
        children.sort_by(|a, b| a.name.cmp(&b.name));
        for s in children {
            lines.push(format!("{}{}", "  ".repeat(depth), s.name));
            walk(spans, &s.id, depth + 1, lines);
        }
    }
    let mut lines = Vec::new();
    walk(spans, &[], 0, &mut lines);
    lines
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one span named {name:?} in {:#?}", tree(spans));
    found[0]
}

const WORKFLOW: &str = r#"
instructions = "Tidy the workspace."
model = "scripted"
tools = ["delete_file", "run_command", "list_dir"]

[[rule]]
id = "keep-readme"
deny_arg = { tool = "delete_file", arg = "path", glob = "README*" }
guidance = "README files stay."

[[rule]]
id = "ask-before-commands"
require_approval = "run_command"

[[scripted.response]]
tool_calls = [
  { id = "d1", name = "delete_file", args = { path = "README.md" } },
  { id = "r1", name = "run_command", args = { command = "echo secret-argument" } },
  { id = "l1", name = "list_dir", args = { path = "." } },
]

[[scripted.response]]
text = "Stopped, as you asked."
"#;

/// Runs the workflow on a terminal; the line typed at the approval question of `run_command` is not an answer,
/// so it is steered into the turn (the call is rejected and the rest of the batch skipped).
fn run_turn(receiver: &str, ws: &Path, extra: &[&str]) -> common::Output {
    std::fs::write(ws.join("README.md"), "# keep\n").unwrap();
    std::fs::write(ws.join("flow.toml"), WORKFLOW).unwrap();
    let mut cmd = noetic();
    cmd.arg("run")
        .arg(ws.join("flow.toml"))
        .args(["--prompt", "Tidy up", "--plain", "--workspace"])
        .arg(ws)
        .args(extra)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver)
        .env("OTEL_SERVICE_NAME", "trace-test-agent");
    let mut driven = Driven::spawn_on_terminal(cmd);
    // Typed ahead: only the approval question reads the terminal. The terminal stays open until the answer is
    // printed (a closed terminal is no terminal, and nobody would be asked).
    driven.send("Stop after this and do not list anything.");
    driven.wait_for("Stopped, as you asked.");
    driven.finish()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_exports_its_turn_as_a_tree_with_the_denial_and_the_steered_batch() {
    let server = receiver().await;
    let ws = tempfile::tempdir().unwrap();
    let uri = server.uri();
    let ws_path = ws.path().to_owned();
    let out = tokio::task::spawn_blocking(move || run_turn(&uri, &ws_path, &[])).await.unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("steer message queued"), "the typed line was steered: {}", out.stderr);

    let spans = received(&server).await;
    assert_eq!(
        tree(&spans),
        [
            "invoke_agent",
            "  step loop",
            "    step llm",
            "      chat scripted",
            "      chat scripted",
            "      execute_tool delete_file",
            "      execute_tool list_dir",
            "      execute_tool run_command",
        ]
    );
    assert!(spans.iter().all(|s| s.service == "trace-test-agent"));

    let turn = one(&spans, "invoke_agent");
    assert_eq!(turn.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn.attributes["gen_ai.conversation.id"], "run");
    assert_eq!(turn.attributes["noetic.turn"], "1");
    let queue: Vec<&str> = turn.events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(queue, ["steering.queued", "tool.skipped", "steering.injected"]);
    assert_eq!(turn.events[1].1["gen_ai.tool.call.id"], "l1");
    assert_eq!(turn.events[2].1["noetic.steering.count"], "1");

    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat scripted").collect();
    for chat in &chats {
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.request.model"], "scripted");
        assert!(chat.attributes.contains_key("gen_ai.usage.input_tokens"));
        assert!(chat.attributes.contains_key("gen_ai.usage.output_tokens"));
    }
    let mut rounds: Vec<&str> = chats.iter().map(|c| c.attributes["noetic.round"].as_str()).collect();
    rounds.sort();
    assert_eq!(rounds, ["0", "1"]);
    // The workflow's scripted model reports every answer as a natural stop.
    assert!(chats.iter().all(|c| c.attributes["gen_ai.response.finish_reasons"] == "stop"));

    let first = chats.iter().find(|c| c.attributes["noetic.round"] == "0").unwrap();
    let denied = one(&spans, "execute_tool delete_file");
    assert!(first.end <= denied.start, "a model call's span ends with its review, before the tools run");
    assert_eq!(denied.attributes["gen_ai.tool.name"], "delete_file");
    assert_eq!(denied.attributes["gen_ai.tool.call.id"], "d1");
    assert_eq!(denied.attributes["gen_ai.tool.type"], "function");
    assert_eq!(denied.attributes["noetic.tool.outcome"], "denied");
    assert_eq!(denied.attributes["error.type"], "permission_denied");
    assert!(denied.error, "a denied call has the error status");
    let [(event, decision)] = denied.events.as_slice() else { panic!("one decision event: {denied:#?}") };
    assert_eq!(event, "steering.decision");
    assert_eq!(decision["noetic.steering.action"], "deny");
    assert_eq!(decision["noetic.steering.rule_id"], "keep-readme");
    assert_eq!(decision["noetic.steering.evaluator"], "predicate");
    assert_eq!(decision["noetic.steering.guidance.length"], "README files stay.".len().to_string());

    let rejected = one(&spans, "execute_tool run_command");
    assert_eq!(rejected.attributes["noetic.tool.outcome"], "denied", "the approval was not given");
    assert_eq!(rejected.events[0].1["noetic.steering.action"], "allow", "no rule stopped it");
    let skipped = one(&spans, "execute_tool list_dir");
    assert_eq!(skipped.attributes["noetic.tool.outcome"], "skipped");
    assert!(!skipped.error);

    let content =
        ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"];
    let leaked: Vec<(&str, &str)> = spans
        .iter()
        .flat_map(|s| {
            s.attributes.keys().filter(|k| content.contains(&k.as_str())).map(|k| (s.name.as_str(), k.as_str()))
        })
        .collect();
    assert_eq!(leaked, Vec::<(&str, &str)>::new(), "no content unless opted in");
    assert!(!format!("{spans:?}").contains("secret-argument"), "arguments never leak into other attributes");
}

#[tokio::test(flavor = "multi_thread")]
async fn capture_content_exports_prompts_responses_and_tool_arguments() {
    let server = receiver().await;
    let ws = tempfile::tempdir().unwrap();
    let uri = server.uri();
    let ws_path = ws.path().to_owned();
    let out = tokio::task::spawn_blocking(move || run_turn(&uri, &ws_path, &["--capture-content"])).await.unwrap();
    assert!(out.status.success(), "stderr: {}", out.stderr);
    let spans = received(&server).await;
    let first = spans.iter().find(|s| s.name == "chat scripted" && s.attributes["noetic.round"] == "0").unwrap();
    assert!(first.attributes["gen_ai.input.messages"].contains("Tidy up"));
    assert!(first.attributes["gen_ai.output.messages"].contains("secret-argument"));
    let command = one(&spans, "execute_tool run_command");
    assert_eq!(command.attributes["gen_ai.tool.call.arguments"], r#"{"command":"echo secret-argument"}"#);
    assert!(command.attributes.contains_key("gen_ai.tool.call.result"));
}
