//! Which reset a function's memory slots get, chosen per function by measuring its
//! first events ([`crate::SlotReset::ByFunction`], the default).
//!
//! Wasmtime 48 resets a slot in one of two ways, per engine. Scanning for the pages an
//! event wrote costs what the event touched, but the scan follows at most 32 runs of
//! written pages and hands everything after them back to the kernel; resetting a fixed
//! size whole costs that size on every event, however little was written. A small
//! component, or a large one that reads more than it writes, writes a few runs: the
//! scan is far cheaper (bench/sizes.sh, the Rust hello and the 4 MiB table: whole
//! resets of 16 MiB cut their throughput by half and by four fifths). An interpreter
//! writes all over its heap, so the scan hands most of its pages back after every event
//! and the next event faults them in again: the Python hello took 216 minor page faults
//! per event, the JavaScript one 60, the Rust hello and the table none (measured with
//! `perf stat -e minor-faults` on the platform under bench/sizes.sh's load), and whole
//! resets doubled those interpreters' throughput.
//!
//! So every function starts on the engine that scans; its events' minor page faults
//! are counted (on the threads that poll them, `getrusage(RUSAGE_THREAD)`, two calls
//! per poll) for [`MEASURED_EVENTS`] events after its first [`SKIPPED_EVENTS`] (which
//! find cold slots, where every event faults). If even the fewest faults of those
//! events is above [`MOVE_AT_FAULTS`], the function moves to the engine that resets
//! slots whole; otherwise it stays, and nothing is counted from then on.
//!
//! The choice is per function, not per component: functions of other workflows and
//! tenants may run the same bytes (and share the linked code, `linked.rs`), but one
//! tenant's events must not decide how another's slots are reset. Moved functions of
//! the same bytes share the code linked on the other engine in the same way. An event
//! into whose memory the host mapped region pages counts as one without faults (those
//! pages fault under any reset), so functions that map regions stay with written-page
//! resets.

use crate::function::Entry;
use std::future::Future;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Events of a function not counted at first: its instances find cold slots (nothing
/// resident yet) until each slot it keeps warm was used once.
pub(crate) const SKIPPED_EVENTS: u32 = 16;

/// Events whose faults are counted, after the skipped ones.
pub(crate) const MEASURED_EVENTS: u32 = 16;

/// Minor page faults per event above which a function is better off with whole
/// resets. Whole resets (of up to 16 MiB) cost the Rust hello about 60 µs more per
/// event than the scan, and saved an interpreter's event about 13 µs per fault the
/// scan left it (bench/sizes.sh's load in both modes, with `perf stat`): the two meet
/// near 5 faults for a small memory and 40 for a full 16 MiB one. 32 leaves the components measured so far where they
/// do best, with a margin on both sides (none of the components that stayed fault at
/// all; those that move fault 60 and 216 times).
pub(crate) const MOVE_AT_FAULTS: u64 = 32;

const PROBING: u8 = 0;
const STAYS: u8 = 1;
const WANTS_WHOLE: u8 = 2;
const MOVING: u8 = 3;
const WHOLE: u8 = 4;

/// Where one function's instances start from: its entry, on the engine it was linked
/// on or, once moved, on the one that resets slots whole.
pub(crate) struct Placement {
    entry: RwLock<Arc<Entry>>,
    /// Whether it stays or moves, and the count of faults until that is decided.
    pub(crate) probe: Probe,
}

impl Placement {
    /// A function's placement, starting from `entry`; its faults are counted if
    /// `measured`.
    pub(crate) fn new(entry: Arc<Entry>, measured: bool) -> Self {
        Self {
            entry: RwLock::new(entry),
            probe: if measured {
                Probe::probing()
            } else {
                Probe::settled()
            },
        }
    }

    /// The entry the next event starts its instance from.
    pub(crate) fn entry(&self) -> Arc<Entry> {
        self.entry
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Starts every later event from `entry` (the same component, linked on the
    /// engine that resets slots whole); events in flight keep theirs.
    pub(crate) fn replace(&self, entry: Arc<Entry>) {
        *self
            .entry
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = entry;
    }
}

/// Whether a function stays where it was linked or moves to whole resets, and its
/// count of faults until that is decided.
#[derive(Debug)]
pub(crate) struct Probe {
    state: AtomicU8,
    /// Events that finished while probing.
    finished: AtomicU32,
    /// Measured events whose faults are in `fewest`.
    measured: AtomicU32,
    /// The fewest faults of a measured event.
    fewest: AtomicU64,
}

impl Probe {
    fn with_state(state: u8) -> Self {
        Self {
            state: AtomicU8::new(state),
            finished: AtomicU32::new(0),
            measured: AtomicU32::new(0),
            fewest: AtomicU64::new(u64::MAX),
        }
    }

    /// A function whose placement is to be measured.
    fn probing() -> Self {
        Self::with_state(PROBING)
    }

    /// A function that stays where it was linked.
    fn settled() -> Self {
        Self::with_state(STAYS)
    }

    /// Whether its events' faults are counted now.
    pub(crate) fn probing_now(&self) -> bool {
        self.state.load(Ordering::Relaxed) == PROBING
    }

    /// Whether it moved to whole resets.
    pub(crate) fn resets_whole(&self) -> bool {
        self.state.load(Ordering::Acquire) == WHOLE
    }

    /// The fewest faults of its measured events, once all of them were counted.
    pub(crate) fn fewest_faults(&self) -> Option<u64> {
        (self.measured.load(Ordering::Acquire) >= MEASURED_EVENTS)
            .then(|| self.fewest.load(Ordering::Acquire))
    }

    /// Counts one event's faults; decides once the measured events are in.
    pub(crate) fn record(&self, faults: u64) {
        if !self.probing_now() {
            return;
        }
        let finished = self.finished.fetch_add(1, Ordering::AcqRel);
        if !(SKIPPED_EVENTS..SKIPPED_EVENTS + MEASURED_EVENTS).contains(&finished) {
            return;
        }
        self.fewest.fetch_min(faults, Ordering::AcqRel);
        if self.measured.fetch_add(1, Ordering::AcqRel) + 1 == MEASURED_EVENTS {
            let decided = if self.fewest.load(Ordering::Acquire) > MOVE_AT_FAULTS {
                WANTS_WHOLE
            } else {
                STAYS
            };
            self.state.store(decided, Ordering::Release);
        }
    }

    /// True once, for the caller that is to move it to whole resets.
    pub(crate) fn take_move(&self) -> bool {
        self.state.load(Ordering::Relaxed) == WANTS_WHOLE
            && self
                .state
                .compare_exchange(WANTS_WHOLE, MOVING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Ends a move taken with [`Self::take_move`]: it resets whole if `moved`, and
    /// stays where it is otherwise.
    pub(crate) fn moved(&self, moved: bool) {
        self.state
            .store(if moved { WHOLE } else { STAYS }, Ordering::Release);
    }
}

/// Drives `guest`, an event of a function placed by `placement`, counting the minor
/// page faults taken while it is polled if the placement is still being measured. An
/// event into whose memory the host mapped region pages (`mapped_regions` of its
/// output) counts as one without faults: every reset leaves those faults, so a
/// function that maps regions stays where the region code is tested most.
pub(crate) async fn count_faults<F: Future>(
    placement: Arc<Placement>,
    guest: F,
    mapped_regions: fn(&F::Output) -> bool,
) -> F::Output {
    if !placement.probe.probing_now() {
        return guest.await;
    }
    let mut guest = std::pin::pin!(guest);
    let mut faults = 0;
    let output = std::future::poll_fn(|cx| {
        let before = minor_faults();
        let polled = guest.as_mut().poll(cx);
        faults += minor_faults().saturating_sub(before);
        polled
    })
    .await;
    let faults = if mapped_regions(&output) { 0 } else { faults };
    placement.probe.record(faults);
    output
}

/// Minor page faults the calling thread has taken so far.
fn minor_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid place for the kernel to write a `rusage` into.
    let done = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    if done != 0 {
        return 0;
    }
    // SAFETY: initialized above (zeroed, then written by the kernel).
    u64::try_from(unsafe { usage.assume_init() }.ru_minflt).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(placement: &Probe, faults: impl IntoIterator<Item = u64>) {
        for count in faults {
            placement.record(count);
        }
    }

    #[test]
    fn a_component_that_keeps_faulting_is_moved_once() {
        let placement = Probe::probing();
        // Cold slots first: counted as nothing, however many faults.
        run(
            &placement,
            std::iter::repeat_n(5000, SKIPPED_EVENTS as usize),
        );
        assert!(placement.probing_now());
        run(&placement, (0..MEASURED_EVENTS).map(|i| 200 + u64::from(i)));
        assert_eq!(placement.fewest_faults(), Some(200));
        assert!(
            !placement.probing_now(),
            "decided after the measured events"
        );
        assert!(placement.take_move());
        assert!(!placement.take_move(), "only one caller moves it");
        placement.moved(true);
        assert!(placement.resets_whole());
    }

    #[test]
    fn one_quiet_event_keeps_a_component_where_it_is() {
        let placement = Probe::probing();
        run(&placement, std::iter::repeat_n(0, SKIPPED_EVENTS as usize));
        run(
            &placement,
            std::iter::repeat_n(500, MEASURED_EVENTS as usize - 1),
        );
        run(&placement, [MOVE_AT_FAULTS]);
        assert!(!placement.probing_now());
        assert!(!placement.take_move());
        assert!(!placement.resets_whole());
        // Later events change nothing.
        run(&placement, std::iter::repeat_n(9999, 64));
        assert_eq!(placement.fewest_faults(), Some(MOVE_AT_FAULTS));
        assert!(!placement.take_move());
    }

    #[test]
    fn a_failed_move_leaves_it_where_it_was() {
        let placement = Probe::probing();
        run(
            &placement,
            std::iter::repeat_n(1000, (SKIPPED_EVENTS + MEASURED_EVENTS) as usize),
        );
        assert!(placement.take_move());
        placement.moved(false);
        assert!(!placement.resets_whole());
        assert!(!placement.take_move());
    }

    #[test]
    fn faults_on_fresh_pages_are_seen() {
        // A mapping of its own: pages from the allocator may have been touched before
        // (a run here saw 19 faults for 64 pages of a `Vec`).
        let pages = 64;
        let len = pages * 4096;
        // SAFETY: a new private anonymous mapping, written within its length and
        // unmapped below; nothing else refers to it.
        let faults = unsafe {
            let mapping = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(mapping, libc::MAP_FAILED);
            let before = minor_faults();
            for page in 0..pages {
                mapping.cast::<u8>().add(page * 4096).write_volatile(1);
            }
            let faults = minor_faults() - before;
            libc::munmap(mapping, len);
            faults
        };
        assert!(
            faults >= pages as u64 / 2,
            "{faults} faults for {pages} fresh pages"
        );
    }
}
