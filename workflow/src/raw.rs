//! The TOML-facing shape of `workflow.toml`, exactly as written.
//!
//! Kept apart from the public model so that the model's serde (the JSON sent between
//! processes) is free of spans and TOML quirks, while these structs keep the spans the
//! validator needs to point at the offending text. `deny_unknown_fields` everywhere: a
//! misspelt optional field (`memroy_mb`) would otherwise be silently ignored.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde_spanned::Spanned;

use crate::model::{FunctionKind, OnFailure};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkflow {
    pub name: Spanned<String>,
    /// Optional: a tenant's own deploy may leave it out (see `TenantScope`).
    pub tenant: Option<Spanned<String>>,
    pub description: Option<String>,
    /// Optional here so that a file without functions gets our "at least one function"
    /// message rather than serde's "missing field".
    pub functions: Option<Spanned<BTreeMap<Spanned<String>, RawFunction>>>,
    pub steps: Option<BTreeMap<Spanned<String>, RawStep>>,
    #[serde(default)]
    pub edges: Vec<Spanned<RawEdge>>,
    pub workflow: Option<RawSettings>,
    pub triggers: Option<RawTriggers>,
}

/// `[functions.<name>]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFunction {
    pub component: Spanned<String>,
    pub build: Option<Spanned<String>>,
    pub kind: Option<FunctionKind>,
    pub memory_mb: Option<Spanned<u32>>,
    pub timeout_ms: Option<Spanned<u64>>,
    pub fuel: Option<Spanned<u64>>,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Entries parsed by the validator, so that a bad one is reported at its place.
    #[serde(default)]
    pub allowed_outbound_hosts: Vec<Spanned<String>>,
}

/// `[steps.<name>]`. Types stay strings here: parsing them in the validator gives
/// messages naming the rule rather than serde's generic ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStep {
    pub function: Spanned<String>,
    pub input: Spanned<String>,
    pub output: Spanned<String>,
    pub retries: Option<RawRetries>,
    /// `file.km:interface.function`, parsed by the validator.
    pub interface: Option<Spanned<String>>,
}

/// `retries = { attempts = 3, backoff_ms = 20 }` in a step.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetries {
    pub attempts: Option<Spanned<u32>>,
    pub backoff_ms: Option<Spanned<u64>>,
}

/// `[[edges]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEdge {
    pub from: Spanned<String>,
    pub to: Spanned<String>,
    #[serde(rename = "type")]
    pub schema_type: Spanned<String>,
    pub fan_out: Option<Spanned<RawFanOut>>,
    pub join: Option<Spanned<RawJoin>>,
}

/// `fan_out = "each"` or `fan_out = 4`; the count's range is checked by the validator.
#[derive(Debug)]
pub(crate) enum RawFanOut {
    Each,
    Static(i64),
}

impl<'de> Deserialize<'de> for RawFanOut {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FanOutVisitor;

        impl Visitor<'_> for FanOutVisitor {
            type Value = RawFanOut;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"each\" or a number of branches")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawFanOut, E> {
                match value {
                    "each" => Ok(RawFanOut::Each),
                    _ => Err(E::invalid_value(Unexpected::Str(value), &self)),
                }
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawFanOut, E> {
                Ok(RawFanOut::Static(value))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawFanOut, E> {
                Ok(RawFanOut::Static(i64::try_from(value).unwrap_or(i64::MAX)))
            }
        }

        deserializer.deserialize_any(FanOutVisitor)
    }
}

/// `join = { timeout_ms = 5000, on_failure = "continue" }` on an edge.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJoin {
    pub timeout_ms: Option<Spanned<u64>>,
    pub on_failure: Option<OnFailure>,
}

/// `[workflow]`: run settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSettings {
    pub concurrency: Option<Spanned<u32>>,
    pub timeout_ms: Option<Spanned<u64>>,
    pub replicas: Option<Spanned<u32>>,
    pub spread_branches: Option<bool>,
}

/// `[triggers]`: one array per trigger type.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTriggers {
    #[serde(default)]
    pub http: Vec<Spanned<RawHttpTrigger>>,
    #[serde(default)]
    pub redis: Vec<Spanned<RawRedisTrigger>>,
    #[serde(default)]
    pub stream: Vec<Spanned<RawStreamTrigger>>,
}

/// `[[triggers.http]]`. `function` and `step` are both optional here so that the
/// validator can say "exactly one of them".
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttpTrigger {
    pub route: Spanned<String>,
    pub function: Option<Spanned<String>>,
    pub step: Option<Spanned<String>>,
}

/// `[[triggers.redis]]`: a Redis pub/sub channel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedisTrigger {
    pub channel: Spanned<String>,
    pub step: Spanned<String>,
}

/// `[[triggers.stream]]`: a Redis stream read through a consumer group. Ranges and
/// defaults are applied by the validator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStreamTrigger {
    pub stream: Spanned<String>,
    pub step: Spanned<String>,
    pub group: Option<Spanned<String>>,
    pub max_deliveries: Option<Spanned<u32>>,
    pub dead_letter: Option<Spanned<String>>,
    pub reclaim_idle_ms: Option<Spanned<u64>>,
    pub batch: Option<Spanned<u32>>,
}
