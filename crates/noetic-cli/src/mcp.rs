//! `[[mcp_server]]` tables of noetic.toml: MCP servers whose tools join the agent's (named `<server>__<tool>`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use noetic::tool::ToolSource;
use noetic_mcp::{McpServer, McpServerConfig};
use serde::Deserialize;

/// One `[[mcp_server]]` table: `name`, and either `command` (+ `args`, `env`) for a server over stdio or `url`
/// (+ `headers`) for one over streamable HTTP; optional `timeout` (seconds per call) and `require_approval`
/// (tool names, without the server prefix, whose calls wait for the user's approval).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpServerToml {
    /// The server's name: the prefix of its tools' names.
    pub name: String,
    /// The command that starts a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The URL of a streamable-HTTP server.
    pub url: Option<String>,
    /// HTTP headers for it.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds a call may take (default 60).
    pub timeout: Option<f64>,
    /// Tools of this server whose calls need the user's approval.
    #[serde(default)]
    pub require_approval: Vec<String>,
}

impl McpServerToml {
    /// The client configuration, or what is wrong with the table.
    fn config(&self) -> Result<McpServerConfig, String> {
        let mut config = match (&self.command, &self.url) {
            (Some(command), None) => self
                .env
                .iter()
                .fold(McpServerConfig::stdio(&self.name, command).args(self.args.iter().cloned()), |c, (k, v)| {
                    c.env(k, v)
                }),
            (None, Some(url)) => {
                self.headers.iter().fold(McpServerConfig::http(&self.name, url), |c, (k, v)| c.header(k, v))
            }
            _ => {
                return Err(format!(
                    "[[mcp_server]] '{}' needs exactly one of command (a stdio server) or url (streamable HTTP)",
                    self.name
                ));
            }
        };
        if let Some(secs) = self.timeout {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(format!("[[mcp_server]] '{}': timeout must be a positive number of seconds", self.name));
            }
            config = config.timeout(Duration::from_secs_f64(secs));
        }
        Ok(config.require_approval(self.require_approval.iter().cloned()))
    }
}

/// Starts every configured server; the first that does not start is an error naming it (and its stderr tail).
pub async fn start(servers: &[McpServerToml]) -> Result<Vec<Arc<dyn ToolSource>>, String> {
    let mut started: Vec<Arc<dyn ToolSource>> = Vec::with_capacity(servers.len());
    for server in servers {
        let config = server.config()?;
        let running = McpServer::start(config).await.map_err(|e| format!("MCP server '{}': {e}", server.name))?;
        started.push(Arc::new(running));
    }
    Ok(started)
}
