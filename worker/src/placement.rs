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
//! `perf stat -e minor-faults` on the platform under bench/sizes.sh's load). Whether
//! those faults cost more than a whole reset depends on the machine: on an earlier VM
//! whole resets doubled both interpreters' throughput; on a later one the JavaScript
//! hello served a sixth more with the scan, and only the Python one gained from whole
//! resets (bench/HISTORY.md, README "Component sizes").
//!
//! So every function starts on the engine that scans, and its first events are
//! measured: the minor page faults taken on the threads that poll them
//! (`getrusage(RUSAGE_THREAD)`) and the CPU time those threads spend on them, its
//! instance's teardown (the slot's reset) included (`CLOCK_THREAD_CPUTIME_ID`), for
//! [`MEASURED_EVENTS`] events after its first [`SKIPPED_EVENTS`] (which find cold
//! slots, where every event faults). If even the fewest faults of those events is at
//! most [`TRY_WHOLE_ABOVE_FAULTS`], it stays, and nothing is measured from then on:
//! a whole reset cannot win there. Otherwise it tries whole resets: it moves to the
//! engine that resets slots whole, and the same number of events is measured there.
//! It keeps whichever reset gave the lower median CPU time per event, so the choice
//! follows the machine it runs on rather than figures measured on another.
//!
//! Where an event's instance outlives it (a step whose store is put off, to be torn
//! down on another thread) its reset is not in its measured time; a function with such
//! events moves on its faults alone, as if its trial had shown whole resets cheaper.
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
use std::sync::{Arc, Mutex, RwLock};

/// Events of a function not counted at first, under each reset: its instances find
/// cold slots (nothing resident yet) until each slot it keeps warm was used once.
pub(crate) const SKIPPED_EVENTS: u32 = 16;

/// Events measured under each reset, after the skipped ones.
pub(crate) const MEASURED_EVENTS: u32 = 16;

/// Minor page faults per event at or below which a function stays with written-page
/// resets without trying whole ones. Whole resets (of up to 16 MiB) cost the Rust
/// hello about 60 µs more per event than the scan, and saved an interpreter's event
/// about 13 µs per fault the scan left it, on the VM where this was first measured
/// (bench/sizes.sh's load in both modes, with `perf stat`): the two meet near 5 faults
/// for a small memory and 40 for a full 16 MiB one. Above 32, which the components
/// measured so far are far from on either side (those that stay fault not at all;
/// the interpreters 60 and 216 times), the trial decides.
pub(crate) const TRY_WHOLE_ABOVE_FAULTS: u64 = 32;

/// Measured with written-page resets.
const PROBING: u8 = 0;
/// Settled with written-page resets.
const STAYS: u8 = 1;
/// To try whole resets, once a caller takes the move.
const WANTS_WHOLE: u8 = 2;
/// A move taken and under way.
const MOVING: u8 = 3;
/// Settled with whole resets.
const WHOLE: u8 = 4;
/// Measured with whole resets.
const TRYING_WHOLE: u8 = 5;
/// To go back to written-page resets, once a caller takes the move.
const WANTS_BACK: u8 = 6;

/// Which reset a measured event ran under: the state of its function's probe when it
/// started. An event that finishes after its function moved on is not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Phase(u8);

impl Phase {
    /// Index of the phase's counters and costs: 0 written pages, 1 whole.
    fn index(self) -> usize {
        usize::from(self.0 == TRYING_WHOLE)
    }
}

/// How an event's instance went, as far as measuring its reset goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Teardown {
    /// With the event, on the thread that polled it: its slot's reset is in the
    /// event's CPU time.
    WithTheEvent,
    /// Kept past the event (a producer's store, or one put off to another thread):
    /// its reset is not in the event's CPU time.
    PutOff,
    /// The host mapped region pages into its memory: its faults tell nothing about
    /// resets, and it counts as an event without faults.
    MappedRegions,
}

/// What one measured event cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Minor page faults taken while it was polled.
    faults: u64,
    /// CPU time its polls and its instance's teardown took, if the teardown was
    /// among them.
    cpu_ns: Option<u64>,
}

impl Sample {
    /// An event that took `faults` and `cpu_ns` while polled, whose instance went as
    /// `teardown` says.
    pub(crate) fn new(faults: u64, cpu_ns: u64, teardown: Teardown) -> Self {
        match teardown {
            Teardown::WithTheEvent => Self {
                faults,
                cpu_ns: Some(cpu_ns),
            },
            Teardown::PutOff => Self {
                faults,
                cpu_ns: None,
            },
            Teardown::MappedRegions => Self {
                faults: 0,
                cpu_ns: None,
            },
        }
    }
}

/// A move of a function between engines that its probe asks a caller to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// To the engine that resets slots whole, to try it.
    ToWhole,
    /// Back to the entry it had before: whole resets cost more.
    Back,
}

/// Where one function's instances start from: its entry, on the engine it was linked
/// on or, once moved, on the one that resets slots whole.
pub(crate) struct Placement {
    /// The function's name, for the log lines that say where it went.
    name: Arc<str>,
    entry: RwLock<Arc<Entry>>,
    /// Its entry on the engine it was linked on, kept while it tries whole resets:
    /// what it goes back to.
    before_trial: Mutex<Option<Arc<Entry>>>,
    /// Whether it stays, tries or moves, and what its events cost until that is
    /// decided.
    pub(crate) probe: Probe,
}

impl Placement {
    /// The placement of function `name`, starting from `entry`; its events are
    /// measured if `measured`.
    pub(crate) fn new(name: Arc<str>, entry: Arc<Entry>, measured: bool) -> Self {
        Self {
            name,
            entry: RwLock::new(entry),
            before_trial: Mutex::new(None),
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

    /// Starts every later event from `entry`, returning the entry it replaces;
    /// events in flight keep theirs.
    fn replace(&self, entry: Arc<Entry>) -> Arc<Entry> {
        std::mem::replace(
            &mut *self
                .entry
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            entry,
        )
    }

    /// The entry kept for a move back, if any.
    fn before_trial(&self) -> std::sync::MutexGuard<'_, Option<Arc<Entry>>> {
        self.before_trial
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Ends a move to whole resets taken with [`Probe::take_move`]: later events start
    /// from `entry`, the same component linked on the engine that resets slots whole,
    /// and are measured there, unless its events' costs could not be measured (then it
    /// keeps whole resets on its faults alone).
    pub(crate) fn move_to_whole(&self, entry: Arc<Entry>) {
        let before = self.replace(entry);
        if self.probe.moved(true) == TRYING_WHOLE {
            *self.before_trial() = Some(before);
            tracing::info!(
                function = &*self.name,
                fewest_faults_per_event = self.probe.fewest_faults(),
                "function tries whole slot resets: its events kept faulting pages in"
            );
        } else {
            tracing::info!(
                function = &*self.name,
                fewest_faults_per_event = self.probe.fewest_faults(),
                "function moved to whole slot resets: its events kept faulting pages in"
            );
        }
    }

    /// Makes a move back taken with [`Probe::take_move`]: later events start from the
    /// entry it had before trying whole resets, and it stays there.
    pub(crate) fn move_back(&self) {
        if let Some(before) = self.before_trial().take() {
            self.replace(before);
        }
        self.probe.moved(false);
        let [written_pages_us, whole_us] = self.probe.median_cpu_us();
        tracing::info!(
            function = &*self.name,
            written_pages_us,
            whole_us,
            "function went back to written-page slot resets: whole ones cost its events more CPU time"
        );
    }

    /// Counts one event that started in `phase`; decides once the measured events of
    /// its phase are in.
    pub(crate) fn record(&self, phase: Phase, sample: Sample) {
        if self.probe.record(phase, sample) == Some(WHOLE) {
            // Settled: the code linked for written-page resets is not needed any more.
            self.before_trial().take();
            let [written_pages_us, whole_us] = self.probe.median_cpu_us();
            tracing::info!(
                function = &*self.name,
                written_pages_us,
                whole_us,
                "function keeps whole slot resets"
            );
        }
    }
}

/// Whether a function stays where it was linked, tries whole resets or moves to
/// them, and what its events cost until that is decided.
#[derive(Debug)]
pub(crate) struct Probe {
    state: AtomicU8,
    /// Events that finished in each phase (written pages, whole).
    finished: [AtomicU32; 2],
    /// Measured events of each phase.
    measured: [AtomicU32; 2],
    /// The fewest faults of an event measured with written-page resets.
    fewest: AtomicU64,
    /// The CPU times of measured events; only locked while measuring.
    costs: Mutex<Costs>,
}

/// The CPU times of a function's measured events, in nanoseconds.
#[derive(Debug, Default)]
struct Costs {
    /// Per phase (written pages, whole).
    cpu_ns: [Vec<u64>; 2],
    /// Some measured event's instance outlived it (its reset was not timed).
    untimed: bool,
}

impl Probe {
    fn with_state(state: u8) -> Self {
        Self {
            state: AtomicU8::new(state),
            finished: Default::default(),
            measured: Default::default(),
            fewest: AtomicU64::new(u64::MAX),
            costs: Mutex::default(),
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

    fn costs(&self) -> std::sync::MutexGuard<'_, Costs> {
        self.costs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The phase its events are measured in now, if they are.
    pub(crate) fn phase(&self) -> Option<Phase> {
        match self.state.load(Ordering::Relaxed) {
            state @ (PROBING | TRYING_WHOLE) => Some(Phase(state)),
            _ => None,
        }
    }

    /// Whether it moved to whole resets and keeps them.
    pub(crate) fn resets_whole(&self) -> bool {
        self.state.load(Ordering::Acquire) == WHOLE
    }

    /// The fewest faults of its events measured with written-page resets, once all of
    /// them were counted.
    pub(crate) fn fewest_faults(&self) -> Option<u64> {
        (self.measured[0].load(Ordering::Acquire) >= MEASURED_EVENTS)
            .then(|| self.fewest.load(Ordering::Acquire))
    }

    /// The median CPU time of its measured events with written-page resets and with
    /// whole ones, in microseconds, where measured.
    pub(crate) fn median_cpu_us(&self) -> [Option<u64>; 2] {
        let costs = self.costs();
        [0, 1].map(|phase| median(&costs.cpu_ns[phase]).map(|ns| ns / 1000))
    }

    /// Counts one event that started in `phase`; once the measured events of that
    /// phase are in, decides and returns the state it moved to.
    fn record(&self, phase: Phase, sample: Sample) -> Option<u8> {
        if self.state.load(Ordering::Acquire) != phase.0 {
            return None;
        }
        let index = phase.index();
        let finished = self.finished[index].fetch_add(1, Ordering::AcqRel);
        if !(SKIPPED_EVENTS..SKIPPED_EVENTS + MEASURED_EVENTS).contains(&finished) {
            return None;
        }
        if phase.0 == PROBING {
            self.fewest.fetch_min(sample.faults, Ordering::AcqRel);
        }
        match sample.cpu_ns {
            Some(ns) => self.costs().cpu_ns[index].push(ns),
            None => self.costs().untimed = true,
        }
        if self.measured[index].fetch_add(1, Ordering::AcqRel) + 1 != MEASURED_EVENTS {
            return None;
        }
        let decided = if phase.0 == PROBING {
            if self.fewest.load(Ordering::Acquire) > TRY_WHOLE_ABOVE_FAULTS {
                WANTS_WHOLE
            } else {
                STAYS
            }
        } else {
            let costs = self.costs();
            match (median(&costs.cpu_ns[0]), median(&costs.cpu_ns[1])) {
                (Some(written), Some(whole)) if !costs.untimed && written <= whole => WANTS_BACK,
                _ => WHOLE,
            }
        };
        self.state.store(decided, Ordering::Release);
        Some(decided)
    }

    /// The move a caller is to make now, if any; each is given to one caller only.
    pub(crate) fn take_move(&self) -> Option<Move> {
        let (from, to) = match self.state.load(Ordering::Relaxed) {
            WANTS_WHOLE => (WANTS_WHOLE, Move::ToWhole),
            WANTS_BACK => (WANTS_BACK, Move::Back),
            _ => return None,
        };
        self.state
            .compare_exchange(from, MOVING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
            .then_some(to)
    }

    /// Ends a move taken with [`Self::take_move`], returning the state it is in now:
    /// if it moved to whole resets (`to_whole`), it tries them, or keeps them when its
    /// costs could not be timed; otherwise (a move back, or a failed move) it stays
    /// with written-page resets.
    pub(crate) fn moved(&self, to_whole: bool) -> u8 {
        let next = match to_whole {
            false => STAYS,
            true if self.costs().untimed => WHOLE,
            true => TRYING_WHOLE,
        };
        self.state.store(next, Ordering::Release);
        next
    }
}

/// The median of `values` (the upper one of an even count), if there are any.
fn median(values: &[u64]) -> Option<u64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied()
}

/// Drives `guest`, an event of a function placed by `placement`, measuring it if the
/// placement is still being measured: the minor page faults taken and the CPU time
/// spent while it is polled, and while it is dropped (with it its store, and the reset
/// of its slot) as soon as it finishes. `teardown` says of its output how its
/// instance went.
pub(crate) async fn measure<F: Future>(
    placement: Arc<Placement>,
    guest: F,
    teardown: fn(&F::Output) -> Teardown,
) -> F::Output {
    let Some(phase) = placement.probe.phase() else {
        return guest.await;
    };
    let (output, sample) = measured(guest, teardown).await;
    placement.record(phase, sample);
    output
}

/// Drives `guest` to its end and drops it, measuring both.
async fn measured<F: Future>(
    guest: F,
    teardown: fn(&F::Output) -> Teardown,
) -> (F::Output, Sample) {
    // Boxed so that it can be dropped inside the measured poll, not after it.
    let mut guest = Some(Box::pin(guest));
    let (mut faults, mut cpu_ns) = (0, 0);
    let output = std::future::poll_fn(|cx| {
        let (faults_before, cpu_before) = (minor_faults(), thread_cpu_ns());
        // Never polled again once it gave its output (`poll_fn`'s contract).
        let polled = match guest.as_mut() {
            Some(running) => running.as_mut().poll(cx),
            None => std::task::Poll::Pending,
        };
        if polled.is_ready() {
            guest = None;
        }
        faults += minor_faults().saturating_sub(faults_before);
        cpu_ns += thread_cpu_ns().saturating_sub(cpu_before);
        polled
    })
    .await;
    let sample = Sample::new(faults, cpu_ns, teardown(&output));
    (output, sample)
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

/// CPU time the calling thread has used so far, in nanoseconds (user and system).
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid place for the kernel to write a `timespec` into.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRITTEN: Phase = Phase(PROBING);
    const TRIAL: Phase = Phase(TRYING_WHOLE);

    /// An event that took `faults` and `cpu_us`, its instance gone with it.
    fn event(faults: u64, cpu_us: u64) -> Sample {
        Sample::new(faults, cpu_us * 1000, Teardown::WithTheEvent)
    }

    /// Event `at`'s instance going as `teardown` says, the others' with their events.
    fn one_event(at: u32, teardown: Teardown) -> impl Fn(u32) -> Teardown {
        move |i| {
            if i == at {
                teardown
            } else {
                Teardown::WithTheEvent
            }
        }
    }

    fn run(probe: &Probe, phase: Phase, events: impl IntoIterator<Item = Sample>) {
        for sample in events {
            probe.record(phase, sample);
        }
    }

    /// Skipped events (cold slots: many faults, much time), then measured ones.
    fn phase_of(probe: &Probe, phase: Phase, measured: impl Fn(u32) -> Sample) {
        run(
            probe,
            phase,
            std::iter::repeat_n(event(5000, 90_000), SKIPPED_EVENTS as usize),
        );
        assert_eq!(probe.phase(), Some(phase), "still measuring");
        run(probe, phase, (0..MEASURED_EVENTS).map(measured));
    }

    /// A probe whose written-page events faulted 200+ times at 1,000-1,015 µs, moved
    /// to try whole resets.
    fn trying_whole() -> Probe {
        let probe = Probe::probing();
        phase_of(&probe, WRITTEN, |i| {
            event(200 + u64::from(i), 1000 + u64::from(i))
        });
        assert_eq!(probe.fewest_faults(), Some(200));
        assert_eq!(probe.phase(), None, "decided after the measured events");
        assert_eq!(probe.take_move(), Some(Move::ToWhole));
        assert_eq!(probe.take_move(), None, "only one caller moves it");
        assert_eq!(probe.moved(true), TRYING_WHOLE);
        assert_eq!(probe.phase(), Some(TRIAL));
        assert!(!probe.resets_whole(), "not before its trial says so");
        probe
    }

    #[test]
    fn a_function_whose_events_are_cheaper_with_whole_resets_keeps_them() {
        let probe = trying_whole();
        phase_of(&probe, TRIAL, |i| event(0, 600 + u64::from(i) * 50));
        assert!(probe.resets_whole());
        assert_eq!(probe.phase(), None, "nothing measured from then on");
        assert_eq!(probe.take_move(), None);
        assert_eq!(probe.median_cpu_us(), [Some(1008), Some(1000)]);
    }

    #[test]
    fn a_function_whose_events_cost_more_with_whole_resets_goes_back() {
        let probe = trying_whole();
        // Half its events cheaper than with written pages, the median dearer.
        phase_of(&probe, TRIAL, |i| event(0, if i < 7 { 500 } else { 1500 }));
        assert!(!probe.resets_whole());
        assert_eq!(probe.take_move(), Some(Move::Back));
        assert_eq!(probe.take_move(), None, "only one caller moves it back");
        assert_eq!(probe.moved(false), STAYS);
        assert_eq!(probe.phase(), None, "nothing measured from then on");
        assert!(!probe.resets_whole());
        assert_eq!(probe.take_move(), None, "it is not tried again");
    }

    #[test]
    fn one_quiet_event_keeps_a_function_where_it_is() {
        let probe = Probe::probing();
        run(
            &probe,
            WRITTEN,
            std::iter::repeat_n(event(0, 10), SKIPPED_EVENTS as usize),
        );
        run(
            &probe,
            WRITTEN,
            std::iter::repeat_n(event(500, 10), MEASURED_EVENTS as usize - 1),
        );
        run(&probe, WRITTEN, [event(TRY_WHOLE_ABOVE_FAULTS, 10)]);
        assert_eq!(probe.phase(), None);
        assert_eq!(probe.take_move(), None);
        assert!(!probe.resets_whole());
        // Later events change nothing.
        run(&probe, WRITTEN, std::iter::repeat_n(event(9999, 10), 64));
        assert_eq!(probe.fewest_faults(), Some(TRY_WHOLE_ABOVE_FAULTS));
        assert_eq!(probe.take_move(), None);
    }

    #[test]
    fn a_failed_move_leaves_it_where_it_was() {
        let probe = Probe::probing();
        phase_of(&probe, WRITTEN, |_| event(1000, 10));
        assert_eq!(probe.take_move(), Some(Move::ToWhole));
        assert_eq!(probe.moved(false), STAYS);
        assert!(!probe.resets_whole());
        assert_eq!(probe.take_move(), None);
        assert_eq!(probe.phase(), None);
    }

    #[test]
    fn a_function_whose_instances_outlive_its_events_moves_on_its_faults_alone() {
        let probe = Probe::probing();
        phase_of(&probe, WRITTEN, |i| {
            Sample::new(300, 10_000, one_event(3, Teardown::PutOff)(i))
        });
        assert_eq!(probe.take_move(), Some(Move::ToWhole));
        assert_eq!(
            probe.moved(true),
            WHOLE,
            "no trial: its resets were not all timed"
        );
        assert!(probe.resets_whole());
        assert_eq!(probe.phase(), None);
    }

    #[test]
    fn events_that_mapped_regions_keep_a_function_where_it_is() {
        let probe = Probe::probing();
        phase_of(&probe, WRITTEN, |i| {
            Sample::new(5000, 10, one_event(0, Teardown::MappedRegions)(i))
        });
        assert_eq!(probe.fewest_faults(), Some(0));
        assert_eq!(probe.take_move(), None);
    }

    #[test]
    fn events_of_an_earlier_phase_are_not_counted_in_a_later_one() {
        let probe = trying_whole();
        // Events that started with written-page resets and finish during the trial:
        // cheap ones, which would otherwise send it back.
        run(&probe, WRITTEN, std::iter::repeat_n(event(0, 1), 64));
        assert_eq!(
            probe.phase(),
            Some(TRIAL),
            "the trial has not begun counting"
        );
        phase_of(&probe, TRIAL, |_| event(0, 400));
        assert!(probe.resets_whole());
        assert_eq!(probe.median_cpu_us(), [Some(1008), Some(400)]);
    }

    /// A future that gives its output at once and, when dropped, spins until its
    /// thread has used `DROP_CPU` more CPU time: as a slot's reset does.
    struct DearToDrop;

    const DROP_CPU: std::time::Duration = std::time::Duration::from_millis(20);

    impl Future for DearToDrop {
        type Output = u8;
        fn poll(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<u8> {
            std::task::Poll::Ready(7)
        }
    }

    impl Drop for DearToDrop {
        fn drop(&mut self) {
            let until = thread_cpu_ns() + DROP_CPU.as_nanos() as u64;
            while thread_cpu_ns() < until {
                std::hint::black_box(0);
            }
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_events_teardown_is_in_its_measured_cpu_time() {
        let (output, sample) = measured(DearToDrop, |_| Teardown::WithTheEvent).await;
        assert_eq!(output, 7);
        let cpu_ns = sample.cpu_ns.expect("timed");
        assert!(
            cpu_ns >= DROP_CPU.as_nanos() as u64,
            "{cpu_ns} ns measured for a drop of at least {DROP_CPU:?}"
        );
        let (_, put_off) = measured(DearToDrop, |_| Teardown::PutOff).await;
        assert_eq!(put_off.cpu_ns, None, "a put-off teardown is not timed");
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
