//! `faas deploy`: build, upload, and print the routes.

use crate::build::{build_manifest, manifest_dir};
use crate::client::{Client, ServerArgs};
use crate::manifest_schemas::{check_karmem_types, read_schemas};
use crate::output::{OutputArgs, OutputFormat};
use anyhow::Context;
use faas_gateway::DeployRequest;
use faas_workflow::{TenantScope, Workflow};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How the CLI reads a manifest before the upload: a manifest may leave `tenant` out
/// (a tenant token's deploy); the gateway decides which tenant it is for.
pub(crate) const LOCAL_SCOPE: TenantScope<'static> = TenantScope::Unchecked("token-tenant");

/// Arguments of `faas deploy`.
#[derive(Debug, clap::Args)]
pub struct DeployArgs {
    /// The workflow manifest.
    #[arg(default_value = "workflow.toml")]
    manifest: PathBuf,
    /// Upload the components as they are, without running build commands.
    #[arg(long)]
    no_build: bool,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Runs `faas deploy`.
pub async fn run(args: DeployArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.server)?;
    let request = prepare(&args.manifest, !args.no_build).await?;
    let response = client.deploy(&request).await?;
    match args.output.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&response)?),
        OutputFormat::Text => {
            let workflow = &response.workflow;
            println!(
                "{} {} (tenant {}, revision {})",
                response.status, workflow.name, workflow.tenant, workflow.revision
            );
            for route in &workflow.routes {
                println!("  {}{} -> {}", client.url(), route.route, route.function);
            }
        }
    }
    Ok(())
}

/// Reads (and, if `build`, first builds) everything a deploy of `manifest` uploads.
///
/// # Errors
/// If the manifest is invalid, a build fails, or a schema or component file is missing
/// or wrong.
pub async fn prepare(manifest: &Path, build: bool) -> anyhow::Result<DeployRequest> {
    let workflow = if build {
        build_manifest(manifest).await?
    } else {
        Workflow::from_file_scoped(manifest, LOCAL_SCOPE)?
    };
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let dir = manifest_dir(manifest);
    let schemas = read_schemas(manifest, &dir, &workflow)?;
    check_karmem_types(manifest, &workflow, &schemas)?;
    // Resolving the interfaces' memories here too reports a mistake before the upload,
    // in the words the platform would use.
    Workflow::parse_scoped(
        &manifest.display().to_string(),
        &text,
        Some(&schemas),
        LOCAL_SCOPE,
    )?;
    let mut components = BTreeMap::new();
    for (name, function) in &workflow.functions {
        let path = function.component_path(&dir);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "{}: function `{name}`: cannot read component {}{}",
                manifest.display(),
                path.display(),
                if function.build.is_some() && !build {
                    " (run without --no-build to build it)"
                } else {
                    ""
                }
            )
        })?;
        faas_workflow::check_component_header(&bytes).map_err(|reason| {
            anyhow::anyhow!(
                "{}: function `{name}`: component {} is {reason}",
                manifest.display(),
                path.display()
            )
        })?;
        components.insert(name.clone(), faas_invoke::Component::new(bytes));
    }
    Ok(DeployRequest {
        file_name: manifest.display().to_string(),
        manifest: text,
        components,
        schemas,
    })
}
