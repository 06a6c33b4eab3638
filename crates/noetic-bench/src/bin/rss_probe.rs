//! The suite's memory figures, in a process that links only the runtime (run by `noetic-bench`; see `probe.rs`).

#[path = "../probe.rs"]
#[allow(dead_code)]
mod probe;

fn main() -> probe::BenchResult<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match std::env::args().nth(1).as_deref() {
        Some("rss-session") => rt.block_on(probe::rss_session(false)),
        Some("rss-session-added") => rt.block_on(probe::rss_session(true)),
        Some("rss-idle") => rt.block_on(probe::rss_idle()),
        _ => Err("usage: rss_probe rss-session|rss-session-added|rss-idle".into()),
    }
}
