//! Pre-faulting a pooled instance's linear memory, so that its run does not take the page
//! faults of the guest's first writes to its copy-on-write memory image.
//!
//! The component API gives the host no handle on the guest's core memory, so the warm pool
//! finds it in the process's memory map (`/proc/self/maps`), read before and after
//! instantiating: writable private mappings grouped into contiguous runs, of which a linear
//! memory is a run that holds a file-backed part (the memory image, mapped from the compiled
//! guest), is no larger than the memory instantiation created, and is new: a range that was
//! not mapped before. So that a store dropped meanwhile cannot leave its range to the new
//! memory (which would then look old), stores are dropped while the pool is not comparing
//! (`hold_unmapping`, taken by `retire::unmap`): finished runs' stores and a stopped pool's
//! instances. (A store that goes without a run, when handing a pooled instance over fails,
//! may still be dropped at that moment: that costs the new instance its pre-faulting, nothing
//! else.) (`/proc/self/smaps`, which
//! also says how much of each mapping was written, took ~50 times as long to read: 6.8 ms
//! with 100 runs in flight.)
//!
//! `madvise(MADV_POPULATE_WRITE)` then breaks the copy-on-write of its pages, as a write
//! would, without writing: the contents stay exactly what instantiation left, so no guest code
//! runs and a run's fuel is what it is in a fresh instance. Pre-faulting all of the memory
//! copies every page of the image, most of which a run never writes; so the pool also reads
//! from `/proc/self/pagemap`, after each of its runs, which pages the run wrote and which it
//! only read (`touched_pages`), and, once one has, pre-faults those: the written ones for
//! writing, the read ones for reading (mapping the file's page, which copies nothing).
//! The same reading of the page map, after each run a fresh instance serves, teaches the
//! runtime's profile of its fresh instances, by which they are pre-faulted on the request path
//! (`fresh`); both are a `profile::PageProfile`.
//! Linux only (5.14 or later); elsewhere nothing is pre-faulted.

use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

/// What `madvise` is asked to populate at a time, so that the refill thread can make way for
/// runs in between.
const CHUNK: usize = 1 << 20;

/// One mapping of `/proc/self/maps`, when it is writable and private.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    range: Range<usize>,
    /// Backed by a file (or a memfd) rather than anonymous memory.
    file: bool,
}

/// Held while the pool compares the memory map around an instantiation, and while the thread
/// that retires finished runs drops a store: no memory is unmapped, and so no range freed for
/// a new one, in between the two readings.
pub(crate) fn hold_unmapping() -> MutexGuard<'static, ()> {
    static UNMAPPING: Mutex<()> = Mutex::new(());
    UNMAPPING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Room for a process's memory map in one read: ~100 mappings of ~100 bytes, with a margin.
const MAPS_BYTES: usize = 64 << 10;

/// The process's writable private mappings at one moment.
#[derive(Debug, Default)]
pub(crate) struct Mappings(Vec<Mapping>);

impl Mappings {
    /// The mappings now; none where the memory map cannot be read (or outside Linux).
    pub(crate) fn now() -> Self {
        if !cfg!(target_os = "linux") {
            return Self::default();
        }
        // Into room for the whole map at once: the kernel walks the mappings again for every
        // read, and `read_to_string` alone starts with 32 bytes and doubles (~10 reads).
        let mut maps = String::with_capacity(MAPS_BYTES);
        std::fs::File::open("/proc/self/maps")
            .and_then(|mut file| std::io::Read::read_to_string(&mut file, &mut maps))
            .map(|_| Self::parse(&maps))
            .unwrap_or_default()
    }

    fn parse(maps: &str) -> Self {
        let mappings = maps
            .lines()
            .filter_map(|line| {
                // `start-end perms offset dev inode [path]`
                let mut fields = line.split_whitespace();
                let (start, end) = fields.next()?.split_once('-')?;
                let range =
                    usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?;
                let perms = fields.next()?;
                let inode = fields.nth(2)?;
                (perms == "rw-p").then(|| Mapping {
                    range,
                    file: inode != "0",
                })
            })
            .collect();
        Self(mappings)
    }

    /// Whether `mapping`'s range was not mapped here.
    fn lacks(&self, mapping: &Mapping) -> bool {
        !self.0.iter().any(|m| m.range == mapping.range)
    }

    /// The linear memories that are new since `before`: each a contiguous run of mappings,
    /// at least one of them new, that holds a file-backed part and spans at most
    /// `memory_bytes`. Another thread's instantiation at the same moment may add one too;
    /// pre-faulting it as well changes nothing in it, as pre-faulting never changes contents.
    pub(crate) fn linear_memories_since(
        &self,
        before: &Self,
        memory_bytes: u64,
    ) -> Vec<Range<usize>> {
        /// A run of contiguous mappings: its range, whether it holds a file-backed part and
        /// whether it holds a new one.
        struct Run {
            range: Range<usize>,
            file: bool,
            new: bool,
        }
        let mut memories = Vec::new();
        let mut close = |run: Option<Run>| {
            if let Some(run) = run
                && run.file
                && run.new
                && u64::try_from(run.range.len()).is_ok_and(|len| len <= memory_bytes)
            {
                memories.push(run.range);
            }
        };
        let mut run: Option<Run> = None;
        for mapping in &self.0 {
            let new = before.lacks(mapping);
            run = match run {
                Some(r) if r.range.end == mapping.range.start => Some(Run {
                    range: r.range.start..mapping.range.end,
                    file: r.file || mapping.file,
                    new: r.new || new,
                }),
                other => {
                    close(other);
                    Some(Run {
                        range: mapping.range.clone(),
                        file: mapping.file,
                        new,
                    })
                }
            };
        }
        close(run);
        memories
    }
}

/// What a run did to a page of its linear memory, as the page map shows it afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Touch {
    Untouched,
    /// Mapped from the file (the memory image) and only read.
    Read,
    /// Private: written (or, rarely, zeros read where the image has none).
    Written,
}

/// What learns from the pages runs touched: the warm pool's profile, a runtime's profile of its
/// fresh runs.
pub(crate) trait Learner: Send + Sync {
    /// Adds what one run did to each page of its linear memory.
    fn add(&self, pages: Vec<Touch>);

    /// Whether it wants the next run's pages before the process may exit: read as the run
    /// ends, on its own path, rather than when its store is dropped.
    fn wants_now(&self) -> bool {
        false
    }
}

/// Where a run's linear memory is, for `learner` to learn what the run did to it.
pub(crate) struct TouchedPages {
    pub(crate) memories: Vec<Range<usize>>,
    pub(crate) learner: Arc<dyn Learner>,
}

impl TouchedPages {
    /// Reads which pages of the memory were written and which read, for the learner; only
    /// while the run's store, and so its memory, is alive.
    pub(crate) fn learn(self) {
        if let Some(touched) = touched_pages(&self.memories) {
            self.learner.add(touched);
        }
    }
}

/// How a page is to be faulted in: mapped for reading (the file's page, shared, no copy), or
/// copied for writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// Pre-faults `ranges` for `access`, a chunk at a time, calling `go_on` after each chunk;
/// returns the bytes pre-faulted. Stops when `go_on` says false; leaves the rest of a range
/// the kernel refuses (one that went away, or a kernel without `MADV_POPULATE_WRITE`).
pub(crate) fn populate(
    ranges: &[Range<usize>],
    access: Access,
    mut go_on: impl FnMut() -> bool,
) -> u64 {
    let mut done = 0u64;
    for range in ranges {
        let mut start = range.start;
        while start < range.end {
            let len = CHUNK.min(range.end - start);
            if !populate_pages(start, len, access) {
                break;
            }
            done += len as u64;
            start += len;
            if !go_on() {
                return done;
            }
        }
    }
    done
}

/// What has been done so far to each page of `ranges`, the ranges one after the other; `None`
/// where the page map cannot be read. Its flags are readable without privileges (only page
/// frame numbers are hidden).
pub(crate) fn touched_pages(ranges: &[Range<usize>]) -> Option<Vec<Touch>> {
    use std::io::{Read, Seek, SeekFrom};
    /// Page-map entry bits: the page is present; it is a file page or shared anonymous.
    const PRESENT: u64 = 1 << 63;
    const FILE_OR_SHARED: u64 = 1 << 61;
    let page = page_size()?;
    let mut map = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut touched = Vec::new();
    for range in ranges {
        map.seek(SeekFrom::Start(u64::try_from(range.start / page * 8).ok()?))
            .ok()?;
        let mut entries = vec![0u8; range.len() / page * 8];
        map.read_exact(&mut entries).ok()?;
        touched.extend(entries.chunks_exact(8).map(|entry| {
            let entry = u64::from_ne_bytes(entry.try_into().unwrap_or_default());
            match (entry & PRESENT != 0, entry & FILE_OR_SHARED != 0) {
                (false, _) => Touch::Untouched,
                (true, true) => Touch::Read,
                (true, false) => Touch::Written,
            }
        }));
    }
    Some(touched)
}

/// The parts of `ranges` (one after the other) whose pages `pages` says were touched as
/// `touch`, coalesced; `None` when `pages` does not have one entry per page of them.
pub(crate) fn flagged(
    ranges: &[Range<usize>],
    pages: &[Touch],
    touch: Touch,
) -> Option<Vec<Range<usize>>> {
    let page = page_size()?;
    let total: usize = ranges.iter().map(|r| r.len() / page).sum();
    if total != pages.len() {
        return None;
    }
    let mut flagged: Vec<Range<usize>> = Vec::new();
    let mut flags = pages.iter();
    for range in ranges {
        for start in (range.start..range.end).step_by(page) {
            if flags.next() != Some(&touch) {
                continue;
            }
            match flagged.last_mut() {
                Some(last) if last.end == start => last.end = start + page,
                _ => flagged.push(start..start + page),
            }
        }
    }
    Some(flagged)
}

#[cfg(target_os = "linux")]
#[expect(unsafe_code, reason = "sysconf is the way to ask for the page size")]
pub(crate) fn page_size() -> Option<usize> {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|size| *size > 0)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn page_size() -> Option<usize> {
    None
}

#[cfg(target_os = "linux")]
#[expect(
    unsafe_code,
    reason = "madvise(MADV_POPULATE_WRITE) is the one way to break copy-on-write without writing"
)]
fn populate_pages(start: usize, len: usize, access: Access) -> bool {
    let advice = match access {
        Access::Read => libc::MADV_POPULATE_READ,
        Access::Write => libc::MADV_POPULATE_WRITE,
    };
    // SAFETY: MADV_POPULATE_READ and _WRITE fault pages in as a read or a write would but
    // read and write nothing, so they change no memory the program can observe, whatever the
    // range holds; a range that is not (or no longer) mapped so makes the call fail with an
    // error, not a signal.
    let result = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
    result == 0
}

#[cfg(not(target_os = "linux"))]
fn populate_pages(_start: usize, _len: usize, _access: Access) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/maps` text for these mappings.
    fn maps(mappings: &[&str]) -> Mappings {
        Mappings::parse(&mappings.join("\n"))
    }

    const HEAP: &str = "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0 [heap]";
    const GROWN_HEAP: &str = "55d0c0000000-55d0c0042000 rw-p 00000000 00:00 0 [heap]";
    /// A linear memory: anonymous, then the image from the guest file, then anonymous again.
    const MEMORY: [&str; 3] = [
        "7f1000000000-7f10000ee000 rw-p 00000000 00:00 0",
        "7f10000ee000-7f1000c60000 rw-p 01a2b000 fd:01 1234 /cache/guest.cwasm",
        "7f1000c60000-7f1000c70000 rw-p 00000000 00:00 0",
    ];
    const MEMORY_BYTES: u64 = 0xc70000;
    const GUARD: &str = "7f1000c70000-7f1100000000 ---p 00000000 00:00 0";
    const READ_ONLY: &str = "7f2000000000-7f2000010000 r--p 00000000 fd:01 1234 /cache/guest.cwasm";
    const STACK: &str = "7f3000000000-7f3000600000 rw-p 00000000 00:00 0";

    fn before() -> Mappings {
        maps(&[HEAP])
    }

    /// Instantiation added a linear memory, its guard, a read-only part of the file and an
    /// anonymous fiber stack, and the heap grew.
    fn after() -> Mappings {
        maps(&[
            GROWN_HEAP, MEMORY[0], MEMORY[1], MEMORY[2], GUARD, READ_ONLY, STACK,
        ])
    }

    #[test]
    fn the_linear_memory_is_the_new_run_of_mappings_that_holds_the_image() {
        let memories = after().linear_memories_since(&before(), MEMORY_BYTES);
        assert_eq!(memories, vec![0x7f1000000000..0x7f1000c70000]);
    }

    #[test]
    fn a_run_larger_than_the_memory_instantiation_created_is_left_alone() {
        let memories = after().linear_memories_since(&before(), MEMORY_BYTES - 1);
        assert!(memories.is_empty());
    }

    #[test]
    fn a_memory_that_was_there_before_is_never_chosen() {
        assert!(after().linear_memories_since(&after(), u64::MAX).is_empty());
    }

    #[test]
    fn a_memory_grown_meanwhile_counts_as_new() {
        // Its last mapping now ends further on: pre-faulting it too changes nothing in it.
        let grown = maps(&[
            MEMORY[0],
            MEMORY[1],
            "7f1000c60000-7f1000c80000 rw-p 00000000 00:00 0",
        ]);
        let memories = grown.linear_memories_since(&maps(&MEMORY), u64::MAX);
        assert_eq!(memories, vec![0x7f1000000000..0x7f1000c80000]);
    }

    #[test]
    fn anonymous_mappings_alone_are_not_a_linear_memory() {
        let memories = maps(&[STACK]).linear_memories_since(&Mappings::default(), u64::MAX);
        assert!(memories.is_empty());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn an_instantiation_s_memory_is_found_in_this_process() {
        // (module (memory 4) (export "m" (memory 0)) (data (i32.const 0) "image"))
        const MODULE: &[u8] = &[
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
            0x05, 0x03, 0x01, 0x00, 0x04, // one memory of 4 pages
            0x07, 0x05, 0x01, 0x01, b'm', 0x02, 0x00, // exported as "m"
            0x0b, 0x0b, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x05, b'i', b'm', b'a', b'g', b'e',
        ];
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, MODULE).unwrap();
        let _unmapping = hold_unmapping();
        let before = Mappings::now();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "m").unwrap();
        let base = memory.data_ptr(&store) as usize;
        let found = Mappings::now().linear_memories_since(&before, 4 << 16);
        assert!(
            found.iter().any(|range| range.contains(&base)),
            "{found:x?}"
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn flagged_pages_are_coalesced_across_ranges() {
        use Touch::{Read, Untouched, Written};
        let page = page_size().unwrap();
        let ranges = [0..3 * page, 10 * page..12 * page];
        let pages = [Written, Written, Read, Written, Untouched];
        assert_eq!(
            flagged(&ranges, &pages, Written).unwrap(),
            vec![0..2 * page, 10 * page..11 * page]
        );
        assert_eq!(
            flagged(&ranges, &pages, Read).unwrap(),
            vec![2 * page..3 * page]
        );
        // Adjacent ranges join up.
        let ranges = [0..page, page..2 * page];
        assert_eq!(
            flagged(&ranges, &[Written, Written], Written).unwrap(),
            vec![0..2 * page]
        );
        // Entries for another layout say nothing about this one.
        assert_eq!(flagged(&ranges, &[Written], Written), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn touched_pages_show_what_was_written() {
        let page = page_size().unwrap();
        // Past the allocator's largest threshold for mapping memory afresh (32 MiB), so its
        // pages are mapped only once written.
        let mut bytes = vec![0u8; 64 << 20];
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        let offset = start - bytes.as_ptr() as usize;
        bytes[offset + 5 * page] = 1;
        bytes[offset + 9 * page + 17] = 2;
        let touched = touched_pages(std::slice::from_ref(&(start..start + 32 * page))).unwrap();
        assert_eq!(touched.len(), 32);
        assert_eq!((touched[5], touched[9]), (Touch::Written, Touch::Written));
        assert_eq!(touched[20], Touch::Untouched);
        assert_eq!(bytes[offset + 5 * page], 1);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_has_writable_mappings() {
        assert!(!Mappings::now().0.is_empty());
    }

    #[test]
    fn populating_nothing_mapped_stops_without_harm() {
        // Address 4096 is never mapped in a Linux process (`vm.mmap_min_addr`).
        let mut chunks = 0;
        assert_eq!(
            populate(std::slice::from_ref(&(4096..8192)), Access::Write, || {
                chunks += 1;
                true
            }),
            0
        );
        assert_eq!(chunks, 0);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn populating_keeps_the_contents() {
        let mut bytes = vec![0u8; 3 << 20];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = (i % 251) as u8;
        }
        let page = 4096;
        let start = (bytes.as_ptr() as usize).div_ceil(page) * page;
        let end = (bytes.as_ptr() as usize + bytes.len()) / page * page;
        let mut chunks = 0;
        let done = populate(std::slice::from_ref(&(start..end)), Access::Write, || {
            chunks += 1;
            true
        });
        assert_eq!(done, (end - start) as u64);
        assert_eq!(chunks, (end - start).div_ceil(CHUNK));
        assert!(bytes.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
    }
}
