//! A thread pool for work nobody waits on (linking parked vectors into the
//! graph while a store is loaded), whose threads run at a lower priority
//! than the process's other threads: a search or a write that arrives while
//! a batch links gets a core at once instead of a share of one.

use std::sync::OnceLock;

use rayon::{ThreadPool, ThreadPoolBuilder};

fn pool() -> Option<&'static ThreadPool> {
    static POOL: OnceLock<Option<ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        ThreadPoolBuilder::new()
            .thread_name(|i| format!("memlane-link-{i}"))
            .start_handler(|_| lower_priority())
            .build()
            .ok()
    })
    .as_ref()
}

/// Runs `f` on the pool (its parallel iterators too), or here if the pool
/// could not be started.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Some(p) => p.install(f),
        None => f(),
    }
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // 0 is the default niceness, 19 the lowest priority.
    const NICE: i32 = 10;
    // On Linux each thread has its own niceness; elsewhere this call would
    // change the whole process's, so it is made here only.
    // SAFETY: setpriority has no memory effects; a failure leaves the
    // thread at the default priority, which is merely slower to yield.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE);
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    fn niceness() -> i32 {
        // SAFETY: getpriority only reads the thread's niceness.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn work_runs_below_the_callers_priority_and_the_caller_keeps_its_own() {
        use rayon::prelude::*;
        let mine = niceness();
        let theirs: Vec<i32> = super::run(|| (0..64).into_par_iter().map(|_| niceness()).collect());
        assert!(theirs.iter().all(|&n| n > mine), "{theirs:?} vs {mine}");
        assert_eq!(niceness(), mine);
    }
}
