//! The internal API's contract: header names, the failure body, and the frame that
//! carries regions between processes (a length-prefixed JSON head naming each region,
//! then the bytes of those not passed as memory file descriptors), used by run replies
//! and branch calls alike.

use crate::error::InvokeError;
use crate::region::{Region, RegionError, RegionOwner};
use crate::run::{RunError, RunOutcome, RunRecord};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::os::fd::{BorrowedFd, OwnedFd};

/// `http` (an HTTP function call) or `run` (a workflow run).
pub(crate) const CALL: &str = "x-faas-call";
/// The workflow called.
pub(crate) const WORKFLOW: &str = "x-faas-workflow";
/// The HTTP function called.
pub(crate) const FUNCTION: &str = "x-faas-function";
/// The cluster token.
pub(crate) const TOKEN: &str = "x-faas-cluster-token";
/// The revision the gateway serves the event with: a worker that holds it staged (its
/// deploy just switched) serves it rather than the live one it has not replaced yet.
pub(crate) const REVISION: &str = "x-faas-revision";
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
    outputs: Vec<Carried>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<EventFailure>,
}

/// A run's outcome as the reply body: a frame whose inline bytes are the outputs.
pub(crate) fn encode_run(outcome: RunOutcome) -> Vec<u8> {
    let packed = outcome.result.and_then(|regions| {
        carry(&regions, false)
            .map(|packed| (packed.carried, packed.inline))
            .map_err(|err| RunError::Output(err.to_string()))
    });
    let (outputs, inline, error) = match packed {
        Ok((outputs, inline)) => (outputs, inline, None),
        Err(err) => (Vec::new(), Vec::new(), Some(EventFailure::from(&err))),
    };
    let head = RunHead {
        record: outcome.record,
        outputs,
        error,
    };
    frame(&head, &inline)
}

/// A run reply's record and result.
///
/// # Errors
/// A message saying how the body is malformed.
pub(crate) fn decode_run(
    body: &[u8],
) -> Result<(RunRecord, Result<Vec<Region>, EventFailure>), String> {
    let malformed = |err: &dyn std::fmt::Display| format!("the run reply is malformed: {err}");
    let (head, inline) = split_frame::<RunHead>(body).map_err(|err| malformed(&err))?;
    if let Some(error) = head.error {
        return Ok((head.record, Err(error)));
    }
    let outputs = uncarry(head.outputs, Vec::new(), inline, None).map_err(|err| malformed(&err))?;
    Ok((head.record, Ok(outputs)))
}

/// Most descriptors passed in one message (the kernel allows 253); further regions
/// travel inline.
pub(crate) const MAX_FDS: usize = 128;

/// One region in a frame: its type and length, and whether its memory file is the
/// next descriptor (otherwise its bytes follow the head, in order).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Carried {
    schema_type: String,
    len: u64,
    fd: bool,
}

/// Regions made ready for a frame.
pub(crate) struct Packed<'a> {
    /// One entry per region, in order.
    pub carried: Vec<Carried>,
    /// The memory files passed as descriptors.
    pub fds: Vec<BorrowedFd<'a>>,
    /// The bytes of the regions passed inline, in order.
    pub inline: Vec<u8>,
}

/// Splits `regions` into their frame entries, the memory files to pass (when `fds`),
/// and the inline bytes of the rest.
pub(crate) fn carry(regions: &[Region], fds: bool) -> Result<Packed<'_>, RegionError> {
    let mut carried = Vec::with_capacity(regions.len());
    let mut descriptors = Vec::new();
    let mut inline = Vec::new();
    for region in regions {
        let file = region
            .memory_file()
            .filter(|_| fds && descriptors.len() < MAX_FDS);
        if let Some(file) = file {
            descriptors.push(file);
        } else {
            inline.extend_from_slice(&region.bytes()?);
        }
        carried.push(Carried {
            schema_type: region.schema_type().to_owned(),
            len: region.len() as u64,
            fd: file.is_some(),
        });
    }
    Ok(Packed {
        carried,
        fds: descriptors,
        inline,
    })
}

/// Rebuilds the regions of a frame, owned by `owner`'s run when given.
pub(crate) fn uncarry(
    carried: Vec<Carried>,
    fds: Vec<OwnedFd>,
    mut inline: &[u8],
    owner: Option<&RegionOwner>,
) -> Result<Vec<Region>, RegionError> {
    let mut fds = fds.into_iter();
    let malformed = |what: &str| RegionError::Map(std::io::Error::other(what.to_owned()));
    carried
        .into_iter()
        .map(|entry| {
            let len = usize::try_from(entry.len).map_err(|_| malformed("length"))?;
            if entry.fd {
                let fd = fds
                    .next()
                    .ok_or_else(|| malformed("a memory file is missing"))?;
                let owner = owner.ok_or_else(|| malformed("a memory file needs a run"))?;
                Region::from_memory_file(entry.schema_type, owner.clone(), fd, len)
            } else {
                if inline.len() < len {
                    return Err(malformed("the inline bytes are truncated"));
                }
                let (bytes, rest) = inline.split_at(len);
                inline = rest;
                let region = Region::new(entry.schema_type, bytes);
                Ok(match owner {
                    Some(owner) => region.owned_by(owner.clone()),
                    None => region,
                })
            }
        })
        .collect()
}

/// `[u32 head length][head JSON][inline bytes]`.
pub(crate) fn frame(head: &impl Serialize, inline: &[u8]) -> Vec<u8> {
    let head = serde_json::to_vec(head).expect("frame heads serialize");
    let mut frame = Vec::with_capacity(4 + head.len() + inline.len());
    frame.extend_from_slice(&(head.len() as u32).to_be_bytes());
    frame.extend_from_slice(&head);
    frame.extend_from_slice(inline);
    frame
}

/// A frame's head and inline bytes.
pub(crate) fn split_frame<H: DeserializeOwned>(frame: &[u8]) -> std::io::Result<(H, &[u8])> {
    let malformed = |what: &str| std::io::Error::other(format!("malformed frame: {what}"));
    let len_bytes: [u8; 4] = frame
        .get(..4)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| malformed("no length"))?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let head = frame
        .get(4..4 + len)
        .ok_or_else(|| malformed("short head"))?;
    let head = serde_json::from_slice(head).map_err(|err| malformed(&err.to_string()))?;
    Ok((head, &frame[4 + len..]))
}

/// How many inline bytes follow a frame's head.
pub(crate) trait InlineLen {
    fn inline_len(&self) -> usize;
}

pub(crate) fn inline_len(carried: &[Carried]) -> usize {
    carried
        .iter()
        .filter(|entry| !entry.fd)
        .map(|entry| entry.len as usize)
        .sum()
}
