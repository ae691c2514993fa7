//! Giving the allocator's free memory back to the system after a burst of
//! temporary buffers.

/// Returns the heap's free pages to the system, where the allocator keeps
/// them otherwise: an open's decoding buffers (some 50 MB at a million
/// vectors) stay in the process's resident set once freed, as glibc trims
/// only the top of its main heap on its own.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
