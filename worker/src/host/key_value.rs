//! `faas:platform/key-value`: the tenant's store. The tenant comes from the event
//! context, never from the guest, so a guest cannot name another tenant's keys.

use super::platform::key_value::{Error, Host};
use crate::kv::KvError;
use crate::state::{EventContext, InstanceState};
use faas_store::kv::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use tracing::Instrument as _;

impl From<KvError> for Error {
    fn from(err: KvError) -> Self {
        match err {
            KvError::TooLarge(what) => Error::TooLarge(what),
            // The tenant's data would be too large; the text names the quota.
            KvError::Quota(what) => Error::TooLarge(what),
            KvError::Store(what) => Error::Store(what),
        }
    }
}

/// The span of one call, a child of the event's (the key is not recorded: it may be
/// anything the guest chose, and a trace is no place for its data).
fn span(event: &EventContext, operation: &'static str) -> tracing::Span {
    tracing::info_span!(
        parent: event.span(),
        "key-value",
        otel.name = operation,
        otel.kind = "client",
        db.system.name = "faas-kv"
    )
}

impl Host for InstanceState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
        let event = &self.event;
        let get = event.kv.get(&event.tenant, &key);
        Ok(get
            .instrument(span(event, "kv get"))
            .await
            .map_err(Error::from))
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), Error>> {
        // Past the limits it is refused at once, holding nothing while it waits.
        let held =
            self.hold(key.len().min(MAX_KEY_BYTES + 1) + value.len().min(MAX_VALUE_BYTES + 1))?;
        let event = &self.event;
        let set = event.kv.set(&event.tenant, &key, value);
        let result = set.instrument(span(event, "kv set")).await;
        self.release_held(held);
        Ok(result.map_err(Error::from))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), Error>> {
        let event = &self.event;
        let delete = event.kv.delete(&event.tenant, &key);
        Ok(delete
            .instrument(span(event, "kv delete"))
            .await
            .map_err(Error::from))
    }

    async fn increment(&mut self, key: String, delta: i64) -> wasmtime::Result<Result<i64, Error>> {
        let event = &self.event;
        let increment = event.kv.increment(&event.tenant, &key, delta);
        Ok(increment
            .instrument(span(event, "kv increment"))
            .await
            .map_err(Error::from))
    }
}
