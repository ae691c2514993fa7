//! Huge pages under the engine's large buffers.
//!
//! A search jumps between records spread over buffers of tens to hundreds of
//! megabytes (the walk's codes, the ranking copy, the level-0 lists). With
//! 4 KiB pages nearly every record it reads also misses the TLB, and right
//! after an embedding model has run (what `search(text)` does) the page-table
//! walks miss the caches too; 2 MiB pages cover the same buffers with a few
//! hundred entries. The kernel is asked to collapse a buffer's pages once it
//! is written (`MADV_COLLAPSE`, Linux 6.1), a slice at a time, from the
//! store's background thread: the same advice given at allocation made a
//! million memories' open take two to three times as long, its page faults
//! waiting for the kernel to find whole huge pages (benches/README.md).
//!
//! Collapsing moves a page's bytes, never changes them, and needs nothing of
//! the threads reading or writing it meanwhile; where the kernel cannot (an
//! older one, huge pages turned off, no free huge page), the advice is
//! declined and the buffer keeps its small pages.

use std::ops::Range;

pub const HUGE_PAGE: usize = 2 << 20;

/// A buffer's address and the length of its written part (the capacity
/// beyond it is left alone: collapsing it would fill untouched memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub addr: usize,
    pub len: usize,
}

impl Region {
    pub fn of<T>(items: &[T]) -> Region {
        Region {
            addr: items.as_ptr() as usize,
            len: std::mem::size_of_val(items),
        }
    }

    /// The addresses of the whole huge pages inside it.
    fn huge_pages(&self) -> Range<usize> {
        let start = self.addr.next_multiple_of(HUGE_PAGE);
        let end = (self.addr + self.len) & !(HUGE_PAGE - 1);
        start..end.max(start)
    }
}

/// How far the pages of each buffer were collapsed: the buffers are given in
/// the same order every time, and one that moved (grown into a new
/// allocation) starts again from its first page.
#[derive(Default)]
pub struct Settler {
    done: Vec<(usize, usize)>,
}

impl Settler {
    /// Collapses at most `budget` bytes of the pages not yet asked for, in
    /// `regions`' order; returns how many bytes remain.
    pub fn step(&mut self, regions: &[Region], budget: usize) -> usize {
        self.done.resize(regions.len(), (0, 0));
        let mut budget = budget;
        let mut left = 0;
        for (region, done) in regions.iter().zip(&mut self.done) {
            let pages = region.huge_pages();
            if done.0 != region.addr || !pages.contains(&done.1) && done.1 != pages.end {
                *done = (region.addr, pages.start);
            }
            let upto = (done.1 + budget.min(pages.end - done.1)) & !(HUGE_PAGE - 1);
            if upto > done.1 {
                collapse(done.1, upto - done.1);
                budget -= upto - done.1;
                done.1 = upto;
            }
            left += pages.end - done.1;
        }
        left
    }
}

/// `MADV_COLLAPSE` in glibc's and musl's Linux headers from 6.1 on; the libc
/// crate names it for glibc targets only.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// Asks for the whole huge pages in `len` bytes from `addr` to be backed by
/// huge pages, each only if every small page of it is in memory: a page never
/// written (a column of zeros the allocator got zeroed from the kernel) costs
/// nothing until then, and collapsing it would add its 2 MiB to the process.
/// Whether the kernel could is not needed by anyone.
fn collapse(addr: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let small = 4096;
        let mut resident = vec![0u8; HUGE_PAGE / small];
        for page in (addr..addr + len).step_by(HUGE_PAGE) {
            let page = page as *mut libc::c_void;
            // SAFETY: the range lies in a live allocation the caller holds (a
            // buffer of an engine under its lock), `resident` has a byte for
            // each of its small pages, and the advice changes no byte of it.
            unsafe {
                if libc::mincore(page, HUGE_PAGE, resident.as_mut_ptr()) == 0
                    && resident.iter().all(|&r| r & 1 == 1)
                {
                    libc::madvise(page, HUGE_PAGE, MADV_COLLAPSE);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes of `bytes`' whole small pages that are on huge pages, where the
    /// kernel says (`/proc/self/smaps` counts them per mapping, so the pages
    /// are first given a mapping of their own: a flag no neighbour shares).
    fn huge_pages_backing(bytes: &[u8]) -> Option<usize> {
        let small = 4096;
        let start = (bytes.as_ptr() as usize).next_multiple_of(small);
        let end = (bytes.as_ptr() as usize + bytes.len()) & !(small - 1);
        // SAFETY: the range lies in `bytes`; the flag only keeps a forked
        // child from inheriting it.
        if unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTFORK) }
            != 0
        {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let header = format!("{start:x}-{end:x} ");
        let mut lines = maps.lines().skip_while(|l| !l.starts_with(&header)).skip(1);
        let kb = lines.find_map(|l| l.strip_prefix("AnonHugePages:"))?;
        Some(
            kb.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .ok()?
                << 10,
        )
    }

    #[test]
    fn a_step_collapses_whole_pages_within_its_budget_and_counts_the_rest() {
        let buf: Vec<u8> = (0..9 * HUGE_PAGE).map(|i| (i % 251) as u8).collect();
        let region = Region::of(&buf);
        let pages = region.huge_pages();
        assert!(pages.len() >= 8 * HUGE_PAGE);
        let mut settler = Settler::default();
        let total = pages.len();
        // A budget under a page asks for nothing.
        assert_eq!(settler.step(&[region], HUGE_PAGE - 1), total);
        assert_eq!(
            settler.step(&[region], 3 * HUGE_PAGE),
            total - 3 * HUGE_PAGE
        );
        assert_eq!(settler.step(&[region], usize::MAX), 0);
        assert_eq!(settler.step(&[region], usize::MAX), 0);
        // The bytes are as written, whatever the kernel did.
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        // Where the kernel collapses on request, the pages asked for are huge.
        if let Some(backed) = huge_pages_backing(&buf) {
            assert!(backed == 0 || backed >= 8 * HUGE_PAGE, "{backed}");
        }
    }

    #[test]
    fn pages_partly_never_written_are_left_unbacked() {
        // A mapping of its own (the allocator may hand out memory another test
        // wrote and freed), and only each 2 MiB page's first small page
        // written: the others are not in memory.
        let len = 9 * HUGE_PAGE;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        // SAFETY: the mapping is `len` bytes, readable and writable, and only
        // this test holds it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(addr.cast::<u8>(), len) };
        let first = (addr as usize).next_multiple_of(HUGE_PAGE) - addr as usize;
        let written = (first..len).step_by(HUGE_PAGE).count();
        for page in (first..len).step_by(HUGE_PAGE) {
            bytes[page] = 1;
        }
        let mut settler = Settler::default();
        assert_eq!(settler.step(&[Region::of(bytes)], usize::MAX), 0);
        if let Some(backed) = huge_pages_backing(bytes) {
            assert_eq!(backed, 0);
        }
        assert_eq!(bytes.iter().map(|&b| b as usize).sum::<usize>(), written);
        // SAFETY: the mapping made above, no longer borrowed.
        assert_eq!(unsafe { libc::munmap(addr, len) }, 0);
    }

    #[test]
    fn a_buffer_that_moved_or_grew_is_settled_from_where_it_stands() {
        let a: Vec<u8> = vec![1; 5 * HUGE_PAGE];
        let b: Vec<u8> = vec![2; 7 * HUGE_PAGE];
        let mut settler = Settler::default();
        let (ra, rb) = (Region::of(&a), Region::of(&b));
        let (na, nb) = (ra.huge_pages().len(), rb.huge_pages().len());
        // In order: the first buffer's pages before the second's.
        assert_eq!(settler.step(&[ra, rb], na), nb);
        assert_eq!(settler.step(&[ra, rb], usize::MAX), 0);
        // The first grew in place: only its new pages are left.
        let grown = Region {
            len: ra.len + 2 * HUGE_PAGE,
            ..ra
        };
        assert_eq!(settler.step(&[grown, rb], 0), 2 * HUGE_PAGE);
        // It moved: all of it again.
        let c: Vec<u8> = vec![3; 5 * HUGE_PAGE];
        let rc = Region::of(&c);
        assert_eq!(settler.step(&[rc, rb], 0), rc.huge_pages().len());
        // It shrank below where settling stood: from its start again.
        let shrunk = Region {
            len: HUGE_PAGE,
            ..rc
        };
        assert_eq!(settler.step(&[shrunk, rb], 0), shrunk.huge_pages().len());
    }

    #[test]
    fn a_region_without_a_whole_huge_page_has_nothing_to_settle() {
        let small = [0u8; 4096];
        let mut settler = Settler::default();
        assert_eq!(settler.step(&[Region::of(&small)], usize::MAX), 0);
        assert_eq!(settler.step(&[], usize::MAX), 0);
    }
}
