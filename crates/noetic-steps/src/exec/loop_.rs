//! Executes `loop` steps.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::{execute_in as exec, guard, step_failed};
use crate::context::EventKind;
use crate::error::NoeticError;
use crate::model::Item;
use crate::scope::StepContext;
use crate::step::until::{Snapshot, Verdict};
use crate::step::{LoopErrorAction, StepLoop};

/// Runs the body steps once, piping outputs into inputs.
async fn run_body<I: Send + 'static, O: Send + 'static>(
    s: &StepLoop<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let mut input = input;
    let last = s.steps.len().saturating_sub(1);
    for (k, step) in s.steps.iter().enumerate() {
        let output = exec(step, input, ctx).await?;
        if k == last {
            return Ok(output);
        }
        let Some(chain) = s.chain else { break };
        input = chain(output);
    }
    Err(step_failed(&s.id, NoeticError::other("the loop body cannot pipe outputs into inputs"), false))
}

/// The input of the next iteration.
fn next_input<I, O>(s: &StepLoop<I, O>, output: O, verdict: &Verdict, ctx: &StepContext) -> Result<I, NoeticError> {
    match (&s.prepare_next, s.chain) {
        (Some(prepare), _) => guard(&s.id, "prepare_next function", || prepare(output, verdict, ctx)),
        (None, Some(chain)) => Ok(chain(output)),
        (None, None) => Err(NoeticError::other(format!("loop '{}' has no prepare_next function", s.id))),
    }
    .map_err(|e| step_failed(&s.id, e, false))
}

pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepLoop<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let start = Instant::now();
    let body_ctx = ctx.nested();
    let mut current = input;
    let mut last_output: Option<O> = None;
    let mut history: VecDeque<O> = VecDeque::new();
    let mut step_count = 0u32;
    let mut iterations = 0u32;
    loop {
        ctx.check_cancelled()?;
        iterations += 1;
        if iterations > s.max_iterations {
            return Err(NoeticError::LoopLimitExceeded { step_id: s.id.to_string(), max_iterations: s.max_iterations });
        }
        let output = match run_body(s, (s.clone_input)(&current), &body_ctx).await {
            Ok(output) => {
                step_count += 1;
                output
            }
            Err(e) if e.is_cancelled() => return Err(e),
            Err(error) => {
                let Some(on_error) = &s.on_error else { return Err(error) };
                let action = guard(&s.id, "on_error function", || on_error(&error, ctx))?;
                let name = match action {
                    LoopErrorAction::Abort => return Err(error),
                    LoopErrorAction::Retry => "retry",
                    LoopErrorAction::Skip => "skip",
                };
                ctx.emit(|| EventKind::LoopIterationError { step_id: s.id.clone(), action: name, error });
                match (action, &last_output) {
                    (LoopErrorAction::Skip, Some(previous)) => (s.clone_output)(previous),
                    _ => continue,
                }
            }
        };
        if s.max_history_size > 0 {
            if history.len() >= s.max_history_size {
                history.pop_front();
            }
            history.push_back((s.clone_output)(&output));
        }
        let verdict = {
            let text = (s.text_of)(&output);
            let snapshot = Snapshot {
                step_count,
                usage: ctx.usage(),
                cost: ctx.cost(),
                elapsed: start.elapsed(),
                last_output: &output,
                last_text: &text,
                history: &history,
                depth: ctx.depth(),
                last_step_meta: ctx.last_step_meta(),
            };
            guard(&s.id, "until predicate", || s.until.check(&snapshot))
                .unwrap_or_else(|e| Verdict::stop(format!("Predicate error: {e}")))
        };
        if verdict.stop {
            let message = match &s.inbox {
                None => None,
                Some(inbox) if s.park_timeout.is_zero() => inbox.try_recv(),
                Some(inbox) => match inbox.recv(ctx, s.park_timeout).await {
                    Ok(m) => Some(m),
                    Err(e) if e.is_cancelled() => return Err(e),
                    Err(_timeout_or_closed) => None,
                },
            };
            let Some(message) = message else { return Ok(output) };
            ctx.push_item(Item::developer(message));
            ctx.emit(|| EventKind::LoopInboxMessage { step_id: s.id.clone() });
        }
        last_output = Some((s.clone_output)(&output));
        current = next_input(s, output, &verdict, ctx)?;
    }
}
