//! Thread ids: the name of a run, which also seeds its random source.

use std::sync::atomic::{AtomicU64, Ordering};

use flowbox_store::UtcTime;
use sha2::{Digest, Sha256};

/// A new thread id such as `20261130-034521-9f2c1a0b3e7d4c58`: the UTC start time, so ids
/// sort by age, and 64 random bits, so ids of runs started together never meet.
pub(crate) fn new_thread_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = flowbox_store::now_unix_nanos();
    let digest = Sha256::new()
        .chain_update(now.to_le_bytes())
        .chain_update(std::process::id().to_le_bytes())
        .chain_update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes())
        .finalize();
    let time = UtcTime::from_unix_secs(now / 1_000_000_000);
    format!("{}-{}", time.compact(), flowbox_store::hex(&digest[..8]))
}

/// The longest thread id accepted.
const MAX_THREAD_ID: usize = 128;

/// Thread ids travel in journals, file listings and HTTP headers (idempotency keys), so they
/// are restricted to letters, digits and `-_.:`.
pub(crate) fn check_thread_id(id: &str) -> Result<(), crate::RunError> {
    let fine = !id.is_empty()
        && id.len() <= MAX_THREAD_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if fine {
        Ok(())
    } else {
        Err(crate::RunError::InvalidThreadId(format!(
            "{id:?}: thread ids are 1 to {MAX_THREAD_ID} letters, digits, '-', '_', '.' or ':'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_start_with_the_date() {
        let a = new_thread_id();
        let b = new_thread_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "20261130-034521-9f2c1a0b3e7d4c58".len());
        assert!(a.starts_with("20"), "{a}");
        assert!(check_thread_id(&a).is_ok());
    }

    #[test]
    fn thread_ids_are_checked() {
        for good in ["a", "conv-1.run_2", "x:y", &"t".repeat(128)] {
            assert!(check_thread_id(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "a/b", "ü", "a\n", &"t".repeat(129)] {
            assert!(check_thread_id(bad).is_err(), "{bad:?}");
        }
    }
}
