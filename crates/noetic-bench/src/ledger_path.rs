//! The ledger chain's figures (#31 item 3): what a session's record sink does per decision it appends to the log
//! — reading back the entry the steering layer wrote — without the chain (as before it) and with it (then sealing
//! it into the session's chain: its canonical JSON hashed after the last entry's hash), and what signing a turn's
//! last entry adds.

use std::time::{Duration, Instant, SystemTime};

use noetic::steering::chain::{ChainHead, SigningKey, seal_entry};
use noetic::steering::{Evaluator, LedgerEntry, LedgerKind, SteeringAction};
use serde_json::json;

use crate::probe::BenchResult;

/// Decisions per repetition.
const DECISIONS: usize = 20_000;

/// A tool-call decision as the steering layer hands it to the session's record sink.
fn decision_json() -> BenchResult<String> {
    let entry = LedgerEntry {
        timestamp: SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_000_000_123),
        tool_name: Some("write_file".into()),
        tool_args: Some(json!({"path": "notes/today.md", "content": "- tidy the workspace\n- run the tests\n"})),
        rule_id: Some("notes-are-short".into()),
        evaluator: Some(Evaluator::Predicate),
        guidance: Some("Keep notes short.".into()),
        duration: Duration::from_nanos(17_216),
        ..LedgerEntry::new(LedgerKind::ToolCall, SteeringAction::Guide)
    };
    Ok(serde_json::to_string(&entry)?)
}

/// Microseconds per decision: the sink reading the entry back, unchained (the path before the chain).
fn unchained_us(json: &str) -> BenchResult<f64> {
    let start = Instant::now();
    for _ in 0..DECISIONS {
        let entry: LedgerEntry = serde_json::from_str(std::hint::black_box(json))?;
        std::hint::black_box(entry);
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64)
}

/// Microseconds per decision: the sink reading the entry back and sealing it after the last one.
fn chained_us(json: &str, key: Option<&SigningKey>) -> BenchResult<f64> {
    let mut head = ChainHead::default();
    let start = Instant::now();
    for _ in 0..DECISIONS {
        let mut entry: LedgerEntry = serde_json::from_str(std::hint::black_box(json))?;
        seal_entry(&mut entry, "bench", &mut head, key)?;
        std::hint::black_box(entry);
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64)
}

/// The figures, each the median of interleaved repetitions (machine noise hits both sides of a difference alike).
pub fn figures(report: fn(&str, crate::Stats, &str, &str)) -> BenchResult<()> {
    let json = decision_json()?;
    let key = SigningKey::from_bytes(&[7; 32]);
    let (mut before, mut after, mut added, mut signed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    unchained_us(&json)?;
    chained_us(&json, None)?;
    for _ in 0..9 {
        let plain = unchained_us(&json)?;
        let chained = chained_us(&json, None)?;
        before.push(plain);
        after.push(chained);
        added.push(chained - plain);
    }
    for _ in 0..3 {
        signed.push(chained_us(&json, Some(&key))? - unchained_us(&json)?);
    }
    report("ledger_decision_unchained_us", crate::Stats::of(before, None), "us", "");
    report("ledger_decision_chained_us", crate::Stats::of(after, None), "us", "");
    report("ledger_chain_added_per_decision_us", crate::Stats::of(added, None), "us", "<= 1");
    report("ledger_signed_turn_end_added_us", crate::Stats::of(signed, None), "us", "");
    Ok(())
}
