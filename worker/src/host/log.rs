//! `faas:platform/log`: guest log lines go to the worker's log sink (`faas logs`), and
//! to the platform's own log only at debug (target `faas_guest`).

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
        // The platform's own log gets the line only at debug, under a target of its
        // own: a tenant's text is the tenant's (`faas logs`), and a guest logging
        // thousands of lines must not fill the operator's log, or wait on its writes.
        // Escaped (`?`): a line break in a guest's text must not start a line there.
        tracing::debug!(
            target: "faas_guest",
            tenant = &*event.tenant,
            workflow = &*event.workflow,
            function = &*event.function,
            level = ?line_level,
            text = ?message,
            "guest log line"
        );
        event.emit(line_level, LogSource::Log, message);
        Ok(())
    }
}
