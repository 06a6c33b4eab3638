//! Executes `fork` steps.
//!
//! Paths run concurrently inside the fork's own task (a `FuturesUnordered`), each in a child context, at most
//! `concurrency` at a time, started in path order. Whatever the mode, a path that is cancelled is also awaited
//! until it has stopped, so no path outlives the fork.

use std::future::Future;

use futures::future::Either;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};

use super::{execute_unboxed as exec_unboxed, guard, step_failed};
use crate::context::Context;
use crate::error::{NoeticError, PathFailure, PathSuccess};
use crate::layer::{Outcome, lifecycle};
use crate::step::fork::Merge;
use crate::step::{SettleResult, Step, StepFork};

struct Paths<'a, I, O, F> {
    fork: &'a StepFork<I, O>,
    input: I,
    parent: &'a Context,
    steps: Vec<Step<I, O>>,
    contexts: Vec<Option<Context>>,
    next: usize,
    running: FuturesUnordered<F>,
    start: StartPath<I, O, F>,
}

/// Makes a started path's future (see [`path`]); a function pointer, so that [`Paths`] can name its type.
type StartPath<I, O, F> = fn(&Step<I, O>, I, &Context, Context, usize) -> F;

/// A started path's future, yielding its index with its outcome. A `run` step's future is kept in the path's
/// task itself (a fork of many `run` paths makes one allocation less per path); other steps' are boxed.
fn path<I: Send + 'static, O: Send + 'static>(
    step: &Step<I, O>,
    input: I,
    parent: &Context,
    path_ctx: Context,
    index: usize,
) -> impl Future<Output = (usize, Result<O, NoeticError>)> + Send + use<I, O> {
    let run = exec_unboxed(step, input, &path_ctx);
    // Without lifecycle hooks in scope a path's lifecycle does nothing: the step's own future is the path.
    let run = if !path_ctx.layers().has_lifecycle() {
        Either::Left(run)
    } else {
        Either::Right(Box::pin(run_path(parent.clone(), path_ctx, run)))
    };
    run.map(move |r| (index, r))
}

impl<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>> Paths<'_, I, O, F> {
    fn len(&self) -> usize {
        self.steps.len()
    }

    /// Starts the next queued path (there is one, and the parent is not cancelled).
    fn start_next_unchecked(&mut self) {
        let i = self.next;
        self.next += 1;
        let path_ctx = self.parent.fork_child();
        let input = (self.fork.clone_input)(&self.input);
        let run = (self.start)(&self.steps[i], input, self.parent, path_ctx.clone(), i);
        self.contexts[i] = Some(path_ctx);
        self.running.push(run);
    }

    fn start_up_to_limit(&mut self) {
        let limit = self.fork.concurrency.unwrap_or(usize::MAX);
        // One look at the parent's cancellation per path started (the same as before and after each start).
        while self.running.len() < limit && self.next < self.len() && !self.parent.is_cancelled() {
            self.start_next_unchecked();
        }
    }

    /// Cancels every started path except `keep`, and stops starting new ones.
    fn cancel_others(&mut self, keep: Option<usize>, reason: &str) {
        self.next = self.len();
        for (i, c) in self.contexts.iter().enumerate() {
            if Some(i) != keep
                && let Some(c) = c
            {
                c.cancel(reason);
            }
        }
    }

    /// Waits until every running path has stopped.
    async fn drain(&mut self, results: &mut [Option<Result<O, NoeticError>>]) {
        while let Some((i, r)) = self.running.next().await {
            results[i] = Some(r);
        }
    }

    fn step_id(&self, i: usize) -> String {
        self.steps[i].id().to_owned()
    }
}

/// Runs one path between its layers' `on_spawn` and `on_return` (on success), then completes the path's layers.
async fn run_path<O>(
    parent: Context,
    path: Context,
    run: impl Future<Output = Result<O, NoeticError>>,
) -> Result<O, NoeticError> {
    if let Err(e) = lifecycle::spawn(&parent, &path).await {
        // The path already failed; a panic while completing it is logged by `complete`.
        let _ = lifecycle::complete(&path, Outcome::Failure).await;
        return Err(e);
    }
    let result = run.await;
    if result.is_ok() {
        lifecycle::return_(&parent, &path).await;
    }
    let completed = lifecycle::complete(&path, Outcome::of(&result)).await;
    result.and_then(|v| completed.map(|()| v))
}

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepFork<I, O>,
    input: I,
    ctx: &Context,
) -> Result<O, NoeticError> {
    let steps = guard(&s.id, "paths function", || (s.paths)(&input, ctx)).map_err(|e| step_failed(&s.id, e, false))?;
    let n = steps.len();
    let mut paths = Paths {
        fork: s,
        input,
        parent: ctx,
        steps,
        contexts: (0..n).map(|_| None).collect(),
        next: 0,
        running: FuturesUnordered::new(),
        start: path::<I, O>,
    };
    let mut results: Vec<Option<Result<O, NoeticError>>> = (0..n).map(|_| None).collect();
    paths.start_up_to_limit();
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
            while let Some((i, r)) = paths.running.next().await {
                results[i] = Some(r);
                paths.start_up_to_limit();
            }
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
    while let Some((i, r)) = paths.running.next().await {
        if let Err(e) = &r {
            if !failed && !e.is_cancelled() {
                let reason = format!("fork '{}' sibling failed", paths.fork.id);
                paths.cancel_others(Some(i), &reason);
            }
            failed = true;
        }
        results[i] = Some(r);
        if !failed {
            paths.start_up_to_limit();
        }
    }
    failed
}

async fn race<I: Send + 'static, O: Send + 'static, F: Future<Output = (usize, Result<O, NoeticError>)>>(
    paths: &mut Paths<'_, I, O, F>,
    results: &mut [Option<Result<O, NoeticError>>],
) -> Result<O, NoeticError> {
    while let Some((i, r)) = paths.running.next().await {
        match r {
            Ok(v) => {
                paths.cancel_others(Some(i), "race lost");
                paths.drain(results).await;
                return Ok(v);
            }
            Err(e) => {
                results[i] = Some(Err(e));
                paths.start_up_to_limit();
            }
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
