//! Pre-faulting a fresh instance on the request path: the pages that most runs touch.
//!
//! Without a warm pool, a run takes a page fault for each page of its memory image that it
//! first writes (~410 in a trivial run, copy-on-write) or reads (~200), at ~2.5 µs each in
//! this VM: most of a cold run's time. `madvise(MADV_POPULATE_WRITE)` and `_READ` do the same
//! work for a range in one call, at a fraction of the cost a page (see `prefault`). So each
//! runtime keeps a tally of what its recent fresh instances did to each page, read from the
//! page map after each of their runs (as the warm pool learns its profile), and pre-faults a
//! new fresh instance's memory with it straight after instantiating: for writing the pages
//! that most of them wrote, for reading those that most of them touched otherwise.
//!
//! Most, not any: pre-faulting a page for writing copies it into the run's own memory, so
//! the union of every page a run ever wrote would grow, with each new kind of script, towards
//! the whole image copied for every run. A pre-faulted run cannot teach the tally (its page
//! map shows every page pre-faulted as touched, so a page once in the habit would stay in it
//! for good), so one fresh instance in [`SAMPLE`] is left as it is and only those, and those
//! that start before the tally has counted a run, teach it. The counts halve every
//! [`HALF_LIFE`] runs they count, so that the tally follows what the process runs now.
//! Pre-faulting never changes the memory's contents, so a run's result and fuel are what they
//! are without it.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::instance::prefault::{self, Access, Learner, Touch};

/// After this many runs the counts halve.
const HALF_LIFE: u16 = 64;

/// One fresh instance in this many is not pre-faulted, and its run teaches the tally.
const SAMPLE: u64 = 16;

/// What recent runs did to each page of a fresh instance's linear memory.
#[derive(Default)]
pub(crate) struct Tally {
    counts: Mutex<Option<Counts>>,
    /// Fresh instances so far, for the sample.
    instances: AtomicU64,
}

struct Counts {
    /// Runs counted (halved with the counts).
    runs: u16,
    /// Per page: the runs that wrote it, and those that touched it at all.
    written: Vec<u16>,
    touched: Vec<u16>,
    /// Per page, what to pre-fault it for: written or touched by more than half the runs.
    habit: Vec<Touch>,
    /// The habit as byte ranges from the memory's start, for writing and for reading, made
    /// when a run is counted rather than on the request path; `None` without a page size.
    targets: Option<Targets>,
}

/// Byte ranges from the start of a memory, to pre-fault for writing and for reading.
struct Targets {
    write: Vec<Range<usize>>,
    read: Vec<Range<usize>>,
}

impl Counts {
    fn new(pages: usize) -> Self {
        Self {
            runs: 0,
            written: vec![0; pages],
            touched: vec![0; pages],
            habit: vec![Touch::Untouched; pages],
            targets: None,
        }
    }

    fn add(&mut self, pages: &[Touch]) {
        if self.runs == HALF_LIFE {
            self.runs /= 2;
            self.written.iter_mut().for_each(|n| *n /= 2);
            self.touched.iter_mut().for_each(|n| *n /= 2);
        }
        self.runs += 1;
        for (i, touch) in pages.iter().enumerate() {
            self.written[i] += u16::from(*touch == Touch::Written);
            self.touched[i] += u16::from(*touch != Touch::Untouched);
        }
        let most = |n: u16| 2 * n > self.runs;
        for (i, habit) in self.habit.iter_mut().enumerate() {
            *habit = if most(self.written[i]) {
                Touch::Written
            } else if most(self.touched[i]) {
                Touch::Read
            } else {
                Touch::Untouched
            };
        }
        self.targets = prefault::page_size().and_then(|page| {
            let memory = 0..self.habit.len() * page;
            let part = |touch| prefault::flagged(std::slice::from_ref(&memory), &self.habit, touch);
            let (write, read) = part(Touch::Written).zip(part(Touch::Read))?;
            Some(Targets { write, read })
        });
    }
}

impl Tally {
    fn counts(&self) -> MutexGuard<'_, Option<Counts>> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Pre-faults a fresh instance's `memory` with what most recent runs did to it, and
    /// returns the bytes pre-faulted for writing; `None` where it leaves the memory as it is
    /// and the instance's run is to teach the tally: before the tally has counted a run, for
    /// a memory of another size, and for one instance in [`SAMPLE`].
    pub(crate) fn prefault(&self, memory: &Range<usize>) -> Option<u64> {
        let at = |ranges: &[Range<usize>]| -> Vec<Range<usize>> {
            let start = memory.start;
            ranges
                .iter()
                .map(|r| start + r.start..start + r.end)
                .collect()
        };
        let (write, read) = {
            let counts = self.counts();
            let counts = counts.as_ref()?;
            let targets = counts.targets.as_ref()?;
            if memory.len() != counts.habit.len() * prefault::page_size()? {
                return None;
            }
            let instance = self.instances.fetch_add(1, Ordering::Relaxed) + 1;
            if instance.is_multiple_of(SAMPLE) {
                return None;
            }
            (at(&targets.write), at(&targets.read))
        };
        let written = prefault::populate(&write, Access::Write, || true);
        prefault::populate(&read, Access::Read, || true);
        Some(written)
    }
}

#[cfg(test)]
impl Tally {
    /// The runs the counts hold now, halvings included.
    pub(crate) fn runs(&self) -> u16 {
        self.counts().as_ref().map_or(0, |counts| counts.runs)
    }

    /// The fresh instances it has pre-faulted or sampled.
    pub(crate) fn instances(&self) -> u64 {
        self.instances.load(Ordering::Relaxed)
    }
}

impl Learner for Tally {
    fn add(&self, pages: Vec<Touch>) {
        let mut counts = self.counts();
        let counts = match counts.as_mut() {
            Some(counts) if counts.habit.len() == pages.len() => counts,
            // The first run, or a memory of another size: start again.
            _ => counts.insert(Counts::new(pages.len())),
        };
        counts.add(&pages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Touch::{Read, Untouched, Written};

    fn habit(tally: &Tally) -> Vec<Touch> {
        tally.counts().as_ref().unwrap().habit.clone()
    }

    #[test]
    fn a_page_is_pre_faulted_for_what_most_runs_did_to_it() {
        let tally = Tally::default();
        tally.add(vec![Written, Written, Read, Untouched]);
        assert_eq!(habit(&tally), [Written, Written, Read, Untouched]);
        tally.add(vec![Written, Read, Untouched, Untouched]);
        // Half is not most: page 1 was written by one run of two, but touched by both; page 2
        // was touched by one.
        assert_eq!(habit(&tally), [Written, Read, Untouched, Untouched]);
        tally.add(vec![Written, Written, Read, Written]);
        // Two runs of three wrote page 1 and touched page 2; one wrote page 3.
        assert_eq!(habit(&tally), [Written, Written, Read, Untouched]);
    }

    #[test]
    fn the_counts_follow_what_the_process_runs_now() {
        let tally = Tally::default();
        for _ in 0..HALF_LIFE {
            tally.add(vec![Written, Untouched]);
        }
        // A new kind of script takes over within a few dozen runs, not hundreds.
        let mut runs = 0;
        while habit(&tally) != [Untouched, Written] {
            tally.add(vec![Untouched, Written]);
            runs += 1;
            assert!(runs <= HALF_LIFE, "still {:?}", habit(&tally));
        }
        assert!(runs > 1);
    }

    #[test]
    fn a_memory_of_another_size_starts_the_tally_again() {
        let tally = Tally::default();
        tally.add(vec![Written, Written]);
        tally.add(vec![Untouched, Read, Written]);
        assert_eq!(habit(&tally), [Untouched, Read, Written]);
    }

    #[test]
    fn nothing_is_pre_faulted_before_a_run_has_been_counted() {
        let tally = Tally::default();
        let page = 4096;
        let bytes = vec![1u8; 64 << 20];
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        assert_eq!(tally.prefault(&(start..start + 8 * page)), None);
        assert_eq!(tally.instances.load(Ordering::Relaxed), 0);
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
        let tally = Tally::default();
        let mut pages = vec![Untouched; 8];
        pages[2] = Written;
        pages[5] = Written;
        tally.add(pages);
        assert_eq!(tally.prefault(&range), Some(2 * page as u64));
        let touched = prefault::touched_pages(std::slice::from_ref(&range)).unwrap();
        assert_eq!((touched[2], touched[5]), (Written, Written));
        assert_eq!(touched[3], Untouched);
        // The instances up to the sample are pre-faulted; the sample is left as it is.
        for _ in 2..SAMPLE {
            assert!(tally.prefault(&range).is_some());
        }
        assert_eq!(tally.prefault(&range), None);
        assert!(tally.prefault(&range).is_some());
        // A memory of another size is left alone, to start the tally again.
        assert_eq!(tally.prefault(&(start..start + 4 * page)), None);
        assert!(bytes.iter().all(|b| *b == 0));
    }
}
