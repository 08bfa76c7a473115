//! Between a Workflow resource and workflow.toml.
//!
//! [`validate`] turns a resource into the TOML it stands for and runs
//! `faas_workflow`'s own parser over it: there is one validator, and a bad spec is
//! reported at its field (`spec.functions.hello.memory_mb`). [`spec_from_manifest`]
//! goes the other way for `faas deploy` through a gateway in a cluster: the manifest
//! as the user wrote it, with each component replaced by the digest it was uploaded
//! under.

use crate::spec::{ComponentSource, Workflow, WorkflowSpec};
use faas_workflow::{TenantScope, Workflow as Manifest};
use std::collections::BTreeMap;

/// Why a Workflow resource does not make a valid workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The resource has no namespace, so no tenant.
    #[error("a Workflow must live in a namespace: its namespace is its tenant")]
    NoNamespace,
    /// The spec could not be written as TOML (a value TOML cannot hold).
    #[error("spec cannot be read as workflow.toml: {0}")]
    NotToml(String),
    /// The validator refused a field.
    #[error("{field}: {message}")]
    Invalid {
        /// Where, as a path in the resource (`spec.functions.hello.memory_mb`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A component's digest is not 64 lowercase hex characters.
    #[error(
        "spec.functions.{function}.component.sha256: {sha256:?} is not a SHA-256 in lowercase hex"
    )]
    BadDigest {
        /// The function.
        function: String,
        /// The digest as written.
        sha256: String,
    },
}

/// Why a manifest could not be written as a spec.
#[derive(Debug, thiserror::Error)]
pub enum ManifestToSpecError {
    /// The text is not TOML (the gateway validates first, so this means a bug).
    #[error("the manifest is not TOML: {0}")]
    NotToml(#[from] toml::de::Error),
    /// A function has no uploaded component.
    #[error("function {0:?} has no uploaded component")]
    MissingComponent(String),
    /// The manifest has a field the resource cannot hold.
    #[error("the manifest does not fit a Workflow spec: {0}")]
    Shape(String),
}

/// A Workflow resource made valid: the workflow it deploys and its components' sources.
#[derive(Debug, Clone)]
pub struct ValidWorkflow {
    /// The parsed workflow (name from `metadata.name`, tenant from the namespace).
    pub workflow: Manifest,
    /// Where each function's component comes from, by function name.
    pub components: BTreeMap<String, ComponentSource>,
}

/// Validates `resource` with the workflow.toml validator.
///
/// # Errors
/// [`SpecError`] naming the field in the resource.
pub fn validate(resource: &Workflow) -> Result<ValidWorkflow, SpecError> {
    let tenant = resource
        .metadata
        .namespace
        .as_deref()
        .ok_or(SpecError::NoNamespace)?;
    let name = resource.metadata.name.as_deref().unwrap_or_default();
    let spec = &resource.spec;
    for (function, f) in &spec.functions {
        if !is_sha256(&f.component.sha256) {
            return Err(SpecError::BadDigest {
                function: function.clone(),
                sha256: f.component.sha256.clone(),
            });
        }
    }
    let text = manifest_text(name, tenant, spec)?;
    let file = format!("workflows.faas.dev/{tenant}/{name}");
    let workflow = Manifest::parse_scoped(&file, &text, Some(&spec.schemas), TenantScope::Named)
        .map_err(|err| SpecError::Invalid {
            field: resource_field(err.field()),
            message: err.message(),
        })?;
    let components = spec
        .functions
        .iter()
        .map(|(name, f)| (name.clone(), f.component.clone()))
        .collect();
    Ok(ValidWorkflow {
        workflow,
        components,
    })
}

/// The workflow.toml that `spec` stands for, under `name` and `tenant`. A component is
/// written as `sha256:<digest>` (the validator only checks that it is a path).
fn manifest_text(name: &str, tenant: &str, spec: &WorkflowSpec) -> Result<String, SpecError> {
    let not_toml = |err: &dyn std::fmt::Display| SpecError::NotToml(err.to_string());
    let mut table = toml::Table::try_from(spec).map_err(|e| not_toml(&e))?;
    table.remove("schemas");
    if let Some(toml::Value::Table(functions)) = table.get_mut("functions") {
        for (function, value) in functions.iter_mut() {
            if let toml::Value::Table(f) = value {
                let sha = &spec.functions[function].component.sha256;
                f.insert("component".into(), format!("sha256:{sha}").into());
            }
        }
    }
    table.insert("name".into(), name.into());
    table.insert("tenant".into(), tenant.into());
    toml::to_string(&table).map_err(|e| not_toml(&e))
}

/// The resource path of a manifest field: `functions.hello.memory_mb` is
/// `spec.functions.hello.memory_mb`; the name and tenant live in the metadata.
fn resource_field(field: &str) -> String {
    match field {
        "" => "spec".into(),
        "name" => "metadata.name".into(),
        "tenant" => "metadata.namespace".into(),
        _ => format!("spec.{field}"),
    }
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The spec of the workflow `manifest` describes (a validated workflow.toml text),
/// with each function's component named by `digests` (function name to SHA-256 of the
/// uploaded bytes) and the Karmem `schemas` it uses.
///
/// # Errors
/// [`ManifestToSpecError`] when a function has no digest or the manifest does not fit.
pub fn spec_from_manifest(
    manifest: &str,
    digests: &BTreeMap<String, String>,
    schemas: &BTreeMap<String, String>,
) -> Result<WorkflowSpec, ManifestToSpecError> {
    let mut table: toml::Table = toml::from_str(manifest)?;
    table.remove("name");
    table.remove("tenant");
    if let Some(toml::Value::Table(functions)) = table.get_mut("functions") {
        for (function, value) in functions.iter_mut() {
            let sha = digests
                .get(function)
                .ok_or_else(|| ManifestToSpecError::MissingComponent(function.clone()))?;
            if let toml::Value::Table(f) = value {
                f.remove("build");
                let mut source = toml::Table::new();
                source.insert("sha256".into(), sha.clone().into());
                f.insert("component".into(), source.into());
            }
        }
    }
    let mut spec: WorkflowSpec = table
        .try_into()
        .map_err(|err: toml::de::Error| ManifestToSpecError::Shape(err.to_string()))?;
    spec.schemas = schemas.clone();
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn resource(spec: WorkflowSpec) -> Workflow {
        Workflow {
            metadata: ObjectMeta {
                name: Some("hello".into()),
                namespace: Some("acme".into()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    fn hello_manifest() -> &'static str {
        r#"
            name = "hello"
            tenant = "acme"
            [functions.hello]
            build = "cargo build"
            component = "hello.wasm"
            memory_mb = 32
            config = { greeting = "Hi" }
            [workflow]
            replicas = 2
            [[triggers.http]]
            route = "/hello"
            function = "hello"
        "#
    }

    #[test]
    fn a_manifest_becomes_a_spec_that_validates_to_the_same_workflow() {
        let digests = BTreeMap::from([("hello".to_owned(), SHA.to_owned())]);
        let spec = spec_from_manifest(hello_manifest(), &digests, &BTreeMap::new()).unwrap();
        assert_eq!(spec.functions["hello"].component.sha256, SHA);
        assert_eq!(spec.functions["hello"].memory_mb, Some(32));
        let valid = validate(&resource(spec)).unwrap();
        let direct = Manifest::parse("workflow.toml", hello_manifest()).unwrap();
        assert_eq!(valid.workflow.name, "hello");
        assert_eq!(valid.workflow.tenant, "acme");
        assert_eq!(valid.workflow.settings, direct.settings);
        assert_eq!(valid.workflow.http_triggers, direct.http_triggers);
        assert_eq!(
            valid.workflow.functions["hello"].limits,
            direct.functions["hello"].limits
        );
        assert_eq!(valid.components["hello"].sha256, SHA);
    }

    #[test]
    fn a_bad_field_is_reported_at_its_place_in_the_resource() {
        let digests = BTreeMap::from([("hello".to_owned(), SHA.to_owned())]);
        let mut spec = spec_from_manifest(hello_manifest(), &digests, &BTreeMap::new()).unwrap();
        spec.triggers.as_mut().unwrap().http[0].function = Some("nope".into());
        let err = validate(&resource(spec)).unwrap_err();
        let SpecError::Invalid { field, message } = err else {
            panic!("expected a field error, got {err:?}");
        };
        assert_eq!(field, "spec.triggers.http[0].function");
        assert!(message.contains("nope"), "{message}");
    }

    #[test]
    fn a_digest_that_is_not_hex_is_refused() {
        let digests = BTreeMap::from([("hello".to_owned(), "not-a-digest".to_owned())]);
        let spec = spec_from_manifest(hello_manifest(), &digests, &BTreeMap::new()).unwrap();
        assert!(matches!(
            validate(&resource(spec)),
            Err(SpecError::BadDigest { .. })
        ));
    }

    #[test]
    fn a_function_without_an_uploaded_component_is_refused() {
        let err = spec_from_manifest(hello_manifest(), &BTreeMap::new(), &BTreeMap::new());
        assert!(matches!(err, Err(ManifestToSpecError::MissingComponent(f)) if f == "hello"));
    }
}
