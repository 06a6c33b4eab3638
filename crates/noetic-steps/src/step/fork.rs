//! `fork`: run several paths concurrently.

use std::sync::Arc;

use serde::Serialize;

use super::{Step, validate_id};
use crate::context::Context;
use crate::error::{ConfigCode, ConfigError, NoeticError, PathValue};

pub(crate) type PathsFn<I, O> = Arc<dyn Fn(&I, &Context) -> Vec<Step<I, O>> + Send + Sync>;

/// A fork's paths: a fixed list that every execution runs as it is (no copy per execution), or a factory.
pub(crate) enum PathList<I, O> {
    Fixed(Box<[Step<I, O>]>),
    Made(PathsFn<I, O>),
}
pub(crate) type MergeFn<O> = Arc<dyn Fn(Vec<O>, &Context) -> Result<O, NoeticError> + Send + Sync>;
pub(crate) type SettleMergeFn<O> = Arc<dyn Fn(Vec<SettleResult<O>>, &Context) -> Result<O, NoeticError> + Send + Sync>;

/// How a fork combines its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkMode {
    /// The first path to succeed wins; the others are cancelled.
    Race,
    /// Every path must succeed; the first failure cancels the rest. Outputs are merged in path order.
    All,
    /// Every path runs to its end; successes and failures are merged in path order.
    Settle,
}

/// Whether a settled path succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleStatus {
    /// The path returned a value.
    Fulfilled,
    /// The path failed.
    Rejected,
}

/// One path's outcome, as `Settle` mode's merge sees it.
#[derive(Debug, Clone)]
pub struct SettleResult<O> {
    /// The path's step id.
    pub step_id: String,
    /// Its outcome: `Ok(value)` (fulfilled) or `Err(error)` (rejected).
    pub result: Result<O, NoeticError>,
}

impl<O> SettleResult<O> {
    /// Fulfilled or rejected.
    pub fn status(&self) -> SettleStatus {
        if self.result.is_ok() { SettleStatus::Fulfilled } else { SettleStatus::Rejected }
    }

    /// The value, when fulfilled.
    pub fn value(&self) -> Option<&O> {
        self.result.as_ref().ok()
    }

    /// The error, when rejected.
    pub fn error(&self) -> Option<&NoeticError> {
        self.result.as_ref().err()
    }
}

pub(crate) enum Merge<O> {
    Race,
    All(MergeFn<O>),
    Settle(SettleMergeFn<O>),
}

/// A `fork` step.
pub struct StepFork<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) paths: PathList<I, O>,
    pub(crate) merge: Merge<O>,
    pub(crate) concurrency: Option<usize>,
    pub(crate) clone_input: fn(&I) -> I,
    /// Keeps a successful path's value inside a `ForkPartial` error.
    pub(crate) wrap_value: fn(O) -> PathValue,
}

impl<I, O> StepFork<I, O> {
    /// The mode.
    pub fn mode(&self) -> ForkMode {
        match self.merge {
            Merge::Race => ForkMode::Race,
            Merge::All(_) => ForkMode::All,
            Merge::Settle(_) => ForkMode::Settle,
        }
    }

    /// The concurrency limit (`None` = all paths at once).
    pub fn concurrency(&self) -> Option<usize> {
        self.concurrency
    }
}

/// Builds a `fork` step.
pub struct ForkBuilder<I, O> {
    id: String,
    mode: ForkMode,
    paths: Option<PathList<I, O>>,
    merge: Option<MergeFn<O>>,
    merge_settled: Option<SettleMergeFn<O>>,
    concurrency: Option<usize>,
}

impl<I: Clone + Send + Sync + 'static, O: Send + Sync + 'static> Step<I, O> {
    /// A fork in the given mode. Set the paths with [`ForkBuilder::paths`] (or [`ForkBuilder::paths_fn`]);
    /// `All` needs [`ForkBuilder::merge`], `Settle` needs [`ForkBuilder::merge_settled`].
    pub fn fork(id: impl Into<String>, mode: ForkMode) -> ForkBuilder<I, O> {
        ForkBuilder { id: id.into(), mode, paths: None, merge: None, merge_settled: None, concurrency: None }
    }
}

impl<I: Clone + Send + Sync + 'static, O: Send + Sync + 'static> ForkBuilder<I, O> {
    /// A fixed list of paths.
    pub fn paths(mut self, paths: impl IntoIterator<Item = Step<I, O>>) -> Self {
        self.paths = Some(PathList::Fixed(paths.into_iter().collect()));
        self
    }

    /// A path factory, called once per execution with the input.
    pub fn paths_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&I, &Context) -> Vec<Step<I, O>> + Send + Sync + 'static,
    {
        self.paths = Some(PathList::Made(Arc::new(f)));
        self
    }

    /// `All` mode's merge: outputs in path order.
    pub fn merge<F>(mut self, f: F) -> Self
    where
        F: Fn(Vec<O>, &Context) -> Result<O, NoeticError> + Send + Sync + 'static,
    {
        self.merge = Some(Arc::new(f));
        self
    }

    /// `Settle` mode's merge: outcomes in path order.
    pub fn merge_settled<F>(mut self, f: F) -> Self
    where
        F: Fn(Vec<SettleResult<O>>, &Context) -> Result<O, NoeticError> + Send + Sync + 'static,
    {
        self.merge_settled = Some(Arc::new(f));
        self
    }

    /// At most `n` paths run at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "fork")?;
        let paths = self.paths.ok_or_else(|| {
            ConfigError::new(
                ConfigCode::MissingPaths,
                format!("fork step '{id}' has no paths"),
                "call .paths([...]) or .paths_fn(|input, ctx| ...)",
            )
        })?;
        if self.concurrency == Some(0) {
            return Err(ConfigError::new(
                ConfigCode::InvalidConcurrency,
                format!("fork step '{id}' has concurrency 0, so no path could ever start"),
                "set concurrency to at least 1, or leave it unset to run all paths at once",
            ));
        }
        let missing_merge = |what: &str| {
            ConfigError::new(
                ConfigCode::MissingMergeFunction,
                format!("fork step '{id}' in {what} mode has no merge function"),
                format!(
                    "call .{}(...) to combine the path results",
                    if what == "settle" { "merge_settled" } else { "merge" }
                ),
            )
        };
        let merge = match self.mode {
            ForkMode::Race => Merge::Race,
            ForkMode::All => Merge::All(self.merge.ok_or_else(|| missing_merge("all"))?),
            ForkMode::Settle => Merge::Settle(self.merge_settled.ok_or_else(|| missing_merge("settle"))?),
        };
        Ok(Step::Fork(Arc::new(StepFork {
            id,
            paths,
            merge,
            concurrency: self.concurrency,
            clone_input: I::clone,
            wrap_value: PathValue::new::<O>,
        })))
    }
}
