//! How long a server asks to be left alone (`retry-after-ms`, `Retry-After`), parsed once for every provider and
//! clamped, so a broken or hostile value can neither panic the parser nor hand a caller an absurd wait.

use std::time::{Duration, SystemTime};

/// The longest delay a server is believed: one day. A longer one (`1e300`, `inf`, a date in the year 9999) is
/// clamped to it — longer than any rate-limit window providers document, and still a number a caller can act on.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a server asked to wait: its `retry-after-ms` header (milliseconds, fractions allowed; OpenAI and
/// Anthropic send it), else its `Retry-After` header (seconds, or an HTTP date counted from `now`: any of the three
/// forms RFC 9110 asks recipients to read, parsed by `httpdate`).
///
/// The result is rounded up to whole milliseconds and is at most [`MAX_RETRY_AFTER`]. A value that says nothing
/// usable — not a number, NaN, negative — counts as absent, so `retry-after-ms` falls back to `Retry-After` and
/// without either the caller's backoff applies; a date already past is zero.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use noetic_http::{MAX_RETRY_AFTER, parse_retry_after};
///
/// let now = SystemTime::now();
/// assert_eq!(parse_retry_after(Some("250"), Some("9"), now), Some(Duration::from_millis(250)));
/// assert_eq!(parse_retry_after(Some("NaN"), Some("2"), now), Some(Duration::from_secs(2)));
/// assert_eq!(parse_retry_after(Some("1e300"), None, now), Some(MAX_RETRY_AFTER));
/// assert_eq!(parse_retry_after(None, Some("-5"), now), None);
/// ```
pub fn parse_retry_after(retry_after_ms: Option<&str>, retry_after: Option<&str>, now: SystemTime) -> Option<Duration> {
    if let Some(wait) = retry_after_ms.and_then(|ms| number(ms, 1.0)) {
        return Some(wait);
    }
    let value = retry_after?.trim();
    if value.parse::<f64>().is_ok() {
        return number(value, 1000.0);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(clamped(at.duration_since(now).unwrap_or(Duration::ZERO)))
}

/// A count of `ms_per_unit` milliseconds as a clamped delay; `None` when it is not a number, NaN or negative.
fn number(text: &str, ms_per_unit: f64) -> Option<Duration> {
    let value = text.trim().parse::<f64>().ok().filter(|v| !v.is_nan() && *v >= 0.0)?;
    let ms = (value * ms_per_unit).ceil();
    let cap = MAX_RETRY_AFTER.as_secs_f64() * 1000.0;
    // The comparison first: the cast below only ever sees a finite number of milliseconds under a day.
    Some(if ms >= cap { MAX_RETRY_AFTER } else { Duration::from_millis(ms as u64) })
}

/// `wait` rounded up to whole milliseconds (the unit errors carry) and clamped to [`MAX_RETRY_AFTER`].
fn clamped(wait: Duration) -> Duration {
    let wait = wait.min(MAX_RETRY_AFTER);
    let whole = Duration::from_millis(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    if whole < wait { whole + Duration::from_millis(1) } else { whole }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use std::time::UNIX_EPOCH;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn parse(ms: Option<&str>, seconds: Option<&str>) -> Option<Duration> {
        parse_retry_after(ms, seconds, UNIX_EPOCH + Duration::from_secs(784_111_770))
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after_and_is_rounded_up_to_whole_milliseconds() {
        assert_eq!(parse(Some("250"), Some("9")), Some(250 * MS));
        assert_eq!(parse(Some("150.5"), Some("2")), Some(151 * MS));
        assert_eq!(parse(Some(" 0 "), None), Some(Duration::ZERO));
        assert_eq!(parse(None, Some("2")), Some(2000 * MS));
        assert_eq!(parse(None, Some("0.5")), Some(500 * MS));
        assert_eq!(parse(None, None), None);
    }

    #[test]
    fn http_dates_count_from_now_and_a_past_date_is_zero() {
        assert_eq!(parse(None, Some("Sun, 06 Nov 1994 08:49:37 GMT")), Some(7000 * MS));
        assert_eq!(parse(None, Some("Sun, 06 Nov 1994 08:48:37 GMT")), Some(Duration::ZERO));
        assert_eq!(parse(None, Some("Thu, 01 Jan 1970 00:00:00 GMT")), Some(Duration::ZERO));
        let just_before = UNIX_EPOCH + Duration::from_secs(784_111_776) + Duration::from_micros(1);
        assert_eq!(
            parse_retry_after(None, Some("Sun, 06 Nov 1994 08:49:37 GMT"), just_before),
            Some(1000 * MS),
            "a part of a millisecond counts as a whole one"
        );
    }

    #[test]
    fn a_delay_longer_than_a_day_is_clamped_to_a_day() {
        for huge in ["1e300", "inf", "infinity", "86400001", "340282366920938463463374607431768211456"] {
            assert_eq!(parse(Some(huge), None), Some(MAX_RETRY_AFTER), "retry-after-ms: {huge}");
        }
        for huge in ["1e300", "inf", "86401", "18446744073709551616"] {
            assert_eq!(parse(None, Some(huge)), Some(MAX_RETRY_AFTER), "retry-after: {huge}");
        }
        assert_eq!(parse(None, Some("Fri, 31 Dec 9999 23:59:59 GMT")), Some(MAX_RETRY_AFTER));
        assert_eq!(parse(None, Some("86400")), Some(MAX_RETRY_AFTER), "exactly a day is kept");
    }

    #[test]
    fn nan_negative_and_unreadable_values_count_as_absent() {
        for unusable in ["NaN", "-5", "-inf", "-0.001", "soon", ""] {
            assert_eq!(parse(None, Some(unusable)), None, "retry-after: {unusable}");
            assert_eq!(parse(Some(unusable), Some("2")), Some(2000 * MS), "retry-after-ms: {unusable}");
        }
        assert_eq!(parse(None, Some("-0")), Some(Duration::ZERO));
    }

    #[test]
    fn the_obsolete_http_date_forms_rfc_9110_asks_recipients_to_read_are_read() {
        // The same instant, 7 s after `now`, in IMF-fixdate, RFC 850 and asctime form.
        for date in ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            assert_eq!(parse(None, Some(date)), Some(7000 * MS), "{date}");
        }
    }

    #[test]
    fn malformed_http_dates_count_as_absent() {
        for not_a_date in [
            "Sun, 06 Nov 99999999999999999 08:49:37 GMT",
            "Sun, 06 Nov -994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37:01 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
        ] {
            assert_eq!(parse(None, Some(not_a_date)), None, "{not_a_date}");
        }
    }

    proptest! {
        #[test]
        fn no_header_value_panics_or_asks_for_more_than_a_day(
            ms in proptest::option::of(".{0,40}"),
            seconds in proptest::option::of(".{0,40}"),
            number in proptest::num::f64::ANY,
        ) {
            let now = SystemTime::now();
            for (ms, seconds) in [(ms.clone(), seconds.clone()), (Some(number.to_string()), None), (None, Some(number.to_string()))] {
                if let Some(wait) = parse_retry_after(ms.as_deref(), seconds.as_deref(), now) {
                    prop_assert!(wait <= MAX_RETRY_AFTER);
                    prop_assert_eq!(wait.subsec_nanos() % 1_000_000, 0);
                }
            }
        }
    }
}
