//! A fixed workload for instruction counts: N session turns, each one tool call and an answer, on the scripted
//! model — the suite's `session_turns`. Wall-clock figures on a shared 2-core machine swing by 2×; instruction
//! counts do not:
//!
//!   cargo build --release -p noetic-bench --bin instr_probe
//!   valgrind --tool=callgrind target/release/instr_probe 200    # then 1200
//!
//! (I(1200) − I(200)) / 1000 is the instructions one turn costs, start-up and warm-up excluded. Session 5 measured
//! 31,330 at `78a5833` (before the turn core) and 37,240 at its end; boxing the core's large phases, the layer
//! hooks' state and making tool specs once per tool set brought it to about 33,000 (±100 from run to run: heap
//! layout and random ids).

#[path = "../probe.rs"]
#[allow(dead_code)]
mod probe;

fn main() -> probe::BenchResult<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(|_| format!("'{arg}' is not a number of turns"))?,
        None => 100,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(probe::session_turns(n))?;
    Ok(())
}
