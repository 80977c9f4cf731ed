//! Thread ids: the name of a run, which also seeds its random source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use flowbox_store::UtcTime;
use sha2::{Digest, Sha256};

/// A new thread id such as `20261130-034521-9f2c1a`: the UTC start time, so ids sort by age,
/// and six hex digits that differ between runs started in the same second.
pub fn new_thread_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let digest = Sha256::new()
        .chain_update(now.as_nanos().to_le_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes())
        .finalize();
    let t = UtcTime::from_unix_secs(now.as_secs());
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{:02x}{:02x}{:02x}",
        t.year, t.month, t.day, t.hour, t.minute, t.second, digest[0], digest[1], digest[2]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_start_with_the_date() {
        let a = new_thread_id();
        let b = new_thread_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "20261130-034521-9f2c1a".len());
        assert!(a.starts_with("20"), "{a}");
    }
}
