//! The worker's Unix socket: branch calls from workers on the same host, with their
//! regions' memory files passed as descriptors (SCM_RIGHTS) instead of bytes.
//!
//! One call per connection. The socket file is readable and writable by its owner
//! only, and every call also carries the cluster token.

use super::branch::{CallHead, recv_frame, reply_frame, send_frame};
use super::node::Node;
use super::wire::EventFailure;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
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

async fn handle(stream: tokio::net::UnixStream, node: &Node) -> std::io::Result<()> {
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    let (head, inline, fds, stream) = tokio::task::spawn_blocking(move || {
        let mut stream = stream;
        let (head, inline, fds) = recv_frame::<CallHead>(&mut stream)?;
        Ok::<_, std::io::Error>((head, inline, fds, stream))
    })
    .await??;
    let authorized: bool = head
        .call
        .token
        .as_bytes()
        .ct_eq(node.token().as_bytes())
        .into();
    let (steps, result) = if authorized {
        node.branch(head, fds, &inline).await
    } else {
        let refused = EventFailure {
            kind: "unauthorized".to_owned(),
            status: 401,
            message: "missing or wrong cluster token".to_owned(),
            function: None,
        };
        (Vec::new(), Err(refused))
    };
    let (frame, descriptors) = reply_frame(steps, result, true);
    tokio::task::spawn_blocking(move || {
        let borrowed: Vec<_> = descriptors.iter().map(AsFd::as_fd).collect();
        send_frame(&stream, &frame, &borrowed)
    })
    .await?
}
