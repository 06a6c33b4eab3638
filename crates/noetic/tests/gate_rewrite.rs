//! Gates that rewrite a tool call's arguments (issue 35, item 3): a gating layer answers `before_tool_call` with
//! `ToolCallAction::Rewrite`; the call runs with the new arguments only after every gate has judged them, the
//! tool's schema accepts them and an approval (if any) was asked about them; each rewrite is in the session's
//! ledger (hash-chained) and reported as an event; the model's own call keeps what it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use noetic::agent::log::MemoryLogStore;
use noetic::layer::{MAX_REWRITES, MemoryLayer, Slot, ToolCallParams};
use noetic::model::{Item, ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::steering::verify::verify;
use noetic::steering::{LedgerKind, SteeringConfig, SteeringDecision, SteeringRule, steering};
use noetic::testing::EventCollector;
use serde_json::{Value, json};

/// Adds `"dry_run": true` to every `rm` call that lacks it (a layer that answers at once, or after an await).
struct DryRun {
    slot: u32,
    waits: bool,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl DryRun {
    fn decide(&self, call: ToolCallParams<'_>) -> ToolCallAction {
        self.seen.lock().unwrap().push(call.args.clone());
        if call.name != "rm" || call.args.get("dry_run") == Some(&json!(true)) {
            return ToolCallAction::Allow;
        }
        let mut args = call.args.clone();
        args["dry_run"] = json!(true);
        ToolCallAction::rewrite(args, "deletions run dry in this workspace")
    }
}

impl MemoryLayer for DryRun {
    fn id(&self) -> &str {
        "dry-run"
    }
    fn slot(&self) -> Slot {
        Slot(self.slot)
    }
    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for DryRun {
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        (!self.waits).then(|| Ok(self.decide(call)))
    }

    fn before_tool_call<'a>(
        &'a self,
        _ctx: &'a HookContext<'a>,
        call: ToolCallParams<'a>,
    ) -> BoxFuture<'a, Result<ToolCallAction, NoeticError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            Ok(self.decide(call))
        })
    }
}

/// Rewrites every call to different arguments, forever.
struct Restless(Mutex<u64>);

impl MemoryLayer for Restless {
    fn id(&self) -> &str {
        "restless"
    }
    fn as_gates(&self) -> Option<&dyn Gates> {
        Some(self)
    }
}

impl Gates for Restless {
    fn before_tool_call_now(
        &self,
        _ctx: &HookContext<'_>,
        call: ToolCallParams<'_>,
    ) -> Option<Result<ToolCallAction, NoeticError>> {
        let mut n = self.0.lock().unwrap();
        *n += 1;
        let mut args = call.args.clone();
        args["n"] = json!(*n);
        Some(Ok(ToolCallAction::rewrite(args, "one more time")))
    }
}

/// A rewriting layer at `slot` that records every arguments it is shown.
fn dry_run(slot: u32, waits: bool) -> (Arc<dyn MemoryLayer>, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    (Arc::new(DryRun { slot, waits, seen: seen.clone() }), seen)
}

/// An `rm` tool whose schema needs a path (and allows `dry_run`), keeping the arguments it ran with.
fn rm_tool(ran: &Arc<Mutex<Vec<Value>>>, approval: bool) -> Arc<dyn Tool> {
    let ran = ran.clone();
    let tool = FnTool::builder("rm", "Deletes a file.")
        .input_schema(json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "dry_run": {"type": "boolean"}},
            "required": ["path"],
            "additionalProperties": false
        }))
        .needs_approval(approval)
        .handler(move |args, _| {
            ran.lock().unwrap().push(args);
            async { Ok(json!("removed")) }
        })
        .build()
        .unwrap();
    Arc::new(tool)
}

fn model() -> ScriptedModel {
    ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "rm", json!({"path": "a.txt"}))]),
        ModelResponse::text("done"),
    ])
}

fn runtime(layers: Vec<Arc<dyn MemoryLayer>>, tool: Arc<dyn Tool>, store: &MemoryLogStore) -> Runtime {
    let mut builder = Runtime::builder().model(Arc::new(model())).tool(tool).log_store(Arc::new(store.clone()));
    for layer in layers {
        builder = builder.layer(layer);
    }
    builder.build().unwrap()
}

fn tool_results(history: &[Item]) -> Vec<String> {
    history
        .iter()
        .filter_map(|item| match item {
            Item::ToolResult(r) => Some(r.content.to_string()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_rewritten_call_runs_with_the_new_arguments_and_the_model_keeps_its_own() {
    for waits in [false, true] {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let (layer, seen) = dry_run(100, waits);
        let store = MemoryLogStore::new();
        let session = runtime(vec![layer], rm_tool(&ran, false), &store).open("s").await.unwrap();
        let mut events = EventCollector::of(&session);
        session.send("tidy").await.unwrap().await.unwrap();

        assert_eq!(*ran.lock().unwrap(), [json!({"path": "a.txt", "dry_run": true})], "waits={waits}");
        // Asked about the model's arguments, then (the round again) about the rewritten ones.
        assert_eq!(*seen.lock().unwrap(), [json!({"path": "a.txt"}), json!({"path": "a.txt", "dry_run": true})]);
        let history = session.history();
        let call = history.iter().find_map(|i| match i {
            Item::ToolCall(c) => Some(c.arguments.clone()),
            _ => None,
        });
        assert_eq!(call.as_deref(), Some(r#"{"path":"a.txt"}"#), "the model's call keeps what it wrote");
        assert_eq!(tool_results(&history), ["removed"]);

        let rewritten: Vec<_> = events
            .kinds()
            .into_iter()
            .filter_map(|k| match k {
                EventKind::ToolCallRewritten { call_id, tool, layer, arguments, reason } => {
                    Some((call_id, tool, layer, arguments, reason))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            rewritten,
            [(
                "c1".into(),
                "rm".into(),
                "dry-run".to_owned(),
                r#"{"dry_run":true,"path":"a.txt"}"#.to_owned(),
                "deletions run dry in this workspace".to_owned()
            )]
        );
    }
}

#[tokio::test]
async fn each_rewrite_is_a_chained_ledger_entry_naming_the_layer_the_arguments_and_the_reason() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (layer, _) = dry_run(100, false);
    let store = MemoryLogStore::new();
    let session = runtime(vec![layer], rm_tool(&ran, false), &store).open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();

    let ledger = session.ledger();
    let rewrites: Vec<_> = ledger.iter().filter(|e| e.rewritten_args.is_some()).collect();
    assert_eq!(rewrites.len(), 1, "{ledger:#?}");
    let entry = rewrites[0];
    assert_eq!(entry.tool_name.as_deref(), Some("rm"));
    assert_eq!(entry.tool_args, Some(json!({"path": "a.txt"})));
    assert_eq!(entry.rewritten_args, Some(json!({"path": "a.txt", "dry_run": true})));
    assert_eq!(entry.rule_id.as_deref(), Some("dry-run"));
    assert_eq!(entry.guidance.as_deref(), Some("deletions run dry in this workspace"));
    assert!(entry.sha256.is_some(), "the rewrite is sealed into the session's chain");
    let mut objects: Vec<_> =
        ledger.iter().map(|e| serde_json::to_value(e).unwrap().as_object().cloned().unwrap()).collect();
    verify("s", &mut objects, None, None).expect("the chain with the rewrite in it is intact");

    // Reopened from the log, the ledger still has it.
    let again = runtime(vec![dry_run(100, false).0], rm_tool(&ran, false), &store).open("s").await.unwrap();
    assert_eq!(again.ledger().iter().filter(|e| e.rewritten_args.is_some()).count(), 1);
}

#[tokio::test]
async fn rewritten_arguments_are_judged_by_every_gate_even_one_that_allowed_the_originals() {
    // The steering layer (slot 90) runs before the rewriting layer (slot 100) and allows the model's arguments;
    // it denies a dry run. The call must not run: the rules judge what would run. (The rewriting layer answers at
    // once, or after an await.)
    for waits in [false, true] {
        rules_judge_the_rewrite(waits).await;
    }
}

async fn rules_judge_the_rewrite(waits: bool) {
    let rule = SteeringRule::predicate("no-dry-runs", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.args.get("dry_run").is_some() => SteeringDecision::deny("dry runs hide mistakes"),
        _ => SteeringDecision::allow(),
    });
    let rules = steering(SteeringConfig::new([rule])).unwrap();
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (layer, _) = dry_run(100, waits);
    let store = MemoryLogStore::new();
    let session =
        runtime(vec![rules as Arc<dyn MemoryLayer>, layer], rm_tool(&ran, false), &store).open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();

    assert!(ran.lock().unwrap().is_empty(), "the tool did not run (waits={waits})");
    let results = tool_results(&session.history());
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("dry runs hide mistakes"), "{results:?}");
    let ledger = session.ledger();
    let denied = ledger.iter().find(|e| e.action == SteeringAction::Deny).expect("the rules' deny is ledgered");
    assert_eq!(denied.tool_args, Some(json!({"path": "a.txt", "dry_run": true})), "judged on the rewritten call");
    assert_eq!(ledger.iter().filter(|e| e.rewritten_args.is_some()).count(), 1, "and the rewrite is kept");
    // In the order it happened: the rules allowed the model's call, the layer rewrote it, the rules denied that.
    let calls: Vec<(SteeringAction, bool)> = ledger
        .iter()
        .filter(|e| e.kind == LedgerKind::ToolCall)
        .map(|e| (e.action, e.rewritten_args.is_some()))
        .collect();
    assert_eq!(
        calls,
        [(SteeringAction::Allow, false), (SteeringAction::Allow, true), (SteeringAction::Deny, false)],
        "waits={waits}: {ledger:#?}"
    );
}

#[tokio::test]
async fn a_rewrite_the_tool_schema_refuses_fails_closed() {
    struct Bad;
    impl MemoryLayer for Bad {
        fn id(&self) -> &str {
            "bad"
        }
        fn as_gates(&self) -> Option<&dyn Gates> {
            Some(self)
        }
    }
    impl Gates for Bad {
        fn before_tool_call_now(
            &self,
            _ctx: &HookContext<'_>,
            call: ToolCallParams<'_>,
        ) -> Option<Result<ToolCallAction, NoeticError>> {
            let rewrite = if call.args.get("force").is_some() {
                ToolCallAction::Allow
            } else {
                ToolCallAction::rewrite(json!({"path": "a.txt", "force": true}), "force it")
            };
            Some(Ok(rewrite))
        }
    }
    let ran = Arc::new(Mutex::new(Vec::new()));
    let store = MemoryLogStore::new();
    let session = runtime(vec![Arc::new(Bad)], rm_tool(&ran, false), &store).open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();
    assert!(ran.lock().unwrap().is_empty(), "the tool did not run");
    let results = tool_results(&session.history());
    assert!(results[0].starts_with("Error: invalid arguments for tool 'rm'"), "{results:?}");
}

#[tokio::test]
async fn gates_that_never_settle_deny_the_call_after_the_most_rewrites() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let restless = Arc::new(Restless(Mutex::new(0)));
    let store = MemoryLogStore::new();
    let session = runtime(vec![restless.clone()], rm_tool(&ran, false), &store).open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();
    assert!(ran.lock().unwrap().is_empty(), "the tool did not run");
    assert_eq!(*restless.0.lock().unwrap(), MAX_REWRITES as u64 + 1, "asked once more than the rewrites kept");
    let results = tool_results(&session.history());
    assert!(results[0].contains("without settling"), "{results:?}");
    let ledger = session.ledger();
    assert_eq!(ledger.iter().filter(|e| e.rewritten_args.is_some()).count(), MAX_REWRITES);
}

#[tokio::test]
async fn an_approval_is_asked_about_the_rewritten_arguments() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let approver = noetic::tool::FnApprover(move |request: noetic::tool::ApprovalRequest| {
        seen.lock().unwrap().push(request.arguments.clone());
        async { noetic::tool::Approval::Approve }
    });
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (layer, _) = dry_run(100, false);
    let store = MemoryLogStore::new();
    let runtime = Runtime::builder()
        .model(Arc::new(model()))
        .tool(rm_tool(&ran, true))
        .layer(layer)
        .approver(Arc::new(approver))
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    let session = runtime.open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();
    let rewritten = json!({"path": "a.txt", "dry_run": true});
    assert_eq!(*asked.lock().unwrap(), std::slice::from_ref(&rewritten));
    assert_eq!(*ran.lock().unwrap(), [rewritten]);
}

#[tokio::test]
async fn a_tool_step_runs_with_rewritten_arguments_and_refuses_ones_its_schema_does_not_accept() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (layer, _) = dry_run(100, true);
    let ctx = StepContext::builder().layers([layer]).build();
    let step: Step<Value, Value> = Step::tool("tidy", rm_tool(&ran, false)).build().unwrap();
    let out = step.execute(json!({"path": "b.txt"}), &ctx).await.unwrap();
    assert_eq!(out, json!("removed"));
    assert_eq!(*ran.lock().unwrap(), [json!({"path": "b.txt", "dry_run": true})]);

    let (layer, _) = dry_run(100, false);
    let strict = FnTool::builder("rm", "Deletes a file.")
        .input_schema(
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
        )
        .handler(|_, _| async { Ok(json!("removed")) })
        .build()
        .unwrap();
    let ctx = StepContext::builder().layers([layer]).build();
    let step: Step<Value, Value> = Step::tool("tidy", Arc::new(strict)).build().unwrap();
    let err = step.execute(json!({"path": "b.txt"}), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("rewrote the arguments into ones the tool does not accept"), "{err}");
}

#[tokio::test]
async fn a_rewrite_to_the_same_arguments_allows_and_records_nothing() {
    // A layer that "rewrites" to what it was shown allows: no event, no ledger entry, the call runs once.
    struct Same;
    impl MemoryLayer for Same {
        fn id(&self) -> &str {
            "same"
        }
        fn as_gates(&self) -> Option<&dyn Gates> {
            Some(self)
        }
    }
    impl Gates for Same {
        fn before_tool_call_now(
            &self,
            _ctx: &HookContext<'_>,
            call: ToolCallParams<'_>,
        ) -> Option<Result<ToolCallAction, NoeticError>> {
            Some(Ok(ToolCallAction::rewrite(call.args.clone(), "no change")))
        }
    }
    let ran = Arc::new(Mutex::new(Vec::new()));
    let store = MemoryLogStore::new();
    let session = runtime(vec![Arc::new(Same)], rm_tool(&ran, false), &store).open("s").await.unwrap();
    let mut events = EventCollector::of(&session);
    session.send("tidy").await.unwrap().await.unwrap();
    assert_eq!(*ran.lock().unwrap(), [json!({"path": "a.txt"})]);
    assert!(!events.types().iter().any(|t| t == "tool_call_rewritten"));
    assert!(session.ledger().iter().all(|e| e.rewritten_args.is_none()));
}

#[tokio::test]
async fn replaying_rules_leaves_a_layers_rewrite_out_of_the_decisions_to_replay() {
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (layer, _) = dry_run(100, false);
    let store = MemoryLogStore::new();
    let session = runtime(vec![layer], rm_tool(&ran, false), &store).open("s").await.unwrap();
    session.send("tidy").await.unwrap().await.unwrap();
    let ledger = session.ledger();
    let rewrite = ledger.iter().find(|e| e.rewritten_args.is_some()).expect("a rewrite entry");
    assert!(!noetic::steering::replay::Recorded::is_decision(rewrite), "no rule made it, so no rule replays it");
}
