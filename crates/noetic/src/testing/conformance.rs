//! What the conformance kits share (the session-log stores', the HTTP providers' limits): how a scenario fails.

/// A scenario of a conformance kit that the thing under test failed, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("conformance, scenario '{scenario}': {message}")]
pub struct ConformanceFailure {
    /// The scenario.
    pub scenario: &'static str,
    /// What the thing under test did instead.
    pub message: String,
}

/// A scenario's outcome.
pub(crate) type Checked = Result<(), ConformanceFailure>;

/// The failure of `scenario`, saying what happened.
pub(crate) fn fail(scenario: &'static str, message: impl Into<String>) -> ConformanceFailure {
    ConformanceFailure { scenario, message: message.into() }
}

/// Passes when `ok`; otherwise fails `scenario` with `message`.
pub(crate) fn check(scenario: &'static str, ok: bool, message: impl FnOnce() -> String) -> Checked {
    if ok { Ok(()) } else { Err(fail(scenario, message())) }
}
