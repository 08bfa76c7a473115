//! Printing lists and statuses as text for people or JSON for scripts.

use faas_gateway::admin::{ListResponse, RunsResponse, WorkersResponse, WorkflowStatus};
use faas_invoke::RunStatus;

/// How to print a result.
#[derive(Debug, Clone, Copy, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned text.
    #[default]
    Text,
    /// Pretty JSON, as the admin API returns it.
    Json,
}

/// The `--output` flag.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Prints the workflow list.
pub fn print_list(list: &ListResponse, format: OutputFormat) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(list)?),
        OutputFormat::Text => {
            println!(
                "{:<24} {:<16} {:>8} {:<8} ROUTES",
                "NAME", "TENANT", "REVISION", "STATE"
            );
            for workflow in &list.workflows {
                let routes: Vec<&str> = workflow.routes.iter().map(|r| r.route.as_str()).collect();
                println!(
                    "{:<24} {:<16} {:>8} {:<8} {}",
                    workflow.name,
                    workflow.tenant,
                    workflow.revision,
                    workflow.state,
                    routes.join(", ")
                );
            }
        }
    }
    Ok(())
}

/// Prints one workflow's status.
pub fn print_status(status: &WorkflowStatus, format: OutputFormat) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(status)?),
        OutputFormat::Text => {
            println!("name:     {}", status.name);
            println!("tenant:   {}", status.tenant);
            println!("state:    {}", status.state);
            println!("revision: {}", status.revision);
            println!("workers:  {}", status.workers.join(", "));
            println!("digest:   {}", status.digest);
            println!("routes:");
            for route in &status.routes {
                println!("  {} -> {}", route.route, route.function);
            }
            println!("functions:");
            for function in &status.functions {
                let fuel = function
                    .fuel
                    .map_or_else(|| "unlimited".to_owned(), |fuel| fuel.to_string());
                println!(
                    "  {} ({}, {} MiB, {} ms, fuel {fuel}) {}",
                    function.name,
                    function.kind.as_str(),
                    function.memory_mb,
                    function.timeout_ms,
                    &function.digest[..12.min(function.digest.len())]
                );
            }
        }
    }
    Ok(())
}

/// Prints a workflow's recent runs with per-step durations.
pub fn print_runs(runs: &RunsResponse, format: OutputFormat) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(runs)?),
        OutputFormat::Text => {
            println!("{:<18} {:<10} {:>10}  STEPS", "RUN", "STATUS", "MS");
            for run in &runs.runs {
                let status = match run.status {
                    RunStatus::Succeeded => "succeeded",
                    RunStatus::Failed => "failed",
                };
                let steps: Vec<String> = run
                    .steps
                    .iter()
                    .map(|step| {
                        let mut text =
                            format!("{}[{}] {:.1}ms", step.step, step.branch, step.duration_ms);
                        if step.attempts > 1 {
                            text.push_str(&format!(" x{}", step.attempts));
                        }
                        if !step.succeeded {
                            text.push_str(" FAILED");
                        }
                        text
                    })
                    .collect();
                println!(
                    "{:<18} {:<10} {:>10.1}  {}",
                    run.run_id,
                    status,
                    run.duration_ms,
                    steps.join(", ")
                );
                if run.omitted_steps > 0 {
                    println!(
                        "{:<18} ({} more step records not kept)",
                        "", run.omitted_steps
                    );
                }
                if let Some(error) = &run.error {
                    println!("{:<18} error: {error}", "");
                }
            }
        }
    }
    Ok(())
}

/// Prints the workers and their workflows.
pub fn print_workers(workers: &WorkersResponse, format: OutputFormat) -> anyhow::Result<()> {
    match format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(workers)?),
        OutputFormat::Text => {
            println!("{:<16} WORKFLOWS", "WORKER");
            for worker in &workers.workers {
                println!("{:<16} {}", worker.id, worker.workflows.join(", "));
            }
        }
    }
    Ok(())
}
