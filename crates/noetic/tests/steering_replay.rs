//! Replaying recorded sessions through new rules (#31 item 1): a session recorded by the real runtime into a log
//! store, its decisions decided again — predicates for real, unchanged LLM rules from their recorded verdicts,
//! changed ones only when judged again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use noetic::agent::log::{MemoryLogStore, Recording, RecordingError, RecordingFilter};
use noetic::prelude::*;
use noetic::steering::replay::{Recorded, Unreplayable, Verdicts};
use noetic::steering::{LedgerKind, LlmEval, SteeringLayer, rejudge, replay};
use noetic::testing::JudgeRouter;
use serde_json::json;

const CALLS: usize = 1000;
const PER_RESPONSE: usize = 10;

/// The path of call `i`: every 10th starts with `secret/`, every 10th (others) ends with `.key`.
fn path(i: usize) -> String {
    match i % 10 {
        0 => format!("secret/{i}.txt"),
        3 => format!("notes/{i}.key"),
        _ => format!("notes/{i}.txt"),
    }
}

fn read_tool() -> Arc<dyn Tool> {
    Arc::new(
        FnTool::builder("read", "Reads a file.")
            .input_schema(json!({"type": "object", "properties": {"path": {"type": "string"}}}))
            .handler(|args, _| async move { Ok(json!(format!("read {}", args["path"].as_str().unwrap_or("")))) })
            .build()
            .unwrap(),
    )
}

/// A rule denying reads of paths that end with one of `suffixes` or start with `secret/`.
fn no_secrets(suffixes: &'static [&'static str]) -> SteeringRule {
    SteeringRule::predicate("no-secrets", [Hook::BeforeToolCall], move |p| match p.tool_call() {
        Some(c) => {
            let path = c.args["path"].as_str().unwrap_or("");
            if path.starts_with("secret/") || suffixes.iter().any(|s| path.ends_with(s)) {
                SteeringDecision::deny(format!("{path} is secret"))
            } else {
                SteeringDecision::allow()
            }
        }
        None => SteeringDecision::allow(),
    })
}

/// An agent with the read tool and rounds enough for the script.
fn agent() -> Step<String, String> {
    let rounds = u32::try_from(CALLS / PER_RESPONSE + 2).unwrap();
    Step::llm("assistant", "m").tools([read_tool()]).max_rounds(rounds).build().unwrap()
}

fn layer(rules: Vec<SteeringRule>) -> Arc<SteeringLayer> {
    steering(SteeringConfig::new(rules)).unwrap()
}

/// The agent's script: `CALLS` reads, `PER_RESPONSE` to a response, then an answer.
fn script() -> Vec<ModelResponse> {
    let mut responses: Vec<ModelResponse> = (0..CALLS / PER_RESPONSE)
        .map(|r| {
            let calls = (0..PER_RESPONSE).map(|k| {
                let i = r * PER_RESPONSE + k;
                (format!("c{i}"), json!({"path": path(i)}))
            });
            let calls: Vec<(String, serde_json::Value)> = calls.collect();
            ModelResponse::tool_calls(calls.iter().map(|(id, args)| (id.as_str(), "read", args.clone())))
        })
        .collect();
    responses.push(ModelResponse::text("Done reading."));
    responses
}

/// Records one session "s" of the scripted agent under `rules`, judges answered by `judge`.
async fn record(rules: Vec<SteeringRule>, judge: ScriptedModel) -> MemoryLogStore {
    let store = MemoryLogStore::new();
    let model = JudgeRouter::new(ScriptedModel::new(script()), judge);
    let rt = Runtime::builder()
        .model(model)
        .agent(agent())
        .layer(layer(rules) as Arc<dyn MemoryLayer>)
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    assert_eq!(rt.session("s").send("read everything").await.unwrap().await.unwrap(), "Done reading.");
    store
}

async fn recording(store: &MemoryLogStore) -> Recording {
    Recording::load(store, &RecordingFilter::default()).await.unwrap()
}

fn tool_calls<'a>(recorded: impl Iterator<Item = Recorded<'a>>) -> usize {
    recorded.filter(|r| r.entry.kind == LedgerKind::ToolCall).count()
}

#[tokio::test]
async fn the_same_rules_replayed_change_no_decision_and_a_tightened_rule_flips_exactly_the_calls_it_catches() {
    let store = record(vec![no_secrets(&[])], ScriptedModel::new([])).await;
    let recording = recording(&store).await;
    assert_eq!(tool_calls(recording.decisions()), CALLS);

    let same = replay(&layer(vec![no_secrets(&[])]), recording.decisions(), &Verdicts::default());
    assert_eq!(same.summary.changed(), 0, "{:?}", same.summary);
    assert!(same.summary.not_replayable.is_empty(), "{:?}", same.summary);
    assert_eq!(same.summary.replayed as usize, recording.len());

    let tightened = replay(&layer(vec![no_secrets(&[".key"])]), recording.decisions(), &Verdicts::default());
    let flipped: Vec<String> = tightened
        .decisions
        .iter()
        .filter(|d| d.changed())
        .map(|d| d.args.unwrap()["path"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..CALLS).filter(|i| i % 10 == 3).map(path).collect();
    assert_eq!(flipped, expected);
    assert_eq!(tightened.summary.allow_to_deny, expected.len() as u64);
    assert_eq!((tightened.summary.deny_to_allow, tightened.summary.guide_changes), (0, 0));
    let first = tightened.decisions.iter().find(|d| d.changed()).unwrap();
    assert_eq!((first.session, first.turn, first.tool), ("s", Some(1), Some("read")));
    let new = first.new.as_ref().unwrap();
    assert_eq!((new.action, new.rule_id.as_deref()), (SteeringAction::Deny, Some("no-secrets")));
    assert_eq!(first.old, SteeringAction::Allow);
}

fn careful(prompt: &str) -> SteeringRule {
    SteeringRule::llm("careful-reads", [Hook::BeforeToolCall], LlmEval::sync(prompt).model("judge")).for_tools(["read"])
}

#[tokio::test]
async fn an_unchanged_llm_rule_replays_its_recorded_verdicts_and_a_changed_one_is_judged_only_when_asked() {
    // The judge guides every 7th call it is asked about, allows the others.
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let judge = {
        let asked = asked.clone();
        ScriptedModel::responder(move |_| {
            let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(ModelResponse::text(if n.is_multiple_of(7) { "GUIDE: read less" } else { "ALLOW" }))
        })
    };
    let store = record(vec![careful("Reads must be careful.")], judge.clone()).await;
    let recorded_calls = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(recorded_calls, CALLS, "one judge call per read while recording");
    let recording = recording(&store).await;

    let unchanged = layer(vec![careful("Reads must be careful.")]);
    let same = replay(&unchanged, recording.decisions(), &Verdicts::default());
    assert_eq!(same.summary.changed(), 0, "{:?}", same.summary);
    assert_eq!(same.summary.verdicts_reused as usize, CALLS);
    assert_eq!(same.summary.judge_calls_needed, 0);
    let decisions: Vec<Recorded<'_>> = recording.decisions().collect();
    let counting = ScriptedModel::responder(|_| Ok(ModelResponse::text("DENY")));
    let fresh = rejudge(&unchanged, Arc::new(counting.clone()), &decisions, &same).await.unwrap();
    assert_eq!((counting.calls(), fresh.len()), (0, 0), "an unchanged rule costs no judge call");

    let changed = layer(vec![careful("Reads must be very careful.")]);
    let unjudged = replay(&changed, recording.decisions(), &Verdicts::default());
    assert_eq!(unjudged.summary.replayed, unjudged.summary.unchanged, "only the model turns are decided");
    assert_eq!(unjudged.summary.not_replayable.get("not_judged").copied(), Some(CALLS as u64));
    assert_eq!(unjudged.summary.judge_calls_needed, CALLS as u64);
    let why = unjudged.decisions.iter().find_map(|d| d.new.as_ref().err()).unwrap();
    assert_eq!(why, &Unreplayable::NotJudged { rules: vec!["careful-reads".into()] });
    assert_eq!(counting.calls(), 0, "nothing is judged without being asked");

    let fresh = rejudge(&changed, Arc::new(counting.clone()), &decisions, &unjudged).await.unwrap();
    assert_eq!(counting.calls(), CALLS, "one judge call per changed rule and decision");
    let judged = replay(&changed, recording.decisions(), &fresh);
    assert!(judged.summary.not_replayable.is_empty(), "{:?}", judged.summary);
    assert_eq!(judged.summary.verdicts_fresh as usize, CALLS);
    let guided = CALLS.div_ceil(7) as u64;
    assert_eq!(judged.summary.allow_to_deny, CALLS as u64 - guided);
    assert_eq!(judged.summary.guide_changes, guided, "each recorded GUIDE is a DENY now");
}

#[tokio::test]
async fn a_model_turn_rule_is_replayed_against_the_response_it_judged() {
    let store = MemoryLogStore::new();
    let model = ScriptedModel::new([
        ModelResponse::tool_calls([("c1", "read", json!({"path": "a.txt"}))]),
        ModelResponse::text("The password is hunter2."),
    ]);
    let rt = Runtime::builder()
        .model(Arc::new(model))
        .agent(agent())
        .layer(layer(vec![no_secrets(&[])]) as Arc<dyn MemoryLayer>)
        .log_store(Arc::new(store.clone()))
        .build()
        .unwrap();
    rt.session("s").send("go").await.unwrap().await.unwrap();
    let recording = recording(&store).await;
    let model_turns: Vec<Recorded<'_>> =
        recording.decisions().filter(|r| r.entry.kind == LedgerKind::ModelTurn).collect();
    assert_eq!(model_turns.len(), 2);
    assert!(model_turns.iter().all(|r| r.response.is_some()), "each model turn is paired with its response");

    let no_passwords = SteeringRule::predicate("no-passwords", [Hook::AfterModelCall], |p| match p.response() {
        Some(r) if r.text_output().contains("password") => SteeringDecision::guide("Never reveal passwords."),
        _ => SteeringDecision::allow(),
    });
    let replayed = replay(&layer(vec![no_secrets(&[]), no_passwords]), recording.decisions(), &Verdicts::default());
    let changed: Vec<_> = replayed.decisions.iter().filter(|d| d.changed()).collect();
    assert_eq!(changed.len(), 1, "only the answer that reveals a password");
    assert_eq!(changed[0].kind, LedgerKind::ModelTurn);
    let new = changed[0].new.as_ref().unwrap();
    assert_eq!((new.action, new.guidance.as_deref()), (SteeringAction::Guide, Some("Never reveal passwords.")));
    assert_eq!(replayed.summary.guide_changes, 1);
}

#[tokio::test]
async fn an_unknown_session_is_an_error_naming_the_sessions_there_are() {
    let store = record(vec![no_secrets(&[])], ScriptedModel::new([])).await;
    let filter = RecordingFilter { sessions: vec!["nope".into()], since: None };
    let error = Recording::load(&store, &filter).await.unwrap_err();
    assert!(matches!(&error, RecordingError::UnknownSession { key, known } if key == "nope" && known == "s"));
    assert_eq!(error.to_string(), "the store has no session 'nope'; its sessions are: s (see `noetic sessions`)");
}

#[test]
fn a_model_turn_without_its_response_is_not_replayable() {
    let entry = noetic::steering::LedgerEntry::new(LedgerKind::ModelTurn, SteeringAction::Allow);
    let replayed =
        replay(&layer(vec![no_secrets(&[])]), [Recorded::new("file", Some(1), &entry)], &Verdicts::default());
    assert_eq!(replayed.decisions[0].new, Err(Unreplayable::NoResponse));
    assert_eq!(replayed.summary.not_replayable.get("no_response").copied(), Some(1));
}

#[test]
fn escalation_counts_guides_per_recorded_turn_as_it_did_live() {
    let dry =
        SteeringRule::predicate("dry-run-first", [Hook::BeforeToolCall], |_| SteeringDecision::guide("dry run first"))
            .escalate_after(1);
    let mut entry = noetic::steering::LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Guide);
    entry.tool_name = Some("deploy".into());
    let recorded = [
        Recorded::new("s", Some(1), &entry),
        Recorded::new("s", Some(1), &entry),
        Recorded::new("s", Some(2), &entry),
        Recorded::new("t", Some(2), &entry),
    ];
    let replayed = replay(&layer(vec![dry]), recorded, &Verdicts::default());
    let actions: Vec<(SteeringAction, bool)> =
        replayed.decisions.iter().map(|d| d.new.as_ref().map(|n| (n.action, n.escalated)).unwrap()).collect();
    assert_eq!(
        actions,
        [
            (SteeringAction::Guide, false),
            (SteeringAction::Deny, true),
            (SteeringAction::Guide, false),
            (SteeringAction::Guide, false)
        ],
        "the second guide of a turn escalates; a new turn or session starts from zero"
    );
}

#[tokio::test]
async fn since_leaves_out_decisions_made_before_it() {
    let store = record(vec![no_secrets(&[])], ScriptedModel::new([])).await;
    let all = recording(&store).await;
    let last = all.decisions().last().unwrap().entry.timestamp;
    let later = last + std::time::Duration::from_secs(1);
    let filter = RecordingFilter { sessions: vec!["s".into()], since: Some(later) };
    assert!(Recording::load(&store, &filter).await.unwrap().is_empty());
    let filter = RecordingFilter { sessions: Vec::new(), since: Some(last) };
    let recent = Recording::load(&store, &filter).await.unwrap();
    assert!(!recent.is_empty() && recent.len() < all.len(), "{} of {}", recent.len(), all.len());
}
