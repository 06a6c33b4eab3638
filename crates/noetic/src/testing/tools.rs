//! Tools for tests: a gated tool that a test holds while it runs, and tools that count their calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::error::ConfigError;
use crate::tool::{FnTool, Tool, ToolError};

/// The handle of [gated tools](Gate::tool): learn when a run started, let a run finish, count the runs.
///
/// Starts and releases are counted (semaphore permits), never lost: releasing before the tool starts lets its next
/// run go through at once, and `started` called twice waits for two runs. A gated run ignores cancellation on
/// purpose, so a test decides exactly when it ends.
#[derive(Debug, Clone)]
pub struct Gate {
    started: Arc<Semaphore>,
    released: Arc<Semaphore>,
    runs: Arc<AtomicUsize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate::new()
    }
}

impl Gate {
    /// A gate with no run started and none released.
    pub fn new() -> Self {
        Gate { started: Arc::new(Semaphore::new(0)), released: Arc::new(Semaphore::new(0)), runs: Arc::default() }
    }

    /// A tool `name` (any object as arguments) that, on each call, counts the run, signals [`started`](Self::started),
    /// waits for a [`release`](Self::release) and returns the string `"<name> done"`. One gate can hold several
    /// tools; their runs share the count.
    pub fn tool(&self, name: &str) -> Result<Arc<dyn Tool>, ConfigError> {
        let gate = self.clone();
        let done = Value::String(format!("{name} done"));
        let tool = FnTool::builder(name, "A tool a test holds while it runs.")
            .handler(move |_, _| {
                gate.runs.fetch_add(1, Ordering::SeqCst);
                gate.started.add_permits(1);
                let (released, done) = (gate.released.clone(), done.clone());
                async move {
                    // The gate's semaphores are never closed, so this only fails if that changes.
                    let permit = released
                        .acquire()
                        .await
                        .map_err(|_| ToolError::new("the test gate was closed; the tool did not finish"))?;
                    permit.forget();
                    Ok(done)
                }
            })
            .build()?;
        Ok(Arc::new(tool))
    }

    /// Waits until a run has started that no earlier `started` call has waited for.
    pub async fn started(&self) {
        if let Ok(permit) = self.started.acquire().await {
            permit.forget();
        }
    }

    /// Lets one run finish (the current one, or the next one to start).
    pub fn release(&self) {
        self.released.add_permits(1);
    }

    /// How many runs have started.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// A gated tool `name` and its gate: see [`Gate::tool`].
pub fn gated_tool(name: &str) -> Result<(Arc<dyn Tool>, Gate), ConfigError> {
    let gate = Gate::new();
    Ok((gate.tool(name)?, gate))
}

/// Counts the calls of the [tools](Counter::tool) made from it. Clones share the count.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Counter::default()
    }

    /// A tool `name` (any object as arguments) that counts each call here and returns `result`.
    pub fn tool(&self, name: &str, result: Value) -> Result<Arc<dyn Tool>, ConfigError> {
        let count = self.0.clone();
        let tool = FnTool::builder(name, "A tool that counts its calls.")
            .handler(move |_, _| {
                count.fetch_add(1, Ordering::SeqCst);
                let result = result.clone();
                async move { Ok(result) }
            })
            .build()?;
        Ok(Arc::new(tool))
    }

    /// How many calls the counter's tools have had.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::context::Context;
    use crate::tool::ToolContext;

    fn tcx(tool: &str) -> ToolContext {
        ToolContext { ctx: Context::new(), call_id: "c1".into(), tool: tool.into(), event_schema: None }
    }

    #[tokio::test(start_paused = true)]
    async fn a_gated_tool_signals_its_start_and_finishes_only_when_released() {
        let (tool, gate) = gated_tool("work").unwrap();
        let mut run = tokio::spawn(tool.call(json!({}), tcx("work")));
        gate.started().await;
        assert_eq!(gate.runs(), 1);
        // Paused time: an hour passes at once unless the run could finish, and it cannot before the release.
        assert!(tokio::time::timeout(Duration::from_secs(3600), &mut run).await.is_err(), "finished unreleased");
        gate.release();
        assert_eq!(run.await.unwrap(), Ok(json!("work done").into()));
    }

    #[tokio::test(start_paused = true)]
    async fn releases_before_the_runs_start_are_kept_one_per_run() {
        let gate = Gate::new();
        let (a, b) = (gate.tool("a").unwrap(), gate.tool("b").unwrap());
        gate.release();
        gate.release();
        assert_eq!(a.call(json!({}), tcx("a")).await, Ok(json!("a done").into()));
        assert_eq!(b.call(json!({}), tcx("b")).await, Ok(json!("b done").into()));
        gate.started().await;
        gate.started().await;
        assert_eq!(gate.runs(), 2);
        let mut third = tokio::spawn(a.call(json!({}), tcx("a")));
        assert!(tokio::time::timeout(Duration::from_secs(3600), &mut third).await.is_err(), "no release left");
    }

    #[tokio::test]
    async fn counting_tools_return_their_value_and_share_one_count() {
        let counter = Counter::new();
        let (x, y) = (counter.tool("x", json!(1)).unwrap(), counter.tool("y", Value::Null).unwrap());
        assert_eq!(x.call(json!({}), tcx("x")).await, Ok(json!(1).into()));
        assert_eq!(y.call(json!({}), tcx("y")).await, Ok(Value::Null.into()));
        assert_eq!(y.call(json!({}), tcx("y")).await, Ok(Value::Null.into()));
        assert_eq!(counter.count(), 3);
    }
}
