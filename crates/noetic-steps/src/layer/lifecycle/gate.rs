//! The gating hooks: every layer with [`Gates`] asked in slot order, those that answer at once first without an
//! await; the aggregate is the most restrictive decision (deny > guide > allow, a deny short-circuits, guide texts
//! joined with a newline). A layer that rewrites a call's arguments starts the round again with the new ones, so
//! every gate has judged the arguments that run (see [`ToolCallAction`]).

use std::time::Duration;

use serde_json::Value;

use super::{HookFailure, Progress, describe, fatal, now, timed};
use crate::context::{EventKind, HookContext, RewriteRecord};
use crate::decision::{SteeringAction, SteeringDecision};
use crate::error::NoeticError;
use crate::layer::{
    Gates, HookErrorPolicy, LayerStack, MAX_REWRITES, MemoryLayer, ModelCallParams, ToolCallAction, ToolCallParams,
};

/// The aggregate of the gating layers' decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// The most restrictive decision.
    pub decision: SteeringDecision,
    /// The ids of the layers that decided it (empty for allow).
    pub layers: Vec<String>,
    /// The rewrites of the call's arguments, in the order the layers made them (`before_tool_call` only); the call
    /// runs with the last one's arguments. Kept whatever the decision: a call denied after a rewrite was judged
    /// on the rewritten arguments.
    pub rewrites: Vec<GateRewrite>,
}

/// One layer's rewrite of a call's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateRewrite {
    /// The layer that rewrote them.
    pub layer: String,
    /// The arguments before.
    pub before: Value,
    /// The arguments after.
    pub after: Value,
    /// Why.
    pub reason: String,
}

impl Gate {
    fn allow() -> Self {
        Gate { decision: SteeringDecision::allow(), layers: Vec::new(), rewrites: Vec::new() }
    }

    /// The arguments the call runs with when the gates rewrote them.
    pub fn args(&self) -> Option<&Value> {
        self.rewrites.last().map(|r| &r.after)
    }
}

/// What to do after one layer's answer.
enum Next {
    /// Ask the next layer.
    Go,
    /// The gate is decided.
    End(Gate),
    /// The arguments changed: ask every layer again with these.
    Again(Value),
}

/// The gating layers' decisions so far.
#[derive(Default)]
struct Gating {
    guides: Vec<(String, Option<String>)>,
    rewrites: Vec<GateRewrite>,
}

impl Gating {
    /// Takes one layer's answer about `call` (with the arguments the layer saw). A rewrite is kept in the
    /// session's records and reported when it is made, so the ledger holds it before the decisions on the new
    /// arguments.
    fn note(
        &mut self,
        ctx: &HookContext<'_>,
        layer: &dyn MemoryLayer,
        call: GateCall<'_>,
        answer: Result<ToolCallAction, HookFailure>,
    ) -> Result<Next, NoeticError> {
        let (hook_name, args) = (call.name(), call.args());
        let action = match answer {
            Ok(action) => action,
            Err(f) => {
                let why = describe(&f);
                fatal(layer.id(), hook_name, f)?;
                tracing::warn!(layer = layer.id(), error = %why, "gating hook failed");
                match layer.on_hook_error() {
                    HookErrorPolicy::Abstain => return Ok(Next::Go),
                    HookErrorPolicy::Deny => {
                        ToolCallAction::Deny(Some(format!("gating layer '{}' failed ({why})", layer.id())))
                    }
                }
            }
        };
        match action {
            ToolCallAction::Allow => {}
            ToolCallAction::Guide(guidance) => self.guides.push((layer.id().to_owned(), guidance)),
            ToolCallAction::Deny(guidance) => {
                let decision = SteeringDecision { action: SteeringAction::Deny, guidance };
                return Ok(Next::End(self.decided(decision, vec![layer.id().to_owned()])));
            }
            ToolCallAction::Rewrite(rewrite) => {
                let Some(before) = args else {
                    let message = format!(
                        "memory layer '{}' answered {hook_name} with a rewrite, which only tool calls can have; \
                         return a review decision there",
                        layer.id()
                    );
                    return Err(NoeticError::other(message));
                };
                if *before == rewrite.args {
                    return Ok(Next::Go);
                }
                if self.rewrites.len() >= MAX_REWRITES {
                    let decision = SteeringDecision::deny(format!(
                        "the gating layers rewrote this call's arguments {MAX_REWRITES} times without settling \
                         (the last rewrite was by '{}'), so the call was not run",
                        layer.id()
                    ));
                    return Ok(Next::End(self.decided(decision, vec![layer.id().to_owned()])));
                }
                // The layers that guided judged arguments that will not run: they are asked again.
                self.guides.clear();
                let made = GateRewrite {
                    layer: layer.id().to_owned(),
                    before: before.clone(),
                    after: rewrite.args,
                    reason: rewrite.reason,
                };
                if let GateCall::BeforeToolCall(call) = call {
                    keep(ctx, call, &made);
                }
                let args = made.after.clone();
                self.rewrites.push(made);
                return Ok(Next::Again(args));
            }
        }
        Ok(Next::Go)
    }

    fn decided(&mut self, decision: SteeringDecision, layers: Vec<String>) -> Gate {
        Gate { decision, layers, rewrites: std::mem::take(&mut self.rewrites) }
    }

    /// The aggregate once every layer allowed or guided.
    fn finish(mut self) -> Gate {
        if self.guides.is_empty() {
            return Gate { rewrites: self.rewrites, ..Gate::allow() };
        }
        let texts: Vec<&str> = self.guides.iter().filter_map(|(_, g)| g.as_deref()).filter(|g| !g.is_empty()).collect();
        let guidance = (!texts.is_empty()).then(|| texts.join("\n"));
        let layers = std::mem::take(&mut self.guides).into_iter().map(|(id, _)| id).collect();
        self.decided(SteeringDecision { action: SteeringAction::Guide, guidance }, layers)
    }
}

/// Keeps a rewrite of `call`'s arguments in the session's records (the ledger) and reports it.
fn keep(ctx: &HookContext<'_>, call: ToolCallParams<'_>, rewrite: &GateRewrite) {
    ctx.record_rewrite(RewriteRecord {
        call_id: call.call_id,
        tool: call.name,
        layer: &rewrite.layer,
        before: &rewrite.before,
        after: &rewrite.after,
        reason: &rewrite.reason,
    });
    ctx.emit(|| EventKind::ToolCallRewritten {
        call_id: call.call_id.into(),
        tool: call.name.into(),
        layer: rewrite.layer.clone(),
        arguments: rewrite.after.to_string(),
        reason: rewrite.reason.clone(),
    });
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

    /// The call's arguments (tool calls only).
    fn args(self) -> Option<&'a Value> {
        match self {
            GateCall::BeforeToolCall(call) => Some(call.args),
            GateCall::AfterModelCall(_) => None,
        }
    }

    /// The same call with other arguments.
    fn with_args<'b>(self, args: &'b Value) -> GateCall<'b>
    where
        'a: 'b,
    {
        match self {
            GateCall::BeforeToolCall(call) => GateCall::BeforeToolCall(ToolCallParams { args, ..call }),
            other => other,
        }
    }

    fn timeout(self, layer: &dyn MemoryLayer) -> Option<Duration> {
        match self {
            GateCall::BeforeToolCall(_) => layer.timeouts().before_tool_call,
            GateCall::AfterModelCall(_) => layer.timeouts().after_model_call,
        }
    }

    fn now(self, gates: &dyn Gates, ctx: &HookContext<'_>) -> Option<Result<ToolCallAction, NoeticError>> {
        match self {
            GateCall::BeforeToolCall(call) => gates.before_tool_call_now(ctx, call),
            GateCall::AfterModelCall(call) => gates.after_model_call_now(ctx, call).map(|r| r.map(Into::into)),
        }
    }

    async fn hook(self, gates: &'a dyn Gates, ctx: &'a HookContext<'a>) -> Result<ToolCallAction, NoeticError> {
        match self {
            GateCall::BeforeToolCall(call) => gates.before_tool_call(ctx, call).await,
            GateCall::AfterModelCall(call) => gates.after_model_call(ctx, call).await.map(Into::into),
        }
    }
}

/// Where the layers that answer at once left the gate.
enum AtOnce {
    /// Decided.
    Done(Gate),
    /// The `usize`th layer must be awaited on.
    Wait(usize, Gating),
    /// A layer rewrote the arguments: every layer is asked again with these.
    Again(Value, Gating),
}

/// The gate from where the layers that answer at once left it: from the first layer that must be awaited on, or
/// the first rewrite (see [`before_tool_call`]).
async fn gate_after(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    call: GateCall<'_>,
    at_once: AtOnce,
) -> Result<Gate, NoeticError> {
    match at_once {
        AtOnce::Done(gate) => Ok(gate),
        AtOnce::Wait(start, gating) => gate_rest(ctx, layers, call, Progress::Wait(start, gating)).await,
        AtOnce::Again(args, gating) => gate_rest(ctx, layers, call, Progress::Done((args, gating))).await,
    }
}

/// The gate, as far as the layers answer at once.
fn gate_at_once(ctx: &HookContext<'_>, layers: &LayerStack, call: GateCall<'_>) -> Result<AtOnce, NoeticError> {
    // Made at the first answer that is not an allow: the usual gate has none.
    let mut gating: Option<Gating> = None;
    for (i, layer) in layers.iter().enumerate() {
        let layer: &dyn MemoryLayer = layer.as_ref();
        let Some(gates) = layer.as_gates() else { continue };
        match now(|| call.now(gates, ctx)) {
            // The usual answer changes nothing in the gating: nothing to note.
            Some(Ok(ToolCallAction::Allow)) => {}
            Some(answer) => match gating.get_or_insert_with(Gating::default).note(ctx, layer, call, answer)? {
                Next::Go => {}
                Next::End(gate) => return Ok(AtOnce::Done(gate)),
                Next::Again(args) => return Ok(AtOnce::Again(args, gating.unwrap_or_default())),
            },
            None => return Ok(AtOnce::Wait(i, gating.unwrap_or_default())),
        }
    }
    match gating {
        Some(gating) if !gating.guides.is_empty() || !gating.rewrites.is_empty() => Ok(AtOnce::Done(gating.finish())),
        _ => Ok(AtOnce::Done(Gate::allow())),
    }
}

/// Asks the layers from where the at-once round stopped — the `start`th layer, or the first with rewritten
/// arguments — waiting where they need it, and every layer again after each rewrite.
async fn gate_rest<'a>(
    ctx: &'a HookContext<'a>,
    layers: &'a LayerStack,
    call: GateCall<'a>,
    from: Progress<(Value, Gating), Gating>,
) -> Result<Gate, NoeticError> {
    let (mut start, mut args, mut gating) = match from {
        Progress::Wait(start, gating) => (start, None, gating),
        Progress::Done((args, gating)) => (0, Some(args), gating),
    };
    'round: loop {
        let call = match &args {
            Some(args) => call.with_args(args),
            None => call,
        };
        for layer in layers.iter().skip(start) {
            let layer: &dyn MemoryLayer = layer.as_ref();
            let Some(gates) = layer.as_gates() else { continue };
            let answer = match now(|| call.now(gates, ctx)) {
                Some(answer) => answer,
                None => timed(call.timeout(layer), || call.hook(gates, ctx)).await,
            };
            match gating.note(ctx, layer, call, answer)? {
                Next::Go => {}
                Next::End(gate) => return Ok(gate),
                Next::Again(new) => {
                    args = Some(new);
                    start = 0;
                    continue 'round;
                }
            }
        }
        return Ok(gating.finish());
    }
}

/// Asks every layer about a tool call: the layers that answer at once without an await (so the hook's future stays
/// small); from the first that must be awaited on, or the first rewrite, the rest in a boxed future, so a call whose
/// layers never wait and never rewrite makes none.
pub async fn before_tool_call(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    call: ToolCallParams<'_>,
) -> Result<Gate, NoeticError> {
    if !layers.has_gates() {
        return Ok(Gate::allow());
    }
    let call = GateCall::BeforeToolCall(call);
    match gate_at_once(ctx, layers, call)? {
        AtOnce::Done(gate) => Ok(gate),
        rest => Box::pin(gate_after(ctx, layers, call, rest)).await,
    }
}

/// Asks every layer about a model response, as [`before_tool_call`] does.
pub async fn after_model_call(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    call: ModelCallParams<'_>,
) -> Result<Gate, NoeticError> {
    if !layers.has_gates() {
        return Ok(Gate::allow());
    }
    let call = GateCall::AfterModelCall(call);
    match gate_at_once(ctx, layers, call)? {
        AtOnce::Done(gate) => Ok(gate),
        rest => Box::pin(gate_after(ctx, layers, call, rest)).await,
    }
}
