//! `faas:platform/messaging`: outbound publish (one message or a batch) and append
//! through the platform's [`faas_invoke::Publisher`], if it has one, always in the
//! event's tenant's namespace.

use super::platform::messaging::Host;
use crate::state::{EventContext, InstanceState};
use faas_invoke::{MAX_MESSAGE_BYTES, PublishError, Publisher};
use tracing::Instrument as _;

/// Most messages one `publish-all` may send.
const MAX_BATCH_MESSAGES: usize = 1024;

/// Largest total size of the messages one `publish-all` may send.
const MAX_BATCH_BYTES: usize = 16 << 20;

/// How much of a refused name is quoted back to the guest.
const QUOTED_NAME_BYTES: usize = 300;

/// Refuses what no broker should see: an invalid name or an oversized payload.
fn check(name: &str, payload: &[u8]) -> Result<(), PublishError> {
    check_name(name)?;
    check_size(payload)
}

/// Refuses a batch no broker should see: an invalid name, an oversized message, or
/// more messages or bytes than one call may send.
fn check_batch(name: &str, payloads: &[Vec<u8>]) -> Result<(), PublishError> {
    check_name(name)?;
    let bytes = payloads.iter().map(Vec::len).sum();
    if payloads.len() > MAX_BATCH_MESSAGES || bytes > MAX_BATCH_BYTES {
        return Err(PublishError::BatchTooLarge {
            count: payloads.len(),
            bytes,
            max_count: MAX_BATCH_MESSAGES,
            max_bytes: MAX_BATCH_BYTES,
        });
    }
    payloads.iter().try_for_each(|payload| check_size(payload))
}

/// Refuses a name no trigger could name either, quoting a few hundred bytes of it.
fn check_name(name: &str) -> Result<(), PublishError> {
    if faas_workflow::is_valid_redis_name(name) {
        return Ok(());
    }
    let mut end = name.len().min(QUOTED_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    Err(PublishError::InvalidName {
        name: name[..end].to_owned(),
    })
}

/// Refuses a message larger than a function may send.
fn check_size(payload: &[u8]) -> Result<(), PublishError> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(PublishError::TooLarge {
            len: payload.len(),
            limit: MAX_MESSAGE_BYTES,
        });
    }
    Ok(())
}

impl InstanceState {
    /// The publisher to send through, once what is sent passed `checked`.
    fn publisher(
        &self,
        checked: Result<(), PublishError>,
    ) -> Result<std::sync::Arc<dyn Publisher>, PublishError> {
        checked?;
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
        let result = match self.publisher(check(&channel, &payload)) {
            Ok(publisher) => {
                let held = self.hold(payload.len())?;
                let sent = publisher
                    .publish(&self.event.tenant, &channel, &payload)
                    .instrument(span(&self.event, "publish", &channel))
                    .await;
                self.release_held(held);
                sent
            }
            Err(err) => Err(err),
        };
        Ok(result.map_err(|err| err.to_string()))
    }

    async fn publish_all(
        &mut self,
        channel: String,
        payloads: Vec<Vec<u8>>,
    ) -> wasmtime::Result<Result<(), String>> {
        let result = match self.publisher(check_batch(&channel, &payloads)) {
            Ok(publisher) => {
                let held = self.hold(payloads.iter().map(Vec::len).sum())?;
                let sent = publisher
                    .publish_all(&self.event.tenant, &channel, &payloads)
                    .instrument(span(&self.event, "publish", &channel))
                    .await;
                self.release_held(held);
                sent
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
        let result = match self.publisher(check(&stream, &payload)) {
            Ok(publisher) => {
                let held = self.hold(payload.len())?;
                let sent = publisher
                    .append(&self.event.tenant, &stream, &payload)
                    .instrument(span(&self.event, "append", &stream))
                    .await;
                self.release_held(held);
                sent
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

    /// The batch limits are the host's to enforce, but guests learn them from the WIT
    /// (every language) and the Rust SDK (`MAX_PUBLISH_ALL`, checked before the call),
    /// which live in other workspaces: this keeps the three saying the same thing.
    #[test]
    fn the_wit_and_the_sdk_state_the_host_batch_limits() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let read = |path: &str| std::fs::read_to_string(format!("{root}/{path}")).unwrap();
        // Its doc comments as running text: words only, without the `///`s, and
        // numbers without their thousands separators.
        let wit = read("wit/platform.wit")
            .replace(',', "")
            .split_whitespace()
            .filter(|word| *word != "///")
            .collect::<Vec<_>>()
            .join(" ");
        let stated = format!(
            "At most {MAX_BATCH_MESSAGES} messages and {} MiB in all",
            MAX_BATCH_BYTES >> 20
        );
        assert!(wit.contains(&stated), "wit/platform.wit must say: {stated}");
        let sdk = read("sdk/faas-sdk/src/messaging.rs");
        let constant = format!("pub const MAX_PUBLISH_ALL: usize = {MAX_BATCH_MESSAGES};");
        assert!(sdk.contains(&constant), "the SDK must say: {constant}");
        assert!(
            sdk.contains(&format!("{} MiB per call", MAX_BATCH_BYTES >> 20)),
            "the SDK's docs must give the host's byte limit"
        );
    }

    #[test]
    fn a_batch_is_bounded_in_messages_and_bytes_and_each_message_checked() {
        let small = vec![b"x".to_vec(); MAX_BATCH_MESSAGES];
        assert!(check_batch("orders", &small).is_ok());
        assert!(check_batch("orders", &[]).is_ok());
        let refused = check_batch("two words", &small).unwrap_err();
        assert!(
            matches!(refused, PublishError::InvalidName { .. }),
            "{refused}"
        );
        let too_many = vec![Vec::new(); MAX_BATCH_MESSAGES + 1];
        let refused = check_batch("orders", &too_many).unwrap_err().to_string();
        assert!(
            refused.contains("1025 messages") && refused.contains("1024 messages"),
            "{refused}"
        );
        // Each message within its own limit, but more bytes in all than one call may send.
        let heavy = vec![vec![0; MAX_MESSAGE_BYTES]; MAX_BATCH_BYTES / MAX_MESSAGE_BYTES + 1];
        let refused = check_batch("orders", &heavy).unwrap_err();
        assert!(
            matches!(refused, PublishError::BatchTooLarge { bytes, .. } if bytes > MAX_BATCH_BYTES),
            "{refused}"
        );
        let one_too_large = vec![b"x".to_vec(), vec![0; MAX_MESSAGE_BYTES + 1]];
        let refused = check_batch("orders", &one_too_large).unwrap_err();
        assert!(
            matches!(refused, PublishError::TooLarge { .. }),
            "{refused}"
        );
    }
}
