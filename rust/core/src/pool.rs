//! The engine's thread pools, one of each per process.
//!
//! rayon's global pool cannot be used after `fork`: the child inherits the
//! pool's state but none of its threads, so its first parallel call waits
//! forever for workers that do not exist. Python forks for `multiprocessing`
//! (the default start method on Linux), for prefork servers and for data
//! loaders, and a child that opens a store of its own must work. So every
//! parallel call runs in a pool of this module, and a forked child builds its
//! own pools at its first parallel call. The parent's pools are leaked in the
//! child, never dropped: their threads do not exist there.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use rayon::{Scope, ThreadPool, ThreadPoolBuilder};

/// How many forks this process descends from, counted in the child.
static FORKS: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
fn watch_forks() {
    extern "C" fn forked() {
        // Only an atomic add: a child of a multithreaded process may call
        // async-signal-safe functions alone until it execs.
        FORKS.fetch_add(1, Ordering::Relaxed);
    }
    static WATCHING: std::sync::Once = std::sync::Once::new();
    WATCHING.call_once(|| {
        // SAFETY: registers a handler that touches only an atomic. Should the
        // registration fail (out of memory), forks go unnoticed, as they did
        // before this module.
        unsafe {
            libc::pthread_atfork(None, None, Some(forked));
        }
    });
}

#[cfg(not(unix))]
fn watch_forks() {}

/// A pool built at its first use in each process (or None, run inline, if
/// its threads cannot be started).
///
/// Without a lock: a fork while another thread held one would leave it held
/// in the child, whose first parallel call would wait for it forever.
pub(crate) struct PerProcess {
    build: fn() -> ThreadPoolBuilder,
    built: AtomicPtr<Built>,
}

/// A pool and the fork count of the process it was built in; leaked, so a
/// reader never meets a freed one.
struct Built {
    forks: u64,
    pool: Option<&'static ThreadPool>,
}

impl PerProcess {
    pub(crate) const fn new(build: fn() -> ThreadPoolBuilder) -> Self {
        PerProcess {
            build,
            built: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    pub(crate) fn get(&self) -> Option<&'static ThreadPool> {
        watch_forks();
        let forks = FORKS.load(Ordering::Acquire);
        let seen = self.built.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `Built`, never freed.
        if let Some(built) = unsafe { seen.as_ref() } {
            if built.forks == forks {
                return built.pool;
            }
        }
        let pool = (self.build)().build().ok();
        let fresh = Box::into_raw(Box::new(Built {
            forks,
            pool: pool.map(|p| &*Box::leak(Box::new(p))),
        }));
        match self
            .built
            .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `fresh` was just leaked above.
            Ok(_) => unsafe { (*fresh).pool },
            Err(other) => {
                // Another thread published one first; no reader saw this one.
                // SAFETY: `fresh` and its pool were leaked from Boxes above and
                // never shared: taking them back frees them (the pool's
                // threads end).
                let unused = unsafe { Box::from_raw(fresh) };
                if let Some(p) = unused.pool {
                    drop(unsafe { Box::from_raw(std::ptr::from_ref(p).cast_mut()) });
                }
                // SAFETY: a non-null pointer is a leaked `Built`.
                match unsafe { other.as_ref() } {
                    Some(b) if b.forks == forks => b.pool,
                    _ => self.get(),
                }
            }
        }
    }
}

static FOREGROUND: PerProcess =
    PerProcess::new(|| ThreadPoolBuilder::new().thread_name(|i| format!("memlane-{i}")));

/// Runs `f` where its parallel iterators use this process's pool: here when
/// this thread is already one of a pool's (the background pool's linking
/// stays there), else on the foreground pool, inline if it cannot start.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    match FOREGROUND.get() {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// Queues `f` on the foreground pool and returns at once; false, `f`
/// dropped unrun, if that pool cannot start. `f` must not panic (rayon
/// aborts the process on a panic in spawned work).
pub fn spawn(f: impl FnOnce() + Send + 'static) -> bool {
    match FOREGROUND.get() {
        Some(pool) => {
            pool.spawn(f);
            true
        }
        None => false,
    }
}

/// `op` on this thread with a scope whose spawned work runs on the
/// foreground pool; None if that pool cannot start (the caller then works
/// alone).
pub fn in_place_scope<'scope, R>(op: impl FnOnce(&Scope<'scope>) -> R) -> Option<R> {
    FOREGROUND.get().map(|pool| pool.in_place_scope(op))
}

#[cfg(all(test, unix))]
mod tests {
    use rayon::prelude::*;

    /// Set in the process `a_forked_child_runs_parallel_work` starts.
    const ALONE: &str = "MEMLANE_POOL_FORK_ALONE";

    /// A child forked after the parent's pools ran builds pools of its own;
    /// with rayon's global pool it waited forever.
    ///
    /// The fork runs in a test process of its own, the harness told to run
    /// that one test: forked beside the other tests' threads, the child can
    /// inherit a lock one of them held (an allocator's, the loader's) and
    /// wait for it forever.
    #[test]
    fn a_forked_child_runs_parallel_work() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "pool::tests::fork_in_a_process_of_its_own",
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .env(ALONE, "1")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The harness ran the one test, not none (a name that matched nothing).
        assert!(said.contains("1 passed"), "{said}");
    }

    /// The fork itself, run only in the process the test above starts.
    #[test]
    #[ignore = "run by a_forked_child_runs_parallel_work in a process of its own"]
    fn fork_in_a_process_of_its_own() {
        assert_eq!(std::env::var(ALONE).as_deref(), Ok("1"), "run alone only");
        let sum = |n: u64| super::install(|| (0..n).into_par_iter().sum::<u64>());
        assert_eq!(sum(1000), 499_500);
        // SAFETY: the child calls only what the test needs and leaves by
        // _exit, never returning into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut spawned = 0;
            let scoped = super::in_place_scope(|s| s.spawn(|_| spawned = sum(10)));
            let ok = sum(1000) == 499_500 && scoped.is_some() && spawned == 45;
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        let mut waited = 0;
        // A child that hangs fails the test instead of hanging it.
        for _ in 0..1200 {
            // SAFETY: polls the child this test forked.
            waited = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if waited != 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if waited == 0 {
            // SAFETY: ends the hung child before failing.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the forked child's parallel work never ran");
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
}
