//! The Karmem `.km` files a workflow names: read from beside the manifest (only the CLI
//! can read them), checked before uploading, and uploaded with it so the platform can
//! resolve the steps' interface memories.

use anyhow::{Context, bail};
use faas_karmem_compiler::Schema;
use faas_workflow::{SchemaType, Workflow};
use std::collections::BTreeMap;
use std::path::Path;

/// The text of every `.km` file `workflow` names (in types and `interface`s), by file
/// name as written in the manifest; the files are read relative to `dir`.
///
/// # Errors
/// Naming the manifest and the file when one cannot be read.
pub fn read_schemas(
    manifest: &Path,
    dir: &Path,
    workflow: &Workflow,
) -> anyhow::Result<BTreeMap<String, String>> {
    workflow
        .karmem_files()
        .into_iter()
        .map(|file| {
            let path = dir.join(&file);
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "{}: schema file `{file}`: cannot read {}",
                    manifest.display(),
                    path.display()
                )
            })?;
            Ok((file, text))
        })
        .collect()
}

/// Fails with a message naming the manifest, the field and the schema file when a
/// step or edge names a Karmem type its file does not define (or the file does not
/// parse). `schemas` holds the files' texts, as [`read_schemas`] returns them.
pub fn check_karmem_types(
    manifest: &Path,
    workflow: &Workflow,
    schemas: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    let mut parsed: BTreeMap<&str, Schema> = BTreeMap::new();
    for (file, text) in schemas {
        match faas_karmem_compiler::parse_str(file, text) {
            Ok(schema) => {
                parsed.insert(file, schema);
            }
            Err(err) => bail!("{}: schema file `{file}`: {err}", manifest.display()),
        }
    }
    let mut uses: Vec<(String, &SchemaType)> = Vec::new();
    for (name, step) in &workflow.steps {
        uses.push((format!("steps.{name}.input"), &step.input));
        uses.push((format!("steps.{name}.output"), &step.output));
    }
    for (index, edge) in workflow.edges.iter().enumerate() {
        uses.push((format!("edges[{index}].type"), &edge.schema_type));
    }
    for (field, schema_type) in uses {
        let SchemaType::Karmem { file, name } = schema_type else {
            continue;
        };
        let Some(schema) = parsed.get(file.as_str()) else {
            bail!(
                "{}: {field}: schema file `{file}` was not read",
                manifest.display()
            );
        };
        if schema.find_struct(name).is_none() {
            let defined: Vec<&str> = schema.structs.iter().map(|s| s.name.as_str()).collect();
            bail!(
                "{}: {field}: `{file}` defines no type `{name}` (defined: {})",
                manifest.display(),
                defined.join(", ")
            );
        }
    }
    Ok(())
}
