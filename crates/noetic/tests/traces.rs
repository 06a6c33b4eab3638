//! Traces (SPEC 7.3): a turn is a tree of GenAI spans — `invoke_agent` → steps → `chat {model}` and
//! `execute_tool {name}` — with steering decisions and queue events as span events, and no content unless the
//! runtime opts in. A small in-test `tracing` layer records what a subscriber would export.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use noetic::prelude::*;
use noetic::testing::{Counter, Gate};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A recorded span: its name (`otel.name` when set), its parent's index, its fields and its events.
#[derive(Debug, Clone, Default)]
struct Recorded {
    name: String,
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
    events: Vec<(String, BTreeMap<String, String>)>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// The index of a span in the recording, kept in the span's extensions.
struct Index(usize);

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Recorded>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let span = ctx.span(id).unwrap();
        let parent = span.parent().and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let name = fields.0.get("otel.name").cloned().unwrap_or_else(|| attrs.metadata().name().to_owned());
        let mut spans = self.0.lock().unwrap();
        spans.push(Recorded { name, parent, fields: fields.0, events: Vec::new() });
        span.extensions_mut().insert(Index(spans.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let mut fields = Fields::default();
        values.record(&mut fields);
        let span = ctx.span(id).unwrap();
        let Some(i) = span.extensions().get::<Index>().map(|i| i.0) else { return };
        self.0.lock().unwrap()[i].fields.extend(fields.0);
    }

    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(span) = ctx.event_span(event) else { return };
        let Some(i) = span.extensions().get::<Index>().map(|i| i.0) else { return };
        let mut fields = Fields::default();
        event.record(&mut fields);
        let name = fields.0.remove("message").unwrap_or_default();
        self.0.lock().unwrap()[i].events.push((name, fields.0));
    }
}

impl Recorder {
    /// Installs the recorder for this thread (the tests run on one thread, spawned turns included).
    fn install() -> (Recorder, tracing::subscriber::DefaultGuard) {
        let recorder = Recorder::default();
        let subscriber = tracing_subscriber::registry().with(recorder.clone());
        (recorder.clone(), tracing::subscriber::set_default(subscriber))
    }

    fn spans(&self) -> Vec<Recorded> {
        self.0.lock().unwrap().clone()
    }

    /// The tree as indented lines of span names, children in the order they opened.
    fn tree(&self) -> Vec<String> {
        let spans = self.spans();
        let mut lines = Vec::new();
        fn walk(spans: &[Recorded], parent: Option<usize>, depth: usize, lines: &mut Vec<String>) {
            for (i, s) in spans.iter().enumerate().filter(|(_, s)| s.parent == parent) {
                lines.push(format!("{}{}", "  ".repeat(depth), s.name));
                walk(spans, Some(i), depth + 1, lines);
            }
        }
        walk(&spans, None, 0, &mut lines);
        lines
    }

    /// The spans named `name`.
    fn named(&self, name: &str) -> Vec<Recorded> {
        self.spans().into_iter().filter(|s| s.name == name).collect()
    }

    /// The one span named `name`.
    fn one(&self, name: &str) -> Recorded {
        let found = self.named(name);
        assert_eq!(found.len(), 1, "one span named {name} in {:#?}", self.tree());
        found.into_iter().next().unwrap()
    }
}

fn field<'a>(span: &'a Recorded, key: &str) -> &'a str {
    span.fields.get(key).map(String::as_str).unwrap_or_else(|| panic!("no {key} on {span:#?}"))
}

const CONTENT_KEYS: [&str; 4] =
    ["gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"];

fn content_keys(recorder: &Recorder) -> Vec<String> {
    recorder
        .spans()
        .iter()
        .flat_map(|s| s.fields.keys().filter(|k| CONTENT_KEYS.contains(&k.as_str())).cloned())
        .collect()
}

fn runtime(
    responses: Vec<ModelResponse>,
    configure: impl FnOnce(noetic::agent::RuntimeBuilder) -> noetic::agent::RuntimeBuilder,
) -> Runtime {
    let counter = Counter::new();
    let builder = Runtime::builder()
        .model(Arc::new(ScriptedModel::new(responses)))
        .tool(counter.tool("lookup", json!("found it")).unwrap())
        .tool(counter.tool("delete", json!("deleted")).unwrap());
    configure(builder).build().unwrap()
}

#[tokio::test]
async fn a_turn_is_a_tree_of_its_steps_model_calls_and_tool_calls() {
    let (recorder, _guard) = Recorder::install();
    let rt = runtime(
        vec![
            ModelResponse::tool_calls([("c1", "lookup", json!({"q": "secret words"}))]),
            ModelResponse { model: Some("gpt-4o-mini-2024-07-18".into()), ..ModelResponse::text("the answer") },
        ],
        |b| b,
    );
    let turn = rt.session("s1").send("find the secret").await.unwrap();
    assert_eq!(turn.await.unwrap(), "the answer");

    assert_eq!(
        recorder.tree(),
        [
            "invoke_agent",
            "  step loop",
            "    step llm",
            "      chat openai/gpt-4o-mini",
            "      execute_tool lookup",
            "      chat openai/gpt-4o-mini",
        ]
    );
    let turn = recorder.one("invoke_agent");
    assert_eq!(field(&turn, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(field(&turn, "gen_ai.conversation.id"), "s1");
    assert_eq!(field(&turn, "noetic.turn"), "1");
    let chats = recorder.named("chat openai/gpt-4o-mini");
    assert_eq!(field(&chats[0], "gen_ai.operation.name"), "chat");
    assert_eq!(field(&chats[0], "gen_ai.request.model"), "openai/gpt-4o-mini");
    assert_eq!(field(&chats[0], "gen_ai.response.finish_reasons"), "tool_calls");
    assert_eq!(field(&chats[1], "gen_ai.response.finish_reasons"), "stop");
    assert!(!chats[0].fields.contains_key("gen_ai.response.model"), "a response that names no model records none");
    assert_eq!(field(&chats[1], "gen_ai.response.model"), "gpt-4o-mini-2024-07-18", "the model that answered");
    assert!(chats[0].fields.contains_key("gen_ai.usage.input_tokens"));
    assert!(chats[0].fields.contains_key("gen_ai.usage.output_tokens"));
    assert!(!chats[0].fields.contains_key("gen_ai.provider.name"), "the scripted model names no provider");
    let tool = recorder.one("execute_tool lookup");
    assert_eq!(field(&tool, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(field(&tool, "gen_ai.tool.name"), "lookup");
    assert_eq!(field(&tool, "gen_ai.tool.call.id"), "c1");
    assert_eq!(field(&tool, "gen_ai.tool.type"), "function");
    assert_eq!(field(&tool, "noetic.tool.outcome"), "ok");
    assert!(!tool.fields.contains_key("otel.status_code"));
    assert_eq!(content_keys(&recorder), Vec::<String>::new(), "no content unless opted in");
}

#[tokio::test]
async fn content_is_recorded_only_when_the_runtime_opts_in() {
    let (recorder, _guard) = Recorder::install();
    let rt = runtime(
        vec![ModelResponse::tool_calls([("c1", "lookup", json!({"q": "secret words"}))]), ModelResponse::text("fine")],
        |b| b.capture_content(true),
    );
    rt.session("s1").send("find the secret").await.unwrap().await.unwrap();
    let chat = &recorder.named("chat openai/gpt-4o-mini")[0];
    assert!(field(chat, "gen_ai.input.messages").contains("find the secret"));
    assert!(field(chat, "gen_ai.output.messages").contains("secret words"));
    let tool = recorder.one("execute_tool lookup");
    assert_eq!(field(&tool, "gen_ai.tool.call.arguments"), r#"{"q":"secret words"}"#);
    assert_eq!(field(&tool, "gen_ai.tool.call.result"), "found it");
}

#[tokio::test]
async fn a_denied_tool_call_carries_the_decision_event_and_an_error_status() {
    let (recorder, _guard) = Recorder::install();
    let rule = SteeringRule::predicate("no-delete", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "delete" => SteeringDecision::deny("never delete"),
        _ => SteeringDecision::allow(),
    });
    let layer = steering(SteeringConfig::new([rule])).unwrap();
    let rt = runtime(
        vec![ModelResponse::tool_calls([("c1", "delete", json!({"path": "/etc"}))]), ModelResponse::text("ok")],
        |b| b.layer(layer),
    );
    rt.session("s1").send("clean up").await.unwrap().await.unwrap();

    let tool = recorder.one("execute_tool delete");
    assert_eq!(field(&tool, "noetic.tool.outcome"), "denied");
    assert_eq!(field(&tool, "otel.status_code"), "ERROR");
    assert_eq!(field(&tool, "error.type"), "permission_denied");
    let [(name, decision)] = tool.events.as_slice() else { panic!("one event on the tool span: {tool:#?}") };
    assert_eq!(name, "steering.decision");
    assert_eq!(decision["noetic.steering.hook"], "before_tool_call");
    assert_eq!(decision["noetic.steering.action"], "deny");
    assert_eq!(decision["noetic.steering.rule_id"], "no-delete");
    assert_eq!(decision["noetic.steering.evaluator"], "predicate");
    assert_eq!(decision["noetic.steering.guidance.length"], "never delete".len().to_string());
    assert!(decision.contains_key("noetic.steering.duration_us"));
    assert!(!decision.contains_key("noetic.steering.failure"), "no rule failed");
    assert_eq!(content_keys(&recorder), Vec::<String>::new());
}

#[tokio::test]
async fn steering_queue_events_land_on_the_turn_span_and_skipped_calls_are_marked() {
    let (recorder, _guard) = Recorder::install();
    let gate = Gate::new();
    let counter = Counter::new();
    let rt = Runtime::builder()
        .model(Arc::new(ScriptedModel::new(vec![
            ModelResponse::tool_calls([("c1", "first", json!({})), ("c2", "second", json!({}))]),
            ModelResponse::text("redirected"),
        ])))
        .tool(gate.tool("first").unwrap())
        .tool(counter.tool("second", json!("done")).unwrap())
        .build()
        .unwrap();
    let session = rt.session("s1");
    let turn = session.send("do both").await.unwrap();
    gate.started().await;
    session.steer("stop, do X").await.unwrap();
    gate.release();
    assert_eq!(turn.await.unwrap(), "redirected");

    let names: Vec<String> = recorder.one("invoke_agent").events.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, ["steering.queued", "tool.skipped", "steering.injected"]);
    let turn = recorder.one("invoke_agent");
    assert_eq!(turn.events[1].1["gen_ai.tool.call.id"], "c2");
    assert_eq!(turn.events[2].1["noetic.steering.count"], "1");
    assert_eq!(field(&recorder.one("execute_tool first"), "noetic.tool.outcome"), "ok");
    assert_eq!(field(&recorder.one("execute_tool second"), "noetic.tool.outcome"), "skipped");
}

#[tokio::test]
async fn fork_paths_are_nested_under_their_fork_step_and_failures_set_the_status() {
    let (recorder, _guard) = Recorder::install();
    let path = |id: &str, fail: bool| {
        Step::run(id, move |x: u32, _| async move { if fail { Err(NoeticError::other("path broke")) } else { Ok(x) } })
            .build()
            .unwrap()
    };
    let fork = Step::fork("both", ForkMode::All)
        .paths(vec![path("left", false), path("right", true)])
        .merge(|v: Vec<u32>, _| Ok(v.len() as u32))
        .build()
        .unwrap();
    assert!(fork.execute(1, &StepContext::new()).await.is_err());

    assert_eq!(recorder.tree(), ["step fork", "  step run", "  step run"]);
    let spans = recorder.spans();
    let ids: Vec<&str> = spans.iter().map(|s| field(s, "noetic.step.id")).collect();
    assert_eq!(ids, ["both", "left", "right"]);
    assert_eq!(field(&spans[1], "noetic.step.kind"), "run");
    assert!(!spans[1].fields.contains_key("otel.status_code"));
    assert_eq!(field(&spans[2], "otel.status_code"), "ERROR");
    assert_eq!(field(&spans[2], "error.type"), "step_failed");
    assert_eq!(field(&spans[0], "otel.status_code"), "ERROR");
    assert_eq!(field(&spans[0], "error.type"), "fork_partial");
}

#[tokio::test]
async fn an_after_model_denial_is_an_event_on_the_model_call_and_fails_the_turn_span() {
    let (recorder, _guard) = Recorder::install();
    let rule = SteeringRule::predicate("no-answers", [Hook::AfterModelCall], |_| SteeringDecision::deny("not today"));
    let layer = steering(SteeringConfig::new([rule])).unwrap();
    let rt = runtime(vec![ModelResponse::text("an answer")], |b| b.layer(layer));
    assert!(rt.session("s1").send("hi").await.unwrap().await.is_err());

    let chat = recorder.one("chat openai/gpt-4o-mini");
    let [(name, decision)] = chat.events.as_slice() else { panic!("one event on the model call: {chat:#?}") };
    assert_eq!(name, "steering.decision");
    assert_eq!(decision["noetic.steering.hook"], "after_model_call");
    assert_eq!(decision["noetic.steering.action"], "deny");
    assert_eq!(decision["noetic.steering.rule_id"], "no-answers");
    let turn = recorder.one("invoke_agent");
    assert_eq!(field(&turn, "otel.status_code"), "ERROR");
    assert_eq!(field(&turn, "error.type"), "steering_denied");
    assert!(field(&turn, "otel.status_description").contains("not today"));
}
