//! `[[a2a_agent]]` tables of noetic.toml: other agents, reached over A2A, whose skills join the agent's tools
//! (named `<name>__<skill>`; see [`noetic_a2a`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use noetic::tool::ToolSource;
use noetic_a2a::{A2aAgent, A2aAgentConfig};
use serde::Deserialize;

use crate::agent::mcp::McpServerToml;
use crate::rules::{RuleSet, ToolNames};

/// One `[[a2a_agent]]` table: `url` (the agent's base URL or its card's), optional `name` (the tools' prefix;
/// default the card's name), `headers` (e.g. `Authorization = "Bearer …"`), `timeout` (seconds a call may take,
/// default 600) and `require_approval` (each call waits for the user's approval).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct A2aAgentToml {
    /// Where the agent is.
    pub url: String,
    /// The tools' name prefix.
    pub name: Option<String>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds a call may take, as written (checked by [`crate::config::duration`]).
    #[serde(default, deserialize_with = "crate::config::source::number_or_text")]
    pub timeout: Option<String>,
    /// Whether each call waits for the user's approval.
    #[serde(default)]
    pub require_approval: bool,
}

impl A2aAgentToml {
    /// The client configuration, or what is wrong with the table.
    pub fn config(&self) -> Result<A2aAgentConfig, String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!("[[a2a_agent]] url '{}' is not an http:// or https:// URL", self.url));
        }
        let mut config = A2aAgentConfig::new(&self.url);
        config.name.clone_from(&self.name);
        config.headers.clone_from(&self.headers);
        config.require_approval = self.require_approval;
        if let Some(text) = &self.timeout {
            let key = format!("timeout of [[a2a_agent]] '{}'", self.url);
            config.timeout = crate::config::duration::parse(&key, text, crate::config::duration::TIMEOUT)?;
        }
        Ok(config)
    }
}

/// The agent's tool sources: connects every configured A2A agent (reads its card; the first that cannot be
/// reached is an error naming it), starts the MCP servers, and checks the tools `rules` name against all of them
/// (see [`crate::agent::mcp::start`]). The MCP servers' tools come first.
pub async fn start_with_mcp(
    servers: &[McpServerToml],
    agents: &[A2aAgentToml],
    rules: &RuleSet,
) -> Result<Vec<Arc<dyn ToolSource>>, String> {
    let mut connected: Vec<(String, Arc<dyn ToolSource>)> = Vec::with_capacity(agents.len());
    let approvals = rules.approval_tools();
    for agent in agents {
        let mut config = agent.config()?;
        // Calls of the tools `require_approval` rules name wait for the approver, as MCP servers' do.
        config.approval_tools.clone_from(&approvals);
        let agent = A2aAgent::connect_with(config).await.map_err(|e| format!("[[a2a_agent]] {e}"))?;
        connected.push((agent.prefix().to_owned(), Arc::new(agent)));
    }
    let mut sources = crate::agent::mcp::start(servers, rules, &connected).await?;
    sources.extend(connected.into_iter().map(|(_, source)| source));
    Ok(sources)
}

/// The tools rules may name when these MCP servers and A2A agents are configured.
pub fn tool_names<'a>(servers: impl IntoIterator<Item = &'a McpServerToml>, agents: &[A2aAgentToml]) -> ToolNames {
    crate::agent::mcp::tool_names(servers).with_a2a_agents(agents.iter().map(|a| a.name.clone()))
}

/// One `[[skill]]` table of a workflow: something callers may ask the agent to do, listed on the A2A agent card
/// `noetic serve` publishes (a calling noetic agent offers it as the tool `<agent>__<id>`).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SkillToml {
    /// A stable id: letters, digits, `-` and `_`.
    pub id: String,
    /// A short name (default: the id).
    pub name: Option<String>,
    /// What the skill does, for the calling agent's model.
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(default)]
    pub examples: Vec<String>,
}

/// What is wrong with the `[[skill]]` tables, if anything: an id that is empty, not a tool name part, or given
/// twice, or an empty description.
pub fn check_skills(skills: &[SkillToml]) -> Option<(usize, String)> {
    for (i, skill) in skills.iter().enumerate() {
        if skill.id.is_empty() || !skill.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Some((
                i,
                format!(
                    "skill id '{}' must be letters, digits, '-' and '_' (it names the tool a calling agent gets)",
                    skill.id
                ),
            ));
        }
        if skills[..i].iter().any(|s| s.id == skill.id) {
            return Some((i, format!("skill id '{}' is given twice; give each skill its own id", skill.id)));
        }
        if skill.description.trim().is_empty() {
            return Some((
                i,
                format!("skill '{}' needs a description (what it does, for the caller's model)", skill.id),
            ));
        }
    }
    None
}
