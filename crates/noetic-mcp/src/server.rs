//! A connection to one MCP server over stdio, kept alive: its tools are a [`ToolSource`], a tool-list change
//! updates them, and a server that exits is restarted with backoff.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use noetic_steps::tool::{DynamicTools, Tool, ToolSet, ToolSource};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::McpServerConfig;
use crate::error::McpError;
use crate::shared::{Progress, Shared};
use crate::stdio::ChildTransport;
use crate::tool::McpTool;

/// Lines of a server's stderr kept for error messages.
const STDERR_LINES: usize = 20;
/// Characters kept of one stderr line.
const STDERR_LINE_CHARS: usize = 400;
/// The first and the longest wait before restarting a server that exited.
const RESTART_BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(30));

/// Lists the server's tools and offers them from now on.
async fn refresh(shared: &Arc<Shared>, peer: &Peer<RoleClient>) -> Result<usize, McpError> {
    let name = &shared.config.name;
    let listed = tokio::time::timeout(shared.config.timeout, peer.list_all_tools())
        .await
        .map_err(|_| McpError::ListTools {
            server: name.clone(),
            reason: format!("no answer within {} s", shared.config.timeout.as_secs_f64()),
        })?
        .map_err(|e| McpError::ListTools { server: name.clone(), reason: e.to_string() })?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
    let mut names = HashSet::new();
    for tool in &listed {
        let json = serde_json::to_value(tool).unwrap_or_default();
        match McpTool::from_listed(shared, &json) {
            Ok(tool) if names.insert(tool.name().to_owned()) => tools.push(Arc::new(tool)),
            Ok(tool) => {
                tracing::warn!(server = %name, tool = tool.remote_name(), "two tools map to one name; the later is left out")
            }
            Err(reason) => tracing::warn!(server = %name, "a tool is left out: {reason}"),
        }
    }
    let count = tools.len();
    shared.tools.replace(tools).map_err(|e| McpError::ListTools { server: name.clone(), reason: e.message })?;
    shared.listings.send_modify(|n| *n += 1);
    Ok(count)
}

/// Receives the server's notifications.
struct Handler {
    shared: Weak<Shared>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(shared) = self.shared.upgrade() else { return };
        // Listed on a task of its own: the connection keeps reading messages meanwhile.
        tokio::spawn(async move {
            if let Err(e) = refresh(&shared, &context.peer).await {
                tracing::warn!("after a tool-list change: {e}");
            }
        });
    }
}

/// The child's stdio transport, forwarding progress notifications as they are read. rmcp hands notifications to
/// the handler on tasks of their own, which may run after the call's answer was delivered; read here, in wire
/// order, a call's progress always reaches it before its answer does.
struct ProgressTransport<T> {
    inner: T,
    shared: Weak<Shared>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProgressTransport<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        }) = &message
            && let Some(shared) = self.shared.upgrade()
        {
            shared.progress.forward(&progress.params);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// The last lines a server wrote to stderr (bounded), read by a task of its own.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn follow(&self, stderr: Option<tokio::process::ChildStderr>, server: String) -> tokio::task::JoinHandle<()> {
        let lines = self.0.clone();
        tokio::spawn(async move {
            let Some(stderr) = stderr else { return };
            let mut reader = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                tracing::debug!(server = %server, "stderr: {line}");
                let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
                if lines.len() == STDERR_LINES {
                    lines.pop_front();
                }
                lines.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
            }
        })
    }

    fn text(&self) -> String {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|l| format!("{l}\n")).collect()
    }
}

type Running = RunningService<RoleClient, Handler>;

/// Reaches the server (spawning it, for stdio) and completes the MCP handshake.
async fn connect(shared: &Arc<Shared>) -> Result<(Running, StderrTail), McpError> {
    let config = &shared.config;
    let start_error = |reason: String, stderr_tail: String| McpError::Start {
        server: config.name.clone(),
        command: config.command_line(),
        reason,
        stderr_tail,
    };
    let handler = Handler { shared: Arc::downgrade(shared) };
    let tail = StderrTail::default();
    if let Some(url) = &config.url {
        let transport = ProgressTransport {
            inner: http_transport(url, config).map_err(|e| start_error(e, String::new()))?,
            shared: Arc::downgrade(shared),
        };
        return match tokio::time::timeout(config.timeout, handler.serve(transport)).await {
            Ok(Ok(running)) => Ok((running, tail)),
            Ok(Err(e)) => Err(start_error(format!("the MCP handshake failed: {e}"), String::new())),
            Err(_) => Err(start_error(
                format!("no answer to the MCP handshake within {} s", config.timeout.as_secs_f64()),
                String::new(),
            )),
        };
    }
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args).envs(&config.env);
    if let Some(dir) = &config.cwd {
        command.current_dir(dir);
    }
    let (transport, stderr) = ChildTransport::spawn(command)
        .map_err(|e| start_error(format!("the command could not be run: {e}"), String::new()))?;
    let reader = tail.follow(stderr, config.name.clone());
    let transport = ProgressTransport { inner: transport, shared: Arc::downgrade(shared) };
    let failed = match tokio::time::timeout(config.timeout, handler.serve(transport)).await {
        Ok(Ok(running)) => return Ok((running, tail)),
        Ok(Err(e)) => format!("the MCP handshake failed: {e}"),
        Err(_) => format!("no answer to the MCP handshake within {} s", config.timeout.as_secs_f64()),
    };
    // The process is gone or going: give its last words a moment to arrive.
    let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    Err(start_error(failed, tail.text()))
}

/// The streamable HTTP transport for `url`, with the configured headers.
fn http_transport(
    url: &str,
    config: &McpServerConfig,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let mut headers = HashMap::new();
    for (name, value) in &config.headers {
        let name =
            HeaderName::try_from(name.as_str()).map_err(|e| format!("the header name '{name}' is invalid: {e}"))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("the value of header '{name}' is invalid: {e}"))?;
        headers.insert(name, value);
    }
    let transport_config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    Ok(StreamableHttpClientTransport::from_config(transport_config))
}

/// A running MCP server whose tools are a [`ToolSource`]: hand it to `RuntimeBuilder::tool_source`.
///
/// Its tools are named `server__tool` (see [`tool_name`](crate::tool_name)). Each model request offers the tools
/// as the server lists them at that moment: a `notifications/tools/list_changed` makes the server list them again.
/// A server that exits is restarted with backoff (250 ms doubling to 30 s); meanwhile calls of its tools fail with
/// an error naming it. Dropping the handle (or [`McpServer::shutdown`]) stops the server.
pub struct McpServer {
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.shared.config.name).finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts the server, completes the handshake and lists its tools. A server that does not start is an error
    /// naming the command and quoting the end of its stderr.
    pub async fn start(config: McpServerConfig) -> Result<McpServer, McpError> {
        config.validate()?;
        let shared = Arc::new(Shared {
            config,
            peer: RwLock::new(None),
            tools: DynamicTools::new(),
            progress: Progress::default(),
            connections: watch::channel(0).0,
            listings: watch::channel(0).0,
        });
        let (running, tail) = connect(&shared).await?;
        let peer = running.peer().clone();
        if let Err(e) = refresh(&shared, &peer).await {
            let _ = running.cancel().await;
            return Err(e);
        }
        shared.set_peer(Some(peer));
        shared.connections.send_modify(|n| *n += 1);
        let shutdown = CancellationToken::new();
        tokio::spawn(supervise(shared.clone(), running, tail, shutdown.clone()));
        Ok(McpServer { shared, shutdown })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// True while the server is connected (false between an exit and the restart).
    pub fn is_connected(&self) -> bool {
        self.shared.peer().is_some()
    }

    /// How many times the server was connected: 1 after the start, one more per restart.
    pub fn connections(&self) -> u64 {
        *self.shared.connections.borrow()
    }

    /// Follows [`McpServer::connections`]: wait on it to learn of a restart.
    pub fn watch_connections(&self) -> watch::Receiver<u64> {
        self.shared.connections.subscribe()
    }

    /// Follows how many times the tools were listed (1 after the start, one more after each change notification
    /// or restart): wait on it to learn that the tool set changed.
    pub fn watch_listings(&self) -> watch::Receiver<u64> {
        self.shared.listings.subscribe()
    }

    /// Lists the tools again now (a `list_changed` notification does this by itself).
    pub async fn refresh(&self) -> Result<usize, McpError> {
        let peer = self.shared.peer().ok_or_else(|| McpError::ListTools {
            server: self.shared.config.name.clone(),
            reason: "the server is not connected".to_owned(),
        })?;
        refresh(&self.shared, &peer).await
    }

    /// Stops the server (its tools' calls fail from then on).
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl ToolSource for McpServer {
    fn snapshot(&self) -> ToolSet {
        self.shared.tools.snapshot()
    }
}

/// Keeps the connection: waits for it to end, then restarts the server with backoff until it connects again or
/// the handle is dropped.
async fn supervise(shared: Arc<Shared>, mut running: Running, mut tail: StderrTail, shutdown: CancellationToken) {
    let name = shared.config.name.clone();
    loop {
        let stop = running.cancellation_token();
        let quit = tokio::select! {
            quit = running.waiting() => quit,
            () = shutdown.cancelled() => {
                stop.cancel();
                shared.set_peer(None);
                return;
            }
        };
        shared.set_peer(None);
        if shutdown.is_cancelled() {
            return;
        }
        tracing::warn!(server = %name, ?quit, stderr = %tail.text(), "the MCP server exited; restarting it");
        let mut delay = RESTART_BACKOFF.0;
        running = loop {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.cancelled() => return,
            }
            match connect(&shared).await {
                Ok((next, next_tail)) => {
                    let peer = next.peer().clone();
                    match refresh(&shared, &peer).await {
                        Ok(_) => {
                            shared.set_peer(Some(peer));
                            shared.connections.send_modify(|n| *n += 1);
                            tail = next_tail;
                            break next;
                        }
                        Err(e) => {
                            tracing::warn!(server = %name, "restarted, but: {e}");
                            let _ = next.cancel().await;
                        }
                    }
                }
                Err(e) => tracing::warn!(server = %name, "restart failed: {e}"),
            }
            delay = (delay * 2).min(RESTART_BACKOFF.1);
        };
    }
}
