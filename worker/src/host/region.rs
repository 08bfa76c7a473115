//! `faas:platform/region`: the minimal, copying form of regions that workflow steps
//! exchange: the value lives in host memory and each read copies it.

use super::platform::region::{Host, HostRegion};
use crate::state::{InstanceState, MemoryLimitExceeded};
use std::sync::Arc;
use wasmtime::component::Resource;

/// One value handed between workflow steps: the host side of a `region` resource.
/// Cloning shares the bytes; nothing is copied until a guest reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The Karmem schema type of the value.
    pub schema_type: String,
    /// The encoded value; shared, never mutated once created.
    pub bytes: Arc<[u8]>,
}

impl Region {
    /// A region of `schema_type` holding `bytes`.
    pub fn new(schema_type: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        Self {
            schema_type: schema_type.into(),
            bytes: bytes.into(),
        }
    }
}

impl Host for InstanceState {}

impl HostRegion for InstanceState {
    async fn from_bytes(
        &mut self,
        schema_type: String,
        bytes: Vec<u8>,
    ) -> wasmtime::Result<Resource<Region>> {
        // Region bytes live in host memory: count them against the instance's memory
        // limit, or a guest could hoard host memory through regions.
        let total = self.region_bytes.saturating_add(bytes.len());
        let limit = self.limiter.max_memory_bytes;
        if total > limit {
            return Err(MemoryLimitExceeded {
                limit,
                desired: total,
            }
            .into());
        }
        self.region_bytes = total;
        let region = Region {
            schema_type,
            bytes: bytes.into(),
        };
        Ok(self.table.push(region)?)
    }

    async fn schema_type(&mut self, region: Resource<Region>) -> wasmtime::Result<String> {
        Ok(self.table.get(&region)?.schema_type.clone())
    }

    async fn len(&mut self, region: Resource<Region>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&region)?.bytes.len() as u64)
    }

    async fn bytes(&mut self, region: Resource<Region>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table.get(&region)?.bytes.to_vec())
    }

    async fn drop(&mut self, region: Resource<Region>) -> wasmtime::Result<()> {
        self.table.delete(region)?;
        Ok(())
    }
}
