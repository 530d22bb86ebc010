//! Threads: owned pools, thread counts, and the control of long native calls.
//!
//! * **Pools** are owned rayon pools, never rayon's global one, so an application embedding
//!   the library keeps its own. A few are cached, least recently used first out, with their
//!   threads together at most `POOL_THREADS_PER_CORE` × the cores: any sequence of `n_jobs`
//!   values leaves a bounded number of OS threads alive. The cache belongs to the process that
//!   built it: a forked child (whose copy of the parent's pools has no worker threads, so a job
//!   sent there would wait forever) finds a different process id and starts a cache of its own.
//! * **Thread counts**: an explicit `n_jobs`, else a limit set through threadpoolctl, else
//!   `LOCALIZATION_NUM_THREADS`, else `OMP_NUM_THREADS` (which joblib's loky workers and Dask's
//!   nannies set), else all cores; never more than the cores (`available_parallelism`, which
//!   honours CPU affinity and cgroup quotas).
//! * **`run`** executes a job on a pool while the calling thread, outside the pool, calls a
//!   watcher every `TICK` (the Python bindings check Ctrl-C and report progress there). The job
//!   gets a `Monitor`: its loops poll `check()` and return `Interrupted` soon after the watcher
//!   asked to stop, and report progress through it.

use crate::error::{LocalizationError, Result};
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The variable that sets the default thread count.
pub const THREADS_ENV: &str = "LOCALIZATION_NUM_THREADS";

/// How often the calling thread runs the watcher while a job runs: Ctrl-C is noticed within
/// about this delay plus the longest stretch between two `Monitor::check` calls of the job.
pub const TICK: Duration = Duration::from_millis(50);

/// Cached pools hold at most this many threads per core in total.
const POOL_THREADS_PER_CORE: usize = 2;

/// Cancellation and progress of one call, shared by the job and its watcher.
#[derive(Clone, Default)]
pub struct Monitor(Arc<Shared>);

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    done: AtomicUsize,
    total: AtomicUsize,
}

impl Monitor {
    /// True once the caller asked the call to stop.
    #[inline]
    pub fn stopped(&self) -> bool {
        self.0.stop.load(Ordering::Relaxed)
    }

    /// `Err(Interrupted)` once the caller asked the call to stop: long loops poll this at
    /// least every few milliseconds of work and return the error.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.stopped() {
            Err(LocalizationError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// Ask the call to stop.
    pub fn stop(&self) {
        self.0.stop.store(true, Ordering::Relaxed);
    }

    /// Progress is `done` of `total` units (seeds, iterations, ...).
    pub fn set_progress(&self, done: usize, total: usize) {
        self.0.total.store(total, Ordering::Relaxed);
        self.0.done.store(done, Ordering::Relaxed);
    }

    /// `k` more units done.
    pub fn advance(&self, k: usize) {
        self.0.done.fetch_add(k, Ordering::Relaxed);
    }

    /// (done, total); (0, 0) when the job reports no progress.
    pub fn progress(&self) -> (usize, usize) {
        (self.0.done.load(Ordering::Relaxed), self.0.total.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for Monitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (done, total) = self.progress();
        f.debug_struct("Monitor").field("stopped", &self.stopped()).field("done", &done).field("total", &total).finish()
    }
}

/// Run `job` on the pool with `threads` workers. Meanwhile the calling thread calls
/// `watch(monitor)` every `TICK`; when it fails, the monitor is stopped, the job's loops
/// return soon after, and `watch`'s error is returned. After a successful job `watch` runs
/// once more (a final progress report; a late interrupt still counts).
pub fn run<R: Send>(threads: usize, watch: &mut dyn FnMut(&Monitor) -> Result<()>, job: impl FnOnce(&Monitor) -> Result<R> + Send) -> Result<R> {
    let pool = pool(threads)?;
    let monitor = Monitor::default();
    let (tx, rx) = mpsc::sync_channel(1);
    let mut stopped_by = None;
    // The job runs on a worker; this thread stays outside the pool, free to watch.
    let outcome = pool.in_place_scope(|scope| {
        let mon = &monitor;
        scope.spawn(move |_| {
            // The receiver lives until the scope closes, so this cannot fail.
            let _ = tx.send(job(mon));
        });
        loop {
            match rx.recv_timeout(TICK) {
                Ok(r) => break r,
                Err(RecvTimeoutError::Timeout) => {
                    if stopped_by.is_none() {
                        if let Err(e) = watch(&monitor) {
                            monitor.stop();
                            stopped_by = Some(e);
                        }
                    }
                }
                // Only when the job panicked, and the closing scope re-raises that panic.
                Err(RecvTimeoutError::Disconnected) => break Err(LocalizationError::Interrupted),
            }
        }
    });
    if let Some(e) = stopped_by {
        return Err(e);
    }
    let r = outcome?;
    watch(&monitor)?;
    Ok(r)
}

/// Run `f` on the pool with `threads` workers, unwatched (Rust callers and tests; the Python
/// bindings go through `run`).
pub fn install<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> Result<R> {
    run(threads, &mut |_| Ok(()), |_| Ok(f()))
}

// ---- thread counts -------------------------------------------------------------------------

/// A default set through threadpoolctl (0: none).
static LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The cores this process may use.
pub fn cores() -> usize {
    runtime().cores
}

/// Resolve scikit-learn style `n_jobs` (None, -1 = all cores, -2 = all but one, k) to a
/// thread count in [1, cores]; counts above the cores are clamped to the cores.
pub fn resolve_n_jobs(n_jobs: Option<i64>) -> Result<usize> {
    let cores = cores();
    match n_jobs {
        None => default_threads(),
        Some(0) => Err(LocalizationError::param("n_jobs", "must be a non-zero integer or None")),
        Some(k) if k > 0 => Ok((k as u64).min(cores as u64) as usize),
        Some(k) => Ok((cores as i64).saturating_add(1).saturating_add(k).max(1) as usize),
    }
}

/// The thread count of `n_jobs=None`: the threadpoolctl limit if one is set, else the
/// environment's, else all cores (at most the cores in every case).
pub fn default_threads() -> Result<usize> {
    match LIMIT.load(Ordering::Relaxed) {
        0 => unlimited_default(),
        n => Ok(n.min(cores())),
    }
}

/// Set the default thread count (threadpoolctl's `set_num_threads`). Setting it back to the
/// value the environment gives clears the limit, so the environment is read again later.
pub fn set_default_threads(n: usize) {
    let unlimited = unlimited_default().unwrap_or_else(|_| cores());
    LIMIT.store(if n == unlimited { 0 } else { n.max(1) }, Ordering::Relaxed);
}

fn unlimited_default() -> Result<usize> {
    let cores = cores();
    if let Some(v) = std::env::var_os(THREADS_ENV) {
        if let Some(n) = parse_threads_env(&v.to_string_lossy())? {
            return Ok(n.min(cores));
        }
    }
    let omp = std::env::var("OMP_NUM_THREADS").ok();
    Ok(omp.as_deref().and_then(parse_omp).unwrap_or(cores).min(cores))
}

/// `LOCALIZATION_NUM_THREADS`: a positive integer (values above the cores are clamped later);
/// empty means unset; anything else is an error naming the variable.
fn parse_threads_env(value: &str) -> Result<Option<usize>> {
    let t = value.trim();
    if t.is_empty() {
        return Ok(None);
    }
    if t.bytes().all(|b| b.is_ascii_digit()) && t.bytes().any(|b| b != b'0') {
        return Ok(Some(t.parse().unwrap_or(usize::MAX)));
    }
    Err(LocalizationError::Environment {
        name: THREADS_ENV,
        value: value.to_string(),
        reason: "it must be a positive integer (the default number of threads); unset it to use all cores".into(),
    })
}

/// `OMP_NUM_THREADS` as the OpenMP runtimes read it: the first entry of a list such as "4,2".
/// A value they would reject is ignored here too.
fn parse_omp(value: &str) -> Option<usize> {
    value.split(',').next()?.trim().parse::<usize>().ok().filter(|&n| n > 0)
}

// ---- pools ---------------------------------------------------------------------------------

/// What one process owns: its cores and its cached pools.
struct Runtime {
    pid: u32,
    cores: usize,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// (threads, pool, last use).
    pools: Vec<(usize, Arc<ThreadPool>, u64)>,
    clock: u64,
}

impl Cache {
    /// Advance the clock; the pool with `threads` workers, if cached, marked as used now.
    fn touch(&mut self, threads: usize) -> (u64, Option<Arc<ThreadPool>>) {
        self.clock += 1;
        let now = self.clock;
        let found = self.pools.iter_mut().find(|e| e.0 == threads).map(|e| {
            e.2 = now;
            e.1.clone()
        });
        (now, found)
    }
}

static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());

/// The runtime of the current process, created on first use and again after a fork.
fn runtime() -> &'static Runtime {
    let pid = std::process::id();
    loop {
        let cur = RUNTIME.load(Ordering::Acquire);
        // SAFETY: only leaked (never freed) runtimes are published, so a non-null pointer is valid.
        if let Some(rt) = unsafe { cur.as_ref() } {
            if rt.pid == pid {
                return rt;
            }
        }
        // A runtime replaced here is a parent's seen from a forked child: it stays leaked, since
        // its worker threads do not exist in this process and its lock may have been held at the fork.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let fresh: &'static Runtime = Box::leak(Box::new(Runtime { pid, cores, cache: Mutex::new(Cache::default()) }));
        let ptr = fresh as *const Runtime as *mut Runtime;
        if RUNTIME.compare_exchange(cur, ptr, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return fresh;
        }
        // Another thread published first (the few bytes of `fresh` are left behind).
    }
}

impl Runtime {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The cached pool with `threads` workers, started if needed.
fn pool(threads: usize) -> Result<Arc<ThreadPool>> {
    let rt = runtime();
    if let Some(p) = rt.cache().touch(threads).1 {
        return Ok(p);
    }
    // Started outside the lock: spawning threads takes a while and other calls go on meanwhile.
    let started = ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("localization-{i}"))
        .build()
        .map_err(|e| LocalizationError::ThreadPool { threads, reason: e.to_string() })?;
    let started = Arc::new(started);
    let evicted = {
        let mut c = rt.cache();
        let (now, found) = c.touch(threads);
        if let Some(p) = found {
            // Another call started the same pool meanwhile: use that one, drop ours.
            return Ok(p);
        }
        c.pools.push((threads, started.clone(), now));
        let mut evicted = Vec::new();
        let cap = POOL_THREADS_PER_CORE * rt.cores;
        while c.pools.iter().map(|e| e.0).sum::<usize>() > cap {
            // The least recently used pool other than the one just added.
            match c.pools.iter().enumerate().filter(|(_, e)| e.2 != now).min_by_key(|(_, e)| e.2) {
                Some((at, _)) => evicted.push(c.pools.swap_remove(at)),
                None => break,
            }
        }
        evicted
    };
    // An evicted pool's threads exit once the calls still using it (if any) are done.
    drop(evicted);
    Ok(started)
}

/// Threads held by the cached pools of this process.
pub fn cached_pool_threads() -> usize {
    runtime().cache().pools.iter().map(|e| e.0).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn environment_values_are_parsed_strictly() {
        assert_eq!(parse_threads_env("4").unwrap(), Some(4));
        assert_eq!(parse_threads_env(" 12 ").unwrap(), Some(12));
        assert_eq!(parse_threads_env("").unwrap(), None);
        assert_eq!(parse_threads_env("100000000000000000000000").unwrap(), Some(usize::MAX));
        for bad in ["abc", "0", "00", "-1", "2.5", "1e3", "4 threads"] {
            let e = parse_threads_env(bad).unwrap_err();
            assert!(e.to_string().contains(THREADS_ENV), "{bad}: {e}");
        }
        assert_eq!(parse_omp("3"), Some(3));
        assert_eq!(parse_omp("4,2"), Some(4));
        assert_eq!(parse_omp("0"), None);
        assert_eq!(parse_omp("x"), None);
    }

    #[test]
    fn n_jobs_is_clamped_to_the_cores() {
        let c = cores();
        assert_eq!(resolve_n_jobs(Some(1)).unwrap(), 1);
        assert_eq!(resolve_n_jobs(Some(i64::MAX)).unwrap(), c);
        assert_eq!(resolve_n_jobs(Some(-1)).unwrap(), c);
        assert_eq!(resolve_n_jobs(Some(i64::MIN)).unwrap(), 1);
        assert!(resolve_n_jobs(Some(0)).is_err());
    }

    #[test]
    fn the_pool_cache_stays_bounded() {
        for round in 0..3 {
            for t in 1..=cores() {
                let got = install(t, rayon::current_num_threads).unwrap();
                assert_eq!(got, t, "round {round}");
            }
            assert!(cached_pool_threads() <= POOL_THREADS_PER_CORE * cores());
        }
    }

    #[test]
    fn a_stopped_job_returns_promptly_with_the_watchers_error() {
        let t0 = Instant::now();
        let mut calls = 0;
        let r: Result<()> = run(
            1,
            &mut |_| {
                calls += 1;
                if calls == 2 {
                    Err(LocalizationError::param("progress", "raised"))
                } else {
                    Ok(())
                }
            },
            |mon| loop {
                // A job that would never end on its own.
                mon.check()?;
                std::thread::sleep(Duration::from_millis(1));
            },
        );
        assert_eq!(r.unwrap_err(), LocalizationError::param("progress", "raised"));
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }

    #[test]
    fn progress_reaches_the_watcher_and_a_finished_job_is_reported_once_more() {
        let mut seen = Vec::new();
        let out = run(
            2,
            &mut |m| {
                seen.push(m.progress());
                Ok(())
            },
            |mon| {
                mon.set_progress(0, 3);
                for _ in 0..3 {
                    std::thread::sleep(TICK);
                    mon.advance(1);
                }
                Ok(7)
            },
        )
        .unwrap();
        assert_eq!(out, 7);
        assert_eq!(seen.last(), Some(&(3, 3)));
        assert!(seen.len() >= 2);
    }
}
