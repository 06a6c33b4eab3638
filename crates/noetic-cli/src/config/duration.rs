//! Durations in configuration: every number of seconds the command reads — flags, noetic.toml and its
//! environment overrides, workflow files, `[[mcp_server]]` tables — is checked here against the range its key
//! accepts, so that no value (NaN, infinite, negative, zero, 1e20) reaches `Duration` unchecked and a bad one is an
//! error naming the key, the value and the range.

use std::time::Duration;

/// Seconds in a day: the longest time a request, a tool call or an approval may be given.
pub const ONE_DAY: f64 = 86_400.0;

/// The seconds a key accepts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// The least value; see `min_allowed`.
    pub min: f64,
    /// True when `min` itself is allowed (a pace of 0 means "no pauses"); false for "more than `min`".
    pub min_allowed: bool,
    /// The most.
    pub max: f64,
    /// A value to show in the error, e.g. `120`.
    pub example: &'static str,
}

/// Timeouts: more than 0, at most a day.
pub const TIMEOUT: Range = Range { min: 0.0, min_allowed: false, max: ONE_DAY, example: "120" };

impl Range {
    /// The range in words: `more than 0 and at most 86400 (a day)`, `from 0 to 60`.
    pub fn describe(&self) -> String {
        let max = if self.max == ONE_DAY { format!("{ONE_DAY} (a day)") } else { self.max.to_string() };
        if self.min_allowed {
            format!("from {} to {max}", self.min)
        } else {
            format!("more than {} and at most {max}", self.min)
        }
    }
}

/// Reads `text` (seconds, e.g. `120` or `2.5`) as the value of `key`.
pub fn parse(key: &str, text: &str, range: Range) -> Result<Duration, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| invalid(key, text, "it is not a number", range))?;
    check(key, text, seconds, range)
}

/// Checks `seconds` (written `text`) as the value of `key`.
fn check(key: &str, text: &str, seconds: f64, range: Range) -> Result<Duration, String> {
    let why = if seconds.is_nan() {
        "it is not a number".to_owned()
    } else if seconds < range.min || (seconds == range.min && !range.min_allowed) {
        format!("it must be {} {}", if range.min_allowed { "at least" } else { "more than" }, range.min)
    } else if seconds > range.max {
        format!("it is more than {}, the most it may be", range.max)
    } else {
        // In range, so finite and far below what `Duration` holds.
        return Duration::try_from_secs_f64(seconds).map_err(|e| invalid(key, text, &e.to_string(), range));
    };
    Err(invalid(key, text, &why, range))
}

fn invalid(key: &str, text: &str, why: &str, range: Range) -> String {
    format!(
        "'{}' is not a valid {key}: {why}; give a number of seconds {}, e.g. {}",
        text.trim(),
        range.describe(),
        range.example
    )
}

/// A timeout given in seconds (`120`, `2.5`): more than 0, at most a day ([`TIMEOUT`]).
/// Anything else is an error naming the value, so a typo never turns the limit off.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    parse("timeout", text, TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_in_range_become_durations() {
        assert_eq!(parse("timeout", "120", TIMEOUT), Ok(Duration::from_secs(120)));
        assert_eq!(parse("timeout", " 2.5 ", TIMEOUT), Ok(Duration::from_millis(2500)));
        assert_eq!(parse("timeout", "86400", TIMEOUT), Ok(Duration::from_secs(86_400)));
        let pace = Range { min: 0.0, min_allowed: true, max: 60.0, example: "2" };
        assert_eq!(parse("pace", "0", pace), Ok(Duration::ZERO));
    }

    #[test]
    fn nan_infinite_negative_zero_and_huge_seconds_are_errors_naming_the_key_the_value_and_the_range() {
        for (bad, why) in [
            ("0", "it must be more than 0"),
            ("0.0", "it must be more than 0"),
            ("-5", "it must be more than 0"),
            ("-inf", "it must be more than 0"),
            ("NaN", "it is not a number"),
            ("nan", "it is not a number"),
            ("inf", "it is more than 86400"),
            ("1e20", "it is more than 86400"),
            ("1e300", "it is more than 86400"),
            ("86400.5", "it is more than 86400"),
            ("abc", "it is not a number"),
            ("", "it is not a number"),
            ("10s", "it is not a number"),
        ] {
            let error = parse("[[mcp_server]] 'files' timeout", bad, TIMEOUT).err().unwrap_or_default();
            let start = format!("'{bad}' is not a valid [[mcp_server]] 'files' timeout: {why}");
            assert!(error.starts_with(&start), "{bad}: {error}");
            assert!(
                error.ends_with("give a number of seconds more than 0 and at most 86400 (a day), e.g. 120"),
                "{error}"
            );
        }
        let lease = Range { min: 0.3, min_allowed: true, max: 3600.0, example: "15" };
        let error = parse("--lease", "0.2", lease).err().unwrap_or_default();
        assert_eq!(
            error,
            "'0.2' is not a valid --lease: it must be at least 0.3; give a number of seconds from 0.3 to 3600, e.g. 15"
        );
    }

    #[test]
    fn a_timeout_is_a_positive_number_of_seconds_and_a_bad_one_is_an_error_naming_it() {
        assert_eq!(parse_timeout("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout(" 2.5 "), Ok(Duration::from_millis(2500)));
        for (bad, why) in [
            ("0", "more than 0"),
            ("-5", "more than 0"),
            ("0.0", "more than 0"),
            ("abc", "not a number"),
            ("", "not a number"),
            ("10s", "not a number"),
            ("NaN", "not a number"),
            ("inf", "more than 86400"),
            ("1e30", "more than 86400"),
        ] {
            let error = parse_timeout(bad).err().unwrap_or_default();
            assert!(error.starts_with(&format!("'{bad}' is not a valid timeout: ")) && error.contains(why), "{error}");
        }
    }
}
