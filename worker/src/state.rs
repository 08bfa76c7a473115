//! What one instance's store holds: WASI state, the platform's per-event context and
//! the memory limiter. A store lives for exactly one event.

use crate::host_limits::{CONNECTION_CHARGE_BYTES, HANDLE_CHARGE_BYTES};
use crate::kv::KeyValueStore;
use crate::memory_budget::{GuestMemoryClaim, GuestMemoryHeld};
use crate::region::{Region, RegionScope, StoreRegions};
use faas_invoke::{LogLevel, LogLine, LogSink, LogSource, Publisher};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// How much of a guest's stdout/stderr is kept to explain a failure.
pub(crate) const GUEST_OUTPUT_BYTES: usize = 16 * 1024;

/// Who is running: the facts host interfaces need to scope what a guest may touch.
#[derive(Clone)]
pub(crate) struct EventContext {
    pub tenant: Arc<str>,
    pub workflow: Arc<str>,
    pub function: Arc<str>,
    pub config: Arc<BTreeMap<String, String>>,
    pub kv: Arc<KeyValueStore>,
    pub publisher: Option<Arc<dyn Publisher>>,
    /// Where the guest's log lines and output go, if anywhere but the platform's log.
    pub logs: Option<Arc<dyn LogSink>>,
    /// The run and step this event is, for a step: its log lines name them.
    pub run: Option<RunLabel>,
    /// The function's counters (region bytes handed to it).
    pub metrics: Arc<crate::metrics::FunctionCounters>,
    /// Where its outbound HTTP may go: the store's `wasi:http` hooks.
    pub outbound: crate::outbound::Outbound,
}

/// Which run and step a step's store serves.
#[derive(Clone)]
pub(crate) struct RunLabel {
    pub run: String,
    pub step: String,
}

impl EventContext {
    /// The span of the event (a step attempt, an HTTP call): the parent of the spans of
    /// its host calls, which run on a guest thread where it is not the current span.
    pub fn span(&self) -> &tracing::Span {
        self.outbound.span()
    }

    /// Hands one line the guest wrote to the log sink, if there is one. Never waits:
    /// the sink drops what it cannot take.
    pub fn emit(&self, level: LogLevel, source: LogSource, text: String) {
        let Some(logs) = &self.logs else { return };
        let owner = LineOwner {
            tenant: &self.tenant,
            workflow: &self.workflow,
            function: &self.function,
            run: self.run.as_ref(),
        };
        logs.push(owner.line(level, source, text));
    }
}

/// Whose a log line is: the names it carries, by which its tenant reads and filters it.
pub(crate) struct LineOwner<'a> {
    pub tenant: &'a str,
    pub workflow: &'a str,
    pub function: &'a str,
    /// The run and step, for a step's line.
    pub run: Option<&'a RunLabel>,
}

impl LineOwner<'_> {
    /// A line of theirs taken now, its `text` cut to
    /// [`faas_invoke::logs::MAX_LOG_LINE_BYTES`].
    pub(crate) fn line(&self, level: LogLevel, source: LogSource, mut text: String) -> LogLine {
        LogLine::cut_text(&mut text);
        LogLine {
            time_ms: LogLine::now_ms(),
            tenant: self.tenant.to_owned(),
            workflow: self.workflow.to_owned(),
            function: self.function.to_owned(),
            step: self.run.map(|label| label.step.clone()),
            run: self.run.map(|label| label.run.clone()),
            level,
            source,
            text,
        }
    }
}

/// The `T` of every `Store<T>` the worker creates.
pub(crate) struct InstanceState {
    pub wasi: WasiCtx,
    pub http: WasiHttpCtx,
    pub table: ResourceTable,
    pub limiter: MemoryLimiter,
    pub event: EventContext,
    /// The regions' rules and the guest pages they changed (restored when the store
    /// is dropped, before Wasmtime reuses its memory).
    pub regions: StoreRegions,
    /// The guest's stdout/stderr, handed to the log sink line by line when the store
    /// is dropped (the pipe is bounded, so this is too).
    output: MemoryOutputPipe,
    /// The instance slots this store occupies (its tenant's share, and the worker's);
    /// freed when the store is dropped.
    _slots: [OwnedSemaphorePermit; 2],
}

impl InstanceState {
    /// A fresh state whose guest output goes to `output`.
    pub fn new(
        event: EventContext,
        limiter: MemoryLimiter,
        output: MemoryOutputPipe,
        slots: [OwnedSemaphorePermit; 2],
        regions: RegionScope,
    ) -> Self {
        let tenant = limiter.claim.holder().clone();
        let wasi = WasiCtx::builder()
            .stdout(output.clone())
            .stderr(output.clone())
            .build();
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(crate::host_limits::MAX_FIELDS_BYTES);
        Self {
            wasi,
            http,
            table: ResourceTable::new(),
            limiter,
            event,
            regions: StoreRegions::new(regions, tenant),
            output,
            _slots: slots,
        }
    }

    /// Whether tearing this store down is quick: its memories fit in the part of a
    /// pool slot kept resident, which Wasmtime resets by zeroing the pages written
    /// (no page-table change), and the host mapped or protected none of its pages.
    pub(crate) fn quick_to_tear_down(&self) -> bool {
        self.limiter.memory_bytes <= crate::engine::KEEP_RESIDENT_BYTES
            && self.regions.mapped.is_empty()
    }

    /// Claims guest memory for the `bytes` a host call takes from this instance's
    /// arguments (a message, a batch, a value) while it waits on a broker or store:
    /// [`HELD_COPIES`] copies of them. Its linear memory does not count them, and need
    /// not hold them once: a batch's lists may all point at the same guest bytes, so
    /// 16 MiB of messages may be 1 MiB of the guest's. Returns what the claim was, for
    /// [`Self::release_held`] once the call is done.
    ///
    /// # Errors
    /// [`GuestMemoryHeld`] when the budget, or the tenant's share, has no room: the
    /// guest traps, as when its memory would grow past it.
    pub(crate) fn hold(&mut self, bytes: usize) -> wasmtime::Result<u64> {
        let before = self.limiter.claim.bytes();
        self.limiter.claim_more(bytes.saturating_mul(HELD_COPIES))?;
        Ok(before)
    }

    /// Gives back what [`Self::hold`] claimed (`before`: what it returned).
    pub(crate) fn release_held(&mut self, before: u64) {
        self.limiter.claim.shrink_to(before);
    }

    /// Claims [`HANDLE_CHARGE_BYTES`] of guest memory for each handle the host holds
    /// for this instance, and [`CONNECTION_CHARGE_BYTES`] for each outbound connection
    /// it has open, beyond the most it held before (`host_limits.rs`). Regions are not
    /// counted: their bytes are claimed as guest memory or as copies already. Called as
    /// each host call returns, the only place handles are made and connections opened.
    ///
    /// # Errors
    /// [`GuestMemoryHeld`] when the budget, or the tenant's share, has no room.
    pub(crate) fn claim_handles(&mut self) -> wasmtime::Result<()> {
        let handles = self
            .table
            .iter_mut()
            .filter(|entry| !entry.is::<Region>())
            .count();
        let held = handles * HANDLE_CHARGE_BYTES
            + self.event.outbound.connections_open() * CONNECTION_CHARGE_BYTES;
        let claimed = self.limiter.host_bytes_claimed;
        if held > claimed {
            self.limiter.claim_more(held - claimed)?;
            self.limiter.host_bytes_claimed = held;
        }
        Ok(())
    }
}

impl Drop for InstanceState {
    fn drop(&mut self) {
        if self.event.logs.is_none() {
            return;
        }
        let output = self.output.contents();
        for line in String::from_utf8_lossy(&output).lines() {
            self.event
                .emit(LogLevel::Info, LogSource::Output, line.to_owned());
        }
    }
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for InstanceState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.event.outbound,
        }
    }
}

/// How many copies of a guest's message or value the host may hold while a call
/// sends it: the arguments Wasmtime lifted, the command built from them, and the
/// buffer that command is written from.
pub(crate) const HELD_COPIES: usize = 3;

/// The error a guest's memory growth fails with once it passes its limit. It traps
/// the guest (rather than letting `memory.grow` return -1) so the failure is reported
/// as a memory limit, not as whatever the guest's allocator does next.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (asked for {desired})")]
pub(crate) struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

/// What one table element takes in the host (a function reference).
const TABLE_ELEMENT_BYTES: usize = 8;

/// Caps the linear memory of one instance, and claims it and its tables against the
/// worker's guest memory budget (`memory_budget.rs`).
pub(crate) struct MemoryLimiter {
    pub max_memory_bytes: usize,
    /// The bytes the instance's linear memories have, all together.
    pub memory_bytes: usize,
    /// What the instance holds of the worker's guest memory: its memories, the
    /// region bytes it copied into the host, and its handles.
    pub claim: GuestMemoryClaim,
    /// The most the host has held for it at once through handles and outbound
    /// connections, claimed in `claim`.
    pub host_bytes_claimed: usize,
}

impl MemoryLimiter {
    /// Refuses `desired` bytes past the instance's memory limit: its memory's size,
    /// what it copied into regions, or a value it asked the host for a copy of.
    ///
    /// # Errors
    /// [`MemoryLimitExceeded`], which traps the guest.
    pub(crate) fn within_limit(&self, desired: usize) -> Result<(), MemoryLimitExceeded> {
        if desired > self.max_memory_bytes {
            return Err(MemoryLimitExceeded {
                limit: self.max_memory_bytes,
                desired,
            });
        }
        Ok(())
    }

    /// A limiter of `max_memory_bytes` per memory that claims against `claim`.
    pub(crate) fn new(max_memory_bytes: usize, claim: GuestMemoryClaim) -> Self {
        Self {
            max_memory_bytes,
            memory_bytes: 0,
            claim,
            host_bytes_claimed: 0,
        }
    }

    /// Claims `bytes` more of the worker's guest memory for this instance.
    ///
    /// # Errors
    /// [`GuestMemoryHeld`] when the budget, or the tenant's share, has no room.
    pub(crate) fn claim_more(&mut self, bytes: usize) -> wasmtime::Result<()> {
        let wanted = self.claim.bytes().saturating_add(bytes as u64);
        self.claim.grow_to(wanted).map_err(|over| {
            GuestMemoryHeld {
                tenant: self.claim.holder().clone(),
                over,
            }
            .into()
        })
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.within_limit(desired)?;
        // Called for each memory as it is created too (from 0), so this is the total.
        let grown = desired.saturating_sub(current);
        self.claim_more(grown)?;
        self.memory_bytes = self.memory_bytes.saturating_add(grown);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any real program.
        if desired > 1_000_000 {
            return Ok(false);
        }
        // Their elements are the host's memory, kept resident in the pool's table slots
        // like linear memory: up to 160 KiB a table, four tables an instance.
        let grown = desired.saturating_sub(current);
        self.claim_more(grown.saturating_mul(TABLE_ELEMENT_BYTES))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryLimiter;
    use crate::memory_budget::{GuestMemory, GuestMemoryHeld};
    use faas_budget::{BudgetLimits, OverBudget};
    use std::sync::Arc;

    /// A budget of `total` bytes, `per_tenant` of them one tenant's.
    fn budget(total: usize, per_tenant: usize) -> Arc<GuestMemory> {
        Arc::new(GuestMemory::new(BudgetLimits {
            total: total as u64,
            per_holder: per_tenant as u64,
        }))
    }

    /// `(module (memory 3) (func (export "grow") (result i32) (memory.grow (i32.const 2))))`
    const GROWS_BY_TWO_PAGES: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7f, // type: () -> i32
        0x03, 0x02, 0x01, 0x00, // function 0 has type 0
        0x05, 0x03, 0x01, 0x00, 0x03, // memory: 3 pages at first
        0x07, 0x08, 0x01, 0x04, b'g', b'r', b'o', b'w', 0x00, 0x00, // export "grow"
        0x0a, 0x08, 0x01, 0x06, 0x00, 0x41, 0x02, 0x40, 0x00, 0x0b, // grow by 2
    ];

    const PAGE: usize = 64 << 10;

    #[test]
    fn the_limiter_counts_memory_from_its_creation_and_refuses_past_the_limit() {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, GROWS_BY_TWO_PAGES).unwrap();
        for (limit, after_grow) in [(8 * PAGE, 5 * PAGE), (4 * PAGE, 3 * PAGE)] {
            let budget = budget(usize::MAX, usize::MAX);
            let limiter = MemoryLimiter::new(limit, budget.claim(Arc::from("t")));
            let mut store = wasmtime::Store::new(&engine, limiter);
            store.limiter(|limiter| limiter);
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
            assert_eq!(store.data().memory_bytes, 3 * PAGE, "created");
            let grow = instance
                .get_typed_func::<(), i32>(&mut store, "grow")
                .unwrap();
            let grown = grow.call(&mut store, ());
            assert_eq!(grown.is_ok(), after_grow > 3 * PAGE, "limit {limit}");
            assert_eq!(store.data().memory_bytes, after_grow, "limit {limit}");
            assert_eq!(budget.held(), after_grow as u64, "claimed as it grew");
            drop(store);
            assert_eq!(budget.held(), 0, "given back with the store");
        }
    }

    #[test]
    fn an_instance_cannot_grow_past_its_tenants_share_of_the_workers_memory() {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, GROWS_BY_TWO_PAGES).unwrap();
        // A share of 4 pages: the first instance's 3 fit, its growth to 5 does not.
        let budget = budget(100 * PAGE, 4 * PAGE);
        let limiter = MemoryLimiter::new(usize::MAX, budget.claim(Arc::from("mallory")));
        let mut store = wasmtime::Store::new(&engine, limiter);
        store.limiter(|limiter| limiter);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let grow = instance
            .get_typed_func::<(), i32>(&mut store, "grow")
            .unwrap();
        let refused = grow.call(&mut store, ()).unwrap_err();
        let held = refused
            .downcast_ref::<GuestMemoryHeld>()
            .unwrap_or_else(|| panic!("{refused:?}"));
        assert_eq!(
            held.over,
            OverBudget::Share {
                limit: 4 * PAGE as u64
            }
        );
        // Nor can a second instance of the tenant start: its 3 pages do not fit.
        let second = MemoryLimiter::new(usize::MAX, budget.claim(Arc::from("mallory")));
        let mut second = wasmtime::Store::new(&engine, second);
        second.limiter(|limiter| limiter);
        assert!(wasmtime::Instance::new(&mut second, &module, &[]).is_err());
        // Another tenant's does.
        let other = MemoryLimiter::new(usize::MAX, budget.claim(Arc::from("victim")));
        let mut other = wasmtime::Store::new(&engine, other);
        other.limiter(|limiter| limiter);
        wasmtime::Instance::new(&mut other, &module, &[]).unwrap();
        assert_eq!(budget.held(), 6 * PAGE as u64);
    }

    /// `(module (table 20000 funcref))`
    const TABLE_OF_20000: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x04, 0x06, 0x01, 0x70, 0x00, 0xa0, 0x9c, 0x01, // table: 20000 funcrefs
    ];

    #[test]
    fn an_instances_tables_count_in_its_tenants_share_too() {
        // Tables were not counted: four tables of 20,000 elements an instance, kept
        // resident in the pool, 300 MiB across a tenant's 500 instances.
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, TABLE_OF_20000).unwrap();
        let budget = budget(usize::MAX, 200_000);
        let instantiate = || {
            let limiter = MemoryLimiter::new(usize::MAX, budget.claim(Arc::from("mallory")));
            let mut store = wasmtime::Store::new(&engine, limiter);
            store.limiter(|limiter| limiter);
            wasmtime::Instance::new(&mut store, &module, &[]).map(|_| store)
        };
        let first = instantiate().unwrap();
        assert_eq!(budget.held(), 160_000);
        let refused = instantiate().map(drop).unwrap_err();
        assert!(
            refused.downcast_ref::<GuestMemoryHeld>().is_some(),
            "{refused:?}"
        );
        drop(first);
        assert_eq!(budget.held(), 0);
    }
}
