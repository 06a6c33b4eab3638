//! Executes `tool` steps: merge preset arguments, validate, approve, call, validate the result.

use std::sync::Arc;

use serde_json::Value;

use super::{guard, guard_async, step_failed};
use crate::context::EventKind;
use crate::decision::SteeringAction;
use crate::error::NoeticError;
use crate::layer::ToolCallParams;
use crate::layer::lifecycle;
use crate::scope::StepContext;
use crate::step::StepTool;
use crate::tool::call::check_structured;
use crate::tool::{ToolContext, ToolOutput};

/// Runs the step between `tool_call_started` and `tool_call_completed` events — the same events a
/// model-driven call emits, so whoever follows tool calls sees both kinds alike. The call id is the step id.
/// Every outcome but cancellation completes the call (a denied or failed call completes with the error).
pub(super) async fn execute<I: Send + 'static, O: Send + 'static>(
    s: &StepTool<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<O, NoeticError> {
    let name = s.tool.name();
    ctx.emit(|| EventKind::ToolCallStarted {
        step_id: s.id.clone(),
        call_id: s.id.clone(),
        tool: name.into(),
        arguments: "".into(),
    });
    let outcome = call(s, input, ctx).await;
    let completed = |is_error: bool, output: String| EventKind::ToolCallCompleted {
        step_id: s.id.clone(),
        call_id: s.id.clone(),
        tool: name.into(),
        is_error,
        output: output.into(),
        error_kind: is_error.then_some(crate::model::ToolErrorKind::Failed),
    };
    match &outcome {
        Ok(output) => ctx.emit(|| completed(false, output.to_text())),
        Err(e) if !e.is_cancelled() => ctx.emit(|| completed(true, e.to_string())),
        Err(_) => {}
    }
    let output = outcome?;
    let fail = |message: String| {
        step_failed(&s.id, NoeticError::ToolFailed { tool: name.to_owned(), message, source: None }, false)
    };
    (s.from_json)(output.into_value())
        .map_err(|e| fail(format!("the tool's result does not fit the step's output type: {e}")))
}

/// Merges, validates, gates, approves and calls; returns the tool's checked output.
async fn call<I: Send + 'static, O: Send + 'static>(
    s: &StepTool<I, O>,
    input: I,
    ctx: &StepContext,
) -> Result<ToolOutput, NoeticError> {
    // Made once: the tool's context shares it.
    let name: Arc<str> = s.tool.name().into();
    let fail = |message: String| {
        step_failed(&s.id, NoeticError::ToolFailed { tool: name.to_string(), message, source: None }, false)
    };
    let mut args = (s.to_json)(input).map_err(|e| fail(format!("the step input does not serialise to JSON: {e}")))?;
    match &mut args {
        Value::Object(map) => map.extend(s.args.iter().map(|(k, v)| (k.clone(), v.clone()))),
        Value::Null => args = Value::Object(s.args.clone()),
        other if !s.args.is_empty() => {
            return Err(fail(format!(
                "preset arguments need the step input to be a JSON object, but it is {other}; make the input a struct or map"
            )));
        }
        _ => {}
    }
    s.tool.input_schema().validate(&args).map_err(|problems| fail(format!("invalid arguments:\n{problems}")))?;
    let params = ToolCallParams { call_id: &s.id, name: &name, args: &args };
    let gate = ctx.run_cancellable(lifecycle::before_tool_call(&ctx.hooks(), ctx.layers(), params)).await?;
    if gate.decision.action != SteeringAction::Allow {
        return Err(NoeticError::SteeringDenied { guidance: gate.decision.guidance });
    }
    if let Some(rewritten) = gate.args() {
        s.tool.input_schema().validate(rewritten).map_err(|problems| {
            fail(format!("a gating layer rewrote the arguments into ones the tool does not accept:\n{problems}"))
        })?;
        args = rewritten.clone();
    }
    ctx.run_cancellable(async { Ok(crate::tool::call::approve(&ctx.hooks(), s.tool.as_ref(), &s.id, &args).await) })
        .await?
        .map_err(fail)?;
    let tcx = ToolContext {
        ctx: ctx.context().nested(),
        call_id: s.id.clone(),
        tool: name.clone(),
        event_schema: s.tool.event_schema().cloned(),
    };
    let call = async {
        let call = guard(&s.id, "tool", || s.tool.call(args, tcx))?;
        call.await.map_err(|e| NoeticError::ToolFailed {
            tool: name.to_string(),
            message: e.message.clone(),
            source: Some(crate::error::ErrorSource::new(e)),
        })
    };
    let output =
        ctx.run_cancellable(guard_async(&s.id, "tool", call)).await.map_err(|e| step_failed(&s.id, e, false))?;
    if let Some(schema) = s.tool.output_schema() {
        check_structured(schema, &output).map_err(|problems| {
            fail(format!("the tool returned a result that breaks its output schema:\n{problems}"))
        })?;
    }
    Ok(output)
}
