//! # noetic-steering — the steering layer
//!
//! Rules checked before every tool call and after every model response (programmatic and LLM-judged: ALLOW /
//! DENY / GUIDE), verdict parsing, the judge, async feedback, shadow rules, escalation, the hash-chained ledger and
//! replay of recorded decisions through new rules. It is a memory layer of `noetic-steps`; the runtime
//! (`noetic-runtime`) records its decisions in the session log. Programs usually add the `noetic` facade and write
//! `noetic::steering::…`.

// The lower crates' modules under the names this crate's modules have always used for them.
use noetic_core::{budget, decision, digest, error, model, sync, time, trace};
use noetic_steps::{context, exec, layer, step};

pub mod steering;

pub use steering::*;
