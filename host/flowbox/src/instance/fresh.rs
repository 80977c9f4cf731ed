//! Pre-faulting a fresh instance on the request path: the pages that most runs touch.
//!
//! Without a warm pool, a run takes a page fault for each page of its memory image that it
//! first writes (~410 in a trivial run, copy-on-write) or reads (~200), at ~2.5 µs each in
//! this VM: most of a cold run's time. `madvise(MADV_POPULATE_WRITE)` and `_READ` do the same
//! work for a range in one call, at a fraction of the cost a page (see `prefault`). So each
//! runtime keeps a profile of what its recent fresh instances did to each page, read from the
//! page map after each of their runs (a [`PageProfile`], as the warm pool keeps one), and
//! pre-faults a new fresh instance's memory with it straight after instantiating: for writing
//! the pages that most of them wrote, for reading those that most of them touched otherwise
//! ([`Threshold::Most`]).
//!
//! A pre-faulted run cannot teach the profile (its page map shows every page pre-faulted as
//! touched, so a page once in the habit would stay in it for good), so one fresh instance in
//! [`SAMPLE`] is left as it is and only those, and those that start before the profile has
//! counted a run, teach it. Pre-faulting never changes the memory's contents, so a run's
//! result and fuel are what they are without it.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::prefault::{self, Access, Learner, Touch};
use super::profile::{PageProfile, Threshold};

/// One fresh instance in this many is not pre-faulted, and its run teaches the profile.
const SAMPLE: u64 = 16;

/// The pre-faulting of a runtime's fresh instances.
pub(crate) struct FreshPrefault {
    profile: PageProfile,
    /// Fresh instances so far, for the sample.
    instances: AtomicU64,
}

impl Default for FreshPrefault {
    fn default() -> Self {
        Self {
            profile: PageProfile::new(Threshold::Most),
            instances: AtomicU64::new(0),
        }
    }
}

impl FreshPrefault {
    /// Pre-faults a fresh instance's `memory` with what most recent runs did to it, and
    /// returns the bytes pre-faulted for writing; `None` where it leaves the memory as it is
    /// and the instance's run is to teach the profile: before it has counted a run, for a
    /// memory of another size, and for one instance in [`SAMPLE`].
    pub(crate) fn prefault(&self, memory: &Range<usize>) -> Option<u64> {
        let targets = self.profile.targets(memory)?;
        let instance = self.instances.fetch_add(1, Ordering::Relaxed) + 1;
        if instance.is_multiple_of(SAMPLE) {
            return None;
        }
        let written = prefault::populate(&targets.write, Access::Write, || true);
        prefault::populate(&targets.read, Access::Read, || true);
        Some(written)
    }
}

#[cfg(test)]
impl FreshPrefault {
    /// The runs the profile holds now, halvings included.
    pub(crate) fn runs(&self) -> u16 {
        self.profile.runs()
    }

    /// The fresh instances it has pre-faulted or sampled.
    pub(crate) fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed)
    }
}

impl Learner for FreshPrefault {
    fn add(&self, pages: Vec<Touch>) {
        self.profile.add(pages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Touch::{Untouched, Written};

    #[test]
    fn nothing_is_pre_faulted_before_a_run_has_been_counted() {
        let fresh = FreshPrefault::default();
        let page = 4096;
        let bytes = vec![1u8; 64 << 20];
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        assert_eq!(fresh.prefault(&(start..start + 8 * page)), None);
        assert_eq!(fresh.instances(), 0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_pages_most_runs_wrote_are_pre_faulted_for_writing_and_keep_their_contents() {
        let page = 4096;
        // Past the allocator's threshold for mapping memory afresh, so its pages are mapped
        // only once touched.
        let bytes = vec![0u8; 64 << 20];
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        let range = start..start + 8 * page;
        let fresh = FreshPrefault::default();
        let mut pages = vec![Untouched; 8];
        pages[2] = Written;
        pages[5] = Written;
        fresh.add(pages);
        assert_eq!(fresh.prefault(&range), Some(2 * page as u64));
        let touched = prefault::touched_pages(std::slice::from_ref(&range)).unwrap();
        assert_eq!((touched[2], touched[5]), (Written, Written));
        assert_eq!(touched[3], Untouched);
        // The instances up to the sample are pre-faulted; the sample is left as it is.
        for _ in 2..SAMPLE {
            assert!(fresh.prefault(&range).is_some());
        }
        assert_eq!(fresh.prefault(&range), None);
        assert!(fresh.prefault(&range).is_some());
        // A memory of another size is left alone, to start the profile again.
        assert_eq!(fresh.prefault(&(start..start + 4 * page)), None);
        assert!(bytes.iter().all(|b| *b == 0));
    }
}
