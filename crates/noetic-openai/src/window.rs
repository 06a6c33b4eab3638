//! The context window and token counting of an OpenAI-compatible backend: configured, or asked of a llama.cpp
//! server (`/props` for its window, `/tokenize` for how its tokenizer counts).

use std::sync::Arc;
use std::time::Duration;

use noetic_core::NoeticError;
use noetic_core::model::{ContextWindow, TokenCounter};
use serde_json::{Value, json};

use crate::OpenAiConfig;

impl OpenAiConfig {
    /// The model's context window (default: the table of well-known models, by the id requests are sent as).
    pub fn context_window(mut self, window: ContextWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// How the model's tokens are counted (default: the estimate, calibrated by the usage responses report).
    pub fn token_counter(mut self, counter: Arc<dyn TokenCounter>) -> Self {
        self.counter = Some(counter);
        self
    }
}

/// A llama.cpp model's tokenizer as a rate: the characters per token it gave a sample of conversation text (prose
/// and tool-call JSON), measured once with the server's `/tokenize`. Calibrated by each response's reported usage
/// like any count.
#[derive(Debug, Clone, Copy)]
pub struct LlamaCppTokens {
    /// Characters per token.
    pub chars_per_token: f32,
}

impl TokenCounter for LlamaCppTokens {
    fn count(&self, text: &str) -> u32 {
        let chars = if text.is_ascii() { text.len() } else { text.chars().count() };
        let tokens = (chars as f64 / f64::from(self.chars_per_token.max(0.5))).ceil();
        if tokens >= f64::from(u32::MAX) { u32::MAX } else { tokens as u32 }
    }

    /// ChatML's `<|im_start|>role\n … <|im_end|>\n`.
    fn per_message(&self) -> u32 {
        5
    }
}

/// OpenAI's tokenizer for a model it knows (`gpt-4o`, `gpt-4.1`, `gpt-5`, `o3` … use `o200k_base`; `gpt-4` and
/// `gpt-3.5-turbo` use `cl100k_base`), as the `tiktoken-rs` crate has it. Its tables are loaded on the first count
/// (a few hundred milliseconds, once per process).
#[cfg(feature = "tiktoken")]
#[derive(Debug, Clone, Copy)]
pub struct Tiktoken(tiktoken_rs::tokenizer::Tokenizer);

#[cfg(feature = "tiktoken")]
impl Tiktoken {
    /// The tokenizer of `model` (an OpenAI model id, with or without the `openai/` prefix), if OpenAI's.
    pub fn for_model(model: &str) -> Option<Tiktoken> {
        let name = model.strip_prefix("openai/").unwrap_or(model);
        tiktoken_rs::tokenizer::get_tokenizer(name).map(Tiktoken)
    }
}

#[cfg(feature = "tiktoken")]
impl TokenCounter for Tiktoken {
    fn count(&self, text: &str) -> u32 {
        match tiktoken_rs::bpe_for_tokenizer(self.0) {
            Ok(bpe) => u32::try_from(bpe.encode_ordinary(text).len()).unwrap_or(u32::MAX),
            Err(_) => noetic_core::model::Estimate.count(text),
        }
    }

    /// `<|start|>role<|message|> … <|end|>`.
    fn per_message(&self) -> u32 {
        3
    }
}

/// What the rate is measured on: conversation-like text, tool JSON included.
const SAMPLE: &str = "Please list the files in the project and read the notes. {\"path\": \"src/main.rs\", \
\"line\": 42} The build failed because the function `parse_args` returns an error when the flag is missing; \
I will fix it and run the tests again.";

/// The window of the llama.cpp server at `base_url` (its OpenAI-compatible URL, `…/v1`) as it reports it (`/props`:
/// the context of one slot), keeping an eighth of it (at most 512 tokens) for the answer, and a counter measured
/// with its tokenizer.
pub async fn llama_cpp_window(
    base_url: &str,
    timeout: Duration,
) -> Result<(ContextWindow, LlamaCppTokens), NoeticError> {
    let root = base_url.trim_end_matches('/').trim_end_matches("/v1");
    let http = reqwest::Client::builder().timeout(timeout).build().map_err(failed)?;
    let props: Value = http.get(format!("{root}/props")).send().await.map_err(failed)?.json().await.map_err(failed)?;
    let n_ctx = props["default_generation_settings"]["n_ctx"].as_u64().or_else(|| props["n_ctx"].as_u64());
    let Some(tokens) = n_ctx.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0) else {
        return Err(NoeticError::ModelFailed {
            message: format!("{root}/props does not say the context size (n_ctx); is it a llama.cpp server?"),
            status: None,
            raw: Some(props.to_string()),
            retryable: false,
            source: None,
        });
    };
    let window = ContextWindow::new(tokens).output_reserve((tokens / 8).min(512));
    let tokenized: Value = http
        .post(format!("{root}/tokenize"))
        .json(&json!({ "content": SAMPLE }))
        .send()
        .await
        .map_err(failed)?
        .json()
        .await
        .map_err(failed)?;
    let count = tokenized["tokens"].as_array().map_or(0, Vec::len);
    let chars_per_token = if count == 0 { 4.0 } else { SAMPLE.len() as f32 / count as f32 };
    Ok((window, LlamaCppTokens { chars_per_token }))
}

fn failed(e: reqwest::Error) -> NoeticError {
    NoeticError::ModelFailed {
        message: format!("could not ask the llama.cpp server for its context size: {}", noetic_http::error_chain(&e)),
        status: e.status().map(|s| s.as_u16()),
        raw: None,
        retryable: true,
        source: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[cfg(feature = "tiktoken")]
    #[test]
    fn openai_models_are_counted_with_their_own_tokenizer() {
        let counter = Tiktoken::for_model("openai/gpt-4o-mini").unwrap();
        assert_eq!(counter.count("hello world"), 2);
        assert!(Tiktoken::for_model("gpt-4").is_some());
        assert!(Tiktoken::for_model("smollm2-135m").is_none());
    }

    #[test]
    fn the_llama_cpp_counter_divides_the_characters_by_the_measured_rate() {
        let tokens = LlamaCppTokens { chars_per_token: 3.0 };
        assert_eq!(tokens.count("abcdefg"), 3);
        assert_eq!(tokens.count(""), 0);
    }
}
