//! Rules naming tools of MCP servers (`files__write_file`) and of A2A agents (`helper__chat`): accepted while the
//! rules are read when the name starts with a configured server's or agent's prefix, then checked against the
//! tools the servers list and the agents' cards once they have started — a name none offers is an error then, as
//! a misspelt built-in is at once (fail closed).

use noetic::tool::ToolSet;

use super::RuleSet;
use crate::config::source::SourceError;

/// The tools a rule may name while the rules are read: the built-in tools, and the tools of the MCP servers
/// configured for the command, whose names (`<server>__<tool>`) are only known once the servers list them.
#[derive(Debug, Clone)]
pub struct ToolNames {
    /// The configured servers' names; `None` to take any `<server>__<tool>` name on trust (the `rules` command,
    /// which starts no server: `chat`, `run` and `serve` check it when they start theirs).
    servers: Option<Vec<String>>,
    /// The configured A2A agents' tool prefixes (`<name>__<skill>`, or `<name>` alone).
    agents: Vec<String>,
    /// An `[[a2a_agent]]` without a `name`: its prefix is its card's name, known once it is read, so any name
    /// is taken on trust until then.
    unnamed_agent: bool,
}

impl ToolNames {
    /// Built-in tools only (no MCP server is configured).
    #[cfg(test)]
    pub fn built_in() -> Self {
        ToolNames { servers: Some(Vec::new()), agents: Vec::new(), unnamed_agent: false }
    }

    /// Built-in tools, and tools of the servers named `servers`.
    pub fn with_servers(servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        ToolNames {
            servers: Some(servers.into_iter().map(Into::into).collect()),
            agents: Vec::new(),
            unnamed_agent: false,
        }
    }

    /// Built-in tools, and tools of any server (for checking a rules file on its own).
    pub fn any_server() -> Self {
        ToolNames { servers: None, agents: Vec::new(), unnamed_agent: false }
    }

    /// These names, and the tools of the A2A agents named `agents` (`None` for an agent whose name is its card's).
    pub fn with_a2a_agents(mut self, agents: impl IntoIterator<Item = Option<String>>) -> Self {
        for agent in agents {
            match agent {
                Some(name) => self.agents.push(name),
                None => self.unnamed_agent = true,
            }
        }
        self
    }

    /// `Ok(false)` for a built-in tool, `Ok(true)` for a tool of an MCP server or an A2A agent (checked when they
    /// have started), or what is wrong with the name.
    pub(super) fn check(&self, tool: &str) -> Result<bool, String> {
        if crate::agent::tools::BUILT_IN.contains(&tool) {
            return Ok(false);
        }
        let agent =
            self.unnamed_agent || self.agents.iter().any(|a| tool == a.as_str() || server_part(tool, a).is_some());
        let mcp = agent
            || match &self.servers {
                Some(servers) => servers.iter().any(|s| server_part(tool, s).is_some()),
                None => tool.split_once(noetic_mcp::NAME_SEPARATOR).is_some_and(|(server, rest)| {
                    !server.is_empty()
                        && !rest.is_empty()
                        && server.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                }),
            };
        if mcp {
            return Ok(true);
        }
        let mut message =
            format!("there is no tool '{tool}'; the tools are {}", crate::agent::tools::BUILT_IN.join(", "));
        if let Some(servers) = self.servers.as_ref().filter(|s| !s.is_empty()) {
            let prefixes: Vec<String> = servers.iter().map(|s| format!("{s}__<tool>")).collect();
            message.push_str(&format!(", and those of the configured MCP servers: {}", prefixes.join(", ")));
        }
        if !self.agents.is_empty() {
            let prefixes: Vec<String> = self.agents.iter().map(|a| format!("{a}__<skill>")).collect();
            message.push_str(&format!(", and those of the configured A2A agents: {}", prefixes.join(", ")));
        }
        Err(message)
    }
}

/// The part of `tool` after `server`'s prefix, if it has it.
fn server_part<'a>(tool: &'a str, server: &str) -> Option<&'a str> {
    tool.strip_prefix(server)?.strip_prefix(noetic_mcp::NAME_SEPARATOR).filter(|rest| !rest.is_empty())
}

/// A tool of an MCP server a rule names, to check once the servers have listed their tools.
#[derive(Debug, Clone)]
pub(super) struct McpName {
    /// The name as written.
    pub(super) tool: String,
    /// For `deny_arg`: the argument the rule matches.
    pub(super) arg: Option<String>,
    /// Where it is written: the message is made when it is checked (for JSON, which has no positions, this
    /// holds the key path to start it with).
    pub(super) place: SourceError,
}

/// One MCP tool name a rule uses that the servers do not offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// The tool's name as the rule writes it.
    pub tool: String,
    /// The error: where the name is written, which rule, and the tools there are.
    pub error: SourceError,
}

impl RuleSet {
    /// The MCP tools (and `deny_arg` arguments) the rules name that none of `offered` (the started servers'
    /// tool lists) has, each with an error naming the rule and the tools its server offers.
    #[cfg(test)]
    pub fn missing_mcp_tools(&self, offered: &[ToolSet]) -> Vec<Missing> {
        self.missing_tools(offered, &[])
    }

    /// The MCP tools (and `deny_arg` arguments) the rules name that none of `offered` has, where `agents` are the
    /// started A2A agents' tool prefixes: a name with one of them is said to be the agent's, and a name with no
    /// source's prefix is told every tool there is.
    pub fn missing_tools(&self, offered: &[ToolSet], agents: &[String]) -> Vec<Missing> {
        let mut missing = Vec::new();
        for rule in &self.rules {
            for name in &rule.mcp_names {
                let found = offered.iter().find_map(|set| set.get(&name.tool));
                let problem = match found {
                    None => Some(format!(
                        "rule '{}': there is no tool '{}': {}",
                        rule.id,
                        name.tool,
                        offered_by_its_source(&name.tool, offered, agents)
                    )),
                    Some(tool) => name.arg.as_ref().and_then(|arg| {
                        let properties = tool.input_schema().json().get("properties")?.as_object()?;
                        (!properties.contains_key(arg)).then(|| {
                            let args: Vec<&str> = properties.keys().map(String::as_str).collect();
                            format!(
                                "rule '{}': {} has no argument '{arg}'; its arguments are {}",
                                rule.id,
                                name.tool,
                                args.join(", ")
                            )
                        })
                    }),
                };
                if let Some(message) = problem {
                    missing.push(Missing {
                        tool: name.tool.clone(),
                        // A JSON file's place is a key path at the start of the message.
                        error: SourceError {
                            message: format!("{}{message}", name.place.message),
                            ..name.place.clone()
                        },
                    });
                }
            }
        }
        missing
    }

    /// Checks the MCP tools the rules name against the started servers' tools (see
    /// [`RuleSet::missing_mcp_tools`](Self::missing_mcp_tools)); the first missing one is the error.
    #[cfg(test)]
    pub fn check_mcp_tools(&self, offered: &[ToolSet]) -> Result<(), SourceError> {
        self.check_tools(offered, &[])
    }

    /// Checks the MCP and A2A tools the rules name against the started sources' tools (see
    /// [`RuleSet::missing_tools`]); the first missing one is the error.
    pub fn check_tools(&self, offered: &[ToolSet], agents: &[String]) -> Result<(), SourceError> {
        match self.missing_tools(offered, agents).into_iter().next() {
            Some(missing) => Err(missing.error),
            None => Ok(()),
        }
    }

    /// True when a rule names a tool of an MCP server.
    pub fn names_mcp_tools(&self) -> bool {
        self.rules.iter().any(|r| !r.mcp_names.is_empty())
    }
}

/// What the server or agent whose prefix `tool` has offers, in words; every tool there is when `tool` has the
/// prefix of neither (a name taken on trust while an A2A agent's prefix was not known).
fn offered_by_its_source(tool: &str, offered: &[ToolSet], agents: &[String]) -> String {
    let server = tool.split_once(noetic_mcp::NAME_SEPARATOR).map_or(tool, |(server, _)| server);
    let of_prefix = |name: &&str| server_part(name, server).is_some() || *name == server;
    let tools: Vec<&str> = offered.iter().flat_map(|set| set.names()).filter(of_prefix).collect();
    if agents.iter().any(|a| a == server) {
        return format!(
            "A2A agent '{server}' offers {}; the built-in tools are {}",
            tools.join(", "),
            crate::agent::tools::BUILT_IN.join(", ")
        );
    }
    if !agents.is_empty() && tools.is_empty() {
        let all: Vec<&str> =
            crate::agent::tools::BUILT_IN.iter().copied().chain(offered.iter().flat_map(|set| set.names())).collect();
        return format!("the tools are {}", all.join(", "));
    }
    if tools.is_empty() {
        format!("MCP server '{server}' offers no tools")
    } else {
        format!("MCP server '{server}' offers {}", tools.join(", "))
    }
}
