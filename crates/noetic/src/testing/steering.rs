//! Helpers for tests of steering: a model that answers judges apart from the agent, and a layer's state.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::context::Context;
use crate::error::NoeticError;
use crate::model::{Model, ModelRequest, ModelResponse, ScriptedModel};
use crate::steering::{ANSWER_FORMAT, SteeringLayer, SteeringState};

/// One model for a context that sends steering judges' requests to `judge` and everything else to `agent`, so a
/// test can script (and hold) the judges' verdicts apart from the agent's answers.
#[derive(Debug, Clone)]
pub struct JudgeRouter {
    /// Answers the agent's requests.
    pub agent: ScriptedModel,
    /// Answers the judges' requests.
    pub judge: ScriptedModel,
}

impl JudgeRouter {
    /// A router over two scripted models (clones share their scripts and recorded requests).
    pub fn new(agent: ScriptedModel, judge: ScriptedModel) -> Arc<Self> {
        Arc::new(JudgeRouter { agent, judge })
    }
}

impl Model for JudgeRouter {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        if is_judge(&request) { self.judge.call(request) } else { self.agent.call(request) }
    }
}

/// True for a steering judge's request: its prompt carries the judges' answer-format line.
pub fn is_judge(request: &ModelRequest) -> bool {
    request.history.iter().any(|i| i.text().is_some_and(|t| t.contains(ANSWER_FORMAT)))
}

/// `layer`'s steering state for `ctx`'s scope; the empty state when it has none yet.
pub fn steering_state(layer: &SteeringLayer, ctx: &Context) -> SteeringState {
    layer.state_for(ctx).unwrap_or_default()
}
