//! The steering ledger as read back: whatever form the layer keeps its entries in, each reads as the same
//! `LedgerEntry`, serialised as session logs, stores, pages and the HTTP API already hold it — a bare allow (the
//! usual gate) and a deny that records everything a gate can, and a saved ledger that loads back the same.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod steering_common;

use std::time::{Duration, SystemTime};

use noetic::layer::{ModelCallParams, Persistence, ScopeKey, ToolCallParams};
use noetic::prelude::*;
use noetic::steering::LedgerEntry;
use serde_json::{Value, json};

use steering_common::deny_rm_and_panic_on_boom as rules;

async fn before<'c>(layer: &SteeringLayer, ctx: impl Into<HookContext<'c>>, name: &str, args: Value) {
    layer.before_tool_call(&ctx.into(), ToolCallParams { call_id: "c1", name, args: &args }).await.unwrap();
}

/// An entry's JSON with its timestamp and duration fixed (they differ from run to run).
fn pinned(mut entry: LedgerEntry) -> String {
    entry.timestamp = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    entry.duration = Duration::from_micros(3);
    serde_json::to_string(&entry).unwrap()
}

#[tokio::test]
async fn ledger_entries_read_back_serialise_exactly_as_before() {
    let mut config = SteeringConfig::new(rules());
    config.scope = Scope::Thread;
    config.max_ledger_entries = 3;
    let layer = steering(config).unwrap();
    let ctx = Context::builder().thread_id("t1").build();
    // Five entries in a ledger of three: the last three are kept, two of them made in the place of older ones.
    before(&layer, &ctx, "ls", json!({"path": "/tmp"})).await;
    before(&layer, &ctx, "rm", json!({})).await;
    before(&layer, &ctx, "ls", json!({"path": "/", "all": true})).await;
    let response = ModelResponse::text("done");
    layer
        .after_model_call(&HookContext::from(&ctx), ModelCallParams { step_id: "s", model: "m", response: &response })
        .await
        .unwrap();
    before(&layer, &ctx, "rm", json!({"path": "/"})).await;

    let ledger = layer.state_for(&ctx).unwrap().ledger;
    let json: Vec<String> = ledger.iter().cloned().map(pinned).collect();
    assert_eq!(
        json,
        [
            r#"{"kind":"tool_call","timestamp":"2023-11-14T22:13:20.000Z","tool_name":"ls","tool_args":{"all":true,"path":"/"},"usage":null,"action":"allow","guidance":null,"rule_id":null,"evaluator":null,"failures":[],"duration":{"secs":0,"nanos":3000},"outcome":null}"#,
            r#"{"kind":"model_turn","timestamp":"2023-11-14T22:13:20.000Z","tool_name":null,"tool_args":null,"usage":{"input_tokens":0,"output_tokens":0,"cached_tokens":0},"action":"allow","guidance":null,"rule_id":null,"evaluator":null,"failures":[],"duration":{"secs":0,"nanos":3000},"outcome":null}"#,
            r#"{"kind":"tool_call","timestamp":"2023-11-14T22:13:20.000Z","tool_name":"rm","tool_args":{"path":"/"},"usage":null,"action":"deny","guidance":"never rm","rule_id":"no-rm","evaluator":"predicate","failures":[],"duration":{"secs":0,"nanos":3000},"outcome":null}"#,
        ]
    );

    // A saved ledger loads back into a new layer as the same entries (as stored: timestamps to the millisecond).
    let key = ScopeKey::Thread("t1".into());
    let saved = layer.save_state(&key).unwrap();
    let restored =
        steering(SteeringConfig { max_ledger_entries: 3, scope: Scope::Thread, ..SteeringConfig::new(rules()) })
            .unwrap();
    restored.load_state(&key, saved).unwrap();
    let as_json = |entries: Vec<LedgerEntry>| serde_json::to_value(entries).unwrap();
    assert_eq!(as_json(restored.state_for(&ctx).unwrap().ledger), as_json(ledger));
}

#[tokio::test]
async fn a_failing_rule_s_entry_reads_back_with_its_failure() {
    let layer = steering(SteeringConfig::new(rules())).unwrap();
    let ctx = Context::new();
    before(&layer, &ctx, "boom", json!({"n": 1})).await;
    let [entry] = layer.state_for(&ctx).unwrap().ledger.try_into().unwrap();
    let json: Value = serde_json::from_str(&pinned(entry)).unwrap();
    assert_eq!((json["action"].clone(), json["rule_id"].clone()), (json!("deny"), json!("fragile")));
    assert_eq!(json["failures"][0]["cause"]["cause"], json!("predicate_panicked"));
}
