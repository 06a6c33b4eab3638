//! Provider-neutral conversation items, tool calls and token usage.
//!
//! A conversation is a flat list of [`Item`]s: messages, the tool calls a model asked for, and their results.
//! Providers translate this list to and from their wire formats.

mod content;
mod interface;
mod limits;
mod params;
mod refusal;
mod retry;
mod scripted;
mod tokens;
mod wrappers;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use content::{ContentBlock, ImageSource, blocks_text};
pub use interface::{Capabilities, FinishReason, Model, ModelRequest, ModelResponse, StreamDelta, ToolSpec, replay};
pub use limits::{ContextWindow, known_window};
pub use params::{ModelParams, ToolChoice};
pub use refusal::context_refusal;
pub use retry::{Backoff, DEFAULT_MAX_DELAY, RetryPolicy, as_retry_attempt, backoff_after, retry_delay, with_retries};
pub use scripted::{HeldCall, ScriptedModel};
pub use tokens::{
    Calibration, Estimate, Tally, TokenCounter, item_tokens, items_tokens, request_tokens, starts_turn, tools_tokens,
};
pub use wrappers::{ModelExt, RetryModel, TimeoutModel};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions from the application.
    System,
    /// The end user.
    User,
    /// The model.
    Assistant,
    /// Runtime guidance addressed to the model (steering feedback, inbox messages, corrections).
    Developer,
}

/// One entry of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    /// A text message.
    Message {
        /// Its author.
        role: Role,
        /// Its text.
        content: String,
    },
    /// A tool call the model asked for.
    ToolCall(ToolCall),
    /// The result of a tool call, fed back to the model.
    ToolResult(ToolResult),
}

impl Item {
    /// A message with the given role.
    pub fn message(role: Role, content: impl Into<String>) -> Self {
        Item::Message { role, content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Item::message(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Item::message(Role::Assistant, content)
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Item::message(Role::System, content)
    }

    /// A developer message.
    pub fn developer(content: impl Into<String>) -> Self {
        Item::message(Role::Developer, content)
    }

    /// The text of a message item, `None` for tool calls and results.
    pub fn text(&self) -> Option<&str> {
        match self {
            Item::Message { content, .. } => Some(content),
            _ => None,
        }
    }

    /// The role of a message item.
    pub fn role(&self) -> Option<Role> {
        match self {
            Item::Message { role, .. } => Some(*role),
            _ => None,
        }
    }
}

/// One line per item, for transcripts: `User: text`, `-> call-1 search({"q":"x"})`, `<- call-1 ERROR text`.
impl std::fmt::Display for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Message { role, content } => write!(f, "{role:?}: {content}"),
            Item::ToolCall(c) => write!(f, "-> {} {}({})", c.id, c.name, c.arguments),
            Item::ToolResult(r) => {
                write!(f, "<- {} {}{}", r.call_id, if r.is_error { "ERROR " } else { "" }, r.content)
            }
        }
    }
}

/// A tool call requested by a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id; the result must carry the same id.
    pub id: Arc<str>,
    /// The tool's name.
    pub name: Arc<str>,
    /// The arguments as the raw JSON text the model produced (it may be malformed).
    pub arguments: Arc<str>,
}

impl ToolCall {
    /// A call of `name` with `arguments` (JSON text), whose id is `id`. The three are shared, not copied, by the
    /// call's clones, its events and its result.
    pub fn new(id: impl Into<Arc<str>>, name: impl Into<Arc<str>>, arguments: impl Into<Arc<str>>) -> Self {
        ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() }
    }

    /// `name` as a call's shared name: the very string an earlier call on this thread was given when the name is
    /// one of the last few asked for (a model calls the same few tools again and again), so an answer's parser
    /// allocates no name for them; else a new one, kept in place of the least recently given.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use noetic_core::model::ToolCall;
    ///
    /// let first = ToolCall::shared_name("search");
    /// assert!(Arc::ptr_eq(&first, &ToolCall::shared_name("search")));
    /// assert_eq!(&*ToolCall::shared_name("read_file"), "read_file");
    /// ```
    pub fn shared_name(name: &str) -> Arc<str> {
        thread_local! {
            /// The names given last.
            static NAMES: std::cell::RefCell<crate::sync::Recent> = const { std::cell::RefCell::new(crate::sync::Recent::new()) };
        }
        NAMES.with(|names| shared_from(&mut names.borrow_mut(), name))
    }
}

/// `text` as the string `recent` keeps when it is one of them (moved to the front), else a new one kept in place of
/// the least recent.
pub(crate) fn shared_from(recent: &mut crate::sync::Recent, text: &str) -> Arc<str> {
    let found = recent.position(|kept| kept == text);
    let shared = found.and_then(|at| recent.get(at)).cloned().unwrap_or_else(|| Arc::from(text));
    // The one found (or a new one, in place of the least recent) moves to the front.
    recent.keep(shared.clone(), found);
    shared
}

/// The result of one tool call.
///
/// `content` is the text every provider can show. A rich result also keeps what the text cannot say: `blocks`
/// holds the tool's content blocks when one of them is not plain text (an image, a resource, JSON), and
/// `structured` the tool's structured data when it came beside content blocks (a plain JSON result is `content`
/// itself). Both are left out of the serialised form when empty, so results stored before they existed read back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub call_id: Arc<str>,
    /// The result text shown to the model.
    pub content: Arc<str>,
    /// True when the call failed, was denied or was skipped.
    pub is_error: bool,
    /// The content blocks, when the text alone does not carry them (providers that can send them do).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<ContentBlock>,
    /// The tool's structured data, when it came beside content blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<serde_json::Value>,
}

impl ToolResult {
    /// A text result.
    pub fn new(call_id: impl Into<Arc<str>>, content: impl Into<Arc<str>>, is_error: bool) -> Self {
        ToolResult { call_id: call_id.into(), content: content.into(), is_error, ..ToolResult::default() }
    }

    /// A successful text result.
    pub fn ok(call_id: impl Into<Arc<str>>, content: impl Into<Arc<str>>) -> Self {
        ToolResult::new(call_id, content, false)
    }

    /// An error result.
    pub fn error(call_id: impl Into<Arc<str>>, content: impl Into<Arc<str>>) -> Self {
        ToolResult::new(call_id, content, true)
    }

    /// True when some content block says more than `content` (an image, a resource, JSON): a provider whose wire
    /// format takes blocks should send them instead of the text.
    pub fn has_rich_blocks(&self) -> bool {
        self.blocks.iter().any(|b| !b.is_text())
    }
}

/// An append-only item log: the items and the identity of their sequence.
///
/// The id names one append-only sequence: items are only ever added at its end in place (while the log is not
/// shared), and copying the log — which happens when it is shared and written — gives the copy a fresh id. So two
/// histories with the same id agree on every item both hold: a provider may reuse what it encoded of the shorter
/// one for the longer one ([`History::log_id`]).
#[derive(Debug)]
pub struct Log {
    pub(crate) id: u64,
    pub(crate) items: Vec<Item>,
    /// The oldest items as they are sent since the conversation was last compacted.
    pub(crate) folded: Option<Arc<Folded>>,
    /// How the model's reported usage compares with the runtime's count of this conversation's requests.
    pub(crate) calibration: Calibration,
    /// The tokens of the items, as far as they were counted.
    pub(crate) tally: Tally,
}

impl Log {
    /// A new sequence holding `items`.
    pub fn new(items: Vec<Item>) -> Self {
        Log { id: next_log_id(), items, folded: None, calibration: Calibration::default(), tally: Tally::default() }
    }

    /// The items.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The items, to append to in place (only at the end: the log's id promises earlier items never change).
    pub fn items_mut(&mut self) -> &mut Vec<Item> {
        &mut self.items
    }

    /// Records how much of the conversation requests skip since it was compacted.
    pub fn set_folded(&mut self, folded: Option<Arc<Folded>>) {
        self.folded = folded;
    }
}

/// The oldest items of a conversation replaced, in what is sent to the model, by a summary the model wrote (or
/// left out, by a trimming policy). The conversation itself keeps every item: this only says how much of it a
/// request skips.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Folded {
    /// Items `0..upto` of the conversation are not sent.
    pub upto: usize,
    /// What is sent in their place (`None`: nothing, they were trimmed).
    pub summary: Option<String>,
}

/// A process-wide unique log id. Each thread takes ids from a block of its own and reserves the next block from
/// the shared counter only when its block runs out, so threads making histories at once (every turn makes some)
/// do not all write one counter.
fn next_log_id() -> u64 {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    const BLOCK: u64 = 1024;
    static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        /// The next id of this thread's block and the end of the block (exclusive).
        static RANGE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    RANGE.with(|range| {
        let (mut next, mut end) = range.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            end = next + BLOCK;
        }
        range.set((next + 1, end));
        next
    })
}

impl Clone for Log {
    /// A copy is a new sequence: it gets its own id (and keeps what was compacted and calibrated).
    fn clone(&self) -> Self {
        Log {
            id: next_log_id(),
            items: self.items.clone(),
            folded: self.folded.clone(),
            calibration: self.calibration.copy(),
            tally: self.tally.copy(),
        }
    }
}

/// Why a tool call failed, as far as the caller can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolErrorKind {
    /// The arguments were malformed or did not fit the tool's schema: fix them and call again.
    InvalidArguments,
    /// No such tool, or the thing it was asked about does not exist.
    NotFound,
    /// Not allowed: a steering rule, a rejected approval, the tool's own permission check.
    PermissionDenied,
    /// The tool (or what it waited for) took too long.
    Timeout,
    /// The call was cancelled.
    Cancelled,
    /// A service behind the tool failed (an MCP server, a remote API).
    Upstream,
    /// Any other failure of the tool.
    #[default]
    Failed,
}

/// An immutable snapshot of a conversation, cheap to clone (it shares the items).
#[derive(Debug, Clone)]
pub struct History(pub Arc<Log>);

impl Default for History {
    fn default() -> Self {
        History::new(Vec::new())
    }
}

impl PartialEq for History {
    /// Histories are equal when their items are (whatever their log ids).
    fn eq(&self, other: &Self) -> bool {
        self.0.items == other.0.items
    }
}

impl History {
    /// A history holding `items` (a new log).
    pub fn new(items: Vec<Item>) -> Self {
        History(Arc::new(Log::new(items)))
    }

    /// The identity of the append-only log this snapshot was taken from. Two snapshots with the same id agree on
    /// every item both hold (the longer one only adds items at the end), so what was derived from the first `n`
    /// items of one — a provider's encoding, say — holds for the other. A history built by [`History::new`] or
    /// copied on write has an id of its own; ids are never reused within a process.
    pub fn log_id(&self) -> u64 {
        self.0.id
    }

    /// The items, oldest first.
    pub fn iter(&self) -> std::slice::Iter<'_, Item> {
        self.0.items.iter()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.0.items.len()
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.0.items.is_empty()
    }

    /// The newest item.
    pub fn last(&self) -> Option<&Item> {
        self.0.items.last()
    }

    /// The items as a slice.
    pub fn as_slice(&self) -> &[Item] {
        &self.0.items
    }

    /// A copy of the items.
    pub fn to_vec(&self) -> Vec<Item> {
        self.0.items.clone()
    }

    /// How much of the conversation requests skip since it was last compacted.
    pub fn folded(&self) -> Option<&Folded> {
        self.0.folded.as_deref()
    }

    /// The same conversation, compacted as `folded` says (a session opened from its log restores it so).
    pub fn with_folded(mut self, folded: Option<Folded>) -> History {
        Arc::make_mut(&mut self.0).folded = folded.map(Arc::new);
        self
    }

    /// How the model's reported usage compares with the runtime's count for this conversation.
    pub fn calibration(&self) -> &Calibration {
        &self.0.calibration
    }

    /// The running token count of the items.
    pub fn tally(&self) -> &Tally {
        &self.0.tally
    }
}

impl<'a> IntoIterator for &'a History {
    type Item = &'a Item;
    type IntoIter = std::slice::Iter<'a, Item>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.items.iter()
    }
}

impl Serialize for History {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.items.serialize(s)
    }
}

/// Token usage of one or more model calls, and their cost when the provider reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from a cache.
    pub cached_tokens: u64,
    /// Cost in US dollars, as the provider reported it (OpenRouter's `usage.cost`); `None` when no call
    /// reported one — never a made-up zero. Absent in JSON written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_tokens += other.cached_tokens;
        // A cost is known once any call reported one; calls that reported none add nothing to it.
        self.cost = match (self.cost, other.cost) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }
}

/// What the last `llm` step in a context produced besides its output: the tool calls of its final response and
/// its usage. `until::no_tool_calls` reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepMeta {
    /// Tool calls in the accepted response (empty when the model answered without tools).
    pub tool_calls: Arc<[ToolCall]>,
    /// Usage of the step's model calls.
    pub usage: Usage,
    /// Cost of the step's model calls in US dollars.
    pub cost: f64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    #[test]
    fn a_tool_name_given_again_is_the_same_string_until_four_newer_names_pushed_it_out() {
        // A thread of its own: the kept names are the thread's.
        std::thread::spawn(|| {
            let search = ToolCall::shared_name("search");
            for name in ["read", "write", "search", "list"] {
                let _ = ToolCall::shared_name(name);
            }
            // "search" was asked for again, so it is the second most recent and still kept.
            assert!(Arc::ptr_eq(&search, &ToolCall::shared_name("search")));
            for name in ["a", "b", "c", "d"] {
                let _ = ToolCall::shared_name(name);
            }
            let again = ToolCall::shared_name("search");
            assert!(!Arc::ptr_eq(&search, &again), "four newer names push the oldest out");
            assert_eq!((&*again, &*ToolCall::shared_name("")), ("search", ""));
        })
        .join()
        .expect("the thread ran");
    }

    #[test]
    fn histories_made_on_many_threads_at_once_never_share_a_log_id() {
        // More ids per thread than one block holds, so every thread reserves several blocks while others do too.
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..3000).map(|_| History::default().log_id()).collect::<Vec<u64>>()))
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let ids = t.join().expect("a thread making histories panicked");
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "one thread's ids are not increasing");
            all.extend(ids);
        }
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "two histories got the same log id");
        assert!(!all.contains(&0), "0 is not an id");
    }

    #[test]
    fn items_print_as_one_transcript_line_each() {
        let call =
            Item::ToolCall(ToolCall { id: "c1".into(), name: "search".into(), arguments: "{\"q\":\"x\"}".into() });
        let failed = Item::ToolResult(ToolResult::error("c1", "no"));
        let ok = Item::ToolResult(ToolResult::ok("c2", "yes"));
        assert_eq!(Item::user("hi").to_string(), "User: hi");
        assert_eq!(call.to_string(), "-> c1 search({\"q\":\"x\"})");
        assert_eq!(failed.to_string(), "<- c1 ERROR no");
        assert_eq!(ok.to_string(), "<- c2 yes");
    }

    #[test]
    fn a_cost_is_summed_over_the_calls_that_reported_one_and_stays_none_when_none_did() {
        let tokens = |cost| Usage { input_tokens: 10, output_tokens: 5, cached_tokens: 0, cost };
        let mut turn = Usage::default();
        turn.add(&tokens(None));
        assert_eq!(turn.cost, None, "no call reported a cost: none is made up");
        turn.add(&tokens(Some(0.25)));
        turn.add(&tokens(None));
        turn.add(&tokens(Some(0.5)));
        assert_eq!((turn.input_tokens, turn.cost), (40, Some(0.75)));
    }

    #[test]
    fn a_usage_without_a_cost_is_written_without_the_field_and_stored_usage_without_it_still_parses() {
        let usage = Usage { input_tokens: 3, output_tokens: 2, cached_tokens: 1, cost: None };
        let json = serde_json::to_value(usage).unwrap_or_default();
        assert_eq!(json, serde_json::json!({"input_tokens": 3, "output_tokens": 2, "cached_tokens": 1}));
        let stored: Usage = serde_json::from_value(json).unwrap_or_default();
        assert_eq!(stored, usage);
        let priced: Usage =
            serde_json::from_str(r#"{"input_tokens":3,"output_tokens":2,"cached_tokens":1,"cost":0.5}"#)
                .unwrap_or_default();
        assert_eq!(priced.cost, Some(0.5));
    }
}
