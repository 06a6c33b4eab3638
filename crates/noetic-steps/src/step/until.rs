//! Loop termination: [`Until`] predicates over a [`Snapshot`] of the loop, and their combinators.
//!
//! Predicates are synchronous and cheap; they run after every successful iteration. Put slow checks (an LLM
//! judge, a test run) in a body step and let a predicate read its output.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::context::lock;
use crate::model::{StepMeta, Usage};

/// A predicate's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// True to stop the loop.
    pub stop: bool,
    /// Why (informational).
    pub reason: Option<String>,
    /// Feedback for the next iteration, handed to `prepare_next`.
    pub feedback: Option<String>,
}

impl Verdict {
    /// Keep going.
    pub fn keep_going() -> Self {
        Verdict::default()
    }

    /// Stop, with a reason.
    pub fn stop(reason: impl Into<String>) -> Self {
        Verdict { stop: true, reason: Some(reason.into()), feedback: None }
    }
}

/// What a predicate sees after an iteration.
#[derive(Debug)]
pub struct Snapshot<'a, O> {
    /// Successful iterations so far.
    pub step_count: u32,
    /// Token usage of the context so far.
    pub usage: Usage,
    /// Cost of the context so far, in US dollars.
    pub cost: f64,
    /// Time since the loop started.
    pub elapsed: Duration,
    /// The output of the latest iteration.
    pub last_output: &'a O,
    /// The output as text (a `String` output is itself).
    pub last_text: &'a str,
    /// Recent outputs, oldest first, at most `max_history_size`.
    pub history: &'a VecDeque<O>,
    /// The loop's nesting depth.
    pub depth: u32,
    /// What the last `llm` step produced (its tool calls).
    pub last_step_meta: Option<Arc<StepMeta>>,
}

type Pred<O> = Arc<dyn Fn(&Snapshot<'_, O>) -> Verdict + Send + Sync>;

/// A termination predicate. Clones share state (relevant for [`converged`]).
pub struct Until<O>(Pred<O>);

impl<O> Clone for Until<O> {
    fn clone(&self) -> Self {
        Until(self.0.clone())
    }
}

impl<O> fmt::Debug for Until<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Until(..)")
    }
}

impl<O> Until<O> {
    /// Evaluates the predicate.
    pub fn check(&self, snapshot: &Snapshot<'_, O>) -> Verdict {
        (self.0)(snapshot)
    }
}

/// A predicate from a function.
pub fn custom<O, F>(f: F) -> Until<O>
where
    F: Fn(&Snapshot<'_, O>) -> Verdict + Send + Sync + 'static,
{
    Until(Arc::new(f))
}

/// Stops after `n` successful iterations (`0` stops at the first check).
pub fn max_steps<O>(n: u32) -> Until<O> {
    custom(
        move |s| {
            if s.step_count >= n { Verdict::stop(format!("Reached max steps ({n})")) } else { Verdict::keep_going() }
        },
    )
}

/// Stops once the context's cost reaches `usd`.
pub fn max_cost<O>(usd: f64) -> Until<O> {
    custom(
        move |s| {
            if s.cost >= usd { Verdict::stop(format!("Reached max cost (${usd})")) } else { Verdict::keep_going() }
        },
    )
}

/// Stops once the loop has run for `limit`.
pub fn max_duration<O>(limit: Duration) -> Until<O> {
    custom(move |s| {
        if s.elapsed >= limit {
            Verdict::stop(format!("Reached max duration ({}ms)", limit.as_millis()))
        } else {
            Verdict::keep_going()
        }
    })
}

/// Stops when the last `llm` step's response had no tool calls (never before the first iteration).
pub fn no_tool_calls<O>() -> Until<O> {
    custom(|s| {
        let calls = s.last_step_meta.as_ref().map_or(0, |m| m.tool_calls.len());
        if s.step_count >= 1 && calls == 0 {
            Verdict::stop("No tool calls in last response")
        } else {
            Verdict::keep_going()
        }
    })
}

/// Never stops (the loop ends by `max_iterations`, cancellation or error).
pub fn never<O>() -> Until<O> {
    custom(|_| Verdict::keep_going())
}

/// The answer of a [`verified`] check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// True when the output is acceptable.
    pub pass: bool,
    /// What to fix, handed to the next iteration.
    pub feedback: Option<String>,
}

/// Stops when `check(last_output)` passes; its feedback is carried in both cases.
pub fn verified<O, F>(check: F) -> Until<O>
where
    F: Fn(&O) -> Verification + Send + Sync + 'static,
{
    custom(move |s| {
        let v = check(s.last_output);
        Verdict { stop: v.pass, reason: v.pass.then(|| "Verification passed".to_owned()), feedback: v.feedback }
    })
}

/// Stops when the output text equals the previous iteration's (never on the first check).
pub fn converged<O>() -> Until<O> {
    converged_by(1.0, |a, b| if a == b { 1.0 } else { 0.0 })
}

/// Stops when `similarity(previous_text, last_text) >= threshold` (never on the first check).
pub fn converged_by<O, F>(threshold: f64, similarity: F) -> Until<O>
where
    F: Fn(&str, &str) -> f64 + Send + Sync + 'static,
{
    let previous: Mutex<Option<String>> = Mutex::new(None);
    custom(move |s| {
        let prev = lock(&previous).replace(s.last_text.to_owned());
        match prev {
            Some(p) => {
                let sim = similarity(&p, s.last_text);
                if sim >= threshold {
                    Verdict::stop(if threshold >= 1.0 {
                        "Output converged".to_owned()
                    } else {
                        format!("Output converged (similarity: {sim:.3})")
                    })
                } else {
                    Verdict::keep_going()
                }
            }
            None => Verdict::keep_going(),
        }
    })
}

/// Stops when the output text contains `marker` (an empty marker always stops).
pub fn output_contains<O>(marker: impl Into<String>) -> Until<O> {
    let marker = marker.into();
    custom(move |s| {
        if s.last_text.contains(&marker) {
            Verdict::stop(format!("Output contains marker: {marker}"))
        } else {
            Verdict::keep_going()
        }
    })
}

/// Stops when the output text equals `sentinel`.
pub fn output_equals<O>(sentinel: impl Into<String>) -> Until<O> {
    let sentinel = sentinel.into();
    custom(move |s| {
        if s.last_text == sentinel {
            Verdict::stop(format!("Output matched sentinel: {sentinel}"))
        } else {
            Verdict::keep_going()
        }
    })
}

/// Stops at the first predicate that stops (later ones are not evaluated), returning its verdict.
/// With no predicates, never stops.
pub fn any<O: 'static>(preds: impl IntoIterator<Item = Until<O>>) -> Until<O> {
    let preds: Vec<Until<O>> = preds.into_iter().collect();
    custom(move |s| preds.iter().map(|p| p.check(s)).find(|v| v.stop).unwrap_or_default())
}

/// Stops when every predicate stops (evaluation ends at the first that does not); reasons are joined with `; `.
/// With no predicates, stops.
pub fn all<O: 'static>(preds: impl IntoIterator<Item = Until<O>>) -> Until<O> {
    let preds: Vec<Until<O>> = preds.into_iter().collect();
    custom(move |s| {
        let mut reasons = Vec::new();
        for p in &preds {
            let v = p.check(s);
            if !v.stop {
                return Verdict::keep_going();
            }
            reasons.extend(v.reason.filter(|r| !r.is_empty()));
        }
        Verdict::stop(if reasons.is_empty() { "All predicates satisfied".to_owned() } else { reasons.join("; ") })
    })
}

/// The default text of a loop output: a `String` or `&str` is itself; a JSON string is its content, a JSON object
/// with a string `text` field is that field, other JSON is its serialisation; anything else is empty (set
/// `LoopBuilder::text_of` for such outputs).
pub fn default_text<O: 'static>(output: &O) -> String {
    let any = output as &dyn Any;
    if let Some(s) = any.downcast_ref::<String>() {
        return s.clone();
    }
    if let Some(s) = any.downcast_ref::<&'static str>() {
        return (*s).to_owned();
    }
    if let Some(v) = any.downcast_ref::<serde_json::Value>() {
        return match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(m) => match m.get("text") {
                Some(serde_json::Value::String(t)) => t.clone(),
                _ => v.to_string(),
            },
            other => other.to_string(),
        };
    }
    String::new()
}
