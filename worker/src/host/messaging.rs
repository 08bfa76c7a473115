//! `faas:platform/messaging`: outbound publish and append through the platform's
//! [`faas_invoke::Publisher`], if it has one, always in the event's tenant's
//! namespace.

use super::platform::messaging::Host;
use crate::state::{EventContext, InstanceState};
use faas_invoke::{PublishError, Publisher};
use tracing::Instrument as _;

/// Largest message a function may send.
const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// How much of a refused name is quoted back to the guest.
const QUOTED_NAME_BYTES: usize = 300;

/// Refuses what no broker should see: an invalid name or an oversized payload.
fn check(name: &str, payload: &[u8]) -> Result<(), PublishError> {
    if !faas_workflow::is_valid_redis_name(name) {
        let mut end = name.len().min(QUOTED_NAME_BYTES);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        return Err(PublishError::InvalidName {
            name: name[..end].to_owned(),
        });
    }
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(PublishError::TooLarge {
            len: payload.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(())
}

impl InstanceState {
    /// The publisher to send `payload` to `name` through, once both are acceptable.
    fn publisher_for(
        &self,
        name: &str,
        payload: &[u8],
    ) -> Result<std::sync::Arc<dyn Publisher>, PublishError> {
        check(name, payload)?;
        self.event.publisher.clone().ok_or(PublishError::NoBroker)
    }
}

/// The span of one send to `destination` (a channel or stream the guest named, checked
/// before the span is made), a child of the event's. An appended stream entry carries
/// its trace context (`faas_store::broker`), so the run it triggers continues the trace.
fn span(event: &EventContext, operation: &'static str, destination: &str) -> tracing::Span {
    tracing::info_span!(
        parent: event.span(),
        "messaging",
        otel.name = operation,
        otel.kind = "producer",
        messaging.system = "redis",
        messaging.destination.name = destination,
    )
}

impl Host for InstanceState {
    async fn publish(
        &mut self,
        channel: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), String>> {
        let result = match self.publisher_for(&channel, &payload) {
            Ok(publisher) => {
                publisher
                    .publish(&self.event.tenant, &channel, &payload)
                    .instrument(span(&self.event, "publish", &channel))
                    .await
            }
            Err(err) => Err(err),
        };
        Ok(result.map_err(|err| err.to_string()))
    }

    async fn append(
        &mut self,
        stream: String,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<String, String>> {
        let result = match self.publisher_for(&stream, &payload) {
            Ok(publisher) => {
                publisher
                    .append(&self.event.tenant, &stream, &payload)
                    .instrument(span(&self.event, "append", &stream))
                    .await
            }
            Err(err) => Err(err),
        };
        Ok(result.map_err(|err| err.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes_are_checked_before_the_broker_sees_them() {
        assert!(check("orders", b"x").is_ok());
        // A platform key is a valid name: the publisher places it in the tenant's
        // namespace, where it is harmless.
        assert!(check("faas:lock:shop", b"x").is_ok());
        let refused = check("two words", b"x").unwrap_err().to_string();
        assert!(refused.contains("`two words` is not a valid"), "{refused}");
        let long = "é".repeat(1000);
        let refused = check(&long, b"x").unwrap_err();
        match &refused {
            PublishError::InvalidName { name } => assert!(name.len() <= QUOTED_NAME_BYTES),
            other => panic!("{other}"),
        }
        let refused = check("orders", &vec![0; MAX_MESSAGE_BYTES + 1]).unwrap_err();
        assert!(
            matches!(refused, PublishError::TooLarge { .. }),
            "{refused}"
        );
    }
}
