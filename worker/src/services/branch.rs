//! Fan-out branches run by another replica's worker (`spread_branches`), and how
//! their regions travel there and back.
//!
//! The mode follows from placement: a peer on the same host (same host id, and its
//! socket reachable) gets each sealed region's memory file as a descriptor over a
//! Unix socket (SCM_RIGHTS): no byte is copied, and it maps the very pages the
//! producer wrote. A peer on another host gets the bytes in the body of an HTTP/2
//! call: one copy over the network. Either way the branch runs there exactly as it
//! would here, and its output regions come back the same way.

use super::wire::{Received, carry, inline_bytes, uncarry};
use crate::memory_budget::GuestMemoryClaim;
use crate::region::{Region, RegionError, RegionLimitExceeded, RegionOwner};
use crate::run::{BranchCall, BranchPeer, BranchReply, RunError};
use bytes::Bytes;
use faas_invoke::wire::{Carried, InlineLen, MAX_FDS, frame, inline_len, split_frame};
use faas_invoke::{BoxFuture, EventFailure, FailureKind, RemoteWorker, StepRecord};
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
use std::time::{Duration, Instant};

/// Another worker holding a replica of the same workflow.
#[derive(Clone)]
pub(crate) struct Peer {
    /// Its worker id.
    pub id: String,
    /// How to reach it.
    pub link: PeerLink,
    /// The internal token.
    pub token: Arc<str>,
    /// The workflow revision the caller runs, which the peer runs the branch with.
    pub revision: Option<u64>,
    /// What the outputs the peer passes back count against in the caller.
    pub received: Received,
    /// The caller's places for calls over sockets ([`SocketCalls`]).
    pub socket_calls: Arc<SocketCalls>,
}

/// The most branch calls over Unix sockets one worker waits on at once. Each waits on
/// a thread of the guests' runtime's blocking pool (512 threads, which also tear
/// stores down and resolve guests' names), for as long as its run may last: one
/// tenant's wide fan-out could take them all. Past it, the caller runs the branch
/// itself, as when a peer is unavailable.
pub(crate) const MAX_SOCKET_CALLS: u64 = 128;

/// The most of [`MAX_SOCKET_CALLS`] one tenant's branches hold at once: a quarter, so
/// that branches whose runs ended early (a join's timeout) and whose peers still run
/// them cannot hold every place, and leave other tenants' branches all on their
/// callers.
pub(crate) const MAX_SOCKET_CALLS_PER_TENANT: u64 = MAX_SOCKET_CALLS / 4;

/// A worker's places for branch calls over Unix sockets, by tenant.
pub(crate) type SocketCalls = faas_budget::Budget<Arc<str>>;

/// The places of a worker that has none taken.
pub(crate) fn socket_calls() -> Arc<SocketCalls> {
    Arc::new(SocketCalls::new(faas_budget::BudgetLimits {
        total: MAX_SOCKET_CALLS,
        per_holder: MAX_SOCKET_CALLS_PER_TENANT,
    }))
}

/// How a peer is reached, decided from placement.
#[derive(Clone)]
pub(crate) enum PeerLink {
    /// On this host: its Unix socket, over which memory files pass as descriptors.
    Socket(PathBuf),
    /// On another host: its internal HTTP/2 API.
    Network(Arc<RemoteWorker>),
}

impl BranchPeer for Peer {
    fn id(&self) -> &str {
        &self.id
    }

    fn handoff(&self) -> &'static str {
        self.link.mode()
    }

    fn run_branch(
        &self,
        call: BranchCall,
        inputs: Vec<Region>,
        owner: RegionOwner,
    ) -> BoxFuture<'_, Result<BranchReply, EventFailure>> {
        Box::pin(run_on_peer(self, call, inputs, owner))
    }
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

/// The byte a peer sends once it has taken a socket call's token: before it, a call
/// that fails never reached the branch.
pub(crate) const TAKEN: u8 = 1;

/// How long after the caller's run deadline a reply is still read: the peer stops the
/// branch at that deadline and then sends what it has.
const REPLY_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `call` on `peer` with `inputs`; the outputs belong to `owner`'s run.
///
/// # Errors
/// An `unavailable` [`EventFailure`] when the peer could not be asked (then nothing
/// ran there and the caller runs the branch itself); `worker_lost` when the call was
/// sent but no readable reply came back (the branch may have run there).
async fn run_on_peer(
    peer: &Peer,
    mut call: BranchCall,
    inputs: Vec<Region>,
    owner: RegionOwner,
) -> Result<BranchReply, EventFailure> {
    call.revision = peer.revision;
    let unavailable = |err: &dyn std::fmt::Display| {
        EventFailure::unavailable(format!("worker `{}`: {err}", peer.id))
    };
    // Once the call is sent the branch may have run there: running it again here
    // would repeat what it did, so it fails.
    let lost = |err: &dyn std::fmt::Display| {
        EventFailure::new(
            FailureKind::WorkerLost,
            502,
            format!(
                "worker `{}` took the branch and then failed to reply: {err}",
                peer.id
            ),
        )
    };
    // The inputs' bytes copied into the frame count in their tenant's guest memory
    // until the frame is sent: a static fan-out hands every branch the same value,
    // which its claim counts once, and without this each branch spread to a peer
    // copied it again, uncounted. Without room the branch runs here, where it needs no
    // copy.
    let fds = matches!(peer.link, PeerLink::Socket(_));
    let mut copies = peer.received.memory.claim(owner.tenant.clone());
    copies
        .grow_to(inline_bytes(&inputs, fds) as u64)
        .map_err(|over| {
            let (limit, whose) = RegionLimitExceeded::whose(&over);
            unavailable(&format!(
                "no room for a copy of the branch's inputs in the guest memory ({} MiB {whose})",
                limit >> 20
            ))
        })?;
    match &peer.link {
        PeerLink::Socket(path) => {
            let mut place = peer.socket_calls.claim(owner.tenant.clone());
            place.grow_to(1).map_err(|over| {
                let (limit, whose) = RegionLimitExceeded::whose(&over);
                unavailable(&format!(
                    "{limit} branch calls over sockets are waiting already {whose}"
                ))
            })?;
            let path = path.clone();
            let token = peer.token.clone();
            let received = peer.received.clone();
            // The caller's run ends by then, and so does this thread's wait (a blocking
            // read cannot be cancelled with the task that waits for it).
            let deadline = Instant::now().checked_add(call.remaining().saturating_add(REPLY_GRACE));
            tokio::task::spawn_blocking(move || {
                let send = || {
                    let stream = UnixStream::connect(&path)?;
                    // A peer that stops reading would hold this thread in a write past
                    // the run's end, as a silent one would in the read.
                    if let Some(deadline) = deadline {
                        let left = deadline.saturating_duration_since(Instant::now());
                        stream.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
                    }
                    // The credential goes alone, first: the peer reads it before
                    // anything sizable, and the descriptors stay with the frame that
                    // names them.
                    (&stream).write_all(&token_frame(&token)?)?;
                    let mut packed = carry(&inputs, true);
                    let head = CallHead {
                        call,
                        inputs: std::mem::take(&mut packed.carried),
                    };
                    let frame = packed
                        .frame(&head, &mut copies)
                        .map_err(std::io::Error::other)?;
                    send_frame(&stream, &frame, &packed.fds)?;
                    Ok(stream)
                };
                let mut stream = send().map_err(CallError::Sending)?;
                drop((inputs, copies));
                let mut taken = [0u8; 1];
                set_timeout(&stream, deadline)
                    .and_then(|()| stream.read_exact(&mut taken))
                    .and_then(|()| match taken[0] {
                        TAKEN => Ok(()),
                        other => Err(std::io::Error::other(format!(
                            "answered {other}, not taken"
                        ))),
                    })
                    .map_err(CallError::Sending)?;
                let (reply, inline, fds): (ReplyHead, _, _) =
                    recv_frame(&mut stream, deadline).map_err(CallError::Waiting)?;
                drop(place);
                Ok(decode_reply(reply, fds, inline, &owner, &received))
            })
            .await
            .map_err(|err| unavailable(&err))?
            .map_err(|err| match err {
                CallError::Sending(err) => unavailable(&err),
                CallError::Waiting(err) => lost(&err),
            })
        }
        PeerLink::Network(remote) => {
            let mut packed = carry(&inputs, false);
            let (tenant, workflow) = (call.tenant.clone(), call.workflow.clone());
            let head = CallHead {
                call,
                inputs: std::mem::take(&mut packed.carried),
            };
            let body = packed
                .frame(&head, &mut copies)
                .map_err(|err| unavailable(&err))?;
            let body = remote.branch(&tenant, &workflow, body).await?;
            drop(copies);
            let (reply, inline) = split_frame::<ReplyHead>(&body).map_err(|err| lost(&err))?;
            Ok(decode_reply(
                reply,
                Vec::new(),
                body.slice_ref(inline),
                &owner,
                &peer.received,
            ))
        }
    }
}

/// Where a branch call over a socket failed.
enum CallError {
    /// Before the peer took it (its frame sent, the token acknowledged): the peer ran
    /// nothing.
    Sending(std::io::Error),
    /// Waiting for the reply: the branch may have run.
    Waiting(std::io::Error),
}

/// The branch's outcome from a peer's reply. The branch ran there, so outputs this
/// worker cannot take (over its budgets, malformed) fail the branch: running it again
/// here would repeat what it did.
fn decode_reply(
    reply: ReplyHead,
    fds: Vec<OwnedFd>,
    inline: Bytes,
    owner: &RegionOwner,
    received: &Received,
) -> BranchReply {
    let outputs = match reply.error {
        Some(error) => Err(error),
        None => uncarry(reply.outputs, fds, inline, owner, received)
            .map_err(|err| EventFailure::from(&RunError::Output(err.to_string()))),
    };
    (reply.steps, outputs)
}

/// A call's inputs rebuilt from a frame, owned by `owner`'s run.
pub(crate) fn call_inputs(
    head: &mut CallHead,
    fds: Vec<OwnedFd>,
    inline: Bytes,
    owner: &RegionOwner,
    received: &Received,
) -> Result<Vec<Region>, RegionError> {
    uncarry(
        std::mem::take(&mut head.inputs),
        fds,
        inline,
        owner,
        received,
    )
}

/// A branch's outcome as a reply frame, with the descriptors to pass along with it
/// (memory files as descriptors when `fds`).
pub(crate) fn reply_frame(
    steps: Vec<StepRecord>,
    result: Result<Vec<Region>, EventFailure>,
    fds: bool,
    claim: &mut GuestMemoryClaim,
) -> (Vec<u8>, Vec<OwnedFd>) {
    let mut head = ReplyHead {
        steps,
        outputs: Vec::new(),
        error: None,
    };
    let output_failure = |err: &dyn std::fmt::Display| {
        EventFailure::from(&crate::run::RunError::Output(err.to_string()))
    };
    let framed = result.and_then(|regions| {
        let mut packed = carry(&regions, fds);
        let owned = packed
            .fds
            .iter()
            .map(|fd| fd.try_clone_to_owned())
            .collect::<std::io::Result<Vec<OwnedFd>>>()
            .map_err(|err| output_failure(&err))?;
        head.outputs = std::mem::take(&mut packed.carried);
        let frame = packed
            .frame(&head, claim)
            .map_err(|err| output_failure(&err))?;
        Ok((frame, owned))
    });
    framed.unwrap_or_else(|error| (failure_frame(head.steps, error), Vec::new()))
}

/// The reply frame of a branch that failed with `error` after `steps`.
pub(crate) fn failure_frame(steps: Vec<StepRecord>, error: EventFailure) -> Vec<u8> {
    let head = ReplyHead {
        steps,
        outputs: Vec::new(),
        error: Some(error),
    };
    frame(&head, &[])
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

/// Largest token a socket call may present; a longer one is refused unread.
pub use faas_invoke::wire::MAX_INTERNAL_TOKEN_BYTES;
/// Largest JSON head of a frame on the socket (it names regions, not their bytes).
const MAX_HEAD_BYTES: usize = 1 << 20;
/// Most bytes a frame on the socket may carry inline (regions not passed as
/// descriptors).
const MAX_INLINE_BYTES: usize = 1 << 30;

/// `[u16 length][token]`: the first thing on a socket connection.
pub(crate) fn token_frame(token: &str) -> std::io::Result<Vec<u8>> {
    let len = u16::try_from(token.len())
        .ok()
        .filter(|len| usize::from(*len) <= MAX_INTERNAL_TOKEN_BYTES)
        .ok_or_else(|| std::io::Error::other("the internal token is too long"))?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(token.as_bytes());
    Ok(frame)
}

/// Reads a [`token_frame`]; a length above [`MAX_INTERNAL_TOKEN_BYTES`] is refused
/// before anything more is read.
pub(crate) async fn read_token(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let len = usize::from(u16::from_be_bytes(len));
    if len > MAX_INTERNAL_TOKEN_BYTES {
        return Err(std::io::Error::other(format!(
            "a token of {len} bytes (at most {MAX_INTERNAL_TOKEN_BYTES})"
        )));
    }
    let mut token = vec![0u8; len];
    stream.read_exact(&mut token).await?;
    Ok(token)
}

/// Receives a frame: its head, its inline bytes and the descriptors that came with it.
/// Every size is bounded; with a `deadline`, the whole frame must arrive by then.
pub(crate) fn recv_frame<H: DeserializeOwned + InlineLen>(
    stream: &mut UnixStream,
    deadline: Option<Instant>,
) -> std::io::Result<(H, Bytes, Vec<OwnedFd>)> {
    let too_big = |what: &str, len: usize, max: usize| {
        std::io::Error::other(format!("a frame {what} of {len} bytes (at most {max})"))
    };
    let mut first = vec![0u8; 64 << 10];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    set_timeout(stream, deadline)?;
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
    if received.flags.contains(rustix::net::ReturnFlags::CTRUNC) || fds.len() > MAX_FDS {
        return Err(std::io::Error::other(format!(
            "more than {MAX_FDS} descriptors in one frame"
        )));
    }
    first.truncate(received.bytes);
    read_more(stream, &mut first, 4, deadline)?;
    let head_len = u32::from_be_bytes(first[..4].try_into().expect("4 bytes")) as usize;
    if head_len > MAX_HEAD_BYTES {
        return Err(too_big("head", head_len, MAX_HEAD_BYTES));
    }
    read_more(stream, &mut first, 4 + head_len, deadline)?;
    let head: H = serde_json::from_slice(&first[4..4 + head_len])
        .map_err(|err| std::io::Error::other(format!("malformed frame head: {err}")))?;
    let inline_len = head.inline_len();
    if inline_len > MAX_INLINE_BYTES {
        return Err(too_big("body", inline_len, MAX_INLINE_BYTES));
    }
    read_more(stream, &mut first, 4 + head_len + inline_len, deadline)?;
    // Moved down in place rather than copied out: a large value then stays in this
    // buffer (`Region::received`), with nothing else kept alive beside it.
    first.drain(..4 + head_len);
    Ok((head, Bytes::from(first), fds))
}

/// Makes the next blocking read wait no later than `deadline`.
fn set_timeout(stream: &UnixStream, deadline: Option<Instant>) -> std::io::Result<()> {
    let Some(deadline) = deadline else {
        return Ok(());
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))
}

/// Reads until `buffer` holds at least `len` bytes, by `deadline` if given.
fn read_more(
    stream: &mut UnixStream,
    buffer: &mut Vec<u8>,
    len: usize,
    deadline: Option<Instant>,
) -> std::io::Result<()> {
    let mut filled = buffer.len();
    if filled >= len {
        return Ok(());
    }
    buffer.resize(len, 0);
    while filled < len {
        set_timeout(stream, deadline)?;
        match stream.read(&mut buffer[filled..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(read) => filled += read,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn deadline() -> Option<Instant> {
        Some(Instant::now() + Duration::from_secs(5))
    }

    #[test]
    fn a_head_length_above_the_bound_is_refused_before_it_is_read() {
        let (mut peer, mut worker) = UnixStream::pair().unwrap();
        peer.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let err = recv_frame::<CallHead>(&mut worker, deadline())
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("head of 4294967295 bytes"),
            "{err}"
        );
    }

    #[test]
    fn inline_bytes_above_the_bound_are_refused_before_they_are_read() {
        let (mut peer, mut worker) = UnixStream::pair().unwrap();
        let head = serde_json::json!({
            "call": {"workflow": "w", "run_id": "r", "message": null, "segment": [],
                     "branch": 0, "branches": 1},
            "inputs": [{"schema_type": "Blob", "len": 1u64 << 40, "fd": false}],
        });
        peer.write_all(&frame(&head, &[])).unwrap();
        let err = recv_frame::<CallHead>(&mut worker, deadline())
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("body of 1099511627776 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_frame_that_does_not_arrive_by_the_deadline_fails_then() {
        let (mut peer, mut worker) = UnixStream::pair().unwrap();
        // A head of 100 bytes is announced and never sent.
        peer.write_all(&100u32.to_be_bytes()).unwrap();
        let start = Instant::now();
        let deadline = Some(start + Duration::from_millis(200));
        assert!(recv_frame::<CallHead>(&mut worker, deadline).is_err());
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_token_is_read_back_and_an_oversized_one_is_refused_unread() {
        let (mut peer, mut worker) = tokio::io::duplex(1024);
        let sent = token_frame("s3cret").unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut peer, &sent)
            .await
            .unwrap();
        assert_eq!(read_token(&mut worker).await.unwrap(), b"s3cret");
        tokio::io::AsyncWriteExt::write_all(&mut peer, &[0xff, 0xff, 1, 2, 3])
            .await
            .unwrap();
        let err = read_token(&mut worker).await.err().unwrap();
        assert!(err.to_string().contains("65535 bytes"), "{err}");
        assert!(token_frame(&"x".repeat(MAX_INTERNAL_TOKEN_BYTES + 1)).is_err());
    }
}
