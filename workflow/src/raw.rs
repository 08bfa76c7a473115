//! The TOML-facing shape of `workflow.toml`, exactly as written.
//!
//! Kept apart from the public model so that the model's serde (the JSON sent between
//! processes) is free of spans and TOML quirks, while these structs keep the spans the
//! validator needs to point at the offending text. `deny_unknown_fields` everywhere: a
//! misspelt optional field (`memroy_mb`) would otherwise be silently ignored.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::model::FunctionKind;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkflow {
    pub name: Spanned<String>,
    pub tenant: Spanned<String>,
    pub description: Option<String>,
    /// Optional here so that a file without functions gets our "at least one function"
    /// message rather than serde's "missing field".
    pub functions: Option<Spanned<BTreeMap<Spanned<String>, RawFunction>>>,
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
}

/// `[triggers]`: one array per trigger type.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTriggers {
    #[serde(default)]
    pub http: Vec<RawHttpTrigger>,
}

/// `[[triggers.http]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttpTrigger {
    pub route: Spanned<String>,
    pub function: Spanned<String>,
}
