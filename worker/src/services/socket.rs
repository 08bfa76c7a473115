//! The worker's Unix socket: branch calls from workers on the same host, with their
//! regions' memory files passed as descriptors (SCM_RIGHTS) instead of bytes.
//!
//! One call per connection. The socket file is readable and writable by its owner
//! only, and every call opens with the internal token: a peer that presents anything
//! else, or is slow to, is dropped before the worker reads a byte of its call. A token
//! taken is acknowledged with one byte ([`super::branch::TAKEN`]), and a call whose
//! frame then cannot be read is answered `unavailable`: so the caller tells a call
//! that never reached the branch (it runs the branch itself) from one that may have
//! run (which fails).

use super::branch::{CallHead, failure_frame, read_token, recv_frame, reply_frame, send_frame};
use super::node::Node;
use faas_invoke::EventFailure;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;
use tokio::net::UnixListener;

/// Binds the socket at `path`, replacing a stale one from an earlier run.
pub(super) fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves branch calls until the task is dropped.
pub(super) async fn serve(listener: UnixListener, node: Arc<Node>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let node = node.clone();
                tokio::spawn(async move {
                    if let Err(err) = handle(stream, &node).await {
                        tracing::warn!("branch call on the worker socket: {err}");
                    }
                });
            }
            Err(err) => {
                tracing::warn!("accepting on the worker socket: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// How long a peer may take to present its token, and then to send its call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

async fn handle(mut stream: tokio::net::UnixStream, node: &Node) -> std::io::Result<()> {
    let token = tokio::time::timeout(CALL_TIMEOUT, read_token(&mut stream))
        .await
        .map_err(|_| std::io::Error::other("no token within the call timeout"))??;
    if !bool::from(token.ct_eq(node.token().as_bytes())) {
        return Err(std::io::Error::other(
            "wrong internal token; connection dropped",
        ));
    }
    tokio::io::AsyncWriteExt::write_all(&mut stream, &[super::branch::TAKEN]).await?;
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(CALL_TIMEOUT))?;
    let deadline = Instant::now() + CALL_TIMEOUT;
    let (head, inline, fds, stream) = tokio::task::spawn_blocking(move || {
        let mut stream = stream;
        match recv_frame::<CallHead>(&mut stream, Some(deadline)) {
            Ok((head, inline, fds)) => Ok((head, inline, fds, stream)),
            Err(err) => {
                // Nothing ran: the caller may run the branch itself (best effort, as
                // the stream may be what failed).
                let refusal = EventFailure::unavailable(format!("the branch call: {err}"));
                let _ = send_frame(&stream, &failure_frame(Vec::new(), refusal), &[]);
                Err(err)
            }
        }
    })
    .await??;
    let mut claim = node.reply_claim(&head.call.tenant);
    let (steps, result) = node.branch(head, fds, inline).await;
    let (frame, descriptors) = reply_frame(steps, result, true, &mut claim);
    tokio::task::spawn_blocking(move || {
        let borrowed: Vec<_> = descriptors.iter().map(AsFd::as_fd).collect();
        let sent = send_frame(&stream, &frame, &borrowed);
        drop((frame, claim));
        sent
    })
    .await?
}
