//! DNS rebinding: a web page can point a name it controls at this machine, after which the browser treats the
//! server as part of that page's origin and lets the page read and post to it. So every request (the health checks
//! aside) must name the server in `Host` as the server knows itself — the address the connection came in on,
//! `localhost` or a loopback literal, with the connection's port — or as a host the operator allowed
//! ([`ServerConfig::allowed_hosts`](crate::ServerConfig::allowed_hosts)). An IP address is never a rebinding
//! name, but only the server's own are accepted, so that a proxy in front is configured on purpose.
//!
//! The health checks answer any `Host`: they change nothing and tell nothing but "up", and load balancers and
//! orchestrators probe them by whatever name or address they know.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::authority::{Authority, LocalAddr, is_allowed};
use crate::error::ApiError;

/// Answers a request that names another host with 403 `host_not_allowed` (the health checks excepted).
pub(crate) async fn check_host(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if matches!(request.uri().path(), "/healthz" | "/readyz") {
        return next.run(request).await;
    }
    let local = request.extensions().get::<LocalAddr>().map(|l| l.0);
    let allowed = &state.config.allowed_hosts;
    let Some(host) = request.headers().get(header::HOST) else {
        return refused(None, local).into_response();
    };
    let named = |s: &str| Authority::parse(s).is_some_and(|a| is_allowed(&a, local, allowed));
    let host_ok = host.to_str().is_ok_and(named);
    // A request line in absolute form (`POST http://name/… HTTP/1.1`) names the host a second time.
    let target_ok = request.uri().authority().is_none_or(|a| named(a.as_str()));
    if host_ok && target_ok {
        next.run(request).await
    } else {
        refused(Some(&String::from_utf8_lossy(host.as_bytes())), local).into_response()
    }
}

/// The server's own names for a connection to `local`.
fn own_names(local: SocketAddr) -> String {
    let port = local.port();
    let mut names = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
    if !local.ip().is_loopback() {
        names.insert(0, SocketAddr::new(local.ip().to_canonical(), port).to_string());
    }
    names.join(", ")
}

fn refused(host: Option<&str>, local: Option<SocketAddr>) -> ApiError {
    let own = local.map(|l| format!(" ({})", own_names(l))).unwrap_or_default();
    let message = match host {
        None => format!("the request names no host (no Host header); send one naming this server{own}"),
        Some(host) => {
            let shown: String = host.chars().take(100).collect::<String>().escape_debug().to_string();
            let suggest = Authority::parse(host).map_or_else(|| "HOST[:PORT]".to_owned(), |_| shown.clone());
            format!(
                "this server answers requests for its own address only{own}, not for Host '{shown}': a web page \
                 can point such a name at this machine to reach the server (DNS rebinding). If you reach it \
                 through that name on purpose, start it with --allowed-host {suggest} (or add it to \
                 ServerConfig::allowed_hosts)"
            )
        }
    };
    ApiError::new(StatusCode::FORBIDDEN, "host_not_allowed", message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn own(host: &str, local: &str) -> bool {
        Authority::parse(host).is_some_and(|a| a.is_own(Some(local.parse().unwrap())))
    }

    #[test]
    fn the_server_s_own_names_are_its_address_localhost_and_loopback_literals_with_its_port() {
        for host in ["127.0.0.1:8080", "LOCALHOST:8080", "[::1]:8080", "127.0.0.2:8080", "[::ffff:127.0.0.1]:8080"] {
            assert!(own(host, "127.0.0.1:8080"), "{host}");
        }
        assert!(own("192.0.2.7:8080", "192.0.2.7:8080"), "the address the connection came in on");
        assert!(own("localhost", "127.0.0.1:80"), "no port is port 80");
        for host in [
            "evil.example:8080",
            "localhost:8081",
            "localhost",
            "192.0.2.8:8080",
            "localhost.:8080",
            "x@localhost:8080",
            "[::1",
            "localhost:80x",
            "",
        ] {
            assert!(!own(host, "127.0.0.1:8080"), "{host}");
        }
        assert!(!own("192.0.2.7:8080", "127.0.0.1:8080"), "another machine's address");
    }
}
