//! The internal API's contract: header names, the failure body, and the frame that
//! carries regions between processes (a length-prefixed JSON head naming each region,
//! then the bytes of those not passed as memory file descriptors), used by run replies
//! and branch calls alike.

use crate::{EventFailure, FailureKind, OutputRegion, RunRecord};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// `http` (an HTTP function call), `run` (a workflow run) or `branch` (a fan-out
/// branch spread from another worker).
pub const CALL: &str = "x-faas-call";
/// The workflow called.
pub const WORKFLOW: &str = "x-faas-workflow";
/// The HTTP function called.
pub const FUNCTION: &str = "x-faas-function";
/// The internal token.
pub const TOKEN: &str = "x-faas-internal-token";
/// Longest internal token a worker accepts (in the header and on its Unix socket),
/// so a process given a longer one refuses it at start rather than every call failing.
pub const MAX_INTERNAL_TOKEN_BYTES: usize = 256;
/// The revision the gateway serves the event with: a worker that holds it staged (its
/// deploy just switched) serves it rather than the live one it has not replaced yet.
pub const REVISION: &str = "x-faas-revision";
/// The tenant whose workflow the gateway sends the event to: a worker serves it only
/// with that tenant's workflow of the name, never with another tenant's that took the
/// name since the gateway last looked (it answers `unavailable`).
pub const TENANT: &str = "x-faas-tenant";
/// The authority a client asked an HTTP function for (its `:authority`, or `Host`):
/// the request's URI names the worker once the gateway addresses it there, and a
/// function is told the client's authority, never the worker's address. Empty when
/// the client named none; absent from a caller that is no gateway of this version, whose
/// request the worker serves as it came.
pub const AUTHORITY: &str = "x-faas-authority";
/// The trigger message of a run, as JSON.
pub const MESSAGE: &str = "x-faas-message";
/// Marks a response that is a platform failure (its body an [`EventFailure`]), not
/// the function's own response.
pub const FAILURE: &str = "x-faas-failure";

/// The JSON head of a run reply.
#[derive(Serialize, Deserialize)]
pub struct RunHead {
    /// The run step by step.
    pub record: RunRecord,
    /// The output regions, all inline.
    pub outputs: Vec<Carried>,
    /// Why the run failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<EventFailure>,
}

/// A run reply's record and result.
///
/// # Errors
/// A [`FailureKind::BadReply`] failure saying how the body is malformed.
pub fn decode_run(
    body: &Bytes,
) -> Result<(RunRecord, Result<Vec<OutputRegion>, EventFailure>), EventFailure> {
    let malformed = |err: &dyn std::fmt::Display| {
        EventFailure::new(
            FailureKind::BadReply,
            502,
            format!("the run reply is malformed: {err}"),
        )
    };
    let (head, inline) = split_frame::<RunHead>(body).map_err(|err| malformed(&err))?;
    if let Some(error) = head.error {
        return Ok((head.record, Err(error)));
    }
    // The outputs share the reply's buffer rather than being copied out of it.
    let mut at = body.len() - inline.len();
    let mut outputs = Vec::with_capacity(head.outputs.len());
    for entry in head.outputs {
        let end = usize::try_from(entry.len)
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|end| !entry.fd && *end <= body.len())
            .ok_or_else(|| malformed(&"the inline bytes are truncated"))?;
        outputs.push(OutputRegion {
            schema_type: entry.schema_type,
            bytes: body.slice(at..end),
        });
        at = end;
    }
    Ok((head.record, Ok(outputs)))
}

/// Most descriptors passed in one message (the kernel allows 253); further regions
/// travel inline.
pub const MAX_FDS: usize = 128;

/// One region in a frame: its type and length, and whether its memory file is the
/// next descriptor (otherwise its bytes follow the head, in order).
#[derive(Debug, Serialize, Deserialize)]
pub struct Carried {
    /// The region's schema type.
    pub schema_type: String,
    /// Its length in bytes.
    pub len: u64,
    /// Whether its memory file is passed as a descriptor.
    pub fd: bool,
}

/// `[u32 head length][head JSON][inline bytes]`.
pub fn frame(head: &impl Serialize, inline: &[u8]) -> Vec<u8> {
    let mut frame = FrameHead::new(head).start_frame(inline.len());
    frame.extend_from_slice(inline);
    frame
}

/// A frame's head, serialized: for a frame whose inline bytes are written into it
/// where they are read (see [`frame`]), so they are copied once, and whose size is
/// known before it is allocated.
pub struct FrameHead(Vec<u8>);

impl FrameHead {
    /// `head` as a frame carries it.
    pub fn new(head: &impl Serialize) -> Self {
        Self(serde_json::to_vec(head).expect("frame heads serialize"))
    }

    /// The size of a frame of this head and `inline_len` inline bytes.
    pub fn frame_len(&self, inline_len: usize) -> usize {
        4 + self.0.len() + inline_len
    }

    /// A frame holding this head, with room for the `inline_len` bytes that follow.
    pub fn start_frame(&self, inline_len: usize) -> Vec<u8> {
        let mut frame = Vec::with_capacity(self.frame_len(inline_len));
        frame.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        frame.extend_from_slice(&self.0);
        frame
    }
}

/// A frame's head and inline bytes.
///
/// # Errors
/// An I/O error of kind `Other` saying what is malformed.
pub fn split_frame<H: DeserializeOwned>(frame: &[u8]) -> std::io::Result<(H, &[u8])> {
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
pub trait InlineLen {
    /// The sum of the lengths of the regions passed inline.
    fn inline_len(&self) -> usize;
}

/// The sum of the lengths of the entries passed inline.
pub fn inline_len(carried: &[Carried]) -> usize {
    carried
        .iter()
        .filter(|entry| !entry.fd)
        .map(|entry| entry.len as usize)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunStatus;

    fn record() -> RunRecord {
        RunRecord {
            run_id: "00000000000000ff".to_owned(),
            workflow: "wordcount".to_owned(),
            started_at_ms: 1,
            duration_ms: 2.0,
            status: RunStatus::Succeeded,
            error: None,
            steps: Vec::new(),
            omitted_steps: 0,
        }
    }

    fn reply(outputs: &[(&str, &[u8])], inline: &[u8]) -> Bytes {
        let head = RunHead {
            record: record(),
            outputs: outputs
                .iter()
                .map(|(schema_type, bytes)| Carried {
                    schema_type: (*schema_type).to_owned(),
                    len: bytes.len() as u64,
                    fd: false,
                })
                .collect(),
            error: None,
        };
        Bytes::from(frame(&head, inline))
    }

    #[test]
    fn a_run_reply_gives_each_output_its_own_bytes_in_order() {
        let body = reply(&[("json", b"{}"), ("text", b"words")], b"{}words");
        let (record, outputs) = decode_run(&body).unwrap();
        assert_eq!(record.run_id, "00000000000000ff");
        let outputs = outputs.unwrap();
        assert_eq!(outputs.len(), 2);
        assert_eq!(outputs[0].schema_type, "json");
        assert_eq!(&outputs[0].bytes[..], b"{}");
        assert_eq!(outputs[1].schema_type, "text");
        assert_eq!(&outputs[1].bytes[..], b"words");
    }

    #[test]
    fn a_truncated_run_reply_is_a_bad_reply() {
        let body = reply(&[("text", b"words")], b"wor");
        let failure = decode_run(&body).unwrap_err();
        assert_eq!(failure.kind, FailureKind::BadReply);
        assert_eq!(failure.status, 502);
        assert!(failure.message.contains("truncated"), "{failure}");
    }

    #[test]
    fn a_run_reply_with_a_failure_carries_it() {
        let head = RunHead {
            record: record(),
            outputs: Vec::new(),
            error: Some(EventFailure::new(
                FailureKind::StepFailed,
                500,
                "step `split`",
            )),
        };
        let (_, result) = decode_run(&Bytes::from(frame(&head, &[]))).unwrap();
        assert_eq!(result.unwrap_err().kind, FailureKind::StepFailed);
    }
}
