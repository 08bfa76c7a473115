//! `faas:platform/log`: guest log lines become tracing events tagged with who wrote
//! them, and go to the worker's log sink (`faas logs`).

use super::platform::log::{Host, Level};
use crate::failure::cut_guest_text;
use crate::state::InstanceState;
use faas_invoke::{LogLevel, LogSource};

impl Host for InstanceState {
    async fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        // Cut, so that a guest cannot flood the logs with one line.
        let message = cut_guest_text(message);
        let event = &self.event;
        let line_level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        event.emit(line_level, LogSource::Log, message.clone());
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
