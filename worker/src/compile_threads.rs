//! The threads components are compiled on: a pool of their own, below the priority of
//! the threads that serve events.
//!
//! A deploy compiles its components on every core (Wasmtime's parallel compilation
//! runs on rayon): seconds of CPU for a large component, and a tenant decides how
//! often. On rayon's global pool, at the priority of everything else, a tenant
//! redeploying an 18 MiB Python component in a loop took half of another tenant's hello
//! throughput on a 2-core worker and multiplied its p99 by five
//! (`bench/deploy-storm.sh`, README "Deploy storm"). Run inside this pool, Wasmtime's
//! parallel iterators use its threads, which run at nice [`COMPILE_NICE`]: the kernel
//! runs the threads that read, route and answer events first, and a compile gets the
//! rest of the cores, all of them when nothing else runs, and a share of each busy one
//! (nice 10 against 0 weighs about 1 to 9) however busy the worker is, so deploys slow
//! down under load rather than stop.
//!
//! One pool per process, made on the first compile: a process that never compiles
//! (everything cached) starts no threads for it.

use std::sync::OnceLock;

/// The `nice` value of the compile threads.
pub(crate) const COMPILE_NICE: i32 = 10;

/// The pool, or `None` when it could not be made (the compile then runs where it is
/// called, at that thread's priority).
static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();

/// Runs `compile` on the compile threads and waits for its result; Wasmtime's parallel
/// compilation inside it stays on them.
pub(crate) fn run<R: Send>(compile: impl FnOnce() -> R + Send) -> R {
    match POOL.get_or_init(build) {
        Some(pool) => pool.install(compile),
        None => compile(),
    }
}

fn build() -> Option<rayon::ThreadPool> {
    let pool = rayon::ThreadPoolBuilder::new()
        .thread_name(|index| format!("faas-compile-{index}"))
        .start_handler(|_| lower_priority())
        .build();
    match pool {
        Ok(pool) => Some(pool),
        Err(err) => {
            tracing::warn!("no compile threads ({err}): components compile at normal priority");
            None
        }
    }
}

/// Lowers the calling thread to [`COMPILE_NICE`].
pub(crate) fn lower_priority() {
    // On Linux `nice` is per thread, and pid 0 names the calling one.
    if let Err(err) = rustix::process::setpriority_process(None, COMPILE_NICE) {
        tracing::warn!("compile thread: nice {COMPILE_NICE} refused ({err})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value.
    fn nice() -> i32 {
        rustix::process::getpriority_process(None).expect("getpriority")
    }

    #[test]
    fn compiles_run_on_lowered_threads_and_their_parallel_work_stays_there() {
        use rayon::prelude::*;
        let caller = nice();
        let (own, parallel) = run(|| {
            let parallel: Vec<i32> = (0..64).into_par_iter().map(|_| nice()).collect();
            (nice(), parallel)
        });
        assert_eq!(own, COMPILE_NICE);
        assert!(
            parallel.iter().all(|&value| value == COMPILE_NICE),
            "{parallel:?}"
        );
        assert_eq!(nice(), caller, "the calling thread keeps its priority");
    }
}
