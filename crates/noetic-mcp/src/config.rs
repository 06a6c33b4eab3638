//! How to reach one MCP server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use noetic_core::{ConfigCode, ConfigError};

/// The call timeout a server gets unless its configuration says otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The most bytes of a call's result the model reads unless the configuration says otherwise: 64 KiB, as much as
/// the CLI's `read_file` shows of a file. The rest is cut with a note saying so.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024;

/// The largest message a server may send over stdio (16 MiB, as rmcp's streamable HTTP client allows): a longer
/// one is dropped unread, and the call it answers fails at once with an error saying so.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Separates the server's name from the tool's in the names the model sees: `files__read_file`.
pub const NAME_SEPARATOR: &str = "__";

/// The longest tool name providers accept (OpenAI's limit); longer names are cut.
pub const MAX_TOOL_NAME: usize = 64;

/// One MCP server: reached over stdio (a command to spawn, its arguments and environment) or over streamable
/// HTTP (a URL and headers), and how long a call may take.
///
/// ```
/// use std::time::Duration;
/// use noetic_mcp::McpServerConfig;
///
/// let files = McpServerConfig::stdio("files", "npx")
///     .args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp"])
///     .env("NODE_NO_WARNINGS", "1")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(files.name(), "files");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub(crate) name: String,
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) url: Option<String>,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) timeout: Duration,
    pub(crate) approval: Vec<String>,
    pub(crate) max_result_bytes: usize,
}

impl McpServerConfig {
    /// A server spawned as `command`, speaking MCP on its stdin and stdout. `name` prefixes its tools' names.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> Self {
        McpServerConfig {
            name: name.into(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            timeout: DEFAULT_CALL_TIMEOUT,
            approval: Vec::new(),
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }

    /// A server reached over streamable HTTP at `url` (e.g. `http://127.0.0.1:3001/mcp`).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig { url: Some(url.into()), ..McpServerConfig::stdio(name, "") }
    }

    /// A header sent with every HTTP request (an `Authorization: Bearer …`, for instance).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Arguments of the command.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable for the server (added to the inherited environment).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// The directory the server runs in (default: this process's).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// How long one call (and the start-up handshake) may take before it is cancelled (default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most bytes of a call's result the model reads (default [`DEFAULT_MAX_RESULT_BYTES`]): text beyond
    /// it is cut, and blocks or structured data that do not fit are left out, with a note in the result saying
    /// how much there was. Results count their text, image data, resource text and JSON.
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes;
        self
    }

    /// Tools (by their name on the server, by the name the model sees such as `files__write_file`, or `*` for
    /// all) whose every call waits for the runtime's approver, like a built-in tool with `needs_approval`.
    pub fn require_approval(mut self, tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.approval.extend(tools.into_iter().map(Into::into));
        self
    }

    /// True when calls of `tool` (its name on the server) need approval.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.approval.iter().any(|t| t == "*" || t == tool || *t == tool_name(&self.name, tool))
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The command line (or the URL), for messages.
    pub fn command_line(&self) -> String {
        if let Some(url) = &self.url {
            return url.clone();
        }
        std::iter::once(self.command.as_str()).chain(self.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
    }

    /// Checks the name (letters, digits, `-` and `_`, no `__`, so `server__tool` splits one way) and the command.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let valid = !self.name.is_empty()
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !self.name.contains(NAME_SEPARATOR)
            && self.name.len() + NAME_SEPARATOR.len() < MAX_TOOL_NAME;
        if !valid {
            return Err(ConfigError::new(
                ConfigCode::InvalidMcpServer,
                format!("MCP server name '{}' is not usable as a tool-name prefix", self.name),
                "name the server with letters, digits, '-' and '_' only, without '__', at most 40 characters",
            ));
        }
        if let Some(url) = &self.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    ConfigCode::InvalidMcpServer,
                    format!("MCP server '{}' has the URL '{url}', which is not http(s)", self.name),
                    "give the server's streamable HTTP endpoint, e.g. http://127.0.0.1:3001/mcp",
                ));
            }
        } else if self.command.trim().is_empty() {
            return Err(ConfigError::new(
                ConfigCode::InvalidMcpServer,
                format!("MCP server '{}' has no command", self.name),
                "give the command that starts the server, e.g. \"npx\" with its arguments",
            ));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::new(
                ConfigCode::InvalidTimeout,
                format!("MCP server '{}' has a zero call timeout", self.name),
                "give a timeout above zero (default 60 s)",
            ));
        }
        if !(1..=MAX_MESSAGE_BYTES).contains(&self.max_result_bytes) {
            return Err(ConfigError::new(
                ConfigCode::InvalidMcpServer,
                format!("MCP server '{}' has max_result_bytes {}", self.name, self.max_result_bytes),
                format!(
                    "give from 1 to {MAX_MESSAGE_BYTES} bytes (the largest message a server may send); default \
                     {DEFAULT_MAX_RESULT_BYTES}"
                ),
            ));
        }
        Ok(())
    }
}

/// The name the model sees for `tool` of server `server`: `server__tool`, with characters providers refuse in
/// tool names replaced by `_`, cut to 64 characters.
pub fn tool_name(server: &str, tool: &str) -> String {
    let mut name = format!("{server}{NAME_SEPARATOR}");
    name.extend(tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }));
    name.truncate(MAX_TOOL_NAME);
    name
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn tool_names_are_prefixed_with_the_server_and_kept_to_what_providers_accept() {
        assert_eq!(tool_name("files", "read_file"), "files__read_file");
        assert_eq!(tool_name("gh", "repos.get/issue"), "gh__repos_get_issue");
        assert_eq!(tool_name("s", &"x".repeat(100)).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn a_server_name_that_would_not_split_or_a_missing_command_is_a_config_error() {
        assert!(McpServerConfig::stdio("files", "npx").validate().is_ok());
        for bad in ["", "a__b", "has space", "dot.ted"] {
            let err = McpServerConfig::stdio(bad, "npx").validate().unwrap_err();
            assert_eq!(err.code, ConfigCode::InvalidMcpServer, "{bad}");
        }
        assert!(McpServerConfig::stdio("x", " ").validate().is_err());
        assert!(McpServerConfig::http("x", "http://127.0.0.1:1/mcp").validate().is_ok());
        assert!(McpServerConfig::http("x", "ftp://host/mcp").validate().is_err());
        assert!(McpServerConfig::stdio("x", "y").timeout(Duration::ZERO).validate().is_err());
        assert!(McpServerConfig::stdio("x", "y").max_result_bytes(0).validate().is_err());
        assert!(McpServerConfig::stdio("x", "y").max_result_bytes(MAX_MESSAGE_BYTES + 1).validate().is_err());
        assert!(McpServerConfig::stdio("x", "y").max_result_bytes(MAX_MESSAGE_BYTES).validate().is_ok());
    }

    #[test]
    fn approval_may_name_a_tool_by_its_name_on_the_server_or_by_the_name_the_model_sees() {
        let config = McpServerConfig::stdio("files", "npx").require_approval(["read_file", "files__write_file"]);
        assert!(config.needs_approval("read_file"));
        assert!(config.needs_approval("write.file"), "the model sees write.file as files__write_file");
        assert!(!config.needs_approval("list_directory"));
        assert!(McpServerConfig::stdio("files", "npx").require_approval(["*"]).needs_approval("anything"));
    }
}
