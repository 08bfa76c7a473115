//! Fair CPU between tenants: which guest may run next when there are more runnable
//! guests than cores.
//!
//! A guest runs only while its future is polled, and a guest never blocks a thread for
//! long: the epoch callback ([`crate::worker`]) makes a running guest yield once its
//! poll's slice is over ([`slice_over`]), and a guest waiting on the host returns
//! `Pending`. A slice is one epoch tick, or [`SLICE_ALONE`] ticks while the guest's
//! tenant is alone on the worker and the guest is on a guest thread: its events then
//! only share the cores with each other, and running each a while longer keeps its
//! memory in the caches (the Python hello, whose instance uses 7 MB, had about half
//! the p99 with five-tick slices as with one). So the unit of CPU is
//! one poll of a guest's future, and [`Fair`] wraps that future: before each poll it
//! takes one of [`CpuShares`]' turns (as many as the worker has cores for guests), and
//! gives it back when the poll returns. When every turn is taken, polls queue; a freed
//! turn goes to the waiting guest whose tenant holds the fewest turns, then has used
//! the least guest CPU (oldest first among equals).
//!
//! The tenants active in the last [`ACTIVE_WINDOW`] split the turns equally; a tenant
//! alone has them all. The share holds even while a tenant's guests are all waiting
//! on the host, as a tenant serving short requests mostly is: were its share handed to
//! a tenant of busy loops whenever it was unused for a moment, the loops would fill
//! every core and its requests would queue behind them in the kernel's scheduler.
//! A guest of a tenant holding fewer turns than another does not even wait for the
//! tick: its arrival ends the current epoch tick at once (`preempt`), so the running
//! guests yield within microseconds. The queue costs one uncontended lock per poll.
//! Host work a guest sets going whose CPU time it chooses, its outbound connections
//! with their TLS handshakes (`outbound.rs`), takes its tenant's turns the same way
//! while another tenant is active ([`CpuShares::run_host`]).
//!
//! Guests are polled on threads of their own ([`GuestPool`]), not on the threads that
//! accept connections and move bytes: a guest poll lasts up to a tick, and a runtime
//! thread busy with one cannot poll its sockets meanwhile. With separate threads the
//! kernel's scheduler interleaves the two, and an idle tenant's request is read and
//! answered while other tenants' guests spin. The one exception is the first poll of an
//! HTTP function, whose tenant is alone or has kept its first polls short: it runs on
//! the thread that received the request, so a short event needs no hand-off (see
//! [`GuestPool::spawn`]).
//!
//! Turns decide which guests run; the kernel still decides when, and a busy loop on a
//! guest thread competes for the cores with the threads that read the next request
//! and write its answer, so every step of another tenant's short event would wait in
//! the kernel's run queue behind it. Hence a guest that has run for [`DEMOTE_AFTER`]
//! (an event that computes rather than answers) moves to background threads at the
//! lowest priority, nice [`BACKGROUND_NICE`], while another tenant is active, and
//! back once none is. Short events never get there. A tenant alone computes at normal
//! priority, and a demoted guest keeps a small share of the CPU however busy the
//! machine is: the kernel's idle policy (`SCHED_IDLE`), used before, let a computing
//! guest get no CPU at all until its deadline on a machine kept busy by other work.
//!
//! Demoted guests still poll only with a turn, so tenants share the background
//! threads as they share the normal ones: the priority puts computing guests behind
//! short events, not behind each other.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// How far behind the least busy running tenant a tenant's CPU count may start: how
/// long a tenant back from idling may go first.
const IDLE_CREDIT: u64 = 20_000_000;

/// How long a tenant counts as active after its last guest asked for a turn.
const ACTIVE_WINDOW: std::time::Duration = std::time::Duration::from_millis(100);

/// How much CPU time a first poll on a receiving thread may use (a hello uses about 30 µs)
/// before its tenant's next guests start on the guest threads while another tenant is
/// active, for [`SLOW_HERE_FOR`]: see [`GuestPool::spawn`].
const QUICK_HERE: std::time::Duration = std::time::Duration::from_micros(500);

/// How long a tenant whose first poll on a receiving thread outlasted [`QUICK_HERE`]
/// starts its guests on the guest threads while another tenant is active.
const SLOW_HERE_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// How much guest CPU time an event may use on the normal-priority guest threads
/// before it may move to the background ones: one epoch tick (a hello uses about
/// 20 µs, a busy loop reaches this at its first tick).
pub(crate) const DEMOTE_AFTER: std::time::Duration = std::time::Duration::from_millis(2);

/// How many epoch ticks one poll of a guest may last while its tenant is alone on the
/// worker and it runs on a guest thread (see the module's documentation).
pub(crate) const SLICE_ALONE: u32 = 5;

thread_local! {
    /// The slice of the guest being polled on this thread, if one is.
    static SLICE: RefCell<Option<Slice>> = const { RefCell::new(None) };
}

/// What is left of the slice of the guest being polled on this thread.
#[derive(Debug)]
struct Slice {
    ticks_left: u32,
    /// Its worker's count of preemptions, and its value when the poll began: a
    /// preemption ends every slice at once.
    preemptions: Arc<AtomicU64>,
    preemptions_at_start: u64,
}

/// Counts an epoch tick against the slice of the guest being polled on this thread,
/// and says whether the slice is over: whether the guest must yield now. The epoch
/// callback calls it at every tick; outside a guest's poll, every tick ends the slice.
pub(crate) fn slice_over() -> bool {
    SLICE.with_borrow_mut(|slice| match slice {
        None => true,
        Some(slice) => {
            slice.ticks_left = slice.ticks_left.saturating_sub(1);
            slice.ticks_left == 0
                || slice.preemptions.load(Ordering::Acquire) != slice.preemptions_at_start
        }
    })
}

/// The turns to run guest code, shared by every event of a worker.
pub(crate) struct CpuShares {
    turns: usize,
    state: Mutex<State>,
    next_ticket: AtomicU64,
    /// Makes every running guest yield now (see `EpochClock::preempter`).
    preempt: Box<dyn Fn() + Send + Sync>,
    /// How many times `preempt` was called: it ends every slice, however long.
    preemptions: Arc<AtomicU64>,
}

impl std::fmt::Debug for CpuShares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuShares")
            .field("turns", &self.turns)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    /// Turns held right now, in total and per tenant.
    held: usize,
    per_tenant: HashMap<Arc<str>, usize>,
    /// Polls waiting for a turn, oldest first.
    waiting: VecDeque<Waiter>,
    /// Tickets handed a turn that their polls have not taken yet, with their tenants.
    granted: Vec<(u64, Arc<str>)>,
    /// Guests made but not polled yet, per tenant: a turn a less busy tenant is about
    /// to ask for is kept free for it rather than granted to a busier one.
    arriving: HashMap<Arc<str>, usize>,
    /// CPU time each tenant's guests used, in nanoseconds (as in a fair scheduler's
    /// virtual runtime): between tenants holding as many turns, the one that used less
    /// goes first, so a tenant of short requests goes before one of busy loops.
    used: HashMap<Arc<str>, u64>,
    /// When each tenant last had a guest arrive or ask for a turn: the tenants seen
    /// within [`ACTIVE_WINDOW`] split the turns between them.
    seen: HashMap<Arc<str>, Instant>,
    /// When a first poll of each tenant on a receiving thread last outlasted
    /// [`QUICK_HERE`].
    slow_here: HashMap<Arc<str>, Instant>,
    /// First polls running on receiving threads right now, per tenant.
    here: HashMap<Arc<str>, usize>,
}

impl State {
    /// Turns `tenant` holds or was granted.
    fn load(&self, tenant: &Arc<str>) -> usize {
        self.per_tenant.get(tenant).copied().unwrap_or(0)
            + self.granted.iter().filter(|(_, t)| t == tenant).count()
    }

    /// Notes that `tenant` is active now.
    fn see(&mut self, tenant: &Arc<str>, now: Instant) {
        self.seen.insert(tenant.clone(), now);
    }

    /// Whether a tenant other than `tenant` was active within [`ACTIVE_WINDOW`].
    fn others_active(&self, tenant: &Arc<str>, now: Instant) -> bool {
        self.seen
            .iter()
            .any(|(other, seen)| other != tenant && now.duration_since(*seen) < ACTIVE_WINDOW)
    }

    /// The most turns one tenant may hold: an equal share of them between the tenants
    /// active within [`ACTIVE_WINDOW`] (all of them for a tenant alone). A share left
    /// unused for a moment stays free: a tenant serving short requests has its guests
    /// in the host most of the time, and would otherwise find its share taken whenever
    /// one arrives.
    fn cap(&mut self, turns: usize, now: Instant) -> usize {
        self.seen
            .retain(|_, seen| now.duration_since(*seen) < ACTIVE_WINDOW);
        turns.div_ceil(self.seen.len().max(1))
    }

    /// Whether `tenant` may take a free turn now (and notes it active): it holds fewer
    /// than its share, one is free, and no waiter or arriving guest goes first (a
    /// tenant holding fewer turns, or as few and queued earlier).
    fn may_take(&mut self, tenant: &Arc<str>, turns: usize, now: Instant) -> bool {
        self.catch_up(tenant);
        self.see(tenant, now);
        let cap = self.cap(turns, now);
        let own = self.priority(tenant);
        own.0 < cap
            && self.free(turns)
            && self.waiting.iter().all(|w| self.priority(&w.tenant) > own)
            && !self.arriving.keys().any(|t| self.priority(t) < own)
    }

    /// Who goes first: the tenant holding fewer turns, then the one that used less.
    fn priority(&self, tenant: &Arc<str>) -> (usize, u64) {
        (
            self.load(tenant),
            self.used.get(tenant).copied().unwrap_or(0),
        )
    }

    /// Starts or catches up `tenant`'s count of CPU used: no lower than the least any
    /// running tenant used, less [`IDLE_CREDIT`], so a tenant back from idling (or new)
    /// goes first for a while but cannot make up for all the time it was away.
    fn catch_up(&mut self, tenant: &Arc<str>) {
        let floor = self
            .per_tenant
            .keys()
            .filter_map(|t| self.used.get(t))
            .min()
            .map_or(0, |least| least.saturating_sub(IDLE_CREDIT));
        let used = self.used.entry(tenant.clone()).or_default();
        *used = (*used).max(floor);
    }

    fn free(&self, turns: usize) -> bool {
        self.held + self.granted.len() < turns
    }

    /// Whether another tenant holds more turns than `tenant`: `tenant` is owed the
    /// next turn, so the running guests should yield now instead of at their tick's end.
    fn behind(&self, tenant: &Arc<str>) -> bool {
        let own = self.load(tenant);
        self.per_tenant.values().any(|&held| held > own)
    }

    fn count_down(map: &mut HashMap<Arc<str>, usize>, tenant: &Arc<str>) {
        if let Some(count) = map.get_mut(tenant) {
            *count -= 1;
            if *count == 0 {
                map.remove(tenant);
            }
        }
    }
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    tenant: Arc<str>,
    waker: Waker,
}

impl CpuShares {
    /// Shares `turns` turns (at least one): how many guests may run at once.
    /// `preempt` makes every running guest yield at once; it is called when a guest of
    /// a tenant holding fewer turns than another arrives or queues.
    pub(crate) fn new(turns: usize, preempt: impl Fn() + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            turns: turns.max(1),
            state: Mutex::default(),
            next_ticket: AtomicU64::new(0),
            preempt: Box::new(preempt),
            preemptions: Arc::default(),
        })
    }

    /// Makes every running guest yield now, however much of its slice is left.
    fn preempt_all(&self) {
        self.preemptions.fetch_add(1, Ordering::AcqRel);
        (self.preempt)();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a turn for `tenant` if `ticket` was granted one, or if one is free and no
    /// waiter or arriving guest would come first (a tenant holding fewer turns, or as
    /// few and queued earlier), and returns how many epoch ticks the poll holding it may
    /// last; otherwise queues `ticket` and returns `None`.
    fn enter(&self, tenant: &Arc<str>, ticket: u64, waker: &Waker, first: bool) -> Option<u32> {
        let mut state = self.lock();
        if first {
            State::count_down(&mut state.arriving, tenant);
        }
        let may_take = match state.granted.iter().position(|(t, _)| *t == ticket) {
            Some(index) => {
                state.granted.swap_remove(index);
                true
            }
            None => state.may_take(tenant, self.turns, Instant::now()),
        };
        if may_take {
            state.held += 1;
            *state.per_tenant.entry(tenant.clone()).or_default() += 1;
            let alone = state.seen.len() <= 1;
            return Some(if alone { SLICE_ALONE } else { 1 });
        }
        match state.waiting.iter_mut().find(|w| w.ticket == ticket) {
            Some(waiter) => waiter.waker.clone_from(waker),
            None => state.waiting.push_back(Waiter {
                ticket,
                tenant: tenant.clone(),
                waker: waker.clone(),
            }),
        }
        let behind = state.behind(tenant);
        drop(state);
        if behind {
            self.preempt_all();
        }
        None
    }

    /// Takes a turn for `tenant`'s first poll on the thread that received its event
    /// if it may run there (see [`GuestPool::spawn`]), and says whether it did; that
    /// poll runs at once or not there at all, it never queues. It takes a turn even
    /// if every turn is held: the receiving threads bound how many such polls run at
    /// once. While another tenant is active, the tenant must not have had a slow first
    /// poll there within [`SLOW_HERE_FOR`], and may have only its share of those
    /// threads (as many polls as its share of the turns) running first polls, or a
    /// tenant of events just short of [`QUICK_HERE`] could fill them. Turns its guests
    /// hold on the guest threads do not count against it: they would send its next
    /// first poll there too, and the next, as queueing for a turn did (see
    /// [`GuestPool::spawn`]). `None` if it may not; otherwise whether another tenant
    /// was active when it entered.
    fn enter_here(&self, tenant: &Arc<str>) -> Option<HereAmong> {
        let mut state = self.lock();
        let now = Instant::now();
        state.see(tenant, now);
        let among = if state.others_active(tenant, now) {
            let slow = state
                .slow_here
                .get(tenant)
                .is_some_and(|slow| now.duration_since(*slow) < SLOW_HERE_FOR);
            let running = state.here.get(tenant).copied().unwrap_or(0);
            if slow || running >= state.cap(self.turns, now) {
                return None;
            }
            HereAmong::Others
        } else {
            HereAmong::OwnOnly
        };
        State::count_down(&mut state.arriving, tenant);
        state.held += 1;
        *state.per_tenant.entry(tenant.clone()).or_default() += 1;
        *state.here.entry(tenant.clone()).or_default() += 1;
        Some(among)
    }

    /// Notes that a first poll of `tenant` on a receiving thread ended, after using
    /// `cpu` of that thread's CPU time (zero for a poll too short to reach
    /// [`QUICK_HERE`]).
    fn leave_here(&self, tenant: &Arc<str>, cpu: std::time::Duration) {
        let mut state = self.lock();
        State::count_down(&mut state.here, tenant);
        if cpu >= QUICK_HERE {
            let now = Instant::now();
            state
                .slow_here
                .retain(|_, slow| now.duration_since(*slow) < SLOW_HERE_FOR);
            state.slow_here.insert(tenant.clone(), now);
        }
    }

    /// Gives `tenant`'s turn back, held for `ran`, and hands free turns to the
    /// fairest waiters.
    fn leave(&self, tenant: &Arc<str>, ran: std::time::Duration) {
        let mut state = self.lock();
        let ran = u64::try_from(ran.as_nanos()).unwrap_or(u64::MAX);
        let used = state.used.entry(tenant.clone()).or_default();
        *used = used.saturating_add(ran);
        state.held -= 1;
        State::count_down(&mut state.per_tenant, tenant);
        Self::grant(self.turns, &mut state);
    }

    /// Forgets `ticket` (its future was dropped while arriving, queued or granted).
    fn cancel(&self, tenant: &Arc<str>, ticket: u64, arriving: bool) {
        let mut state = self.lock();
        if arriving {
            State::count_down(&mut state.arriving, tenant);
        }
        state.waiting.retain(|waiter| waiter.ticket != ticket);
        state.granted.retain(|(t, _)| *t != ticket);
        Self::grant(self.turns, &mut state);
    }

    /// Hands every free turn to the waiter whose tenant goes first (holds or was granted
    /// the fewest turns, then used the least CPU; the oldest waiter among equals),
    /// and wakes it; but keeps a turn free when a guest of a tenant that goes before it
    /// is about to ask.
    fn grant(turns: usize, state: &mut State) {
        let cap = state.cap(turns, Instant::now());
        while state.free(turns) {
            let Some((fairest, priority)) = (0..state.waiting.len())
                .map(|index| (index, state.priority(&state.waiting[index].tenant)))
                .filter(|&(_, (load, _))| load < cap)
                .min_by_key(|&(index, priority)| (priority, index))
            else {
                return;
            };
            if state.arriving.keys().any(|t| state.priority(t) < priority) {
                return;
            }
            let waiter = state.waiting.remove(fairest).expect("index is in range");
            state.granted.push((waiter.ticket, waiter.tenant));
            waiter.waker.wake();
        }
    }

    /// Whether a tenant other than `tenant` was active within [`ACTIVE_WINDOW`]: only
    /// then is there a short event for a computing guest of `tenant` to make way for.
    fn others_active(&self, tenant: &Arc<str>) -> bool {
        State::others_active(&self.lock(), tenant, Instant::now())
    }

    /// Whether any poll waits for a turn right now.
    #[cfg(test)]
    fn contended(&self) -> bool {
        !self.lock().waiting.is_empty()
    }

    /// Runs `future` (a guest's) for `tenant`, one turn per poll. If the tenant holds
    /// far fewer turns than another, the running guests are made to yield at once.
    pub(crate) fn run<F: Future>(self: &Arc<Self>, tenant: Arc<str>, future: F) -> Fair<F> {
        let mut state = self.lock();
        *state.arriving.entry(tenant.clone()).or_default() += 1;
        state.catch_up(&tenant);
        state.see(&tenant, Instant::now());
        let behind = !state.free(self.turns) && state.behind(&tenant);
        drop(state);
        if behind {
            self.preempt_all();
        }
        self.fair(tenant, future, false)
    }

    /// Runs `future`, host work that a guest of `tenant` set going and whose CPU time
    /// the guest chooses (an outbound connection and its TLS handshake: `outbound.rs`),
    /// one turn per poll while another tenant is active. While the tenant is alone it
    /// runs without one: it then takes the cores from no other tenant, and waiting
    /// behind its own guests' polls for a turn slowed a function that fetches from
    /// loopback (in a hand-run comparison of builds).
    pub(crate) fn run_host<F: Future>(self: &Arc<Self>, tenant: Arc<str>, future: F) -> Fair<F> {
        self.fair(tenant, future, true)
    }

    fn fair<F: Future>(self: &Arc<Self>, tenant: Arc<str>, future: F, host: bool) -> Fair<F> {
        Fair {
            shares: self.clone(),
            tenant,
            ticket: self.next_ticket.fetch_add(1, Ordering::Relaxed),
            future,
            polled: false,
            done: false,
            ran: std::time::Duration::ZERO,
            host,
            queued: false,
        }
    }
}

/// The threads guests run on, and the turns that share them between tenants.
pub(crate) struct GuestPool {
    /// Normal-priority threads, where guests start (but see [`FirstPoll`]). Taken (and
    /// shut down in the background) when the pool is dropped: a runtime must not be
    /// dropped from inside another one.
    runtime: Option<tokio::runtime::Runtime>,
    /// Low-priority threads, where a guest computes while another tenant is active.
    background: Option<tokio::runtime::Runtime>,
    shares: Arc<CpuShares>,
}

impl GuestPool {
    /// `threads` threads (at least one) with as many turns, and as many background
    /// threads; `preempt` as for [`CpuShares::new`].
    pub(crate) fn new(
        threads: usize,
        preempt: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let runtime = |name: &str| {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder
                .worker_threads(threads)
                // A new guest waits in the shared queue, which a busy thread would
                // check only every 61 polls of up to a tick each: check it every time.
                .global_queue_interval(1)
                .thread_name(name)
                .enable_all();
            builder
        };
        let background = runtime("faas-guest-bg")
            .on_thread_start(background_priority)
            .build()?;
        Ok(Self {
            runtime: Some(runtime("faas-guest").build()?),
            background: Some(background),
            shares: CpuShares::new(threads, preempt),
        })
    }

    /// Runs `guest`, the future driving one instance of `tenant`'s, polled only while
    /// it holds a fair turn: first on the calling thread if `first_poll` says so and
    /// the tenant may (see below), then on the normal guest threads, and on the
    /// background ones while it computes (has run for [`DEMOTE_AFTER`]) and another
    /// tenant is active; back on the normal threads once no other tenant is. Past
    /// `gone_at` the future is dropped (with its store), and the task gives `None`.
    ///
    /// The first poll on the calling thread is what makes a short event cheap: a hello
    /// instantiates, answers and ends in it, with no hand-off to a guest thread and
    /// back (the wake-ups and switches cost about as much as the instance itself). It
    /// lasts at most an epoch tick, like any poll, but the thread it holds is one that
    /// reads other requests. So while another tenant is active, only a tenant whose
    /// first polls there have been quick gets it: one that outlasted [`QUICK_HERE`]
    /// (a busy loop, a large instance) sends the tenant's guests to the guest threads
    /// for [`SLOW_HERE_FOR`]. A hostile tenant holds a receiving thread for at most a
    /// tick per [`SLOW_HERE_FOR`] that way, and the short events of another tenant
    /// under attack keep their cheap path. While another tenant is active, a tenant
    /// also runs at most its share of such polls at once ([`CpuShares::enter_here`]).
    /// Such a poll never queues for a turn: it runs now or the guest is handed on, and
    /// it takes a turn over the count if the tenant's own guests on the guest threads
    /// hold every one, as the receiving threads bound how many such polls run at once.
    /// (Queued instead, 7% of hellos under wrk went the slow way through the guest
    /// threads, and made the p99.)
    pub(crate) fn spawn<F>(
        &self,
        tenant: Arc<str>,
        first_poll: FirstPoll,
        guest: F,
        gone_at: tokio::time::Instant,
    ) -> GuestTask<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let mut guest = Box::pin(self.shares.run(tenant, guest));
        if first_poll == FirstPoll::Here {
            // A poll left pending registered this no-op waker at most; the guest
            // threads poll the task once as soon as it is spawned, which registers
            // theirs, so no wake-up is lost in the move.
            let mut cx = Context::from_waker(Waker::noop());
            if let Some(Poll::Ready(output)) = guest.as_mut().poll_here(&mut cx) {
                return GuestTask::Finished(Some(output));
            }
        }
        GuestTask::Spawned(self.spawn_polled(guest, gone_at))
    }

    /// The turns this pool's guests take, for host work done on a tenant's behalf
    /// that must take them too (`outbound.rs`).
    pub(crate) fn shares(&self) -> &Arc<CpuShares> {
        &self.shares
    }

    /// The runtime of the normal guest threads, for tasks that serve guests there
    /// ([`crate::Worker::on_guest_threads`]).
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("the runtime is only taken on drop")
            .handle()
    }

    /// Polls `guest` on the guest threads (see [`Self::spawn`]) until it finishes or
    /// `gone_at` passes.
    fn spawn_polled<F>(
        &self,
        mut guest: Pin<Box<Fair<F>>>,
        gone_at: tokio::time::Instant,
    ) -> tokio::task::JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let background = self
            .background
            .as_ref()
            .expect("the runtime is only taken on drop")
            .handle()
            .clone();
        self.handle().spawn(async move {
            loop {
                let demote = |guest: &Fair<F>| guest.ran >= DEMOTE_AFTER && guest.others_active();
                match tokio::time::timeout_at(gone_at, PollUntil(&mut guest, demote)).await {
                    Ok(Some(output)) => return Some(output),
                    Ok(None) => {}
                    Err(_) => break,
                }
                let promote = |guest: &Fair<F>| !guest.others_active();
                let task = AbortOnDrop(background.spawn(async move {
                    let polled =
                        tokio::time::timeout_at(gone_at, PollUntil(&mut guest, promote)).await;
                    (guest, polled)
                }));
                match task.await {
                    Ok((_, Ok(Some(output)))) => return Some(output),
                    Ok((back, Ok(None))) => guest = back,
                    Ok((back, Err(_))) => {
                        guest = back;
                        break;
                    }
                    Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
                    // The background runtime is shutting down with the worker.
                    Err(_) => return None,
                }
            }
            drop(guest);
            None
        })
    }
}

/// Where [`GuestPool::spawn`] polls a guest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstPoll {
    /// On the calling thread if no other tenant is active, or if the tenant's first
    /// polls there have been quick (see [`GuestPool::spawn`]): for an HTTP event, which
    /// mostly answers within that poll. Workflow steps do not: they mostly wait on the
    /// host (key-value, Redis) soon after they start, so their first poll only moves
    /// the instance's start to another thread than the one that continues it. Measured
    /// three times on the sensor pipeline at 16x, it was much worse each time:
    /// 1,600-2,100 against 4,300-5,700 matches/s, then 4,066 against 5,250 (while the
    /// receiving threads also moved the guests' Redis replies), and with those replies
    /// on the guest threads 2,700-3,700 against 5,000-5,700, for about 60% more CPU per
    /// match.
    Here,
    /// On the guest threads.
    OnGuestThreads,
}

/// A guest's event as [`GuestPool::spawn`] started it: awaited for its output (`None`
/// past its deadline), like the task it usually is.
pub(crate) enum GuestTask<T> {
    /// Finished in its first poll, on the calling thread.
    Finished(Option<T>),
    /// Running on the guest threads.
    Spawned(tokio::task::JoinHandle<Option<T>>),
}

impl<T> GuestTask<T> {
    /// What drops the guest at once, if it is still running.
    pub(crate) fn abort_handle(&self) -> Option<tokio::task::AbortHandle> {
        match self {
            Self::Finished(_) => None,
            Self::Spawned(task) => Some(task.abort_handle()),
        }
    }

    /// The guest's output, like awaiting the task, except that dropping this future
    /// before the guest ends drops the guest (its store, its slot) too: for a caller
    /// that waits for all of it, such as a workflow step, whose run may end first (its
    /// deadline, its caller gone). Not for an HTTP event, whose task goes on streaming
    /// the body after the head was answered.
    pub(crate) async fn stopped_if_dropped(self) -> Result<Option<T>, tokio::task::JoinError> {
        match self {
            Self::Finished(output) => Ok(output),
            Self::Spawned(task) => AbortOnDrop(task).await,
        }
    }
}

// The output is only ever moved out whole, never pinned.
impl<T> Unpin for GuestTask<T> {}

impl<T> Future for GuestTask<T> {
    type Output = Result<Option<T>, tokio::task::JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Finished(output) => Poll::Ready(Ok(output.take())),
            Self::Spawned(task) => Pin::new(task).poll(cx),
        }
    }
}

/// Polls a guest until it finishes (`Some`) or, after a poll, `done_here` says it is
/// to be polled elsewhere (`None`).
struct PollUntil<'a, F: Future, P>(&'a mut Pin<Box<Fair<F>>>, P);

impl<F: Future, P: Fn(&Fair<F>) -> bool + Unpin> Future for PollUntil<'_, F, P> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Self(guest, done_here) = &mut *self;
        match guest.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if done_here(&**guest) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A task aborted when its handle is dropped: the guest's background part must end
/// with the task that waits for it (an HTTP event aborts that one at its deadline), and
/// a run's walk with the call that waits for it (`run/chain.rs`).
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `nice` value of the background guest threads: the lowest priority that still
/// has a share of the CPU (about 1/70 of a thread at nice 0), so a computing guest is
/// slowed, never stopped, by whatever else runs.
const BACKGROUND_NICE: i32 = 19;

/// Whose guests shared the worker when a first poll took a turn on the thread that
/// received its event ([`CpuShares::enter_here`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HereAmong {
    /// Only its own tenant's were active.
    OwnOnly,
    /// Another tenant's were active too.
    Others,
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> std::time::Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// Lowers the calling thread to [`BACKGROUND_NICE`].
fn background_priority() {
    // On Linux `nice` is per thread, and pid 0 names the calling one.
    if let Err(err) = rustix::process::setpriority_process(None, BACKGROUND_NICE) {
        tracing::warn!("background guest thread: nice {BACKGROUND_NICE} refused ({err})");
    }
}

impl Drop for GuestPool {
    fn drop(&mut self) {
        for runtime in [self.runtime.take(), self.background.take()]
            .into_iter()
            .flatten()
        {
            runtime.shutdown_background();
        }
    }
}

pin_project_lite::pin_project! {
    /// A guest's future that is polled only while it holds one of its worker's turns.
    #[project = FairProj]
    pub(crate) struct Fair<F> {
        shares: Arc<CpuShares>,
        tenant: Arc<str>,
        ticket: u64,
        #[pin]
        future: F,
        polled: bool,
        done: bool,
        // CPU time so far (the guest's, or the host work's): the time its polls held
        // a turn.
        ran: std::time::Duration,
        // Host work ([`CpuShares::run_host`]): not counted among arriving guests, and
        // polled without a turn while its tenant is alone.
        host: bool,
        // Whether its ticket waits for a turn, or was granted one not yet taken: then
        // its next poll takes that turn, whoever is active.
        queued: bool,
    }

    impl<F> PinnedDrop for Fair<F> {
        fn drop(this: Pin<&mut Self>) {
            if !this.done {
                let arriving = !this.polled && !this.host;
                this.shares.cancel(&this.tenant, this.ticket, arriving);
            }
        }
    }
}

impl<F> Fair<F> {
    /// Whether another tenant than this guest's was active just now.
    fn others_active(&self) -> bool {
        self.shares.others_active(&self.tenant)
    }
}

impl<F: Future> Future for Fair<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let first = !self.polled && !self.host;
        let mut this = self.project();
        *this.polled = true;
        if *this.host && !*this.queued && !this.shares.others_active(this.tenant) {
            let polled = this.future.as_mut().poll(cx);
            *this.done = polled.is_ready();
            return polled;
        }
        let Some(ticks) = this
            .shares
            .enter(this.tenant, *this.ticket, cx.waker(), first)
        else {
            *this.queued = true;
            return Poll::Pending;
        };
        *this.queued = false;
        Self::poll_holding_turn(&mut this, cx, ticks)
    }
}

impl<F: Future> Fair<F> {
    /// Polls the guest for the first time on the thread that received its event, if
    /// it may run there now (see [`CpuShares::enter_here`]); `None` if not, and then
    /// it was not polled. That poll never queues for a turn: it runs now or the guest
    /// is handed on.
    fn poll_here(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Poll<F::Output>> {
        debug_assert!(!self.polled, "only the first poll runs here");
        let mut this = self.project();
        let among = this.shares.enter_here(this.tenant)?;
        *this.polled = true;
        // Ends the first poll there even if the guest's poll panics.
        struct Here(
            Arc<CpuShares>,
            Arc<str>,
            Instant,
            Option<std::time::Duration>,
        );
        impl Drop for Here {
            fn drop(&mut self) {
                // The thread's CPU time, not the poll's length: under load the kernel
                // may preempt even a hello's poll for longer than QUICK_HERE. A poll
                // shorter than that used less CPU than that, so only a long one pays
                // for a second read of the thread's CPU clock (a system call).
                let cpu = match self.3 {
                    Some(start) if self.2.elapsed() >= QUICK_HERE => {
                        thread_cpu_time().saturating_sub(start)
                    }
                    _ => std::time::Duration::ZERO,
                };
                self.0.leave_here(&self.1, cpu);
            }
        }
        // Slowness only counts while another tenant is active, so a tenant alone does
        // not pay for reading the thread's CPU clock (a system call, about 2% of a
        // hello's CPU time). A tenant that turns slow while alone is found at its
        // first poll here once another tenant is active: that poll holds this
        // thread for a tick at most, as the first slow poll of any tenant does.
        let cpu_at_start = (among == HereAmong::Others).then(thread_cpu_time);
        let here = Here(
            this.shares.clone(),
            this.tenant.clone(),
            Instant::now(),
            cpu_at_start,
        );
        // The thread is one that receives events: the guest leaves it at the first tick.
        let polled = Self::poll_holding_turn(&mut this, cx, 1);
        drop(here);
        Some(polled)
    }

    /// Polls the guest while holding the turn just taken, for at most `ticks` epoch
    /// ticks, and gives the turn back after.
    fn poll_holding_turn(
        this: &mut FairProj<'_, F>,
        cx: &mut Context<'_>,
        ticks: u32,
    ) -> Poll<F::Output> {
        // Gives the turn back, and ends the slice, even if the guest's poll panics.
        struct Turn<'a>(
            &'a CpuShares,
            &'a Arc<str>,
            Instant,
            &'a mut std::time::Duration,
        );
        impl Drop for Turn<'_> {
            fn drop(&mut self) {
                SLICE.set(None);
                let ran = self.2.elapsed();
                *self.3 += ran;
                self.0.leave(self.1, ran);
            }
        }
        let preemptions = this.shares.preemptions.clone();
        SLICE.set(Some(Slice {
            ticks_left: ticks,
            preemptions_at_start: preemptions.load(Ordering::Acquire),
            preemptions,
        }));
        let turn = Turn(this.shares, this.tenant, Instant::now(), this.ran);
        let polled = this.future.as_mut().poll(cx);
        drop(turn);
        if polled.is_ready() {
            *this.done = true;
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(false.into()));
        (flag.clone(), Waker::from(flag))
    }

    #[test]
    fn a_freed_turn_goes_to_the_tenant_holding_fewest() {
        let shares = CpuShares::new(2, || ());
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let (_, w) = waker();
        // Tenant a holds both turns.
        assert!(shares.enter(&a, 1, &w, false).is_some());
        assert!(shares.enter(&a, 2, &w, false).is_some());
        // a queues first, then b.
        let (a_woken, a_waker) = waker();
        let (b_woken, b_waker) = waker();
        assert!(shares.enter(&a, 3, &a_waker, false).is_none());
        assert!(shares.enter(&b, 4, &b_waker, false).is_none());
        assert!(shares.contended());
        shares.leave(&a, std::time::Duration::from_millis(5));
        assert!(
            b_woken.0.load(Ordering::SeqCst),
            "b holds none, so b goes first"
        );
        assert!(!a_woken.0.load(Ordering::SeqCst));
        // A newcomer cannot jump the granted waiter.
        assert!(shares.enter(&a, 5, &w, false).is_none());
        assert!(shares.enter(&b, 4, &b_waker, false).is_some());
        // Now a and b hold one each; the next free turn goes to the oldest a waiter.
        shares.leave(&a, std::time::Duration::from_millis(5));
        assert!(a_woken.0.load(Ordering::SeqCst));
        assert!(shares.enter(&a, 3, &a_waker, false).is_some());
    }

    #[test]
    fn a_dropped_grant_passes_the_turn_on() {
        let shares = CpuShares::new(1, || ());
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let (_, w) = waker();
        assert!(shares.enter(&a, 1, &w, false).is_some());
        let (_, b_waker) = waker();
        let (c_woken, c_waker) = waker();
        assert!(shares.enter(&b, 2, &b_waker, false).is_none());
        assert!(shares.enter(&b, 3, &c_waker, false).is_none());
        shares.leave(&a, std::time::Duration::from_millis(5));
        // Ticket 2 was granted but its future is dropped before taking the turn.
        shares.cancel(&b, 2, false);
        assert!(c_woken.0.load(Ordering::SeqCst));
        assert!(shares.enter(&b, 3, &c_waker, false).is_some());
    }

    #[test]
    fn a_free_turn_is_kept_for_an_arriving_guest_of_a_less_busy_tenant() {
        let preempted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = preempted.clone();
        let shares = CpuShares::new(2, move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let (_, w) = waker();
        assert!(shares.enter(&a, 1, &w, false).is_some());
        assert!(shares.enter(&a, 2, &w, false).is_some());
        let (a_woken, a_waker) = waker();
        assert!(shares.enter(&a, 3, &a_waker, false).is_none());
        // A guest of b is made: a's running guests are told to yield at once.
        let arriving = shares.run(b.clone(), std::future::pending::<()>());
        assert_eq!(preempted.load(Ordering::SeqCst), 1);
        // a's guest yields; its turn is kept for b, not granted to a's waiter.
        shares.leave(&a, std::time::Duration::from_millis(5));
        assert!(!a_woken.0.load(Ordering::SeqCst));
        assert!(shares.enter(&b, arriving.ticket, &w, true).is_some());
        drop(arriving);
    }

    #[test]
    fn active_tenants_split_the_turns_even_while_one_waits_on_the_host() {
        let shares = CpuShares::new(2, || ());
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let (_, w) = waker();
        // b's guest ran a moment ago and now waits on the host.
        let guest = shares.run(b.clone(), std::future::pending::<()>());
        assert!(shares.enter(&b, guest.ticket, &w, true).is_some());
        shares.leave(&b, std::time::Duration::from_micros(50));
        // a may take its share, one turn, but not b's.
        assert!(shares.enter(&a, 100, &w, false).is_some());
        assert!(shares.enter(&a, 101, &w, false).is_none());
        drop(guest);
    }

    #[test]
    fn one_tenant_alone_uses_every_turn() {
        let shares = CpuShares::new(3, || ());
        let a: Arc<str> = "a".into();
        let (_, w) = waker();
        assert!((0..3).all(|ticket| shares.enter(&a, ticket, &w, false).is_some()));
        assert!(shares.enter(&a, 3, &w, false).is_none());
    }

    /// A guest that spins `polls` times for `each` of its thread's CPU time, yielding
    /// in between as a guest does at an epoch tick, then says which threads it ran on
    /// (in order, each once per stay) and at what scheduling policy it ended. CPU
    /// time, not wall time: on a loaded machine a wall-time spin may be preempted for
    /// most of it, and then it uses less CPU than the checks it is meant to trip.
    async fn spinner(polls: u32, each: std::time::Duration) -> (Vec<String>, i32) {
        let mut threads: Vec<String> = Vec::new();
        for _ in 0..polls {
            let thread = std::thread::current().name().unwrap_or_default().to_owned();
            if threads.last() != Some(&thread) {
                threads.push(thread);
            }
            let until = thread_cpu_time() + each;
            while thread_cpu_time() < until {
                std::hint::spin_loop();
            }
            tokio::task::yield_now().await;
        }
        // SAFETY: reads the calling thread's policy.
        (threads, unsafe { libc::sched_getscheduler(0) })
    }

    fn block_on<T>(future: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn far() -> tokio::time::Instant {
        tokio::time::Instant::now() + std::time::Duration::from_secs(30)
    }

    /// A tenant kept active (see [`keep_active`]) until this is dropped.
    struct KeptActive {
        stop: Arc<std::sync::atomic::AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Drop for KeptActive {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Release);
            if let Some(thread) = self.thread.take() {
                thread.join().unwrap();
            }
        }
    }

    /// Keeps `tenant` active, as guests of it arriving every few milliseconds would,
    /// until the result is dropped.
    fn keep_active(pool: &GuestPool, tenant: &str) -> KeptActive {
        keep_active_until(pool, tenant, Arc::default())
    }

    /// Keeps `tenant` active until `stop` is set or the result is dropped.
    fn keep_active_until(
        pool: &GuestPool,
        tenant: &str,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> KeptActive {
        let (shares, tenant): (_, Arc<str>) = (pool.shares.clone(), tenant.into());
        // Active before this returns: a guest spawned next must see it.
        shares.lock().see(&tenant, Instant::now());
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                shares.lock().see(&tenant, Instant::now());
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        KeptActive {
            stop,
            thread: Some(thread),
        }
    }

    #[test]
    fn a_guest_that_computes_while_another_tenant_is_active_moves_to_background_threads() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let b = keep_active(&pool, "b");
        let tenant: Arc<str> = "a".into();
        let short = pool.spawn(
            tenant.clone(),
            FirstPoll::OnGuestThreads,
            spinner(1, DEMOTE_AFTER / 20),
            far(),
        );
        let long = pool.spawn(
            tenant,
            FirstPoll::OnGuestThreads,
            spinner(4, DEMOTE_AFTER),
            far(),
        );
        let (short, long) = block_on(async { (short.await.unwrap(), long.await.unwrap()) });
        drop(b);
        let (short_threads, short_policy) = short.expect("finished");
        assert_eq!(short_threads, ["faas-guest"]);
        assert_eq!(short_policy, libc::SCHED_OTHER);
        let (long_threads, _) = long.expect("finished");
        assert_eq!(long_threads, ["faas-guest", "faas-guest-bg"]);
        // SAFETY: reads the calling thread's nice value; errno is not needed, as 19
        // cannot be mistaken for the -1 of an error.
        let niced = pool.background.as_ref().unwrap().block_on(async {
            tokio::task::spawn(async { unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) } })
                .await
                .unwrap()
        });
        assert_eq!(niced, BACKGROUND_NICE);
    }

    #[test]
    fn a_tenant_alone_computes_on_the_normal_threads() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let long = pool.spawn("a".into(), FirstPoll::Here, spinner(8, DEMOTE_AFTER), far());
        let (threads, policy) = block_on(long).unwrap().expect("finished");
        assert_eq!(threads, [caller(), "faas-guest".to_owned()]);
        assert_eq!(policy, libc::SCHED_OTHER);
    }

    /// The name of the test's own thread.
    fn caller() -> String {
        std::thread::current().name().unwrap().to_owned()
    }

    #[test]
    fn a_lone_tenants_short_guest_finishes_on_the_calling_thread() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let task = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            async { std::thread::current().id() },
            far(),
        );
        assert!(task.abort_handle().is_none(), "finished in the first poll");
        assert_eq!(block_on(task).unwrap(), Some(std::thread::current().id()));
    }

    #[test]
    fn a_lone_tenants_first_poll_runs_here_even_when_every_turn_is_held() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let a: Arc<str> = "a".into();
        let (_, w) = waker();
        // Another of a's guests holds the only turn, on a guest thread.
        assert!(pool.shares.enter(&a, u64::MAX, &w, false).is_some());
        let task = pool.spawn(
            a.clone(),
            FirstPoll::Here,
            async { std::thread::current().id() },
            far(),
        );
        assert!(task.abort_handle().is_none(), "finished in the first poll");
        assert_eq!(block_on(task).unwrap(), Some(std::thread::current().id()));
        // The turn it took over the count is given back: once the other guest's is,
        // the next guest takes one as usual.
        pool.shares.leave(&a, std::time::Duration::from_micros(50));
        assert!(pool.shares.enter(&a, u64::MAX - 1, &w, false).is_some());
    }

    #[test]
    fn a_guest_told_to_start_on_the_guest_threads_does_even_when_alone() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let first_poll = FirstPoll::OnGuestThreads;
        let task = pool.spawn(
            "a".into(),
            first_poll,
            async { std::thread::current().id() },
            far(),
        );
        assert!(task.abort_handle().is_some(), "spawned, not polled here");
        assert_ne!(block_on(task).unwrap(), Some(std::thread::current().id()));
    }

    #[test]
    fn while_another_tenant_is_active_a_quick_tenants_guest_still_starts_here() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let b = keep_active(&pool, "b");
        let task = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            async { std::thread::current().id() },
            far(),
        );
        drop(b);
        assert!(task.abort_handle().is_none(), "finished in the first poll");
        assert_eq!(block_on(task).unwrap(), Some(std::thread::current().id()));
    }

    #[test]
    fn while_another_tenant_is_active_a_tenant_has_its_share_of_first_polls_here() {
        let pool = GuestPool::new(2, || ()).unwrap();
        let b = keep_active(&pool, "b");
        let a: Arc<str> = "a".into();
        let (_, w) = waker();
        // Turns a holds on the guest threads do not count against it.
        assert!(pool.shares.enter(&a, u64::MAX, &w, false).is_some());
        let quick = pool.spawn(a.clone(), FirstPoll::Here, async {}, far());
        assert!(quick.abort_handle().is_none(), "polled here");
        // A first poll of a's runs on the other receiving thread: its share, one of two.
        assert_eq!(pool.shares.enter_here(&a), Some(HereAmong::Others));
        let task = pool.spawn(a.clone(), FirstPoll::Here, async {}, far());
        assert!(task.abort_handle().is_some(), "spawned, not polled here");
        pool.shares.leave_here(&a, std::time::Duration::ZERO);
        pool.shares.leave(&a, std::time::Duration::from_micros(50));
        pool.shares.leave(&a, std::time::Duration::from_micros(50));
        assert_eq!(block_on(task).unwrap(), Some(()));
        // With that poll over, a's next first poll runs here again.
        let next = pool.spawn(a, FirstPoll::Here, async {}, far());
        drop(b);
        assert!(next.abort_handle().is_none(), "polled here");
    }

    #[test]
    fn a_first_poll_here_that_long_had_no_cpu_does_not_count_as_slow() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let b = keep_active(&pool, "b");
        // As a poll the kernel preempted for a while: long, but little CPU time.
        let descheduled = async { std::thread::sleep(QUICK_HERE * 4) };
        let first = pool.spawn("a".into(), FirstPoll::Here, descheduled, far());
        assert!(first.abort_handle().is_none(), "finished in the first poll");
        let next = pool.spawn("a".into(), FirstPoll::Here, async {}, far());
        drop(b);
        assert!(next.abort_handle().is_none(), "still polled here");
    }

    #[test]
    fn a_tenant_whose_first_poll_here_ran_slow_starts_on_the_guest_threads_while_another_is_active()
    {
        let pool = GuestPool::new(1, || ()).unwrap();
        let b = keep_active(&pool, "b");
        let slow = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            spinner(1, QUICK_HERE * 2),
            far(),
        );
        let (threads, _) = block_on(slow).unwrap().expect("finished");
        assert_eq!(threads, [caller()], "its first poll was here");
        let short = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            spinner(1, std::time::Duration::ZERO),
            far(),
        );
        assert!(short.abort_handle().is_some(), "spawned, not polled here");
        let (threads, _) = block_on(short).unwrap().expect("finished");
        // Alone again, it gets its first polls here again.
        drop(b);
        std::thread::sleep(ACTIVE_WINDOW);
        let alone = pool.spawn("a".into(), FirstPoll::Here, async {}, far());
        assert_eq!(threads, ["faas-guest"]);
        assert!(alone.abort_handle().is_none(), "alone, it was polled here");
    }

    #[test]
    fn a_lone_tenants_slow_first_poll_here_counts_only_once_another_tenant_is_active() {
        let pool = GuestPool::new(1, || ()).unwrap();
        // Alone, its CPU time is not measured (no clock read), so it is not held slow.
        let alone = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            spinner(1, QUICK_HERE * 2),
            far(),
        );
        let (threads, _) = block_on(alone).unwrap().expect("finished");
        assert_eq!(threads, [caller()], "its first poll was here");
        let b = keep_active(&pool, "b");
        let measured = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            spinner(1, QUICK_HERE * 2),
            far(),
        );
        let (threads, _) = block_on(measured).unwrap().expect("finished");
        assert_eq!(threads, [caller()], "still polled here");
        // That poll, with b active, was measured: a's next guest starts elsewhere.
        let next = pool.spawn("a".into(), FirstPoll::Here, async {}, far());
        drop(b);
        assert!(next.abort_handle().is_some(), "spawned, not polled here");
        assert_eq!(block_on(next).unwrap(), Some(()));
    }

    /// How many epoch ticks the slice of the poll it runs in lasts, counted as the
    /// epoch callback counts them.
    async fn ticks_in_slice() -> Option<u32> {
        (1..=100).find(|_| slice_over())
    }

    #[test]
    fn a_lone_tenants_guest_on_a_guest_thread_runs_a_longer_slice() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let first_poll = FirstPoll::OnGuestThreads;
        let task = pool.spawn("a".into(), first_poll, ticks_in_slice(), far());
        assert_eq!(block_on(task).unwrap(), Some(Some(SLICE_ALONE)));
    }

    #[test]
    fn a_first_poll_on_the_receiving_thread_lasts_one_tick() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let first_poll = FirstPoll::Here;
        let task = pool.spawn("a".into(), first_poll, ticks_in_slice(), far());
        assert!(task.abort_handle().is_none(), "finished in the first poll");
        assert_eq!(block_on(task).unwrap(), Some(Some(1)));
        assert!(slice_over(), "the slice ended with the poll");
    }

    #[test]
    fn while_another_tenant_is_active_a_slice_is_one_tick() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let b = keep_active(&pool, "b");
        let first_poll = FirstPoll::OnGuestThreads;
        let task = pool.spawn("a".into(), first_poll, ticks_in_slice(), far());
        let ticks = block_on(task).unwrap();
        drop(b);
        assert_eq!(ticks, Some(Some(1)));
    }

    #[test]
    fn a_preemption_ends_a_long_slice_at_once() {
        let pool = GuestPool::new(1, || ()).unwrap();
        let shares = pool.shares.clone();
        let guest = async move {
            let first_tick_ended = slice_over();
            shares.preempt_all();
            (first_tick_ended, slice_over())
        };
        let task = pool.spawn("a".into(), FirstPoll::OnGuestThreads, guest, far());
        assert_eq!(block_on(task).unwrap(), Some((false, true)));
    }

    #[test]
    fn a_background_guest_comes_back_once_the_other_tenant_is_gone() {
        let pool = GuestPool::new(1, || ()).unwrap();
        // b stays active until a's guest is seen on a background thread.
        let demoted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let b = keep_active_until(&pool, "b", demoted.clone());
        let seen = demoted.clone();
        let guest = async move {
            let mut threads: Vec<String> = Vec::new();
            // At most 20 s of ticks; it comes back about ACTIVE_WINDOW after b's end.
            for _ in 0..10_000 {
                let thread = std::thread::current().name().unwrap_or_default().to_owned();
                seen.fetch_or(thread == "faas-guest-bg", Ordering::AcqRel);
                if threads.last() != Some(&thread) {
                    threads.push(thread);
                }
                if threads.len() == 3 {
                    break;
                }
                let until = Instant::now() + DEMOTE_AFTER;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                tokio::task::yield_now().await;
            }
            threads
        };
        let threads = block_on(pool.spawn("a".into(), FirstPoll::OnGuestThreads, guest, far()))
            .unwrap()
            .expect("finished");
        drop(b);
        assert_eq!(threads, ["faas-guest", "faas-guest-bg", "faas-guest"]);
    }

    #[test]
    fn the_deadline_holds_on_the_background_threads() {
        /// Sets its flag when dropped.
        struct Dropped(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let pool = GuestPool::new(1, || ()).unwrap();
        let gone_at = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let dropped = Dropped(cut.clone());
        let endless = spinner(u32::MAX, DEMOTE_AFTER);
        let b = keep_active(&pool, "b");
        let task = pool.spawn(
            "a".into(),
            FirstPoll::Here,
            async move {
                let _dropped = dropped;
                endless.await
            },
            gone_at,
        );
        assert_eq!(block_on(task).unwrap(), None);
        drop(b);
        assert!(cut.load(Ordering::Acquire), "the guest was dropped");
    }
}
