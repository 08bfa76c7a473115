//! The compile child's sandbox, in two layers that an unprivileged process applies to
//! itself once it has read the component:
//! - **Landlock** gives up every file, TCP connect and bind, abstract Unix socket and
//!   signal it could reach (no rule is added, so every access the ruleset handles is
//!   denied);
//! - **a seccomp filter** ([`DENIED_CALLS`]) refuses the system calls Landlock does not
//!   cover that reach out of the child: making a socket of any kind (UDP, a Unix
//!   socket to connect to by path: the Redis or container-runtime socket of the
//!   machine, netlink) and io_uring (whose operations no seccomp filter sees); and
//!   those that only widen what of the kernel a crafted component could attack (BPF,
//!   perf events, userfaultfd, new namespaces, the kernel keyring).
//!
//! The child's environment is emptied too ([`crate::compiler`]), so its memory holds no
//! credential.
//!
//! What this bounds, and what not: code a crafted component ran in the child through
//! a bug in Wasmtime's parser or in Cranelift cannot read the worker's data dir, its
//! tokens or `/proc/<worker>/environ`, nor reach Redis or any other service, over TCP,
//! UDP or a Unix socket, from the child. But the artifact the child returns is machine
//! code the worker loads and runs as a guest's, and nothing can check that it is what
//! Cranelift would have made: an exploit that controls the child's output still
//! reaches the worker through it. The filter is a list of calls denied (every other is
//! allowed), not of calls allowed: a list of allowed calls would fail every compile on
//! a C library or kernel that makes one more call than this one, and what reaches out
//! of the child is what the two layers deny together. `clone` with new namespaces is
//! not refused (its flags would have to be matched, and `clone3` passes them in
//! memory no filter reads): `unshare` and `setns` are.
//!
//! On a kernel without Landlock (before 5.13, or not among its security modules) the
//! child compiles without that layer; on one with an older Landlock, with what it knows
//! of (best effort, as the `landlock` crate's [`CompatLevel::BestEffort`] defines). The
//! seccomp filter is applied on x86-64, AArch64 and RISC-V 64 (what `seccompiler`
//! builds filters for), the architectures `faas` is built for; a compile child on
//! another compiles without it.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetError, Scope,
};

/// The newest Landlock ABI the sandbox was written and tested against: its rights
/// are the ones handled (a newer kernel's further rights are not asked for).
const ABI_HANDLED: ABI = ABI::V6;

/// The system calls the compile child's seccomp filter refuses (with `EPERM`).
/// Compiling makes none of them: it reads memory and writes memory, and its threads
/// wait on each other.
pub(crate) const DENIED_CALLS: [i64; 16] = [
    // Sockets Landlock does not cover (UDP, path-named Unix, netlink, raw).
    libc::SYS_socket,
    libc::SYS_socketpair,
    // io_uring's operations (connect, open...) are not system calls a filter sees.
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Reaching into the worker, which runs as the same user: Landlock refuses these
    // where the kernel has it; the filter refuses them where it has not.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    // Attack surface of the kernel only.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_add_key,
    libc::SYS_keyctl,
];

/// Why the sandbox could not be entered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    /// The kernel refused a Landlock ruleset it says it supports.
    #[error("Landlock: {0}")]
    Landlock(#[from] RulesetError),
    /// The seccomp filter could not be built or applied.
    #[error("seccomp: {0}")]
    Seccomp(#[from] seccompiler::Error),
}

/// Denies the calling thread, and the threads and processes it starts from now on,
/// every file access, TCP connect and bind, abstract Unix socket and signal outside
/// itself (Landlock), and the calls of [`DENIED_CALLS`] (seccomp). Also sets
/// `no_new_privs`. Returns what Landlock enforces.
///
/// # Errors
/// [`SandboxError`] if the kernel refused a Landlock ruleset it says it supports, or
/// the seccomp filter.
pub(crate) fn enter() -> Result<RestrictionStatus, SandboxError> {
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_HANDLED))?
        .handle_access(AccessNet::from_all(ABI_HANDLED))?
        .scope(Scope::from_all(ABI_HANDLED))?
        .create()?
        .restrict_self()?;
    if let Some(filter) = denying_filter()? {
        seccompiler::apply_filter(&filter)?;
    }
    Ok(status)
}

/// The seccomp filter refusing [`DENIED_CALLS`], or `None` on an architecture
/// `seccompiler` builds none for. A call made with another architecture's numbers
/// (x86-64's 32-bit `int 0x80`) kills the process; on x86-64, the x32 numbers of the
/// denied calls are refused too, for kernels built with that ABI.
fn denying_filter() -> Result<Option<seccompiler::BpfProgram>, seccompiler::Error> {
    let Ok(arch) = seccompiler::TargetArch::try_from(std::env::consts::ARCH) else {
        return Ok(None);
    };
    let x32 = matches!(arch, seccompiler::TargetArch::x86_64);
    let rules = denied_numbers(x32).map(|call| (call, Vec::new())).collect();
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    Ok(Some(filter.try_into()?))
}

/// The numbers of [`DENIED_CALLS`] and, with `x32`, their x32 twins.
fn denied_numbers(x32: bool) -> impl Iterator<Item = i64> {
    /// What marks a call of the x32 ABI on x86-64 (`__X32_SYSCALL_BIT`).
    const X32_CALL: i64 = 0x4000_0000;
    DENIED_CALLS
        .into_iter()
        .flat_map(move |call| [Some(call), x32.then_some(call | X32_CALL)])
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use landlock::RulesetStatus;
    use std::io::ErrorKind;

    /// What a sandboxed thread could reach: each `Err` is the error its attempt met.
    struct Reached {
        file: std::io::Result<()>,
        tcp: std::io::Result<()>,
        udp: std::io::Result<()>,
        unix_path: std::io::Result<()>,
        io_uring: std::io::Result<()>,
    }

    /// Tries each way out of the child the sandbox closes, from this thread.
    fn reach(file: &str, tcp: std::net::SocketAddr, unix_path: &std::path::Path) -> Reached {
        let io_uring = {
            // SAFETY: io_uring_setup with a zeroed parameter block it writes to; the
            // descriptor it gives, if any, is closed at once.
            let mut params = [0u8; 120];
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4, params.as_mut_ptr()) };
            if fd >= 0 {
                // SAFETY: the descriptor io_uring_setup just gave, owned by nothing else.
                unsafe { libc::close(fd as i32) };
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        Reached {
            file: std::fs::File::open(file).map(|_| ()),
            tcp: std::net::TcpStream::connect(tcp).map(|_| ()),
            udp: std::net::UdpSocket::bind("127.0.0.1:0").map(|_| ()),
            unix_path: std::os::unix::net::UnixStream::connect(unix_path).map(|_| ()),
            io_uring,
        }
    }

    #[test]
    fn a_sandboxed_thread_opens_no_file_and_reaches_no_socket_while_others_still_do() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = listener.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        // A path-named Unix socket, as Redis's or a container runtime's is.
        let unix_path = dir.path().join("service.sock");
        let _unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        // Both layers restrict the calling thread only (neither with TSYNC): the
        // test's own thread stays free, as the worker does when its compile child is
        // sandboxed.
        let sandboxed = {
            let unix_path = unix_path.clone();
            std::thread::spawn(move || {
                let status = enter().unwrap();
                (status, reach(file, tcp, &unix_path))
            })
        };
        let (status, reached) = sandboxed.join().unwrap();
        assert!(status.no_new_privs);
        // This kind of machine (Linux 6.18) has Landlock ABI 7: all of V6 is enforced.
        assert_eq!(
            status.ruleset,
            RulesetStatus::FullyEnforced,
            "the kernel does not enforce Landlock ABI 6 ({status:?})"
        );
        let refused = |what: &str, reached: std::io::Result<()>| {
            let err = reached.expect_err(what);
            assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{what}: {err}");
        };
        refused("a file opened", reached.file);
        refused("a TCP connect", reached.tcp);
        refused("a UDP socket", reached.udp);
        refused("a connect to a Unix socket by path", reached.unix_path);
        refused("an io_uring", reached.io_uring);
        let free = reach(file, tcp, &unix_path);
        free.file.expect("another thread still opens files");
        free.tcp.expect("and connects over TCP");
        free.udp.expect("and binds UDP");
        free.unix_path.expect("and connects to Unix sockets");
        // Where the host turned io_uring off for everyone, the refusal above says
        // nothing of the filter; where it has it, the free thread sets one up.
        if let Err(err) = free.io_uring {
            eprintln!("io_uring is off on this host ({err}): not checked against the filter");
        }
    }

    #[test]
    fn on_x86_64_the_x32_twin_of_each_denied_call_is_denied_too() {
        let plain: Vec<i64> = denied_numbers(false).collect();
        assert_eq!(plain, DENIED_CALLS);
        let with_x32: Vec<i64> = denied_numbers(true).collect();
        for call in DENIED_CALLS {
            assert!(with_x32.contains(&call) && with_x32.contains(&(call | 0x4000_0000)));
        }
        assert!(
            denying_filter().unwrap().is_some(),
            "no filter on this architecture"
        );
    }
}
