//! `faas:platform/region`: the guest's side of [`crate::region`].
//!
//! `create-in` and `read-into` take the guest's pages as a `list<u8>` only to learn
//! where they are. The generated bindings would copy such a list into a `Vec`, so
//! those two are defined by hand over [`WasmList`], which sees the list in place in
//! the guest's memory, and shadow the generated ones.

use super::platform::region::{Host, HostRegion};
use crate::region::{Handoff, PageRange, Region, RegionError};
use crate::state::InstanceState;
use std::borrow::Cow;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, WasmList};

/// The linker name of the region interface.
const INTERFACE: &str = "faas:platform/region@0.1.0";

impl Host for InstanceState {}

impl HostRegion for InstanceState {
    async fn from_bytes(
        &mut self,
        schema_type: String,
        bytes: Vec<u8>,
    ) -> wasmtime::Result<Resource<Region>> {
        // Copied bytes live in host memory: count them against the instance's memory
        // limit, or a guest could hoard host memory through regions.
        let total = self.regions.copied_bytes.saturating_add(bytes.len());
        self.limiter.within_limit(total)?;
        self.regions.count_created(&schema_type)?;
        self.limiter.claim_more(bytes.len())?;
        self.regions.copied_bytes = total;
        let region = Region::copied(&self.regions.scope, schema_type, bytes);
        Ok(self.table.push(region)?)
    }

    async fn create_in(
        &mut self,
        _schema_type: String,
        _pages: Vec<u8>,
    ) -> wasmtime::Result<Result<Resource<Region>, String>> {
        unreachable!("shadowed by `add_page_functions`")
    }

    async fn seal(
        &mut self,
        region: Resource<Region>,
        len: u64,
    ) -> wasmtime::Result<Result<(), String>> {
        let region = self.table.get_mut(&region)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        Ok(region.seal(len).map_err(|err| err.to_string()))
    }

    async fn schema_type(&mut self, region: Resource<Region>) -> wasmtime::Result<String> {
        Ok(self.table.get(&region)?.schema_type().to_owned())
    }

    async fn len(&mut self, region: Resource<Region>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&region)?.len() as u64)
    }

    async fn writable(&mut self, _region: Resource<Region>) -> wasmtime::Result<bool> {
        Ok(!self.regions.scope.input.read_only)
    }

    async fn read_into(
        &mut self,
        _region: Resource<Region>,
        _pages: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        unreachable!("shadowed by `add_page_functions`")
    }

    async fn bytes(&mut self, region: Resource<Region>) -> wasmtime::Result<Vec<u8>> {
        // The host reads the value into a buffer of its own before Wasmtime asks the
        // guest for room for it: a value the guest's memory could never hold (another
        // step's, perhaps allowed far more) fails here, before that buffer exists, and
        // the buffer counts in the guest memory budget while it is filled.
        let len = self.table.get(&region)?.len();
        self.limiter.within_limit(len)?;
        let before = self.limiter.claim.bytes();
        self.limiter.claim_more(len)?;
        let bytes = self.table.get(&region)?.bytes().map(Cow::into_owned);
        self.release_held(before);
        let bytes = bytes?;
        self.event
            .metrics
            .region_placed(Handoff::Copied, bytes.len());
        Ok(bytes)
    }

    async fn drop(&mut self, region: Resource<Region>) -> wasmtime::Result<()> {
        self.table.delete(region)?;
        Ok(())
    }
}

/// Defines `create-in` and `read-into` over the guest's pages in place, replacing the
/// generated (copying) definitions. Call after the generated `add_to_linker`.
pub(crate) fn add_page_functions(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut region = linker.instance(INTERFACE)?;
    region.func_wrap(
        "[static]region.create-in",
        |mut store: StoreContextMut<'_, InstanceState>,
         (schema_type, pages): (String, WasmList<u8>)| {
            let pages = PageRange::of_guest(pages.as_le_slice(&store));
            let state = store.data_mut();
            let created = match pages {
                Err(err) => Err(err),
                Ok(pages) => {
                    state.regions.count_created(&schema_type)?;
                    // SAFETY: the pages are this store's guest memory (Wasmtime checked
                    // the list against it), the slice borrow has ended, and the guest
                    // is suspended in this call.
                    unsafe {
                        Region::create_in(
                            &state.regions.scope,
                            &mut state.regions.mapped,
                            schema_type,
                            pages,
                        )
                    }?
                }
            };
            Ok((match created {
                Ok(region) => Ok(state.table.push(region)?),
                Err(err) => Err(err.to_string()),
            },))
        },
    )?;
    region.func_wrap(
        "[method]region.read-into",
        |mut store: StoreContextMut<'_, InstanceState>,
         (handle, pages): (Resource<Region>, WasmList<u8>)| {
            let pages = PageRange::of_guest(pages.as_le_slice(&store));
            let state = store.data_mut();
            state.regions.count_placed()?;
            let region = state.table.get_mut(&handle)?;
            // A span of the step's trace: how the value crossed, and how long it took.
            let span = tracing::info_span!(
                parent: state.event.span(),
                "region handoff",
                faas.region.bytes = region.len(),
                faas.region.handoff = tracing::field::Empty,
            )
            .entered();
            let placed: Result<Handoff, RegionError> = pages.and_then(|pages| {
                // SAFETY: as for `create-in`.
                unsafe { region.read_into(&state.regions.scope, &mut state.regions.mapped, pages) }
            });
            let placed = match placed {
                // A limit fails the event, as `create-in`'s do.
                Err(RegionError::Limit(limit)) => return Err(limit.into()),
                placed => placed.map(|handoff| {
                    span.record("faas.region.handoff", handoff.as_str());
                    state.event.metrics.region_placed(handoff, region.len());
                    region.release_producer();
                }),
            };
            Ok((placed.map_err(|err| err.to_string()),))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}
