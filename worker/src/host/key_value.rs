//! `faas:platform/key-value`: the tenant's store. The tenant comes from the event
//! context, never from the guest, so a guest cannot name another tenant's keys.

use super::platform::key_value::{Error, Host};
use crate::kv::KvError;
use crate::state::InstanceState;

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

impl Host for InstanceState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
        let event = &self.event;
        Ok(event.kv.get(&event.tenant, &key).await.map_err(Error::from))
    }

    async fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), Error>> {
        let event = &self.event;
        Ok(event
            .kv
            .set(&event.tenant, &key, value)
            .await
            .map_err(Error::from))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), Error>> {
        let event = &self.event;
        Ok(event
            .kv
            .delete(&event.tenant, &key)
            .await
            .map_err(Error::from))
    }

    async fn increment(&mut self, key: String, delta: i64) -> wasmtime::Result<Result<i64, Error>> {
        let event = &self.event;
        Ok(event
            .kv
            .increment(&event.tenant, &key, delta)
            .await
            .map_err(Error::from))
    }
}
