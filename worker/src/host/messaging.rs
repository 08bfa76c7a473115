//! `faas:platform/messaging`: outbound publish and append through the platform's
//! [`crate::messaging::Publisher`], if it has one.

use super::platform::messaging::Host;
use crate::state::InstanceState;

/// Largest message a function may send.
const MAX_MESSAGE_BYTES: usize = 1 << 20;

fn check(payload: &[u8]) -> Result<(), String> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(format!(
            "message of {} bytes exceeds the limit of {MAX_MESSAGE_BYTES}",
            payload.len()
        ));
    }
    Ok(())
}

const NO_BROKER: &str = "no message broker is configured (run the platform with --redis)";

impl Host for InstanceState {
    async fn publish(
        &mut self,
        channel: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        if let Err(message) = check(&payload) {
            return Ok(Err(message));
        }
        Ok(match &self.event.publisher {
            Some(publisher) => publisher.publish(&channel, &payload).await,
            None => Err(NO_BROKER.to_owned()),
        })
    }

    async fn append(
        &mut self,
        stream: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<String, String>> {
        if let Err(message) = check(&payload) {
            return Ok(Err(message));
        }
        Ok(match &self.event.publisher {
            Some(publisher) => publisher.append(&stream, &payload).await,
            None => Err(NO_BROKER.to_owned()),
        })
    }
}
