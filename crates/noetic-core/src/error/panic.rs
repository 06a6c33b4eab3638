//! Panic guards: a panic in user code (a step, a tool, a layer) becomes a [`NoeticError`] naming where it happened.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use super::NoeticError;

/// The text of a panic's payload (`&str` or `String`; anything else is named as such).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Runs user code that must not take the runtime down: a panic becomes an error naming the step and the callback.
pub fn guard<T>(step_id: &str, what: &str, f: impl FnOnce() -> T) -> Result<T, NoeticError> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| panicked(step_id, what, &*p))
}

/// Awaits user code, turning a panic into an error.
pub async fn guard_async<T>(
    step_id: &str,
    what: &str,
    fut: impl Future<Output = Result<T, NoeticError>>,
) -> Result<T, NoeticError> {
    match AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(p) => Err(panicked(step_id, what, &*p)),
    }
}

/// The error a panic of user code becomes: which code, of which step, and the panic message.
pub fn panicked(step_id: &str, what: &str, payload: &(dyn Any + Send)) -> NoeticError {
    NoeticError::other(format!(
        "the {what} of step '{step_id}' panicked: {}; fix the code so it returns an error instead",
        panic_message(payload)
    ))
}
