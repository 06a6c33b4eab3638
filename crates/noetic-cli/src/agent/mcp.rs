//! `[[mcp_server]]` tables of noetic.toml and workflow files: MCP servers whose tools join the agent's (named
//! `<server>__<tool>`), and the rules that name those tools, checked once the servers have listed them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use noetic::tool::{ToolSet, ToolSource};
use noetic_mcp::{McpServer, McpServerConfig};
use serde::Deserialize;

use crate::output::errln;
use crate::rules::{RuleSet, ToolNames};

/// One `[[mcp_server]]` table: `name`, and either `command` (+ `args`, `env`) for a server over stdio or `url`
/// (+ `headers`) for one over streamable HTTP; optional `timeout` (seconds per call), `max_result_bytes` (the
/// most of a result the model reads) and `require_approval` (tool names, without the server prefix, whose calls
/// wait for the user's approval).
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
    /// Seconds a call may take (default 60), as written (checked by [`crate::config::duration`]).
    #[serde(default, deserialize_with = "crate::config::source::number_or_text")]
    pub timeout: Option<String>,
    /// The most bytes of a call's result the model reads (default 64 KiB); the rest is cut with a note.
    pub max_result_bytes: Option<u64>,
    /// Tools of this server whose calls need the user's approval.
    #[serde(default)]
    pub require_approval: Vec<String>,
}

impl McpServerToml {
    /// The client configuration, or what is wrong with the table (naming the key and what it accepts).
    pub fn config(&self) -> Result<McpServerConfig, String> {
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
        if let Some(text) = &self.timeout {
            let key = format!("timeout of [[mcp_server]] '{}'", self.name);
            config = config.timeout(crate::config::duration::parse(&key, text, crate::config::duration::TIMEOUT)?);
        }
        if let Some(bytes) = self.max_result_bytes {
            let most = noetic_mcp::MAX_MESSAGE_BYTES;
            let bytes = usize::try_from(bytes).ok().filter(|b| (1..=most).contains(b)).ok_or_else(|| {
                format!(
                    "'{bytes}' is not a valid max_result_bytes of [[mcp_server]] '{}': give a number of bytes from 1 \
                     to {most} (16 MiB, the largest message a server may send), e.g. 65536",
                    self.name
                )
            })?;
            config = config.max_result_bytes(bytes);
        }
        config = config.require_approval(self.require_approval.iter().cloned());
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// The tools rules may name when these servers are configured.
pub fn tool_names<'a>(servers: impl IntoIterator<Item = &'a McpServerToml>) -> ToolNames {
    ToolNames::with_servers(servers.into_iter().map(|s| s.name.clone()))
}

/// Starts every configured server (the first that does not start is an error naming it and its stderr tail),
/// then checks the MCP and A2A tools `rules` name against the tools the servers list and `agents` (the started
/// A2A agents, with their tool prefixes) offer: a name none offers is an error.
/// Calls of tools `require_approval` rules name wait for the approver. When a server's tool list changes later,
/// the names are checked again and a rule whose tool is gone (or back) is reported on stderr.
pub async fn start(
    servers: &[McpServerToml],
    rules: &RuleSet,
    agents: &[(String, Arc<dyn ToolSource>)],
) -> Result<Vec<Arc<dyn ToolSource>>, String> {
    let approvals = rules.approval_tools();
    let mut started: Vec<Arc<McpServer>> = Vec::with_capacity(servers.len());
    for server in servers {
        let prefix = format!("{}{}", server.name, noetic_mcp::NAME_SEPARATOR);
        let config = server.config()?.require_approval(approvals.iter().filter(|t| t.starts_with(&prefix)).cloned());
        let running = McpServer::start(config).await.map_err(|e| format!("MCP server '{}': {e}", server.name))?;
        started.push(Arc::new(running));
    }
    let prefixes: Vec<String> = agents.iter().map(|(prefix, _)| prefix.clone()).collect();
    let sources: Vec<Arc<dyn ToolSource>> = started
        .iter()
        .map(|s| s.clone() as Arc<dyn ToolSource>)
        .chain(agents.iter().map(|(_, source)| source.clone()))
        .collect();
    let offered: Vec<ToolSet> = sources.iter().map(|s| s.snapshot()).collect();
    rules.check_tools(&offered, &prefixes).map_err(|e| e.to_string())?;
    if rules.names_mcp_tools() {
        let watch = Arc::new(Recheck::new(&sources, rules.clone(), prefixes));
        for server in &started {
            let (mut listings, watch) = (server.watch_listings(), watch.clone());
            tokio::spawn(async move {
                // Ends when the server is dropped.
                while listings.changed().await.is_ok() {
                    for line in watch.changes() {
                        errln!("noetic: {line}");
                    }
                }
            });
        }
    }
    Ok(started.into_iter().map(|s| s as Arc<dyn ToolSource>).collect())
}

/// Checks the rules' MCP tool names again after a server's tool list changed (they all matched at the start).
struct Recheck {
    sources: Vec<Weak<dyn ToolSource>>,
    rules: RuleSet,
    /// The A2A agents' tool prefixes.
    agents: Vec<String>,
    /// The names found missing at the last check, so each change is reported once.
    missing: Mutex<BTreeSet<String>>,
}

impl Recheck {
    fn new(sources: &[Arc<dyn ToolSource>], rules: RuleSet, agents: Vec<String>) -> Self {
        Recheck { sources: sources.iter().map(Arc::downgrade).collect(), rules, agents, missing: Mutex::default() }
    }

    /// What changed since the last check, as lines to report: a rule whose tool is gone (it guards nothing
    /// until the tool comes back, and a call of a tool that is not offered cannot run), a tool that is back.
    fn changes(&self) -> Vec<String> {
        let offered: Vec<ToolSet> = self.sources.iter().filter_map(Weak::upgrade).map(|s| s.snapshot()).collect();
        let now = self.rules.missing_tools(&offered, &self.agents);
        let mut before = self.missing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut lines: Vec<String> = now
            .iter()
            .filter(|m| !before.contains(&m.tool))
            .map(|gone| {
                format!(
                    "warning: the tools of an MCP server changed: {} (the rule applies again if the tool comes back)",
                    gone.error
                )
            })
            .collect();
        let names: BTreeSet<String> = now.into_iter().map(|m| m.tool).collect();
        lines.extend(
            before.difference(&names).map(|back| format!("the MCP tool '{back}' a rule names is offered again")),
        );
        *before = names;
        lines
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use noetic::tool::{DynamicTools, FnTool, Tool};

    use super::*;
    use crate::config::source::Source;

    fn tool(name: &str) -> Arc<dyn Tool> {
        Arc::new(
            FnTool::builder(name, "a server's tool")
                .handler(|_, _| async { Ok(serde_json::Value::Null) })
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn a_rules_mcp_tool_that_goes_away_after_a_tool_list_change_is_reported_once_and_again_when_it_is_back() {
        let rules = crate::rules::load(
            &Source::toml("rules.toml", "[[rule]]\nid = \"no-x\"\ndeny_tool = \"srv__x\"\n"),
            &ToolNames::with_servers(["srv"]),
        )
        .unwrap();
        let server = Arc::new(DynamicTools::new());
        server.replace([tool("srv__x"), tool("srv__y")]).unwrap();
        let recheck = Recheck::new(&[server.clone() as Arc<dyn ToolSource>], rules, Vec::new());
        assert!(recheck.changes().is_empty(), "every name matches");
        server.replace([tool("srv__y")]).unwrap();
        assert_eq!(
            recheck.changes(),
            ["warning: the tools of an MCP server changed: rules.toml:3:1: rule 'no-x': there is no tool \
                 'srv__x': MCP server 'srv' offers srv__y (the rule applies again if the tool comes back)"]
        );
        assert!(recheck.changes().is_empty(), "reported once");
        server.replace([tool("srv__y"), tool("srv__x")]).unwrap();
        assert_eq!(recheck.changes(), ["the MCP tool 'srv__x' a rule names is offered again"]);
    }
}
