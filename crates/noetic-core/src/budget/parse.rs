//! Reading limits from configuration text and JSON, and the errors that say what is wrong with them.

use std::time::Duration;

use serde_json::Value;

use super::{Limit, Limits, Scope};

/// Why limits could not be read or set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The name is no limit.
    #[error(
        "'{name}' is not a budget limit; use one of tokens_in, tokens_out, cost, tool_calls, model_calls, wall_time"
    )]
    UnknownLimit {
        /// The name given.
        name: String,
    },
    /// A limit of zero, a negative one, or one that is not a number.
    #[error(
        "the budget limit {limit} = {value} must be a positive number (a limit of 0 would stop everything; leave the \
         limit out for none)"
    )]
    NotPositive {
        /// The limit (with its scope once known: `turn.tool_calls`).
        limit: String,
        /// The value given.
        value: String,
    },
    /// A budget part other than `session` and `turn`.
    #[error(
        "'{name}' is not a part of a budget; put limits under \"session\" (the whole session) or \"turn\" (each turn)"
    )]
    UnknownScope {
        /// The name given.
        name: String,
    },
    /// Limits that are not given as a table of names and values.
    #[error("the {scope} budget must be an object of limits, such as {{\"tool_calls\": 50, \"wall_time\": \"10m\"}}")]
    NotATable {
        /// `session` or `turn`.
        scope: String,
    },
    /// A wall time that does not read as a duration.
    #[error(
        "the budget limit {limit} = {value} is not a duration; write a positive number of seconds (600) or a number \
         with a unit: \"500ms\", \"90s\", \"10m\", \"2h\""
    )]
    BadDuration {
        /// The limit.
        limit: String,
        /// The value given.
        value: String,
    },
}

impl BudgetError {
    /// The same error, its limit named with its scope (`session.cost`).
    pub(crate) fn scoped(self, scope: Scope) -> BudgetError {
        let name = |limit: String| format!("{}.{limit}", scope.name());
        match self {
            BudgetError::NotPositive { limit, value } => BudgetError::NotPositive { limit: name(limit), value },
            BudgetError::BadDuration { limit, value } => BudgetError::BadDuration { limit: name(limit), value },
            BudgetError::UnknownLimit { name: limit } => BudgetError::UnknownLimit { name: name(limit) },
            other => other,
        }
    }
}

/// Reads a duration: a number of seconds (`600`, `2.5`) or a number with a unit (`500ms`, `90s`, `10m`, `2h`).
/// `None` when it is neither, or not positive.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    // Beyond a year is a mistake, not a budget.
    (seconds.is_finite() && seconds > 0.0 && seconds <= 366.0 * 86_400.0).then(|| Duration::from_secs_f64(seconds))
}

/// A duration as [`parse_duration`] reads it back, in the largest unit that divides it.
pub(crate) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0 => "0s".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn not_positive(limit: Limit, value: &str) -> BudgetError {
    BudgetError::NotPositive { limit: limit.name().to_owned(), value: value.to_owned() }
}

/// Sets `limit` from its text.
fn set(limits: &mut Limits, limit: Limit, text: &str) -> Result<(), BudgetError> {
    let count = || match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(not_positive(limit, text)),
    };
    match limit {
        Limit::TokensIn => limits.tokens_in = Some(count()?),
        Limit::TokensOut => limits.tokens_out = Some(count()?),
        Limit::ToolCalls => limits.tool_calls = Some(count()?),
        Limit::ModelCalls => limits.model_calls = Some(count()?),
        Limit::Cost => match text.trim().trim_start_matches('$').parse::<f64>() {
            Ok(d) if d.is_finite() && d > 0.0 => limits.cost = Some(d),
            _ => return Err(not_positive(limit, text)),
        },
        Limit::WallTime => {
            if text.trim().starts_with('-') || text.trim().parse::<f64>().is_ok_and(|n| n <= 0.0) {
                return Err(not_positive(limit, text));
            }
            limits.wall_time =
                Some(parse_duration(text).ok_or_else(|| BudgetError::BadDuration {
                    limit: limit.name().to_owned(),
                    value: text.to_owned(),
                })?);
        }
    }
    Ok(())
}

/// Limits from `name = text` pairs.
pub(super) fn limits_from_text<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> Result<Limits, BudgetError> {
    let mut limits = Limits::default();
    for (name, text) in pairs {
        let limit = Limit::named(name).ok_or_else(|| BudgetError::UnknownLimit { name: name.to_owned() })?;
        set(&mut limits, limit, &text)?;
    }
    Ok(limits)
}

/// Limits from a JSON object's members (numbers, or strings for a wall time).
pub(super) fn limits_from_json<'a>(
    pairs: impl IntoIterator<Item = (&'a String, &'a Value)>,
) -> Result<Limits, BudgetError> {
    limits_from_text(pairs.into_iter().map(|(name, value)| {
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        (name.as_str(), text)
    }))
}

/// A budget from JSON: `{"session": {...}, "turn": {...}}`, each part an object of limits.
pub(super) fn budget_from_json(value: &Value) -> Result<super::Budget, BudgetError> {
    let Value::Object(parts) = value else { return Err(BudgetError::NotATable { scope: "whole".to_owned() }) };
    let mut budget = super::Budget::default();
    for (name, limits) in parts {
        let scope = match name.as_str() {
            "session" => Scope::Session,
            "turn" => Scope::Turn,
            _ => return Err(BudgetError::UnknownScope { name: name.clone() }),
        };
        let Value::Object(limits) = limits else { return Err(BudgetError::NotATable { scope: name.clone() }) };
        let limits = limits_from_json(limits.iter()).map_err(|e| e.scoped(scope))?;
        match scope {
            Scope::Session => budget.session = limits,
            Scope::Turn => budget.turn = limits,
        }
    }
    Ok(budget)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn durations_read_as_seconds_or_with_a_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("600"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "ten minutes", "10 parsecs", "0", "-5", "1e400", "NaN"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(duration_text(Duration::from_secs(600)), "10m");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn a_zero_negative_unknown_or_badly_timed_limit_is_an_error_naming_it() {
        let err = limits_from_text([("tool_calls", "0".to_owned())]).unwrap_err();
        assert!(err.to_string().contains("tool_calls = 0 must be a positive number"), "{err}");
        let err = limits_from_text([("cost", "-1".to_owned())]).unwrap_err();
        assert!(matches!(err, BudgetError::NotPositive { .. }), "{err}");
        let err = limits_from_text([("tokens", "5".to_owned())]).unwrap_err();
        assert!(err.to_string().contains("'tokens' is not a budget limit; use one of tokens_in"), "{err}");
        let err = limits_from_text([("wall_time", "soon".to_owned())]).unwrap_err();
        assert!(err.to_string().contains("wall_time = soon is not a duration"), "{err}");
        let err = limits_from_text([("wall_time", "-3m".to_owned())]).unwrap_err();
        assert!(matches!(err, BudgetError::NotPositive { .. }), "{err}");
        let limits = limits_from_text([("wall_time", "10m".to_owned()), ("cost", "0.5".to_owned())]).unwrap();
        assert_eq!(limits.wall_time, Some(Duration::from_secs(600)));
        let json = serde_json::to_string(&limits).unwrap();
        assert_eq!(json, r#"{"cost":0.5,"wall_time":"10m"}"#);
        assert_eq!(serde_json::from_str::<Limits>(&json).unwrap(), limits);
    }
}
