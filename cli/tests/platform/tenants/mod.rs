//! Multi-tenant attacks: tenant `victim` deploys and is served; tenant `mallory`, with
//! its own token, tries each attack on it (claiming its tenant, taking its routes,
//! reading its streams, channels and keys, writing the platform's own keys, holding
//! the deploys every tenant takes in turn). Each test
//! asserts that the attack was refused and that the victim kept being served, in
//! embedded mode and, where the attack goes through Redis, in services mode.

mod credentials;
mod deploys;
mod internal_api;
mod messaging;
mod quotas;
mod removal;
mod routes;
pub(crate) mod scene;
