//! Pre-faulting a pooled instance's linear memory, so that its run does not take the page
//! faults of the guest's first writes to its copy-on-write memory image.
//!
//! The component API gives the host no handle on the guest's core memory, so the warm pool
//! finds it in the process's memory map (`/proc/self/smaps`), read before and after
//! instantiating: writable private mappings grouped into contiguous runs, of which a linear
//! memory is a run that holds a file-backed part (the memory image, mapped from the compiled
//! guest), is no larger than the memory instantiation created, and is new. A mapping is new
//! when its range was not mapped before, or when it holds less anonymous (written) memory
//! than it did before: a store dropped meanwhile on another thread can leave its range to the
//! new memory, and a mapping that lives on never gives written pages back.
//!
//! `madvise(MADV_POPULATE_WRITE)` then breaks the copy-on-write of its pages, as a write
//! would, without writing: the contents stay exactly what instantiation left, so no guest code
//! runs and a run's fuel is what it is in a fresh instance. Pre-faulting all of the memory
//! copies every page of the image, most of which a run never writes; so the pool also reads
//! from `/proc/self/pagemap`, after each of its runs, which pages the run wrote and which it
//! only read (`touched_pages`), and, once one has, pre-faults those: the written ones for
//! writing, the read ones for reading (mapping the file's page, which copies nothing).
//! Linux only (5.14 or later); elsewhere nothing is pre-faulted.

use std::ops::Range;

/// What `madvise` is asked to populate at a time, so that the refill thread can make way for
/// runs in between.
const CHUNK: usize = 1 << 20;

/// One mapping of `/proc/self/smaps`, when it is writable and private.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    range: Range<usize>,
    /// Backed by a file (or a memfd) rather than anonymous memory.
    file: bool,
    /// Its pages that are anonymous: written (copied from the file, or zero-filled), in kB.
    anonymous_kb: u64,
}

/// The process's writable private mappings at one moment.
#[derive(Debug, Default)]
pub(crate) struct Mappings(Vec<Mapping>);

impl Mappings {
    /// The mappings now; none where the memory map cannot be read (or outside Linux).
    pub(crate) fn now() -> Self {
        if !cfg!(target_os = "linux") {
            return Self::default();
        }
        std::fs::read_to_string("/proc/self/smaps")
            .map(|smaps| Self::parse(&smaps))
            .unwrap_or_default()
    }

    fn parse(smaps: &str) -> Self {
        let mut mappings: Vec<Mapping> = Vec::new();
        // Whether the mapping the lines now belong to is one of those kept.
        let mut kept = false;
        for line in smaps.lines() {
            let mut fields = line.split_whitespace();
            let Some(first) = fields.next() else {
                continue;
            };
            if let Some(kb) = first.strip_suffix(':') {
                // `Key: value kB`, about the mapping above.
                if kept
                    && kb == "Anonymous"
                    && let Some(last) = mappings.last_mut()
                {
                    last.anonymous_kb = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
                }
                continue;
            }
            // A mapping: `start-end perms offset dev inode [path]`.
            let header = (|| {
                let (start, end) = first.split_once('-')?;
                let range =
                    usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?;
                let perms = fields.next()?;
                let inode = fields.nth(2)?;
                Some((range, perms == "rw-p", inode != "0"))
            })();
            kept = false;
            if let Some((range, true, file)) = header {
                mappings.push(Mapping {
                    range,
                    file,
                    anonymous_kb: 0,
                });
                kept = true;
            }
        }
        Self(mappings)
    }

    /// Whether `mapping` is not one of these: its range was not mapped here, or held more
    /// written memory here than it does now.
    fn lacks(&self, mapping: &Mapping) -> bool {
        !self
            .0
            .iter()
            .any(|m| m.range == mapping.range && m.anonymous_kb <= mapping.anonymous_kb)
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
fn page_size() -> Option<usize> {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|size| *size > 0)
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> Option<usize> {
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

    /// `/proc/self/smaps` text for mappings given as (header, anonymous kB).
    fn smaps(mappings: &[(&str, u64)]) -> Mappings {
        let text: String = mappings
            .iter()
            .map(|(header, anonymous)| {
                format!("{header}\nSize: 4 kB\nRss: 4 kB\nAnonymous: {anonymous} kB\nVmFlags: rd wr mr\n")
            })
            .collect();
        Mappings::parse(&text)
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
        smaps(&[(HEAP, 100)])
    }

    /// Instantiation added a linear memory, its guard, a read-only part of the file and an
    /// anonymous fiber stack, and the heap grew.
    fn after(memory_anonymous: u64) -> Mappings {
        smaps(&[
            (GROWN_HEAP, 120),
            (MEMORY[0], memory_anonymous),
            (MEMORY[1], memory_anonymous),
            (MEMORY[2], 0),
            (GUARD, 0),
            (READ_ONLY, 0),
            (STACK, 8),
        ])
    }

    #[test]
    fn the_linear_memory_is_the_new_run_of_mappings_that_holds_the_image() {
        let memories = after(4).linear_memories_since(&before(), MEMORY_BYTES);
        assert_eq!(memories, vec![0x7f1000000000..0x7f1000c70000]);
    }

    #[test]
    fn a_run_larger_than_the_memory_instantiation_created_is_left_alone() {
        let memories = after(4).linear_memories_since(&before(), MEMORY_BYTES - 1);
        assert!(memories.is_empty());
    }

    #[test]
    fn a_memory_that_was_there_before_and_lives_on_is_never_chosen() {
        // It lives on: it holds at least as much written memory as it did.
        let earlier = after(4);
        assert!(
            after(4)
                .linear_memories_since(&earlier, u64::MAX)
                .is_empty()
        );
        assert!(
            after(900)
                .linear_memories_since(&earlier, u64::MAX)
                .is_empty()
        );
    }

    #[test]
    fn a_new_memory_in_the_range_of_one_dropped_meanwhile_is_found() {
        // The one before had run (900 kB written); the new one, just instantiated, has not.
        let memories = after(4).linear_memories_since(&after(900), MEMORY_BYTES);
        assert_eq!(memories, vec![0x7f1000000000..0x7f1000c70000]);
    }

    #[test]
    fn anonymous_mappings_alone_are_not_a_linear_memory() {
        let memories = smaps(&[(STACK, 8)]).linear_memories_since(&Mappings::default(), u64::MAX);
        assert!(memories.is_empty());
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
