//! Huge pages for the large arrays a search reads at random.
//!
//! A search reads a few thousand scattered cache lines of the vectors and of
//! the graph's lists, arrays of tens to hundreds of megabytes. With 4 KiB
//! pages nearly each of those reads also misses the TLB, which the embedding
//! model's run between two searches has emptied; 2 MiB pages cover the arrays
//! with a few hundred entries (benches/README.md, "The BM25 list while the
//! model runs, and huge pages"). Linux backs anonymous memory with huge pages
//! where it is advised to, which is what its default (`madvise`) setting of
//! transparent huge pages asks for.

/// Below this a buffer spans at most one huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Advises huge pages for the room `v` holds (its capacity), best effort:
/// called right after the buffer is allocated, before its pages are first
/// written, so that they are huge from the start.
pub(crate) fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity().saturating_mul(std::mem::size_of::<T>());
    if bytes < HUGE_PAGE {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let start = v.as_ptr() as usize;
        let (lo, hi) = (start.next_multiple_of(page), (start + bytes) / page * page);
        if hi > lo {
            // SAFETY: the range lies within `v`'s allocation, page-aligned;
            // the advice changes how its pages are backed, never their
            // contents. A refusal (a kernel without transparent huge pages)
            // leaves ordinary pages.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
            }
        }
    }
}
