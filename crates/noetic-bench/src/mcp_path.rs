//! The cost of one MCP tool call over stdio: the JSON-RPC round trip to a spawned server and back, through
//! noetic-mcp's tool (argument object, progress registration, result mapping). Measured against the fixture
//! server of noetic-mcp (build it first: `cargo build --profile profiling -p noetic-mcp`; it is looked for next to this
//! binary, or at `NOETIC_MCP_FIXTURE`) and, when installed by `scripts/mcp-servers.sh setup`, the reference
//! `everything` server's `echo` (a Node process).

use std::path::PathBuf;
use std::time::Instant;

use noetic::context::Context;
use noetic::tool::{ToolContext, ToolSource};
use noetic_mcp::{McpServer, McpServerConfig};
use serde_json::Value;

use crate::BenchResult;

/// The fixture server binary, if built.
pub fn fixture() -> Option<PathBuf> {
    let path = std::env::var_os("NOETIC_MCP_FIXTURE").map(PathBuf::from).or_else(|| {
        let exe = std::env::current_exe().ok()?;
        Some(exe.parent()?.join("noetic-mcp-fixture"))
    })?;
    path.exists().then_some(path)
}

/// The reference `everything` server, if installed.
pub fn everything() -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/noetic-mcp-servers")))?;
    let bin = dir.join("node_modules/.bin/mcp-server-everything");
    bin.exists().then_some(bin)
}

/// A started server for `command`.
pub async fn start(command: &std::path::Path) -> BenchResult<McpServer> {
    Ok(McpServer::start(McpServerConfig::stdio("bench", command.display().to_string())).await?)
}

/// µs per call of `tool` with `args`, over `calls` sequential calls.
pub async fn call_us(server: &McpServer, tool: &str, args: &Value, calls: u32) -> BenchResult<f64> {
    let tool = server.snapshot().get(tool).cloned().ok_or_else(|| format!("the server has no tool '{tool}'"))?;
    let tcx =
        ToolContext { ctx: Context::new(), call_id: "bench".into(), tool: tool.name().into(), event_schema: None };
    let start = Instant::now();
    for _ in 0..calls {
        tool.call(args.clone(), tcx.clone()).await?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(calls))
}
