//! Executes `fork` steps.
//!
//! Paths start in path order, at most `concurrency` running at a time, each in a child context. A `run` path (the
//! common kind) is polled once as it starts: one that finishes there needs no future of its own, and the next path's
//! context is made in its context's allocation. Paths still running are polled in a `FuturesUnordered` inside the
//! fork's own task. Whatever the mode, a path that is cancelled is also awaited until it has stopped, so no path
//! outlives the fork.

use std::future::Future;
use std::task::Poll;

use futures::future::Either;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use super::run::{self, Started};
use super::{execute as exec, guard, step_failed};
use crate::error::{NoeticError, PathFailure, PathSuccess};
use crate::layer::{Outcome, lifecycle};
use crate::scope::StepContext;
use crate::step::fork::{Merge, PathList};
use crate::step::{SettleResult, Step, StepFork, StepFuture};

struct Paths<'a, I, O, F> {
    fork: &'a StepFork<I, O>,
    input: I,
    parent: &'a StepContext,
    steps: &'a [Step<I, O>],
    /// The contexts of the paths still running, to cancel them.
    contexts: Vec<Option<StepContext>>,
    next: usize,
    running: FuturesUnordered<F>,
    /// A finished path's context, for the next path's to be made in.
    spare: Option<StepContext>,
    /// The paths' layers (the parent's) have lifecycle hooks.
    lifecycle: bool,
    start: StartPath<I, O, F>,
}

/// Starts a path (see [`start_path`]); a function pointer, so that [`Paths`] can name its running paths' type.
type StartPath<I, O, F> =
    fn(&Step<I, O>, I, &StepContext, &StepContext, usize, bool, &mut std::task::Context<'_>) -> Started<O, F>;

/// Starts the path `index`: its step on `input` in `path_ctx`. A `run` step without retries, outside traces and
/// lifecycle hooks, is polled at once and may finish there; other paths are running futures yielding their index
/// with their outcome.
fn start_path<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    parent: &StepContext,
    path_ctx: &StepContext,
    index: usize,
    lifecycle: bool,
    cx: &mut std::task::Context<'_>,
) -> Started<O, impl Future<Output = (usize, Result<O, NoeticError>)> + Send + use<I, O>> {
    let running = match step {
        Step::Run(s) if s.retry.is_none() && !lifecycle && !crate::trace::on() => {
            match run::start(s, input, path_ctx, cx) {
                Started::Done(r) => return Started::Done(r),
                Started::Running(rest) => Either::Left(rest),
            }
        }
        _ if !lifecycle => Either::Right(exec(step, input, path_ctx)),
        _ => {
            let run = exec(step, input, path_ctx);
            let path: StepFuture<O> = Box::pin(run_path(parent.clone(), path_ctx.clone(), run));
            Either::Right(path)
        }
    };
    Started::Running(running.map(move |r| (index, r)))
}

impl<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>> Paths<'_, I, O, F> {
    fn len(&self) -> usize {
        self.steps.len()
    }

    /// The next path outcome (index and result): of a path started now that finished at once, or of a running
    /// path; `None` once no path runs and none may start. Starts paths in path order while fewer than the limit
    /// run and the parent is not cancelled.
    fn poll_outcome(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<(usize, Result<O, NoeticError>)>> {
        let limit = self.fork.concurrency.unwrap_or(usize::MAX);
        // One look at the parent's cancellation per path started, just before it starts.
        while self.running.len() < limit && self.next < self.len() && !self.parent.is_cancelled() {
            let i = self.next;
            self.next += 1;
            let path_ctx = self.parent.fork_child_reusing(self.spare.take());
            let input = (self.fork.clone_input)(&self.input);
            match (self.start)(&self.steps[i], input, self.parent, &path_ctx, i, self.lifecycle, cx) {
                Started::Done(r) => {
                    self.spare = Some(path_ctx);
                    return Poll::Ready(Some((i, r)));
                }
                Started::Running(path) => {
                    self.contexts[i] = Some(path_ctx);
                    self.running.push(path);
                }
            }
        }
        let outcome = futures::ready!(self.running.poll_next_unpin(cx));
        if let Some((i, _)) = &outcome {
            self.spare = self.contexts[*i].take();
        }
        Poll::Ready(outcome)
    }

    async fn outcome(&mut self) -> Option<(usize, Result<O, NoeticError>)> {
        std::future::poll_fn(|cx| self.poll_outcome(cx)).await
    }

    /// Starts no more paths.
    fn stop_starting(&mut self) {
        self.next = self.len();
    }

    /// Cancels every running path, and starts no more.
    fn cancel_running(&mut self, reason: &str) {
        self.stop_starting();
        for c in self.contexts.iter().flatten() {
            c.cancel(reason);
        }
    }

    /// Runs the paths left to start (none once starting stopped) and waits until every running path has stopped,
    /// keeping their outcomes.
    async fn drain(&mut self, results: &mut [Option<Result<O, NoeticError>>]) {
        while let Some((i, r)) = self.outcome().await {
            results[i] = Some(r);
        }
    }

    fn step_id(&self, i: usize) -> String {
        self.steps[i].id().to_owned()
    }
}

/// Runs one path between its layers' `on_spawn` and `on_return` (on success), then completes the path's layers.
async fn run_path<O>(
    parent: StepContext,
    path: StepContext,
    run: impl Future<Output = Result<O, NoeticError>>,
) -> Result<O, NoeticError> {
    if let Err(e) = lifecycle::spawn(&parent.hooks(), &path.hooks(), path.layers()).await {
        // The path already failed; a panic while completing it is logged by `complete`.
        let _ = lifecycle::complete(&path.hooks(), path.layers(), Outcome::Failure).await;
        return Err(e);
    }
    let result = run.await;
    if result.is_ok() {
        lifecycle::return_(&parent.hooks(), &path.hooks(), path.layers()).await;
    }
    let completed = lifecycle::complete(&path.hooks(), path.layers(), Outcome::of(&result)).await;
    result.and_then(|v| completed.map(|()| v))
}

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepFork<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let made;
    let steps = match &s.paths {
        PathList::Fixed(steps) => &steps[..],
        PathList::Made(paths) => {
            made = guard(&s.id, "paths function", || paths(&input, ctx)).map_err(|e| step_failed(&s.id, e, false))?;
            &made[..]
        }
    };
    let n = steps.len();
    let mut paths = Paths {
        fork: s,
        input,
        parent: ctx,
        steps,
        contexts: (0..n).map(|_| None).collect(),
        next: 0,
        running: FuturesUnordered::new(),
        spare: None,
        lifecycle: ctx.layers().has_lifecycle(),
        start: start_path::<I, O>,
    };
    let mut results: Vec<Option<Result<O, NoeticError>>> = (0..n).map(|_| None).collect();
    match &s.merge {
        Merge::Race => race(&mut paths, &mut results).await,
        Merge::All(merge) => {
            let failed = all(&mut paths, &mut results).await;
            ctx.check_cancelled()?;
            if failed {
                return Err(partial(&paths, results));
            }
            let values: Vec<O> = results.into_iter().flatten().filter_map(Result::ok).collect();
            guard(&s.id, "merge function", || merge(values, ctx))?.map_err(|e| step_failed(&s.id, e, false))
        }
        Merge::Settle(merge) => {
            paths.drain(&mut results).await;
            ctx.check_cancelled()?;
            let settled: Vec<SettleResult<O>> = results
                .into_iter()
                .enumerate()
                .map(|(i, r)| SettleResult {
                    step_id: paths.step_id(i),
                    result: r.unwrap_or_else(|| Err(NoeticError::cancelled("path was not started"))),
                })
                .collect();
            guard(&s.id, "merge function", || merge(settled, ctx))?.map_err(|e| step_failed(&s.id, e, false))
        }
    }
}

/// Runs `All` mode; returns true when some path failed.
async fn all<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>>(
    paths: &mut Paths<'_, I, O, F>,
    results: &mut [Option<Result<O, NoeticError>>],
) -> bool {
    let mut failed = false;
    while let Some((i, r)) = paths.outcome().await {
        if let Err(e) = &r {
            if !failed && !e.is_cancelled() {
                let reason = format!("fork '{}' sibling failed", paths.fork.id);
                paths.cancel_running(&reason);
            }
            failed = true;
            paths.stop_starting();
        }
        results[i] = Some(r);
    }
    failed
}

async fn race<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>>(
    paths: &mut Paths<'_, I, O, F>,
    results: &mut [Option<Result<O, NoeticError>>],
) -> Result<O, NoeticError> {
    while let Some((i, r)) = paths.outcome().await {
        match r {
            Ok(v) => {
                paths.cancel_running("race lost");
                paths.drain(results).await;
                return Ok(v);
            }
            Err(e) => results[i] = Some(Err(e)),
        }
    }
    paths.parent.check_cancelled()?;
    Err(partial(paths, results.iter_mut().map(Option::take).collect()))
}

/// The `ForkPartial` error: successes and failures in path order; paths never started count as cancelled.
fn partial<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>>(
    paths: &Paths<'_, I, O, F>,
    results: Vec<Option<Result<O, NoeticError>>>,
) -> NoeticError {
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    for (index, r) in results.into_iter().enumerate() {
        let step_id = paths.step_id(index);
        match r {
            Some(Ok(v)) => succeeded.push(PathSuccess { step_id, index, value: Some((paths.fork.wrap_value)(v)) }),
            Some(Err(error)) => failed.push(PathFailure { step_id, index, error }),
            None => failed.push(PathFailure {
                step_id,
                index,
                error: NoeticError::cancelled(format!("fork '{}' stopped before this path started", paths.fork.id)),
            }),
        }
    }
    NoeticError::ForkPartial { step_id: paths.fork.id.to_string(), succeeded, failed }
}
