//! When and how long to wait before sending a failed provider call again.
//!
//! [`RetryPolicy`] is the serde-loadable knob; the client in `client.rs` asks it for a backoff
//! after each retryable failure, unless the provider said itself when to come back
//! (`Retry-After`, read here too).

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};

/// How a provider call is retried and how long one attempt may take. Build with
/// [`RetryPolicy::default`] and the `with_*` setters, or load from JSON/TOML with serde
/// (durations in seconds; missing fields keep their defaults; unknown fields are an error).
///
/// Retried: HTTP 408, 429 and 5xx (Anthropic's 529 "overloaded" included), connection errors,
/// timeouts and bodies cut short. Other 4xx answers fail at once. The wait before retry `n`
/// (from 0) is `initial_backoff · 2ⁿ`, capped at `max_backoff`, of which a random half is
/// dropped so that many leaves rate-limited together do not come back in step. A
/// `Retry-After` header (seconds or an HTTP date) replaces that wait; one asking for longer
/// than `max_backoff` ends the call at once with a retryable error, leaving a long pause (a
/// spent quota, say) to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 sends each call once.
    pub max_retries: u32,
    /// The wait before the first retry, doubled for each one after it.
    #[serde(with = "crate::serde_secs")]
    pub initial_backoff: Duration,
    /// The longest wait between two attempts, and the longest `Retry-After` obeyed.
    #[serde(with = "crate::serde_secs")]
    pub max_backoff: Duration,
    /// The longest one attempt may take, from connecting to the last byte of the body.
    #[serde(with = "crate::serde_secs")]
    pub request_timeout: Duration,
}

impl Default for RetryPolicy {
    /// The defaults, and why:
    ///
    /// | field | default | why |
    /// |---|---|---|
    /// | `max_retries` | 3 | rides out a rate-limit window or a brief outage; a provider that fails four times in a row is down, and the leaf should say so |
    /// | `initial_backoff` | 0.5 s | long enough not to hammer a struggling server, short enough that a one-off 500 costs little |
    /// | `max_backoff` | 60 s | rate-limit windows are per minute, so a `Retry-After` within one window is obeyed; a longer pause (a spent quota) belongs to the caller, not to one HTTP call |
    /// | `request_timeout` | 120 s | a long completion from a slow hosted model takes a minute or more; a stalled connection should not hold a leaf forever |
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            request_timeout: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// Sets how many times a failed call is sent again.
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets the wait before the first retry.
    pub fn with_initial_backoff(mut self, backoff: Duration) -> Self {
        self.initial_backoff = backoff;
        self
    }

    /// Sets the longest wait between attempts (and the longest `Retry-After` obeyed).
    pub fn with_max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self
    }

    /// Sets how long one attempt may take.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The wait before retry number `retry` (0 for the first), when the provider did not say.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_backoff);
        // Keep half, randomise half: a wait is still a wait, yet leaves that failed together
        // spread out.
        ceiling.mul_f64(0.5 + 0.5 * unit_random())
    }
}

/// A number in [0, 1) that differs from call to call. Jitter needs no quality beyond that, and
/// `RandomState` is seeded per instance by the standard library, so no RNG crate is needed.
fn unit_random() -> f64 {
    let bits = RandomState::new().hash_one(0u8);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// How long the provider asked us to wait, from `Retry-After` (RFC 9110: delay-seconds or an
/// HTTP date, of which the IMF-fixdate form senders must use is understood).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = parse_imf_fixdate(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses `Sun, 06 Nov 1994 08:49:37 GMT`. Fields must have the widths RFC 9110 gives them
/// (a four-digit year), and the arithmetic is checked besides: a hostile header is no date,
/// never an overflow.
fn parse_imf_fixdate(text: &str) -> Option<SystemTime> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (_weekday, rest) = text.split_once(", ")?;
    let mut fields = rest.split(' ');
    let day = digits(fields.next()?, 2)?;
    let month_name = fields.next()?;
    let month = MONTHS.iter().position(|name| *name == month_name)? as i64 + 1;
    let year = digits(fields.next()?, 4)?;
    let mut clock = fields.next()?.split(':').map(|field| digits(field, 2));
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if fields.next()? != "GMT"
        || fields.next().is_some()
        || clock.next().is_some()
        || !(1..=31).contains(&day)
        || !(0..24).contains(&hour)
        || !(0..60).contains(&minute)
        || !(0..=60).contains(&second)
    {
        return None;
    }
    let secs = days_since_epoch(year, month, day)?
        .checked_mul(86_400)?
        .checked_add(hour * 3600 + minute * 60 + second)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(secs).ok()?))
}

/// A field of exactly `width` ASCII digits (`str::parse` alone would take `+7` or any length).
fn digits(field: &str, width: usize) -> Option<i64> {
    if field.len() != width || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`);
/// `None` when the date is too far out for `i64`.
fn days_since_epoch(year: i64, month: i64, day: i64) -> Option<i64> {
    let year = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era.checked_mul(146_097)?
        .checked_add(day_of_era)?
        .checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(retry_after).unwrap());
        headers
    }

    #[test]
    fn partial_json_keeps_defaults_and_rejects_unknown_fields() {
        let policy: RetryPolicy =
            serde_json::from_str(r#"{"max_retries": 1, "request_timeout": 2.5}"#).unwrap();
        assert_eq!(policy.max_retries, 1);
        assert_eq!(policy.request_timeout, Duration::from_millis(2500));
        assert_eq!(policy.max_backoff, Duration::from_secs(60));
        assert_eq!(policy.initial_backoff, Duration::from_millis(500));
        let err = serde_json::from_str::<RetryPolicy>(r#"{"retries": 1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = serde_json::from_str::<RetryPolicy>(r#"{"max_backoff": -1}"#).unwrap_err();
        assert!(err.to_string().contains("duration"), "{err}");
        let text = serde_json::to_string(&policy).unwrap();
        assert_eq!(serde_json::from_str::<RetryPolicy>(&text).unwrap(), policy);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_stops_at_the_cap() {
        let policy = RetryPolicy::default();
        for retry in 0..4 {
            let ceiling = Duration::from_millis(500 * 2u64.pow(retry));
            for _ in 0..50 {
                let wait = policy.backoff(retry);
                assert!(wait >= ceiling / 2 && wait <= ceiling, "{retry}: {wait:?}");
            }
        }
        assert!(policy.backoff(40) <= Duration::from_secs(60));
        assert!(policy.backoff(u32::MAX) >= Duration::from_secs(30));
        let waits: Vec<_> = (0..20).map(|_| policy.backoff(3)).collect();
        assert!(waits.iter().any(|wait| *wait != waits[0]), "no jitter");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(
            retry_after(&headers("1"), now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&headers(" 2.5 "), now),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(
            retry_after(&headers("Sun, 06 Nov 1994 08:49:37 GMT"), now),
            Some(Duration::from_secs(7))
        );
        let later = now + Duration::from_secs(60);
        assert_eq!(
            retry_after(&headers("Sun, 06 Nov 1994 08:49:37 GMT"), later),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_imf_fixdate("Thu, 29 Feb 2024 23:59:60 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_709_251_200))
        );
        for bad in [
            "-1",
            "soon",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37:01 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov +994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
        ] {
            assert_eq!(retry_after(&headers(bad), now), None, "{bad}");
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_with_a_huge_year_is_no_date_and_no_overflow() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        for year in [
            "9999999999999",
            "99999999999999999",
            "9223372036854775807",
            "99999999999999999999",
        ] {
            let date = format!("Sun, 06 Nov {year} 08:49:37 GMT");
            assert_eq!(parse_imf_fixdate(&date), None, "{date}");
            assert_eq!(retry_after(&headers(&date), now), None, "{date}");
        }
        assert_eq!(days_since_epoch(i64::MAX, 11, 6), None);
        assert_eq!(days_since_epoch(i64::MIN, 1, 6), None);
        assert_eq!(days_since_epoch(1970, 1, 1), Some(0));
        assert_eq!(
            parse_imf_fixdate("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(253_402_300_799))
        );
    }
}
