//! # noetic-runtime — runtime, sessions, turns and the session log
//!
//! A [`Runtime`] holds a model, tools and memory layers; each [`Session`] is one conversation that runs one
//! [`Turn`] at a time, steered through its queue and kept in one ordered session log (the source of truth: the
//! conversation, queue, ledger, approvals and events are projections of it), behind an async store seam. It builds
//! on `noetic-core`, `noetic-steps` and `noetic-steering`. Programs usually add the `noetic` facade and write
//! `noetic::agent::…` or `noetic::prelude::*`.

// The lower crates' modules under the names this crate's modules have always used for them.
#[cfg(test)]
use noetic_core::decision;
use noetic_core::{budget, error, model, sync, trace};
use noetic_steering::steering;
use noetic_steps::{context, layer, run, scope, step, tool, turn, window};

pub mod agent;

pub use agent::*;
