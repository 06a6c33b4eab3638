//! Runs one model-requested tool call and turns every outcome into a tool result: bad JSON, unknown tools,
//! invalid arguments, rejected approvals, tool errors, panics and invalid results all become error results the
//! model can read. Only cancellation escapes, as an error.

use std::sync::Arc;

use serde_json::Value;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::{Approval, ApprovalRequest, Tool, ToolContext, ToolErrorKind, ToolOutput, ToolSet};
use crate::context::{ApprovalRecord, Context, EventKind, HookContext};
use crate::decision::SteeringAction;
use crate::error::NoeticError;
use crate::error::{guard, guard_async};
use crate::layer::LayerStack;
use crate::layer::ToolCallParams;
use crate::layer::lifecycle::{self, Gate};
use crate::model::{ToolCall, ToolResult};

/// Asks the approver about a call of a tool that needs approval. `Err` carries the message for the model.
pub(crate) async fn approve(ctx: &HookContext<'_>, tool: &dyn Tool, call_id: &str, args: &Value) -> Result<(), String> {
    if !tool.needs_approval() {
        return Ok(());
    }
    let Some(approver) = ctx.approver() else {
        return Err(format!(
            "tool '{}' needs approval and no approver is configured, so the call was rejected",
            tool.name()
        ));
    };
    let request = ApprovalRequest::new(tool.name(), call_id, args.clone(), ctx.session_key().map(str::to_owned));
    let arguments_sha256 = request.arguments_sha256.clone();
    // Asked before the event says so: an approver that lists waiting calls (the server's) lists this one by the
    // time anyone who heard the event looks for it.
    let decision = approver.approve(request);
    let arguments = args.to_string();
    ctx.record_approval(ApprovalRecord::Asked {
        call_id,
        tool: tool.name(),
        arguments: &arguments,
        arguments_sha256: &arguments_sha256,
    });
    ctx.emit(|| EventKind::ApprovalRequested {
        call_id: call_id.into(),
        tool: tool.name().into(),
        arguments: args.clone(),
        arguments_sha256: arguments_sha256.clone(),
    });
    let approval = decision.await;
    let reason = match &approval {
        Approval::Approve => None,
        Approval::Reject { reason } => Some(reason.as_str()),
    };
    ctx.record_approval(ApprovalRecord::Decided { call_id, approved: approval == Approval::Approve, reason });
    ctx.emit(|| EventKind::ApprovalDecided {
        call_id: call_id.into(),
        tool: tool.name().into(),
        approved: approval == Approval::Approve,
        arguments_sha256,
        reason: match &approval {
            Approval::Approve => None,
            Approval::Reject { reason } => Some(reason.clone()),
        },
    });
    match approval {
        Approval::Approve => Ok(()),
        Approval::Reject { reason } => Err(format!("the call of '{}' was rejected: {reason}", tool.name())),
    }
}

/// The result of a tool call a steering decision stopped (the turn core decides its text), and the
/// `steering_denied` event.
fn steered(ctx: &Context, call: &ToolCall, gate: Gate) -> ToolResult {
    let result = crate::turn::steered_result(&call.id, &gate.decision);
    ctx.emit(|| EventKind::SteeringDenied {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        layers: gate.layers,
        action: gate.decision.action,
        error: NoeticError::SteeringDenied { guidance: gate.decision.guidance },
    });
    result
}

/// What a failed call gives the model, and its kind: the one place an error becomes a tool result. The text is
/// `Error: <message>` whatever the kind (messages say what to do); the kind travels in `tool_call_completed`.
fn error_result(call: &ToolCall, kind: ToolErrorKind, message: String) -> Outcome {
    (ToolResult::error(call.id.clone(), format!("Error: {message}")), Some(kind))
}

/// A call's result and, when it failed, the kind of failure.
pub(crate) type Outcome = (ToolResult, Option<ToolErrorKind>);

/// Decides which events a caller lets through (an `llm` step's `emit` setting).
pub(crate) type EmitFilter<'a> = &'a (dyn Fn(&EventKind) -> bool + Sync);

/// [`run_tool_call`] in the call's span (see [`crate::trace`]): the driver calls this one when a subscriber may
/// want spans, and the plain one otherwise, so that traces cost nothing without a subscriber.
pub(crate) async fn traced_tool_call(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    step_id: &Arc<str>,
    tools: &ToolSet,
    call: &ToolCall,
    allow: EmitFilter<'_>,
) -> Result<ToolResult, NoeticError> {
    let span = tool_span(&call.id, &call.name);
    if !span.is_disabled() && ctx.captures_content() {
        span.record("gen_ai.tool.call.arguments", &*call.arguments);
    }
    let result = run_tool_call(ctx, layers, step_id, tools, call, allow).instrument(span.clone()).await;
    if !span.is_disabled() {
        match &result {
            Ok((result, kind)) => trace_outcome(&span, result, *kind, ctx.captures_content()),
            Err(e) => {
                span.record("noetic.tool.outcome", "error");
                crate::trace::fail_with(&span, e);
            }
        }
    }
    result.map(|(result, _)| result)
}

/// A tool call's span (see [`crate::trace`]), disabled when no subscriber wants it. `outcome` is `ok`, `error`,
/// `denied` (steering or approval) or `skipped` (queued steering; then the span is only a marker).
pub(crate) fn tool_span(call_id: &str, name: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        noetic.tool.outcome = Empty,
        noetic.tool.result.size = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
        error.type = Empty,
    )
}

/// Records a finished call's outcome on its span; a failed call marks the span failed with its error kind.
pub(crate) fn trace_outcome(span: &Span, result: &ToolResult, kind: Option<ToolErrorKind>, content: bool) {
    span.record("noetic.tool.result.size", result.content.len());
    if content {
        span.record("gen_ai.tool.call.result", &*result.content);
    }
    if !result.is_error {
        span.record("noetic.tool.outcome", "ok");
        return;
    }
    let kind = kind.unwrap_or_default();
    let outcome = if kind == ToolErrorKind::PermissionDenied { "denied" } else { "error" };
    span.record("noetic.tool.outcome", outcome);
    crate::trace::fail(span, crate::trace::tool_error_kind(kind), &format_args!("the tool call failed ({outcome})"));
}

/// Runs `call` against `tools`, emitting `tool_call_started` / `tool_call_completed` where `allow` lets them; the
/// result and, when it failed, the kind of failure.
pub(crate) async fn run_tool_call(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    step_id: &Arc<str>,
    tools: &ToolSet,
    call: &ToolCall,
    allow: EmitFilter<'_>,
) -> Result<Outcome, NoeticError> {
    let watched = ctx.events().is_active();
    if watched {
        announce(ctx, step_id, call, allow);
    }
    let outcome = match prepare(ctx, layers, tools, call).await? {
        Prepared::Done(outcome) => outcome,
        Prepared::Ready(ready) => execute(ctx, call, ready).await?,
    };
    Ok(conclude(ctx, (step_id, tools, call), outcome, allow, watched))
}

/// Emits `tool_call_started` for `call` where `allow` lets it.
pub(crate) fn announce(ctx: &Context, step_id: &Arc<str>, call: &ToolCall, allow: EmitFilter<'_>) {
    let kind = EventKind::ToolCallStarted {
        step_id: step_id.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
    };
    if allow(&kind) {
        ctx.emit(|| kind);
    }
}

/// Lets the tool decorate the result of `call`, and emits `tool_call_completed` (when `watched`) where `allow`
/// lets it.
pub(crate) fn conclude(
    ctx: &Context,
    (step_id, tools, call): (&Arc<str>, &ToolSet, &ToolCall),
    (result, error_kind): Outcome,
    allow: EmitFilter<'_>,
    watched: bool,
) -> Outcome {
    let result = match tools.get(&call.name) {
        Some(tool) => tool.decorate_result(result),
        None => result,
    };
    if watched {
        let kind = EventKind::ToolCallCompleted {
            step_id: step_id.clone(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            is_error: result.is_error,
            output: result.content.clone(),
            error_kind: error_kind.filter(|_| result.is_error),
        };
        if allow(&kind) {
            ctx.emit(|| kind);
        }
    }
    (result, error_kind)
}

/// A call after its gates: its outcome already (bad arguments, unknown tool, denied, rejected), or ready to run.
pub(crate) enum Prepared<'t> {
    /// The call will not run; this is its outcome.
    Done(Outcome),
    /// The gates let the call through.
    Ready(Ready<'t>),
}

/// A call the gates let through: the tool and its validated arguments.
pub(crate) struct Ready<'t> {
    tool: &'t Arc<dyn Tool>,
    args: Value,
}

/// Everything before a call runs, in order: its arguments parsed, its tool found, the layers' `before_tool_call`
/// (which may rewrite the arguments), its arguments validated, its approval. Only cancellation is an error.
pub(crate) async fn prepare<'t>(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    tools: &'t ToolSet,
    call: &ToolCall,
) -> Result<Prepared<'t>, NoeticError> {
    let done = |kind, message| Ok(Prepared::Done(error_result(call, kind, message)));
    let args: Value = if noetic_core::json::blank(&call.arguments) {
        Value::Object(serde_json::Map::new())
    } else {
        // The usual arguments by hand; anything it is not sure of (and every error's wording) is serde's.
        match crate::json::parse_value(&call.arguments).map_or_else(|| serde_json::from_str(&call.arguments), Ok) {
            Ok(v) => {
                // The call goes back to the model in the next request: its encoder need not check the text again.
                crate::json::note_json(&call.arguments);
                v
            }
            Err(e) => {
                let message = format!(
                    "malformed JSON in tool arguments ({e}): {}; send the arguments as one JSON object",
                    call.arguments
                );
                return done(ToolErrorKind::InvalidArguments, message);
            }
        }
    };
    let Some(tool) = tools.get(&call.name) else {
        let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        let available = if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        let message = format!("unknown tool '{}'; available tools: {available}", call.name);
        return done(ToolErrorKind::NotFound, message);
    };
    let params = ToolCallParams { call_id: &call.id, name: &call.name, args: &args };
    let gate = ctx.run_cancellable(lifecycle::before_tool_call(ctx, layers, params)).await?;
    if gate.decision.action != SteeringAction::Allow {
        return Ok(Prepared::Done((steered(ctx, call, gate), Some(ToolErrorKind::PermissionDenied))));
    }
    let args = match gate.args() {
        Some(rewritten) => rewritten.clone(),
        None => args,
    };
    if let Err(problems) = tool.input_schema().validate(&args) {
        let message = format!("invalid arguments for tool '{}': {problems}", call.name);
        return done(ToolErrorKind::InvalidArguments, message);
    }
    // Most tools need no approval: then there is nothing to wait for, and no waiting to set up.
    if tool.needs_approval()
        && let Err(message) =
            ctx.run_cancellable(async { Ok(approve(ctx, tool.as_ref(), &call.id, &args).await) }).await?
    {
        return done(ToolErrorKind::PermissionDenied, message);
    }
    Ok(Prepared::Ready(Ready { tool, args }))
}

/// Runs a call its gates let through; a panic or an invalid result becomes an error result. Only cancellation is
/// an error.
pub(crate) async fn execute(ctx: &Context, call: &ToolCall, ready: Ready<'_>) -> Result<Outcome, NoeticError> {
    let Ready { tool, args } = ready;
    let tcx = ToolContext {
        ctx: ctx.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        event_schema: tool.event_schema().cloned(),
    };
    let run = async { Ok(guard(&call.name, "tool", || tool.call(args, tcx))?.await) };
    let outcome = match ctx.run_cancellable(guard_async(&call.name, "tool", run)).await {
        Ok(outcome) => outcome,
        Err(e) if e.is_cancelled() => return Err(e),
        Err(panic) => return Ok(error_result(call, ToolErrorKind::Failed, panic.to_string())),
    };
    let output = match outcome {
        Ok(output) => output,
        Err(e) => return Ok(error_result(call, e.kind, e.message)),
    };
    if let Some(schema) = tool.output_schema()
        && let Err(problems) = check_structured(schema, &output)
    {
        let message = format!("tool '{}' returned an invalid result: {problems}", call.name);
        return Ok(error_result(call, ToolErrorKind::Failed, message));
    }
    Ok((output.into_result(&call.id), None))
}

/// Checks a tool's structured data against its output schema; a tool that declares one must return some.
pub(crate) fn check_structured(schema: &super::Schema, output: &ToolOutput) -> Result<(), String> {
    match &output.structured {
        Some(value) => schema.validate(value),
        None => Err("it declares an output schema but returned no structured data".to_owned()),
    }
}
