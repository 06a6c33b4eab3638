//! Helpers shared by the steering test files.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use futures::future::BoxFuture;
use noetic::prelude::*;
use noetic::steering::{ANSWER_FORMAT, SteeringLayer, SteeringState};

/// One model for a context that sends judge prompts to `judge` and everything else to `agent`, so a test can
/// script (and hold) the judge's verdicts apart from the agent's answers.
pub struct Router {
    /// Answers the agent's requests.
    pub agent: ScriptedModel,
    /// Answers the judges' requests.
    pub judge: ScriptedModel,
}

impl Router {
    /// A router over two fresh scripted models.
    pub fn new(agent: ScriptedModel, judge: ScriptedModel) -> Arc<Self> {
        Arc::new(Router { agent, judge })
    }
}

/// True for a judge's request (its prompt ends with the answer-format line).
pub fn is_judge(request: &ModelRequest) -> bool {
    request.history.iter().any(|i| i.text().is_some_and(|t| t.contains(ANSWER_FORMAT)))
}

impl Model for Router {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        if is_judge(&request) { self.judge.call(request) } else { self.agent.call(request) }
    }
}

/// The steering feedback block the model is shown for these `(rule, guidance)` lines.
pub fn feedback_block(lines: &[(&str, &str)]) -> Item {
    let body: Vec<String> = lines.iter().map(|(rule, text)| format!("[{rule}] {text}")).collect();
    Item::developer(format!("<steering_feedback>\n{}\n</steering_feedback>", body.join("\n")))
}

/// Yields to other tasks until `done` holds (at most 10 000 times, then fails: the awaited task never ran).
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("gave up waiting until {what}");
}

/// The layer's state for the context's scope (empty when there is none).
pub fn state(layer: &SteeringLayer, ctx: &Context) -> SteeringState {
    layer.state_for(ctx).unwrap_or_default()
}
