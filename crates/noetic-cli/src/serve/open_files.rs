//! The open-file limit: every connection takes a file descriptor, so the server raises its soft limit to the hard
//! limit at start (a default soft limit of 1,024 is common while the hard limit is far higher) and keeps its
//! connection cap well below what it ends up with, leaving room for the database, the workspace's files, MCP
//! servers and model connections.

/// What the limit is, and what it was before the server raised it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit before, when it was raised.
    pub raised_from: Option<u64>,
    /// The soft limit now; `None` when unlimited or unknown.
    pub limit: Option<u64>,
    /// Why it could not be raised, when it could not.
    pub not_raised: Option<String>,
}

/// The most connections the default cap allows, however high the limit.
const MAX_DEFAULT_CONNECTIONS: u64 = 1024;

/// Raises the soft open-file limit to the hard limit (or as far as the system lets it go); says what it is now.
#[cfg(unix)]
pub fn raise() -> OpenFiles {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let before = getrlimit(Resource::Nofile);
    let Some(current) = before.current else { return OpenFiles { raised_from: None, limit: None, not_raised: None } };
    // An unlimited hard limit (macOS) is capped by the kernel's per-process maximum: try a high value, then the
    // traditional OPEN_MAX.
    let wanted = before.maximum.map_or(vec![1 << 20, 10_240], |hard| vec![hard]);
    let mut not_raised = None;
    for target in wanted.into_iter().filter(|t| *t > current) {
        match setrlimit(Resource::Nofile, Rlimit { current: Some(target), maximum: before.maximum }) {
            Ok(()) => return OpenFiles { raised_from: Some(current), limit: Some(target), not_raised: None },
            Err(e) => not_raised = Some(format!("could not raise the open-file limit from {current}: {e}")),
        }
    }
    OpenFiles { raised_from: None, limit: Some(current), not_raised }
}

/// Elsewhere the limit is left as it is.
#[cfg(not(unix))]
pub fn raise() -> OpenFiles {
    OpenFiles { raised_from: None, limit: None, not_raised: None }
}

/// The connection cap a limit leaves room for: a quarter of the limit (at least 64 files) stays for everything
/// else; at least 16, at most [`MAX_DEFAULT_CONNECTIONS`].
pub fn default_cap(limit: Option<u64>) -> usize {
    let cap = match limit {
        Some(limit) => limit.saturating_sub((limit / 4).max(64)).clamp(16, MAX_DEFAULT_CONNECTIONS),
        None => MAX_DEFAULT_CONNECTIONS,
    };
    usize::try_from(cap).unwrap_or(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_a_quarter_of_the_open_file_limit_for_everything_else() {
        assert_eq!(default_cap(Some(128)), 64);
        assert_eq!(default_cap(Some(1024)), 768);
        assert_eq!(default_cap(Some(64)), 16);
        assert_eq!(default_cap(Some(1 << 20)), 1024);
        assert_eq!(default_cap(None), 1024);
    }
}
