//! The gating hooks: every layer with [`Gates`] asked in slot order, those that answer at once first without an
//! await; the aggregate is the most restrictive decision (deny > guide > allow, a deny short-circuits, guide texts
//! joined with a newline).

use std::time::Duration;

use super::{HookFailure, Progress, describe, fatal, now, timed};
use crate::context::Context;
use crate::decision::{SteeringAction, SteeringDecision};
use crate::error::NoeticError;
use crate::layer::{Gates, HookErrorPolicy, MemoryLayer, ModelCallParams, ToolCallParams};

/// The aggregate of the gating layers' decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// The most restrictive decision.
    pub decision: SteeringDecision,
    /// The ids of the layers that decided it (empty for allow).
    pub layers: Vec<String>,
}

impl Gate {
    fn allow() -> Self {
        Gate { decision: SteeringDecision::allow(), layers: Vec::new() }
    }
}

/// The gating layers' decisions so far.
#[derive(Default)]
struct Gating {
    guides: Vec<(String, Option<String>)>,
}

impl Gating {
    /// Takes one layer's answer; `Some` when it ends the gate (a deny).
    fn note(
        &mut self,
        layer: &dyn MemoryLayer,
        hook_name: &str,
        answer: Result<SteeringDecision, HookFailure>,
    ) -> Result<Option<Gate>, NoeticError> {
        let decision = match answer {
            Ok(d) => d,
            Err(f) => {
                let why = describe(&f);
                fatal(layer.id(), hook_name, f)?;
                tracing::warn!(layer = layer.id(), error = %why, "gating hook failed");
                match layer.on_hook_error() {
                    HookErrorPolicy::Abstain => return Ok(None),
                    HookErrorPolicy::Deny => {
                        SteeringDecision::deny(format!("gating layer '{}' failed ({why})", layer.id()))
                    }
                }
            }
        };
        match decision.action {
            SteeringAction::Deny => return Ok(Some(Gate { decision, layers: vec![layer.id().to_owned()] })),
            SteeringAction::Guide => self.guides.push((layer.id().to_owned(), decision.guidance)),
            SteeringAction::Allow => {}
        }
        Ok(None)
    }

    /// The aggregate once every layer allowed or guided.
    fn finish(self) -> Gate {
        if self.guides.is_empty() {
            return Gate::allow();
        }
        let texts: Vec<&str> = self.guides.iter().filter_map(|(_, g)| g.as_deref()).filter(|g| !g.is_empty()).collect();
        let guidance = (!texts.is_empty()).then(|| texts.join("\n"));
        Gate {
            decision: SteeringDecision { action: SteeringAction::Guide, guidance },
            layers: self.guides.into_iter().map(|(id, _)| id).collect(),
        }
    }
}

/// One gating hook's call.
#[derive(Clone, Copy)]
enum GateCall<'a> {
    BeforeToolCall(ToolCallParams<'a>),
    AfterModelCall(ModelCallParams<'a>),
}

impl<'a> GateCall<'a> {
    fn name(self) -> &'static str {
        match self {
            GateCall::BeforeToolCall(_) => "before_tool_call",
            GateCall::AfterModelCall(_) => "after_model_call",
        }
    }

    fn timeout(self, layer: &dyn MemoryLayer) -> Option<Duration> {
        match self {
            GateCall::BeforeToolCall(_) => layer.timeouts().before_tool_call,
            GateCall::AfterModelCall(_) => layer.timeouts().after_model_call,
        }
    }

    fn now(self, gates: &dyn Gates, ctx: &Context) -> Option<Result<SteeringDecision, NoeticError>> {
        match self {
            GateCall::BeforeToolCall(call) => gates.before_tool_call_now(ctx, call),
            GateCall::AfterModelCall(call) => gates.after_model_call_now(ctx, call),
        }
    }

    fn hook(
        self,
        gates: &'a dyn Gates,
        ctx: &'a Context,
    ) -> futures::future::BoxFuture<'a, Result<SteeringDecision, NoeticError>> {
        match self {
            GateCall::BeforeToolCall(call) => gates.before_tool_call(ctx, call),
            GateCall::AfterModelCall(call) => gates.after_model_call(ctx, call),
        }
    }
}

/// Asks the layers that answer at once without an await (so the hook's future stays small); from the first that
/// must be awaited on, the rest run in a boxed future, so a call whose layers never wait makes none.
async fn gate(ctx: &Context, call: GateCall<'_>) -> Result<Gate, NoeticError> {
    match gate_at_once(ctx, call)? {
        Progress::Done(gate) => Ok(gate),
        Progress::Wait(start, gating) => Box::pin(gate_rest(ctx, call, start, gating)).await,
    }
}

/// The gate, as far as the layers answer at once.
fn gate_at_once(ctx: &Context, call: GateCall<'_>) -> Result<Progress<Gate, Gating>, NoeticError> {
    let mut gating = Gating::default();
    for (i, layer) in ctx.layers().iter().enumerate() {
        let layer: &dyn MemoryLayer = layer.as_ref();
        let Some(gates) = layer.as_gates() else { continue };
        match now(|| call.now(gates, ctx)) {
            Some(answer) => {
                if let Some(gate) = gating.note(layer, call.name(), answer)? {
                    return Ok(Progress::Done(gate));
                }
            }
            None => return Ok(Progress::Wait(i, gating)),
        }
    }
    Ok(Progress::Done(gating.finish()))
}

/// Asks the layers from the `start`th on, waiting where they need it.
async fn gate_rest<'a>(
    ctx: &'a Context,
    call: GateCall<'a>,
    start: usize,
    mut gating: Gating,
) -> Result<Gate, NoeticError> {
    for layer in ctx.layers().iter().skip(start) {
        let layer: &dyn MemoryLayer = layer.as_ref();
        let Some(gates) = layer.as_gates() else { continue };
        let answer = match now(|| call.now(gates, ctx)) {
            Some(answer) => answer,
            None => timed(call.timeout(layer), || call.hook(gates, ctx)).await,
        };
        if let Some(gate) = gating.note(layer, call.name(), answer)? {
            return Ok(gate);
        }
    }
    Ok(gating.finish())
}

/// Asks every layer about a tool call.
pub async fn before_tool_call(ctx: &Context, call: ToolCallParams<'_>) -> Result<Gate, NoeticError> {
    if !ctx.layers().has_gates() {
        return Ok(Gate::allow());
    }
    gate(ctx, GateCall::BeforeToolCall(call)).await
}

/// Asks every layer about a model response.
pub async fn after_model_call(ctx: &Context, call: ModelCallParams<'_>) -> Result<Gate, NoeticError> {
    if !ctx.layers().has_gates() {
        return Ok(Gate::allow());
    }
    gate(ctx, GateCall::AfterModelCall(call)).await
}
