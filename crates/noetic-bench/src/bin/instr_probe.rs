//! A fixed workload for instruction counts: N session turns, each one tool call and an answer, on the scripted
//! model — the suite's `session_turns`. Wall-clock figures on a shared 2-core machine swing by 2×; instruction
//! counts do not:
//!
//!   cargo build --profile profiling -p noetic-bench --bin instr_probe
//!   valgrind --tool=callgrind target/profiling/instr_probe 200    # then 1200
//!
//! (I(1200) − I(200)) / 1000 is the instructions one turn costs, start-up and warm-up excluded. Session 5 measured
//! 31,330 at `78a5833` (before the turn core) and 37,240 at its end; boxing the core's large phases, the layer
//! hooks' state and making tool specs once per tool set brought it to about 33,000 (±100 from run to run: heap
//! layout and random ids).
//!
//! `instr_probe tool-call N` runs the suite's `tool_call_us` workload instead (one bare `llm` step of N rounds,
//! each a model call and the no-op tool) and `instr_probe steered N` the same with the 10-rule steering layer of
//! `steering_rules_overhead_us`; (I(M) − I(N)) / (M − N) is then the instructions per tool call. Measured with
//! N = 200, M = 1200, bare / steered: 9,884 / 14,728 at `a03d11c`, 10,056 / 16,769 at `563a651`, 10,921 / 18,875
//! at `b0eae6a`, then 9,561 / 15,270 once the steering layer stopped timing its recall, looking at other hooks'
//! rules, hashing its state key and guarding each predicate, and tool calls stopped making waiters and approval
//! steps that return at once. At `9b92590`: 9,465 / 14,998 (the layer adds 5,533); with the rules indexed by hook
//! and tool, the layer answering its hooks at once (`*_now`, no hook future) and not looking for verdicts that no
//! async judge can have queued: 9,478 / 12,780 (adds 3,302). At `3b1297e`: 10,728 / 14,856 (adds 4,128); with each
//! gate's ledger entry made where the ledger keeps it (a full ledger renews its oldest entry in place, moving no
//! entry) and no aggregation when no rule concerns the call or every predicate allowed: 10,726 / 14,014 (adds 3,288).
//! With `MemoryLayer` split by purpose (#35 item 3; each hook asks a layer's accessor, a stack without gates asks
//! none): 10,758 / 14,074 (adds 3,316), within the run-to-run spread. At `77862cd`: 10,716 / 13,979 (adds
//! 3,263); with a gate's usual allow kept in the ledger as the few fields it has (a `LedgerEntry` is made only
//! when the ledger is read), each rule's predicate in the hook index, the gate and recall glue asking the layers
//! that answer at once without a nested future, one clock read for a hook no rule concerns, and the default
//! scope's state key made at once: 10,698 / 12,654 (adds 1,956).
//!
//! `instr_probe fork N` runs the suite's `fork_path_us` workload N times (one `fork` All of 1000 trivial paths,
//! built once); (I(M) − I(N)) / ((M − N) · 1000) is the instructions per fork path. With N = 2, M = 12: 5,888 at
//! `9b92590`; 2,948 once a path's context shares its root's parts and makes its cancellation token lazily, ids
//! come from a per-thread sequence and a `run` path's future lives unboxed in its task; 2,982 at `3b1297e` (of which
//! about 850 are the three allocations a path makes and frees, 350 moving its future into its task, and 75 two
//! locks of the root's cancellation token). With a `run` path started and polled once in the fork's own task
//! (one that finishes there needs no future of its own and no slot among the running paths) and its context made
//! in the finished previous path's allocation: 1,135, and one allocation per path (the run function's future;
//! it prints the allocations per path). With a fixed path list no longer copied per execution and ids put
//! together as one number: 1,055 (3,090 at `fe27a86`, measured in the same sitting).
//!
//! `instr_probe real N [CALLS]` runs N sessions of the suite's real path (`real_tool_call_us_{CALLS}_calls`, CALLS
//! 10 by default): each a new runtime on the OpenAI wire model, CALLS tool calls, OpenAI encoding and parsing.
//! (I(M) − I(N)) / ((M − N) · CALLS) is the instructions per real-path tool call with each session's set-up (a new
//! runtime, its tool's compiled schema, the subscriber) and teardown; `instr_probe real-setup N` runs only those,
//! so subtracting its (I(M) − I(N)) / ((M − N) · CALLS) leaves what the suite times. It prints the allocations per
//! tool call of the N sessions too. `instr_probe parse N` parses the real path's tool-call answer N times with
//! the OpenAI client's parser alone ((I(M) − I(N)) / (M − N) is one parse). With N = 20, M = 120 (and the same
//! for `real-setup`): 59,105 per real-path tool call at `85dc8d5`; 58,538 with the step's instructions counted once
//! per token counter rather than on every request, 58,066 with the window table read without a `memcmp` per entry
//! (101,738 → 101,078 at 100 calls, N = 2, M = 12; 86.8 allocations per call, unchanged).
//!
//! `instr_probe real-log N [CALLS]` is `real` with each session kept in a session log in memory
//! (`MemoryLogStore`): its per-call instructions less `real`'s are what the log costs the runtime per tool call
//! (set-up included in both: a log store and the session's opening). With N = 20, M = 120 at `004044c`: 53,640
//! (`real`, set-up included) against 89,350 per call, and 57.7 against 109.2 allocations: the log costs the runtime
//! ~35,700 instructions and ~51 allocations a call, spread thin (the writer task ~17,500 inclusive, of which the
//! memory store's own copies of the entries ~6,600; a session's teardown ~2,500 a call at 10 calls; allocation and
//! freeing ~10,000). With a writer not woken by its own appends, a write of one batch not copied and a step's
//! entries sharing its path: 31,185 instructions and 32.7 allocations a call above `real` (at `400984b`).
//!
//! `instr_probe many N [TURNS]` opens N sessions at once on one runtime whose logs are in memory and runs TURNS
//! turns (2 by default) of ROUNDS_PER_TURN real-path tool calls in each — the load of `pg-runtime`'s in-memory row.
//! With 1000 sessions it is memory-bound, not instruction-bound: at `02a6cb6` a tool call cost ~94,000
//! instructions here (58,000 in one session); at `18d6c03` the same run with at most 4 turns running at once (a
//! semaphore in the probe, since removed) took the same instructions (1.61 against 1.63 billion) in 0.44 s instead
//! of 1.02 s. Sharing a call's strings (#36 item 2) took 1000 × 2 from 204 MB to 153 MB and from 1.86 to 1.59
//! billion instructions.

#[path = "../alloc_count.rs"]
mod alloc_count;
#[path = "../probe.rs"]
#[allow(dead_code)]
mod probe;
#[path = "../real_path.rs"]
#[allow(dead_code)]
mod real_path;

use noetic::prelude::*;
use probe::BenchResult;

#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

fn main() -> BenchResult<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let workload = match args.first().map(String::as_str) {
        Some("tool-call" | "steered" | "steer" | "real" | "real-log" | "real-setup" | "fork" | "parse" | "many") => {
            args.remove(0)
        }
        _ => "session".to_owned(),
    };
    let n: usize = match args.first() {
        Some(arg) => arg.parse().map_err(|_| format!("'{arg}' is not a number of turns or rounds"))?,
        None => 100,
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        match workload.as_str() {
            "real-setup" => {
                for _ in 0..n {
                    real_path::session_setup().await?;
                }
                Ok(())
            }
            "real" | "real-log" => {
                let calls: usize = match args.get(1) {
                    Some(arg) => arg.parse().map_err(|_| format!("'{arg}' is not a number of tool calls"))?,
                    None => 10,
                };
                let logged = workload == "real-log";
                let (allocations, done) = alloc_count::allocations_during(async {
                    for _ in 0..n {
                        if logged {
                            let store = std::sync::Arc::new(noetic::agent::log::MemoryLogStore::new());
                            real_path::session_tool_calls_with(calls, true, real_path::Kept::Log(store)).await?;
                        } else {
                            real_path::session_tool_calls(calls, true).await?;
                        }
                    }
                    BenchResult::Ok(())
                })
                .await;
                done?;
                println!("allocations per tool call: {:.1}", allocations as f64 / (n * calls) as f64);
                Ok(())
            }
            "many" => {
                // `n` sessions at once on one runtime with each session's log in memory, each opened and then
                // TURNS turns of ROUNDS_PER_TURN tool calls: the load of `pg-runtime`'s in-memory row.
                let turns: usize = match args.get(1) {
                    Some(arg) => arg.parse().map_err(|_| format!("'{arg}' is not a number of turns"))?,
                    None => 2,
                };
                let store = std::sync::Arc::new(noetic::agent::log::MemoryLogStore::new());
                let (runtime, _) = real_path::wire_runtime_with(real_path::Kept::Log(store))?;
                let tasks: Vec<_> = (0..n)
                    .map(|s| {
                        let runtime = runtime.clone();
                        tokio::spawn(async move {
                            let session = runtime.open(&format!("many-{s}")).await.map_err(|e| e.to_string())?;
                            for t in 0..turns {
                                let turn = session.send(format!("turn {t}: find the retry policy")).await;
                                turn.map_err(|e| e.to_string())?.await.map_err(|e| e.to_string())?;
                            }
                            Ok::<(), String>(())
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await??;
                }
                Ok(())
            }
            "fork" => {
                let path = Step::run("p", |x: u64, _| async move { Ok(x) }).build()?;
                let fork =
                    Step::fork("f", ForkMode::All).paths(vec![path; 1000]).merge(|v, _| Ok(v.len() as u64)).build()?;
                let ctx = StepContext::new();
                let (allocations, done) = alloc_count::allocations_during(async {
                    for _ in 0..n {
                        fork.execute(1, &ctx).await?;
                    }
                    BenchResult::Ok(())
                })
                .await;
                done?;
                println!("allocations per path: {:.2}", allocations as f64 / (n * 1000).max(1) as f64);
                Ok(())
            }
            "parse" => {
                // The real path's tool-call answer parsed `n` times by the OpenAI client's parser alone.
                let answer = real_path::WireModel::new().tool_answer().to_owned();
                for _ in 0..n {
                    std::hint::black_box(noetic_openai::wire::parse_response(std::hint::black_box(&answer))?);
                }
                Ok(())
            }
            "tool-call" => probe::bare_tool_calls(n, Vec::new()).await,
            "steered" => probe::bare_tool_calls(n, vec![probe::ten_rules()?]).await,
            "steer" => {
                // The suite's `steer_latency_us`, `n` times (each a new runtime, a session and a steered turn);
                // prints the median.
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    samples.push(probe::steer_latency_us().await?);
                }
                samples.sort_by(f64::total_cmp);
                println!("{:.3}", samples.get(n / 2).copied().unwrap_or(f64::NAN));
                Ok(())
            }
            _ => probe::session_turns(n).await.map(drop),
        }
    })
}
