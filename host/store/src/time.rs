//! UTC calendar times for journal timestamps, without a date library.

use std::fmt;

/// A UTC calendar time, to the second.
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
        }
    }

    /// The calendar time of a Unix time in milliseconds.
    pub fn from_unix_millis(unix_ms: u64) -> Self {
        Self::from_unix_secs(unix_ms / 1000)
    }
}

impl fmt::Display for UtcTime {
    /// `2026-11-30 03:25:25Z`.
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
}
