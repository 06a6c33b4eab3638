//! # noetic-openai — OpenAI-compatible chat completions for noetic
//!
//! One [`Model`](noetic_core::model::Model) for every server that speaks the chat-completions wire format: OpenAI,
//! OpenRouter (model ids like `openai/gpt-4o-mini`), Ollama, vLLM and llama.cpp's server.
//!
//! * [`OpenAiConfig`] — base URL, API key, extra headers, timeouts (request, idle), body cap, retries; from code
//!   or from the environment (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENROUTER_API_KEY`).
//! * [`OpenAiModel`] — this wire format over `noetic-http`'s transport and driver (shared with the Anthropic
//!   provider): `call` and `stream` over reqwest, retries with backoff before the first streamed byte only, typed
//!   errors that say what to do.
//! * [`wire`] — the translation as pure functions (request body, response parsing, SSE → deltas), usable and
//!   tested without a socket.
//!
//! ## An agent on OpenRouter
//!
//! ```no_run
//! use std::sync::Arc;
//! use noetic::agent::Runtime;
//! use noetic_openai::{OpenAiConfig, OpenAiModel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Reads OPENAI_API_KEY / OPENAI_BASE_URL, or OPENROUTER_API_KEY.
//! let model = OpenAiModel::new(OpenAiConfig::from_env())?;
//! let runtime = Runtime::builder().model(Arc::new(model)).model_id("openai/gpt-4o-mini").build()?;
//! let answer = runtime.session("user-42").send("What is the capital of France?").await?.await?;
//! println!("{answer}");
//! # Ok(())
//! # }
//! ```
//!
//! The steering layer's judge calls go through the runtime's model too, so a rule judged by
//! `openai/gpt-4o-mini` uses this provider. For a local server, point the base URL at it:
//! `OpenAiConfig::ollama()` or `OpenAiConfig::new().base_url("http://localhost:8080/v1")`; with
//! [`OpenAiConfig::model_override`] every request (agent and judge) uses the local model.
//!
//! ## Decisions
//!
//! * `Developer` items are sent as `system` messages in place: most compatible servers have no `developer` role.
//!   Chat templates that allow a system message only first (Gemma, Mistral on llama.cpp or vLLM) answer 400 to
//!   that; [`OpenAiConfig::late_system_as_user`] sends those as `[system] …` user messages instead.
//! * llama.cpp's server: [`OpenAiConfig::llama_cpp`] sends judge calls a verdict grammar and narrows a named
//!   `tool_choice` (which that server ignores) to `required` over the one tool.
//! * `max_tokens` is sent as `max_tokens` (OpenAI's reasoning models want `max_completion_tokens`; leave it unset
//!   for them).
//! * Structured output uses `response_format: json_schema` with `strict: false`, because strict mode rejects
//!   schemas that most derived schemas are (optional fields, no `additionalProperties: false`); the runtime
//!   validates the output against the schema anyway.
//! * On OpenAI's own API a leading `openai/` is dropped from model ids, so the runtime's default id works there.

mod client;
mod config;
mod status;
mod window;
pub mod wire;

pub use client::OpenAiModel;
pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_TIMEOUT, OLLAMA_BASE_URL, OPENAI_API_KEY_ENV,
    OPENAI_BASE_URL, OPENAI_BASE_URL_ENV, OPENROUTER_API_KEY_ENV, OPENROUTER_BASE_URL, OpenAiConfig,
    default_retry_policy,
};
#[cfg(feature = "tiktoken")]
pub use window::Tiktoken;
pub use window::{LlamaCppTokens, llama_cpp_window};
