//! `faas:platform/trace`: the trace the event belongs to.

use super::platform::trace::Host;
use crate::state::InstanceState;

impl Host for InstanceState {
    async fn trace_id(&mut self) -> wasmtime::Result<Option<String>> {
        Ok(faas_invoke::trace::trace_id(self.event.span()))
    }
}
