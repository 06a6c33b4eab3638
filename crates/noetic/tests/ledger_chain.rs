//! The tamper-evident ledger (issue 31, item 3): a session's ledger entries are hash-chained in its log, in log
//! order, across runtimes; with a ledger key each turn's last entry is signed; `verify` names the first entry that
//! was edited, removed, reordered, inserted or cut off.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::log::MemoryLogStore;
use noetic::model::{ModelResponse, ScriptedModel};
use noetic::prelude::*;
use noetic::steering::chain::SigningKey;
use noetic::steering::verify::{Tamper, verify};
use noetic::steering::{LedgerEntry, SteeringConfig, SteeringDecision, SteeringRule, steering};
use serde_json::{Map, Value, json};

fn tool(name: &str) -> Arc<dyn Tool> {
    Arc::new(FnTool::builder(name, "Does a thing.").handler(|_, _| async { Ok(json!("done")) }).build().unwrap())
}

/// Rules that allow `read`, deny `rm` and guide `write`.
fn rules() -> Arc<SteeringLayer> {
    let rule = SteeringRule::predicate("house", [Hook::BeforeToolCall], |p| match p.tool_call() {
        Some(c) if c.name == "rm" => SteeringDecision::deny("never delete"),
        Some(c) if c.name == "write" => SteeringDecision::guide("keep it short"),
        _ => SteeringDecision::allow(),
    });
    steering(SteeringConfig::new([rule])).unwrap()
}

fn runtime(store: &MemoryLogStore, key: Option<SigningKey>) -> Runtime {
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "read", json!({})), ("c2", "rm", json!({"path": "x"}))]),
        ModelResponse::tool_calls([("c3", "write", json!({"text": "hi"}))]),
        ModelResponse::text("done"),
    ]);
    let mut builder = Runtime::builder()
        .model(Arc::new(model))
        .tools([tool("read"), tool("rm"), tool("write")])
        .layer(rules() as Arc<dyn noetic::layer::MemoryLayer>)
        .log_store(Arc::new(store.clone()));
    if let Some(key) = key {
        builder = builder.ledger_key(key);
    }
    builder.build().unwrap()
}

fn objects(ledger: &[LedgerEntry]) -> Vec<Map<String, Value>> {
    ledger.iter().map(|e| serde_json::to_value(e).unwrap().as_object().cloned().unwrap()).collect()
}

/// Two turns of session "s", each in a runtime of its own (the second reopens the session from the log).
async fn two_turns(key: Option<SigningKey>) -> (Vec<LedgerEntry>, usize) {
    let store = MemoryLogStore::new();
    let first = runtime(&store, key.clone()).open("s").await.unwrap();
    first.send("tidy").await.unwrap().await.unwrap();
    let after_first = first.ledger().len();
    let second = runtime(&store, key).open("s").await.unwrap();
    second.send("again").await.unwrap().await.unwrap();
    (second.ledger(), after_first)
}

#[tokio::test]
async fn a_chain_continues_across_reopening_the_session_in_another_runtime() {
    let (ledger, after_first) = two_turns(None).await;
    assert!(after_first > 0 && ledger.len() > after_first, "both turns are in the ledger: {}", ledger.len());
    let actions: Vec<SteeringAction> = ledger.iter().map(|e| e.action).collect();
    for action in [SteeringAction::Allow, SteeringAction::Deny, SteeringAction::Guide] {
        assert!(actions.contains(&action), "{action:?} in {actions:?}");
    }
    for (i, entry) in ledger.iter().enumerate() {
        assert_eq!((entry.session_key.as_deref(), entry.index), (Some("s"), Some(i as u64)));
        let expected_prev = i.checked_sub(1).map(|p| ledger[p].sha256.clone().unwrap());
        assert_eq!(entry.prev_sha256, expected_prev, "entry {i} follows entry {}", i as i64 - 1);
        assert_eq!(entry.signature, None, "no key, no signature");
    }
    let intact = verify("s", &mut objects(&ledger), None, None).unwrap();
    assert_eq!((intact.entries, intact.unchained, intact.signed), (ledger.len(), 0, 0));
}

#[tokio::test]
async fn a_signed_ledger_verifies_with_its_key_and_fails_with_another() {
    let key = SigningKey::from_bytes(&[3; 32]);
    let (ledger, after_first) = two_turns(Some(key.clone())).await;
    let ends: Vec<usize> = ledger.iter().enumerate().filter(|(_, e)| e.outcome.is_some()).map(|(i, _)| i).collect();
    assert_eq!(ends, [after_first - 1, ledger.len() - 1], "each turn ends with its outcome entry");
    let signed: Vec<usize> = ledger.iter().enumerate().filter(|(_, e)| e.signature.is_some()).map(|(i, _)| i).collect();
    assert_eq!(signed, ends, "exactly the turns' last entries are signed");
    let intact = verify("s", &mut objects(&ledger), Some(&key.verifying_key()), None).unwrap();
    assert_eq!(intact.signed, 2);
    let other = SigningKey::from_bytes(&[4; 32]).verifying_key();
    let broken = verify("s", &mut objects(&ledger), Some(&other), None).unwrap_err();
    assert_eq!((broken.index, broken.tamper), (after_first as u64 - 1, Tamper::BadSignature));
}

#[tokio::test]
async fn verify_names_the_first_entry_edited_removed_reordered_inserted_or_cut_off() {
    let key = SigningKey::from_bytes(&[5; 32]);
    let public = key.verifying_key();
    let (ledger, _) = two_turns(Some(key)).await;
    let good = objects(&ledger);
    let check = |mut entries: Vec<Map<String, Value>>| {
        let b = verify("s", &mut entries, Some(&public), None).unwrap_err();
        (b.index, b.tamper)
    };
    let mut edited = good.clone();
    edited[2].insert("guidance".into(), json!("changed afterwards"));
    assert_eq!(check(edited), (2, Tamper::Edited));
    let mut removed = good.clone();
    removed.remove(3);
    assert_eq!(check(removed), (3, Tamper::Removed));
    let mut reordered = good.clone();
    reordered.swap(1, 2);
    assert_eq!(check(reordered), (1, Tamper::Reordered));
    let mut copied = good.clone();
    copied.insert(4, good[1].clone());
    assert_eq!(check(copied), (4, Tamper::Inserted));
    let mut forged = good.clone();
    forged.insert(2, json!({"kind": "custom", "action": "allow"}).as_object().cloned().unwrap());
    assert_eq!(check(forged), (2, Tamper::Inserted));
    let cut = good[..good.len() - 1].to_vec();
    assert_eq!(check(cut), (good.len() as u64 - 1, Tamper::Truncated));
    let all = good.len() as u64;
    let b = verify("s", &mut good.clone(), Some(&public), Some(all + 2)).unwrap_err();
    assert_eq!((b.index, b.tamper), (all, Tamper::Truncated), "cut right after a signed end: seen by the count");
}

#[tokio::test]
async fn entries_written_before_the_chain_verify_as_unchained_before_the_first_chained_one() {
    let (ledger, _) = two_turns(None).await;
    let mut entries = objects(&ledger);
    let older = json!({"kind": "tool_call", "action": "deny"}).as_object().cloned().unwrap();
    // A log from before the chain: its entries have no chain fields, and the chain starts after them.
    let mut rebuilt = vec![older.clone(), older];
    let mut head = noetic::steering::chain::ChainHead { index: 2, sha256: None };
    for entry in &mut entries {
        noetic::steering::chain::seal(entry, "s", &mut head, None);
    }
    rebuilt.extend(entries);
    let intact = verify("s", &mut rebuilt.clone(), None, None).unwrap();
    assert_eq!((intact.unchained, intact.entries), (2, ledger.len() + 2));
    let mut stripped = rebuilt;
    stripped[3].remove("sha256");
    let broken = verify("s", &mut stripped, None, None).unwrap_err();
    assert_eq!((broken.index, broken.tamper), (3, Tamper::Inserted), "an unchained entry after chained ones");
}
