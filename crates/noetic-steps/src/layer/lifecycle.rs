//! Runs layer hooks: slot order, timeouts (a timed-out hook is dropped, so it cannot write later), error
//! policies, and (in `gate`) the aggregation of gating decisions (deny > guide > allow, deny short-circuits, guide
//! texts joined with a newline).
//!
//! Each hook runs only on the layers that have its purpose ([`MemoryLayer::as_recall`], [`MemoryLayer::as_gates`],
//! [`MemoryLayer::as_lifecycle`]); with no layer in scope that has it, a function returns at once without
//! allocating.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;

use super::{Allotter, LayerStack, MemoryLayer, Outcome, ScopeKey};
use crate::context::{ExecutionId, HookContext};
use crate::error::NoeticError;
use crate::model::{Item, ModelResponse, TokenCounter};

mod gate;

pub use gate::{Gate, GateRewrite, after_model_call, before_tool_call};

enum HookFailure {
    Failed(NoeticError),
    TimedOut(Duration),
    /// The hook panicked; the text is the panic message.
    Panicked(String),
}

/// Runs a hook with its time limit, turning a panic into [`HookFailure::Panicked`] so a faulty layer cannot kill
/// the task that runs a turn (and leave its session busy).
async fn timed<T, Fut>(limit: Option<Duration>, hook: impl FnOnce() -> Fut) -> Result<T, HookFailure>
where
    Fut: Future<Output = Result<T, NoeticError>>,
{
    // A hook may panic while it makes its future, before any await.
    let hook = match std::panic::catch_unwind(AssertUnwindSafe(hook)) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind(),
        Err(payload) => return Err(HookFailure::Panicked(crate::error::panic_message(&*payload))),
    };
    let outcome = match limit {
        None => hook.await,
        // The timer is boxed: most hooks have a limit but none of the layers that run on every model and tool
        // call does, and inline the timer would make every hook call's state (and its copies) several times
        // larger. A hook that is ready at once cannot time out (the timeout polls it first), so it arms none.
        Some(limit) => {
            let mut hook = std::pin::pin!(hook);
            match futures::poll!(hook.as_mut()) {
                std::task::Poll::Ready(r) => r,
                std::task::Poll::Pending => match Box::pin(tokio::time::timeout(limit, hook)).await {
                    Ok(r) => r,
                    Err(_) => return Err(HookFailure::TimedOut(limit)),
                },
            }
        }
    };
    match outcome {
        Ok(r) => r.map_err(HookFailure::Failed),
        Err(payload) => Err(HookFailure::Panicked(crate::error::panic_message(&*payload))),
    }
}

/// Runs a hook's answer-at-once form (`recall_now`, `before_tool_call_now` …), turning a panic into
/// [`HookFailure::Panicked`]; `None` when the layer has no answer at once (its hook must be awaited).
#[inline]
fn now<T>(hook: impl FnOnce() -> Option<Result<T, NoeticError>>) -> Option<Result<T, HookFailure>> {
    match std::panic::catch_unwind(AssertUnwindSafe(hook)) {
        Ok(answer) => answer.map(|r| r.map_err(HookFailure::Failed)),
        Err(payload) => Some(Err(HookFailure::Panicked(crate::error::panic_message(&*payload)))),
    }
}

fn describe(f: &HookFailure) -> String {
    match f {
        HookFailure::Failed(e) => e.to_string(),
        HookFailure::TimedOut(d) => format!("timed out after {} ms", d.as_millis()),
        HookFailure::Panicked(message) => format!("panicked: {message}"),
    }
}

fn panicked(layer: &str, hook: &str, message: &str) -> NoeticError {
    NoeticError::other(format!(
        "the {hook} hook of memory layer '{layer}' panicked: {message}; fix the layer so it returns an error instead"
    ))
}

/// A configuration error or a panic is never swallowed: it fails the step (fail closed).
fn fatal(layer: &str, hook: &str, f: HookFailure) -> Result<(), NoeticError> {
    match f {
        HookFailure::Failed(e @ NoeticError::Config(_)) => Err(e),
        HookFailure::Panicked(message) => Err(panicked(layer, hook, &message)),
        _ => Ok(()),
    }
}

/// Runs `init` on every layer in scope, in slot order. The first failure fails the execution.
pub async fn init(ctx: &HookContext<'_>, layers: &LayerStack) -> Result<(), NoeticError> {
    if !layers.has_lifecycle() {
        return Ok(());
    }
    for layer in layers.iter() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        timed(layer.timeouts().init, || hooks.init(ctx)).await.map_err(|f| match f {
            HookFailure::Failed(e) => e,
            HookFailure::Panicked(message) => panicked(layer.id(), "init", &message),
            timeout @ HookFailure::TimedOut(_) => {
                NoeticError::other(format!("init of layer '{}' {}", layer.id(), describe(&timeout)))
            }
        })?;
    }
    Ok(())
}

/// Runs `on_complete(outcome)` on every layer, then `dispose` in reverse order — every hook, whatever the
/// others do. Failures are logged; a panic is also returned (the first one), so the execution ends with an error
/// naming the layer instead of a success that hides it.
pub async fn complete(ctx: &HookContext<'_>, layers: &LayerStack, outcome: Outcome) -> Result<(), NoeticError> {
    if !layers.has_lifecycle() {
        return Ok(());
    }
    // Boxed so that callers without layers (every fork path, for one) do not carry the hooks' state inline.
    Box::pin(complete_layers(ctx, layers, outcome)).await
}

async fn complete_layers(ctx: &HookContext<'_>, layers: &LayerStack, outcome: Outcome) -> Result<(), NoeticError> {
    let mut first_panic = None;
    let mut note = |layer: &str, hook: &str, f: HookFailure| {
        tracing::warn!(layer, hook, error = %describe(&f), "layer hook failed");
        if let HookFailure::Panicked(message) = f {
            first_panic.get_or_insert_with(|| panicked(layer, hook, &message));
        }
    };
    for layer in layers.iter() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        if let Err(f) = timed(layer.timeouts().on_complete, || hooks.on_complete(ctx, outcome)).await {
            note(layer.id(), "on_complete", f);
        }
    }
    for layer in layers.iter().rev() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        if let Err(f) = timed(layer.timeouts().dispose, || hooks.dispose(ctx)).await {
            note(layer.id(), "dispose", f);
        }
    }
    first_panic.map_or(Ok(()), Err)
}

/// Estimated tokens of an item: a quarter of its text length, rounded up.
pub fn estimate_tokens(item: &Item) -> u32 {
    let chars = match item {
        Item::Message { content, .. } => content.chars().count(),
        Item::ToolCall(c) => c.name.len() + c.arguments.len(),
        Item::ToolResult(r) => r.content.chars().count(),
    };
    u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
}

/// Collects every layer's recall output in slot order, each trimmed to the layer's budget (whole items that do
/// not fit are left out). A failing recall is logged and skipped; a configuration error fails the step.
pub async fn recall(ctx: &HookContext<'_>, layers: &LayerStack) -> Result<Vec<Item>, NoeticError> {
    // The layers that answer at once are asked here, with no future of their own (see `recall_shared`).
    let mut shares = Shares::Max;
    match recall_start(ctx, layers, &mut shares)? {
        Progress::Done(out) => Ok(out),
        Progress::Wait(start, out) => Box::pin(recall_layers(ctx, layers, start, out, &mut shares)).await,
    }
}

/// [`recall`] within a share of the window: each layer is offered what `allotter` gives it (its `max`, bounded by
/// what the layers before it used and the minimums of those after it) and its items are counted with `counter`;
/// what the layers leave is [`Allotter::left`].
pub async fn recall_within(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    allotter: &mut Allotter,
    counter: &dyn TokenCounter,
) -> Result<Vec<Item>, NoeticError> {
    recall_shared(ctx, layers, &mut Shares::Allot(allotter, counter)).await
}

/// How the layers' budgets are given: each its `max` (no window known), or by an [`Allotter`].
enum Shares<'a> {
    Max,
    Allot(&'a mut Allotter, &'a dyn TokenCounter),
}

impl Shares<'_> {
    fn offer(&self, layer: &dyn MemoryLayer) -> u32 {
        match self {
            Shares::Max => layer.budget().max,
            Shares::Allot(allotter, _) => allotter.offer(),
        }
    }

    fn cost(&self, item: &Item) -> u32 {
        match self {
            Shares::Max => estimate_tokens(item),
            Shares::Allot(_, counter) => crate::model::item_tokens(*counter, item),
        }
    }

    fn took(&mut self, tokens: u32) {
        if let Shares::Allot(allotter, _) = self {
            allotter.took(tokens);
        }
    }
}

async fn recall_shared(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    shares: &mut Shares<'_>,
) -> Result<Vec<Item>, NoeticError> {
    // Layers that answer at once are asked without an await (so this future stays small); from the first that
    // must be awaited on, the rest run in a boxed future, so a model request whose layers never wait makes none.
    match recall_start(ctx, layers, shares)? {
        Progress::Done(out) => Ok(out),
        Progress::Wait(start, out) => Box::pin(recall_layers(ctx, layers, start, out, shares)).await,
    }
}

/// Asks the layers that answer at once, up to the first that must be awaited on.
fn recall_start(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    shares: &mut Shares<'_>,
) -> Result<Progress<Vec<Item>, Vec<Item>>, NoeticError> {
    // Layers that do not recall take nothing of the room (an allotter then leaves it all to the history).
    if !layers.has_recall() {
        return Ok(Progress::Done(Vec::new()));
    }
    recall_at_once(ctx, layers, shares)
}

/// How far asking the layers at once got: an answer, or what the layers before the `n`th (which must be awaited
/// on) answered.
enum Progress<D, W> {
    Done(D),
    Wait(usize, W),
}

fn recall_at_once(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    shares: &mut Shares<'_>,
) -> Result<Progress<Vec<Item>, Vec<Item>>, NoeticError> {
    let mut out = Vec::new();
    for (i, layer) in layers.iter().enumerate() {
        let budget = shares.offer(layer.as_ref());
        // A layer without recall answers at once with nothing, and still takes its turn at the allotter.
        let answer = match layer.as_recall() {
            Some(hooks) => now(|| hooks.recall_now(ctx, budget)),
            None => Some(Ok(Vec::new())),
        };
        match answer {
            Some(answer) => take_recalled(layer.as_ref(), budget, answer, &mut out, shares)?,
            None => return Ok(Progress::Wait(i, out)),
        }
    }
    Ok(Progress::Done(out))
}

/// Recalls the layers from the `start`th on, after `out`.
async fn recall_layers(
    ctx: &HookContext<'_>,
    layers: &LayerStack,
    start: usize,
    mut out: Vec<Item>,
    shares: &mut Shares<'_>,
) -> Result<Vec<Item>, NoeticError> {
    for layer in layers.iter().skip(start) {
        let budget = shares.offer(layer.as_ref());
        let answer = match layer.as_recall() {
            Some(hooks) => match now(|| hooks.recall_now(ctx, budget)) {
                Some(answer) => answer,
                None => timed(layer.timeouts().recall, || hooks.recall(ctx, budget)).await,
            },
            None => Ok(Vec::new()),
        };
        take_recalled(layer.as_ref(), budget, answer, &mut out, shares)?;
    }
    Ok(out)
}

/// Keeps what a layer recalled, trimmed to its budget; a failing recall is logged and skipped, a configuration
/// error or a panic fails the step.
#[inline]
fn take_recalled(
    layer: &dyn MemoryLayer,
    budget: u32,
    answer: Result<Vec<Item>, HookFailure>,
    out: &mut Vec<Item>,
    shares: &mut Shares<'_>,
) -> Result<(), NoeticError> {
    match answer {
        // The usual answer: nothing to keep.
        Ok(items) if items.is_empty() => {
            shares.took(0);
            Ok(())
        }
        Ok(items) => {
            let mut used = 0u32;
            for item in items {
                let cost = shares.cost(&item);
                if used.saturating_add(cost) > budget {
                    tracing::warn!(layer = layer.id(), budget, "recall output over budget; item left out");
                    continue;
                }
                used = used.saturating_add(cost);
                out.push(item);
            }
            shares.took(used);
            Ok(())
        }
        Err(f) => {
            shares.took(0);
            tracing::warn!(layer = layer.id(), error = %describe(&f), "recall failed; layer skipped");
            fatal(layer.id(), "recall", f)
        }
    }
}

/// Runs `store` on every layer. Failures are logged.
pub async fn store(ctx: &HookContext<'_>, layers: &LayerStack, response: &ModelResponse) {
    if !layers.has_recall() {
        return;
    }
    Box::pin(store_layers(ctx, layers, response)).await;
}

async fn store_layers(ctx: &HookContext<'_>, layers: &LayerStack, response: &ModelResponse) {
    for layer in layers.iter() {
        let Some(hooks) = layer.as_recall() else { continue };
        if let Err(f) = timed(layer.timeouts().store, || hooks.store(ctx, response)).await {
            tracing::warn!(layer = layer.id(), error = %describe(&f), "store failed");
        }
    }
}

/// Runs `on_spawn` on the child's layers; returns the items they open the child's conversation with.
pub async fn spawn(
    parent: &HookContext<'_>,
    child: &HookContext<'_>,
    layers: &LayerStack,
) -> Result<Vec<Item>, NoeticError> {
    if !layers.has_lifecycle() {
        return Ok(Vec::new());
    }
    Box::pin(spawn_layers(parent, child, layers)).await
}

async fn spawn_layers(
    parent: &HookContext<'_>,
    child: &HookContext<'_>,
    layers: &LayerStack,
) -> Result<Vec<Item>, NoeticError> {
    let mut items = Vec::new();
    for layer in layers.iter() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        match timed(layer.timeouts().on_spawn, || hooks.on_spawn(parent, child)).await {
            Ok(more) => items.extend(more),
            Err(f) => {
                tracing::warn!(layer = layer.id(), error = %describe(&f), "on_spawn failed");
                fatal(layer.id(), "on_spawn", f)?;
            }
        }
    }
    Ok(items)
}

/// Runs `on_return` on the child's layers after the child succeeded.
pub async fn return_(parent: &HookContext<'_>, child: &HookContext<'_>, layers: &LayerStack) {
    if !layers.has_lifecycle() {
        return;
    }
    Box::pin(return_layers(parent, child, layers)).await;
}

async fn return_layers(parent: &HookContext<'_>, child: &HookContext<'_>, layers: &LayerStack) {
    for layer in layers.iter() {
        let Some(hooks) = layer.as_lifecycle() else { continue };
        if let Err(f) = timed(layer.timeouts().on_return, || hooks.on_return(parent, child)).await {
            tracing::warn!(layer = layer.id(), error = %describe(&f), "on_return failed");
        }
    }
}

/// A copy of a layer's state for an execution (execution-scoped layers) — downcast to the layer's state type.
pub fn get_layer_state<T: 'static>(layers: &LayerStack, execution_id: ExecutionId, layer_id: &str) -> Option<T> {
    let state = layers.get(layer_id)?.as_persistence()?.state(&ScopeKey::Execution(execution_id))?;
    state.downcast::<T>().ok().map(|b| *b)
}
