//! Thread ids: the name of a run, which also seeds its random source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

/// A new thread id such as `20261130-034521-9f2c1a`: the UTC start time, so ids sort by age,
/// and six hex digits that differ between runs started in the same second.
pub(crate) fn new_thread_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let digest = Sha256::new()
        .chain_update(now.as_nanos().to_le_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes())
        .finalize();
    let (date, time) = civil_utc(now.as_secs());
    format!(
        "{date}-{time}-{:02x}{:02x}{:02x}",
        digest[0], digest[1], digest[2]
    )
}

/// `(YYYYMMDD, HHMMSS)` for a Unix time, by the days-from-civil algorithm.
fn civil_utc(unix_secs: u64) -> (String, String) {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}{month:02}{day:02}"),
        format!("{:02}{:02}{:02}", secs / 3600, secs / 60 % 60, secs % 60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_are_right() {
        assert_eq!(civil_utc(0), ("19700101".into(), "000000".into()));
        assert_eq!(civil_utc(951_782_400), ("20000229".into(), "000000".into()));
        assert_eq!(
            civil_utc(1_796_009_125),
            ("20261130".into(), "032525".into())
        );
    }

    #[test]
    fn ids_are_unique() {
        let a = new_thread_id();
        let b = new_thread_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "20261130-034521-9f2c1a".len());
    }
}
