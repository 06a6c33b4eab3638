//! What the `fork` step tests share: paths that log, sleep, fail or block; a probe of stopped paths; a gauge of
//! paths running at once; and checks on cancellation and partial results.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic::error::{PathFailure, PathSuccess};
use noetic::prelude::*;
use tokio::time::sleep;

pub type S = Step<u32, String>;

/// Log of events (path starts, completions) shared between paths and the test.
pub type Log = Arc<Mutex<Vec<String>>>;

pub fn log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// A path that records its start, sleeps `ms` (virtual time), records its completion and returns `out`.
pub fn ok_after(id: &str, ms: u64, out: &str, log: &Log) -> S {
    let (name, out, log) = (id.to_owned(), out.to_owned(), log.clone());
    Step::run(id, move |_x: u32, _ctx: StepContext| {
        let (name, out, log) = (name.clone(), out.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push(format!("done {name}"));
            Ok(out)
        }
    })
    .build()
    .unwrap()
}

/// A path that records its start, sleeps `ms` (virtual time) and fails with `message`.
pub fn fail_after(id: &str, ms: u64, message: &str, log: &Log) -> S {
    let (name, message, log) = (id.to_owned(), message.to_owned(), log.clone());
    Step::run(id, move |_x: u32, _ctx: StepContext| {
        let (name, message, log) = (name.clone(), message.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            sleep(Duration::from_millis(ms)).await;
            log.lock().unwrap().push(format!("fail {name}"));
            Err(NoeticError::other(message))
        }
    })
    .build()
    .unwrap()
}

/// What a blocking path saw.
#[derive(Default)]
pub struct Probe {
    pub started: AtomicBool,
    /// The path's `ctx.cancelled()` resolved.
    pub observed_cancel: AtomicBool,
    /// The path's future was dropped or finished.
    pub stopped: AtomicBool,
    /// `ctx.is_cancelled()` when the path stopped.
    pub cancelled_at_stop: AtomicBool,
}

/// Records that a path stopped (on drop, so it also fires when the path's future is dropped).
pub struct StopGuard {
    probe: Arc<Probe>,
    ctx: Context,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.probe.cancelled_at_stop.store(self.ctx.is_cancelled(), SeqCst);
        self.probe.stopped.store(true, SeqCst);
    }
}

/// A path that blocks until its context is cancelled, then returns the cancellation error.
pub fn blocker(id: &str, probe: &Arc<Probe>, log: &Log) -> S {
    let (name, probe, log) = (id.to_owned(), probe.clone(), log.clone());
    Step::run(id, move |_x: u32, ctx: StepContext| {
        let (name, probe, log) = (name.clone(), probe.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            probe.started.store(true, SeqCst);
            let _guard = StopGuard { probe: probe.clone(), ctx: ctx.context().clone() };
            ctx.cancelled().await;
            probe.observed_cancel.store(true, SeqCst);
            Err(ctx.cancelled_error())
        }
    })
    .build()
    .unwrap()
}

/// A path that sleeps for a long time, recording whether it ever finished its sleep and when it stopped.
pub fn long_sleeper(id: &str, probe: &Arc<Probe>, log: &Log) -> S {
    let (name, probe, log) = (id.to_owned(), probe.clone(), log.clone());
    Step::run(id, move |_x: u32, ctx: StepContext| {
        let (name, probe, log) = (name.clone(), probe.clone(), log.clone());
        async move {
            log.lock().unwrap().push(format!("start {name}"));
            probe.started.store(true, SeqCst);
            let _guard = StopGuard { probe: probe.clone(), ctx: ctx.context().clone() };
            sleep(Duration::from_secs(3600)).await;
            log.lock().unwrap().push(format!("done {name}"));
            Ok(format!("{name} slept"))
        }
    })
    .build()
    .unwrap()
}

/// Counts how many paths run at once.
#[derive(Default)]
pub struct Gauge {
    pub current: AtomicUsize,
    pub max: AtomicUsize,
    pub started: AtomicUsize,
}

pub struct GaugeGuard(Arc<Gauge>);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, SeqCst);
    }
}

pub fn enter(gauge: &Arc<Gauge>) -> GaugeGuard {
    let now = gauge.current.fetch_add(1, SeqCst) + 1;
    gauge.max.fetch_max(now, SeqCst);
    gauge.started.fetch_add(1, SeqCst);
    GaugeGuard(gauge.clone())
}

/// Six paths of different lengths that register with `gauge`; they fail when `fail` is set.
pub fn gauged_paths(gauge: &Arc<Gauge>, fail: bool) -> Vec<S> {
    (0..6u64)
        .map(|i| {
            let gauge = gauge.clone();
            Step::run(format!("g{i}"), move |_x: u32, _ctx: StepContext| {
                let gauge = gauge.clone();
                async move {
                    let _g = enter(&gauge);
                    sleep(Duration::from_millis(10 * ((i * 7) % 5 + 1))).await;
                    if fail { Err(NoeticError::other(format!("g{i} failed"))) } else { Ok(format!("g{i}")) }
                }
            })
            .build()
            .unwrap()
        })
        .collect()
}

/// Cancels `ctx` from another task after `ms` of virtual time.
pub fn cancel_after(ctx: &Context, ms: u64) -> tokio::task::JoinHandle<()> {
    let ctx = ctx.clone();
    tokio::spawn(async move {
        sleep(Duration::from_millis(ms)).await;
        ctx.cancel("parent stopped");
    })
}

pub fn unpack_partial(err: NoeticError) -> (String, Vec<PathSuccess>, Vec<PathFailure>) {
    match err {
        NoeticError::ForkPartial { step_id, succeeded, failed } => (step_id, succeeded, failed),
        other => panic!("expected ForkPartial, got {other:?}"),
    }
}

/// Awaits `fut`, failing the test (instead of hanging it) if it has not finished after a minute of virtual time.
pub async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut).await.expect("the fork hung: a path was never cancelled")
}

pub fn assert_cancelled_by_parent(result: Result<String, NoeticError>) {
    match result {
        Err(NoeticError::Cancelled { reason }) => assert_eq!(reason.as_deref(), Some("parent stopped")),
        other => panic!("expected Cancelled, got {other:?}"),
    }
}
