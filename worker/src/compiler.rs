//! Where components are compiled: in a child process of their own, bounded in time and
//! memory, or (for library users and tests) in this process.
//!
//! Compiling is the one thing a worker does with a tenant's bytes before any limit of
//! an instance applies, and Cranelift's time and memory grow with what it is given: a
//! deploy may carry hundreds of MiB of code, one function may be megabytes, and some
//! shapes of code make register allocation superlinear. In the worker's own process a
//! crafted component could take all the memory (the kernel's OOM killer would then end
//! the worker, and every tenant's events with it) or compile for hours, holding the
//! deploy every other tenant's deploys wait behind. So `faas` compiles each component
//! in a child, [`Compiler::Child`]: the same executable started with [`CHILD_COMMAND`],
//! which reads the component on stdin and writes Wasmtime's artifact on stdout (the
//! worker stores it in its cache as before). The child
//! - is killed past [`CompileLimits::time`], or once it holds more than
//!   [`CompileLimits::memory_mb`] resident (its memory is looked at every
//!   [`MEMORY_POLL`]); should the machine run out first, it is the first process the
//!   OOM killer takes (`oom_score_adj` 1000), not the worker;
//! - runs at nice 10, as the worker's own compile threads do (`compile_threads.rs`),
//!   and is killed with the worker (`PR_SET_PDEATHSIG`);
//! - starts with an empty environment and, once it has read the component, reaches no
//!   file, TCP address or signal target (`compile_sandbox.rs`).
//!
//! Resident memory, not an address-space limit (`RLIMIT_AS`, `RLIMIT_DATA`): the
//! allocator and Wasmtime reserve far more address space than they touch (a compile
//! child's mimalloc alone reserves a GiB), so such a limit says little about what a
//! compile takes from the machine.
//!
//! Either limit fails that component's load with a message naming the flag; the worker
//! and every other deploy carry on. The child builds its engine from the settings that
//! shape compiled code ([`Codegen`]), which the worker passes on its command line, so
//! its artifacts load in the worker's engines (Wasmtime checks that too).

use crate::compile_threads;
use crate::engine::Codegen;
use crate::failure::cut_guest_text;
use faas_invoke::LoadError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use wasmtime::Engine;

/// The first argument that makes a `faas` process a compile child
/// ([`run_if_child`]). Not a subcommand users see.
pub const CHILD_COMMAND: &str = "__compile-component";

/// The default [`CompileLimits::time`]: the 18 MiB Python hello compiles in about 6 s on
/// two cores, and a deploy of a few hundred MiB of code in a minute or two.
pub const DEFAULT_COMPILE_TIME: Duration = Duration::from_secs(120);

/// The default [`CompileLimits::memory_mb`]: several times what the largest components
/// measured here need (the 18 MiB Python and 13 MiB JavaScript hellos: 450 MiB).
pub const DEFAULT_COMPILE_MEMORY_MB: u64 = 2048;

/// How much compiled code a component of `wasm_bytes` may make: its code and its
/// initial data, laid out to be mapped, come to two or three times its size (the
/// JavaScript hello's 12 MiB make 34 MiB, the Python hello's 18 MiB make 36 MiB).
/// Initial data is laid out as whole memory images, zeros and all, up to 16 MiB each
/// however little of it a component holds: a component of a few hundred bytes could
/// otherwise make hundreds of MiB of code file, in the worker's memory and in its
/// cache.
pub fn max_artifact_bytes(wasm_bytes: usize) -> u64 {
    (wasm_bytes as u64)
        .saturating_mul(8)
        .saturating_add(32 << 20)
}

/// How many components a worker compiles at once, at most: each may be a compile
/// child of [`CompileLimits::memory_mb`], so the machine's memory bounds this, not its
/// cores. A compile past them waits for a place, its time running.
pub const MAX_COMPILES: usize = 2;

/// How often a compile child's resident memory is looked at: a compiler touches at
/// most a few MiB per millisecond, so it is stopped a few tens of MiB past its limit.
pub const MEMORY_POLL: Duration = Duration::from_millis(10);

/// What compiling may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Wall-clock time for all the components of one workflow's load (each compiles
    /// in the time the ones before it left), after which the child is killed: a deploy
    /// of 128 functions would otherwise hold the deploy lock 128 times as long.
    pub time: Duration,
    /// Memory the child may hold resident, in MiB.
    pub memory_mb: u64,
}

/// When one workflow's compiles must have ended: [`CompileLimits::time`] after its load
/// began, plus every wait of its compiles for a place. Other tenants' compiles holding
/// the places must not use up this workflow's time, for its later components either.
/// Also whether the load was given up ([`AbandonOnDrop`]): its compile child is then
/// killed at once. Clones share one deadline; no limit for compiles in this process.
#[derive(Debug, Clone, Default)]
pub(crate) struct CompileDeadline(Option<Arc<DeadlineState>>);

/// What the clones of one [`CompileDeadline`] share.
#[derive(Debug)]
struct DeadlineState {
    at: Mutex<Instant>,
    abandoned: std::sync::atomic::AtomicBool,
}

impl CompileDeadline {
    /// Moves the deadline `waited` later.
    pub(crate) fn extend(&self, waited: Duration) {
        if let Some(state) = &self.0 {
            let mut at = state.at.lock().unwrap_or_else(|p| p.into_inner());
            *at += waited;
        }
    }

    /// How long compiles have left from now; `limit` when there is no deadline.
    fn left(&self, limit: Duration) -> Duration {
        self.0.as_ref().map_or(limit, |state| {
            let at = *state.at.lock().unwrap_or_else(|p| p.into_inner());
            at.saturating_duration_since(Instant::now())
        })
    }

    /// Whether the load these compiles are for was given up.
    fn abandoned(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|state| state.abandoned.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// A guard that gives up this load's compiles if dropped before
    /// [`AbandonOnDrop::finished`].
    pub(crate) fn abandon_on_drop(&self) -> AbandonOnDrop {
        AbandonOnDrop(Some(self.clone()))
    }
}

/// Gives up the compiles of a load when dropped before [`Self::finished`]: held by the
/// future that waits for a compile, so that once its caller is gone (a deploy's client
/// went, and its request was dropped) the compile child is killed instead of running
/// on to its time limit, holding one of the worker's [`MAX_COMPILES`] places that other
/// tenants' deploys wait for. The compile itself runs on a blocking thread that
/// dropping a future does not stop.
pub(crate) struct AbandonOnDrop(Option<CompileDeadline>);

impl AbandonOnDrop {
    /// The compile was waited for to its end: nothing to give up.
    pub(crate) fn finished(mut self) {
        self.0 = None;
    }
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        if let Some(CompileDeadline(Some(state))) = &self.0 {
            state
                .abandoned
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Default for CompileLimits {
    fn default() -> Self {
        Self {
            time: DEFAULT_COMPILE_TIME,
            memory_mb: DEFAULT_COMPILE_MEMORY_MB,
        }
    }
}

/// Where a worker compiles components ([`crate::WorkerConfig::compiler`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Compiler {
    /// On this process's compile threads, unbounded: for embedders whose components
    /// are trusted, and tests.
    #[default]
    InProcess,
    /// In a child process per component, within `limits`. `program` must run
    /// [`run_if_child`] first thing in `main` (the `faas` executable does).
    Child {
        /// The executable to start, usually this one (`/proc/self/exe`).
        program: PathBuf,
        /// What each compile may take.
        limits: CompileLimits,
    },
}

impl Compiler {
    /// When the compiles of a workflow's load that starts now must have ended (none
    /// for a compile in this process, which has no limits).
    pub(crate) fn deadline(&self) -> CompileDeadline {
        match self {
            Self::InProcess => CompileDeadline::default(),
            Self::Child { limits, .. } => {
                CompileDeadline(Instant::now().checked_add(limits.time).map(|at| {
                    Arc::new(DeadlineState {
                        at: Mutex::new(at),
                        abandoned: false.into(),
                    })
                }))
            }
        }
    }

    /// Compiles `bytes` (the component of `function`) into an artifact `engine` can
    /// load, by `deadline`; `codegen` is what `engine` was built with.
    ///
    /// # Errors
    /// [`LoadError::CompileLimit`] if its compile went past a limit (the child was
    /// killed), [`LoadError::Compile`] if the component is invalid or the child could
    /// not be run.
    pub(crate) fn compile(
        &self,
        engine: &Engine,
        codegen: Codegen,
        function: &str,
        bytes: &[u8],
        deadline: &CompileDeadline,
    ) -> Result<Vec<u8>, LoadError> {
        match self {
            Self::InProcess => compile_threads::run(|| in_process(engine, function, bytes)),
            Self::Child { program, limits } => {
                if deadline.abandoned() {
                    return Err(compile_error(
                        function,
                        Stopped::Abandoned.describe(*limits),
                    ));
                }
                in_child(program, *limits, deadline, codegen, function, bytes)
            }
        }
    }
}

/// Compiles `bytes` (the component of `function`) on the calling thread.
///
/// # Errors
/// [`LoadError::Compile`] with Wasmtime's explanation.
pub(crate) fn in_process(
    engine: &Engine,
    function: &str,
    bytes: &[u8],
) -> Result<Vec<u8>, LoadError> {
    engine
        .precompile_component(bytes)
        .map_err(|err| compile_error(function, format!("{err:#}")))
}

fn compile_error(function: &str, message: String) -> LoadError {
    LoadError::Compile {
        function: function.to_owned(),
        message,
    }
}

/// Compiles in a child of `program` within `limits` and the time its workflow's load
/// has left by `deadline` (unless the load is given up), and returns its artifact.
fn in_child(
    program: &Path,
    limits: CompileLimits,
    deadline: &CompileDeadline,
    codegen: Codegen,
    function: &str,
    bytes: &[u8],
) -> Result<Vec<u8>, LoadError> {
    let mut child = Command::new(program)
        .arg(CHILD_COMMAND)
        .args(child_args(codegen))
        // The worker's environment may hold credentials (`FAAS_TOKEN`, a Redis URL
        // with its password): the child needs none of it.
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            compile_error(
                function,
                format!("could not start the compiler {}: {err}", program.display()),
            )
        })?;
    let (mut stdin, mut stdout, stderr) = (
        child.stdin.take().expect("piped"),
        child.stdout.take().expect("piped"),
        child.stderr.take().expect("piped"),
    );
    let pid = rustix::process::Pid::from_child(&child);
    let (artifact, said, stopped) = std::thread::scope(|scope| {
        // A broken pipe here means the child ended early; its status says why.
        scope.spawn(move || stdin.write_all(bytes));
        let said = scope.spawn(move || read_said(stderr));
        let (finished, finish) = mpsc::channel::<()>();
        // The child is not reaped before this thread ends (`wait` comes after the
        // scope), so `pid` names it, or its zombie, for as long as this may kill it.
        let left = deadline.left(limits.time);
        let watchdog = scope.spawn(move || watch(pid, limits.memory_mb, left, deadline, &finish));
        let most = max_artifact_bytes(bytes.len());
        let mut artifact = Vec::new();
        let read = stdout.by_ref().take(most + 1).read_to_end(&mut artifact);
        let too_large = artifact.len() as u64 > most;
        if too_large {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        drop(finished);
        let stopped = watchdog.join().unwrap_or(None);
        let stopped = stopped.or(too_large.then_some(Stopped::Output { most }));
        (
            read.map(|_| artifact),
            said.join().unwrap_or_default(),
            stopped,
        )
    });
    let status = child
        .wait()
        .map_err(|err| compile_error(function, format!("waiting for the compiler: {err}")))?;
    if let Some(stopped) = stopped {
        return Err(LoadError::CompileLimit {
            function: function.to_owned(),
            message: stopped.describe(limits),
        });
    }
    match artifact {
        Ok(artifact) if status.success() => Ok(artifact),
        Ok(_) => Err(compile_error(function, failed_child(status, &said))),
        Err(err) => Err(compile_error(
            function,
            format!("reading the compiler's output: {err}"),
        )),
    }
}

/// Which limit a compile child was killed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    /// The wall-clock limit, after the child had this much CPU time (all its threads;
    /// `None` if it could not be read) of the `allowed` time its load had left.
    Time {
        cpu: Option<Duration>,
        allowed: Duration,
    },
    Memory,
    /// Its artifact passed [`max_artifact_bytes`], this many bytes.
    Output {
        most: u64,
    },
    /// Its load was given up ([`AbandonOnDrop`]).
    Abandoned,
}

impl Stopped {
    fn describe(self, limits: CompileLimits) -> String {
        match self {
            // The limit is wall-clock time, so that a deploy holds the deploy lock no
            // longer than it; a compile at nice 10 gets little CPU on a worker kept
            // busy by events, and the message then says so rather than blame the
            // component.
            Self::Time { cpu, allowed } => {
                let head = format!(
                    "compiling took longer than the worker allows one deploy's \
                     functions ({} s in all, --compile-timeout-secs)",
                    limits.time.as_secs_f64()
                );
                match cpu {
                    Some(cpu) if cpu < allowed / 2 => format!(
                        "{head}, but the compiler got only {:.1} s of CPU time in it: \
                         the worker is busy serving events; deploy again when it is \
                         quieter, or raise the limit",
                        cpu.as_secs_f64()
                    ),
                    _ => format!("{head}: the component is too large or too complex"),
                }
            }
            Self::Memory => format!(
                "compiling needed more memory than the worker allows ({} MiB, \
                 --compile-memory-mb): the component is too large or too complex",
                limits.memory_mb
            ),
            Self::Output { most } => format!(
                "its compiled code would pass {} MiB, eight times the component's size \
                 and 32 MiB: it declares far more code or initial data (sparse data \
                 segments across large memories) than its size holds",
                most >> 20
            ),
            Self::Abandoned => "the deploy or load it was for was given up (its caller \
                 went) before it compiled"
                .to_owned(),
        }
    }
}

/// Watches the compile child `pid` until `finish` is dropped, killing it once it has
/// run for `allowed`, holds more than `memory_mb` resident, or its load was given up
/// (`deadline`).
fn watch(
    pid: rustix::process::Pid,
    memory_mb: u64,
    allowed: Duration,
    deadline: &CompileDeadline,
    finish: &mpsc::Receiver<()>,
) -> Option<Stopped> {
    let started = std::time::Instant::now();
    let most = memory_mb.saturating_mul(1 << 20);
    loop {
        if finish.recv_timeout(MEMORY_POLL) != Err(mpsc::RecvTimeoutError::Timeout) {
            return None;
        }
        let stopped = if deadline.abandoned() {
            Some(Stopped::Abandoned)
        } else if started.elapsed() >= allowed {
            Some(Stopped::Time {
                cpu: cpu_time(pid),
                allowed,
            })
        } else if resident_bytes(pid).is_some_and(|resident| resident > most) {
            Some(Stopped::Memory)
        } else {
            None
        };
        if stopped.is_some() {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            return stopped;
        }
    }
}

/// What process `pid` holds resident, from `/proc/<pid>/statm`.
fn resident_bytes(pid: rustix::process::Pid) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{}/statm", pid.as_raw_nonzero())).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages.saturating_mul(rustix::param::page_size() as u64))
}

/// The CPU time process `pid` has had, all its threads, from `/proc/<pid>/stat`.
fn cpu_time(pid: rustix::process::Pid) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).ok()?;
    // After the command's parentheses (which may hold spaces), utime and stime are the
    // 12th and 13th fields.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let mut ticks = || fields.next()?.parse::<u64>().ok();
    let (user, system) = (ticks()?, ticks()?);
    let per_second = rustix::param::clock_ticks_per_second();
    Some(Duration::from_secs_f64(
        (user + system) as f64 / per_second as f64,
    ))
}

/// What the child wrote on stderr, cut to what a message may carry (a component's
/// errors can be long); the rest is read and dropped, so the child never blocks on it.
fn read_said(mut stderr: impl Read) -> String {
    let mut said = Vec::new();
    let _ = stderr.by_ref().take(16 << 10).read_to_end(&mut said);
    let _ = std::io::copy(&mut stderr, &mut std::io::sink());
    cut_guest_text(String::from_utf8_lossy(&said).trim().to_owned())
}

/// Why a child that ended without an artifact (and was not killed at a limit) failed:
/// what it said, which is Wasmtime's error for an invalid component.
fn failed_child(status: ExitStatus, said: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(signal) => format!("the compiler was stopped by signal {signal}: {said}"),
        None if said.is_empty() => format!("the compiler failed ({status})"),
        None => said.to_owned(),
    }
}

/// A compile child's command line after [`CHILD_COMMAND`]: the [`Codegen`] settings.
fn child_args(codegen: Codegen) -> [String; 2] {
    [
        format!("--fuel={}", codegen.fuel),
        format!("--memory-init-cow={}", codegen.memory_init_cow),
    ]
}

/// The [`Codegen`] settings [`child_args`] wrote.
fn parse_child_args(args: &[String]) -> Result<Codegen, String> {
    let mut codegen = Codegen {
        fuel: false,
        memory_init_cow: true,
    };
    for arg in args {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("`{arg}` is not --name=value"))?;
        let value: bool = value
            .parse()
            .map_err(|_| format!("`{arg}`: not true or false"))?;
        match name {
            "--fuel" => codegen.fuel = value,
            "--memory-init-cow" => codegen.memory_init_cow = value,
            _ => return Err(format!("unknown setting `{arg}`")),
        }
    }
    Ok(codegen)
}

/// Runs this process as a compile child if it was started as one (its first argument
/// is [`CHILD_COMMAND`]), returning how it ends; `None` otherwise. Call it first thing
/// in `main`, before threads or a runtime exist: the limits it sets are the process's.
pub fn run_if_child() -> Option<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some(CHILD_COMMAND) {
        return None;
    }
    Some(match child(&args[1..]) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    })
}

fn child(args: &[String]) -> Result<(), String> {
    let codegen = parse_child_args(args)?;
    // Ends with the worker that waits for it, and never outlives it compiling.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // Nice is per thread on Linux, and the compiler's threads, made later, inherit it.
    compile_threads::lower_priority();
    // The first the kernel kills if memory runs out anyway: not the worker.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let mut component = Vec::new();
    std::io::stdin()
        .read_to_end(&mut component)
        .map_err(|err| format!("reading the component: {err}"))?;
    // Read while files still open: in the sandbox, the cgroup's CPU quota could not be,
    // and the compile would run one thread per core of the machine.
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    // Before the first byte of the component is parsed; stdout is open already.
    crate::compile_sandbox::enter()
        .map_err(|err| format!("entering the compile sandbox: {err}"))?;
    // Wasmtime's parallel compilation runs on rayon's global pool, whose threads start
    // inside the sandbox.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global();
    let engine = Engine::new(&codegen.config()).map_err(|err| format!("{err:#}"))?;
    let artifact = engine
        .precompile_component(&component)
        .map_err(|err| format!("{err:#}"))?;
    std::io::stdout()
        .lock()
        .write_all(&artifact)
        .map_err(|err| format!("writing the artifact: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compile_stopped_while_it_got_little_cpu_says_the_worker_was_busy() {
        // A child that sleeps through its limit stands for a compile the worker's
        // events kept off the cores: killed at the wall-clock limit, with next to no
        // CPU time.
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = rustix::process::Pid::from_child(&child);
        let limits = CompileLimits {
            time: Duration::from_millis(300),
            ..CompileLimits::default()
        };
        let (_finished, finish) = mpsc::channel::<()>();
        let deadline = CompileDeadline::default();
        let stopped = watch(pid, limits.memory_mb, limits.time, &deadline, &finish);
        let status = child.wait().unwrap();
        assert!(!status.success(), "the child was not killed: {status}");
        let Some(Stopped::Time { cpu: Some(cpu), .. }) = stopped else {
            panic!("stopped: {stopped:?}");
        };
        assert!(cpu < Duration::from_millis(100), "{cpu:?}");
        let message = stopped.unwrap().describe(limits);
        assert!(message.contains("--compile-timeout-secs"), "{message}");
        assert!(message.contains("the worker is busy"), "{message}");
        assert!(!message.contains("too complex"), "{message}");
    }

    #[test]
    fn a_compile_whose_load_was_given_up_is_killed_at_once() {
        let compiler = Compiler::Child {
            program: "sleep".into(),
            limits: CompileLimits::default(),
        };
        let deadline = compiler.deadline();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = rustix::process::Pid::from_child(&child);
        let (_finished, finish) = mpsc::channel::<()>();
        let waiting = deadline.abandon_on_drop();
        let watching = {
            let deadline = deadline.clone();
            std::thread::spawn(move || watch(pid, 1 << 20, Duration::MAX, &deadline, &finish))
        };
        // A guard waited out to its end gives up nothing.
        deadline.abandon_on_drop().finished();
        assert!(!deadline.abandoned());
        // Without the load given up, the watch would wait for the child's 30 s.
        drop(waiting);
        assert_eq!(watching.join().unwrap(), Some(Stopped::Abandoned));
        assert!(!child.wait().unwrap().success(), "the child was not killed");
        // The load's later compiles do not start.
        let engine = Engine::default();
        let codegen = Codegen {
            fuel: false,
            memory_init_cow: true,
        };
        let refused = compiler.compile(&engine, codegen, "f", b"", &deadline);
        let Err(LoadError::Compile { message, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert!(message.contains("given up"), "{message}");
    }

    #[test]
    fn a_compile_stopped_after_using_its_time_says_the_component_is_too_complex() {
        let limits = CompileLimits::default();
        let stopped = Stopped::Time {
            cpu: Some(limits.time),
            allowed: limits.time,
        };
        let message = stopped.describe(limits);
        assert!(message.contains("too large or too complex"), "{message}");
        assert!(!message.contains("busy"), "{message}");
    }

    #[test]
    fn the_cpu_time_of_a_busy_process_is_read() {
        let pid = rustix::process::getpid();
        let before = cpu_time(pid).unwrap();
        let started = std::time::Instant::now();
        let mut read = before;
        let mut spun = 0u64;
        while read == before {
            assert!(started.elapsed() < Duration::from_secs(10), "{read:?}");
            spun = std::hint::black_box(spun.wrapping_add(1));
            read = cpu_time(pid).unwrap();
        }
        // The kernel's own count for the process, read after: `/proc` rounds down to a
        // clock tick, so it never says more.
        let clock = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let clock = Duration::new(clock.tv_sec as u64, clock.tv_nsec as u32);
        assert!(
            read > before && read <= clock,
            "{before:?} -> {read:?}, clock {clock:?}"
        );
    }

    #[test]
    fn a_child_reads_back_the_settings_it_was_given() {
        for fuel in [false, true] {
            for memory_init_cow in [false, true] {
                let codegen = Codegen {
                    fuel,
                    memory_init_cow,
                };
                assert_eq!(parse_child_args(&child_args(codegen)), Ok(codegen));
            }
        }
        assert!(parse_child_args(&["--fuel=maybe".into()]).is_err());
        assert!(parse_child_args(&["--other=true".into()]).is_err());
    }
}
