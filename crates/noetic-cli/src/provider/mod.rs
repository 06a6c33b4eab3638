//! Choosing and configuring the model provider: OpenAI-compatible chat completions or Anthropic Messages, keys
//! from the environment.

pub(crate) mod local;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use noetic::model::Model;
use noetic_anthropic::{AnthropicConfig, AnthropicModel};
use noetic_openai::{OpenAiConfig, OpenAiModel};

/// The model id used when neither `--model` nor `NOETIC_MODEL` names one.
pub const DEFAULT_MODEL: &str = noetic::agent::DEFAULT_MODEL;
/// The environment variable naming the default model.
pub const MODEL_ENV: &str = "NOETIC_MODEL";
/// The provider's request timeout when neither `--timeout`, the workflow nor `noetic.toml` sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Which API the model is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI-compatible chat completions: OpenAI, OpenRouter, Ollama, llama.cpp, vLLM.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// The name as typed on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The provider a model id suggests: Anthropic for `anthropic/…` and `claude…` ids, else OpenAI-compatible.
    pub fn guess(model: &str) -> Provider {
        if model.starts_with("anthropic/") || model.starts_with("claude") {
            Provider::Anthropic
        } else {
            Provider::Openai
        }
    }
}

/// The model id: the flag, else `NOETIC_MODEL`, else [`DEFAULT_MODEL`].
pub fn model_id(flag: Option<&str>) -> String {
    match flag {
        Some(id) => id.to_owned(),
        None => std::env::var(MODEL_ENV).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_MODEL.into()),
    }
}

/// Builds the provider's model. Keys come from the environment; a missing key is an error naming the variable,
/// unless the base URL is a local server (which usually needs none). `timeout` bounds each attempt until the
/// answer begins and is also the idle limit between streamed bytes, so a stalled server is given up on (and
/// retried) after that long.
pub fn build(provider: Provider, base_url: Option<&str>, timeout: Duration) -> Result<Arc<dyn Model>, String> {
    match provider {
        Provider::Openai => {
            let mut config = OpenAiConfig::from_env().timeout(timeout).idle_timeout(timeout);
            if let Some(url) = base_url {
                config = config.base_url(url);
            }
            if !config.has_api_key() && !is_local(config.get_base_url()) {
                return Err(format!(
                    "no API key for {}: set {} (or OPENROUTER_API_KEY for OpenRouter), or pass --base-url \
                     http://localhost:11434/v1 for a local OpenAI-compatible server (Ollama, llama.cpp, vLLM)",
                    config.get_base_url(),
                    config.get_key_env()
                ));
            }
            Ok(Arc::new(OpenAiModel::new(config).map_err(|e| e.to_string())?))
        }
        Provider::Anthropic => {
            let mut config = AnthropicConfig::from_env().timeout(timeout).idle_timeout(timeout);
            if let Some(url) = base_url {
                config = config.base_url(url);
            }
            if config.api_key.is_none() && !is_local(&config.base_url) {
                return Err(format!(
                    "no API key for {}: set ANTHROPIC_API_KEY, or use --provider openai with --base-url for a \
                     local server",
                    config.base_url
                ));
            }
            Ok(Arc::new(AnthropicModel::new(config).map_err(|e| e.to_string())?))
        }
    }
}

/// True when the URL's host is this machine or a private network address (`localhost`, `127.0.0.1`, `::1`,
/// `10.x`, `192.168.x`, `*.local` …).
pub fn is_local(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    let host = host.to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") || host.ends_with(".local") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified(),
        Ok(IpAddr::V6(ip)) => ip.is_loopback() || ip.is_unspecified() || (ip.segments()[0] & 0xfe00) == 0xfc00,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_servers_are_recognised() {
        for url in [
            "http://localhost:11434/v1",
            "http://127.0.0.1:8080",
            "http://[::1]:8000/v1",
            "http://192.168.1.5/v1",
            "http://gpu.local:8000",
        ] {
            assert!(is_local(url), "{url}");
        }
        for url in ["https://api.openai.com/v1", "https://openrouter.ai/api/v1", "http://8.8.8.8/v1"] {
            assert!(!is_local(url), "{url}");
        }
    }

    #[test]
    fn the_provider_follows_the_model_id() {
        assert_eq!(Provider::guess("anthropic/claude-sonnet-4-5"), Provider::Anthropic);
        assert_eq!(Provider::guess("claude-3-5-haiku-latest"), Provider::Anthropic);
        assert_eq!(Provider::guess("openai/gpt-4o-mini"), Provider::Openai);
        assert_eq!(Provider::guess("llama3.2"), Provider::Openai);
    }
}

/// The model flags `chat` and `serve` share.
#[derive(clap::Args, Debug, Default)]
pub struct ModelArgs {
    /// The model id, e.g. openai/gpt-4o-mini, anthropic/claude-sonnet-4-5, llama3.2 (default: $NOETIC_MODEL,
    /// else openai/gpt-4o-mini).
    #[arg(long)]
    pub model: Option<String>,
    /// The API (default: anthropic for anthropic/… and claude… models, else openai).
    #[arg(long, value_enum)]
    pub provider: Option<Provider>,
    /// Base URL of an OpenAI-compatible server, e.g. http://localhost:11434/v1 for Ollama (no key needed for a
    /// local server). Keys come from OPENAI_API_KEY, OPENROUTER_API_KEY or ANTHROPIC_API_KEY.
    #[arg(long, value_name = "URL", conflicts_with = "local")]
    pub base_url: Option<String>,
    /// Use the offline model (llama.cpp's server with SmolLM2-135M, set up by `scripts/local-llm.sh setup`):
    /// started unless it already runs, stopped at the end. No key, no network. Each turn's first round asks for a
    /// tool call (the tiny model calls tools only when asked).
    #[arg(long, conflicts_with_all = ["provider", "model"])]
    pub local: bool,
}

/// A model client and what it is.
pub struct Resolved {
    /// The model id the `llm` step asks for.
    pub model_id: String,
    /// The provider, as shown to the user (`openai`, `local, http://…`).
    pub described: String,
    /// The client.
    pub model: Arc<dyn Model>,
    /// The offline model's server when this command started it (dropping it stops the server).
    pub local_server: Option<local::LocalServer>,
}

impl ModelArgs {
    /// The model: the flags, else noetic.toml's model, provider and base URL, else the defaults.
    pub async fn resolve(
        &self,
        defaults: &crate::config::Defaults,
        timeout: Option<Duration>,
    ) -> Result<Resolved, String> {
        if self.local {
            let server = local::ensure(|line| crate::output::errln!("{line}")).await?;
            let described = format!("local, {}", server.base_url());
            let model = server.model(timeout)?;
            return Ok(Resolved {
                model_id: local::LOCAL_MODEL_ID.to_owned(),
                described,
                model,
                local_server: Some(server),
            });
        }
        let model_id = model_id(self.model.as_deref().or(defaults.model.as_deref()));
        let provider = match (self.provider, &defaults.provider) {
            (Some(p), _) => p,
            (None, Some(name)) => <Provider as clap::ValueEnum>::from_str(name, true)
                .map_err(|_| format!("unknown provider '{name}' in the configuration; use openai or anthropic"))?,
            (None, None) => Provider::guess(&model_id),
        };
        let base_url = self.base_url.as_deref().or(defaults.base_url.as_deref());
        let model = build(provider, base_url, timeout.unwrap_or(DEFAULT_TIMEOUT))?;
        Ok(Resolved { model_id, described: provider.as_str().to_owned(), model, local_server: None })
    }
}
