//! Host names as requests and origins carry them (`Host`, `Origin`), and the hosts an operator allows: parsed once
//! here, below both the configuration and the `Host` and cross-site checks.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// The address a request's connection came in on (set by the server's accept loop; absent when the router is
/// embedded in another server, where then any port is accepted with the server's own names).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalAddr(pub(crate) SocketAddr);

/// A host and an optional port, as in `Host` or an origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Authority {
    /// Lower case; an IPv6 address in brackets, written canonically.
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

impl Authority {
    /// `name`, `name:port`, `[v6]` or `[v6]:port`; `None` for anything else (user info, a path, odd characters).
    pub(crate) fn parse(s: &str) -> Option<Authority> {
        if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']')?;
            let ip: Ipv6Addr = inside.parse().ok()?;
            let port = if after.is_empty() { None } else { Some(parse_port(after.strip_prefix(':')?)?) };
            return Some(Authority { name: format!("[{ip}]"), port });
        }
        let (name, port) = match s.split_once(':') {
            Some((name, port)) => (name, Some(parse_port(port)?)),
            None => (s, None),
        };
        let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
        if name.is_empty() || name.len() > 253 || !name.bytes().all(plain) {
            return None;
        }
        Some(Authority { name: name.to_ascii_lowercase(), port })
    }

    /// The IP address the name is, if it is one (IPv4-mapped IPv6 as IPv4).
    fn ip(&self) -> Option<IpAddr> {
        let bare = self.name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(&self.name);
        bare.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
    }

    /// True when this names the server reached at `local`: `localhost`, a loopback address or `local`'s address,
    /// with `local`'s port (80 when none is written). Without `local`, any port.
    pub(crate) fn is_own(&self, local: Option<SocketAddr>) -> bool {
        let own_name = self.name == "localhost"
            || self.ip().is_some_and(|ip| ip.is_loopback() || local.is_some_and(|l| l.ip().to_canonical() == ip));
        own_name && local.is_none_or(|l| self.port.unwrap_or(80) == l.port())
    }
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

/// True when `host` is the server's own name for a connection to `local`, or an allowed host.
pub(crate) fn is_allowed(host: &Authority, local: Option<SocketAddr>, allowed: &[AllowedHost]) -> bool {
    host.is_own(local) || allowed.iter().any(|a| a.allows(&host.name, host.port.unwrap_or(80)))
}

/// A host the server answers besides its own (`--allowed-host`): `name` answers that name on any port (behind a
/// proxy the port is often the proxy's), `name:port` on that port only. Names are compared without regard to case;
/// IP addresses are written as in a URL (`192.0.2.7`, `[2001:db8::7]`).
///
/// ```
/// use noetic_server::AllowedHost;
/// let host: AllowedHost = "Noetic.Example.com:8443".parse().unwrap();
/// assert_eq!((host.name(), host.port()), ("noetic.example.com", Some(8443)));
/// assert!("https://noetic.example.com/".parse::<AllowedHost>().unwrap_err().contains("without a scheme"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    /// The name (lower case; an IPv6 address in brackets).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port, when only that one is allowed.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// True when this entry allows `name` on `port` (the port the request or origin names, or its default).
    pub(crate) fn allows(&self, name: &str, port: u16) -> bool {
        self.name == name && self.port.is_none_or(|p| p == port)
    }
}

impl FromStr for AllowedHost {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let shown = s.escape_debug();
        if s.contains("://") {
            return Err(format!("allowed host '{shown}': write it without a scheme or path, as HOST or HOST:PORT"));
        }
        match Authority::parse(s) {
            Some(a) => Ok(AllowedHost { name: a.name, port: a.port }),
            _ => Err(format!(
                "allowed host '{shown}' is not a host name: write it as HOST or HOST:PORT (e.g. noetic.example.com, \
                 192.0.2.7:8080 or [2001:db8::7]:8080)"
            )),
        }
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.name),
            None => f.write_str(&self.name),
        }
    }
}
