//! Executes `llm` steps: rounds of model call → tool calls (in call order; consecutive concurrent-safe calls
//! together when the step allows it, see [`tool_group`](super::tool_group)) → results fed back, until the model
//! answers without tool calls. This is the thin async driver of [`TurnCore`](crate::turn::TurnCore),
//! which makes every decision; the driver performs its actions (model calls, reviews, tool calls, checkpoints).
//!
//! The step's [`StepMeta`] records the tool calls of the *accepted final* response, so `until::no_tool_calls`
//! around an `llm` step stops once the step has produced its answer.

use std::borrow::Cow;
use std::sync::Arc;

use tracing::{Instrument, Span};

use super::durable::{commit, finish, logs_inputs, poll, while_durable};
use super::llm_model::{call_model, chat_span, traced_model_call};
use super::tool_group::{GroupEnv, run_group};
use crate::context::{EventKind, HookContext};
use crate::error::{ConfigCode, ConfigError, NoeticError};
use crate::layer::{ModelCallParams, lifecycle};
use crate::model::{Item, StepMeta, ToolSpec};
use crate::scope::StepContext;
use crate::step::StepLlm;
use crate::tool::call::{run_tool_call, traced_tool_call};
use crate::turn::{Action, Effect, Finished, Input, Replay, TurnCore, interrupted_result};

/// Runs a tool call (awaits it), in its span when a subscriber may want one — without one, exactly as before traces
/// existed. A macro, not a function, so the untraced call is not wrapped in another future.
macro_rules! tool_call {
    ($ctx:expr, $step:expr, $tools:expr, $call:expr, $allow:expr) => {
        if crate::trace::on() {
            traced_tool_call(&$ctx.hooks(), $ctx.layers(), $step, $tools, $call, $allow).await
        } else {
            run_tool_call(&$ctx.hooks(), $ctx.layers(), $step, $tools, $call, $allow).await.map(|(result, _)| result)
        }
    };
}

/// Parses the final answer into the step's output type, validating it against the output schema first.
fn parse_output<I, O>(s: &StepLlm<I, O>, text: &str) -> Result<O, NoeticError> {
    let parse_error =
        |message: String| NoeticError::ModelParseError { step_id: s.id.to_string(), raw: text.to_owned(), message };
    if let Some(schema) = &s.output_schema {
        let value: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| parse_error(format!("the answer is not JSON: {e}")))?;
        schema.validate(&value).map_err(parse_error)?;
    }
    s.parse(text.trim()).map_err(parse_error)
}

pub(super) async fn execute<I, O>(s: &StepLlm<I, O>, input: I, ctx: &StepContext) -> Result<O, NoeticError> {
    // Borrowed for the step (the context outlives it): a clone would write the model's reference count, which
    // every turn on every thread shares.
    let hooks = ctx.hooks();
    let model = hooks.model().ok_or_else(|| {
        ConfigError::new(
            ConfigCode::NoModelProvider,
            format!("llm step '{}' needs a model (\"{}\") and the context has none", s.id, s.model),
            "build the step context with StepContext::builder().model(...) or run the step through a Runtime",
        )
    })?;
    // The tools as they are for each request (a source may change them while the turn runs); the calls of a
    // response run against the set its request offered.
    let current_tools = || match &s.tools {
        Some(tools) => Cow::Borrowed(tools),
        None => ctx.tools_now(),
    };
    let mut tools = current_tools();
    let mut specs: Arc<[ToolSpec]> = tools.specs();
    let allow = |kind: &EventKind| s.emit.allows(kind);
    let steering = hooks.turn_steering().cloned();
    let journal = hooks.journal().cloned();
    let path = journal.as_ref().map(|j| j.enter(&s.id)).unwrap_or_default();
    // The decisions are the core's; this loop performs its actions and feeds their outcomes back. A turn a
    // stopped process left in the journal continues where it was: a run that finished gives its answer again
    // without running, one that was running continues (its prompt is in the history already).
    let (mut core, mut input) = match journal.as_ref().and_then(|j| j.replay(&path)) {
        Some(Replay::Finished(finished)) => {
            let Finished { text, usage, cost } = finished;
            ctx.set_last_step_meta(StepMeta { tool_calls: Arc::from(Vec::new()), usage, cost });
            return parse_output(s, &text);
        }
        Some(Replay::Running(saved)) => (saved, Input::Resume),
        // A session log keeps the inputs: a new core fed them (effects left out: their items are in the history)
        // is where the step was.
        Some(Replay::Inputs(inputs)) => {
            let mut core =
                TurnCore::new(&*s.id, s.max_rounds, steering.is_some()).with_parallel_tools(s.parallel.limit);
            for recorded in inputs {
                core.advance_with(recorded, &mut |_| {});
            }
            (core, Input::Resume)
        }
        None => {
            if let Some(text) = s.prompt_of(input) {
                ctx.push_item(Item::user(text));
            }
            // A copy of the id: the step's own is a reference count every turn on every thread would write.
            let core = TurnCore::new(&*s.id, s.max_rounds, steering.is_some()).with_parallel_tools(s.parallel.limit);
            (core, Input::Start)
        }
    };
    // The latest model call's span, open until its review (which runs in it) is done.
    let mut chat = Span::none();
    // Whether everything since the last commit could be done again after a crash (see `TurnCommit::redoable`),
    // and whether the call that just ran could.
    let (mut redoable, mut idempotent_ran) = (false, false);
    loop {
        redoable &= match &input {
            Input::Polled(_) => true,
            Input::ToolDone(_) => idempotent_ran,
            _ => false,
        };
        idempotent_ran = false;
        // A journal that records inputs (a session log) keeps each one for its next commit (a resumption too, so
        // the log replays through a core as it happened).
        if let Some(journal) = journal.as_deref()
            && journal.records_inputs()
        {
            journal.record(&path, &input);
        }
        core.advance_with(input, &mut |effect| apply(ctx, s, effect));
        // A call about to run is journaled before it starts (model requests commit in their own arm, with the
        // steering they inject).
        let action = core.action();
        // The budget's checkpoint: before a model request or a tool call starts (and is journaled), never after.
        if let Err(reached) = spend(&hooks, &action) {
            input = Input::Failed(reached.into());
            continue;
        }
        if let Some(journal) = journal.as_deref()
            && core.is_at_durable_point()
            && !matches!(action, Action::CallModel { .. })
        {
            let starts = match action {
                Action::RunTool(call) => std::slice::from_ref(call),
                Action::RunGroup(group) if !group.resumed => group.calls,
                _ => &[],
            };
            if let Err(e) = commit(ctx, journal, (&s.id, &path), Some(&core), Vec::new(), (starts, true, false)).await {
                input = Input::Failed(e);
                continue;
            }
            redoable = true;
        }
        input = match action {
            Action::Poll { turn_start } => poll(steering.as_deref(), turn_start),
            Action::CallModel { round, tail } => match ctx.check_cancelled() {
                Ok(()) => {
                    let now = current_tools();
                    if !now.same_as(&tools) {
                        specs = now.specs();
                        tools = now;
                    }
                    // Injected messages and their user items are committed together before the request.
                    // The ids are only needed by a journal (they leave the stored queue in the same write).
                    let injected = steering.as_ref().map(|ts| ts.inject(ctx, journal.is_some())).unwrap_or_default();
                    let committed = match journal.as_deref() {
                        // Written while the model answers (a session log writes it before the turn's next commit).
                        Some(journal) => {
                            let redo = redoable && injected.is_empty();
                            let done = commit(ctx, journal, (&s.id, &path), Some(&core), injected, (&[], false, redo));
                            redoable = true;
                            done.await
                        }
                        None => Ok(()),
                    };
                    match committed {
                        Ok(()) => {
                            if crate::trace::on() {
                                chat = chat_span(s, model.as_ref(), round);
                            }
                            let tail = tail.to_vec();
                            let answer = if chat.is_disabled() {
                                call_model(s, ctx, model, &specs, round, tail, &chat).await
                            } else {
                                traced_model_call(s, ctx, model, &specs, round, tail, &chat).await
                            };
                            outcome(answer, Input::response)
                        }
                        Err(e) => Input::Failed(e),
                    }
                }
                Err(cancelled) => Input::Failed(cancelled),
            },
            Action::Review(response) => {
                let review = ModelCallParams { step_id: &s.id, model: &s.model, response };
                // The model call's span ends with its review.
                let span = std::mem::replace(&mut chat, Span::none());
                let review = lifecycle::after_model_call(&hooks, ctx.layers(), review);
                let at = (journal.as_deref(), (&*s.id, path.as_str()), &core);
                let gate = if span.is_disabled() {
                    while_durable(ctx, at, ctx.run_cancellable(review)).await
                } else {
                    while_durable(ctx, at, ctx.run_cancellable(review.instrument(span))).await
                };
                outcome(gate.and_then(|gate| gate), |gate| Input::Reviewed(gate.decision))
            }
            Action::Store(response) => {
                let at = (journal.as_deref(), (&*s.id, path.as_str()), &core);
                match while_durable(ctx, at, lifecycle::store(&hooks, ctx.layers(), response)).await {
                    Ok(()) => Input::Stored,
                    Err(e) => Input::Failed(e),
                }
            }
            Action::RunTool(call) => match ctx.check_cancelled() {
                Ok(()) => {
                    idempotent_ran = tools.get(&call.name).is_some_and(|t| t.idempotent());
                    outcome(tool_call!(ctx, &s.id, &tools, call, &allow), Input::ToolDone)
                }
                Err(cancelled) => Input::Failed(cancelled),
            },
            Action::Classify(calls) => {
                Input::Classified(calls.iter().map(|c| tools.get(&c.name).is_some_and(|t| t.concurrent())).collect())
            }
            Action::RunGroup(_) => match ctx.check_cancelled() {
                Ok(()) => {
                    let env = GroupEnv {
                        ctx,
                        step_id: &s.id,
                        tools: &tools,
                        allow: &allow,
                        journal: journal.as_deref(),
                        path: &path,
                        steering: steering.as_deref(),
                        interrupt_running: s.parallel.interrupt_running,
                    };
                    run_group(&env, &mut core, &mut |effect| apply(ctx, s, effect)).await
                }
                Err(cancelled) => Input::Failed(cancelled),
            },
            // A call that was running when the process stopped runs again only if its tool says that is
            // harmless; any other gets the interrupted result (it may or may not have taken effect).
            Action::ResumeTool(call) => match tools.get(&call.name) {
                Some(tool) if tool.idempotent() => match ctx.check_cancelled() {
                    Ok(()) => outcome(tool_call!(ctx, &s.id, &tools, call, &allow), Input::ToolDone),
                    Err(cancelled) => Input::Failed(cancelled),
                },
                _ => {
                    // Told like any call's end, so whoever watches the resumed turn sees which call was cut.
                    let result = interrupted_result(&call.id);
                    let done = EventKind::ToolCallCompleted {
                        step_id: s.id.clone(),
                        call_id: call.id.clone(),
                        tool: call.name.clone(),
                        is_error: true,
                        output: result.content.clone(),
                        error_kind: None,
                    };
                    if s.emit.allows(&done) {
                        ctx.emit(|| done);
                    }
                    Input::ToolDone(result)
                }
            },
            Action::Finish { text, usage, cost } => {
                if let Some(journal) = journal.as_deref() {
                    let finished = Finished { text: text.clone(), usage, cost };
                    finish(ctx, journal, (&s.id, &path), Some(finished)).await?;
                }
                ctx.set_last_step_meta(StepMeta { tool_calls: Arc::from(Vec::new()), usage, cost });
                return parse_output(s, &text);
            }
            Action::Fail(error) => {
                if let Some(journal) = journal.as_deref()
                    && let Err(lost) = finish(ctx, journal, (&s.id, &path), None).await
                {
                    tracing::error!(step_id = %s.id, error = %lost, "could not journal the end of a failed turn");
                }
                return Err(error);
            }
        };
    }
}

/// Asks the turn's budget whether `action` may start (counting the tool calls it starts). Spawned children and
/// fork paths ask the same meter as their turn, so they cannot spend past it.
fn spend(ctx: &HookContext<'_>, action: &Action<'_>) -> Result<(), crate::budget::BudgetReached> {
    let Some(meter) = ctx.meter() else { return Ok(()) };
    match action {
        Action::CallModel { .. } => meter.before_model_call(),
        Action::RunTool(_) => meter.before_tool_calls(1, logs_inputs(ctx)),
        Action::RunGroup(group) => {
            meter.before_tool_calls(u64::try_from(group.calls.len()).unwrap_or(u64::MAX), logs_inputs(ctx))
        }
        _ => Ok(()),
    }
}

fn outcome<T>(result: Result<T, NoeticError>, ok: impl FnOnce(T) -> Input) -> Input {
    result.map_or_else(Input::Failed, ok)
}

/// Applies one effect of the core: appends items, emits the events.
fn apply<I, O>(ctx: &StepContext, s: &StepLlm<I, O>, effect: Effect) {
    match effect {
        Effect::Append(items) => ctx.extend_items(items),
        Effect::Push(item) => ctx.push_item(item),
        Effect::Skipped { call_id, tool } => {
            trace_skipped(&ctx.hooks(), &call_id, &tool);
            ctx.emit(|| EventKind::ToolSkipped {
                step_id: s.id.clone(),
                call_id,
                tool,
                reason: "queued user steering message".to_owned(),
            });
        }
        Effect::Steered { action, guidance } => {
            let kind = EventKind::ModelResponseSteered { step_id: s.id.clone(), action, guidance };
            if s.emit.allows(&kind) {
                ctx.emit(|| kind);
            }
        }
    }
}

/// A call queued steering skipped: an event on the turn's span, and a tool span that only marks the call.
fn trace_skipped(ctx: &HookContext<'_>, call_id: &str, tool: &str) {
    if let Some(turn) = ctx.turn_steering().and_then(|s| s.span()) {
        tracing::info!(parent: turn, gen_ai.tool.call.id = call_id, gen_ai.tool.name = tool, "tool.skipped");
    }
    let span = crate::tool::call::tool_span(call_id, tool);
    span.record("noetic.tool.outcome", "skipped");
}
