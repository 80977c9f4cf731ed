//! Time in one place: the host's clock as Unix time ([`now_unix_ms`], [`now_unix_nanos`]) and
//! UTC calendar times for people and protocols ([`UtcTime`]: `2026-11-30 03:25:25Z` in tables,
//! ISO 8601 where a protocol asks for it), without a date library.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The host's real time, in nanoseconds since the Unix epoch (0 before it, saturating after
/// the year 2554).
pub fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The host's real time, in milliseconds since the Unix epoch.
pub fn now_unix_ms() -> u64 {
    now_unix_nanos() / 1_000_000
}

/// A UTC calendar time, to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime {
    /// The year.
    pub year: i64,
    /// 1–12.
    pub month: u32,
    /// 1–31.
    pub day: u32,
    /// 0–23.
    pub hour: u32,
    /// 0–59.
    pub minute: u32,
    /// 0–59.
    pub second: u32,
    /// 0–999.
    pub millisecond: u32,
}

impl UtcTime {
    /// The calendar time of a Unix time in seconds (the days-from-civil algorithm).
    pub fn from_unix_secs(unix_secs: u64) -> Self {
        let days = (unix_secs / 86_400) as i64;
        let secs = (unix_secs % 86_400) as u32;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            millisecond: 0,
        }
    }

    /// The calendar time of a Unix time in milliseconds.
    pub fn from_unix_millis(unix_ms: u64) -> Self {
        Self {
            millisecond: (unix_ms % 1000) as u32,
            ..Self::from_unix_secs(unix_ms / 1000)
        }
    }

    /// ISO 8601 with milliseconds, as protocols write times: `2026-12-01T18:30:05.123Z`.
    pub fn iso8601(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second, self.millisecond
        )
    }

    /// The compact form that sorts as text, for names: `20261130-032525`.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

impl fmt::Display for UtcTime {
    /// `2026-11-30 03:25:25Z`: to the second, for people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(
            UtcTime::from_unix_secs(0).to_string(),
            "1970-01-01 00:00:00Z"
        );
        assert_eq!(
            UtcTime::from_unix_secs(951_782_400).to_string(),
            "2000-02-29 00:00:00Z"
        );
        assert_eq!(
            UtcTime::from_unix_millis(1_796_009_125_999).to_string(),
            "2026-11-30 03:25:25Z"
        );
    }

    #[test]
    fn a_time_writes_as_iso_8601_and_compactly() {
        let time = UtcTime::from_unix_millis(1_796_009_125_042);
        assert_eq!(time.iso8601(), "2026-11-30T03:25:25.042Z");
        assert_eq!(time.compact(), "20261130-032525");
        assert_eq!(
            UtcTime::from_unix_millis(0).iso8601(),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn the_clock_reads_after_this_code_was_written() {
        let now = now_unix_ms();
        assert!(now > 1_796_000_000_000, "{now}");
        assert_eq!(now_unix_nanos() / 1_000_000_000, now / 1000);
    }
}
