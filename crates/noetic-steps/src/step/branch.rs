//! `branch`: choose the next step from the input.

use std::sync::Arc;

use super::{Step, validate_id};
use crate::context::Context;
use crate::error::ConfigError;

pub(crate) type RouteFn<I, O> = Arc<dyn Fn(&I, &Context) -> Option<Step<I, O>> + Send + Sync>;

/// A `branch` step: `route(input, ctx)` returns the step to run with the same input and context, or `None` to
/// pass the input through unchanged (only possible when input and output types are equal).
pub struct StepBranch<I, O> {
    pub(crate) id: Arc<str>,
    pub(crate) route: RouteFn<I, O>,
    /// The identity conversion used when `route` returns `None`; set only by [`Step::branch`], where `I == O`.
    pub(crate) passthrough: Option<fn(I) -> O>,
}

/// Builds a `branch` step.
pub struct BranchBuilder<I, O> {
    id: String,
    route: RouteFn<I, O>,
    passthrough: Option<fn(I) -> O>,
}

fn identity<T>(t: T) -> T {
    t
}

impl<T: Send + 'static> Step<T, T> {
    /// A branch whose route may return `None`, in which case the input is the output.
    pub fn branch<F>(id: impl Into<String>, route: F) -> BranchBuilder<T, T>
    where
        F: Fn(&T, &Context) -> Option<Step<T, T>> + Send + Sync + 'static,
    {
        BranchBuilder { id: id.into(), route: Arc::new(route), passthrough: Some(identity::<T>) }
    }
}

impl<I: Send + 'static, O: Send + 'static> Step<I, O> {
    /// A branch that always routes somewhere (input and output types may differ).
    pub fn route<F>(id: impl Into<String>, route: F) -> BranchBuilder<I, O>
    where
        F: Fn(&I, &Context) -> Step<I, O> + Send + Sync + 'static,
    {
        BranchBuilder { id: id.into(), route: Arc::new(move |i, c| Some(route(i, c))), passthrough: None }
    }
}

impl<I: Send + 'static, O: Send + 'static> BranchBuilder<I, O> {
    /// Validates and builds the step.
    pub fn build(self) -> Result<Step<I, O>, ConfigError> {
        let id = validate_id(&self.id, "branch")?;
        Ok(Step::Branch(Arc::new(StepBranch { id, route: self.route, passthrough: self.passthrough })))
    }
}
