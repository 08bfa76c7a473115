//! `faas:platform/region`: the minimal, copying form of regions that workflow steps
//! exchange: the value lives in host memory and each read copies it.

use super::platform::region::{Host, HostRegion};
use crate::state::InstanceState;
use std::sync::Arc;
use wasmtime::component::Resource;

/// The host side of a `region` resource.
#[derive(Debug, Clone)]
pub struct RegionData {
    /// The Karmem schema type of the value.
    pub schema_type: String,
    /// The encoded value; shared, never mutated once created.
    pub bytes: Arc<[u8]>,
}

impl Host for InstanceState {}

impl HostRegion for InstanceState {
    async fn from_bytes(
        &mut self,
        schema_type: String,
        bytes: Vec<u8>,
    ) -> wasmtime::Result<Resource<RegionData>> {
        let region = RegionData {
            schema_type,
            bytes: bytes.into(),
        };
        Ok(self.table.push(region)?)
    }

    async fn schema_type(&mut self, region: Resource<RegionData>) -> wasmtime::Result<String> {
        Ok(self.table.get(&region)?.schema_type.clone())
    }

    async fn len(&mut self, region: Resource<RegionData>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&region)?.bytes.len() as u64)
    }

    async fn bytes(&mut self, region: Resource<RegionData>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table.get(&region)?.bytes.to_vec())
    }

    async fn drop(&mut self, region: Resource<RegionData>) -> wasmtime::Result<()> {
        self.table.delete(region)?;
        Ok(())
    }
}
