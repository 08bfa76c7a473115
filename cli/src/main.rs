//! `faas`: run the platform, build, deploy and invoke workflows.

mod allocator;
mod args;
mod build;
mod client;
mod deploy;
mod invoke;
mod logs;
mod manifest_schemas;
mod new;
mod operator;
mod output;
mod schema_tools;
mod services;
mod telemetry;
mod tenants;
/// `faas up`, which runs guest code in this process: only with the `worker` feature.
#[cfg(feature = "worker")]
mod up;
/// `faas up` and `faas worker`; without the default `worker` feature, stand-ins that
/// say this build has no worker (the gateway and operator images' `faas`).
#[cfg_attr(not(feature = "worker"), path = "no_worker.rs")]
mod worker;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// A WebAssembly-native function platform with scale-to-zero.
#[derive(Debug, Parser)]
#[command(name = "faas", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run gateway, scheduler and worker(s) in this process, with the demo workflows.
    Up(worker::UpArgs),
    /// Services mode: run a gateway that shares its state through Redis.
    Gateway(services::GatewayCmdArgs),
    /// Services mode: run the scheduler, which places workflows on registered workers.
    Scheduler(services::SchedulerArgs),
    /// Kubernetes mode: run the operator (Workflow resources to deployments, placement,
    /// workers scaled to zero); `faas operator crd` prints the Workflow CRD.
    Operator(operator::OperatorArgs),
    /// Services mode: run a worker that registers in Redis and runs what is placed on it.
    Worker(worker::WorkerCmdArgs),
    /// Create a function or workflow folder from a template (`faas new --list`).
    New(new::NewArgs),
    /// Build the functions a workflow.toml names (their `build` commands).
    Build {
        /// The workflow manifest.
        #[arg(default_value = "workflow.toml")]
        manifest: PathBuf,
    },
    /// Build if needed, upload a workflow, wait until it is ready and print its routes.
    Deploy(deploy::DeployArgs),
    /// Send an HTTP request to a deployed route (or a workflow's first route).
    Invoke(invoke::InvokeArgs),
    /// List deployed workflows.
    Ls {
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// Show one deployed workflow.
    Status {
        /// The workflow's name.
        name: String,
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// List a workflow's recent runs with their status and per-step durations.
    Runs {
        /// The workflow's name.
        name: String,
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// Show what a workflow's functions printed and logged: time, function or step,
    /// run, level and text.
    Logs(logs::LogsArgs),
    /// List the workers and the workflows placed on each.
    Workers {
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(flatten)]
        output: output::OutputArgs,
    },
    /// Karmem schemas: generate Rust code, decode or encode a message without compiling.
    Schema {
        #[command(subcommand)]
        command: schema_tools::SchemaCommand,
    },
    /// Manage tenants (admin token): create, ls, rm.
    Tenant {
        #[command(subcommand)]
        command: tenants::TenantCommand,
    },
    /// Manage a tenant's API tokens: create, ls, revoke.
    Token {
        #[command(subcommand)]
        command: tenants::TokenCommand,
    },
    /// Remove a deployed workflow.
    Rm {
        /// The workflow's name.
        name: String,
        #[command(flatten)]
        server: client::ServerArgs,
    },
}

fn main() -> std::process::ExitCode {
    // A worker compiles each component in a child of this executable, which does
    // nothing else (`faas_worker::compiler`).
    if let Some(code) = worker::run_if_compile_child() {
        return code;
    }
    // Before the flags are parsed: the default region-file budget is a share of it.
    worker::raise_descriptor_limit();
    let cli = Cli::parse();
    let telemetry = telemetry::init(service_name(&cli.command));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run(cli.command));
    telemetry.shutdown();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The OpenTelemetry `service.name` of a platform process; client commands export nothing.
fn service_name(command: &Command) -> Option<&'static str> {
    match command {
        Command::Up(_) => Some("faas"),
        Command::Gateway(_) => Some("faas-gateway"),
        Command::Scheduler(_) => Some("faas-scheduler"),
        Command::Operator(_) => Some("faas-operator"),
        Command::Worker(_) => Some("faas-worker"),
        _ => None,
    }
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Up(args) => worker::up(args).await,
        Command::Gateway(args) => services::gateway(args).await,
        Command::Scheduler(args) => services::scheduler(args).await,
        Command::Operator(args) => operator::run(args).await,
        Command::Worker(args) => worker::worker(args).await,
        Command::New(args) => new::run(args),
        Command::Build { manifest } => build::build_manifest(&manifest).await.map(|_| ()),
        Command::Deploy(args) => deploy::run(args).await,
        Command::Invoke(args) => invoke::run(args).await,
        Command::Ls { server, output } => {
            let list = client::Client::new(&server)?.list().await?;
            output::print_list(&list, output.output)
        }
        Command::Status {
            name,
            server,
            output,
        } => {
            let status = client::Client::new(&server)?.status(&name).await?;
            output::print_status(&status, output.output)
        }
        Command::Runs {
            name,
            server,
            output,
        } => {
            let runs = client::Client::new(&server)?.runs(&name).await?;
            output::print_runs(&runs, output.output)
        }
        Command::Logs(args) => logs::run(args).await,
        Command::Workers { server, output } => {
            let workers = client::Client::new(&server)?.workers().await?;
            output::print_workers(&workers, output.output)
        }
        Command::Schema { command } => schema_tools::run(command),
        Command::Tenant { command } => tenants::tenant(command).await,
        Command::Token { command } => tenants::token(command).await,
        Command::Rm { name, server } => {
            client::Client::new(&server)?.remove(&name).await?;
            println!("removed {name}");
            Ok(())
        }
    }
}
