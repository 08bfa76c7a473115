//! What the sensor pipeline's three steps (collector, assembler, matcher) share: the
//! Karmem types generated from `sensors.km`, the names their regions carry, reading the
//! one input region, and forwarding to a Redis channel.
//!
//! The same components run in two deployments (see the README): chained through Redis
//! channels, one workflow per step, or as the steps of one workflow. Everything that
//! differs between the two is a config key, handled here so each step stays about its
//! own job.

use faas_sdk::step::Region;

#[allow(dead_code, clippy::all)]
pub mod sensors {
    include!(concat!(env!("OUT_DIR"), "/sensors.rs"));
}

/// The schema file as the manifest names it when config `schema` is not set.
const DEFAULT_SCHEMA: &str = "sensors.km";

/// The region type of Karmem struct `name`, e.g. `sensors.km:Location`.
///
/// The platform compares a returned region's type with the step's declared output
/// type as written, and a manifest names schema files relative to itself. The
/// channel-mode manifests live one directory down (`channels/`) and so say
/// `../sensors.km:Location`; they set config `schema = "../sensors.km"` to match.
pub fn region_type(name: &str) -> String {
    let schema = faas_sdk::config::get("schema").unwrap_or_else(|| DEFAULT_SCHEMA.to_owned());
    format!("{schema}:{name}")
}

/// A region of Karmem struct `name` holding `bytes`.
pub fn region(name: &str, bytes: &[u8]) -> Region {
    Region::from_bytes(&region_type(name), bytes)
}

/// The bytes of the step's single input region.
///
/// Its declared type is not checked: a workflow's entry step receives `bytes` (a Redis
/// message), a later step the Karmem type itself, and both carry the same encoding.
///
/// # Errors
/// When there is not exactly one input region.
pub fn single_input(inputs: &[Region], what: &str) -> Result<Vec<u8>, String> {
    match inputs {
        [input] => Ok(input.bytes()),
        _ => Err(format!("expected one {what} region, got {}", inputs.len())),
    }
}

/// The channel named by config `forward`, if set: channel mode publishes every output
/// there, which starts the next workflow of the chain.
pub fn forward_channel() -> Option<String> {
    faas_sdk::config::get("forward").filter(|channel| !channel.is_empty())
}

/// Publishes every one of `messages` on `channel`, in order, a batch per call (one round
/// trip to the broker for up to [`faas_sdk::messaging::MAX_PUBLISH_ALL`] messages).
///
/// # Errors
/// The broker's explanation, naming the channel.
pub fn forward_all(channel: &str, messages: &[Vec<u8>]) -> Result<(), String> {
    messages
        .chunks(faas_sdk::messaging::MAX_PUBLISH_ALL)
        .try_for_each(|batch| faas_sdk::messaging::publish_all(channel, batch))
        .map_err(|err| format!("forwarding to channel `{channel}`: {err}"))
}
