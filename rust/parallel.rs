//! Thread pools. Each distinct thread count gets one owned, cached rayon pool:
//! we never touch rayon's global pool, so embedding applications keep theirs.

use crate::error::{LocalizationError, Result};
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Default thread count: `LOCALIZATION_NUM_THREADS` if set, else all cores.
pub fn default_threads() -> usize {
    std::env::var("LOCALIZATION_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// Resolve scikit-learn style `n_jobs` (None, -1, k, -2 = all but one ...) to a thread count.
pub fn resolve_n_jobs(n_jobs: Option<i64>) -> Result<usize> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as i64;
    match n_jobs {
        None => Ok(default_threads()),
        Some(0) => Err(LocalizationError::param("n_jobs", "must be a non-zero integer or None")),
        Some(k) if k > 0 => Ok(k as usize),
        Some(k) => Ok((cores + 1 + k).max(1) as usize),
    }
}

fn pools() -> &'static Mutex<HashMap<usize, Arc<ThreadPool>>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    POOLS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Run `f` inside the cached pool with `threads` workers.
pub fn install<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> Result<R> {
    let pool = {
        let mut map = pools().lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&threads) {
            Some(p) => p.clone(),
            None => {
                let p = ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("localization-{i}"))
                    .build()
                    .map_err(|e| LocalizationError::param("n_jobs", format!("cannot start thread pool: {e}")))?;
                let p = Arc::new(p);
                map.insert(threads, p.clone());
                p
            }
        }
    };
    Ok(pool.install(f))
}
