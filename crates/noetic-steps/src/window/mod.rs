//! The context window: every request an `llm` step sends fits the model's window (SPEC 8.2).
//!
//! # Counting
//!
//! Tokens are counted with the model's [`TokenCounter`] ([`Model::token_counter`](crate::model::Model::token_counter):
//! the provider's tokenizer where the backend has one, else [`Estimate`], a quarter of the characters). Each
//! response's reported input tokens calibrate the count ([`Calibration`]): the next request's count is multiplied
//! by how far the last one was off. A conversation's items are counted once each ([`Tally`]), so a request counts
//! only what is new. The window and the answer's reserve come from
//! [`Model::context_window`](crate::model::Model::context_window): the backend's configuration, what its server
//! reports (llama.cpp's `/props`), or the table of well-known models ([`known_window`]). A model whose window is
//! unknown gets its requests as they are: nothing is counted or compacted.
//!
//! # The allocation rule
//!
//! The room of a request is the window less the answer's reserve (the step's `max_tokens` when it sets one), less
//! a thirty-second of it kept back for the count's error. It is given out in this order:
//!
//! 1. **Fixed parts**: the instructions, the tools offered and the request's tail.
//! 2. **The current turn**: the items since the last answer of an earlier turn (the turn's messages, its calls
//!    and results, the steering injected into it). It is never compacted.
//! 3. **The memory layers**, in slot order: each layer is offered its `budget.max`, bounded by the room left after
//!    what the layers before it *used* and the `budget.min` of every layer after it, and never less than its own
//!    `budget.min` ([`Allotter`]). A layer's minimum is thus guaranteed and its maximum is a cap; what a layer
//!    leaves unused goes to the layers after it. Minimums that cannot fit are a [`ConfigError`](crate::ConfigError)
//!    (`LAYER_MINIMUMS_EXCEED_WINDOW`) naming the layers: at build time for the runtime's model and layers
//!    (`RuntimeBuilder::build`), at the request for layers provided later.
//! 4. **The older history** gets what is left. When it does not fit, it is compacted.
//!
//! # Compaction
//!
//! The oldest turns are replaced *in what is sent* by a summary the model writes ([`Compaction::Summarize`], the
//! default) or left out ([`Compaction::KeepLastTurns`]); the conversation, the session log (which records an
//! `Entry::Compacted`), the ledger and replay keep every item. A cut never separates a tool call from its result,
//! and never reaches into the current turn; steering feedback not yet seen is recalled by the steering layer, not
//! kept in the history, so it is never folded either. A compaction folds enough that the older history takes at
//! most half of its room afterwards, so the next requests do not compact again at once. A provider's "context
//! length exceeded" answer ([`NoeticError::ContextLengthExceeded`](crate::NoeticError::ContextLengthExceeded))
//! compacts everything before the current turn once and retries once; a second refusal fails the step. A
//! [`ContextCompacted`](crate::EventKind::ContextCompacted) event says how much was folded.

mod compact;
mod fit;

pub use crate::layer::{Allotter, check_minimums};
pub use crate::model::context_refusal;
pub use crate::model::{
    Calibration, ContextWindow, Estimate, Folded, Tally, TokenCounter, item_tokens, items_tokens, known_window,
    request_tokens, tools_tokens,
};
pub use compact::{Compaction, cut_points, folded_item, summary_request, turn_start, turn_starts};
pub use fit::{Compacted, compact_now};
pub(crate) use fit::{Fitted, KeptCount, StepWindow, fit};
