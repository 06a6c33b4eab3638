//! How many tokens a model reads and how many of them are kept free for its answer: [`ContextWindow`], with the
//! windows of well-known models ([`known_window`]).

use serde::{Deserialize, Serialize};

/// A model's context window: the tokens a request and its answer share, and how many of them are kept for the
/// answer. A request is fitted into `tokens - output_reserve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextWindow {
    /// Tokens the model reads and writes in one call.
    pub tokens: u32,
    /// Tokens kept free for the answer (a step's `max_tokens`, when it sets one, replaces it).
    pub output_reserve: u32,
}

impl ContextWindow {
    /// A window of `tokens`, with a quarter of it (at most 16,384 tokens) kept for the answer.
    pub fn new(tokens: u32) -> Self {
        ContextWindow { tokens, output_reserve: (tokens / 4).min(16_384) }
    }

    /// The same window keeping `reserve` tokens for the answer.
    pub fn output_reserve(mut self, reserve: u32) -> Self {
        self.output_reserve = reserve;
        self
    }

    /// The tokens a request may take: the window less the answer's reserve (`max_tokens` when given).
    pub fn input_room(&self, max_tokens: Option<u32>) -> u32 {
        self.tokens.saturating_sub(max_tokens.unwrap_or(self.output_reserve))
    }
}

/// Known windows, by the start of the model's name (provider prefixes such as `openai/` are ignored). The longest
/// matching start wins.
const KNOWN: &[(&str, u32, u32)] = &[
    ("gpt-4o", 128_000, 16_384),
    ("gpt-4.1", 1_047_576, 32_768),
    ("gpt-4-turbo", 128_000, 4_096),
    ("gpt-4", 8_192, 2_048),
    ("gpt-3.5-turbo", 16_385, 4_096),
    ("gpt-5", 400_000, 32_768),
    ("o1", 200_000, 32_768),
    ("o3", 200_000, 32_768),
    ("o4-mini", 200_000, 32_768),
    ("claude", 200_000, 16_384),
    ("gemini", 1_048_576, 8_192),
    ("llama3", 128_000, 4_096),
    ("llama-3", 128_000, 4_096),
    ("mistral", 32_768, 4_096),
    ("qwen", 32_768, 4_096),
    ("smollm2", 8_192, 512),
];

/// The window of a well-known model (`gpt-4o-mini`, `openai/gpt-4o`, `anthropic/claude-sonnet-4`,
/// `smollm2-135m` …), `None` for one this table does not know: then only configuration says
/// ([`Model::context_window`](crate::model::Model::context_window)).
pub fn known_window(model: &str) -> Option<ContextWindow> {
    // Asked before every model request, nearly always with the name asked last on the thread: that name's answer is
    // kept (comparing a name costs a few dozen instructions; looking it up in the table about 550).
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Box<str>, Option<ContextWindow>)>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        match &*last {
            Some((name, window)) if **name == *model => *window,
            _ => {
                let window = look_up(model);
                *last = Some((model.into(), window));
                window
            }
        }
    })
}

/// [`known_window`], from the table.
fn look_up(model: &str) -> Option<ContextWindow> {
    // The name's head is lowercased on the stack, no copy of it is made, and the starts are compared byte by byte
    // (most differ at their first byte; a call to `memcmp` per start and a `rsplit` searcher cost about 900
    // instructions a request).
    let bytes = model.as_bytes();
    let name = bytes.iter().rposition(|&b| b == b'/').map_or(bytes, |slash| &bytes[slash + 1..]);
    let head = &name[..name.len().min(LONGEST_START)];
    let mut lower = [0u8; LONGEST_START];
    for (to, from) in lower.iter_mut().zip(head) {
        *to = from.to_ascii_lowercase();
    }
    let name = &lower[..head.len()];
    let mut found: Option<&(&str, u32, u32)> = None;
    for known in KNOWN {
        let start = known.0.as_bytes();
        let longer = found.is_none_or(|f| f.0.len() <= start.len());
        if longer && start.len() <= name.len() && start.iter().zip(name).all(|(a, b)| a == b) {
            found = Some(known);
        }
    }
    found.map(|&(_, tokens, output_reserve)| ContextWindow { tokens, output_reserve })
}

/// No start in [`KNOWN`] is longer: only this much of a name is compared.
const LONGEST_START: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_asked_again_gets_its_answer_again_and_the_next_name_its_own() {
        for _ in 0..2 {
            for _ in 0..2 {
                assert_eq!(known_window("gpt-4-0613").map(|w| w.tokens), Some(8_192));
            }
            for _ in 0..2 {
                assert_eq!(known_window("my-own-model"), None);
            }
            assert_eq!(known_window("openai/GPT-4o").map(|w| w.tokens), Some(128_000));
        }
    }

    #[test]
    fn known_models_are_found_by_the_start_of_their_name_whatever_the_provider_prefix() {
        assert_eq!(known_window("gpt-4o-mini").map(|w| w.tokens), Some(128_000));
        assert_eq!(known_window("openai/gpt-4o").map(|w| w.tokens), Some(128_000));
        assert_eq!(known_window("gpt-4-0613").map(|w| w.tokens), Some(8_192), "the longest start wins over gpt-4o");
        assert_eq!(known_window("anthropic/claude-sonnet-4").map(|w| w.tokens), Some(200_000));
        assert_eq!(known_window("smollm2-135m").map(|w| w.output_reserve), Some(512));
        assert_eq!(known_window("my-own-model"), None);
    }

    #[test]
    fn known_models_are_found_whatever_the_case_of_their_name() {
        assert_eq!(known_window("OpenAI/GPT-4o-Mini").map(|w| w.tokens), Some(128_000));
        assert_eq!(known_window("Claude-3-Opus").map(|w| w.tokens), Some(200_000));
        assert_eq!(known_window("GPT"), None, "a name shorter than every start matches none");
        assert_eq!(known_window("gpt-4\u{e9}"), Some(ContextWindow { tokens: 8_192, output_reserve: 2_048 }));
    }

    #[test]
    fn every_known_start_fits_the_compared_head_of_a_name() {
        assert!(KNOWN.iter().all(|(start, _, _)| start.len() <= LONGEST_START && *start == start.to_lowercase()));
    }

    #[test]
    fn the_input_room_is_the_window_less_the_answer() {
        let w = ContextWindow::new(8_192).output_reserve(512);
        assert_eq!(w.input_room(None), 7_680);
        assert_eq!(w.input_room(Some(1_000)), 7_192);
        assert_eq!(ContextWindow::new(100).input_room(Some(500)), 0);
    }
}
