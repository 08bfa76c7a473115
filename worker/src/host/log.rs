//! `faas:platform/log`: guest log lines become tracing events tagged with who wrote
//! them.

use super::platform::log::{Host, Level};
use crate::state::InstanceState;

/// Longest log line kept; the rest is cut so a guest cannot flood the logs.
const MAX_LINE: usize = 4096;

impl Host for InstanceState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        let mut message = message;
        if message.len() > MAX_LINE {
            let mut end = MAX_LINE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        let event = &self.event;
        let (tenant, workflow, function) = (&*event.tenant, &*event.workflow, &*event.function);
        match level {
            Level::Trace => tracing::trace!(tenant, workflow, function, "{message}"),
            Level::Debug => tracing::debug!(tenant, workflow, function, "{message}"),
            Level::Info => tracing::info!(tenant, workflow, function, "{message}"),
            Level::Warn => tracing::warn!(tenant, workflow, function, "{message}"),
            Level::Error => tracing::error!(tenant, workflow, function, "{message}"),
        }
        Ok(())
    }
}
