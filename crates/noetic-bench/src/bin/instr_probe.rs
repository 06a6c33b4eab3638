//! A fixed workload for instruction counts: N session turns, each one tool call and an answer, on the scripted
//! model. Wall-clock figures on a shared 2-core machine swing by 2×; instruction counts do not:
//!
//!   cargo build --release -p noetic-bench --bin instr_probe
//!   valgrind --tool=callgrind target/release/instr_probe 200    # then 1200
//!
//! (I(1200) − I(200)) / 1000 is the instructions one turn costs, start-up and warm-up excluded. Session 5 measured
//! 31,330 at `78a5833` (before the turn core) and 37,240 at its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic::agent::Runtime;
use noetic::prelude::*;
use serde_json::{Value, json};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|_| format!("'{arg}' is not a number of turns"))?,
        None => 100,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let calls = Arc::new(AtomicUsize::new(0));
        let model = ScriptedModel::responder(move |_| {
            let k = calls.fetch_add(1, Ordering::Relaxed);
            Ok(if k.is_multiple_of(2) {
                ModelResponse::tool_calls([("c", "noop", json!({}))])
            } else {
                ModelResponse::text("ok")
            })
        })
        .without_recording();
        let tool = FnTool::builder("noop", "Does nothing.").handler(|_, _| async { Ok(Value::Null) }).build()?;
        let runtime = Runtime::builder().model(Arc::new(model)).tool(Arc::new(tool)).build()?;
        let session = runtime.session("s");
        for i in 0..n {
            session.send(format!("m{i}"))?.await?;
        }
        Ok(())
    })
}
