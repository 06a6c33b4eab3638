//! Where the provider lives and how to talk to it: base URL, API key, extra headers, timeouts, body cap, retries.

use std::fmt;
use std::time::Duration;

use noetic::model::Capabilities;
use noetic::step::{Backoff, RetryPolicy};

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

/// The default request timeout (the same as OpenAI's own SDKs).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The default idle limit on a streamed response: the longest silence between two pieces of the body.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The default retry policy: 3 attempts, exponential backoff from 500 ms (capped at 30 s).
pub fn default_retry_policy() -> RetryPolicy {
    RetryPolicy::new(3, Backoff::Exponential, Duration::from_millis(500))
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
#[derive(Clone)]
pub struct OpenAiConfig {
    pub(crate) base_url: String,
    pub(crate) api_key: Option<String>,
    pub(crate) key_env: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) retry: RetryPolicy,
    pub(crate) model_override: Option<String>,
    pub(crate) capabilities: Capabilities,
    pub(crate) narrow_named_tool_choice: bool,
    pub(crate) late_system_as_user: bool,
    /// The model's window, when configured (else the table of well-known models).
    pub(crate) window: Option<noetic::window::ContextWindow>,
    /// How tokens are counted, when configured (else the estimate).
    pub(crate) counter: Option<std::sync::Arc<dyn noetic::window::TokenCounter>>,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: OPENAI_BASE_URL.to_owned(),
            api_key: None,
            key_env: OPENAI_API_KEY_ENV.to_owned(),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_body_bytes: noetic_http::DEFAULT_MAX_BODY_BYTES,
            retry: default_retry_policy(),
            model_override: None,
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
        // Never print the key: configs end up in logs.
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("key_env", &self.key_env)
            .field("headers", &self.headers.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("retry", &self.retry)
            .field("model_override", &self.model_override)
            .field("capabilities", &self.capabilities)
            .field("narrow_named_tool_choice", &self.narrow_named_tool_choice)
            .field("late_system_as_user", &self.late_system_as_user)
            .field("window", &self.window)
            .finish()
    }
}

/// Reads a variable, treating an empty or blank value as absent.
fn non_empty(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
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
        let base = non_empty(&lookup, OPENAI_BASE_URL_ENV);
        if let Some(key) = non_empty(&lookup, OPENAI_API_KEY_ENV) {
            let config = OpenAiConfig::new().api_key(key);
            return match base {
                Some(base) => config.base_url(base),
                None => config,
            };
        }
        if let Some(key) = non_empty(&lookup, OPENROUTER_API_KEY_ENV) {
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
        OpenAiConfig::openrouter_with(non_empty(&|name: &str| std::env::var(name).ok(), OPENROUTER_API_KEY_ENV))
    }

    fn openrouter_with(key: Option<String>) -> Self {
        OpenAiConfig {
            base_url: OPENROUTER_BASE_URL.to_owned(),
            api_key: key,
            key_env: OPENROUTER_API_KEY_ENV.to_owned(),
            ..OpenAiConfig::default()
        }
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
    /// [`ModelRequest::grammar`](noetic::model::ModelRequest::grammar) as llama.cpp's `grammar` field — OpenAI's
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

    /// Sets the base URL, e.g. `http://localhost:8080/v1` for llama.cpp's server; requests go to
    /// `{base}/chat/completions`. A trailing `/` is ignored.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into().trim_end_matches('/').to_owned();
        self
    }

    /// Sets the API key, sent as `Authorization: Bearer <key>`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Removes the API key (no `Authorization` header is sent).
    pub fn no_api_key(mut self) -> Self {
        self.api_key = None;
        self
    }

    /// Names the environment variable that error messages tell the user to set when the key is missing or wrong
    /// (default `OPENAI_API_KEY`; `OPENROUTER_API_KEY` for [`OpenAiConfig::openrouter`]).
    pub fn key_env(mut self, name: impl Into<String>) -> Self {
        self.key_env = name.into();
        self
    }

    /// Adds a header to every request, e.g. OpenRouter's `HTTP-Referer` and `X-Title`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The request timeout of one attempt (default 600 s). It bounds a whole non-streaming call and the wait for
    /// a streaming response to begin (its headers and first body bytes). An attempt that runs out of time is
    /// retried.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The idle limit of a stream (default [`DEFAULT_IDLE_TIMEOUT`], 60 s): the longest wait for the next bytes of
    /// a streamed body once its headers arrived. Before the first body byte a silence this long fails the attempt,
    /// which is retried; later it ends the stream with a non-retryable error (part of the answer is out).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The cap on a response body (default [`noetic_http::DEFAULT_MAX_BODY_BYTES`], 32 MiB): a whole response, an
    /// error body, and a whole streamed response (so also one event). A body over the cap is not read further
    /// and ends the call with a non-retryable [`NoeticError::ModelFailed`](noetic::NoeticError::ModelFailed)
    /// naming this setting; a `Content-Length` over the cap fails before the body is read.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// The connect timeout (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How rate limits, server errors, timeouts and connection errors are retried (default
    /// [`default_retry_policy`]). `RetryPolicy::new(1, ..)` turns retries off.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Sends this model id whatever a request asks for — e.g. a local Ollama model for an agent whose steps and
    /// steering judge name `openai/gpt-4o-mini`.
    pub fn model_override(mut self, model: impl Into<String>) -> Self {
        self.model_override = Some(model.into());
        self
    }

    /// The base URL.
    pub fn get_base_url(&self) -> &str {
        &self.base_url
    }

    /// True when a key is configured.
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }

    /// The environment variable error messages name for the key.
    pub fn get_key_env(&self) -> &str {
        &self.key_env
    }

    /// What the server is configured to enforce on its output.
    pub fn get_capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// The retry policy.
    pub fn get_retry(&self) -> RetryPolicy {
        self.retry
    }

    /// The request timeout of one attempt.
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// The idle limit of a stream.
    pub fn get_idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// The cap on a response body, in bytes.
    pub fn get_max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// The model id sent for a request naming `requested`: the override if set; on OpenAI's own API a leading
    /// `openai/` is dropped (so OpenRouter-style ids, the runtime's default, work there too); else unchanged.
    pub fn model_for(&self, requested: &str) -> String {
        if let Some(model) = &self.model_override {
            return model.clone();
        }
        if self.base_url == OPENAI_BASE_URL
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
