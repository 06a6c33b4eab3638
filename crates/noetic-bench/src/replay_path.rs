//! Replaying recorded decisions through new rules (#31 item 1, `noetic rules test`): how many recorded tool-call
//! decisions the ten predicate rules of the steering figures decide again per second on one core, and what each
//! costs in allocations. One call in ten is of a tool a rule denies, so the deny path (its guidance and rule id)
//! is in the figure too.

use std::time::Instant;

use noetic::prelude::*;
use noetic::steering::replay::{Recorded, Verdicts};
use noetic::steering::{LedgerEntry, LedgerKind, SteeringLayer, replay};
use serde_json::json;

use crate::probe::BenchResult;

/// Recorded decisions replayed per sample.
const DECISIONS: usize = 200_000;

/// A session's worth of recorded tool-call decisions, as the ledger keeps them.
fn recorded() -> Vec<LedgerEntry> {
    (0..DECISIONS)
        .map(|i| {
            let mut entry = LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Allow);
            entry.tool_name = Some(if i % 10 == 0 { "forbidden-3".into() } else { format!("tool-{}", i % 7) });
            entry.tool_args = Some(json!({"path": format!("notes/{i}.txt")}));
            entry
        })
        .collect()
}

/// The ten predicate rules of the steering figures (`rule-i` denies calls of `forbidden-i`).
fn ten_rules() -> BenchResult<std::sync::Arc<SteeringLayer>> {
    let rules = (0..10).map(|i| {
        let forbidden = format!("forbidden-{i}");
        SteeringRule::predicate(format!("rule-{i}"), [Hook::BeforeToolCall], move |p| match p.tool_call() {
            Some(c) if c.name == forbidden => SteeringDecision::deny("no"),
            _ => SteeringDecision::allow(),
        })
    });
    Ok(steering(SteeringConfig::new(rules))?)
}

/// Decisions per second: every recorded decision decided again with `layer`, the results collected.
fn decisions_per_s(layer: &SteeringLayer, entries: &[LedgerEntry]) -> BenchResult<f64> {
    let verdicts = Verdicts::default();
    let start = Instant::now();
    let replayed = replay(layer, entries.iter().map(|e| Recorded::new("bench", Some(1), e)), &verdicts);
    let seconds = start.elapsed().as_secs_f64();
    let expected = (DECISIONS / 10) as u64;
    if replayed.summary.allow_to_deny != expected || replayed.decisions.len() != DECISIONS {
        return Err(format!("replay decided {:?}, not {expected} denies", replayed.summary).into());
    }
    std::hint::black_box(&replayed);
    Ok(DECISIONS as f64 / seconds)
}

/// The replay figures, reported with `report(name, stats, unit, target)`.
pub async fn figures(report: impl Fn(&str, crate::Stats, &str, &str)) -> BenchResult<()> {
    let layer = ten_rules()?;
    let entries = recorded();
    let cold = decisions_per_s(&layer, &entries)?;
    let samples = (0..9).map(|_| decisions_per_s(&layer, &entries)).collect::<BenchResult<Vec<f64>>>()?;
    report("replay_predicate_decisions_per_s", crate::Stats::of(samples, Some(cold)), "decisions/s", ">= 1000000");
    let (allocations, run) = crate::alloc_count::allocations_during(async { decisions_per_s(&layer, &entries) }).await;
    run?;
    let per_decision = allocations as f64 / DECISIONS as f64;
    report("replay_allocations_per_decision", crate::Stats::exact(per_decision), "allocations", "");
    Ok(())
}
