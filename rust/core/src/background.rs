//! A thread pool for work nobody waits on (linking parked vectors into the
//! graph while a store is loaded), whose threads run at a lower priority
//! than the process's other threads: a search or a write that arrives while
//! a batch links gets a core at once instead of a share of one.

use rayon::ThreadPoolBuilder;

use crate::pool::PerProcess;

static POOL: PerProcess = PerProcess::new(|| {
    ThreadPoolBuilder::new()
        .thread_name(|i| format!("memlane-link-{i}"))
        .start_handler(|_| lower_priority())
});

/// Runs `f` on the pool (its parallel iterators too), or here if the pool
/// could not be started.
pub fn run<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match POOL.get() {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Niceness runs from -20 to 19, the lowest priority.
#[cfg(target_os = "linux")]
const LOWEST: i32 = 19;

/// How much lower than its creator a pool thread runs.
#[cfg(target_os = "linux")]
const STEP: i32 = 10;

/// This thread's niceness, None if it cannot be read.
#[cfg(target_os = "linux")]
fn niceness() -> Option<i32> {
    // getpriority returns -1 both as a niceness and as an error: errno tells.
    // SAFETY: errno is this thread's own; getpriority only reads.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
        (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
    }
}

/// The niceness of a pool thread started by a thread of niceness `caller`:
/// lower in priority by `STEP` where there is room, never above the caller.
#[cfg(target_os = "linux")]
fn lowered(caller: i32) -> i32 {
    caller.saturating_add(STEP).min(LOWEST).max(caller)
}

#[cfg(target_os = "linux")]
fn lower_priority() {
    // A new thread starts at its creator's niceness; lowering it relative to
    // that keeps the pool below a caller that is itself niced (an absolute
    // value would put it above one run under `nice -n 19`).
    // On Linux each thread has its own niceness; elsewhere this call would
    // change the whole process's, so it is made here only.
    let Some(caller) = niceness() else {
        return;
    };
    let target = lowered(caller);
    if target != caller {
        // SAFETY: setpriority has no memory effects; a failure leaves the
        // thread at its creator's priority, which is merely slower to yield.
        unsafe {
            libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, target);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_priority() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::{lowered, niceness, LOWEST, STEP};

    #[test]
    fn work_runs_below_the_callers_priority_and_the_caller_keeps_its_own() {
        use rayon::prelude::*;
        let mine = niceness().expect("this thread's niceness");
        let theirs: Vec<i32> = super::run(|| {
            (0..64)
                .into_par_iter()
                .map(|_| niceness().expect("a pool thread's niceness"))
                .collect()
        });
        // At least the caller's niceness, and above it when there is room
        // (a caller at 19, as under `nice -n 19`, leaves none).
        assert!(
            theirs
                .iter()
                .all(|&n| n >= mine && (n > mine || mine == LOWEST)),
            "{theirs:?} vs {mine}"
        );
        assert_eq!(niceness(), Some(mine));
    }

    #[test]
    fn the_step_is_relative_to_the_caller_and_capped_at_the_lowest_priority() {
        assert_eq!(lowered(0), STEP);
        assert_eq!(lowered(-20), -20 + STEP);
        assert_eq!(lowered(5), 5 + STEP);
        assert_eq!(lowered(12), LOWEST);
        assert_eq!(lowered(LOWEST), LOWEST);
    }
}
