//! End-to-end tests: real `faas up` processes, real HTTP over sockets, real components
//! built from `functions/`. Grouped by feature, one module each.

mod support;

mod activator;
mod admin;
mod deploy;
mod deploy_crash;
mod hostile;
mod languages;
mod limits;
mod logs;
mod manifest;
mod otel;
mod persistence;
mod placement;
mod redis;
mod regions;
mod server;
mod services;
mod tenants;
mod workflows;
