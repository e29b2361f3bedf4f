//! The fast path's fork-join pool. A parallel region is `n` tasks shared through one atomic
//! counter by the calling thread and the pool's `threads - 1` workers. Between regions the
//! workers spin (for `RLX_CPU_SPIN_US` microseconds, 1000 by default) before they park, so
//! the regions of a run, and runs that follow each other, start on threads that are already
//! awake. rayon parks its workers within microseconds and a parked thread can take longer
//! to wake than a small region lasts: on the 2-core CI machine a 256³ SGEMM ran its two
//! halves one after the other on every other run (195 µs against 115 µs).
//!
//! A region started inside a task, or while another thread's region holds the pool, runs
//! its tasks inline on the calling thread; [`with`] chooses the pool the regions of a run
//! use (a program's own, else the global one).

use super::memory::OutPtr;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One task of a region, by index.
type Task<'a> = dyn Fn(usize) + Sync + 'a;

/// A region being run: its tasks and the next task index to take.
struct Job {
    /// the task body, its lifetime erased: valid until the region returns, which waits for
    /// every worker inside the job
    f: *const Task<'static>,
    n: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
}

impl Job {
    /// Takes and runs tasks until none are left.
    fn run(&self) {
        // SAFETY: `f` outlives the job (see the field).
        let f = unsafe { &*self.f };
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            if i >= self.n {
                return;
            }
            if catch_unwind(AssertUnwindSafe(|| f(i))).is_err() {
                self.panicked.store(true, Relaxed);
            }
        }
    }
}

/// What the caller and the workers share.
struct Shared {
    /// odd while a region is open; each region moves it by two (open, then close)
    epoch: AtomicUsize,
    /// the open region's job
    job: AtomicPtr<Job>,
    /// workers inside the current job
    active: AtomicUsize,
    /// workers parked, or about to park, on `wake`
    parked: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    quit: AtomicBool,
    spin: Duration,
}

impl Shared {
    /// Waits for a region opened after `seen`: spinning first, then parked. None on quit.
    fn next_region(&self, seen: usize) -> Option<usize> {
        let open = |e: usize| e != seen && e % 2 == 1;
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let e = self.epoch.load(Acquire);
            if open(e) {
                return Some(e);
            }
            if self.quit.load(Relaxed) {
                return None;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() >= self.spin {
                break;
            }
            std::hint::spin_loop();
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.parked.fetch_add(1, SeqCst);
        let found = loop {
            let e = self.epoch.load(SeqCst);
            if open(e) {
                break Some(e);
            }
            if self.quit.load(SeqCst) {
                break None;
            }
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        };
        self.parked.fetch_sub(1, SeqCst);
        found
    }

    fn work(&self) {
        IN_REGION.with(|r| r.set(true));
        let mut seen = 0;
        while let Some(e) = self.next_region(seen) {
            seen = e;
            self.active.fetch_add(1, SeqCst);
            // The caller closes the region (epoch + 1) before it waits for `active` to
            // drain: either it sees this worker counted, or this worker sees it closed.
            if self.epoch.load(SeqCst) == e {
                // SAFETY: the job stays alive while this worker is counted in `active`.
                unsafe { (*self.job.load(Acquire)).run() };
            }
            self.active.fetch_sub(1, Release);
        }
    }
}

/// A pool of `threads - 1` spinning workers; the thread that starts a region is the other.
pub struct Pool {
    shared: Arc<Shared>,
    threads: usize,
    /// held by the thread whose region is open
    caller: Mutex<()>,
    workers: Vec<JoinHandle<()>>,
}

thread_local! {
    /// true inside a task (and on workers): regions started there run inline
    static IN_REGION: Cell<bool> = const { Cell::new(false) };
    /// the pool regions of this thread's current run use (null: the global pool)
    static CURRENT: Cell<*const Pool> = const { Cell::new(ptr::null()) };
}

/// Microseconds workers spin between regions: `RLX_CPU_SPIN_US`, else 1000.
fn spin_from_env() -> Duration {
    let us = crate::settings::SPIN_US.parse().unwrap_or(1000u64);
    Duration::from_micros(us)
}

impl Pool {
    /// A pool of `threads` threads in all (the caller counts as one) whose workers spin
    /// for `RLX_CPU_SPIN_US` between regions.
    ///
    /// # Errors
    /// A worker thread cannot be spawned.
    pub fn new(threads: usize) -> std::io::Result<Pool> {
        Pool::with_spin(threads, spin_from_env())
    }

    /// [`Pool::new`] with workers spinning for `spin` between regions.
    ///
    /// # Errors
    /// A worker thread cannot be spawned.
    pub fn with_spin(threads: usize, spin: Duration) -> std::io::Result<Pool> {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: AtomicPtr::new(ptr::null_mut()),
            active: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            quit: AtomicBool::new(false),
            spin,
        });
        let mut workers = Vec::with_capacity(threads - 1);
        for i in 1..threads {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("rlx-cpu-{i}"))
                .spawn(move || s.work());
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    Pool::stop(&shared, workers);
                    return Err(e);
                }
            }
        }
        Ok(Pool {
            shared,
            threads,
            caller: Mutex::new(()),
            workers,
        })
    }

    /// Threads of the pool, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(0)` .. `f(n - 1)` across the pool and returns when all have run. Inline on
    /// this thread when called from inside a task, when another region holds the pool, or
    /// for a single task.
    ///
    /// # Panics
    /// When a task panicked (after every task has run).
    pub fn for_each(&self, n: usize, f: &Task<'_>) {
        let inline = n <= 1 || self.threads == 1 || IN_REGION.with(Cell::get);
        let guard = if inline {
            None
        } else {
            match self.caller.try_lock() {
                Ok(g) => Some(g),
                // a region that panicked earlier left nothing behind but the flag
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        };
        let Some(guard) = guard else {
            (0..n).for_each(f);
            return;
        };
        let s = &*self.shared;
        // SAFETY: only the lifetime is erased; the job is unreachable once this returns.
        let erased: *const Task<'static> = unsafe { std::mem::transmute(f as *const Task<'_>) };
        let job = Job {
            f: erased,
            n,
            next: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        };
        s.job.store(&job as *const Job as *mut Job, Release);
        s.epoch.fetch_add(1, SeqCst);
        if s.parked.load(SeqCst) > 0 {
            let _lock = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        IN_REGION.with(|r| r.set(true));
        job.run();
        IN_REGION.with(|r| r.set(false));
        s.epoch.fetch_add(1, SeqCst);
        while s.active.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        s.job.store(ptr::null_mut(), Release);
        drop(guard);
        assert!(
            !job.panicked.load(Relaxed),
            "a task of a parallel region panicked"
        );
    }

    fn stop(shared: &Shared, workers: Vec<JoinHandle<()>>) {
        shared.quit.store(true, SeqCst);
        {
            let _lock = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_all();
        }
        for w in workers {
            let _ = w.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        Pool::stop(&self.shared, std::mem::take(&mut self.workers));
    }
}

/// Threads of the global pool: `RLX_CPU_THREADS`, else `RAYON_NUM_THREADS`, else the
/// available cores.
pub fn default_threads() -> usize {
    let rayon = rlx_driver::Knob {
        name: "RAYON_NUM_THREADS",
        ..crate::settings::THREADS
    };
    [crate::settings::THREADS, rayon]
        .iter()
        .find_map(|k| k.parse::<usize>())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The process-wide pool of [`default_threads`] threads.
pub fn global() -> &'static Pool {
    static GLOBAL: OnceLock<Pool> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        Pool::new(default_threads())
            .unwrap_or_else(|_| Pool::new(1).expect("a pool of one thread spawns nothing"))
    })
}

/// Runs `go` with `pool` as the pool of the regions it starts on this thread.
pub fn with<R>(pool: &Pool, go: impl FnOnce() -> R) -> R {
    let prev = CURRENT.with(|c| c.replace(pool as *const Pool));
    struct Restore(*const Pool);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(prev);
    go()
}

/// The pool regions started on this thread use: the one [`with`] set, else the global one.
fn current() -> &'static Pool {
    let p = CURRENT.with(Cell::get);
    if p.is_null() {
        global()
    } else {
        // SAFETY: `with` keeps the pool borrowed while it is current; the 'static here
        // never escapes a region (callers use it at once).
        unsafe { &*p }
    }
}

/// [`Pool::for_each`] on the [`current`] pool.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    current().for_each(n, &f);
}

/// Threads of the [`current`] pool.
pub fn threads() -> usize {
    current().threads()
}

/// `f(&mut state, i)` for `i` in `0..n` across the [`current`] pool, `state` made by
/// `init` once per thread that takes part.
pub fn for_each_init<S>(n: usize, init: impl Fn() -> S + Sync, f: impl Fn(&mut S, usize) + Sync) {
    let next = AtomicUsize::new(0);
    for_each(threads().min(n), |_| {
        let mut state = None;
        loop {
            let i = next.fetch_add(1, Relaxed);
            if i >= n {
                return;
            }
            f(state.get_or_insert_with(&init), i);
        }
    });
}

/// `f(i, chunk)` for each `size`-element chunk of `out` (the last may be shorter), across
/// the [`current`] pool.
pub fn for_each_chunk_mut<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    for_each_chunk_mut_init(out, size, || (), |_, i, c| f(i, c));
}

/// [`for_each_chunk_mut`] with per-thread state, as in [`for_each_init`].
pub fn for_each_chunk_mut_init<T: Send, S>(
    out: &mut [T],
    size: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, &mut [T]) + Sync,
) {
    let size = size.max(1);
    let len = out.len();
    let chunks = len.div_ceil(size);
    // Consecutive chunks go to a task together, about eight tasks per thread: one task per
    // chunk made a task of every 384-element row of a layer norm, and the shared task
    // counter's cache line cost more than the rows.
    let groups = chunks.min(8 * threads());
    let base = OutPtr(out.as_mut_ptr());
    for_each_init(groups, init, |s, g| {
        for i in chunks * g / groups..chunks * (g + 1) / groups {
            let lo = i * size;
            let hi = (lo + size).min(len);
            // SAFETY: the chunks are disjoint and inside `out`, which outlives the region.
            let chunk = unsafe { std::slice::from_raw_parts_mut(base.ptr().add(lo), hi - lo) };
            f(s, i, chunk);
        }
    });
}

/// `[f(&mut state, 0), .., f(&mut state, n - 1)]` across the [`current`] pool, with
/// per-thread state as in [`for_each_init`].
pub fn map_init<S, R: Send>(
    n: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize) -> R + Sync,
) -> Vec<R> {
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    for_each_chunk_mut_init(&mut out, 1, init, |s, i, slot| slot[0] = Some(f(s, i)));
    out.into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_task_runs_once_across_regions_and_callers() {
        let pool = Pool::new(3).unwrap();
        for n in [0, 1, 2, 7, 1000] {
            for _ in 0..50 {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                pool.for_each(n, &|i| {
                    hits[i].fetch_add(1, Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "{n} tasks");
            }
        }
        // regions from several threads at once (one holds the pool, the others inline) and
        // regions nested in tasks
        let total = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        pool.for_each(8, &|_| {
                            pool.for_each(4, &|_| {
                                total.fetch_add(1, Relaxed);
                            });
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Relaxed), 4 * 100 * 8 * 4);
    }

    #[test]
    fn parked_workers_wake_for_the_next_region() {
        let pool = Pool::with_spin(2, Duration::ZERO).unwrap();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(1));
            let mut out = vec![0u32; 64];
            with(&pool, || {
                for_each_chunk_mut(&mut out, 5, |i, c| c.fill(i as u32 + 1))
            });
            assert!(out.iter().enumerate().all(|(j, &v)| v == j as u32 / 5 + 1));
        }
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_after_the_region() {
        let pool = Pool::new(2).unwrap();
        let ran = AtomicU64::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(16, &|i| {
                ran.fetch_add(1, Relaxed);
                assert!(i != 3, "task 3 fails");
            })
        }));
        assert!(r.is_err());
        assert_eq!(ran.load(Relaxed), 16);
        // the next region still shares out its tasks (the pool is not left held)
        assert!(!pool.caller.is_poisoned() && pool.caller.try_lock().is_ok());
        // the pool still works
        let n = AtomicU64::new(0);
        pool.for_each(10, &|_| {
            n.fetch_add(1, Relaxed);
        });
        assert_eq!(n.load(Relaxed), 10);
    }
}
