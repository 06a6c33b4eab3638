//! Which rules a tool call is checked by: the layer indexes rules by hook and tool name when it is built, and a
//! call runs exactly the rules about its tool — scoped ones naming it and every unscoped one — in rule order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use noetic::layer::ToolCallParams;
use noetic::prelude::*;
use noetic::steering::LedgerKind;
use serde_json::json;

/// A predicate rule that notes its id in `seen` and decides `decision`.
fn noting(id: &str, decision: SteeringDecision, seen: &Arc<Mutex<Vec<String>>>) -> SteeringRule {
    let (seen, name) = (seen.clone(), id.to_owned());
    SteeringRule::predicate(id, [Hook::BeforeToolCall], move |_| {
        seen.lock().unwrap().push(name.clone());
        decision.clone()
    })
}

/// Asks the layer about a call of `tool`; the decision and the rules that looked, in order.
async fn ask(layer: &SteeringLayer, seen: &Arc<Mutex<Vec<String>>>, tool: &str) -> (SteeringDecision, Vec<String>) {
    let args = json!({"path": "notes.txt"});
    let ctx = Context::new();
    let decision = layer
        .before_tool_call(&HookContext::from(&ctx), ToolCallParams { call_id: "c1", name: tool, args: &args })
        .await
        .unwrap()
        .decision()
        .unwrap();
    (decision, std::mem::take(&mut *seen.lock().unwrap()))
}

#[tokio::test]
async fn a_call_is_checked_by_the_rules_about_its_tool_and_every_unscoped_rule_in_rule_order() {
    let seen = Arc::default();
    let layer = steering(SteeringConfig::new([
        noting("write-only", SteeringDecision::guide("w"), &seen).for_tools(["write_file"]),
        noting("any-1", SteeringDecision::guide("a1"), &seen),
        noting("files", SteeringDecision::guide("f"), &seen).for_tools(["read_file", "write_file"]),
        noting("any-2", SteeringDecision::guide("a2"), &seen),
    ]))
    .unwrap();

    let (decision, order) = ask(&layer, &seen, "write_file").await;
    assert_eq!(order, ["write-only", "any-1", "files", "any-2"]);
    assert_eq!(decision, SteeringDecision::guide("w\na1\nf\na2"));

    let (decision, order) = ask(&layer, &seen, "read_file").await;
    assert_eq!(order, ["any-1", "files", "any-2"]);
    assert_eq!(decision, SteeringDecision::guide("a1\nf\na2"));

    let (decision, order) = ask(&layer, &seen, "list_dir").await;
    assert_eq!(order, ["any-1", "any-2"], "a tool no rule names is checked by every unscoped rule");
    assert_eq!(decision, SteeringDecision::guide("a1\na2"));
}

#[tokio::test]
async fn a_rule_for_every_tool_checks_calls_of_any_tool_and_a_deny_still_stops_later_rules() {
    let seen = Arc::default();
    let layer = steering(SteeringConfig::new([
        noting("everything", SteeringDecision::allow(), &seen),
        noting("no-shell", SteeringDecision::deny("no shell"), &seen).for_tools(["run_command"]),
        noting("after", SteeringDecision::allow(), &seen),
        noting("after-scoped", SteeringDecision::allow(), &seen).for_tools(["run_command"]),
    ]))
    .unwrap();
    for tool in ["read_file", "x", ""] {
        let (decision, order) = ask(&layer, &seen, tool).await;
        assert_eq!((decision, order), (SteeringDecision::allow(), vec!["everything".into(), "after".into()]));
    }
    let (decision, order) = ask(&layer, &seen, "run_command").await;
    assert_eq!((decision, order), (SteeringDecision::deny("no shell"), vec!["everything".into(), "no-shell".into()]));
}

#[tokio::test]
async fn a_rule_naming_an_mcp_tool_checks_only_calls_of_that_server_tool() {
    let seen = Arc::default();
    let layer = steering(SteeringConfig::new([
        // The same name twice: the rule still looks once.
        noting("no-remote-write", SteeringDecision::deny("read only"), &seen)
            .for_tools(["files__write_file", "files__write_file"]),
        noting("nothing", SteeringDecision::deny("never"), &seen).for_tools(Vec::<String>::new()),
    ]))
    .unwrap();
    let (decision, order) = ask(&layer, &seen, "files__write_file").await;
    assert_eq!((decision, order), (SteeringDecision::deny("read only"), vec!["no-remote-write".to_owned()]));
    for tool in ["write_file", "files__read_file", "other__write_file", "files__write_file2"] {
        let (decision, order) = ask(&layer, &seen, tool).await;
        assert_eq!((decision, order), (SteeringDecision::allow(), Vec::<String>::new()), "{tool}");
    }
}

#[tokio::test]
async fn every_checked_call_is_in_the_ledger_with_the_rules_that_decided() {
    let seen = Arc::default();
    let layer = steering(SteeringConfig::new([
        noting("scoped", SteeringDecision::guide("careful"), &seen).for_tools(["files__write_file"]),
        noting("any", SteeringDecision::allow(), &seen),
    ]))
    .unwrap();
    let ctx = Context::new();
    let args = json!({"path": "a"});
    for tool in ["files__write_file", "list_dir"] {
        layer
            .before_tool_call(&HookContext::from(&ctx), ToolCallParams { call_id: "c", name: tool, args: &args })
            .await
            .unwrap();
    }
    let ledger = layer.state_for(&ctx).unwrap().ledger;
    let rows: Vec<_> = ledger
        .iter()
        .map(|e| (e.kind, e.tool_name.as_deref(), e.tool_args.clone(), e.rule_id.as_deref(), e.guidance.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            (LedgerKind::ToolCall, Some("files__write_file"), Some(args.clone()), Some("scoped"), Some("careful")),
            (LedgerKind::ToolCall, Some("list_dir"), Some(args.clone()), None, None),
        ]
    );
}
