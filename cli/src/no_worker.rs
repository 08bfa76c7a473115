//! Stands in for `worker.rs` in a `faas` built without the `worker` feature (the
//! gateway and operator images, which carry no Wasmtime): `faas up` and `faas worker`
//! still parse, whatever their flags, and then say that this build cannot run them.

/// Whatever `faas up` or `faas worker` was given: this build runs neither.
#[derive(Debug, clap::Args)]
pub struct NoWorkerArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _ignored: Vec<String>,
}

/// `faas up`'s arguments in a build without the worker.
pub type UpArgs = NoWorkerArgs;
/// `faas worker`'s arguments in a build without the worker.
pub type WorkerCmdArgs = NoWorkerArgs;

/// Nothing to raise: the descriptor limit matters for the worker's region files only.
pub fn raise_descriptor_limit() {}

/// Never a compile child: this build starts none (`faas_worker::compiler`).
pub fn run_if_compile_child() -> Option<std::process::ExitCode> {
    None
}

/// Refuses `faas up`: it runs workers in this process.
pub async fn up(_: UpArgs) -> anyhow::Result<()> {
    Err(without_worker("up"))
}

/// Refuses `faas worker`.
pub async fn worker(_: WorkerCmdArgs) -> anyhow::Result<()> {
    Err(without_worker("worker"))
}

fn without_worker(command: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "`faas {command}` runs WebAssembly, and this faas was built without the worker \
         (cargo feature `worker`, on by default); use the worker image's faas, or build \
         with `cargo build -p faas-cli`"
    )
}
