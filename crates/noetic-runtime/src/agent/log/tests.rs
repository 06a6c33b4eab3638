#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::agent::{BatchPolicy, SteerMessage, SteeringMode};
use crate::budget::{Amount, Budget, BudgetReached, Limit, Limits, Scope, Spent};
use crate::context::ExecutionId;
use crate::decision::{SteeringAction, SteeringDecision};
use crate::error::NoeticError;
use crate::model::{Item, ModelResponse, ToolResult};
use crate::steering::{LedgerEntry, LedgerKind};
use crate::turn::{Input, Polled};

fn at(pos: u64, entry: Entry) -> Record {
    Record { pos, at: UNIX_EPOCH + Duration::from_secs(1_800_000_000), entry }
}

/// A session's log with one entry of every kind, as a turn would write them.
fn one_of_each() -> (Vec<Entry>, [SteerMessage; 3]) {
    let messages = [SteerMessage::new("first"), SteerMessage::new("second"), SteerMessage::new("dropped")];
    let step = StepPath::default().child("assistant", 0);
    let entries = vec![
        Entry::Settings { mode: SteeringMode::All, capacity: 5, batch_policy: BatchPolicy::FinishBatch },
        Entry::MessageAccepted { message: messages[0].clone() },
        Entry::MessageAccepted { message: messages[1].clone() },
        Entry::MessageAccepted { message: messages[2].clone() },
        Entry::MessagesDropped { ids: vec![messages[2].id], reason: "cleared".into() },
        Entry::TurnStarted { turn: 1, execution_id: ExecutionId::new(), input: "go".into() },
        Entry::StepStarted { turn: 1, step: step.clone() },
        Entry::Appended { turn: 1, items: vec![Item::user("go")] },
        Entry::Core { turn: 1, step: step.clone(), input: Input::Start },
        Entry::Core {
            turn: 1,
            step: step.clone(),
            input: Input::Polled(Polled { pending: false, capacity: 5, skip_rest: true }),
        },
        Entry::Core {
            turn: 1,
            step: step.clone(),
            input: Input::response(ModelResponse::tool_calls([("c1", "build", json!({"all": true}))])),
        },
        Entry::Core { turn: 1, step: step.clone(), input: Input::Reviewed(SteeringDecision::allow()) },
        Entry::Appended { turn: 1, items: ModelResponse::tool_calls([("c1", "build", json!({"all": true}))]).items },
        Entry::ApprovalAsked {
            turn: 1,
            call_id: "c1".into(),
            tool: "build".into(),
            arguments: "{\"all\":true}".into(),
            arguments_sha256: Some("5a1f".into()),
        },
        Entry::ApprovalDecided { turn: 1, call_id: "c1".into(), approved: true, reason: None },
        Entry::ToolStarted { turn: 1, step: step.clone(), call_id: "c1".into(), tool: "build".into() },
        Entry::Core { turn: 1, step: step.clone(), input: Input::ToolDone(ToolResult::ok("c1", "built")) },
        Entry::Appended { turn: 1, items: vec![Item::ToolResult(ToolResult::ok("c1", "built"))] },
        Entry::Decision {
            turn: Some(1),
            entry: Box::new(LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow)),
        },
        Entry::Injected { turn: 1, ids: vec![messages[1].id, messages[0].id] },
        Entry::Core { turn: 1, step: step.clone(), input: Input::Failed(NoeticError::cancelled("test")) },
        Entry::StepFinished { turn: 1, step, output: Some(json!("done")) },
        Entry::StopRequested { reason: "enough".into() },
        Entry::TurnEnded { turn: 1, outcome: TurnOutcome::Completed { answer: "done".into() } },
        Entry::LayerState { scope: "thread:s".into(), layer: "steering".into(), state: Some(json!({"carried": []})) },
        Entry::TurnStarted { turn: 2, execution_id: ExecutionId::new(), input: String::new() },
        Entry::TurnResumed { turn: 2, by: "worker-b".into() },
        Entry::TurnEnded { turn: 2, outcome: TurnOutcome::Failed { error: NoeticError::cancelled("stopped") } },
        Entry::TurnStarted { turn: 3, execution_id: ExecutionId::new(), input: "again".into() },
        Entry::TurnEnded { turn: 3, outcome: TurnOutcome::Discarded },
        Entry::BudgetSpent { turn: 3, spent: Spent { model_calls: 2, tokens_in: 40, ..Spent::default() } },
        Entry::BudgetReached {
            turn: 3,
            reached: BudgetReached {
                scope: Scope::Turn,
                limit: Limit::WallTime,
                allowed: Amount::Millis { ms: 600_000 },
                used: Amount::Millis { ms: 720_000 },
            },
        },
        Entry::BudgetSet { budget: Budget::default().session(Limits::default().cost(2.5)) },
    ];
    (entries, messages)
}

#[test]
fn every_kind_of_entry_reads_back_as_written() {
    let (entries, _) = one_of_each();
    let when = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
    for (i, entry) in entries.iter().enumerate() {
        let text = encode(entry, when).unwrap();
        let back = decode(i as u64 + 1, &text).unwrap();
        assert_eq!(back.pos, i as u64 + 1);
        assert_eq!(back.at, when, "the time keeps its milliseconds");
        assert_eq!(serde_json::to_value(&back.entry).unwrap(), serde_json::to_value(entry).unwrap(), "{text}");
    }
}

#[test]
fn an_encoded_entry_is_one_json_object_with_its_version_time_and_type() {
    let text =
        encode(&Entry::StopRequested { reason: "enough".into() }, UNIX_EPOCH + Duration::from_millis(7)).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        json!({"v": 1, "at_ms": 7, "type": "stop_requested", "reason": "enough"})
    );
}

#[test]
fn an_entry_of_a_newer_version_or_an_unknown_kind_is_refused_not_skipped() {
    let newer = decode(3, r#"{"v":3,"at_ms":0,"type":"stop_requested","reason":"x"}"#).unwrap_err();
    assert_eq!(newer, DecodeError::Newer { found: 3 });
    assert!(newer.to_string().contains("upgrade noetic"), "{newer}");
    for text in [
        r#"{"v":1,"at_ms":0,"type":"teleported"}"#,
        r#"{"v":1,"at_ms":0,"type":"stop_requested"}"#,
        r#"{"v":1,"type":"stop_requested","reason":"x"}"#,
        "not json",
        "",
    ] {
        assert!(matches!(decode(1, text), Err(DecodeError::Unreadable { .. })), "{text}");
    }
}

#[test]
fn the_projection_follows_the_queue_the_conversation_turns_approvals_ledger_and_layer_state() {
    let (entries, messages) = one_of_each();
    let mut projection = Projection::default();
    let mut open_during_turn_one = None;
    for (i, entry) in entries.iter().enumerate() {
        projection.apply(&at(i as u64 + 1, entry.clone()));
        if matches!(entry, Entry::ApprovalAsked { .. }) {
            assert_eq!(projection.approvals.len(), 1, "the call waits for approval");
            open_during_turn_one = projection.open_turn.clone();
        }
    }
    assert_eq!(projection.last, entries.len() as u64);
    assert_eq!(
        projection.settings,
        Settings { mode: SteeringMode::All, capacity: 5, batch_policy: BatchPolicy::FinishBatch }
    );
    let open = open_during_turn_one.unwrap();
    assert_eq!((open.turn, open.input.as_str(), open.since), (1, "go", 6));
    assert!(projection.approvals.is_empty(), "decided");
    assert_eq!(projection.turns, 3);
    assert!(projection.open_turn.is_none(), "every turn ended");
    assert!(projection.queue.is_empty(), "injected or dropped");
    let users: Vec<&str> = projection
        .conversation
        .iter()
        .filter(|i| i.role() == Some(crate::model::Role::User))
        .filter_map(Item::text)
        .collect();
    assert_eq!(users, ["go", messages[1].text.as_str(), messages[0].text.as_str()], "injected in the entry's order");
    assert!(!users.contains(&"dropped"));
    assert_eq!(projection.conversation.len(), 5, "go, the call, its result, two injected messages");
    assert_eq!(projection.ledger.len(), 1);
    assert_eq!(projection.layer_states["thread:s"]["steering"], json!({"carried": []}));
    assert!(projection.stop_requested.is_none(), "a stop is acted on by the turn that ends after it");
}

#[test]
fn a_turn_that_started_and_did_not_end_is_the_open_turn_with_its_waiting_approval() {
    let mut projection = Projection::default();
    let entries = [
        Entry::TurnStarted { turn: 1, execution_id: ExecutionId::new(), input: "go".into() },
        Entry::ApprovalAsked {
            turn: 1,
            call_id: "c1".into(),
            tool: "run".into(),
            arguments: "{}".into(),
            arguments_sha256: None,
        },
        Entry::StopRequested { reason: "from elsewhere".into() },
    ];
    for (i, e) in entries.into_iter().enumerate() {
        projection.apply(&at(i as u64 + 1, e));
    }
    assert_eq!(projection.open_turn.as_ref().map(|t| t.turn), Some(1));
    assert_eq!(projection.approvals[0].call_id, "c1");
    assert_eq!(projection.stop_requested.as_deref(), Some("from elsewhere"));
}

#[test]
fn a_record_already_applied_is_ignored_so_a_snapshot_and_an_overlapping_read_agree() {
    let (entries, _) = one_of_each();
    let records: Vec<Record> = entries.into_iter().enumerate().map(|(i, e)| at(i as u64 + 1, e)).collect();
    let mut whole = Projection::default();
    records.iter().for_each(|r| whole.apply(r));
    let mut from_snapshot = Projection::default();
    records[..10].iter().for_each(|r| from_snapshot.apply(r));
    let mut from_snapshot = Projection::decode(&from_snapshot.encode().unwrap()).unwrap();
    // The read after the snapshot starts a few entries early: those are not applied twice.
    records[7..].iter().for_each(|r| from_snapshot.apply(r));
    assert_eq!(serde_json::to_value(&from_snapshot).unwrap(), serde_json::to_value(&whole).unwrap());
}

#[test]
fn a_snapshot_of_another_version_or_damaged_is_not_used() {
    assert!(Projection::decode(br#"{"v":99,"projection":{}}"#).is_none());
    assert!(Projection::decode(b"garbage").is_none());
}

#[test]
fn the_summary_counts_turns_items_queued_messages_and_the_open_turn() {
    let (entries, _) = one_of_each();
    let mut summary = Summary::default();
    let mut open = None;
    for entry in &entries {
        summary.apply(entry);
        if matches!(entry, Entry::MessagesDropped { .. }) {
            assert_eq!(summary.queued, 2);
        }
        if matches!(entry, Entry::ToolStarted { .. }) {
            open = summary.open_turn;
        }
    }
    assert_eq!(open, Some(1));
    assert_eq!((summary.turns, summary.items, summary.queued, summary.open_turn), (3, 5, 0, None));
}

#[test]
fn a_summary_folded_from_an_appends_change_is_the_one_folded_entry_by_entry() {
    let (entries, _) = one_of_each();
    for split in 0..entries.len() {
        let (before, append) = entries.split_at(split);
        let mut by_entry = Summary::default();
        before.iter().for_each(|e| by_entry.apply(e));
        let mut by_change = by_entry.clone();
        append.iter().for_each(|e| by_entry.apply(e));
        by_change.apply_change(&SummaryChange::of(append));
        assert_eq!(by_change, by_entry, "an append of the entries from {split}");
    }
}

#[test]
fn step_paths_name_each_step_from_the_agent_down_with_its_occurrence() {
    let root = StepPath::default();
    let plan = root.child("plan", 0);
    assert_eq!(&*plan.0, "plan#0");
    assert_eq!(&*plan.child("act", 2).0, "plan#0/act#2");
}

#[test]
fn message_times_survive_the_round_trip() {
    let message = SteerMessage { accepted_at: SystemTime::now(), ..SteerMessage::new("x") };
    let text = encode(&Entry::MessageAccepted { message: message.clone() }, SystemTime::now()).unwrap();
    let Entry::MessageAccepted { message: back } = decode(1, &text).unwrap().entry else { panic!("a message") };
    assert_eq!(back, message);
}

#[test]
fn the_budget_is_projected_from_responses_tool_starts_turn_times_and_budget_entries() {
    let (entries, _) = one_of_each();
    let mut projection = Projection::default();
    let mut reached = None;
    for (i, entry) in entries.into_iter().enumerate() {
        if let Entry::BudgetReached { reached: r, .. } = &entry {
            reached = Some(r.clone());
        }
        // Each entry a second after the one before: the turns' wall time is what lies between start and end.
        let record =
            Record { pos: i as u64 + 1, at: UNIX_EPOCH + Duration::from_secs(1_800_000_000 + i as u64), entry };
        projection.apply(&record);
        if matches!(record.entry, Entry::BudgetReached { .. }) {
            assert_eq!(projection.budget.paused, reached, "the limit reached pauses the session");
        }
    }
    let account = &projection.budget;
    // One logged response, one tool start, two calls and 40 tokens of a child's; turns of 18, 2 and 1 seconds.
    assert_eq!((account.spent.model_calls, account.spent.tool_calls, account.spent.tokens_in), (3, 1, 40));
    assert_eq!(account.spent.wall_time, Duration::from_secs(21));
    assert_eq!(account.budget, Some(Budget::default().session(Limits::default().cost(2.5))));
    assert_eq!(account.paused, None, "setting a budget ends the pause");
    // A snapshot written before budgets existed reads with nothing spent.
    let mut old = serde_json::to_value(Projection::default()).unwrap();
    old.as_object_mut().unwrap().remove("budget");
    let bytes = serde_json::to_vec(&json!({"v": super::projection::SNAPSHOT_VERSION, "projection": old})).unwrap();
    assert_eq!(Projection::decode(&bytes).unwrap().budget, crate::budget::Account::default());
}
