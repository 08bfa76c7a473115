//! Fan-out branches run by another replica's worker (`spread_branches`), and how
//! their regions travel there and back.
//!
//! The mode follows from placement: a peer on the same host (same host id, and its
//! socket reachable) gets each sealed region's memory file as a descriptor over a
//! Unix socket (SCM_RIGHTS): no byte is copied, and it maps the very pages the
//! producer wrote. A peer on another host gets the bytes in the body of an HTTP/2
//! call: one copy over the network. Either way the branch runs there exactly as it
//! would here, and its output regions come back the same way.

use super::client::RemoteWorker;
use super::wire::{
    Carried, EventFailure, InlineLen, MAX_FDS, carry, frame, inline_len, split_frame, uncarry,
};
use crate::messaging::TriggerMessage;
use crate::region::{Region, RegionError, RegionOwner};
use crate::run::StepRecord;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;

/// Another worker holding a replica of the same workflow.
#[derive(Clone)]
pub(crate) struct Peer {
    /// Its worker id.
    pub id: String,
    /// How to reach it.
    pub link: PeerLink,
    /// The cluster token.
    pub token: Arc<str>,
}

/// How a peer is reached, decided from placement.
#[derive(Clone)]
pub(crate) enum PeerLink {
    /// On this host: its Unix socket, over which memory files pass as descriptors.
    Socket(PathBuf),
    /// On another host: its internal HTTP/2 API.
    Network(Arc<RemoteWorker>),
}

impl PeerLink {
    /// The handoff mode's name, as step records show it.
    pub(crate) fn mode(&self) -> &'static str {
        match self {
            Self::Socket(_) => "fd",
            Self::Network(_) => "network",
        }
    }
}

/// What a peer is asked to run: one branch of a fan-out, in the caller's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BranchCall {
    /// The workflow (the peer uses its own loaded copy, tenant included).
    pub workflow: String,
    /// The caller's run: the regions stay that run's.
    pub run_id: String,
    /// The message that started the run, if any.
    pub message: Option<TriggerMessage>,
    /// The steps of the branch, in order.
    pub segment: Vec<String>,
    /// Which branch, of how many.
    pub branch: u32,
    pub branches: u32,
    /// The cluster token (socket calls; HTTP calls carry it in a header).
    #[serde(default)]
    pub token: String,
}

/// A branch call's head: the call and its inputs' entries.
#[derive(Serialize, Deserialize)]
pub(crate) struct CallHead {
    pub call: BranchCall,
    inputs: Vec<Carried>,
}

#[derive(Serialize, Deserialize)]
struct ReplyHead {
    steps: Vec<StepRecord>,
    outputs: Vec<Carried>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<EventFailure>,
}

/// A branch's step records and outputs, as its worker reported them.
pub(crate) type BranchReply = (Vec<StepRecord>, Result<Vec<Region>, EventFailure>);

/// Runs `call` on `peer` with `inputs`; the outputs belong to `owner`'s run.
///
/// # Errors
/// An `unavailable` [`EventFailure`] when the peer could not be asked (then nothing
/// ran there and the caller runs the branch itself).
pub(crate) async fn run_on_peer(
    peer: &Peer,
    mut call: BranchCall,
    inputs: Vec<Region>,
    owner: RegionOwner,
) -> Result<BranchReply, EventFailure> {
    let unavailable = |err: &dyn std::fmt::Display| {
        EventFailure::unavailable(format!("worker `{}`: {err}", peer.id))
    };
    match &peer.link {
        PeerLink::Socket(path) => {
            call.token = peer.token.to_string();
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let mut stream = UnixStream::connect(&path)?;
                let packed = carry(&inputs, true).map_err(std::io::Error::other)?;
                let head = CallHead {
                    call,
                    inputs: packed.carried,
                };
                send_frame(&stream, &frame(&head, &packed.inline), &packed.fds)?;
                drop(inputs);
                let (reply, inline, fds): (ReplyHead, _, _) = recv_frame(&mut stream)?;
                decode_reply(reply, fds, &inline, &owner)
            })
            .await
            .map_err(|err| unavailable(&err))?
            .map_err(|err| unavailable(&err))
        }
        PeerLink::Network(remote) => {
            let packed = carry(&inputs, false).map_err(|err| unavailable(&err))?;
            let workflow = call.workflow.clone();
            let head = CallHead {
                call,
                inputs: packed.carried,
            };
            let body = remote
                .branch(&workflow, frame(&head, &packed.inline))
                .await?;
            let (reply, inline) =
                split_frame::<ReplyHead>(&body).map_err(|err| unavailable(&err))?;
            decode_reply(reply, Vec::new(), inline, &owner).map_err(|err| unavailable(&err))
        }
    }
}

fn decode_reply(
    reply: ReplyHead,
    fds: Vec<OwnedFd>,
    inline: &[u8],
    owner: &RegionOwner,
) -> std::io::Result<BranchReply> {
    let outputs = match reply.error {
        Some(error) => Err(error),
        None => {
            Ok(uncarry(reply.outputs, fds, inline, Some(owner)).map_err(std::io::Error::other)?)
        }
    };
    Ok((reply.steps, outputs))
}

/// A call's inputs rebuilt from a frame, owned by `owner`'s run.
pub(crate) fn call_inputs(
    head: &mut CallHead,
    fds: Vec<OwnedFd>,
    inline: &[u8],
    owner: &RegionOwner,
) -> Result<Vec<Region>, RegionError> {
    uncarry(std::mem::take(&mut head.inputs), fds, inline, Some(owner))
}

/// A branch's outcome as a reply frame, with the descriptors to pass along with it
/// (memory files as descriptors when `fds`).
pub(crate) fn reply_frame(
    steps: Vec<StepRecord>,
    result: Result<Vec<Region>, EventFailure>,
    fds: bool,
) -> (Vec<u8>, Vec<OwnedFd>) {
    let packed = result.and_then(|regions| {
        let packed = carry(&regions, fds)
            .map_err(|err| EventFailure::from(&crate::run::RunError::Output(err.to_string())))?;
        let owned = packed
            .fds
            .iter()
            .map(|fd| fd.try_clone_to_owned())
            .collect::<std::io::Result<Vec<OwnedFd>>>()
            .map_err(|err| EventFailure::from(&crate::run::RunError::Output(err.to_string())))?;
        Ok((packed.carried, owned, packed.inline))
    });
    let (outputs, error, descriptors, inline) = match packed {
        Ok((carried, owned, inline)) => (carried, None, owned, inline),
        Err(error) => (Vec::new(), Some(error), Vec::new(), Vec::new()),
    };
    let head = ReplyHead {
        steps,
        outputs,
        error,
    };
    (frame(&head, &inline), descriptors)
}

/// Sends `frame` with `fds` attached to its first byte.
pub(crate) fn send_frame(
    mut stream: &UnixStream,
    frame: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other(
            "too many descriptors for one message",
        ));
    }
    let sent = rustix::net::sendmsg(
        stream,
        &[IoSlice::new(frame)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    stream.write_all(&frame[sent..])
}

/// Receives a frame: its head, its inline bytes and the descriptors that came with it.
pub(crate) fn recv_frame<H: DeserializeOwned + InlineLen>(
    stream: &mut UnixStream,
) -> std::io::Result<(H, Vec<u8>, Vec<OwnedFd>)> {
    let mut first = vec![0u8; 64 << 10];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        &*stream,
        &mut [IoSliceMut::new(&mut first)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    first.truncate(received.bytes);
    while first.len() < 4 {
        read_more(stream, &mut first, 4)?;
    }
    let head_len = u32::from_be_bytes(first[..4].try_into().expect("4 bytes")) as usize;
    read_more(stream, &mut first, 4 + head_len)?;
    let head: H = serde_json::from_slice(&first[4..4 + head_len])
        .map_err(|err| std::io::Error::other(format!("malformed frame head: {err}")))?;
    let total = 4 + head_len + head.inline_len();
    read_more(stream, &mut first, total)?;
    let inline = first.split_off(4 + head_len);
    Ok((head, inline, fds))
}

/// Reads until `buffer` holds at least `len` bytes.
fn read_more(stream: &mut UnixStream, buffer: &mut Vec<u8>, len: usize) -> std::io::Result<()> {
    if buffer.len() < len {
        let start = buffer.len();
        buffer.resize(len, 0);
        stream.read_exact(&mut buffer[start..])?;
    }
    Ok(())
}

impl InlineLen for CallHead {
    fn inline_len(&self) -> usize {
        inline_len(&self.inputs)
    }
}

impl InlineLen for ReplyHead {
    fn inline_len(&self) -> usize {
        inline_len(&self.outputs)
    }
}
