//! What one instance's store holds: WASI state, the platform's per-event context and
//! the memory limiter. A store lives for exactly one event.

use crate::kv::KeyValueStore;
use crate::region::{RegionScope, StoreRegions};
use faas_invoke::Publisher;
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
    /// Where its outbound HTTP may go: the store's `wasi:http` hooks.
    pub outbound: crate::outbound::Outbound,
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
    /// The instance slots this store occupies (its tenant's share, and the worker's);
    /// freed when the store is dropped.
    _slots: [OwnedSemaphorePermit; 2],
}

impl InstanceState {
    /// A fresh state whose guest output goes to `output`.
    pub fn new(
        event: EventContext,
        max_memory_bytes: usize,
        output: MemoryOutputPipe,
        slots: [OwnedSemaphorePermit; 2],
        regions: RegionScope,
    ) -> Self {
        let wasi = WasiCtx::builder()
            .stdout(output.clone())
            .stderr(output)
            .build();
        Self {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter { max_memory_bytes },
            event,
            regions: StoreRegions::new(regions),
            _slots: slots,
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

/// The error a guest's memory growth fails with once it passes its limit. It traps
/// the guest (rather than letting `memory.grow` return -1) so the failure is reported
/// as a memory limit, not as whatever the guest's allocator does next.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (asked for {desired})")]
pub(crate) struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

/// Caps the linear memory of one instance.
pub(crate) struct MemoryLimiter {
    pub max_memory_bytes: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory_bytes {
            return Err(MemoryLimitExceeded {
                limit: self.max_memory_bytes,
                desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any real program.
        Ok(desired <= 1_000_000)
    }
}
