//! What recent runs did to the pages of a guest's linear memory, and so which pages to
//! pre-fault before the next run: the one profile both the warm pool and the fresh instances
//! of a runtime learn from and pre-fault with.
//!
//! After each run that may teach it, the thread that drops the run's store reads which pages
//! the run wrote and which it only read (see `prefault`) and counts them per page. The counts
//! halve every [`HALF_LIFE`] runs, so the profile follows what the process runs now. Which
//! pages a profile pre-faults depends on what it is for ([`Threshold`]): the warm pool, off
//! the request path and with memory to spare, pre-faults any page a recent run wrote; a fresh
//! instance, on the request path, only those most runs wrote, since pre-faulting a page for
//! writing copies it into the run's own memory and the union of every page any run ever wrote
//! would grow towards the whole image. The targets are worked out when a run is counted, not
//! when an instance is pre-faulted.

use std::ops::Range;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::prefault::{self, Learner, Touch};

/// After this many runs the counts halve.
const HALF_LIFE: u16 = 64;

/// Which pages a profile pre-faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Threshold {
    /// Those any run counted wrote (for writing) or touched (for reading).
    Any,
    /// Those more than half the runs counted wrote, or touched.
    Most,
}

/// Byte ranges of a memory to pre-fault, for writing and for reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Targets {
    pub(crate) write: Vec<Range<usize>>,
    pub(crate) read: Vec<Range<usize>>,
}

/// What recent runs did to each page of a guest's linear memory (see the module's doc).
pub(crate) struct PageProfile {
    threshold: Threshold,
    counts: Mutex<Option<Counts>>,
    /// Called once, when the first run is counted (the warm pool's instances waiting for it).
    first_learnt: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

struct Counts {
    /// Runs counted (halved with the counts).
    runs: u16,
    /// Per page: the runs that wrote it, and those that touched it at all.
    written: Vec<u16>,
    touched: Vec<u16>,
    /// Per page, what to pre-fault it for.
    habit: Vec<Touch>,
    /// The habit as byte ranges from the memory's start; `None` without a page size.
    targets: Option<Targets>,
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

    fn add(&mut self, pages: &[Touch], threshold: Threshold) {
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
        let runs = self.runs;
        let passes = |n: u16| match threshold {
            Threshold::Any => n > 0,
            Threshold::Most => 2 * n > runs,
        };
        for (i, habit) in self.habit.iter_mut().enumerate() {
            *habit = if passes(self.written[i]) {
                Touch::Written
            } else if passes(self.touched[i]) {
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

impl PageProfile {
    /// A profile that pre-faults the pages that pass `threshold`.
    pub(crate) fn new(threshold: Threshold) -> Self {
        Self {
            threshold,
            counts: Mutex::new(None),
            first_learnt: OnceLock::new(),
        }
    }

    fn counts(&self) -> MutexGuard<'_, Option<Counts>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `wake` once the first run has been counted (at once if one has been).
    pub(crate) fn on_first_learnt(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.first_learnt.set(wake);
    }

    /// Whether a run has been counted.
    pub(crate) fn has_learnt(&self) -> bool {
        self.counts().is_some()
    }

    /// The parts of `memory` to pre-fault, in the process's addresses; `None` before a run
    /// has been counted, or for a memory of another size than the runs had.
    pub(crate) fn targets(&self, memory: &Range<usize>) -> Option<Targets> {
        let counts = self.counts();
        let counts = counts.as_ref()?;
        let targets = counts.targets.as_ref()?;
        if memory.len() != counts.habit.len() * prefault::page_size()? {
            return None;
        }
        let at = |ranges: &[Range<usize>]| -> Vec<Range<usize>> {
            ranges
                .iter()
                .map(|r| memory.start + r.start..memory.start + r.end)
                .collect()
        };
        Some(Targets {
            write: at(&targets.write),
            read: at(&targets.read),
        })
    }
}

#[cfg(test)]
impl PageProfile {
    /// The runs the counts hold now, halvings included.
    pub(crate) fn runs(&self) -> u16 {
        self.counts().as_ref().map_or(0, |counts| counts.runs)
    }

    fn habit(&self) -> Vec<Touch> {
        self.counts()
            .as_ref()
            .map(|c| c.habit.clone())
            .unwrap_or_default()
    }
}

impl Learner for PageProfile {
    fn add(&self, pages: Vec<Touch>) {
        let mut counts = self.counts();
        let first = counts.is_none();
        let counts_now = match counts.as_mut() {
            Some(counts) if counts.habit.len() == pages.len() => counts,
            // The first run, or a memory of another size: start again.
            _ => counts.insert(Counts::new(pages.len())),
        };
        counts_now.add(&pages, self.threshold);
        drop(counts);
        if first && let Some(wake) = self.first_learnt.get() {
            wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Touch::{Read, Untouched, Written};

    #[test]
    fn most_pre_faults_a_page_for_what_most_runs_did_to_it() {
        let profile = PageProfile::new(Threshold::Most);
        profile.add(vec![Written, Written, Read, Untouched]);
        assert_eq!(profile.habit(), [Written, Written, Read, Untouched]);
        profile.add(vec![Written, Read, Untouched, Untouched]);
        // Half is not most: page 1 was written by one run of two, but touched by both; page 2
        // was touched by one.
        assert_eq!(profile.habit(), [Written, Read, Untouched, Untouched]);
        profile.add(vec![Written, Written, Read, Written]);
        // Two runs of three wrote page 1 and touched page 2; one wrote page 3.
        assert_eq!(profile.habit(), [Written, Written, Read, Untouched]);
    }

    #[test]
    fn any_pre_faults_every_page_a_recent_run_wrote_or_read() {
        let profile = PageProfile::new(Threshold::Any);
        profile.add(vec![Written, Untouched, Read, Untouched]);
        profile.add(vec![Read, Untouched, Untouched, Written]);
        assert_eq!(profile.habit(), [Written, Untouched, Read, Written]);
    }

    #[test]
    fn the_counts_follow_what_the_process_runs_now() {
        // Most: a new kind of script takes over within a few dozen runs, not hundreds.
        let profile = PageProfile::new(Threshold::Most);
        for _ in 0..HALF_LIFE {
            profile.add(vec![Written, Untouched]);
        }
        let mut runs = 0;
        while profile.habit() != [Untouched, Written] {
            profile.add(vec![Untouched, Written]);
            runs += 1;
            assert!(runs <= HALF_LIFE, "still {:?}", profile.habit());
        }
        assert!(runs > 1);
        // Any: the new page at once, and the old one once no run has written it for long.
        let profile = PageProfile::new(Threshold::Any);
        for _ in 0..HALF_LIFE {
            profile.add(vec![Written, Untouched]);
        }
        profile.add(vec![Untouched, Written]);
        assert_eq!(profile.habit(), [Written, Written]);
        let mut runs = 1;
        while profile.habit() != [Untouched, Written] {
            profile.add(vec![Untouched, Written]);
            runs += 1;
            assert!(runs <= 8 * HALF_LIFE, "still {:?}", profile.habit());
        }
    }

    #[test]
    fn a_memory_of_another_size_starts_the_profile_again() {
        let profile = PageProfile::new(Threshold::Most);
        profile.add(vec![Written, Written]);
        profile.add(vec![Untouched, Read, Written]);
        assert_eq!(profile.habit(), [Untouched, Read, Written]);
        assert_eq!(profile.runs(), 1);
    }

    #[test]
    fn the_first_run_counted_wakes_whoever_waits_for_it_once() {
        let profile = PageProfile::new(Threshold::Any);
        let woken = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let count = std::sync::Arc::clone(&woken);
        profile.on_first_learnt(Box::new(move || {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }));
        assert!(!profile.has_learnt());
        profile.add(vec![Written]);
        profile.add(vec![Read]);
        assert!(profile.has_learnt());
        assert_eq!(woken.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn targets_are_byte_ranges_of_the_memory_asked_about() {
        let Some(page) = prefault::page_size() else {
            return;
        };
        let profile = PageProfile::new(Threshold::Any);
        assert_eq!(profile.targets(&(0..4 * page)), None, "nothing learnt yet");
        profile.add(vec![Written, Written, Read, Untouched]);
        let base = 1 << 30;
        let targets = profile.targets(&(base..base + 4 * page)).unwrap();
        let only = |ranges: &[Range<usize>]| match ranges {
            [range] => Some(range.clone()),
            _ => None,
        };
        assert_eq!(only(&targets.write), Some(base..base + 2 * page));
        assert_eq!(only(&targets.read), Some(base + 2 * page..base + 3 * page));
        assert_eq!(
            profile.targets(&(base..base + 2 * page)),
            None,
            "another size"
        );
    }
}
