//! `/model NAME`: the chat's model id, switchable while the chat runs. The provider stays; requests for the
//! chat's model (not an LLM rule's own judge model) ask for the chosen id from the next model call on.

use std::sync::{Arc, PoisonError, RwLock};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use noetic::NoeticError;
use noetic::model::{Capabilities, Model, ModelRequest, ModelResponse, StreamDelta};

/// The model id the chat asks for now, shared by the chat and its [`ChosenModel`].
#[derive(Clone)]
pub struct ModelChoice {
    /// The id the agent was built with (what its `llm` step asks for).
    configured: Arc<str>,
    chosen: Arc<RwLock<String>>,
}

impl ModelChoice {
    /// Starts on `configured`.
    pub fn new(configured: &str) -> Self {
        ModelChoice { configured: configured.into(), chosen: Arc::new(RwLock::new(configured.to_owned())) }
    }

    /// The id asked for now.
    pub fn current(&self) -> String {
        self.chosen.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Asks for `id` from the next model call on.
    pub fn choose(&self, id: &str) {
        id.clone_into(&mut self.chosen.write().unwrap_or_else(PoisonError::into_inner));
    }

    /// `inner`, asking for the chosen id instead of the configured one.
    pub fn wrap(&self, inner: Arc<dyn Model>) -> Arc<dyn Model> {
        Arc::new(ChosenModel { inner, choice: self.clone() })
    }

    /// The id a request for `model` is sent as.
    fn id_for(&self, model: &str) -> String {
        if model == &*self.configured { self.current() } else { model.to_owned() }
    }

    fn rewrite(&self, mut request: ModelRequest) -> ModelRequest {
        if *request.model == *self.configured {
            request.model = self.current().into();
        }
        request
    }
}

/// A model client that asks for the [`ModelChoice`]'s id.
struct ChosenModel {
    inner: Arc<dyn Model>,
    choice: ModelChoice,
}

impl Model for ChosenModel {
    fn call(&self, request: ModelRequest) -> BoxFuture<'static, Result<ModelResponse, NoeticError>> {
        self.inner.call(self.choice.rewrite(request))
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> Option<&str> {
        self.inner.provider_name()
    }

    fn context_window(&self, model: &str) -> Option<noetic::window::ContextWindow> {
        self.inner.context_window(&self.choice.id_for(model))
    }

    fn token_counter(&self, model: &str) -> Option<Arc<dyn noetic::window::TokenCounter>> {
        self.inner.token_counter(&self.choice.id_for(model))
    }

    fn streams_natively(&self) -> bool {
        self.inner.streams_natively()
    }

    fn stream(&self, request: ModelRequest) -> BoxStream<'static, Result<StreamDelta, NoeticError>> {
        self.inner.stream(self.choice.rewrite(request))
    }
}
