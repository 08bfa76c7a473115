//! Compiles every schema of the compatibility vectors (`<vectors>/schemas/*.km`) and of
//! `schemas/` into Rust modules, and generates glue that converts between JSON and the
//! generated views, writers and owned types, with dispatch by schema file and type name.
//!
//! The vectors directory is `KARMEM_VECTORS_DIR`, or `<workspace>/../shared/karmem-vectors`.
//! A missing directory does not fail the build: the tests report it loudly instead.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use faas_karmem_compiler::{
    BaseType, Primitive, Schema, Shape, StructDef, field_idents, rust_type_name,
};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=KARMEM_VECTORS_DIR");
    let vectors = match std::env::var_os("KARMEM_VECTORS_DIR") {
        Some(d) => PathBuf::from(d),
        None => manifest.join("../../../shared/karmem-vectors"),
    };
    let vectors = vectors.canonicalize().unwrap_or(vectors);
    let mut files: Vec<(String, String, PathBuf)> = Vec::new(); // (key, module, path)
    let vec_schemas = vectors.join("schemas");
    println!("cargo:rerun-if-changed={}", vec_schemas.display());
    println!("cargo:rerun-if-changed={}", vectors.display());
    collect(&vec_schemas, "schemas", "v", &mut files);
    let local = manifest.join("schemas");
    println!("cargo:rerun-if-changed={}", local.display());
    collect(&local, "local", "l", &mut files);

    let mut glue = String::new();
    let _ = writeln!(
        glue,
        "/// Directory the vectors were looked for in at build time."
    );
    let _ = writeln!(
        glue,
        "pub const VECTORS_DIR: &str = {:?};",
        vectors.display().to_string()
    );
    let _ = writeln!(glue, "/// Whether that directory existed at build time.");
    let _ = writeln!(
        glue,
        "pub const VECTORS_DIR_EXISTS: bool = {};",
        vectors.is_dir()
    );
    let mut schemas = Vec::new();
    for (key, module, path) in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let schema = faas_karmem_compiler::parse_file(path).unwrap_or_else(|e| panic!("{e}"));
        let code = faas_karmem_compiler::generate_rust(&schema);
        let file = out_dir.join(format!("{module}.rs"));
        std::fs::write(&file, code).unwrap();
        let _ = writeln!(glue, "/// Generated from `{key}`.");
        let _ = writeln!(
            glue,
            "pub mod {module} {{\n    include!({:?});\n}}",
            file.display().to_string()
        );
        glue_module(&mut glue, &schema, module);
        schemas.push((key.clone(), module.clone(), path.clone(), schema));
    }
    dispatch(&mut glue, &schemas);
    std::fs::write(out_dir.join("glue.rs"), glue).unwrap();
}

fn collect(
    dir: &Path,
    key_prefix: &str,
    module_prefix: &str,
    out: &mut Vec<(String, String, PathBuf)>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "km"))
        .collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let stem = p.file_stem().unwrap().to_string_lossy();
        let clean: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        out.push((
            format!("{key_prefix}/{name}"),
            format!("{module_prefix}_{clean}"),
            p,
        ));
    }
}

/// How a scalar converts between JSON and Rust in the glue.
fn prim(p: Primitive) -> (&'static str, String, String) {
    // (rust type, from-json expr template with {x}, to-json expr template with {x})
    let (t, from, to) = match p {
        Primitive::Bool => (
            "bool",
            "crate::j::boolean({x})",
            "::serde_json::Value::Bool({x})",
        ),
        Primitive::F32 => (
            "f32",
            "crate::j::float({x}) as f32",
            "crate::j::f32_json({x})",
        ),
        Primitive::F64 => ("f64", "crate::j::float({x})", "crate::j::f64_json({x})"),
        Primitive::Byte | Primitive::Char | Primitive::U8 => (
            "u8",
            "crate::j::int::<u8>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::U16 => (
            "u16",
            "crate::j::int::<u16>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::U32 => (
            "u32",
            "crate::j::int::<u32>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::U64 => (
            "u64",
            "crate::j::int::<u64>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::I8 => (
            "i8",
            "crate::j::int::<i8>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::I16 => (
            "i16",
            "crate::j::int::<i16>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::I32 => (
            "i32",
            "crate::j::int::<i32>({x})",
            "::serde_json::Value::from({x})",
        ),
        Primitive::I64 => (
            "i64",
            "crate::j::int::<i64>({x})",
            "::serde_json::Value::from({x})",
        ),
    };
    (t, from.to_string(), to.to_string())
}

fn sub(template: &str, x: &str) -> String {
    template.replace("{x}", x)
}

enum K {
    Prim(Primitive),
    Enum(String, Primitive),
    Str,
    CharArray,
    PrimSlice(Primitive),
    PrimArray(Primitive),
    Inline(String),
    InlineArray(String, u32),
    InlineSlice(String),
    Table(String),
}

fn kind(schema: &Schema, f: &faas_karmem_compiler::FieldDef) -> K {
    match (&f.ty.base, f.ty.shape) {
        (BaseType::Primitive(Primitive::Char), Shape::Array(_)) => K::CharArray,
        (BaseType::Primitive(Primitive::Char), Shape::Slice | Shape::LimitedSlice(_)) => K::Str,
        (BaseType::Primitive(p), Shape::Single) => K::Prim(*p),
        (BaseType::Primitive(p), Shape::Array(_)) => K::PrimArray(*p),
        (BaseType::Primitive(p), _) => K::PrimSlice(*p),
        (BaseType::Enum(e), _) => K::Enum(rust_type_name(e), schema.find_enum(e).unwrap().repr),
        (BaseType::Inline(i), Shape::Single) => K::Inline(rust_type_name(i)),
        (BaseType::Inline(i), Shape::Array(n)) => K::InlineArray(rust_type_name(i), n),
        (BaseType::Inline(i), _) => K::InlineSlice(rust_type_name(i)),
        (BaseType::Table(t), _) => K::Table(rust_type_name(t)),
    }
}

fn glue_module(out: &mut String, schema: &Schema, module: &str) {
    let m = format!("crate::{module}");
    let _ = writeln!(out, "#[allow(non_snake_case, clippy::all)]");
    let _ = writeln!(out, "pub mod glue_{module} {{");
    let _ = writeln!(out, "    use ::serde_json::Value;");
    for s in &schema.structs {
        struct_glue(out, schema, s, &m);
    }
    let _ = writeln!(out, "}}");
}

fn struct_glue(out: &mut String, schema: &Schema, s: &StructDef, m: &str) {
    let rs = rust_type_name(&s.name);
    let idents = field_idents(s);
    let fields: Vec<_> = s
        .fields
        .iter()
        .zip(&idents)
        .map(|(f, id)| (f.name.clone(), id.clone(), kind(schema, f)))
        .collect();

    // View -> JSON.
    let _ = writeln!(
        out,
        "    pub fn view_{rs}(v: &{m}::{rs}View<'_>) -> Value {{"
    );
    let _ = writeln!(out, "        let mut o = ::serde_json::Map::new();");
    for (name, id, k) in &fields {
        let e = match k {
            K::Prim(p) => sub(&prim(*p).2, &format!("v.{id}()")),
            K::Enum(..) => format!("Value::from(v.{id}().0)"),
            K::Str | K::CharArray => format!("crate::j::bytes_json(v.{id}().as_bytes())"),
            K::PrimSlice(p) | K::PrimArray(p) => {
                format!(
                    "Value::Array(v.{id}().iter().map(|x| {}).collect())",
                    sub(&prim(*p).2, "x")
                )
            }
            K::Inline(i) | K::Table(i) => format!("view_{i}(&v.{id}())"),
            K::InlineArray(i, _) | K::InlineSlice(i) => {
                format!("Value::Array(v.{id}().iter().map(|e| view_{i}(&e)).collect())")
            }
        };
        let _ = writeln!(out, "        o.insert({name:?}.to_string(), {e});");
    }
    let _ = writeln!(out, "        Value::Object(o)\n    }}");

    // Owned -> JSON.
    let _ = writeln!(out, "    pub fn owned_to_{rs}(x: &{m}::{rs}) -> Value {{");
    let _ = writeln!(out, "        let mut o = ::serde_json::Map::new();");
    for (name, id, k) in &fields {
        let e = match k {
            K::Prim(p) => sub(&prim(*p).2, &format!("x.{id}")),
            K::Enum(..) => format!("Value::from(x.{id}.0)"),
            K::Str | K::CharArray => format!("Value::String(x.{id}.clone())"),
            K::PrimSlice(p) | K::PrimArray(p) => format!(
                "Value::Array(x.{id}.iter().map(|y| {}).collect())",
                sub(&prim(*p).2, "*y")
            ),
            K::Inline(i) | K::Table(i) => format!("owned_to_{i}(&x.{id})"),
            K::InlineArray(i, _) | K::InlineSlice(i) => {
                format!("Value::Array(x.{id}.iter().map(owned_to_{i}).collect())")
            }
        };
        let _ = writeln!(out, "        o.insert({name:?}.to_string(), {e});");
    }
    let _ = writeln!(out, "        Value::Object(o)\n    }}");

    // JSON -> owned (None when a string is not valid UTF-8: `String` cannot hold it).
    let _ = writeln!(
        out,
        "    pub fn owned_from_{rs}(v: &Value) -> Option<{m}::{rs}> {{"
    );
    let _ = writeln!(out, "        Some({m}::{rs} {{");
    for (name, id, k) in &fields {
        let g = format!("crate::j::get(v, {name:?})");
        let e = match k {
            K::Prim(p) => sub(&prim(*p).1, &g),
            K::Enum(e, r) => format!("{m}::{e}(crate::j::int::<{}>({g}))", prim(*r).0),
            K::Str | K::CharArray => format!("String::from_utf8(crate::j::bytes({g})).ok()?"),
            K::PrimSlice(p) => format!(
                "crate::j::arr({g}).iter().map(|x| {}).collect()",
                sub(&prim(*p).1, "x")
            ),
            K::PrimArray(p) => format!(
                "{{ let a = crate::j::arr({g}); std::array::from_fn(|i| a.get(i).map(|x| {}).unwrap_or_default()) }}",
                sub(&prim(*p).1, "x")
            ),
            K::Inline(i) | K::Table(i) => format!("owned_from_{i}({g})?"),
            K::InlineArray(i, n) => format!(
                "{{ let a = crate::j::arr({g}); let mut out: [{m}::{i}; {n}] = std::array::from_fn(|_| Default::default()); for (k, x) in a.iter().enumerate().take({n}) {{ out[k] = owned_from_{i}(x)?; }} out }}"
            ),
            K::InlineSlice(i) => format!(
                "crate::j::arr({g}).iter().map(owned_from_{i}).collect::<Option<Vec<_>>>()?"
            ),
        };
        let _ = writeln!(out, "            {id}: {e},");
    }
    let _ = writeln!(out, "        }})\n    }}");

    // JSON -> in-place writer (exact bytes, invalid UTF-8 included).
    let _ = writeln!(
        out,
        "    pub fn write_{rs}(w: &mut {m}::{rs}Writer<'_, '_>, v: &Value) -> Result<(), ::faas_karmem::Error> {{"
    );
    for (name, id, k) in &fields {
        let g = format!("crate::j::get(v, {name:?})");
        let line = match k {
            K::Prim(p) => format!("w.set_{id}({});", sub(&prim(*p).1, &g)),
            K::Enum(e, r) => format!(
                "w.set_{id}({m}::{e}(crate::j::int::<{}>({g})));",
                prim(*r).0
            ),
            K::Str => format!("w.set_{id}(crate::j::bytes({g}))?;"),
            K::CharArray => format!("w.set_{id}(crate::j::bytes({g}));"),
            K::PrimSlice(p) => format!(
                "{{ let items: Vec<{}> = crate::j::arr({g}).iter().map(|x| {}).collect(); w.set_{id}(&items)?; }}",
                prim(*p).0,
                sub(&prim(*p).1, "x")
            ),
            K::PrimArray(p) => format!(
                "{{ let items: Vec<{}> = crate::j::arr({g}).iter().map(|x| {}).collect(); w.set_{id}(&items); }}",
                prim(*p).0,
                sub(&prim(*p).1, "x")
            ),
            K::Inline(i) => format!("write_{i}(&mut w.{id}_mut(), {g})?;"),
            K::Table(i) => format!("write_{i}(&mut w.{id}_mut()?, {g})?;"),
            K::InlineArray(i, n) => format!(
                "{{ let a = crate::j::arr({g}); for k in 0..{n} {{ if let Some(mut e) = w.{id}_mut(k) {{ write_{i}(&mut e, a.get(k).unwrap_or(&Value::Null))?; }} }} }}"
            ),
            K::InlineSlice(i) => format!(
                "{{ let a = crate::j::arr({g}); w.set_{id}_with(a.len(), |k, e| write_{i}(e, &a[k]))?; }}"
            ),
        };
        let _ = writeln!(out, "        {line}");
    }
    let _ = writeln!(out, "        Ok(())\n    }}");

    let _ = writeln!(
        out,
        "    pub fn encode_{rs}(v: &Value, buf: &mut [u8]) -> Result<usize, ::faas_karmem::Error> {{"
    );
    let _ = writeln!(out, "        let mut w = ::faas_karmem::Writer::new(buf);");
    let _ = writeln!(
        out,
        "        write_{rs}(&mut {m}::{rs}Writer::new(&mut w)?, v)?;"
    );
    let _ = writeln!(out, "        Ok(w.len())\n    }}");
}

fn dispatch(out: &mut String, schemas: &[(String, String, PathBuf, Schema)]) {
    let _ = writeln!(
        out,
        "/// Every compiled schema: key (`schemas/x.km` or `local/x.km`), path, struct names."
    );
    let _ = writeln!(out, "pub const SCHEMAS: &[crate::SchemaEntry] = &[");
    for (key, _, path, schema) in schemas {
        let types: Vec<String> = schema
            .structs
            .iter()
            .map(|s| format!("{:?}", s.name))
            .collect();
        let _ = writeln!(
            out,
            "    crate::SchemaEntry {{ key: {key:?}, path: {:?}, types: &[{}] }},",
            path.display().to_string(),
            types.join(", ")
        );
    }
    let _ = writeln!(out, "];");
    let arms = |out: &mut String, f: &dyn Fn(&str, &str, &str) -> String| {
        for (key, module, _, schema) in schemas {
            for s in &schema.structs {
                let rs = rust_type_name(&s.name);
                let _ = writeln!(
                    out,
                    "        ({key:?}, {:?}) => Some({}),",
                    s.name,
                    f(module, &rs, key)
                );
            }
        }
        let _ = writeln!(out, "        _ => None,");
    };
    let _ = writeln!(
        out,
        "/// Decodes with the generated view of `ty` and converts to JSON."
    );
    let _ = writeln!(
        out,
        "pub fn decode_view(schema: &str, ty: &str, bytes: &[u8]) -> Option<::serde_json::Value> {{"
    );
    let _ = writeln!(out, "    match (schema, ty) {{");
    arms(out, &|m, rs, _| {
        format!("glue_{m}::view_{rs}(&{m}::{rs}View::root(bytes))")
    });
    let _ = writeln!(out, "    }}\n}}");
    let _ = writeln!(
        out,
        "/// Decodes into the generated owned type of `ty` and converts to JSON."
    );
    let _ = writeln!(
        out,
        "pub fn decode_owned(schema: &str, ty: &str, bytes: &[u8]) -> Option<::serde_json::Value> {{"
    );
    let _ = writeln!(out, "    match (schema, ty) {{");
    arms(out, &|m, rs, _| {
        format!("glue_{m}::owned_to_{rs}(&{m}::{rs}::decode(bytes))")
    });
    let _ = writeln!(out, "    }}\n}}");
    let _ = writeln!(
        out,
        "/// Encodes JSON through the generated in-place writer of `ty` into `buf`."
    );
    let _ = writeln!(
        out,
        "pub fn encode_writer(schema: &str, ty: &str, v: &::serde_json::Value, buf: &mut [u8]) -> Option<Result<usize, ::faas_karmem::Error>> {{"
    );
    let _ = writeln!(out, "    match (schema, ty) {{");
    arms(out, &|m, rs, _| format!("glue_{m}::encode_{rs}(v, buf)"));
    let _ = writeln!(out, "    }}\n}}");
    let _ = writeln!(
        out,
        "/// Encodes JSON through the generated owned type of `ty` (`Some(None)`: not representable)."
    );
    let _ = writeln!(
        out,
        "pub fn encode_owned(schema: &str, ty: &str, v: &::serde_json::Value) -> Option<Option<Vec<u8>>> {{"
    );
    let _ = writeln!(out, "    match (schema, ty) {{");
    arms(out, &|m, rs, _| {
        format!("glue_{m}::owned_from_{rs}(v).map(|o| o.encode().expect(\"encode\"))")
    });
    let _ = writeln!(out, "    }}\n}}");
}
