//! MCP tools against the reference servers published on npm (`@modelcontextprotocol/server-filesystem` and
//! `-everything`), installed by `scripts/mcp-servers.sh setup` into `NOETIC_MCP_SERVERS_DIR` (default
//! `~/.cache/noetic-mcp-servers`). Without them the tests print why and pass, unless `NOETIC_E2E_REQUIRED=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use noetic::model::{ContentBlock, Item, ModelResponse, ScriptedModel, ToolResult};
use noetic::prelude::*;
use noetic::testing::EventCollector;
use noetic::tool::ToolSource;
use noetic_mcp::{McpServer, McpServerConfig};
use serde_json::json;

/// The installed server binary `name` (e.g. `mcp-server-filesystem`), or `None` after saying why.
fn server_bin(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("NOETIC_MCP_SERVERS_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/noetic-mcp-servers")
    });
    let bin = dir.join("node_modules/.bin").join(name);
    let node = std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success());
    if bin.exists() && node {
        return Some(bin);
    }
    let reason =
        format!("{name} is not installed in {} (or node is missing): run scripts/mcp-servers.sh setup", dir.display());
    if std::env::var("NOETIC_E2E_REQUIRED").is_ok_and(|v| v == "1") {
        panic!("NOETIC_E2E_REQUIRED=1 and {reason}");
    }
    let _ = writeln!(std::io::stderr(), "skipped: {reason}");
    None
}

fn results(items: &[Item]) -> Vec<ToolResult> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// One turn in which the model calls `tool` with `args`; the result it got and the events of the turn.
async fn call_once(server: &Arc<McpServer>, tool: &str, args: serde_json::Value) -> (ToolResult, Vec<EventKind>) {
    let model = ScriptedModel::new([ModelResponse::tool_calls([("c1", tool, args)]), ModelResponse::text("ok")]);
    let runtime = Runtime::builder().model(Arc::new(model.clone())).tool_source(server.clone()).build().unwrap();
    let session = runtime.session("s");
    let mut events = EventCollector::of(&session);
    session.send("go").await.unwrap().await.unwrap();
    (results(model.requests()[1].history.as_slice()).remove(0), events.kinds())
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_turn_reads_a_file_through_the_filesystem_server_and_is_refused_outside_its_folder() {
    let Some(bin) = server_bin("mcp-server-filesystem") else { return };
    let dir = Dir(std::env::temp_dir().join(format!("noetic-mcp-fs-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let dir_path = dir.0.canonicalize().unwrap();
    std::fs::write(dir_path.join("notes.txt"), "hello from the filesystem\n").unwrap();
    let config = McpServerConfig::stdio("files", bin.display().to_string()).args([dir_path.display().to_string()]);
    let server = Arc::new(McpServer::start(config).await.unwrap());
    assert!(server.snapshot().get("files__read_text_file").is_some(), "{:?}", server.snapshot());

    let path = dir_path.join("notes.txt").display().to_string();
    let (read, _) = call_once(&server, "files__read_text_file", json!({"path": path})).await;
    assert!(!read.is_error, "{read:?}");
    assert_eq!(read.content.trim_end(), "hello from the filesystem");

    let (refused, events) = call_once(&server, "files__read_text_file", json!({"path": "/etc/hostname"})).await;
    assert!(refused.is_error, "{refused:?}");
    assert!(refused.content.starts_with("Error: "), "{}", refused.content);
    let completed = events.iter().any(|k| matches!(k, EventKind::ToolCallCompleted { is_error: true, .. }));
    assert!(completed, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_gives_text_an_image_structured_content_and_progress() {
    let Some(bin) = server_bin("mcp-server-everything") else { return };
    let server = Arc::new(McpServer::start(McpServerConfig::stdio("every", bin.display().to_string())).await.unwrap());

    let (echo, _) = call_once(&server, "every__echo", json!({"message": "hi"})).await;
    assert_eq!(&*echo.content, "Echo: hi");

    let (image, _) = call_once(&server, "every__get-tiny-image", json!({})).await;
    assert!(
        image.blocks.iter().any(|b| matches!(b, ContentBlock::Image { media_type, .. } if media_type == "image/png")),
        "{image:?}"
    );
    assert!(image.content.contains("[image image/png, "), "{}", image.content);

    let tool = server.snapshot().get("every__get-structured-content").cloned().unwrap();
    assert!(tool.output_schema().is_some(), "its output schema is kept and checked");
    let (weather, _) = call_once(&server, "every__get-structured-content", json!({"location": "New York"})).await;
    assert!(!weather.is_error, "{weather:?}");
    assert!(weather.structured.as_ref().is_some_and(|s| s.get("temperature").is_some()), "{weather:?}");

    let (done, events) =
        call_once(&server, "every__trigger-long-running-operation", json!({"duration": 1, "steps": 2})).await;
    assert!(!done.is_error, "{done:?}");
    let progress = events.iter().filter(|k| matches!(k, EventKind::ToolProgress { .. })).count();
    assert_eq!(progress, 2, "one tool_progress event per step: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_over_streamable_http_answers_a_call() {
    use tokio::io::AsyncBufReadExt;
    let Some(bin) = server_bin("mcp-server-everything") else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = tokio::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Ready once it says (on stderr) that it listens.
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let listening = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("listening") {
                return;
            }
        }
        panic!("the server ended without listening");
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), listening).await.expect("the server listens");
    let config = McpServerConfig::http("web", format!("http://127.0.0.1:{port}/mcp")).header("x-test", "noetic");
    let server = Arc::new(McpServer::start(config).await.unwrap());
    let (echo, _) = call_once(&server, "web__echo", json!({"message": "over http"})).await;
    assert_eq!(&*echo.content, "Echo: over http");
    child.kill().await.unwrap();
}

/// Serves `body` once over HTTP on a loopback port; returns its URL.
fn serve_once(body: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/data.bin", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else { return };
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(&body));
    });
    url
}

/// `n` bytes that gzip cannot shrink (xorshift).
fn incompressible(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_result_of_the_everything_server_is_cut_and_one_over_16_mib_fails_its_call_at_once() {
    let Some(bin) = server_bin("mcp-server-everything") else { return };
    // A timeout the second call must not wait for. The server reads at most 10 MiB per message, so the large
    // answer is a gzipped download it sends back as base64 (13 MiB → over 17 MiB).
    let config = McpServerConfig::stdio("every", bin.display().to_string())
        .env("GZIP_MAX_FETCH_SIZE", (20 * 1024 * 1024).to_string())
        .timeout(std::time::Duration::from_secs(600));
    let server = Arc::new(McpServer::start(config).await.unwrap());
    let end = |text: &str| text[text.len().saturating_sub(300)..].to_owned();

    let (echo, _) = call_once(&server, "every__echo", json!({"message": "y".repeat(100_000)})).await;
    let note = "\n[… truncated: the result has 100006 bytes; showing the first 65536 (max_result_bytes of MCP server \
                'every' is 65536); ask the tool for less]";
    assert!(!echo.is_error && echo.content.starts_with("Echo: yyy"), "{}", end(&echo.content));
    assert!(echo.content.len() == 65_536 + note.len() && echo.content.ends_with(note), "{}", end(&echo.content));

    let url = serve_once(incompressible(13 * 1024 * 1024));
    let args = json!({"name": "big.gz", "data": url, "outputType": "resource"});
    let huge = call_once(&server, "every__gzip-file-as-resource", args);
    let (huge, _) = tokio::time::timeout(std::time::Duration::from_secs(120), huge).await.expect("no 600 s wait");
    assert!(huge.is_error, "{}", end(&huge.content));
    assert!(huge.content.contains("more than the 16777216 bytes (16 MiB) a message may have"), "{}", huge.content);
}
