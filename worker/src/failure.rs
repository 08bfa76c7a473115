//! Turning what Wasmtime reports about a failed guest into the [`InvokeError`] a user
//! needs to see. Shared by HTTP functions and workflow steps.

use crate::error::InvokeError;
use crate::function::LoadedFunction;
use crate::memory_budget::GuestMemoryHeld;
use crate::region::RegionLimitExceeded;
use crate::state::MemoryLimitExceeded;
use wasmtime::Trap;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// The most bytes of text a guest controls (an error it returns, a log line, a type
/// label) that the platform keeps in run records, error bodies and logs.
pub const GUEST_TEXT_BYTES: usize = 4096;

/// `text` cut to [`GUEST_TEXT_BYTES`] at a character boundary, saying how much was cut,
/// so that nothing a guest returns is kept unbounded.
///
/// The kept part is copied into a new string: `truncate` keeps the whole allocation,
/// so a guest's 64 MiB log line would have held 64 MiB of the host's memory for as long
/// as its 4 KiB were kept.
pub(crate) fn cut_guest_text(text: String) -> String {
    if text.len() <= GUEST_TEXT_BYTES {
        return text;
    }
    let end = text.floor_char_boundary(GUEST_TEXT_BYTES);
    let mark = format!("... ({} more bytes cut)", text.len() - end);
    [&text[..end], &mark].concat()
}

/// `value`'s `Debug` text, cut to [`GUEST_TEXT_BYTES`] as [`cut_guest_text`] cuts a
/// guest's text. Formatting stops there: a value a guest made (an error code holding a
/// string of 100 MiB of control characters, which `Debug` escapes to six bytes each)
/// never costs the host more than that to describe.
pub(crate) fn guest_debug_text(value: &dyn std::fmt::Debug) -> String {
    /// Keeps what fits, then ends the formatting with an error.
    struct Bounded(String);
    impl std::fmt::Write for Bounded {
        fn write_str(&mut self, text: &str) -> std::fmt::Result {
            let room = GUEST_TEXT_BYTES - self.0.len();
            if text.len() <= room {
                self.0.push_str(text);
                return Ok(());
            }
            self.0.push_str(&text[..text.floor_char_boundary(room)]);
            Err(std::fmt::Error)
        }
    }
    let mut bounded = Bounded(String::new());
    if std::fmt::write(&mut bounded, format_args!("{value:?}")).is_err() {
        bounded.0.push_str("... (the rest cut)");
    }
    bounded.0
}

/// Where a guest failed: starting, or running.
pub(crate) enum Failure {
    Instantiate(wasmtime::Error),
    Run(wasmtime::Error),
}

/// What Wasmtime 48 says when a store's handle limit (`Store::set_max_component_handles`)
/// stops a guest: a plain error with no type of its own, so its text is what tells it
/// apart (`hostile::resources` fails if a Wasmtime upgrade words it otherwise).
const HANDLE_LIMIT_TEXT: &str = "store handle limit exceeded";

/// Whether `err` is the store's handle limit stopping the guest.
fn is_handle_limit(err: &wasmtime::Error) -> bool {
    err.chain()
        .any(|cause| cause.to_string().contains(HANDLE_LIMIT_TEXT))
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
                    shared: true,
                };
            }
            err
        }
        Failure::Run(err) => err,
    };
    if let Some(limit) = err.downcast_ref::<RegionLimitExceeded>() {
        return InvokeError::RegionLimit {
            function: name,
            message: limit.to_string(),
        };
    }
    if is_handle_limit(&err) {
        return InvokeError::HandleLimit { function: name };
    }
    // Wasmtime's host traps with this past `host_limits::MAX_FIELDS_BYTES` (or the
    // most fields a header map holds), not with a header error the guest could handle.
    if err.is::<wasmtime_wasi_http::FieldMapError>() {
        return InvokeError::FieldsLimit { function: name };
    }
    if let Some(held) = err.downcast_ref::<GuestMemoryHeld>() {
        return InvokeError::MemoryBudget {
            function: name,
            message: held.to_string(),
        };
    }
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
                message: cut_guest_text(message),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_guest_text_is_cut_at_a_character_boundary() {
        let text = "é".repeat(GUEST_TEXT_BYTES);
        let cut = cut_guest_text(text.clone());
        assert!(cut.len() < GUEST_TEXT_BYTES + 40, "{}", cut.len());
        assert!(
            cut.capacity() < 2 * GUEST_TEXT_BYTES,
            "it holds {} bytes, not the guest's whole text",
            cut.capacity()
        );
        assert!(cut.ends_with(&format!("({} more bytes cut)", GUEST_TEXT_BYTES)));
        assert_eq!(cut_guest_text("short".into()), "short");
    }

    #[test]
    fn a_values_debug_text_stops_at_the_bound_and_says_so() {
        // Each control character is escaped to six bytes (`\u{1}`).
        let hostile = Some("\u{1}".repeat(1 << 20));
        let text = guest_debug_text(&hostile);
        assert!(text.len() <= GUEST_TEXT_BYTES + 20, "{}", text.len());
        assert!(text.starts_with("Some(\"\\u{1}"), "{text:.40}");
        assert!(text.ends_with("... (the rest cut)"), "{text:.40}");
        assert_eq!(guest_debug_text(&Some("short")), "Some(\"short\")");
    }
}
