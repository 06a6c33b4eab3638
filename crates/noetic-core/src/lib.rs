//! # noetic-core — what every part of Noetic shares
//!
//! Conversation items and the [`Model`](model::Model) trait, the two error types, retry policy and model
//! parameters, budgets, canonical JSON digests, times as text and the span helpers. A provider (`noetic-openai`,
//! `noetic-anthropic`) depends on this crate alone; the step algebra (`noetic-steps`), the steering layer
//! (`noetic-steering`) and the runtime (`noetic-runtime`) build on it. Programs usually add the `noetic` facade,
//! which re-exports all of them under one name.
//!
//! | module | what it holds |
//! |---|---|
//! | [`model`] | items, requests and responses, the `Model` trait, params, retry policy, the scripted model, wrappers |
//! | [`error`] | `NoeticError` (while steps run) and `ConfigError` (built wrongly, with a stable code) |
//! | [`budget`] | limits, spending, the turn's meter |
//! | [`digest`] | canonical JSON and its SHA-256 |
//! | [`handoff`] | waiting for another thread's answer without putting a tokio worker to sleep for it (the stores' writers) |
//! | [`json`] | JSON read by hand where serde's machinery costs more than the text (string escapes, tool arguments) |
//! | [`time`] | RFC 3339 times and their serde helpers |
//! | [`trace`] | the `tracing` spans the runtime opens |
//! | `decision` | the steering decision type (its public home is `noetic::steering`) |

pub mod budget;
#[doc(hidden)]
pub mod decision;
pub mod digest;
pub mod error;
pub mod handoff;
pub mod json;
pub mod model;
#[doc(hidden)]
pub mod sync;
pub mod time;
pub mod trace;

pub use error::{ConfigCode, ConfigError, NoeticError};
