//! What can go wrong while connecting to an MCP server.

use noetic_core::ConfigError;

/// Connecting to an MCP server failed. Every variant names the server; a failed start also names the command and
/// quotes the end of what it wrote to stderr.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server could not be started or did not complete the MCP handshake.
    #[error("MCP server '{server}' did not start (command: {command}): {reason}{}", tail(stderr_tail))]
    Start {
        /// The server's name.
        server: String,
        /// The command line.
        command: String,
        /// What failed.
        reason: String,
        /// The last lines the server wrote to stderr.
        stderr_tail: String,
    },
    /// Listing the server's tools failed.
    #[error("MCP server '{server}' did not list its tools: {reason}")]
    ListTools {
        /// The server's name.
        server: String,
        /// What failed.
        reason: String,
    },
}

fn tail(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        "; it wrote nothing to stderr".to_owned()
    } else {
        format!("; the end of its stderr:\n{}", stderr.trim_end())
    }
}
