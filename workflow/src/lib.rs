//! `workflow.toml`: the manifest that describes a deployable workflow (its functions,
//! their components and limits, and the HTTP routes that trigger them).
//!
//! [`Workflow::parse`] / [`Workflow::from_file`] turn the TOML into a validated
//! [`Workflow`]; every problem comes back as a [`ManifestError`] naming the file, line,
//! column and field. The [`Workflow`] types serialize to JSON for the trip between CLI,
//! gateway and worker.
//!
//! ```
//! use faas_workflow::Workflow;
//!
//! let wf = Workflow::parse("workflow.toml", r#"
//!     name = "hello"
//!     tenant = "demo"
//!
//!     [functions.hello]
//!     component = "hello.wasm"
//!
//!     [[triggers.http]]
//!     route = "/hello/..."
//!     function = "hello"
//! "#).unwrap();
//! assert_eq!(wf.route_for("/hello/world").unwrap().function, "hello");
//! ```

#![warn(missing_docs)]

mod error;
mod locate;
mod model;
mod raw;
mod route;
mod validate;

pub use error::{Diagnostic, ManifestError};
pub use model::{Function, FunctionKind, HttpTrigger, Limits, Workflow};
pub use route::{Route, RouteError};
pub use validate::{MAX_NAME_LEN, is_valid_name};
