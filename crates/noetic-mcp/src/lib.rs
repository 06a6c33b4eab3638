//! # noetic-mcp — tools from Model Context Protocol servers
//!
//! An [`McpServer`] spawns an MCP server over stdio (or reaches one over streamable HTTP), lists its tools and offers them to a noetic runtime as a
//! [`ToolSource`](noetic_steps::tool::ToolSource). Its tools are then steered, approved, cancelled and timed out like
//! built-in tools: steering rules see the call before the server does, a cancelled turn sends the server
//! `notifications/cancelled`, and a call that outlives the server's timeout (default 60 s) ends with a
//! `timeout` tool error.
//!
//! **Names.** A tool is offered as `<server>__<tool>` (`files__read_file`): the server's name (letters, digits,
//! `-`, `_`, no `__`) keeps two servers' tools apart; characters providers refuse in tool names become `_`, and
//! names are cut to 64 characters.
//!
//! **Results.** MCP content blocks become [rich tool results](noetic_steps::tool::ToolOutput) (text, images, embedded
//! resources and resource links), `structuredContent` their structured data (checked against the tool's output
//! schema), and an `isError` result a tool error whose text the model reads. A result is kept to the server's
//! [`max_result_bytes`](McpServerConfig::max_result_bytes) (64 KiB by default), the rest cut with a note saying
//! so; a message over [`MAX_MESSAGE_BYTES`] (16 MiB) is dropped unread and the call it answers fails at once
//! with an error naming the size and the limit.
//!
//! ```no_run
//! use std::sync::Arc;
//! use noetic::agent::Runtime;
//! use noetic::model::ScriptedModel;
//! use noetic_mcp::{McpServer, McpServerConfig};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let files = McpServer::start(
//!     McpServerConfig::stdio("files", "npx").args(["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]),
//! )
//! .await?;
//! let runtime = Runtime::builder()
//!     .model(Arc::new(ScriptedModel::new([])))
//!     .tool_source(Arc::new(files))
//!     .build()?;
//! # let _ = runtime;
//! # Ok(())
//! # }
//! ```

mod config;
mod error;
mod result;
mod scan;
mod server;
mod shared;
mod stdio;
mod tool;

pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_RESULT_BYTES, MAX_MESSAGE_BYTES, MAX_TOOL_NAME, McpServerConfig, NAME_SEPARATOR,
    tool_name,
};
pub use error::McpError;
pub use server::McpServer;
pub use tool::McpTool;
