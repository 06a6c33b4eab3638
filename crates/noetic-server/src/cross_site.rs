//! Cross-site requests: any web page can make a browser send a POST to this server (a form, a no-CORS `fetch`)
//! without reading the answer, and stopping a turn or approving a call needs no answer. So every request that
//! changes state (any method but GET, HEAD and OPTIONS) is refused when
//!
//! * its `Origin` is not the server's own (the origin of its `Host`) nor an allowed host's, or is `null`;
//! * the browser marks it `Sec-Fetch-Site: cross-site`, or `same-site` from an origin not allowed (another port of
//!   this machine is the same site);
//! * it is neither JSON (`Content-Type: application/json`) nor marked with [`REQUEST_MARK_HEADER`]: a page on
//!   another origin cannot make a browser send either without the server's consent (a CORS preflight, which this
//!   server never grants), so this holds even for a browser that sends neither `Origin` nor `Sec-Fetch-Site`.
//!
//! Programs (curl, SDKs) send no `Origin` and pass with JSON or the header.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use crate::authority::{AllowedHost, Authority};
use crate::error::ApiError;

/// The header that marks a request as sent on purpose (any value; `X-Noetic-Request: 1`): the routes that take no
/// body need it or `Content-Type: application/json`.
pub const REQUEST_MARK_HEADER: &str = "x-noetic-request";

/// Refuses a state-changing request that another site could have made a browser send.
pub(crate) async fn refuse_cross_site(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if request.method().is_safe() {
        return next.run(request).await;
    }
    match judge(request.headers(), &state.config.allowed_hosts) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// An origin's host and port (its scheme's default when it writes none).
fn origin(value: &str) -> Option<(Authority, u16)> {
    let (scheme, rest) = value.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = Authority::parse(rest)?;
    let port = authority.port.unwrap_or(default);
    Some((authority, port))
}

fn judge(headers: &HeaderMap, allowed: &[AllowedHost]) -> Result<(), ApiError> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).and_then(Authority::parse);
    let mut allowed_origin = false;
    if let Some(value) = headers.get(header::ORIGIN) {
        let text = String::from_utf8_lossy(value.as_bytes());
        let parsed = origin(&text);
        let same = match (&parsed, &host) {
            (Some((o, port)), Some(h)) => o.name == h.name && h.port.unwrap_or(*port) == *port,
            _ => false,
        };
        allowed_origin = parsed.as_ref().is_some_and(|(o, port)| allowed.iter().any(|a| a.allows(&o.name, *port)));
        if !same && !allowed_origin {
            return Err(cross_site(&format!("came from a page on another origin (Origin: {})", shown(&text))));
        }
    }
    match headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        None | Some(b"same-origin" | b"none") => {}
        Some(b"same-site") if allowed_origin => {}
        Some(other) => {
            let site = shown(&String::from_utf8_lossy(other));
            return Err(cross_site(&format!("was sent by a page on another origin (Sec-Fetch-Site: {site})")));
        }
    }
    if !(is_json(headers) || headers.contains_key(REQUEST_MARK_HEADER)) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send Content-Type: application/json (or the header X-Noetic-Request: 1) with every POST, PUT and DELETE: a \
             page on another site cannot make a browser send either, which tells your request from a forged one",
        ));
    }
    Ok(())
}

fn shown(text: &str) -> String {
    text.chars().take(100).collect::<String>().escape_debug().to_string()
}

fn cross_site(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "cross_site_request",
        format!(
            "refused: this request {what}, and only this server's own page or a program (which sends no Origin) may \
             change state. If that page is yours, allow its host with --allowed-host (ServerConfig::allowed_hosts)"
        ),
    )
}

/// `application/json` or `application/*+json`, with or without parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}
