//! What a request asks of the model besides the conversation: sampling parameters and tool choice.

use serde::{Deserialize, Serialize};

/// Sampling parameters forwarded to the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelParams {
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    pub top_p: Option<f32>,
    /// Maximum response tokens.
    pub max_tokens: Option<u32>,
    /// Sequences that end generation.
    #[serde(default)]
    pub stop_sequences: Vec<String>,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Named(String),
}
