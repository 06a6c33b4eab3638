//! Where the provider lives and how to talk to it: base URL, API key, extra headers, timeouts, body cap, retries.

use std::fmt;

use noetic_core::model::{Capabilities, RetryPolicy};
pub use noetic_http::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_TIMEOUT};
use noetic_http::{DEFAULT_RETRY, HttpConfig, non_empty_var};

/// OpenAI's own API.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// OpenRouter's OpenAI-compatible API.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// A local Ollama server's OpenAI-compatible API.
pub const OLLAMA_BASE_URL: &str = "http://localhost:11434/v1";

/// The environment variable holding an OpenAI key.
pub const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";
/// The environment variable holding a base URL (any OpenAI-compatible server).
pub const OPENAI_BASE_URL_ENV: &str = "OPENAI_BASE_URL";
/// The environment variable holding an OpenRouter key.
pub const OPENROUTER_API_KEY_ENV: &str = "OPENROUTER_API_KEY";

/// The default retry policy: 3 attempts, exponential backoff from 500 ms (capped at 30 s).
pub fn default_retry_policy() -> RetryPolicy {
    DEFAULT_RETRY
}

/// How to reach an OpenAI-compatible chat-completions server.
///
/// ```
/// use std::time::Duration;
/// use noetic_openai::OpenAiConfig;
///
/// // A local vLLM or llama.cpp server needs no key.
/// let local = OpenAiConfig::new().base_url("http://127.0.0.1:8000/v1").timeout(Duration::from_secs(120));
/// assert!(!local.has_api_key());
///
/// // OpenRouter with its optional attribution headers.
/// let router = OpenAiConfig::openrouter().header("HTTP-Referer", "https://example.com").header("X-Title", "My agent");
/// assert_eq!(router.get_base_url(), "https://openrouter.ai/api/v1");
/// ```
///
/// The settings every HTTP provider shares (base URL, key, headers, timeouts, body cap, retries, model override)
/// are an [`HttpConfig`] it dereferences to, with the builder methods `base_url`, `api_key`, `no_api_key`,
/// `key_env`, `header`, `timeout`, `connect_timeout`, `idle_timeout`, `max_body_bytes`, `retry`, `model_override`
/// and their getters.
#[derive(Clone)]
pub struct OpenAiConfig {
    pub(crate) http: HttpConfig,
    pub(crate) capabilities: Capabilities,
    pub(crate) narrow_named_tool_choice: bool,
    pub(crate) late_system_as_user: bool,
    /// The model's window, when configured (else the table of well-known models).
    pub(crate) window: Option<noetic_core::model::ContextWindow>,
    /// How tokens are counted, when configured (else the estimate).
    pub(crate) counter: Option<std::sync::Arc<dyn noetic_core::model::TokenCounter>>,
}

noetic_http::http_config_methods!(OpenAiConfig);

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            http: HttpConfig::new(OPENAI_BASE_URL, OPENAI_API_KEY_ENV),
            capabilities: Capabilities::default(),
            narrow_named_tool_choice: false,
            window: None,
            counter: None,
            late_system_as_user: false,
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The shared part never prints the key: configs end up in logs.
        f.debug_struct("OpenAiConfig")
            .field("http", &self.http)
            .field("capabilities", &self.capabilities)
            .field("narrow_named_tool_choice", &self.narrow_named_tool_choice)
            .field("late_system_as_user", &self.late_system_as_user)
            .field("window", &self.window)
            .finish()
    }
}

impl OpenAiConfig {
    /// OpenAI's API, no key, default timeout and retries.
    pub fn new() -> Self {
        OpenAiConfig::default()
    }

    /// Configuration from the process environment; see [`OpenAiConfig::from_vars`].
    pub fn from_env() -> Self {
        OpenAiConfig::from_vars(|name| std::env::var(name).ok())
    }

    /// Configuration from variables read through `lookup` (tests pass a map; [`OpenAiConfig::from_env`] passes
    /// the process environment).
    ///
    /// * `OPENAI_API_KEY` set: that key, against `OPENAI_BASE_URL` or OpenAI's API.
    /// * else `OPENROUTER_API_KEY` set: that key, against `OPENAI_BASE_URL` or OpenRouter.
    /// * else no key, against `OPENAI_BASE_URL` or OpenAI's API (a local server needs no key; OpenAI will answer
    ///   401 and the error says to set `OPENAI_API_KEY`).
    ///
    /// Empty values count as unset.
    pub fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let base = non_empty_var(&lookup, OPENAI_BASE_URL_ENV);
        if let Some(key) = non_empty_var(&lookup, OPENAI_API_KEY_ENV) {
            let config = OpenAiConfig::new().api_key(key);
            return match base {
                Some(base) => config.base_url(base),
                None => config,
            };
        }
        if let Some(key) = non_empty_var(&lookup, OPENROUTER_API_KEY_ENV) {
            let config = OpenAiConfig::openrouter_with(Some(key));
            return match base {
                Some(base) => config.base_url(base),
                None => config,
            };
        }
        match base {
            Some(base) => OpenAiConfig::new().base_url(base),
            None => OpenAiConfig::new(),
        }
    }

    /// OpenRouter (`https://openrouter.ai/api/v1`) with the key from `OPENROUTER_API_KEY`, if set. Model ids such
    /// as `openai/gpt-4o-mini` or `anthropic/claude-3.5-haiku` are sent as they are.
    pub fn openrouter() -> Self {
        OpenAiConfig::openrouter_with(non_empty_var(&|name: &str| std::env::var(name).ok(), OPENROUTER_API_KEY_ENV))
    }

    fn openrouter_with(key: Option<String>) -> Self {
        let mut http = HttpConfig::new(OPENROUTER_BASE_URL, OPENROUTER_API_KEY_ENV);
        http.api_key = key;
        OpenAiConfig { http, ..OpenAiConfig::default() }
    }

    /// A local Ollama server (`http://localhost:11434/v1`), no key.
    pub fn ollama() -> Self {
        OpenAiConfig::new().base_url(OLLAMA_BASE_URL)
    }

    /// llama.cpp's own server at `base_url` (e.g. `http://127.0.0.1:8080/v1`), no key. It constrains decoding to a
    /// GBNF grammar (`grammar`, a llama.cpp extension) and to `response_format` JSON Schemas, so both
    /// [`Capabilities`] are claimed: the steering judge's verdicts are then grammar-constrained. Its server takes
    /// `tool_choice` only as a string (it ignores a named function and lets the model choose), so named tool
    /// choices are narrowed (see [`OpenAiConfig::narrow_named_tool_choice`]).
    pub fn llama_cpp(base_url: impl Into<String>) -> Self {
        OpenAiConfig::new()
            .base_url(base_url)
            .capabilities(Capabilities { grammar: true, json_schema: true })
            .narrow_named_tool_choice(true)
    }

    /// For servers that accept `tool_choice` only as `auto` / `required` / `none` (llama.cpp): a named tool choice
    /// is sent as `required` with that one tool in `tools`, which forces the same call. Default off: OpenAI,
    /// OpenRouter and vLLM take the named form.
    pub fn narrow_named_tool_choice(mut self, on: bool) -> Self {
        self.narrow_named_tool_choice = on;
        self
    }

    /// What the server can enforce on its output (default: nothing claimed). `grammar` makes requests carry
    /// [`ModelRequest::grammar`](noetic_core::model::ModelRequest::grammar) as llama.cpp's `grammar` field — OpenAI's
    /// own API rejects that field, so claim it only for servers that take it (llama.cpp; see
    /// [`OpenAiConfig::llama_cpp`]).
    pub fn capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// For servers whose chat template allows a system message only first (llama.cpp or vLLM serving Gemma,
    /// Mistral and others answer 400 otherwise): system messages after the first — the runtime's developer items,
    /// such as steering feedback and guidance — are sent as `user` messages starting `[system] `. Default off:
    /// OpenAI and ChatML templates (Qwen, SmolLM2, the offline model's) take them in place.
    pub fn late_system_as_user(mut self, on: bool) -> Self {
        self.late_system_as_user = on;
        self
    }

    /// What the server is configured to enforce on its output.
    pub fn get_capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// The model id sent for a request naming `requested`: the override if set; on OpenAI's own API a leading
    /// `openai/` is dropped (so OpenRouter-style ids, the runtime's default, work there too); else unchanged.
    pub fn model_for(&self, requested: &str) -> String {
        if let Some(model) = &self.http.model_override {
            return model.clone();
        }
        if self.http.base_url == OPENAI_BASE_URL
            && let Some(rest) = requested.strip_prefix("openai/")
        {
            return rest.to_owned();
        }
        requested.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn openai_key_wins_and_base_url_overrides() {
        let c = OpenAiConfig::from_vars(vars(&[
            ("OPENAI_API_KEY", "sk-1"),
            ("OPENROUTER_API_KEY", "or-1"),
            ("OPENAI_BASE_URL", "http://localhost:8000/v1/"),
        ]));
        assert_eq!(c.api_key.as_deref(), Some("sk-1"));
        assert_eq!(c.get_base_url(), "http://localhost:8000/v1");
        assert_eq!(c.get_key_env(), "OPENAI_API_KEY");
    }

    #[test]
    fn openrouter_key_is_used_when_openai_key_is_absent_or_empty() {
        let c = OpenAiConfig::from_vars(vars(&[("OPENAI_API_KEY", " "), ("OPENROUTER_API_KEY", "or-1")]));
        assert_eq!(c.api_key.as_deref(), Some("or-1"));
        assert_eq!(c.get_base_url(), OPENROUTER_BASE_URL);
        assert_eq!(c.get_key_env(), "OPENROUTER_API_KEY");
    }

    #[test]
    fn no_key_means_no_authorization_and_openai_base() {
        let c = OpenAiConfig::from_vars(vars(&[]));
        assert!(!c.has_api_key());
        assert_eq!(c.get_base_url(), OPENAI_BASE_URL);
        let local = OpenAiConfig::from_vars(vars(&[("OPENAI_BASE_URL", "http://localhost:11434/v1")]));
        assert!(!local.has_api_key());
        assert_eq!(local.get_base_url(), OLLAMA_BASE_URL);
    }

    #[test]
    fn debug_output_redacts_the_key() {
        let c = OpenAiConfig::new().api_key("sk-secret").header("X-Title", "t");
        let text = format!("{c:?}");
        assert!(!text.contains("sk-secret"));
        assert!(text.contains("<redacted>"));
    }

    #[test]
    fn model_ids_are_sent_as_is_except_the_openai_prefix_on_openai() {
        assert_eq!(OpenAiConfig::openrouter().model_for("openai/gpt-4o-mini"), "openai/gpt-4o-mini");
        assert_eq!(OpenAiConfig::new().model_for("openai/gpt-4o-mini"), "gpt-4o-mini");
        assert_eq!(OpenAiConfig::ollama().model_for("llama3.2"), "llama3.2");
        assert_eq!(OpenAiConfig::ollama().model_override("qwen3").model_for("openai/gpt-4o-mini"), "qwen3");
    }
}
