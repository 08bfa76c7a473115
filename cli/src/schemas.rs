//! Checks, before uploading, that every Karmem type a workflow names exists in its
//! `.km` file (the files live beside the manifest, so only the CLI can read them).

use anyhow::bail;
use faas_karmem_compiler::Schema;
use faas_workflow::{SchemaType, Workflow};
use std::collections::BTreeMap;
use std::path::Path;

/// Fails with a message naming the manifest, the field and the schema file when a
/// step or edge names a Karmem type its file does not define (or the file does not
/// parse).
pub fn check_karmem_types(manifest: &Path, dir: &Path, workflow: &Workflow) -> anyhow::Result<()> {
    let mut schemas: BTreeMap<String, Schema> = BTreeMap::new();
    for file in workflow.karmem_files() {
        match faas_karmem_compiler::parse_file(&dir.join(&file)) {
            Ok(schema) => {
                schemas.insert(file, schema);
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
        let schema = &schemas[file];
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
