//! The suite's many-sessions throughput alone, for a profiler (`perf record`): `scaling_probe SESSIONS THREADS
//! ROUNDS` prints turns/s of each round, the workers' busy fraction and how often they parked. THREADS 0 runs two
//! runtimes that share nothing, one thread each (the machine's ceiling for two threads). A fourth argument `steered`
//! gives each turn a tool call through the 10-rule steering layer.

#[path = "../probe.rs"]
#[allow(dead_code)]
mod probe;
#[path = "../real_path.rs"]
#[allow(dead_code)]
mod real_path;

use probe::BenchResult;

fn main() -> BenchResult<()> {
    let arg = |i: usize, default: usize| -> BenchResult<usize> {
        match std::env::args().nth(i) {
            Some(a) => a.parse().map_err(|_| format!("'{a}' is not a number").into()),
            None => Ok(default),
        }
    };
    let (sessions, threads, rounds) = (arg(1, 10_000)?, arg(2, 2)?, arg(3, 5)?);
    let make: &real_path::MakeRuntime = match std::env::args().nth(4).as_deref() {
        Some("steered") => &probe::steered_runtime,
        _ => &real_path::answering_runtime,
    };
    for _ in 0..rounds {
        if threads == 0 {
            println!("{:.0} isolated", real_path::throughput_isolated(sessions, make)?);
            continue;
        }
        let run = real_path::throughput_detail(sessions, threads, make)?;
        println!("{:.0} busy={:.3} parks={}", run.turns_per_s, run.busy, run.parks);
    }
    Ok(())
}
