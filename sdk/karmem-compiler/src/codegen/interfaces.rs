//! Generation of the static interface descriptions (memories and functions).

use std::fmt::Write as _;

use super::names;
use crate::ast::{Access, ArgDef, Interface, Schema};

fn access(rt: &str, a: Access) -> String {
    let v = match a {
        Access::None => "None",
        Access::Read => "Read",
        Access::Write => "Write",
        Access::ReadWrite => "ReadWrite",
    };
    format!("{rt}::interface::Access::{v}")
}

fn arg(rt: &str, a: &ArgDef) -> String {
    format!(
        "{rt}::interface::ArgSpec {{ name: {:?}, type_name: {:?}, memory: {:?} }}",
        a.name, a.type_name, a.memory
    )
}

fn spec(rt: &str, i: &Interface) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{rt}::interface::InterfaceSpec {{\n        name: {:?},\n        patterns: &[",
        i.name
    );
    for p in &i.patterns {
        let _ = write!(s, "{p:?}, ");
    }
    let _ = write!(s, "],\n        memories: &[");
    for m in &i.memories {
        let _ = write!(s, "\n            {},", names::shouty_case(&m.name));
    }
    let _ = write!(s, "\n        ],\n        functions: &[");
    for f in &i.functions {
        let _ = write!(s, "\n            {},", fn_const(&f.name));
    }
    let _ = write!(s, "\n        ],\n    }}");
    s
}

/// Const name of a function spec (prefixed so it cannot clash with a memory's).
fn fn_const(name: &str) -> String {
    format!("FN_{}", names::shouty_case(name))
}

/// Emits `INTERFACES` and one module per interface with its memories and functions.
pub(super) fn generate(out: &mut String, schema: &Schema, rt: &str) {
    let _ = writeln!(
        out,
        "/// Interfaces declared by the schema: shared memories (capacity and access rights)"
    );
    let _ = writeln!(out, "/// and the functions whose arguments live in them.");
    let _ = write!(
        out,
        "pub const INTERFACES: &[{rt}::interface::InterfaceSpec] = &["
    );
    for i in &schema.interfaces {
        let _ = write!(
            out,
            "\n    {}::SPEC,",
            names::escape(names::snake_case(&i.name), &[])
        );
    }
    let _ = writeln!(out, "\n];\n");
    for i in &schema.interfaces {
        let module = names::escape(names::snake_case(&i.name), &[]);
        let _ = writeln!(
            out,
            "/// Interface `{}`: its memories and functions as constants.",
            i.name
        );
        let _ = writeln!(out, "pub mod {module} {{");
        for m in &i.memories {
            let _ = writeln!(
                out,
                "    /// Memory `{}`: importer {:?}, exporter {:?}, at most {} pages of 64 KiB.",
                m.name, m.importer, m.exporter, m.max_pages
            );
            let _ = writeln!(
                out,
                "    pub const {}: {rt}::interface::MemorySpec = {rt}::interface::MemorySpec {{ name: {:?}, importer: {}, exporter: {}, max_pages: {} }};",
                names::shouty_case(&m.name),
                m.name,
                access(rt, m.importer),
                access(rt, m.exporter),
                m.max_pages
            );
        }
        for f in &i.functions {
            let _ = writeln!(out, "    /// Function `{}`.", f.name);
            let _ = write!(
                out,
                "    pub const {}: {rt}::interface::FunctionSpec = {rt}::interface::FunctionSpec {{\n        name: {:?},\n        args: &[",
                fn_const(&f.name),
                f.name
            );
            for a in &f.args {
                let _ = write!(out, "\n            {},", arg(rt, a));
            }
            let result = match &f.result {
                Some(r) => format!("::core::option::Option::Some({})", arg(rt, r)),
                None => "::core::option::Option::None".to_string(),
            };
            let _ = writeln!(out, "\n        ],\n        result: {result},\n    }};");
        }
        let _ = writeln!(out, "    /// The whole interface.");
        let _ = writeln!(
            out,
            "    pub const SPEC: {rt}::interface::InterfaceSpec = {};",
            spec(rt, i)
        );
        let _ = writeln!(out, "}}\n");
    }
}
