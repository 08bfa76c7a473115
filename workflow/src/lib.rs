//! `workflow.toml`: the manifest that describes a deployable workflow (its functions,
//! their components and limits, and the HTTP routes that trigger them).
//!
//! Version 2 of the format adds steps: `[steps.<name>]` runs a `step` function on typed
//! regions ([`SchemaType`]), `[[edges]]` chain the steps (and may fan out and join
//! branches), `[workflow]` limits a run, and an HTTP trigger may name the entry `step`
//! instead of a `function` to start a run. Every v1 manifest is a valid v2 manifest.
//!
//! Runs may also be started by Redis: `[[triggers.redis]]` subscribes to a pub/sub
//! channel (at most once, as in Spin) and `[[triggers.stream]]` reads a Redis stream
//! through a consumer group (at least once, with a dead-letter stream); either passes the
//! message payload to the entry step, see [`RedisTrigger`] and [`StreamTrigger`].
//!
//! A step may name the function of a Karmem interface it implements
//! (`interface = "blob.km:transfer.consume"`); [`Workflow::parse_with_schemas`] resolves
//! the memories that function declares into limits on the step's regions, see
//! [`memory`].
//!
//! A function may send outbound HTTP requests only where its `allowed_outbound_hosts`
//! lists (`["https://api.example.com", "http://*:8080"]`, Spin's syntax); see
//! [`outbound`].
//!
//! [`Workflow::parse`] / [`Workflow::from_file`] turn the TOML into a validated
//! [`Workflow`]; every problem comes back as a [`ManifestError`] naming the file, line,
//! column and field. The [`Workflow`] types serialize to JSON for the trip between CLI,
//! gateway and worker.
//!
//! ```
//! use faas_workflow::{TriggerTarget, Workflow};
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
//! assert_eq!(
//!     wf.route_for("/hello/world").unwrap().target,
//!     TriggerTarget::Function("hello".into())
//! );
//! ```

#![warn(missing_docs)]

mod component;
mod conflict;
mod consumers;
mod error;
mod locate;
pub mod memory;
mod model;
pub mod opened_networks;
pub mod outbound;
mod raw;
mod route;
mod route_table;
mod schema_type;
mod validate;

pub use component::{NotAComponent, check_component_header};
pub use conflict::{RouteOwners, conflicts_by_scan, route_conflict};
pub use consumers::{
    DEFAULT_MAX_REDIS_CONSUMERS_PER_TENANT, redis_consumers, redis_consumers_over,
};
pub use error::{Diagnostic, ManifestError};
pub use memory::{InterfaceRef, InterfaceRefError, MemoryLimit, StepMemories};
pub use model::{
    Edge, EdgeMode, FanOut, Function, FunctionKind, HttpTrigger, JoinPolicy, Limits, OnFailure,
    Provenance, RedisTrigger, RetryPolicy, RunSettings, Step, StreamTrigger, TenantScope,
    TriggerTarget, Workflow,
};
pub use opened_networks::{OpenedNetwork, OpenedNetworks, parse_network};
pub use outbound::{
    AllowedOutboundHosts, OutboundAccess, OutboundHost, OutboundHostError, is_public_address,
};
pub use route::{MAX_ROUTE_LEN, Route, RouteError};
pub use route_table::RouteTable;
pub use schema_type::{MAX_SCHEMA_TYPE_LEN, SchemaType, SchemaTypeError};
pub use validate::{
    MAX_EDGES, MAX_FUNCTIONS, MAX_HTTP_TRIGGERS, MAX_NAME_LEN, MAX_REDIS_NAME_LEN,
    MAX_REDIS_TRIGGERS, MAX_STEPS, MAX_STREAM_TRIGGERS, is_valid_name, is_valid_redis_name,
};
