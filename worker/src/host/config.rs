//! `faas:platform/config`: the function's `config` table from workflow.toml.

use super::platform::config::Host;
use crate::state::InstanceState;

impl Host for InstanceState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.event.config.get(&key).cloned())
    }
}
