//! How the server behaves ([`ServerConfig`]), the host names it answers besides its own ([`AllowedHost`]), and
//! the check that keeps a server without a token on loopback ([`check_bind`]).

use std::net::SocketAddr;
use std::time::Duration;

use crate::agui::policy::BusyPolicy;
use crate::authority::AllowedHost;

/// The environment variable `noetic serve` reads the access token from.
pub const TOKEN_ENV: &str = "NOETIC_SERVER_TOKEN";

/// The environment variable `noetic serve` reads more allowed hosts from (comma-separated, as `--allowed-host`).
pub const ALLOWED_HOSTS_ENV: &str = "NOETIC_SERVER_ALLOWED_HOSTS";

/// The most connections [`ServerConfig::max_connections`] accepts.
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 20;

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The access token every API request must carry; `None` for none (loopback only).
    pub token: Option<String>,
    /// Host names the server answers besides its own. Its own are the address a connection reached it on,
    /// `localhost` and the loopback literals (`127.0.0.1`, `[::1]`), each with that connection's port; any other
    /// `Host` (a name a web page pointed at this machine: DNS rebinding) is refused with 403 `host_not_allowed`,
    /// token or not. A page on one of these hosts may also change state (its `Origin` is accepted).
    pub allowed_hosts: Vec<AllowedHost>,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The longest message, in characters.
    pub max_message_chars: usize,
    /// How long a shutdown waits for running turns before the process leaves them to be resumed.
    pub shutdown_grace: Duration,
    /// How often the server looks for turns a dead worker left (an open turn in a session's log whose lease nobody
    /// holds) and messages nobody took, and resumes or runs them; `None` never.
    pub takeover_every: Option<Duration>,
    /// Once the first byte of a request arrived, how long its head (request line and headers) may take; a
    /// connection whose client trickles a head slower is closed.
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive after its head; a slower one is answered with an error.
    pub body_read_timeout: Duration,
    /// How long a connection with no request in progress stays open: one that never sends a byte, or a kept-alive
    /// one between requests. An event stream is a request in progress (and sends a keep-alive every 15 s): it is
    /// never idle.
    pub idle_timeout: Duration,
    /// The most connections open at once. At the cap, each new connection closes the longest-idle one; when every
    /// open connection has a request in progress (event streams), new ones wait until one closes. Keep it well
    /// below the process's open-file limit (`noetic serve` derives it from that limit).
    pub max_connections: usize,
    /// The name the agent answers to on the AG-UI endpoint (`POST /ag-ui/{agent}`); `default` is always accepted
    /// too.
    pub agent_name: String,
    /// What a new message does on the AG-UI endpoint while the thread's turn runs: steer it (the default), queue
    /// it for after the turn, reject it, or stop the turn and start a new one ([`BusyPolicy`]).
    pub agui_busy: BusyPolicy,
    /// What the A2A agent card says the agent does (`description`); empty: a sentence naming the agent.
    pub agent_description: String,
    /// The skills the A2A agent card lists; none: one skill (id `chat`), talking to the agent, named after it and
    /// described by [`ServerConfig::agent_description`].
    pub skills: Vec<AgentSkill>,
}

/// A skill the A2A agent card lists: something callers may ask the agent to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSkill {
    /// A stable id (`review-code`).
    pub id: String,
    /// A short name.
    pub name: String,
    /// What the skill does, for the calling agent's model.
    pub description: String,
    /// Keywords.
    pub tags: Vec<String>,
    /// Example requests.
    pub examples: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            token: None,
            allowed_hosts: Vec::new(),
            max_body_bytes: 256 * 1024,
            max_message_chars: 32 * 1024,
            shutdown_grace: Duration::from_secs(10),
            takeover_every: Some(Duration::from_secs(2)),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1024,
            agent_name: "default".to_owned(),
            agui_busy: BusyPolicy::Steer,
            agent_description: String::new(),
            skills: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Says what is wrong with a value [`Server::serve`](crate::Server::serve) cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        for (name, value) in [
            ("header_read_timeout", self.header_read_timeout),
            ("body_read_timeout", self.body_read_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("ServerConfig::{name} is 0: it would close every connection; give it a time"));
            }
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_LIMIT {
            return Err(format!(
                "ServerConfig::max_connections is {}: it must be 1 to {MAX_CONNECTIONS_LIMIT}",
                self.max_connections
            ));
        }
        Ok(())
    }
}

/// Refuses an address other than loopback when no token is set, saying why.
pub fn check_bind(addr: &SocketAddr, token: Option<&str>) -> Result<(), String> {
    if addr.ip().is_loopback() || token.is_some_and(|t| !t.is_empty()) {
        Ok(())
    } else {
        Err(format!(
            "refusing to serve on {addr} without an access token: anyone who can reach that address could drive the \
             agent and its tools. Set {TOKEN_ENV} (or --token), or bind to 127.0.0.1"
        ))
    }
}
