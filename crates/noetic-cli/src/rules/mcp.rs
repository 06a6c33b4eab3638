//! Rules naming tools of MCP servers (`files__write_file`): accepted while the rules are read when the name
//! starts with a configured server's prefix, then checked against the tools the servers list once they have
//! started — a name no server offers is an error then, as a misspelt built-in is at once (fail closed).

use noetic::tool::ToolSet;

use super::RuleSet;
use crate::source::SourceError;

/// The tools a rule may name while the rules are read: the built-in tools, and the tools of the MCP servers
/// configured for the command, whose names (`<server>__<tool>`) are only known once the servers list them.
#[derive(Debug, Clone)]
pub struct ToolNames {
    /// The configured servers' names; `None` to take any `<server>__<tool>` name on trust (the `rules` command,
    /// which starts no server: `chat`, `run` and `serve` check it when they start theirs).
    servers: Option<Vec<String>>,
}

impl ToolNames {
    /// Built-in tools only (no MCP server is configured).
    #[cfg(test)]
    pub fn built_in() -> Self {
        ToolNames { servers: Some(Vec::new()) }
    }

    /// Built-in tools, and tools of the servers named `servers`.
    pub fn with_servers(servers: impl IntoIterator<Item = impl Into<String>>) -> Self {
        ToolNames { servers: Some(servers.into_iter().map(Into::into).collect()) }
    }

    /// Built-in tools, and tools of any server (for checking a rules file on its own).
    pub fn any_server() -> Self {
        ToolNames { servers: None }
    }

    /// `Ok(false)` for a built-in tool, `Ok(true)` for a tool of an MCP server (checked when the servers have
    /// started), or what is wrong with the name.
    pub(super) fn check(&self, tool: &str) -> Result<bool, String> {
        if crate::tools::BUILT_IN.contains(&tool) {
            return Ok(false);
        }
        let mcp = match &self.servers {
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
        let mut message = format!("there is no tool '{tool}'; the tools are {}", crate::tools::BUILT_IN.join(", "));
        if let Some(servers) = self.servers.as_ref().filter(|s| !s.is_empty()) {
            let prefixes: Vec<String> = servers.iter().map(|s| format!("{s}__<tool>")).collect();
            message.push_str(&format!(", and those of the configured MCP servers: {}", prefixes.join(", ")));
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
    pub fn missing_mcp_tools(&self, offered: &[ToolSet]) -> Vec<Missing> {
        let mut missing = Vec::new();
        for rule in &self.rules {
            for name in &rule.mcp_names {
                let found = offered.iter().find_map(|set| set.get(&name.tool));
                let problem = match found {
                    None => Some(format!(
                        "rule '{}': there is no tool '{}': {}",
                        rule.id,
                        name.tool,
                        offered_by_its_server(&name.tool, offered)
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
    /// [`RuleSet::missing_mcp_tools`]); the first missing one is the error.
    pub fn check_mcp_tools(&self, offered: &[ToolSet]) -> Result<(), SourceError> {
        match self.missing_mcp_tools(offered).into_iter().next() {
            Some(missing) => Err(missing.error),
            None => Ok(()),
        }
    }

    /// True when a rule names a tool of an MCP server.
    pub fn names_mcp_tools(&self) -> bool {
        self.rules.iter().any(|r| !r.mcp_names.is_empty())
    }
}

/// What the server whose prefix `tool` has offers, in words.
fn offered_by_its_server(tool: &str, offered: &[ToolSet]) -> String {
    let server = tool.split_once(noetic_mcp::NAME_SEPARATOR).map_or(tool, |(server, _)| server);
    let tools: Vec<&str> =
        offered.iter().flat_map(|set| set.names()).filter(|name| server_part(name, server).is_some()).collect();
    if tools.is_empty() {
        format!("MCP server '{server}' offers no tools")
    } else {
        format!("MCP server '{server}' offers {}", tools.join(", "))
    }
}
