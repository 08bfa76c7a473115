//! Turning what Wasmtime reports about a failed guest into the [`InvokeError`] a user
//! needs to see. Shared by HTTP functions and workflow steps.

use crate::error::InvokeError;
use crate::function::LoadedFunction;
use crate::state::MemoryLimitExceeded;
use wasmtime::Trap;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// Where a guest failed: starting, or running.
pub(crate) enum Failure {
    Instantiate(wasmtime::Error),
    Run(wasmtime::Error),
}

/// Turns a Wasmtime error into the failure the user needs to see.
pub(crate) fn classify(
    function: &LoadedFunction,
    failure: Failure,
    output: &MemoryOutputPipe,
) -> InvokeError {
    let name = function.name.to_string();
    let err = match failure {
        Failure::Instantiate(err) => {
            if err.is::<wasmtime::PoolConcurrencyLimitError>() {
                return InvokeError::Overloaded {
                    function: name,
                    message: format!("{err:#}"),
                };
            }
            err
        }
        Failure::Run(err) => err,
    };
    if err.is::<MemoryLimitExceeded>() {
        return InvokeError::MemoryLimit {
            function: name,
            limit_mb: function.limits.memory_mb,
        };
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => InvokeError::Timeout {
            function: name,
            timeout: function.limits.timeout,
        },
        Some(Trap::OutOfFuel) => InvokeError::OutOfFuel {
            function: name,
            fuel: function.limits.fuel.unwrap_or(u64::MAX),
        },
        _ => {
            tracing::debug!(function = &*function.name, "guest trapped: {err:?}");
            let mut message = err.root_cause().to_string();
            let guest_output = output.contents();
            let guest_output = String::from_utf8_lossy(&guest_output);
            let guest_output = guest_output.trim();
            if !guest_output.is_empty() {
                message.push_str("; guest output: ");
                message.push_str(guest_output);
            }
            InvokeError::Trap {
                function: name,
                message,
            }
        }
    }
}
