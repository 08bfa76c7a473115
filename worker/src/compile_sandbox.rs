//! The compile child's sandbox: once it has read the component, the child gives up
//! every file, TCP connect and bind, abstract Unix socket and signal it could reach
//! (Landlock, which an unprivileged process applies to itself; no rule is added, so
//! every access the ruleset handles is denied). The child's environment is emptied
//! too ([`crate::compiler`]), so its memory holds no credential.
//!
//! What this bounds, and what not: code a crafted component ran in the child through
//! a bug in Wasmtime's parser or in Cranelift cannot read the worker's data dir, its
//! tokens or `/proc/<worker>/environ`, nor connect to Redis over TCP, from the child.
//! But the artifact the child returns is machine code the worker loads and runs as a
//! guest's, and nothing can check that it is what Cranelift would have made: an
//! exploit that controls the child's output still reaches the worker through it. Nor
//! does Landlock (ABI 6 here) cover UDP or connecting to a path-named Unix socket.
//!
//! On a kernel without Landlock (before 5.13, or not among its security modules) the
//! child compiles unsandboxed; on one with an older Landlock, with what it knows of
//! (best effort, as the `landlock` crate's [`CompatLevel::BestEffort`] defines).

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetError, Scope,
};

/// The newest Landlock ABI the sandbox was written and tested against: its rights
/// are the ones handled (a newer kernel's further rights are not asked for).
const ABI_HANDLED: ABI = ABI::V6;

/// Denies the calling thread, and the threads and processes it starts from now on,
/// every file access, TCP connect and bind, abstract Unix socket and signal outside
/// itself. Also sets `no_new_privs`.
///
/// # Errors
/// [`RulesetError`] if the kernel refused a ruleset it says it supports.
pub(crate) fn enter() -> Result<RestrictionStatus, RulesetError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_HANDLED))?
        .handle_access(AccessNet::from_all(ABI_HANDLED))?
        .scope(Scope::from_all(ABI_HANDLED))?
        .create()?
        .restrict_self()
}

#[cfg(test)]
mod tests {
    use super::*;
    use landlock::RulesetStatus;
    use std::io::ErrorKind;

    #[test]
    fn a_sandboxed_thread_opens_no_file_and_connects_nowhere_while_others_still_do() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        // Landlock restricts the calling thread only (without TSYNC): the test's own
        // thread stays free, as the worker does when its compile child is sandboxed.
        let sandboxed = std::thread::spawn(move || {
            let status = enter().unwrap();
            let opened = std::fs::File::open(file).map(|_| ());
            let connected = std::net::TcpStream::connect(addr).map(|_| ());
            (status, opened, connected)
        });
        let (status, opened, connected) = sandboxed.join().unwrap();
        assert!(status.no_new_privs);
        // This kind of machine (Linux 6.18) has Landlock ABI 7: all of V6 is enforced.
        assert_eq!(
            status.ruleset,
            RulesetStatus::FullyEnforced,
            "the kernel does not enforce Landlock ABI 6 ({status:?})"
        );
        assert_eq!(opened.unwrap_err().kind(), ErrorKind::PermissionDenied);
        assert_eq!(connected.unwrap_err().kind(), ErrorKind::PermissionDenied);
        std::fs::File::open(file).expect("another thread still opens files");
        std::net::TcpStream::connect(addr).expect("and connects");
    }
}
