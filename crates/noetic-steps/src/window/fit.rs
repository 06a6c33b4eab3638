//! Fits a request into the model's window: counts it, shares the room between the layers and the history
//! ([`crate::layer::Allotter`]), and compacts the history when it does not fit.

use std::sync::Arc;

use super::compact::{Compaction, cut_points, folded_item, summary_request, turn_starts};
use crate::context::{Context, EventKind, HookContext};
use crate::error::NoeticError;
use crate::layer::{Allotter, check_minimums, lifecycle};
use crate::model::{
    ContextWindow, Estimate, Folded, History, Item, Model, ModelRequest, TokenCounter, ToolSpec, item_tokens,
    items_tokens,
};
use crate::scope::StepContext;

/// What fitting needs to know of the `llm` step.
pub(crate) struct StepWindow<'a> {
    /// The step (named in events and errors).
    pub id: &'a Arc<str>,
    /// The model id.
    pub model: &'a str,
    /// The step's instructions.
    pub instructions: Option<&'a str>,
    /// Where the step keeps the instructions' tokens (counted once per counter).
    pub instructions_tokens: Option<&'a KeptCount>,
    /// The step's cap on the answer, which replaces the window's reserve.
    pub max_tokens: Option<u32>,
    /// How the history is compacted.
    pub compaction: Compaction,
}

/// A request's recalled context and history, fitted into the window.
pub(crate) struct Fitted {
    /// The layers' recall.
    pub context: Vec<Item>,
    /// The history as sent (compacted when the conversation was).
    pub history: History,
    /// The request's tokens as counted, before calibration (what the reported usage is compared with).
    pub counted: u32,
    /// The request's tokens, calibrated.
    pub tokens: u32,
    /// The window, when it is known.
    pub window: Option<ContextWindow>,
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// Items folded by this compaction.
    pub folded: usize,
    /// Items of the conversation no longer sent (all compactions so far).
    pub upto: usize,
    /// Tokens of the older history before, as counted.
    pub tokens_before: u64,
    /// Tokens of what is sent in its place.
    pub tokens_after: u64,
    /// True when a summary replaces the folded items.
    pub summarized: bool,
}

/// A step's count of a text that never changes (its instructions), kept with the counter that counted it
/// (`None`: [`Estimate`]): asked again with the same counter, it is not counted again.
#[derive(Default)]
pub(crate) struct KeptCount(std::sync::Mutex<Option<(Counter, u32)>>);

/// A model's own counter, or `None` for [`Estimate`].
type Counter = Option<Arc<dyn TokenCounter>>;

impl KeptCount {
    /// The count `count` gives with `counter`, counted only when no count with that counter is kept. The counter
    /// is held, so no other counter can take its address while it is kept.
    pub(crate) fn count(&self, counter: &Counter, count: impl FnOnce() -> u32) -> u32 {
        let mut kept = crate::sync::lock(&self.0);
        let same = |held: &Counter| match (held, counter) {
            (None, None) => true,
            (Some(held), Some(counter)) => Arc::ptr_eq(held, counter),
            _ => false,
        };
        if let Some((_, tokens)) = kept.as_ref().filter(|(held, _)| same(held)) {
            return *tokens;
        }
        let tokens = count();
        *kept = Some((counter.clone(), tokens));
        tokens
    }
}

fn to_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The request's recall and history fitted into the window, compacting the history when it does not fit, or
/// always after the provider refused the request as too long (`refused`, with the window's size when the provider
/// said it). `None` when the model's window is not known and nothing was refused: the caller sends the request as
/// it is.
pub(crate) async fn fit(
    ctx: &StepContext,
    model: &dyn Model,
    step: &StepWindow<'_>,
    tools: &Arc<[ToolSpec]>,
    tail: &[Item],
    refused: Option<Option<u64>>,
) -> Result<Option<Fitted>, NoeticError> {
    // The model's own counter, kept for the step's count of its instructions.
    let own = model.token_counter(step.model);
    let counter = own.as_deref().unwrap_or(&Estimate);
    let history = ctx.history();
    let known = model.context_window(step.model);
    let window = match (known, refused) {
        (Some(window), _) => window,
        (None, None) if history.folded().is_none() => return Ok(None),
        // Compacted after a refusal: what is sent stays compacted, and nothing else is known to count against.
        (None, None) => ContextWindow { tokens: u32::MAX, output_reserve: 0 },
        // The window is not known, but it is smaller than the request it refused (of which the history is most).
        (None, Some(limit)) => {
            let refused = limit.unwrap_or_else(|| history.tally().tokens_from(counter, history.as_slice(), 0));
            ContextWindow::new(to_u32(refused))
        }
    };
    let force = refused.is_some();
    let ratio = f64::from(history.calibration().ratio());
    // A thirty-second of the room is kept back for the count's error: a calibrated estimate follows the last
    // response's ratio, and the next request may differ a little (the offline test saw 0.3 % over).
    let room = window.input_room(step.max_tokens);
    let room = room - room / 32;
    // Counted in the counter's units: the room divided by the calibration.
    let raw_room = to_u32((f64::from(room) / ratio).floor() as u64);
    let instructions = step.instructions.map_or(0, |i| {
        let tokens = match step.instructions_tokens {
            Some(kept) => kept.count(&own, || counter.count(i)),
            None => counter.count(i),
        };
        tokens.saturating_add(counter.per_message())
    });
    let fixed = instructions
        .saturating_add(history.tally().tools_tokens(counter, tools))
        .saturating_add(items_tokens(counter, tail));
    let layers = ctx.layers();
    if !layers.is_empty() {
        check_minimums(raw_room.saturating_sub(fixed), layers.iter().map(|l| (l.id(), l.budget())), step.model)?;
    }
    let items = history.as_slice();
    let upto = history.folded().map_or(0, |f| f.upto);
    let protect = history.tally().turn_start(items).max(upto).min(items.len());
    let protected = to_u32(history.tally().tokens_from(counter, items, protect));
    let mut allotter =
        Allotter::new(raw_room.saturating_sub(fixed).saturating_sub(protected), layers.iter().map(|l| l.budget()));
    let context = lifecycle::recall_within(&ctx.hooks(), layers, &mut allotter, counter).await?;
    let older_room = allotter.left();
    let older = older_tokens(counter, &history, protect, protected);
    let must = force || older > u64::from(older_room) || too_many_turns(step.compaction, items, upto, protect);
    // Let go of the snapshot first: recording the compaction then changes the conversation without copying it.
    drop(history);
    if must {
        compact(&ctx.hooks(), model, step, window, counter, older_room, force).await?;
    }
    let history = ctx.history();
    let sent = match history.folded() {
        None => history.clone(),
        Some(folded) => {
            let mut items = Vec::with_capacity(history.len().saturating_sub(folded.upto) + 1);
            items.push(folded_item(folded.summary.as_deref(), folded.upto));
            items.extend(history.as_slice().get(folded.upto..).unwrap_or_default().iter().cloned());
            History::new(items)
        }
    };
    let sent_tokens = match history.folded() {
        None => history.tally().tokens_from(counter, history.as_slice(), 0),
        Some(_) => u64::from(items_tokens(counter, sent.iter())),
    };
    let counted = to_u32(u64::from(fixed) + u64::from(items_tokens(counter, &context)) + sent_tokens);
    let tokens = history.calibration().adjust(counted);
    if tokens > room {
        return Err(NoeticError::ContextLengthExceeded {
            step_id: step.id.to_string(),
            message: format!(
                "with everything before the current turn compacted, the request still takes about {tokens} tokens \
                 and model '{}' has room for {room} (its window less {} tokens kept for the answer)",
                step.model,
                window.tokens - room
            ),
            requested: Some(u64::from(tokens)),
            limit: Some(u64::from(window.tokens)),
        });
    }
    Ok(Some(Fitted { context, history: sent, counted, tokens, window: known.or(refused.map(|_| window)) }))
}

/// A trimming policy keeps fewer earlier turns than the conversation sends.
fn too_many_turns(compaction: Compaction, items: &[Item], upto: usize, protect: usize) -> bool {
    match compaction {
        Compaction::KeepLastTurns(n) => {
            let earlier =
                turn_starts(items, protect).iter().filter(|&&s| s > upto).count() + usize::from(upto < protect);
            earlier > n
        }
        Compaction::Summarize => false,
    }
}

/// The tokens the history before `protect` takes as sent: what is not folded, and the folded items' stand-in.
fn older_tokens(counter: &dyn TokenCounter, history: &History, protect: usize, protected: u32) -> u64 {
    let (upto, stand_in) = match history.folded() {
        Some(f) => (f.upto, u64::from(item_tokens(counter, &folded_item(f.summary.as_deref(), f.upto)))),
        None => (0, 0),
    };
    let from_upto = history.tally().tokens_from(counter, history.as_slice(), upto.min(protect));
    from_upto.saturating_sub(u64::from(protected)) + stand_in
}

/// Compacts the older history of `ctx` (everything before the current turn) so that it takes at most half of
/// `older_room` tokens (all of it with `force`). `None` when there was nothing to fold.
async fn compact(
    ctx: &HookContext<'_>,
    model: &dyn Model,
    step: &StepWindow<'_>,
    window: ContextWindow,
    counter: &dyn TokenCounter,
    older_room: u32,
    force: bool,
) -> Result<Option<Compacted>, NoeticError> {
    let history = ctx.history();
    let items = history.as_slice();
    let previous = history.folded().cloned();
    let from = previous.as_ref().map_or(0, |f| f.upto);
    let protect = history.tally().turn_start(items).max(from).min(items.len());
    let mut cuts = cut_points(items, from + 1, protect);
    if let Compaction::KeepLastTurns(_) = step.compaction {
        // Trimming keeps whole turns.
        let starts = turn_starts(items, protect + 1);
        cuts.retain(|c| starts.contains(c));
    }
    let Some(&last) = cuts.last() else { return Ok(None) };
    let protected = history.tally().tokens_from(counter, items, protect);
    let before = older_tokens(counter, &history, protect, to_u32(protected));
    // The summary may take at most a quarter of the room (and the window's answer reserve).
    let summary_max = window.output_reserve.min(older_room / 4).max(64);
    let cut = if force {
        last
    } else {
        let target = u64::from(older_room / 2).saturating_sub(u64::from(summary_max));
        let fitting = history.tally().first_fitting(items.len(), from, target + protected);
        let kept = match step.compaction {
            Compaction::KeepLastTurns(n) => {
                // The starts of the earlier turns and the current one's: the cut keeps the last `n` before it.
                let starts = turn_starts(items, protect + 1);
                starts.len().checked_sub(n + 1).and_then(|i| starts.get(i)).copied().unwrap_or(from).max(from)
            }
            Compaction::Summarize => from,
        };
        let wanted = fitting.max(kept);
        cuts.iter().copied().find(|&c| c >= wanted).unwrap_or(last)
    };
    let summary = match step.compaction {
        Compaction::Summarize => {
            summarise(ctx, model, step, window, previous.as_ref(), &items[from..cut], summary_max).await?
        }
        Compaction::KeepLastTurns(_) => None,
    };
    let folded = Folded { upto: cut, summary };
    drop(history);
    ctx.set_folded(Some(folded.clone()));
    if let Some(journal) = ctx.journal() {
        journal.compacted(&folded);
    }
    let history = ctx.history();
    let after = older_tokens(counter, &history, protect, to_u32(protected));
    let compacted = Compacted {
        folded: cut - from,
        upto: cut,
        tokens_before: before,
        tokens_after: after,
        summarized: folded.summary.is_some(),
    };
    tracing::info!(step_id = %step.id, folded = compacted.folded, upto = cut, before, after, "context compacted");
    ctx.emit(|| EventKind::ContextCompacted {
        step_id: step.id.clone(),
        folded: compacted.folded,
        upto: cut,
        tokens_before: before,
        tokens_after: after,
        summarized: compacted.summarized,
    });
    Ok(Some(compacted))
}

/// Asks the model for a summary of `items` after `previous`'s; `None` (the items are left out instead) when even
/// the summary request does not fit.
async fn summarise(
    ctx: &HookContext<'_>,
    model: &dyn Model,
    step: &StepWindow<'_>,
    window: ContextWindow,
    previous: Option<&Folded>,
    items: &[Item],
    max_tokens: u32,
) -> Result<Option<String>, NoeticError> {
    // About three characters a token, with the instructions' share kept out.
    let room_chars = (window.input_room(Some(max_tokens)).saturating_sub(200) as usize) * 3;
    let previous = previous.and_then(|f| f.summary.as_deref());
    let request = ModelRequest {
        step: Some(step.id.clone()),
        ..summary_request(step.model, previous, items, room_chars, max_tokens)
    };
    match ctx.run_cancellable(model.call(request)).await {
        Ok(response) => {
            ctx.add_usage(&response.usage, response.usage.cost.unwrap_or(0.0));
            // Counted towards the turn's budget; the session log holds no response of it.
            if let Some(meter) = ctx.meter() {
                meter.model_call(&response.usage, false);
            }
            let text = response.text_output().trim();
            Ok((!text.is_empty()).then(|| text.chars().take(max_tokens as usize * 4).collect()))
        }
        Err(NoeticError::ContextLengthExceeded { message, .. }) => {
            tracing::warn!(step_id = %step.id, %message, "the summary request did not fit; the oldest turns are left out instead");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Compacts `ctx`'s conversation now, everything before its last turn (`/compact`, `POST
/// /api/sessions/{key}/compact`): the summary is asked of `model` as `model_id`. `None` when there was nothing
/// to fold (a conversation of one turn).
pub async fn compact_now(
    ctx: &Context,
    model: &dyn Model,
    model_id: &str,
    compaction: Compaction,
) -> Result<Option<Compacted>, NoeticError> {
    let counter = model.token_counter(model_id);
    let counter = counter.as_deref().unwrap_or(&Estimate);
    // A window that is not known is taken as the conversation's size: enough to size the summary request (one
    // that is still refused leaves the folded turns out instead).
    let window = model.context_window(model_id).unwrap_or_else(|| {
        let history = ctx.history();
        ContextWindow::new(to_u32(history.tally().tokens_from(counter, history.as_slice(), 0)).max(8_192))
    });
    let id: Arc<str> = Arc::from("");
    let step = StepWindow {
        id: &id,
        model: model_id,
        instructions: None,
        instructions_tokens: None,
        max_tokens: None,
        compaction,
    };
    compact(&HookContext::from(ctx), model, &step, window, counter, window.input_room(None), true).await
}
