//! Counting the tokens of what is sent: a [`TokenCounter`] per model (the provider's tokenizer where one is
//! available, else [`Estimate`]), corrected by what the provider reported it read ([`Calibration`]).

use std::sync::atomic::{AtomicU32, Ordering};

use super::{Item, ModelRequest, ToolSpec};

/// Counts tokens as a model's tokenizer does.
pub trait TokenCounter: Send + Sync {
    /// The tokens of `text`.
    fn count(&self, text: &str) -> u32;

    /// The tokens a message costs beyond its text (role markers, separators). Default: 4, OpenAI's chat format.
    fn per_message(&self) -> u32 {
        4
    }
}

/// The estimate used when no tokenizer is known: a quarter of the text's characters, rounded up (SPEC 2.3).
/// Calibrated by the provider's reported usage, it is within a few per cent on ordinary text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Estimate;

impl TokenCounter for Estimate {
    fn count(&self, text: &str) -> u32 {
        // ASCII text (most of it) is counted by its length; other text by its characters.
        let chars = if is_ascii(text) { text.len() } else { text.chars().count() };
        u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
    }
}

/// True when `text` is ASCII. With SSE2 (every x86-64 processor) sixteen bytes a step: their high bits gathered
/// into one register over the whole text and tested once at the end, about a quarter of the instructions of the
/// standard library's word-at-a-time test (through `safe_arch`'s safe wrappers: the workspace forbids `unsafe`).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn is_ascii(text: &str) -> bool {
    use safe_arch::{bitor_m128i, load_unaligned_m128i, move_mask_i8_m128i, set_splat_i8_m128i};
    let mut sixteens = text.as_bytes().chunks_exact(16);
    let mut high = set_splat_i8_m128i(0);
    for sixteen in &mut sixteens {
        let Ok(sixteen) = <&[u8; 16]>::try_from(sixteen) else { return text.is_ascii() };
        high = bitor_m128i(high, load_unaligned_m128i(sixteen));
    }
    move_mask_i8_m128i(high) == 0 && sixteens.remainder().is_ascii()
}

/// Elsewhere: the standard library's test.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn is_ascii(text: &str) -> bool {
    text.is_ascii()
}

/// The tokens of an item, message overhead included.
pub fn item_tokens(counter: &dyn TokenCounter, item: &Item) -> u32 {
    let text = match item {
        Item::Message { content, .. } => counter.count(content),
        Item::ToolCall(c) => counter.count(&c.name).saturating_add(counter.count(&c.arguments)),
        Item::ToolResult(r) => counter.count(&r.content),
    };
    text.saturating_add(counter.per_message())
}

/// The tokens of items.
pub fn items_tokens<'a>(counter: &dyn TokenCounter, items: impl IntoIterator<Item = &'a Item>) -> u32 {
    items.into_iter().fold(0u32, |sum, item| sum.saturating_add(item_tokens(counter, item)))
}

/// The tokens of the tools offered (their names, descriptions and argument schemas).
pub fn tools_tokens(counter: &dyn TokenCounter, tools: &[ToolSpec]) -> u32 {
    // Each schema serialised straight into bytes (the same text as `Display`, which goes through the formatter
    // one token at a time, several times slower).
    tools.iter().fold(0u32, |sum, t| {
        sum.saturating_add(counter.count(&t.name))
            .saturating_add(counter.count(&t.description))
            .saturating_add(counter.count(&serde_json::to_string(&t.parameters).unwrap_or_default()))
            .saturating_add(counter.per_message())
    })
}

/// The tokens of a whole request: instructions, tools, recalled context, history and tail.
pub fn request_tokens(counter: &dyn TokenCounter, request: &ModelRequest) -> u32 {
    let instructions =
        request.instructions.as_deref().map_or(0, |i| counter.count(i).saturating_add(counter.per_message()));
    instructions
        .saturating_add(tools_tokens(counter, &request.tools))
        .saturating_add(items_tokens(counter, request.messages()))
}

/// How the provider's count compares with ours: the ratio of the input tokens a response reported to the tokens
/// counted for its request. Counts are multiplied by it (1.0 until a response reported its usage), so an estimate
/// converges on the provider's tokenizer after one call. Kept as the bits of an `f32` so that reading and
/// updating it take no lock.
#[derive(Debug)]
pub struct Calibration(AtomicU32);

impl Default for Calibration {
    fn default() -> Self {
        Calibration(AtomicU32::new(1.0f32.to_bits()))
    }
}

impl Calibration {
    /// A calibration with the same ratio.
    pub fn copy(&self) -> Calibration {
        Calibration(AtomicU32::new(self.0.load(Ordering::Relaxed)))
    }

    /// The ratio (1.0 before any report).
    pub fn ratio(&self) -> f32 {
        f32::from_bits(self.0.load(Ordering::Relaxed))
    }

    /// `counted` corrected by the ratio, rounded up.
    pub fn adjust(&self, counted: u32) -> u32 {
        let adjusted = (f64::from(counted) * f64::from(self.ratio())).ceil();
        if adjusted >= f64::from(u32::MAX) { u32::MAX } else { adjusted as u32 }
    }

    /// A response reported `reported` input tokens for a request we counted as `counted`. Reports of nothing (a
    /// provider that gives no usage) change nothing; the ratio stays within 0.25 … 4 so one odd report cannot
    /// make the window useless.
    pub fn observe(&self, counted: u32, reported: u64) {
        if counted == 0 || reported == 0 {
            return;
        }
        let ratio = (reported as f64 / f64::from(counted)).clamp(0.25, 4.0) as f32;
        self.0.store(ratio.to_bits(), Ordering::Relaxed);
    }
}

/// The running token count of a conversation's items (`sums[i]` = the tokens of items `0..i`), extended as items
/// are appended, so a request counts only the items that are new since the last one; and where its current turn
/// starts, found the same way.
#[derive(Debug, Default)]
pub struct Tally(std::sync::Mutex<Vec<u64>>, std::sync::Mutex<TurnScan>, std::sync::Mutex<Option<ToolsCount>>);

/// The tokens of the tools the last request offered (kept with them: the same set is not counted again).
#[derive(Debug, Clone)]
struct ToolsCount {
    tools: std::sync::Arc<[ToolSpec]>,
    tokens: u32,
}

/// How far the conversation was scanned for turn starts, and the last one found.
#[derive(Debug, Default, Clone, Copy)]
struct TurnScan {
    scanned: usize,
    start: usize,
}

/// True when `items[i]` starts a turn: a user message right after an assistant's answer.
pub fn starts_turn(items: &[Item], i: usize) -> bool {
    i > 0
        && matches!(items.get(i), Some(Item::Message { role: super::Role::User, .. }))
        && matches!(items.get(i - 1), Some(Item::Message { role: super::Role::Assistant, .. }))
}

impl Tally {
    /// A tally with the same sums.
    pub fn copy(&self) -> Tally {
        Tally(
            std::sync::Mutex::new(crate::sync::lock(&self.0).clone()),
            std::sync::Mutex::new(*crate::sync::lock(&self.1)),
            std::sync::Mutex::new(crate::sync::lock(&self.2).clone()),
        )
    }

    /// The tokens of `tools` ([`tools_tokens`]), counted once per set: a turn offers the same set to each request.
    pub fn tools_tokens(&self, counter: &dyn TokenCounter, tools: &std::sync::Arc<[ToolSpec]>) -> u32 {
        let mut cached = crate::sync::lock(&self.2);
        if let Some(count) = cached.as_ref().filter(|c| std::sync::Arc::ptr_eq(&c.tools, tools)) {
            return count.tokens;
        }
        let tokens = tools_tokens(counter, tools);
        *cached = Some(ToolsCount { tools: tools.clone(), tokens });
        tokens
    }

    /// Where the current turn of `items` starts (after the last answer of an earlier turn; 0 for the first turn),
    /// scanning only the items not scanned before.
    pub fn turn_start(&self, items: &[Item]) -> usize {
        let mut scan = crate::sync::lock(&self.1);
        if scan.scanned > items.len() {
            *scan = TurnScan::default();
        }
        for i in scan.scanned.max(1)..items.len() {
            if starts_turn(items, i) {
                scan.start = i;
            }
        }
        scan.scanned = items.len();
        scan.start
    }

    /// The tokens of `items[from..]`, counting only the items the tally has not seen.
    pub fn tokens_from(&self, counter: &dyn TokenCounter, items: &[Item], from: usize) -> u64 {
        let mut sums = crate::sync::lock(&self.0);
        if sums.is_empty() {
            sums.push(0);
        }
        // Items are only appended, never changed: what was counted holds.
        sums.truncate(items.len() + 1);
        let mut total = sums.last().copied().unwrap_or(0);
        for item in items.iter().skip(sums.len() - 1) {
            total += u64::from(item_tokens(counter, item));
            sums.push(total);
        }
        total - sums.get(from.min(items.len())).copied().unwrap_or(0)
    }

    /// The smallest index `c` at or after `from` such that `items[c..]` takes at most `budget` tokens (requires a
    /// [`Tally::tokens_from`] first, which brings the sums up to date).
    pub fn first_fitting(&self, items: usize, from: usize, budget: u64) -> usize {
        let sums = crate::sync::lock(&self.0);
        let total = sums.get(items).copied().unwrap_or(0);
        let start = from.min(items);
        // sums is increasing: the first index whose suffix fits.
        let tail = sums.get(start..=items).unwrap_or(&[]);
        start + tail.partition_point(|prefix| total - prefix > budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_ascii_exactly_when_no_byte_anywhere_has_its_high_bit() {
        for len in 0..70 {
            let ascii = "a~\u{7f}\0".repeat(len).chars().take(len).collect::<String>();
            assert!(is_ascii(&ascii), "{len} ASCII characters");
            for at in 0..len {
                let mut other: Vec<char> = ascii.chars().collect();
                other[at] = 'é';
                let other: String = other.into_iter().collect();
                assert!(!is_ascii(&other), "'é' at {at} of {len}");
                assert_eq!(Estimate.count(&other), u32::try_from(len.div_ceil(4)).unwrap_or(u32::MAX));
            }
        }
    }

    #[test]
    fn the_estimate_is_a_quarter_of_the_characters_rounded_up() {
        assert_eq!(Estimate.count(""), 0);
        assert_eq!(Estimate.count("abcde"), 2);
        assert_eq!(Estimate.count("éééé"), 1, "characters, not bytes");
    }

    #[test]
    fn the_tally_counts_new_items_only_and_finds_the_first_suffix_that_fits() {
        let items: Vec<Item> = (0..4).map(|_| Item::user("abcdefgh")).collect();
        let tally = Tally::default();
        // 2 tokens of text and 4 of message overhead each.
        assert_eq!(tally.tokens_from(&Estimate, &items[..2], 0), 12);
        assert_eq!(tally.tokens_from(&Estimate, &items, 0), 24);
        assert_eq!(tally.tokens_from(&Estimate, &items, 3), 6);
        assert_eq!(tally.first_fitting(4, 0, 13), 2);
        assert_eq!(tally.first_fitting(4, 0, 100), 0);
        assert_eq!(tally.first_fitting(4, 3, 0), 4);
    }

    #[test]
    fn the_tally_finds_the_current_turn_scanning_only_new_items() {
        let mut items = vec![Item::user("q1"), Item::assistant("a1")];
        let tally = Tally::default();
        assert_eq!(tally.turn_start(&items), 0);
        items.extend([Item::user("q2"), Item::assistant("thinking")]);
        assert_eq!(tally.turn_start(&items), 2);
        items.push(Item::user("q3"));
        assert_eq!(tally.turn_start(&items), 4);
        assert_eq!(tally.turn_start(&items[..2]), 0, "a shorter conversation is scanned afresh");
    }

    #[test]
    fn calibration_follows_the_reported_usage_within_bounds() {
        let c = Calibration::default();
        assert_eq!(c.adjust(100), 100);
        c.observe(100, 150);
        assert_eq!(c.adjust(100), 150);
        c.observe(100, 0);
        assert_eq!(c.adjust(100), 150, "a response without usage changes nothing");
        c.observe(1, 1_000);
        assert_eq!(c.adjust(100), 400, "at most four times");
    }
}
