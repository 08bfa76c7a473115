//! The process's memory allocator, and how the worker asks it to give memory back.

// mimalloc rather than glibc's malloc: a profile of the sensor pipeline at 16x put a
// fifth of the CPU in malloc and free, and with mimalloc it sustains about a quarter
// more matches/s (bench/HISTORY.md, "Sensor pipeline"). Built without its transparent-huge-page
// advice (`no_thp`), which put about 45 MiB more at rest under 100 idle workflows.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Gives the memory that this thread and the whole process have freed back to the
/// system now, rather than after mimalloc's purge delay (1 s in mimalloc 3). A delayed
/// purge runs only when a thread allocates again, so what a compile freed on a blocking
/// thread that then sat idle stayed resident: about 400 KiB per deployed component more
/// than glibc's malloc (bench/HISTORY.md, "Idle"). Purging there, and only there, keeps the
/// delay everywhere else, where it lets freed buffers be reused without being faulted
/// in again (a process-wide delay of 0 was once measured costing a fan-out of 10 MiB
/// regions CPU, and not the next time: bench/HISTORY.md, "Regions").
///
/// The worker calls it after each load ([`faas_worker::WorkerConfig::after_load`]).
#[cfg(feature = "worker")]
pub fn release_freed_memory() {
    // SAFETY: `mi_collect` takes no pointers and may be called from any thread.
    unsafe { libmimalloc_sys::mi_collect(true) };
}
