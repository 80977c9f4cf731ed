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
//!
//! A process that runs one script (a one-shot `flowbox run`) would never count a run before
//! its own, so what a fresh run touched is also kept on disk beside the compiled guest, under
//! its key, and every later process starts its profile from it, as if it had counted that
//! run. The run kept is always a `return 1` made for the purpose ([`TRIVIAL`]), by the first
//! process that finds no such file, before its first fresh instance: the pages every run
//! touches, whatever its script. Kept from whichever run came first, they would be that
//! script's: kept from a 3000-leaf fan-out, they had every later one-shot process of `return 1`
//! copy ~1,700 pages instead of ~240, ~3.4 ms more a process. The kept run writes the file on
//! its own path as it ends (~0.1 ms, once per guest and cache directory): left to the thread
//! that drops stores, it would never be written by a process that exits straight after its run.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::prefault::{self, Access, Learner, Touch};
use super::profile::{PageProfile, Threshold};

/// One fresh instance in this many is not pre-faulted, and its run teaches the profile.
const SAMPLE: u64 = 16;

/// The script whose fresh run's pages are kept for later processes.
pub(crate) const TRIVIAL: &str = "return 1";

/// How many kept runs a process makes at most: one whose memory cannot be told apart (see
/// `Mappings::linear_memories_since`) keeps nothing, and the next fresh instance tries again.
const KEPT_RUN_TRIES: u8 = 3;

/// The first bytes of a file of kept pages; the number of pages and a newline follow, then a
/// byte per page (see [`page_byte`]). Version 2 holds a [`TRIVIAL`] run's pages; version 1
/// held the first run's, whatever its script, and is made again rather than read.
const PAGES_HEADER: &[u8] = b"flowbox pages 2 ";

/// The pre-faulting of a runtime's fresh instances.
pub(crate) struct FreshPrefault {
    profile: PageProfile,
    /// Fresh instances so far, for the sample.
    instances: AtomicU64,
    /// Where the next run counted is to be kept for later processes: the file of kept pages,
    /// until one is written or read.
    keep_at: Mutex<Option<PathBuf>>,
    /// Kept runs started so far (see [`KEPT_RUN_TRIES`]).
    kept_runs: AtomicU8,
}

impl Default for FreshPrefault {
    fn default() -> Self {
        Self {
            profile: PageProfile::new(Threshold::Most),
            instances: AtomicU64::new(0),
            keep_at: Mutex::new(None),
            kept_runs: AtomicU8::new(0),
        }
    }
}

impl FreshPrefault {
    /// A profile that starts from the pages kept at `path` when it holds them, and keeps the
    /// [`TRIVIAL`] run's there when it does not (a missing, damaged or foreign file). Only on
    /// Linux, where pages are pre-faulted and a run's can be read.
    pub(crate) fn kept_in(path: Option<PathBuf>) -> Self {
        let fresh = Self::default();
        if let Some(path) = path.filter(|_| cfg!(target_os = "linux")) {
            match std::fs::read(&path).ok().as_deref().and_then(read_pages) {
                Some(pages) => fresh.profile.add(pages),
                None => *fresh.keep_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(path),
            }
        }
        fresh
    }

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

    /// Whether no kept pages were found and none are kept yet.
    fn wants_kept_run(&self) -> bool {
        self.keep_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Whether the next fresh instance is to wait for a run of [`TRIVIAL`] first, for
    /// [`Keeper`] to keep: while none is kept, [`KEPT_RUN_TRIES`] times at most (the count
    /// stops there, never wrapping round to try again).
    pub(crate) fn take_kept_run(&self) -> bool {
        self.wants_kept_run()
            && self
                .kept_runs
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |tries| {
                    (tries < KEPT_RUN_TRIES).then_some(tries + 1)
                })
                .is_ok()
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

/// Runs' pages counted by the profile (no file is written from them).
impl Learner for FreshPrefault {
    fn add(&self, pages: Vec<Touch>) {
        self.profile.add(pages);
    }

    fn wants_now(&self) -> bool {
        false
    }
}

/// The learner of the [`TRIVIAL`] run made for the file of kept pages: it writes the file,
/// then counts the run as any other, both as the run ends so the run after it is pre-faulted.
pub(crate) struct Keeper(pub(crate) Arc<FreshPrefault>);

impl Learner for Keeper {
    fn add(&self, pages: Vec<Touch>) {
        let fresh = &self.0;
        let keep_at = fresh
            .keep_at
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(path) = keep_at
            && let Some(dir) = path.parent()
        {
            let mut bytes = PAGES_HEADER.to_vec();
            bytes.extend(format!("{}\n", pages.len()).bytes());
            bytes.extend(pages.iter().map(|touch| page_byte(*touch)));
            // An optimisation, like the compiled guest beside it: a file that cannot be
            // written is left for a later process to write. Not synced: one cut short by a
            // crash has fewer pages than it says, and is written again.
            let _ = crate::files::write_whole(dir, &path, &bytes, false);
        }
        fresh.profile.add(pages);
    }

    fn wants_now(&self) -> bool {
        true
    }
}

/// A page's byte in a file of kept pages.
fn page_byte(touch: Touch) -> u8 {
    match touch {
        Touch::Untouched => b'.',
        Touch::Read => b'r',
        Touch::Written => b'w',
    }
}

/// The pages a file of kept pages holds; `None` for anything else.
fn read_pages(bytes: &[u8]) -> Option<Vec<Touch>> {
    let rest = bytes.strip_prefix(PAGES_HEADER)?;
    let newline = rest.iter().position(|byte| *byte == b'\n')?;
    let count: usize = std::str::from_utf8(&rest[..newline]).ok()?.parse().ok()?;
    let body = &rest[newline + 1..];
    if count == 0 || body.len() != count {
        return None;
    }
    body.iter()
        .map(|byte| match byte {
            b'.' => Some(Touch::Untouched),
            b'r' => Some(Touch::Read),
            b'w' => Some(Touch::Written),
            _ => None,
        })
        .collect()
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
    fn the_kept_run_is_kept_for_the_next_process_which_starts_from_it() {
        use Touch::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("guest.pages");
        let first = Arc::new(FreshPrefault::kept_in(Some(path.clone())));
        assert_eq!(first.runs(), 0, "nothing kept yet");
        assert!(first.take_kept_run());
        // A script's run is counted, never kept: the file waits for the kept run, which is
        // tried again while none is kept, up to three times.
        first.add(vec![Written; 4]);
        assert!(!path.exists());
        assert!(first.take_kept_run());
        let keeper = Keeper(Arc::clone(&first));
        assert!(keeper.wants_now(), "its pages are wanted before it exits");
        keeper.add(vec![Written, Read, Untouched, Written]);
        assert_eq!(std::fs::read(&path).unwrap(), b"flowbox pages 2 4\nwr.w");
        assert!(!first.wants_kept_run());
        assert_eq!(first.runs(), 2, "and counted like the script's");
        assert!(!first.take_kept_run());
        // Only once.
        Keeper(Arc::clone(&first)).add(vec![Untouched; 4]);
        assert_eq!(std::fs::read(&path).unwrap(), b"flowbox pages 2 4\nwr.w");

        let next = FreshPrefault::kept_in(Some(path.clone()));
        assert_eq!(next.runs(), 1, "it starts as if it had counted that run");
        assert!(!next.take_kept_run());
        next.add(vec![Untouched; 4]);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"flowbox pages 2 4\nwr.w",
            "and keeps it"
        );

        // A damaged, foreign or version 1 file is not read, and the next kept run replaces it.
        let damaged: [&[u8]; 7] = [
            b"flowbox pages 1 2\nrw",
            b"flowbox pages 2 2\nwx",
            b"flowbox pages 2 4\nwr",
            b"flowbox pages 2 0\n",
            b"flowbox pages 2\nwr",
            b"wr.w",
            b"",
        ];
        for damaged in damaged {
            std::fs::write(&path, damaged).unwrap();
            let fresh = Arc::new(FreshPrefault::kept_in(Some(path.clone())));
            assert_eq!(fresh.runs(), 0, "{damaged:?}");
            assert!(fresh.take_kept_run(), "{damaged:?}");
            Keeper(fresh).add(vec![Read, Written]);
            assert_eq!(std::fs::read(&path).unwrap(), b"flowbox pages 2 2\nrw");
        }
        // A process whose kept runs keep nothing (their memory cannot be told apart) gives up
        // after three, for good.
        let stubborn = FreshPrefault::kept_in(Some(dir.path().join("other.pages")));
        let tries: Vec<bool> = (0..600).map(|_| stubborn.take_kept_run()).collect();
        assert_eq!(tries[..3], [true; 3]);
        assert!(!tries[3..].contains(&true));
        // Without a cache directory nothing is kept, and no run is made for it.
        let nowhere = Arc::new(FreshPrefault::kept_in(None));
        assert!(!nowhere.take_kept_run());
        Keeper(Arc::clone(&nowhere)).add(vec![Written]);
        assert_eq!(nowhere.runs(), 1);
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
