//! Which process holds a session: its pid, host and start time, and whether it is gone.

/// This process, as a session's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) pid: u32,
    pub(crate) host: String,
    /// When the process started (clock ticks since boot on Linux): a reused pid is not the same owner.
    pub(crate) started: i64,
}

impl Owner {
    pub(crate) fn this_process() -> Self {
        let pid = std::process::id();
        Owner { pid, host: hostname(), started: process_start(pid).unwrap_or(0) }
    }

    /// True when the process that owned a session is certainly gone (same host, and no process with that pid
    /// and start time). An owner on another host is presumed alive.
    pub(crate) fn is_gone(pid: u32, host: &str, started: i64) -> bool {
        if host != hostname() {
            return false;
        }
        match process_start(pid) {
            None => true,
            Some(now) => started != 0 && now != started,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned())
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), `None` when there is no such process.
fn process_start(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19).and_then(|f| f.parse().ok())
}
