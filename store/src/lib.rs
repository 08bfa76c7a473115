//! The platform's state at rest in embedded mode: one SQLite database,
//! `<data-dir>/faas.db`, that survives restarts and `kill -9`.
//!
//! Why SQLite: it is what Spin keeps its default key-value store in, it is one file an
//! operator can copy and inspect with `sqlite3`, and in WAL mode each commit reaches the
//! operating system before it returns, so killing the process at any moment leaves the
//! last committed state (a power cut may lose the last commits with
//! `synchronous = NORMAL`, never consistency).
//!
//! [`Database`] opens the file and creates the tables; each concern keeps its own
//! tables in its own module.
//!
//! The Redis backends live here too, beside their SQLite counterparts: the key-value
//! store's (`kv`), the tenants' (`tenants`), the message broker functions publish
//! through (`broker`, which keeps tenants' streams within `stream_quota`), and the
//! consumer groups stream triggers read through (`stream_groups`), all connected as
//! `redis_connection` says (as is services mode's shared state, `faas-shared-state`);
//! guests' key-value calls each go over their tenant's connection
//! (`tenant_connections`). `tenant_data` removes a removed tenant's data from them.

pub mod broker;
mod db;
pub mod deployments;
pub mod kv;
mod log_queue;
pub mod logs;
pub mod redis_connection;
pub mod stream_groups;
pub mod stream_quota;
mod tenant_connections;
pub mod tenant_data;
pub mod tenants;

pub use db::{Database, StoreError};
pub use deployments::{DeploymentStore, SavedDeployment};
pub use kv::{KeyValueStore, KvError, KvQuota};
pub use tenant_connections::DEFAULT_TENANT_CONNECTIONS;
pub use tenant_data::{ForgetError, Forgotten, TenantData};
pub use tenants::{
    IssuedToken, MAX_TOKENS_PER_TENANT, QuotaChanges, Quotas, Tenant, TenantError, TenantStore,
    TenantWorkflows, TenantsCopy, TokenInfo,
};
