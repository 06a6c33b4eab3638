//! What a new AG-UI message does while its thread's turn runs ([`BusyPolicy`]).

use std::fmt;
use std::str::FromStr;

/// What a new message does while the thread's turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum BusyPolicy {
    /// It steers the running turn: it reaches the model at the next checkpoint (the default).
    #[default]
    Steer,
    /// It waits for the turn (and the turns continuing it) to end, then starts a turn of its own; the run streams
    /// that turn.
    Queue,
    /// It is refused with `RUN_ERROR` `thread_busy`.
    Reject,
    /// The running turn is stopped (its queue cleared) and the message starts a new turn.
    Restart,
}

impl BusyPolicy {
    /// Its name in configuration: `steer`, `queue`, `reject` or `restart`.
    pub fn as_str(self) -> &'static str {
        match self {
            BusyPolicy::Steer => "steer",
            BusyPolicy::Queue => "queue",
            BusyPolicy::Reject => "reject",
            BusyPolicy::Restart => "restart",
        }
    }
}

impl fmt::Display for BusyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BusyPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "steer" => Ok(BusyPolicy::Steer),
            "queue" => Ok(BusyPolicy::Queue),
            "reject" => Ok(BusyPolicy::Reject),
            "restart" => Ok(BusyPolicy::Restart),
            other => {
                Err(format!("'{}' is not a busy policy: use steer, queue, reject or restart", other.escape_debug()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_policy_reads_its_name_back_and_a_typo_says_the_valid_ones() {
        for policy in [BusyPolicy::Steer, BusyPolicy::Queue, BusyPolicy::Reject, BusyPolicy::Restart] {
            assert_eq!(policy.as_str().parse::<BusyPolicy>(), Ok(policy));
        }
        assert!("steering".parse::<BusyPolicy>().is_err_and(|e| e.contains("steer, queue, reject or restart")));
    }
}
