//! Karmem interface memories: a step may say which function of a Karmem interface it
//! implements (`interface = "blob.km:transfer.consume"`), and the memories that
//! function's arguments and result live in bound the step's regions.
//!
//! In the Karmem paper's terms the step *exports* the function: it reads its arguments
//! with the memory's `export` access and writes its result with it; the step on the
//! other side of the edge *imports* it and uses the `import` access. So:
//! - a step's input limit comes from the memory of its own function's arguments, else
//!   from the memory of the previous step's declared result (with the `import` access);
//! - a step's output limit comes from the memory of its own function's result, else
//!   from the memory the next step declares for its arguments.
//!
//! The maximum size is the memory's declared pages times 64 KiB; an input is read-only
//! when the consuming side may read but not write it.
//!
//! [`resolve`] is pure: it takes the `.km` texts rather than reading files, so the
//! gateway (and a remote worker) can run it on what was uploaded.
//!
//! A schema is a tenant's upload and up to [`MAX_STEPS`](crate::MAX_STEPS) steps may
//! name one file, so nothing a step's problem or memory holds is a copy of an unbounded
//! piece of it: a file's parse error is shared, names from the schema are cut after
//! [`MAX_QUOTED_CHARS`](faas_karmem_compiler::MAX_QUOTED_CHARS) characters and lists of them after [`MAX_LISTED_NAMES`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

// A name from a schema may be most of a megabyte, and one is repeated for every step
// naming its interface: messages and a [`MemoryLimit`] quote it `shorten`ed.
use faas_karmem_compiler::{
    Access, FunctionDef, Interface, MemoryDef, Schema, SchemaError, shorten,
};
use serde::{Deserialize, Serialize};

use crate::model::Workflow;
use crate::schema_type::{SchemaType, is_identifier, is_schema_file};

/// Bytes in one Karmem (and WebAssembly) page.
pub const PAGE_BYTES: u64 = 64 * 1024;

/// The most declared names a [`MemoryProblem`] lists (then says how many more there
/// are): enough to spot a typo, and a schema may declare tens of thousands.
pub const MAX_LISTED_NAMES: usize = 16;

/// `interface = "blob.km:transfer.consume"` on a step: the function `consume` of the
/// interface `transfer` declared in `blob.km`, which the step implements.
///
/// Displays and serializes as that text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InterfaceRef {
    /// The schema file, a relative path ending in `.km`, exactly as written (relative
    /// to the directory holding the `workflow.toml`).
    pub file: String,
    /// The interface's name in that file.
    pub interface: String,
    /// The function's name in that interface.
    pub function: String,
}

/// Why a string is not a valid [`InterfaceRef`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceRefError {
    /// Not of the form `file.km:interface.function`.
    #[error("interface `{0}`: use `file.km:interface.function`, e.g. `blob.km:transfer.consume`")]
    Malformed(String),
    /// The part before `:` is not a relative path ending in `.km`.
    #[error("interface `{0}`: the schema file must be a relative path ending in `.km`")]
    BadFile(String),
    /// The interface or function name is not an identifier.
    #[error(
        "interface `{text}`: `{name}` is not a name: use letters, digits and `_`, not starting with a digit"
    )]
    BadName {
        /// The rejected reference.
        text: String,
        /// The offending part.
        name: String,
    },
}

impl InterfaceRef {
    /// Parses `file.km:interface.function`.
    pub fn parse(text: &str) -> Result<InterfaceRef, InterfaceRefError> {
        let malformed = || InterfaceRefError::Malformed(text.to_owned());
        let (file, path) = text.split_once(':').ok_or_else(malformed)?;
        let (interface, function) = path.split_once('.').ok_or_else(malformed)?;
        if !is_schema_file(file) {
            return Err(InterfaceRefError::BadFile(text.to_owned()));
        }
        for name in [interface, function] {
            if !is_identifier(name) {
                return Err(InterfaceRefError::BadName {
                    text: text.to_owned(),
                    name: name.to_owned(),
                });
            }
        }
        Ok(InterfaceRef {
            file: file.to_owned(),
            interface: interface.to_owned(),
            function: function.to_owned(),
        })
    }

    /// `file.km:interface.memory`: how messages name one of the interface's memories.
    /// The memory's name comes from the schema, so it is cut (`shorten`); the
    /// rest is as written in the manifest.
    fn memory_name(&self, memory: &str) -> String {
        format!("{}:{}.{}", self.file, self.interface, shorten(memory))
    }
}

impl fmt::Display for InterfaceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}.{}", self.file, self.interface, self.function)
    }
}

impl FromStr for InterfaceRef {
    type Err = InterfaceRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        InterfaceRef::parse(s)
    }
}

impl TryFrom<String> for InterfaceRef {
    type Error = InterfaceRefError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        InterfaceRef::parse(&s)
    }
}

impl From<InterfaceRef> for String {
    fn from(reference: InterfaceRef) -> String {
        reference.to_string()
    }
}

/// What a step may do with the regions on one side (input or output), as a Karmem
/// memory declares it. The default (no declaration) sets no limit and allows writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryLimit {
    /// The declaring memory as `file.km:interface.memory`, for messages; empty when
    /// nothing declares one. A memory name longer than [`MAX_QUOTED_CHARS`](faas_karmem_compiler::MAX_QUOTED_CHARS) characters
    /// is cut, ending in `…`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub memory: String,
    /// The largest region in bytes: the memory's maximum pages times [`PAGE_BYTES`];
    /// `None` when nothing declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Whether the step may only read the regions (inputs only): the platform maps them
    /// read-only, and a write traps the step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

impl MemoryLimit {
    /// Whether this is the default: nothing declared.
    pub fn is_unlimited(&self) -> bool {
        *self == MemoryLimit::default()
    }
}

/// The memories a step's regions live in, resolved from the interfaces of the step and
/// of its neighbours by [`Workflow::parse_with_schemas`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepMemories {
    /// The memory its input regions live in.
    #[serde(default, skip_serializing_if = "MemoryLimit::is_unlimited")]
    pub input: MemoryLimit,
    /// The memory its output regions live in (`read_only` is always false).
    #[serde(default, skip_serializing_if = "MemoryLimit::is_unlimited")]
    pub output: MemoryLimit,
}

impl StepMemories {
    /// Whether neither side declares anything.
    pub fn is_unlimited(&self) -> bool {
        self.input.is_unlimited() && self.output.is_unlimited()
    }
}

/// A step's `interface` that cannot be resolved against the `.km` files. `step` is the
/// step whose `interface` is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step `{step}`: {problem}")]
pub struct MemoryError {
    /// The step whose `interface` field the problem is in.
    pub step: String,
    /// What is wrong.
    pub problem: MemoryProblem,
}

/// What is wrong with a step's `interface`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryProblem {
    /// The `.km` file was not given (it is not beside the manifest, or not uploaded).
    #[error(
        "schema file `{0}` is missing: `.km` files must be beside the manifest (`faas deploy` uploads them)"
    )]
    MissingFile(String),
    /// The `.km` file does not parse; displays as `file.km:LINE:COL: message`. Every
    /// step naming the file shares the one error.
    #[error("{0}")]
    Schema(Arc<SchemaError>),
    /// The file declares no such interface.
    #[error("`{file}` declares no interface `{name}` (declared: {declared})")]
    UnknownInterface {
        /// The schema file.
        file: String,
        /// The interface asked for.
        name: String,
        /// The interfaces it declares, as [`MAX_LISTED_NAMES`] at most, comma-separated,
        /// or `none`.
        declared: String,
    },
    /// The interface has no such function.
    #[error("interface `{interface}` has no function `{name}` (declared: {declared})")]
    UnknownFunction {
        /// The interface.
        interface: String,
        /// The function asked for.
        name: String,
        /// The functions it declares, as [`MAX_LISTED_NAMES`] at most, comma-separated,
        /// or `none`.
        declared: String,
    },
    /// A function names a memory its interface does not declare.
    #[error("function `{function}` names memory `{memory}`, which its interface does not declare")]
    UnknownMemory {
        /// The function.
        function: String,
        /// The undeclared memory.
        memory: String,
    },
    /// The function's arguments live in more than one memory.
    #[error(
        "the arguments of `{function}` live in memories `{first}` and `{second}`, but a step's inputs share one memory"
    )]
    MixedMemories {
        /// The function.
        function: String,
        /// One memory.
        first: String,
        /// Another.
        second: String,
    },
    /// The step's type on one side differs from the function's.
    #[error("the step {verb} `{step_type}`, but `{interface}` {verb} `{declared}`")]
    TypeMismatch {
        /// `takes` (input) or `returns` (output).
        verb: &'static str,
        /// The step's type as written in the manifest.
        step_type: String,
        /// The reference as written in the manifest.
        interface: String,
        /// The function's type, as a manifest type (`file.km:Type`).
        declared: String,
    },
    /// A side's access to a memory does not allow what the workflow does with it.
    #[error("{who} {verb} memory `{memory}`, but `{side}: {access}` does not allow {needs}")]
    Access {
        /// `the step`, or the other step (`step `produce``).
        who: String,
        /// `reads its input from`, `writes its output into`, ...
        verb: &'static str,
        /// The memory.
        memory: String,
        /// `import` or `export`.
        side: &'static str,
        /// The declared access keyword.
        access: &'static str,
        /// `reading` or `writing`.
        needs: &'static str,
    },
}

/// One side of a step's own declaration: the memory and the reference declaring it.
struct Declared<'a> {
    reference: &'a InterfaceRef,
    memory: &'a MemoryDef,
}

impl Declared<'_> {
    fn limit(&self, read_only: bool) -> MemoryLimit {
        MemoryLimit {
            memory: self.reference.memory_name(&self.memory.name),
            max_bytes: Some(u64::from(self.memory.max_pages) * PAGE_BYTES),
            read_only,
        }
    }
}

/// What a step's own `interface` declares for its input and output.
#[derive(Default)]
struct StepDeclaration<'a> {
    input: Option<Declared<'a>>,
    output: Option<Declared<'a>>,
}

/// Fills every step's [`Step::memories`](crate::Step::memories) from the `interface`s
/// of the workflow's steps, with `schemas` mapping each `.km` file name as written in
/// the manifest to its text. Steps without an interface next to none with one keep no
/// limits.
///
/// # Errors
/// Every problem found, in step order; the workflow is then left unchanged.
pub fn resolve(
    workflow: &mut Workflow,
    schemas: &BTreeMap<String, String>,
) -> Result<(), Vec<MemoryError>> {
    let mut errors = Vec::new();
    // Each file is parsed once, however many steps name it; its error is shared by them.
    let mut parsed: BTreeMap<&str, Result<Schema, Arc<SchemaError>>> = BTreeMap::new();
    for step in workflow.steps.values() {
        if let Some(reference) = &step.interface
            && let Some(text) = schemas.get(&reference.file)
        {
            parsed.entry(reference.file.as_str()).or_insert_with(|| {
                faas_karmem_compiler::parse_str(&reference.file, text).map_err(Arc::new)
            });
        }
    }

    let mut declarations: BTreeMap<&str, StepDeclaration<'_>> = BTreeMap::new();
    for (name, step) in &workflow.steps {
        let Some(reference) = &step.interface else {
            continue;
        };
        let fail = |problem| MemoryError {
            step: name.clone(),
            problem,
        };
        let schema = match parsed.get(reference.file.as_str()) {
            None => {
                errors.push(fail(MemoryProblem::MissingFile(reference.file.clone())));
                continue;
            }
            Some(Err(err)) => {
                errors.push(fail(MemoryProblem::Schema(Arc::clone(err))));
                continue;
            }
            Some(Ok(schema)) => schema,
        };
        match declare(schema, reference, &step.input, &step.output) {
            Ok(declaration) => {
                declarations.insert(name, declaration);
            }
            Err(problems) => errors.extend(problems.into_iter().map(fail)),
        }
    }

    let mut memories = BTreeMap::new();
    for name in workflow.steps.keys() {
        let own = declarations.get(name.as_str());
        let before = workflow.edges.iter().find(|edge| edge.to == *name);
        let after = workflow.edges.iter().find(|edge| edge.from == *name);
        let mut resolved = StepMemories::default();

        if let Some(declared) = own.and_then(|own| own.input.as_ref()) {
            resolved.input = declared.limit(!declared.memory.exporter.can_write());
        } else if let Some(edge) = before
            && let Some(declared) = declarations
                .get(edge.from.as_str())
                .and_then(|previous| previous.output.as_ref())
        {
            // The previous step's result, read here with the importer's access.
            let access = declared.memory.importer;
            if access.can_read() {
                resolved.input = declared.limit(!access.can_write());
            } else {
                errors.push(MemoryError {
                    step: edge.from.clone(),
                    problem: access_problem(
                        format!("step `{name}`"),
                        "reads its input from",
                        declared,
                        "import",
                        "reading",
                    ),
                });
            }
        }

        if let Some(declared) = own.and_then(|own| own.output.as_ref()) {
            resolved.output = declared.limit(false);
        } else if let Some(edge) = after
            && let Some(declared) = declarations
                .get(edge.to.as_str())
                .and_then(|next| next.input.as_ref())
        {
            // The next step's argument memory, written here with the importer's access.
            if declared.memory.importer.can_write() {
                resolved.output = declared.limit(false);
            } else {
                errors.push(MemoryError {
                    step: edge.to.clone(),
                    problem: access_problem(
                        format!("step `{name}`"),
                        "writes its output into",
                        declared,
                        "import",
                        "writing",
                    ),
                });
            }
        }
        memories.insert(name.clone(), resolved);
    }

    if !errors.is_empty() {
        // In step order, whichever check found them.
        errors.sort_by(|a, b| a.step.cmp(&b.step));
        return Err(errors);
    }
    for (name, step) in &mut workflow.steps {
        if let Some(resolved) = memories.remove(name) {
            step.memories = resolved;
        }
    }
    Ok(())
}

/// Looks `reference` up in `schema` and checks it against the step's types and the
/// exporter's access: the memories of its arguments and result.
fn declare<'a>(
    schema: &'a Schema,
    reference: &'a InterfaceRef,
    input: &SchemaType,
    output: &SchemaType,
) -> Result<StepDeclaration<'a>, Vec<MemoryProblem>> {
    let interface = schema.find_interface(&reference.interface).ok_or_else(|| {
        vec![MemoryProblem::UnknownInterface {
            file: reference.file.clone(),
            name: reference.interface.clone(),
            declared: names(schema.interfaces.iter().map(|i| i.name.as_str())),
        }]
    })?;
    let function = interface
        .functions
        .iter()
        .find(|function| function.name == reference.function)
        .ok_or_else(|| {
            vec![MemoryProblem::UnknownFunction {
                interface: interface.name.clone(),
                name: reference.function.clone(),
                declared: names(interface.functions.iter().map(|f| f.name.as_str())),
            }]
        })?;

    let mut problems = Vec::new();
    let mut declaration = StepDeclaration::default();
    match argument_memory(interface, function) {
        Ok(Some(memory)) => {
            let declared = Declared { reference, memory };
            if !memory.exporter.can_read() {
                problems.push(access_problem(
                    "the step".into(),
                    "reads its input from",
                    &declared,
                    "export",
                    "reading",
                ));
            }
            declaration.input = Some(declared);
        }
        Ok(None) => {}
        Err(problem) => problems.push(problem),
    }
    if let Some(result) = &function.result {
        match interface.memory(&result.memory) {
            Some(memory) => {
                let declared = Declared { reference, memory };
                if !memory.exporter.can_write() {
                    problems.push(access_problem(
                        "the step".into(),
                        "writes its output into",
                        &declared,
                        "export",
                        "writing",
                    ));
                }
                declaration.output = Some(declared);
            }
            None => problems.push(MemoryProblem::UnknownMemory {
                function: function.name.clone(),
                memory: shorten(&result.memory).into_owned(),
            }),
        }
    }

    let types = function.args.iter().map(|arg| ("takes", input, arg)).chain(
        function
            .result
            .iter()
            .map(|result| ("returns", output, result)),
    );
    for (verb, step_type, arg) in types {
        let declared = SchemaType::Karmem {
            file: reference.file.clone(),
            name: arg.type_name.clone(),
        };
        if *step_type != declared {
            problems.push(MemoryProblem::TypeMismatch {
                verb,
                step_type: step_type.to_string(),
                interface: reference.to_string(),
                // The type's name comes from the schema.
                declared: format!("{}:{}", reference.file, shorten(&arg.type_name)),
            });
            // One message per side is enough.
            if verb == "takes" {
                break;
            }
        }
    }

    if problems.is_empty() {
        Ok(declaration)
    } else {
        Err(problems)
    }
}

/// The one memory `function`'s arguments live in; `None` without arguments.
fn argument_memory<'a>(
    interface: &'a Interface,
    function: &FunctionDef,
) -> Result<Option<&'a MemoryDef>, MemoryProblem> {
    let Some(first) = function.args.first() else {
        return Ok(None);
    };
    if let Some(other) = function.args.iter().find(|arg| arg.memory != first.memory) {
        return Err(MemoryProblem::MixedMemories {
            function: function.name.clone(),
            first: shorten(&first.memory).into_owned(),
            second: shorten(&other.memory).into_owned(),
        });
    }
    interface
        .memory(&first.memory)
        .map(Some)
        .ok_or_else(|| MemoryProblem::UnknownMemory {
            function: function.name.clone(),
            memory: shorten(&first.memory).into_owned(),
        })
}

fn access_problem(
    who: String,
    verb: &'static str,
    declared: &Declared<'_>,
    side: &'static str,
    needs: &'static str,
) -> MemoryProblem {
    let access = if side == "import" {
        declared.memory.importer
    } else {
        declared.memory.exporter
    };
    MemoryProblem::Access {
        who,
        verb,
        memory: declared.reference.memory_name(&declared.memory.name),
        side,
        access: keyword(access),
        needs,
    }
}

fn keyword(access: Access) -> &'static str {
    match access {
        Access::None => "none",
        Access::Read => "read",
        Access::Write => "write",
        Access::ReadWrite => "readwrite",
    }
}

/// The first [`MAX_LISTED_NAMES`] of `names`, each cut (see [`shorten`]),
/// comma-separated, then how many more there are; `none` for none.
fn names<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> String {
    let count = names.len();
    if count == 0 {
        return "none".to_owned();
    }
    let listed: Vec<Cow<'_, str>> = names.take(MAX_LISTED_NAMES).map(shorten).collect();
    let mut text = listed.join(", ");
    if count > listed.len() {
        text += &format!(", and {} more", count - listed.len());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_file_interface_and_function() {
        let reference = InterfaceRef::parse("dir/blob.km:transfer.consume").unwrap();
        assert_eq!(reference.file, "dir/blob.km");
        assert_eq!(reference.interface, "transfer");
        assert_eq!(reference.function, "consume");
        assert_eq!(reference.to_string(), "dir/blob.km:transfer.consume");
        let json = serde_json::to_value(&reference).unwrap();
        assert_eq!(json, "dir/blob.km:transfer.consume");
        assert_eq!(
            serde_json::from_value::<InterfaceRef>(json).unwrap(),
            reference
        );
    }

    #[test]
    fn malformed_references_are_refused() {
        for bad in ["blob.km", "blob.km:transfer", "transfer.consume"] {
            assert_eq!(
                InterfaceRef::parse(bad),
                Err(InterfaceRefError::Malformed(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            InterfaceRef::parse("blob.rs:transfer.consume"),
            Err(InterfaceRefError::BadFile(
                "blob.rs:transfer.consume".into()
            ))
        );
        for bad in ["blob.km:9t.consume", "blob.km:t.a.b", "blob.km:.consume"] {
            assert!(
                matches!(
                    InterfaceRef::parse(bad),
                    Err(InterfaceRefError::BadName { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn default_limits_serialize_to_nothing() {
        assert!(StepMemories::default().is_unlimited());
        let limit = MemoryLimit {
            memory: "b.km:t.m".into(),
            max_bytes: Some(PAGE_BYTES),
            read_only: true,
        };
        let json = serde_json::to_value(&limit).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"memory": "b.km:t.m", "max_bytes": 65536, "read_only": true})
        );
        assert_eq!(serde_json::from_value::<MemoryLimit>(json).unwrap(), limit);
        assert_eq!(
            serde_json::from_value::<MemoryLimit>(serde_json::json!({})).unwrap(),
            MemoryLimit::default()
        );
    }
}

/// A schema is a tenant's upload (up to 1 MiB with the manifest's others), resolved by
/// the gateway at deploy under the deploy lock, and up to [`MAX_STEPS`] steps may name
/// one file: whatever a step's problem or memory copies from the schema must be short,
/// or one deploy builds `MAX_STEPS` copies of a megabyte.
#[cfg(test)]
mod schema_text_per_step {
    use super::*;
    use crate::MAX_STEPS;

    /// What all of one deploy's memory problems may add up to, as text.
    const BUDGET: usize = 64 * 1024;

    /// A manifest of a chain of [`MAX_STEPS`] steps `s000 -> s001 -> ...` where step `i`
    /// implements `interface(i)`: the first takes `bytes`, and every step returns, and
    /// every later step takes, `carried`.
    fn chain_text(interface: impl Fn(usize) -> String, carried: &str) -> String {
        let mut text = String::from(
            "name = \"chain\"\ntenant = \"demo\"\n\
             [functions.f]\ncomponent = \"f.wasm\"\nkind = \"step\"\n\
             [[triggers.http]]\nroute = \"/chain\"\nstep = \"s000\"\n",
        );
        for i in 0..MAX_STEPS {
            let input = if i == 0 { "bytes" } else { carried };
            text += &format!(
                "[steps.s{i:03}]\nfunction = \"f\"\ninput = \"{input}\"\noutput = \"{carried}\"\n\
                 interface = \"{}\"\n",
                interface(i)
            );
        }
        for i in 1..MAX_STEPS {
            text += &format!(
                "[[edges]]\nfrom = \"s{:03}\"\nto = \"s{i:03}\"\ntype = \"{carried}\"\n",
                i - 1
            );
        }
        text
    }

    /// [`chain_text`] parsed without schemas, so [`resolve`] is what checks it.
    fn chain(interface: impl Fn(usize) -> String, carried: &str) -> Workflow {
        let text = chain_text(interface, carried);
        Workflow::parse("workflow.toml", &text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn schemas(text: String) -> BTreeMap<String, String> {
        BTreeMap::from([("a.km".to_owned(), text)])
    }

    /// The problems of resolving `workflow` against `schemas`, as the manifest
    /// validation formats them.
    fn messages(workflow: &mut Workflow, schemas: &BTreeMap<String, String>) -> Vec<String> {
        let errors = resolve(workflow, schemas).expect_err("the schema is broken");
        errors.iter().map(ToString::to_string).collect()
    }

    fn total(messages: &[String]) -> usize {
        messages.iter().map(String::len).sum()
    }

    #[test]
    fn a_megabyte_token_in_a_schema_every_step_names_makes_small_messages() {
        let schema = schemas(format!("karmem x;\n{}", "A".repeat(1 << 20)));
        let messages = messages(&mut chain(|_| "a.km:i.f".to_owned(), "bytes"), &schema);
        assert_eq!(messages.len(), MAX_STEPS);
        assert!(total(&messages) < BUDGET, "{} bytes", total(&messages));
        assert!(
            messages[0].starts_with("step `s000`: a.km:2:1: expected "),
            "{}",
            messages[0]
        );
        assert!(messages[0].ends_with(&format!("`{}…`", "A".repeat(64))));

        // What a deploy reports: the first step's, still naming the file, line and field.
        let text = chain_text(|_| "a.km:i.f".to_owned(), "bytes");
        let err = Workflow::parse_with_schemas("workflow.toml", &text, &schema).unwrap_err();
        assert_eq!(err.field(), "steps.s000.interface");
        assert!(err.message().starts_with("a.km:2:1: expected "), "{err}");
        assert!(
            err.to_string().len() < 1024,
            "{} bytes",
            err.to_string().len()
        );
    }

    #[test]
    fn lists_of_declared_names_are_cut_to_their_first_ones() {
        // 30,000 interfaces (the first with 30,000 functions), then one whose name is
        // half a megabyte.
        let mut schema = String::from("karmem x;\ninterface big {\n");
        for i in 0..30_000 {
            schema += &format!("fn f{i}();\n");
        }
        schema += "}\n";
        for i in 0..30_000 {
            schema += &format!("interface i{i} {{}}\n");
        }
        schema += &format!("interface {} {{}}\n", "H".repeat(512 * 1024));
        let schema = schemas(schema);
        // Even steps ask for an interface `a.km` lacks, odd ones for a function `big` lacks.
        let mut workflow = chain(
            |i| {
                if i % 2 == 0 {
                    "a.km:missing.f".to_owned()
                } else {
                    "a.km:big.missing".to_owned()
                }
            },
            "bytes",
        );
        let messages = messages(&mut workflow, &schema);
        assert_eq!(messages.len(), MAX_STEPS);
        assert!(total(&messages) < BUDGET, "{} bytes", total(&messages));
        let first: Vec<String> = (0..15).map(|i| format!("i{i}")).collect();
        assert_eq!(
            messages[0],
            format!(
                "step `s000`: `a.km` declares no interface `missing` (declared: big, {}, and \
                 29986 more)",
                first.join(", ")
            )
        );
        let first: Vec<String> = (0..16).map(|i| format!("f{i}")).collect();
        assert_eq!(
            messages[1],
            format!(
                "step `s001`: interface `big` has no function `missing` (declared: {}, and \
                 29984 more)",
                first.join(", ")
            )
        );
    }

    #[test]
    fn a_schema_with_one_interface_named_by_a_huge_name_lists_it_cut() {
        let huge = "H".repeat(512 * 1024);
        let schema = schemas(format!("karmem x;\ninterface {huge} {{}}\n"));
        let messages = messages(&mut chain(|_| "a.km:i.f".to_owned(), "bytes"), &schema);
        assert!(total(&messages) < BUDGET, "{} bytes", total(&messages));
        assert_eq!(
            messages[0],
            format!(
                "step `s000`: `a.km` declares no interface `i` (declared: {}…)",
                &huge[..64]
            )
        );
    }

    #[test]
    fn a_memory_with_a_huge_name_is_named_cut_in_every_step_it_bounds() {
        let memory = "M".repeat(400 * 1024);
        let schema = schemas(format!(
            "karmem x;\nstruct T table {{ A uint8; }}\n\
             interface i {{\n{memory}: memory (import: read, export: write, 1);\n\
             f: fn() -> T @ {memory};\n}}\n"
        ));
        let mut workflow = chain(|_| "a.km:i.f".to_owned(), "a.km:T");
        resolve(&mut workflow, &schema).unwrap_or_else(|e| panic!("{e:?}"));
        let named: usize = workflow
            .steps
            .values()
            .map(|step| step.memories.input.memory.len() + step.memories.output.memory.len())
            .sum();
        assert!(named < BUDGET, "{named} bytes");
        let expected = format!("a.km:i.{}…", &memory[..64]);
        assert_eq!(workflow.steps["s000"].memories.output.memory, expected);
        assert_eq!(workflow.steps["s001"].memories.input.memory, expected);
        assert!(workflow.steps["s001"].memories.input.read_only);
    }

    #[test]
    fn a_type_with_a_huge_name_is_named_cut_in_every_mismatch() {
        let name = "T".repeat(400 * 1024);
        let schema = schemas(format!(
            "karmem x;\nstruct {name} table {{ A uint8; }}\n\
             interface i {{\nm: memory (import: write, export: read, 1);\n\
             f: fn(a: {name} @ m);\n}}\n"
        ));
        let messages = messages(&mut chain(|_| "a.km:i.f".to_owned(), "bytes"), &schema);
        assert_eq!(messages.len(), MAX_STEPS);
        assert!(total(&messages) < BUDGET, "{} bytes", total(&messages));
        assert_eq!(
            messages[0],
            format!(
                "step `s000`: the step takes `bytes`, but `a.km:i.f` takes `a.km:{}…`",
                &name[..64]
            )
        );
    }
}
