//! Runs a group of tool calls together ([`Action::RunGroup`](crate::turn::Action::RunGroup)); the rules are the
//! turn core's ([`crate::turn::batch`]). The gates of every call run first, in call order; then the calls the
//! gates let through run at once. Each outcome but the last is committed to the journal as it comes and fed to
//! the core when no call runs any more; the last one is handed back to the driver's loop, which feeds it like any
//! other answer. With `interrupt_running`, a message queued meanwhile is taken at once; when it cancels the group
//! ([`interrupts`]), the calls still running are dropped and each gets the cancelled result as its outcome.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use tracing::{Instrument, Span};

use super::durable::{commit, poll};
use crate::context::{Checkpoints, EventKind};
use crate::error::NoeticError;
use crate::model::ToolErrorKind;
use crate::model::{ToolCall, ToolResult};
use crate::scope::StepContext;
use crate::tool::ToolSet;
use crate::tool::call::{
    EmitFilter, Outcome, Prepared, announce, conclude, execute, prepare, tool_span, trace_outcome,
};
use crate::turn::{Action, Effect, Input, TurnCore, TurnJournal, cancelled_result, interrupted_result, interrupts};

/// What a group runs with: the step's context, tools, event filter, journal and checkpoints.
pub(super) struct GroupEnv<'a> {
    pub(super) ctx: &'a StepContext,
    pub(super) step_id: &'a Arc<str>,
    pub(super) tools: &'a ToolSet,
    pub(super) allow: EmitFilter<'a>,
    pub(super) journal: Option<&'a dyn TurnJournal>,
    pub(super) path: &'a str,
    pub(super) steering: Option<&'a dyn Checkpoints>,
    pub(super) interrupt_running: bool,
}

/// Runs the group the core waits for and returns the input that ends it: its last outcome (a cancelled call's
/// too), or a failure. The outcomes before it are fed to the core here, in the order they came, once no call
/// runs any more (the core appends nothing before a group's last outcome, so nothing is seen earlier either way;
/// meanwhile the calls are the core's, borrowed, not copied).
pub(super) async fn run_group(
    env: &GroupEnv<'_>,
    core: &mut TurnCore,
    apply: &mut (dyn FnMut(Effect) + Send),
) -> Input {
    let (earlier, last) = outcomes(env, core).await;
    for input in earlier {
        core.advance_with(input, apply);
    }
    last
}

/// The outcomes of the group `core` waits for, in the order they came, the last apart.
async fn outcomes(env: &GroupEnv<'_>, core: &TurnCore) -> (Vec<Input>, Input) {
    let Action::RunGroup(group) = core.action() else {
        return (Vec::new(), lost());
    };
    let watched = env.ctx.events().is_active();
    let mut arrivals = env.steering.filter(|_| env.interrupt_running).and_then(|s| s.arrivals());
    if let Some(arrivals) = &arrivals {
        // A wake left from before the group (a message the last checkpoint already saw) is no arrival.
        let _ = futures::FutureExt::now_or_never(arrivals.notified());
    }
    // A journal that records the core's inputs gets each outcome as it comes (one that saves the core itself gets
    // them with the group's last, at the driver's next commit).
    let journal = env.journal.filter(|j| j.records_inputs());
    let mut earlier = Vec::with_capacity(group.calls.len());
    let mut finished: VecDeque<Input> = VecDeque::new();
    // One kind of future (the one below), so none is boxed.
    let mut running = FuturesUnordered::new();
    // The calls running now, by the index their future yields (kept only when steering may cancel them).
    let mut started: Vec<Option<&ToolCall>> = Vec::new();
    // The gates, in call order, before any call starts.
    for call in group.to_run() {
        if group.resumed && !env.tools.get(&call.name).is_some_and(|t| t.idempotent()) {
            finished.push_back(Input::ToolDone(told(env, call, interrupted_result(&call.id), None)));
            continue;
        }
        if watched {
            announce(env.ctx, env.step_id, call, env.allow);
        }
        let span = if crate::trace::on() { tool_span(&call.id, &call.name) } else { Span::none() };
        if !span.is_disabled() && env.ctx.hooks().captures_content() {
            span.record("gen_ai.tool.call.arguments", &*call.arguments);
        }
        match prepare(&env.ctx.hooks(), env.ctx.layers(), env.tools, call).instrument(span.clone()).await {
            Err(e) => return (earlier, Input::Failed(e)),
            Ok(Prepared::Done(outcome)) => {
                let outcome = finish(env, call, Ok(outcome), &span, watched);
                finished.push_back(outcome.map_or_else(Input::Failed, Input::ToolDone));
            }
            Ok(Prepared::Ready(ready)) => {
                let at = started.len();
                if arrivals.is_some() {
                    started.push(Some(call));
                }
                running.push(async move {
                    let outcome = execute(env.ctx, call, ready).instrument(span.clone()).await;
                    (at, finish(env, call, outcome, &span, watched))
                });
            }
        }
    }
    loop {
        let next = match finished.pop_front() {
            Some(input) => input,
            None => tokio::select! {
                biased;
                done = running.next() => match done {
                    Some((at, outcome)) => {
                        if let Some(done) = started.get_mut(at) {
                            *done = None;
                        }
                        outcome.map_or_else(Input::Failed, Input::ToolDone)
                    }
                    None => return (earlier, lost()),
                },
                () = arrived(arrivals.as_deref()) => {
                    // Taken messages stay pending: the checkpoint after the group injects them.
                    if let Input::Polled(p) = poll(env.steering, false)
                        && interrupts(&p, env.interrupt_running)
                    {
                        // Dropped, the running calls stop; each gets its outcome in call order.
                        running.clear();
                        arrivals = None;
                        finished.extend(started.drain(..).flatten().map(|call| {
                            let cancelled = cancelled_result(&call.id);
                            Input::ToolDone(told(env, call, cancelled, Some(ToolErrorKind::Cancelled)))
                        }));
                    }
                    continue;
                }
            },
        };
        if matches!(next, Input::Failed(_)) || (finished.is_empty() && running.is_empty()) {
            return (earlier, next);
        }
        if let Some(journal) = journal {
            journal.record(env.path, &next);
            // Written as it comes (without waiting: the next write follows it), so a crash keeps it.
            let committed =
                commit(env.ctx, journal, (env.step_id, env.path), Some(core), Vec::new(), (&[], false, false));
            if let Err(e) = committed.await {
                earlier.push(next);
                return (earlier, Input::Failed(e));
            }
        }
        earlier.push(next);
    }
}

/// A call's outcome, decorated, announced and traced.
fn finish(
    env: &GroupEnv<'_>,
    call: &ToolCall,
    outcome: Result<Outcome, NoeticError>,
    span: &Span,
    watched: bool,
) -> Result<ToolResult, NoeticError> {
    let outcome = outcome.map(|outcome| conclude(env.ctx, (env.step_id, env.tools, call), outcome, env.allow, watched));
    if !span.is_disabled() {
        match &outcome {
            Ok((result, kind)) => trace_outcome(span, result, *kind, env.ctx.hooks().captures_content()),
            Err(e) => {
                span.record("noetic.tool.outcome", "error");
                crate::trace::fail_with(span, e);
            }
        }
    }
    outcome.map(|(result, _)| result)
}

/// The outcome of a call that did not run to its end (a stopped process ran it, steering cancelled it), told like
/// any call's end.
fn told(env: &GroupEnv<'_>, call: &ToolCall, result: ToolResult, kind: Option<ToolErrorKind>) -> ToolResult {
    let done = EventKind::ToolCallCompleted {
        step_id: env.step_id.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        is_error: true,
        output: result.content.clone(),
        error_kind: kind,
    };
    if (env.allow)(&done) {
        env.ctx.emit(|| done);
    }
    result
}

/// Resolves when a message may have been queued; never without `arrivals`.
async fn arrived(arrivals: Option<&tokio::sync::Notify>) {
    match arrivals {
        Some(arrivals) => arrivals.notified().await,
        None => std::future::pending().await,
    }
}

fn lost() -> Input {
    Input::Failed(NoeticError::other("a group of tool calls ended without its last outcome; this is a bug"))
}
