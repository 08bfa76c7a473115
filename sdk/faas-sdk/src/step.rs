//! Workflow steps: a step receives the regions its incoming edge carries and returns the
//! regions its outgoing edge carries.
//!
//! A region holds one value of a named schema type: a Karmem type (`file.km:Type`) or a
//! raw `bytes`, `text` or `json` value.

/// Facts about the run: tenant, workflow, run id, step, attempt, and the fan-out branch
/// this invocation is (`branch` of `branches`).
pub use crate::bindings::exports::faas::platform::handler::Context;

/// One value handed between steps. `Region::from_bytes(type, bytes)` makes one;
/// `schema_type()`, `len()` and `bytes()` read one.
pub use crate::bindings::faas::platform::region::Region;

/// What a step handler returns: its output regions, or an error message that fails
/// this attempt (and is retried if the step's policy allows).
pub type StepResult = Result<Vec<Region>, String>;
