//! The steering layer (seed 1): rules checked before every tool call and after every model response.

//!
//! ```
//! use noetic::layer::Hook;
//! use noetic::steering::{LlmEval, SteeringConfig, SteeringDecision, SteeringRule, steering};
//!
//! let layer = steering(SteeringConfig::new([
//!     SteeringRule::predicate("no-rm", [Hook::BeforeToolCall], |p| match p.tool_call() {
//!         Some(c) if c.name == "rm" => SteeringDecision::deny("Never delete files."),
//!         _ => SteeringDecision::allow(),
//!     }),
//!     SteeringRule::llm("polite", [Hook::AfterModelCall], LlmEval::sync("Is the answer polite?")),
//! ]))
//! .unwrap();
//! # let _ = layer;
//! ```

pub mod chain;
mod escalation;
mod feedback;
mod gate;
mod index;
mod judge;
mod layer;
pub mod ledger;
mod rejudge;
pub mod replay;
mod rules;
mod shadow;
mod verdict;
pub mod verify;

pub use feedback::{Feedback, MAX_CARRIED_PER_THREAD, MAX_CARRIED_THREADS};
pub use judge::{
    ANSWER_FORMAT, JUDGE_MAX_TOKENS, VERDICT_GRAMMAR, prompt as judge_prompt, read_verdict, request as judge_request,
    summary as judge_summary, verdict_schema,
};
pub use layer::{STEERING_LAYER_ID, SteeringLayer, SteeringState, steering};
pub use ledger::{Evaluator, FailureCause, JudgeVerdict, LedgerEntry, LedgerKind, RuleFailure, Shadow};
pub use rejudge::rejudge;
pub use replay::replay;
pub use rules::{
    DEFAULT_JUDGE_MODEL, FailurePolicy, HookParams, LlmEval, LlmMode, Predicate, RuleMode, SteeringConfig, SteeringRule,
};
pub use verdict::parse_verdict;

pub use crate::decision::{SteeringAction, SteeringDecision};
