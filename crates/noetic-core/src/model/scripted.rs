//! [`ScriptedModel`]: a model that answers from a script, for tests, demos and benchmarks.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{Notify, oneshot};

use super::{Model, ModelRequest, ModelResponse};
use crate::error::NoeticError;
use crate::sync::lock;

type Responder = Arc<dyn Fn(&ModelRequest) -> Result<ModelResponse, NoeticError> + Send + Sync>;

enum Reply {
    Ready(Result<ModelResponse, NoeticError>),
    Held(Result<ModelResponse, NoeticError>, oneshot::Receiver<()>, Arc<Notify>),
}

struct State {
    script: VecDeque<Reply>,
    requests: Vec<ModelRequest>,
    calls: usize,
    scripted: usize,
}

/// A model that returns scripted responses in order, records every request, and can hold a call until
/// released. When the script runs out it answers with the responder if one is set, else with an error.
/// A scripted rate limit or context-length error with an empty `step_id` names the request's step, as a provider's
/// would.
///
/// ```
/// use noetic::model::{ModelResponse, ScriptedModel};
/// use serde_json::json;
///
/// let model = ScriptedModel::new([
///     ModelResponse::tool_calls([("call-1", "search", json!({"q": "rust"}))]),
///     ModelResponse::text("Rust is a systems language."),
/// ]);
/// assert_eq!(model.remaining(), 2);
/// ```
#[derive(Clone)]
pub struct ScriptedModel {
    state: Arc<Mutex<State>>,
    responder: Option<Responder>,
    record: bool,
    capabilities: super::Capabilities,
    window: Option<super::ContextWindow>,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel").field("remaining", &self.remaining()).finish_non_exhaustive()
    }
}

/// Releases a held call of a [`ScriptedModel`].
#[derive(Debug)]
pub struct HeldCall {
    release: Option<oneshot::Sender<()>>,
    entered: Arc<Notify>,
}

impl HeldCall {
    /// Waits until the held call has been made (the model is blocked in it).
    pub async fn entered(&self) {
        self.entered.notified().await
    }

    /// Lets the held call return its response.
    pub fn release(mut self) {
        if let Some(tx) = self.release.take() {
            let _ = tx.send(());
        }
    }
}

impl ScriptedModel {
    /// A model answering with `responses`, in order.
    pub fn new(responses: impl IntoIterator<Item = ModelResponse>) -> Self {
        let script: VecDeque<Reply> = responses.into_iter().map(|r| Reply::Ready(Ok(r))).collect();
        let scripted = script.len();
        ScriptedModel {
            state: Arc::new(Mutex::new(State { script, requests: Vec::new(), calls: 0, scripted })),
            responder: None,
            record: true,
            capabilities: super::Capabilities::default(),
            window: None,
        }
    }

    /// A model that answers every call with `f(request)`.
    pub fn responder<F>(f: F) -> Self
    where
        F: Fn(&ModelRequest) -> Result<ModelResponse, NoeticError> + Send + Sync + 'static,
    {
        ScriptedModel::new([]).with_responder(f)
    }

    /// Answers with `f(request)` once the script is used up.
    pub fn with_responder<F>(mut self, f: F) -> Self
    where
        F: Fn(&ModelRequest) -> Result<ModelResponse, NoeticError> + Send + Sync + 'static,
    {
        self.responder = Some(Arc::new(f));
        self
    }

    /// Stops recording requests (for long benchmarks, where recording would keep every history alive).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    /// Claims the given [`Capabilities`](super::Capabilities), to test callers that adapt to the backend.
    pub fn with_capabilities(mut self, capabilities: super::Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Claims a context window (a scripted model has none unless given one): requests are then fitted into it,
    /// as for a provider's model.
    pub fn with_context_window(mut self, window: super::ContextWindow) -> Self {
        self.window = Some(window);
        self
    }

    /// Appends a response to the script.
    pub fn push(&self, response: ModelResponse) {
        let mut st = lock(&self.state);
        st.script.push_back(Reply::Ready(Ok(response)));
        st.scripted += 1;
    }

    /// Appends an error to the script.
    pub fn push_error(&self, error: NoeticError) {
        let mut st = lock(&self.state);
        st.script.push_back(Reply::Ready(Err(error)));
        st.scripted += 1;
    }

    /// Appends a response that is returned only after [`HeldCall::release`].
    pub fn push_held(&self, response: ModelResponse) -> HeldCall {
        let (tx, rx) = oneshot::channel();
        let entered = Arc::new(Notify::new());
        let mut st = lock(&self.state);
        st.script.push_back(Reply::Held(Ok(response), rx, entered.clone()));
        st.scripted += 1;
        HeldCall { release: Some(tx), entered }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.state).requests.clone()
    }

    /// Number of calls made.
    pub fn calls(&self) -> usize {
        lock(&self.state).calls
    }

    /// Scripted replies not yet used.
    pub fn remaining(&self) -> usize {
        lock(&self.state).script.len()
    }
}

impl Model for ScriptedModel {
    fn context_window(&self, _model: &str) -> Option<super::ContextWindow> {
        self.window
    }

    fn capabilities(&self) -> super::Capabilities {
        self.capabilities
    }

    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        let step = request.step.clone();
        let reply = {
            let mut st = lock(&self.state);
            st.calls += 1;
            let reply = st.script.pop_front();
            let scripted = st.scripted;
            let reply = match (reply, &self.responder) {
                (Some(r), _) => r,
                (None, Some(f)) => Reply::Ready(f(&request)),
                (None, None) => Reply::Ready(Err(NoeticError::ModelFailed {
                    message: format!(
                        "the scripted model has no response left for call {} ({scripted} were scripted); script more \
                         responses or set a responder",
                        st.calls
                    ),
                    status: None,
                    raw: None,
                    retryable: false,
                    source: None,
                })),
            };
            if self.record {
                st.requests.push(request);
            }
            reply
        };
        Box::pin(async move {
            let result = match reply {
                Reply::Ready(r) => r,
                Reply::Held(r, release, entered) => {
                    entered.notify_one();
                    let _ = release.await;
                    r
                }
            };
            result.map_err(|e| naming_step(e, step.as_deref()))
        })
    }
}

/// A scripted error as the request's step would have got it from a provider: the script cannot know the step.
fn naming_step(error: NoeticError, step: Option<&str>) -> NoeticError {
    let Some(step) = step else { return error };
    match error {
        NoeticError::ModelRateLimit { step_id, retry_after_ms, message } if step_id.is_empty() => {
            NoeticError::ModelRateLimit { step_id: step.to_owned(), retry_after_ms, message }
        }
        NoeticError::ContextLengthExceeded { step_id, message, requested, limit } if step_id.is_empty() => {
            NoeticError::ContextLengthExceeded { step_id: step.to_owned(), message, requested, limit }
        }
        other => other,
    }
}
