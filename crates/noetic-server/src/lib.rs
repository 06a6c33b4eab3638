//! `noetic-server`: an HTTP API (JSON, and server-sent events for live events) and a web page, served by one
//! process, through which people and programs talk to, watch and steer the sessions of a [`Runtime`].
//!
//! ```no_run
//! # async fn demo(runtime_builder: noetic::agent::RuntimeBuilder) -> Result<(), Box<dyn std::error::Error>> {
//! use noetic_server::{Approvals, Server, ServerConfig};
//!
//! let approvals = Approvals::new(noetic_server::DEFAULT_APPROVAL_TIMEOUT);
//! let runtime = runtime_builder.approver(approvals.approver()).build()?;
//! let server = Server::new(runtime, approvals, ServerConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! The routes (also served as an OpenAPI document at `/openapi.json`):
//!
//! | Route | What it does |
//! |---|---|
//! | `POST /api/sessions/{key}/messages` `{"text"}` | starts a turn when idle, steers the running turn when busy (atomic); 429 when the queue is full |
//! | `GET /api/sessions/{key}/events?after=N` | server-sent events, resumable with `Last-Event-ID`; a `gap` event for what the log dropped |
//! | `GET /api/sessions/{key}` | history, queued messages, busy, unfinished turn, pending approvals |
//! | `DELETE /api/sessions/{key}` | deletes an idle session from the store; 409 while a turn runs |
//! | `PATCH /api/sessions/{key}` `{"title"}` | renames a session (also while a turn runs); 400 `invalid_title` |
//! | `POST /api/sessions/{key}/stop`, `/continue`, `/resume` | stop a turn; run the queued messages; finish an unfinished turn |
//! | `PUT /api/sessions/{key}/mode` `{"mode"}` | `one-at-a-time` or `all` |
//! | `GET`, `PUT /api/sessions/{key}/budget` `{"session": {…}, "turn": {…}}` | the session's budget, spending and pause; setting it continues a paused session |
//! | `GET /api/sessions`, `GET /api/sessions/{key}/ledger` | the store's sessions (which run now); the steering ledger |
//! | `GET /api/approvals`, `POST /api/approvals/{call_id}` `{"approve", "reason"}` | calls waiting for a decision |
//! | `GET /healthz`, `GET /readyz` | liveness and readiness |
//! | `POST /ag-ui/{agent}` (AG-UI `RunAgentInput`) | an AG-UI run: the AG-UI event stream of the thread's turn (see below) |
//! | `GET /.well-known/agent-card.json`, `POST /a2a` (A2A 1.0 JSON-RPC) | the A2A agent card and endpoint: a context is a session, a task a turn (see below) |
//!
//! The AG-UI endpoint speaks the AG-UI protocol to AG-UI front-ends: a thread is a session, approvals are
//! interrupts, and a run with a new message while the thread's turn runs steers it ([`BusyPolicy`]; what became
//! of the input is in the [`ROUTED_HEADER`] header and the first `noetic.run_routed` event). Approvals end a run
//! with AG-UI's `interrupt` outcome and are answered by the next run's `resume`; steering decisions, queued and
//! injected messages and skipped calls are `CUSTOM` events named `noetic.*`; a failed turn is `RUN_ERROR` with our
//! error kind as its `code`, and an input error is `RUN_ERROR` with the API's error code.
//!
//! The A2A endpoint speaks A2A 1.0 (JSON-RPC binding) to other agents: `SendMessage`, `SendStreamingMessage`,
//! `GetTask`, `CancelTask`, `SubscribeToTask`. A task is a session turn (id `SESSION:TURN`), a call waiting for
//! approval puts it in `TASK_STATE_INPUT_REQUIRED` and a reply (`approve`, `reject: <why>`) decides it, and a message
//! to a working task steers it ([`STEERING_EXTENSION`], advertised in the card).
//!
//! With an access token set, every `/api`, `/ag-ui` and `/a2a` request must carry it (`Authorization: Bearer …`, or `?access_token=`
//! for an `EventSource`); the page and the health routes need none. A server bound to anything but loopback
//! refuses to start without a token ([`check_bind`]).
//!
//! What a web page on another site cannot do, token or not:
//!
//! * **Reach the server by a name of its own** (DNS rebinding): a request whose `Host` is not the server's own name —
//!   the address the connection came in on, `localhost` or a loopback literal (`127.0.0.1`, `[::1]`), with the
//!   connection's port — nor one of [`ServerConfig::allowed_hosts`] gets 403 `host_not_allowed`, on every route
//!   but `/healthz` and `/readyz` (they change nothing, and probes name servers as they please).
//! * **Change state** (POST, PUT and any other method but GET, HEAD and OPTIONS): a request whose `Origin` or
//!   `Sec-Fetch-Site` says it came from another origin gets 403 `cross_site_request`, and one that is neither
//!   `Content-Type: application/json` nor marked `X-Noetic-Request: 1` ([`REQUEST_MARK_HEADER`]) gets 415: a page
//!   cannot make a browser send either to another origin. `stop`, `continue` and `resume` take no body, so send
//!   them with the header (or an empty JSON body): `curl -X POST -H 'X-Noetic-Request: 1' …/stop`.
//!
//! A session key is 1 to 128 characters of `A-Z a-z 0-9 - _ .`, not made only of dots (a browser or curl drops a
//! `.` or `..` path segment, so such a session could never be reached by URL).
//!
//! Connections cannot hold the server ([`ServerConfig`]): a connection with no request in progress closes after
//! [`idle_timeout`](ServerConfig::idle_timeout), a request head must arrive within
//! [`header_read_timeout`](ServerConfig::header_read_timeout) of its first byte and its body within
//! [`body_read_timeout`](ServerConfig::body_read_timeout), and at [`max_connections`](ServerConfig::max_connections)
//! each new connection closes the longest-idle one. Event streams (a keep-alive every 15 s) are requests in
//! progress and outlive all of these.

mod a2a;
mod agui;
mod api;
mod approvals;
mod assets;
mod authority;
mod bodies;
mod budget;
mod compact;
mod config;
mod connections;
mod cross_site;
mod error;
mod host;
mod millis;
mod open;
mod openapi;
mod sessions;
mod title;
mod turns;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use noetic::agent::Runtime;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::set_header::SetResponseHeaderLayer;

pub use a2a::STEERING_EXTENSION;
pub use agui::{BusyPolicy, ROUTED_HEADER};
pub use approvals::{Approvals, DEFAULT_APPROVAL_TIMEOUT, DecideError, PendingApproval, Preview};
pub use authority::AllowedHost;
pub use config::{ALLOWED_HOSTS_ENV, AgentSkill, MAX_CONNECTIONS_LIMIT, ServerConfig, TOKEN_ENV, check_bind};
pub use cross_site::REQUEST_MARK_HEADER;
pub use error::ApiError;
pub use open::MAX_KEY_LEN;
/// The API's OpenAPI 3.1 document as `/openapi.json` serves it, generated from the handlers' annotations.
pub use openapi::document as api_document;

/// What the handlers share.
pub(crate) struct AppState {
    pub(crate) runtime: Runtime,
    pub(crate) approvals: Approvals,
    pub(crate) config: ServerConfig,
    /// Turns the server started (and their continuations), so a shutdown can wait for them.
    pub(crate) turns: TaskTracker,
    /// Cancelled when the server shuts down: event streams end, new turns are refused.
    pub(crate) shutdown: CancellationToken,
    /// The sessions whose turns this server runs now.
    pub(crate) running: sessions::RunningTurns,
    /// What the AG-UI endpoint remembers of its threads.
    pub(crate) threads: agui::Threads,
}

/// The server: the runtime's sessions behind the API and the page.
#[derive(Clone)]
pub struct Server {
    state: Arc<AppState>,
}

impl Server {
    /// A server for `runtime`, whose approver should be `approvals.approver()` (else calls that need approval
    /// never show up as pending approvals). Every session key a client names becomes a session of the runtime:
    /// give the runtime a store and [`max_idle_sessions`](noetic::agent::RuntimeBuilder::max_idle_sessions) so
    /// memory stays bounded however many keys clients use (`noetic serve` keeps 10,000 idle ones).
    pub fn new(runtime: Runtime, approvals: Approvals, config: ServerConfig) -> Self {
        let state = AppState {
            runtime,
            approvals,
            config,
            turns: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            running: sessions::RunningTurns::default(),
            threads: agui::Threads::default(),
        };
        Server { state: Arc::new(state) }
    }

    /// The routes, for embedding in another axum application. They check `Host`, cross-site requests and the
    /// token as [`Server::serve`] does, with one difference: not knowing which address and port a connection came
    /// in on, they accept the loopback names (`localhost`, `127.0.0.1`, `[::1]`) on any port, and any other name
    /// only from [`ServerConfig::allowed_hosts`]. The connection timeouts and cap are the embedding server's.
    pub fn router(&self) -> Router {
        let api = Router::new()
            .route("/sessions", get(sessions::list_sessions))
            .route("/sessions/{key}", get(api::get_session).delete(sessions::delete_session).patch(title::rename))
            .route("/sessions/{key}/messages", post(api::post_message))
            .route("/sessions/{key}/events", get(api::events))
            .route("/sessions/{key}/stop", post(api::stop))
            .route("/sessions/{key}/continue", post(api::continue_session))
            .route("/sessions/{key}/resume", post(api::resume))
            .route("/sessions/{key}/compact", post(compact::compact))
            .route("/sessions/{key}/mode", put(api::set_mode))
            .route("/sessions/{key}/budget", get(budget::get_budget).put(budget::put_budget))
            .route("/sessions/{key}/ledger", get(api::get_ledger))
            .route("/approvals", get(api::list_approvals))
            .route("/approvals/{call_id}", post(api::decide))
            .fallback(api::not_found)
            .route_layer(middleware::from_fn_with_state(self.state.clone(), authorize));
        let agui = Router::new()
            .route("/{agent}", post(agui::run))
            .route_layer(middleware::from_fn_with_state(self.state.clone(), authorize));
        let a2a = Router::new()
            .route("/a2a", post(a2a::rpc))
            .route_layer(middleware::from_fn_with_state(self.state.clone(), authorize));
        let routes = Router::new()
            .nest("/api", api)
            .nest("/ag-ui", agui)
            .merge(a2a)
            .route("/.well-known/agent-card.json", get(a2a::agent_card))
            .route("/healthz", get(api::health))
            .route("/readyz", get(api::ready));
        assets::routes(routes)
            .fallback(api::not_found)
            .layer(DefaultBodyLimit::max(self.state.config.max_body_bytes))
            .layer(middleware::from_fn_with_state(self.state.clone(), cross_site::refuse_cross_site))
            .layer(middleware::from_fn_with_state(self.state.clone(), host::check_host))
            // Every response: no sniffing, no framing, and the page may load only its own scripts and styles.
            .layer(SetResponseHeaderLayer::overriding(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ))
            .layer(SetResponseHeaderLayer::overriding(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")))
            .layer(SetResponseHeaderLayer::overriding(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
            ))
            .with_state(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` completes; then stops accepting, ends the event streams, waits up to
    /// the grace period for running turns (each writes its progress to the store as it goes, so a turn still
    /// running when the process exits is resumable) and returns. Fails at once, saying why, when the
    /// configuration's timeouts or connection cap cannot work ([`ServerConfig::validate`]).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let state = self.state.clone();
        state.config.validate().map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let stop = state.shutdown.clone();
        let app = self.router();
        let signal = {
            let stop = stop.clone();
            async move {
                tokio::select! {
                    () = shutdown => stop.cancel(),
                    () = stop.cancelled() => {}
                }
            }
        };
        let signal = tokio::spawn(signal);
        let takeover = state.config.takeover_every.map(|every| tokio::spawn(turns::take_over(state.clone(), every)));
        let limits = connections::Limits::of(&state.config);
        let served = connections::serve(listener, app, limits, stop.clone(), state.config.shutdown_grace).await;
        stop.cancel();
        signal.abort();
        if let Some(takeover) = takeover {
            takeover.abort();
        }
        served?;
        state.turns.close();
        if tokio::time::timeout(state.config.shutdown_grace, state.turns.wait()).await.is_err() {
            tracing::warn!(
                "turns still running after {} s; they stop here and can be resumed from the store",
                state.config.shutdown_grace.as_secs()
            );
        }
        Ok(())
    }

    /// Starts shutting down from inside (as the `shutdown` future of [`Server::serve`] would).
    pub fn shutdown(&self) {
        self.state.shutdown.cancel();
    }

    /// The runtime whose sessions the server serves.
    pub fn runtime(&self) -> &Runtime {
        &self.state.runtime
    }

    /// The calls waiting for approval.
    pub fn approvals(&self) -> &Approvals {
        &self.state.approvals
    }
}

fn query_token(request: &Request) -> Option<&str> {
    request.uri().query()?.split('&').find_map(|pair| pair.strip_prefix("access_token="))
}

/// Lets an API request through only with the token (when one is set).
async fn authorize(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = state.config.token.as_deref() else { return next.run(request).await };
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let given = bearer.or_else(|| query_token(&request));
    // In time independent of where the first difference is.
    if given.is_some_and(|g| bool::from(g.trim().as_bytes().ct_eq(token.as_bytes()))) {
        next.run(request).await
    } else {
        let mut response = ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this server needs its access token: send 'Authorization: Bearer <token>' (or ?access_token= for event streams)",
        )
        .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}
