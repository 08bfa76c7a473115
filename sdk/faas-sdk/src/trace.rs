//! The trace the current event belongs to: its id, to put beside what the function
//! does elsewhere (its own logs, a call to another system), so that both can be found
//! from the platform's spans.

use crate::bindings::faas::platform::trace as wit;

/// The event's W3C trace id (32 lowercase hex digits), or `None` when the platform
/// exports no traces.
pub fn trace_id() -> Option<String> {
    wit::trace_id()
}
