//! A test kit: the helpers that tests of programs built on Noetic (and Noetic's own tests) would otherwise
//! rewrite file by file.
//!
//! - [`ScriptedModel`] (re-exported): a model that answers from a script and records every request;
//!   [`JudgeRouter`] sends steering judges' requests to one scripted model and the agent's to another.
//! - [`Gate`] / [`gated_tool`]: a tool that signals when it starts and waits until the test releases it, so a test
//!   can act (steer, cancel, publish) while a tool is running, without sleeps.
//! - [`Counter`]: tools that return a fixed value and count their calls.
//! - [`EventCollector`]: the events a session (or any event receiver) has sent so far, with their `type` names.
//! - [`transcript`]: one stable line per conversation item, to assert a whole history at once.
//! - [`until`]: yields to other tasks until a condition holds, with a bound instead of a hang.
//! - [`check_log_store`]: the conformance kit every session-log store runs (in memory, SQLite, PostgreSQL).
//! - [`RecordingLogStore`]: a session-log store that keeps each append, so a crash test can cut the log at each.
//! - [`HookedLogStore`]: a memory session-log store with [`StoreHooks`] around its calls (fail, hold back, count).
//! - [`delete_file_tool`] / [`workspace_rule`]: the agent turn the providers' tests run over their wire (a tool,
//!   a rule that denies some of its calls).
//! - [`limits`] / [`provider_limit_tests!`](crate::provider_limit_tests): the body-cap and idle-limit scenarios every
//!   HTTP provider runs against a bare local server, one test each.
//! - [`raw_http`]: a bare HTTP/1.1 server on 127.0.0.1 (standard library only) for what a mock server cannot send.
//! - [`wire`]: what the providers' wire tests share (body fingerprints checked against a committed fixture, the
//!   histories of a growing log, the check that growing requests share their encoded bytes).
//!
//! Nothing here sleeps or reads the clock: waits are notifications, so tests stay exact under paused tokio time.
//!
//! ```
//! use std::sync::Arc;
//! use noetic::prelude::*;
//! use noetic::testing::{EventCollector, ScriptedModel, gated_tool, transcript};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (tool, gate) = gated_tool("build")?;
//! let model = ScriptedModel::new([
//!     ModelResponse::tool_calls([("c1", "build", json!({}))]),
//!     ModelResponse::text("built"),
//! ]);
//! let runtime = Runtime::builder().model(Arc::new(model.clone())).tool(tool).build()?;
//! let session = runtime.session("s");
//! let mut events = EventCollector::of(&session);
//! let turn = session.send("build it").await?;
//!
//! gate.started().await; // the tool is running now: steer, cancel or inspect here
//! gate.release();
//! assert_eq!(turn.await?, "built");
//!
//! assert_eq!(
//!     transcript(&session.history()),
//!     ["User: build it", "call c1 build({})", "result c1 build done", "Assistant: built"]
//! );
//! assert_eq!(events.types().first().map(String::as_str), Some("turn_started"));
//! # Ok(())
//! # }
//! ```

mod agent_turn;
mod conformance;
mod events;
mod hooked;
pub mod limits;
mod log_store;
pub mod raw_http;
mod recording;
mod steering;
mod tools;
mod transcript;
pub mod wire;

pub use agent_turn::{OUTSIDE_WORKSPACE, delete_file_tool, workspace_rule};
pub use conformance::ConformanceFailure;
pub use events::{EventCollector, event_type};
pub use hooked::{HookedLogStore, LeaseCall, ReadCall, StoreHooks};
pub use log_store::check_log_store;
pub use recording::{Recorder, RecordingLogStore};
pub use steering::{JudgeRouter, is_judge, steering_state};
pub use tools::{Counter, Gate, gated_tool};
pub use transcript::{transcript, transcript_line};

pub use crate::model::{HeldCall, ScriptedModel};

/// The default bound of [`until`]: enough yields for any task that can make progress to make it.
pub const UNTIL_YIELDS: usize = 10_000;

/// [`until`] gave up: the condition never held, so the task that should have made it hold never ran (or hangs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gave up waiting until {what} after {yields} yields: the task that should make it happen never did")]
pub struct GaveUp {
    /// What was awaited, as the caller described it.
    pub what: String,
    /// How many times the waiter yielded.
    pub yields: usize,
}

/// Yields to other tasks until `done` holds, at most [`UNTIL_YIELDS`] times; then fails with [`GaveUp`] instead of
/// hanging the test. `what` names the awaited condition in the error.
pub async fn until(what: &str, done: impl FnMut() -> bool) -> Result<(), GaveUp> {
    until_within(UNTIL_YIELDS, what, done).await
}

/// [`until`] with an explicit bound on the number of yields (for tests that start thousands of tasks).
pub async fn until_within(max_yields: usize, what: &str, mut done: impl FnMut() -> bool) -> Result<(), GaveUp> {
    for _ in 0..max_yields {
        if done() {
            return Ok(());
        }
        tokio::task::yield_now().await;
    }
    if done() { Ok(()) } else { Err(GaveUp { what: what.to_owned(), yields: max_yields }) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn until_returns_once_another_task_made_the_condition_true() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        tokio::spawn(async move { f.store(true, Ordering::SeqCst) });
        assert_eq!(until("the flag is set", || flag.load(Ordering::SeqCst)).await, Ok(()));
    }

    #[tokio::test]
    async fn until_gives_up_with_an_error_naming_the_condition_instead_of_hanging() {
        let err = until_within(5, "the flag is set", || false).await.unwrap_err();
        assert_eq!(err, GaveUp { what: "the flag is set".into(), yields: 5 });
        assert_eq!(
            err.to_string(),
            "gave up waiting until the flag is set after 5 yields: the task that should make it happen never did"
        );
    }
}
