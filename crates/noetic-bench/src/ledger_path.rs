//! The ledger chain's figures (#31 item 3): what a session's record sink does per decision it appends to the log —
//! before the chain, a JSON round trip of the entry the steering layer wrote; now the entry handed over as it is and
//! sealed into the session's chain (its canonical JSON hashed after the last entry's hash) — what the sealing alone
//! adds, and what signing a turn's last entry adds.

use std::time::{Duration, Instant, SystemTime};

use noetic::steering::chain::{ChainHead, SigningKey, seal_entry};
use noetic::steering::{Evaluator, LedgerEntry, LedgerKind, SteeringAction};
use serde_json::json;

use crate::probe::BenchResult;

/// Decisions per repetition.
const DECISIONS: usize = 20_000;

/// A tool-call decision as the steering layer hands it to the session's record sink.
fn decision() -> BenchResult<LedgerEntry> {
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
    Ok(entry)
}

/// Microseconds per decision: what the session's record sink did with each decision before the chain — the entry
/// written as JSON by the steering layer and read back by the sink.
fn round_trip_us(entry: &LedgerEntry) -> BenchResult<f64> {
    let start = Instant::now();
    for _ in 0..DECISIONS {
        let json = serde_json::to_string(std::hint::black_box(entry))?;
        let entry: LedgerEntry = serde_json::from_str(&json)?;
        std::hint::black_box(entry);
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64)
}

/// Microseconds per decision: the entry handed over as it is (a copy), unchained.
fn handed_us(entry: &LedgerEntry) -> f64 {
    let start = Instant::now();
    for _ in 0..DECISIONS {
        std::hint::black_box(std::hint::black_box(entry).clone());
    }
    start.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64
}

/// Microseconds per decision: the entry handed over as it is and sealed after the last one (what the sink does now).
fn chained_us(entry: &LedgerEntry, key: Option<&SigningKey>) -> BenchResult<f64> {
    let mut head = ChainHead::default();
    let start = Instant::now();
    for _ in 0..DECISIONS {
        let mut entry = std::hint::black_box(entry).clone();
        seal_entry(&mut entry, "bench", &mut head, key)?;
        std::hint::black_box(entry);
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / DECISIONS as f64)
}

/// The figures, each the median of interleaved repetitions (machine noise hits both sides of a difference alike).
pub fn figures(report: fn(&str, crate::Stats, &str, &str)) -> BenchResult<()> {
    let entry = decision()?;
    let key = SigningKey::from_bytes(&[7; 32]);
    let (mut before, mut after, mut added, mut signed) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    round_trip_us(&entry)?;
    chained_us(&entry, None)?;
    for _ in 0..9 {
        before.push(round_trip_us(&entry)?);
        let handed = handed_us(&entry);
        let chained = chained_us(&entry, None)?;
        after.push(chained);
        added.push(chained - handed);
    }
    for _ in 0..3 {
        signed.push(chained_us(&entry, Some(&key))? - chained_us(&entry, None)?);
    }
    report("ledger_decision_sink_json_round_trip_us", crate::Stats::of(before, None), "us", "");
    report("ledger_decision_sink_chained_us", crate::Stats::of(after, None), "us", "");
    report("ledger_chain_added_per_decision_us", crate::Stats::of(added, None), "us", "<= 1");
    report("ledger_signed_turn_end_added_us", crate::Stats::of(signed, None), "us", "");
    Ok(())
}
