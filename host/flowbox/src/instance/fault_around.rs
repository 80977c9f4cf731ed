//! One page per read fault in the guest's linear memories.
//!
//! A run reads its memory image (mapped copy-on-write from the compiled guest) a page here
//! and a page there. On a read fault in a file-backed mapping, Linux maps not just that page
//! but every cached page of the file around it (its "fault-around", 64 KiB by default), and
//! resident memory counts each such page once for every run that maps it, though the page
//! cache holds it once. Measured on a run with ten leaves in flight: 1382 pages of the image
//! mapped (5.4 MiB) with fault-around, 238 without, beside the 569 it wrote either way.
//!
//! Linux skips fault-around in a mapping registered with a userfaultfd for write protection.
//! So each new linear memory is registered with one userfaultfd that the process opens once
//! and keeps, in write-protect mode with the kernel resolving protected writes itself
//! (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7), and no page is ever write-protected: no fault waits
//! on anyone, the descriptor never has an event to read, and nothing changes but how many
//! pages a read fault maps. Only user-mode faults are asked for, which needs no privilege.
//! Where the kernel refuses (an older one, or a sandbox without userfaultfd), memories keep
//! fault-around and only resident memory differs. Registration ends with the mapping.

use std::ops::Range;

/// Turns fault-around off for `ranges`, each a linear memory's mappings (page-aligned);
/// returns whether it did for all of them.
pub(crate) fn turn_off(ranges: &[Range<usize>]) -> bool {
    imp::turn_off(ranges)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ops::Range;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::OnceLock;

    /// `UFFD_API`, the only version of the interface.
    const API: u64 = 0xAA;
    /// `UFFD_FEATURE_WP_ASYNC`: the kernel lifts write protection itself on a write.
    const FEATURE_WP_ASYNC: u64 = 1 << 15;
    /// `UFFD_USER_MODE_ONLY`: handle faults from user mode only (unprivileged).
    const USER_MODE_ONLY: libc::c_long = 1;
    /// `UFFDIO_REGISTER_MODE_WP`.
    const MODE_WP: u64 = 1 << 1;

    /// `struct uffdio_api`.
    #[repr(C)]
    struct ApiRequest {
        api: u64,
        features: u64,
        ioctls: u64,
    }

    /// `struct uffdio_register`: the range, then the mode and the ioctls it allows.
    #[repr(C)]
    struct RegisterRequest {
        start: u64,
        len: u64,
        mode: u64,
        ioctls: u64,
    }

    /// `_IOWR(0xAA, nr, size)` in the encoding of x86, Arm and RISC-V; elsewhere the numbers
    /// name no userfaultfd request, which the kernel refuses, and nothing is registered.
    const fn request(nr: u64, size: usize) -> u64 {
        (3 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
    }
    const UFFDIO_API: u64 = request(0x3F, size_of::<ApiRequest>());
    const UFFDIO_REGISTER: u64 = request(0x00, size_of::<RegisterRequest>());

    pub(super) fn turn_off(ranges: &[Range<usize>]) -> bool {
        let Some(fd) = userfaultfd() else {
            return false;
        };
        // Every range is tried, whatever became of the one before.
        let mut all = true;
        for range in ranges {
            all &= register(fd, range);
        }
        all
    }

    /// The process's userfaultfd, opened on first use and never closed (closing it would end
    /// every registration); `None` where the kernel refuses it.
    fn userfaultfd() -> Option<&'static OwnedFd> {
        static FD: OnceLock<Option<OwnedFd>> = OnceLock::new();
        FD.get_or_init(open).as_ref()
    }

    #[expect(
        unsafe_code,
        reason = "userfaultfd has no wrapper: a raw system call and an ioctl"
    )]
    fn open() -> Option<OwnedFd> {
        let flags = libc::c_long::from(libc::O_CLOEXEC | libc::O_NONBLOCK) | USER_MODE_ONLY;
        // SAFETY: userfaultfd takes flags only and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
        // SAFETY: `fd` was just returned to us open and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut api = ApiRequest {
            api: API,
            features: FEATURE_WP_ASYNC,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes the `uffdio_api` it is given, which `api` is.
        let done = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &raw mut api) };
        (done == 0).then_some(fd)
    }

    #[expect(unsafe_code, reason = "UFFDIO_REGISTER is an ioctl")]
    fn register(fd: &OwnedFd, range: &Range<usize>) -> bool {
        let mut register = RegisterRequest {
            start: range.start as u64,
            len: range.len() as u64,
            mode: MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes the `uffdio_register` it is given. It
        // changes no memory: a range not (or no longer) wholly mapped is refused with an
        // error, and write protection, which no page is ever given, is all it arms.
        let done = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_REGISTER as _, &raw mut register) };
        done == 0
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn turn_off(_ranges: &[std::ops::Range<usize>]) -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::instance::prefault::{Touch, touched_pages};
    use std::io::Write;

    /// A private, writable mapping of `file`, as wasmtime maps a memory image.
    struct Mapped {
        start: usize,
        len: usize,
    }

    impl Mapped {
        #[expect(unsafe_code, reason = "mmap of a file the test owns")]
        fn new(file: &std::fs::File, len: usize) -> Self {
            use std::os::fd::AsRawFd;
            // SAFETY: a fresh mapping chosen by the kernel, overlapping nothing of ours.
            let start = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(start, libc::MAP_FAILED);
            Self {
                start: start as usize,
                len,
            }
        }

        #[expect(unsafe_code, reason = "reads and writes inside the mapping")]
        fn byte(&self, offset: usize) -> *mut u8 {
            assert!(offset < self.len);
            // SAFETY: `offset` is inside the mapping.
            unsafe { (self.start as *mut u8).add(offset) }
        }

        fn range(&self) -> Range<usize> {
            self.start..self.start + self.len
        }

        fn mapped_pages(&self) -> usize {
            touched_pages(std::slice::from_ref(&self.range()))
                .unwrap()
                .iter()
                .filter(|touch| **touch != Touch::Untouched)
                .count()
        }
    }

    impl Drop for Mapped {
        #[expect(unsafe_code, reason = "munmap of the test's own mapping")]
        fn drop(&mut self) {
            // SAFETY: the mapping is ours and nothing points into it any more.
            unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
        }
    }

    /// Whether this kernel offers asynchronous write protection (Linux 6.7 or later).
    fn kernel_has_wp_async() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release
            .split(['.', '-'])
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        version >= (6, 7)
    }

    #[test]
    #[expect(
        unsafe_code,
        reason = "reads and writes through the mapping's pointers"
    )]
    fn a_registered_mapping_maps_only_the_pages_read_and_keeps_its_contents() {
        const PAGE: usize = 4096;
        const PAGES: usize = 256;
        let mut file = tempfile::tempfile().unwrap();
        let contents: Vec<u8> = (0..PAGES * PAGE).map(|i| (i / PAGE) as u8).collect();
        file.write_all(&contents).unwrap();
        file.sync_all().unwrap();
        let reads = [3, 40, 41, 100, 200];
        let read_all = |mapped: &Mapped| {
            for page in reads {
                // SAFETY: inside the mapping.
                assert_eq!(unsafe { *mapped.byte(page * PAGE + 7) }, page as u8);
            }
        };

        // Without registration the kernel maps pages around each one read.
        let around = Mapped::new(&file, PAGES * PAGE);
        read_all(&around);

        let single = Mapped::new(&file, PAGES * PAGE);
        let registered = turn_off(std::slice::from_ref(&single.range()));
        if !kernel_has_wp_async() {
            assert!(!registered, "registered on a kernel without WP_ASYNC");
            return;
        }
        assert!(
            registered,
            "userfaultfd refused on a kernel that has it (a container's seccomp profile may block it)"
        );
        read_all(&single);
        assert_eq!(single.mapped_pages(), reads.len());
        assert!(around.mapped_pages() > reads.len());

        // Writes go through as before, copy-on-write, and read back.
        // SAFETY: inside the mapping.
        unsafe { *single.byte(40 * PAGE) = 0xEE };
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { *single.byte(40 * PAGE) }, 0xEE);
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { *single.byte(41 * PAGE) }, 41);
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { *around.byte(40 * PAGE) }, 40);
    }

    #[test]
    fn a_range_that_is_not_mapped_is_refused() {
        // Address 4096 is never mapped in a Linux process (`vm.mmap_min_addr`).
        assert!(!turn_off(std::slice::from_ref(&(4096..8192))));
    }
}
