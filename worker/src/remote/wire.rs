//! The internal API's contract: header names, the failure body, and the framing of a
//! run's reply (a length-prefixed JSON head, then the output regions' bytes).

use crate::error::InvokeError;
use crate::region::Region;
use crate::run::{RunError, RunOutcome, RunRecord};
use bytes::{Buf, Bytes};
use serde::{Deserialize, Serialize};

/// `http` (an HTTP function call) or `run` (a workflow run).
pub(crate) const CALL: &str = "x-faas-call";
/// The workflow called.
pub(crate) const WORKFLOW: &str = "x-faas-workflow";
/// The HTTP function called.
pub(crate) const FUNCTION: &str = "x-faas-function";
/// The cluster token.
pub(crate) const TOKEN: &str = "x-faas-cluster-token";
/// The trigger message of a run, as JSON.
pub(crate) const MESSAGE: &str = "x-faas-message";
/// Marks a response that is a platform failure (its body an [`EventFailure`]), not
/// the function's own response.
pub(crate) const FAILURE: &str = "x-faas-failure";

/// A failed event as it crosses a process boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct EventFailure {
    /// A one-word cause (`trap`, `timeout`, `step_failed`, `unavailable`...).
    pub kind: String,
    /// The HTTP status it maps to.
    pub status: u16,
    /// What happened.
    pub message: String,
    /// The function at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
}

impl EventFailure {
    /// The cause of a failure that happened before any function ran: no worker could
    /// take the event (none reachable, or the workflow is not loaded there yet).
    pub const UNAVAILABLE: &'static str = "unavailable";

    /// No worker could take the event; trying again later may succeed.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            kind: Self::UNAVAILABLE.to_owned(),
            status: 503,
            message: message.into(),
            function: None,
        }
    }

    /// Whether no function ran: the event may be retried without counting against it.
    pub fn is_unavailable(&self) -> bool {
        self.kind == Self::UNAVAILABLE
    }
}

impl From<&InvokeError> for EventFailure {
    fn from(err: &InvokeError) -> Self {
        Self {
            kind: err.cause().to_owned(),
            status: err.status(),
            message: err.to_string(),
            function: Some(err.function().to_owned()),
        }
    }
}

impl From<&RunError> for EventFailure {
    fn from(err: &RunError) -> Self {
        Self {
            kind: err.kind().to_owned(),
            status: err.status(),
            message: err.to_string(),
            function: None,
        }
    }
}

/// The JSON head of a run reply.
#[derive(Serialize, Deserialize)]
struct RunHead {
    record: RunRecord,
    /// Each output region's schema type and length, in order; their bytes follow.
    outputs: Vec<(String, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<EventFailure>,
}

/// A run's outcome as the reply body.
pub(crate) fn encode_run(outcome: RunOutcome) -> Vec<u8> {
    let mut outputs = Vec::new();
    let result = outcome.result.and_then(|regions| {
        regions
            .iter()
            .map(|region| {
                let bytes = region
                    .bytes()
                    .map_err(|err| RunError::Output(err.to_string()))?;
                Ok((region.schema_type().to_owned(), bytes.into_owned()))
            })
            .collect::<Result<Vec<_>, RunError>>()
    });
    let error = match result {
        Ok(regions) => {
            outputs = regions;
            None
        }
        Err(err) => Some(EventFailure::from(&err)),
    };
    let head = RunHead {
        record: outcome.record,
        outputs: outputs
            .iter()
            .map(|(schema_type, bytes)| (schema_type.clone(), bytes.len() as u64))
            .collect(),
        error,
    };
    let head = serde_json::to_vec(&head).expect("the run head serializes");
    let total = 4 + head.len() + outputs.iter().map(|(_, b)| b.len()).sum::<usize>();
    let mut body = Vec::with_capacity(total);
    body.extend_from_slice(&(head.len() as u32).to_be_bytes());
    body.extend_from_slice(&head);
    for (_, bytes) in &outputs {
        body.extend_from_slice(bytes);
    }
    body
}

/// A run reply's record and result.
///
/// # Errors
/// A message saying how the body is malformed.
pub(crate) fn decode_run(
    mut body: Bytes,
) -> Result<(RunRecord, Result<Vec<Region>, EventFailure>), String> {
    if body.len() < 4 {
        return Err("the run reply is shorter than its length prefix".to_owned());
    }
    let head_len = body.get_u32() as usize;
    if body.len() < head_len {
        return Err("the run reply's head is truncated".to_owned());
    }
    let head: RunHead = serde_json::from_slice(&body.split_to(head_len))
        .map_err(|err| format!("the run reply's head is malformed: {err}"))?;
    if let Some(error) = head.error {
        return Ok((head.record, Err(error)));
    }
    let mut regions = Vec::with_capacity(head.outputs.len());
    for (schema_type, len) in head.outputs {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if body.len() < len {
            return Err("the run reply's outputs are truncated".to_owned());
        }
        regions.push(Region::new(schema_type, &body.split_to(len)[..]));
    }
    Ok((head.record, Ok(regions)))
}
