//! Name resolution, validation and wire layout (sizes and offsets), following the
//! reference compiler's rules so generated code reads and writes the same bytes.

use std::collections::{HashMap, HashSet};

use crate::ast::*;
use crate::error::{SchemaError, shorten};
use crate::parser::{
    RawArg, RawEnum, RawInterface, RawItem, RawSchema, RawShape, RawStruct, RawTag,
};

struct Resolver<'a> {
    file: &'a str,
    packed: bool,
    enums: Vec<EnumDef>,
    structs: Vec<StructDef>,
    names: HashSet<String>,
    /// `enums` and `structs` by name: a schema is a tenant's upload, parsed by the
    /// gateway at deploy, so every lookup and duplicate check is a hash, never a scan
    /// (a scan per field would make a 1 MiB schema cost billions of comparisons).
    enum_index: HashMap<String, usize>,
    struct_index: HashMap<String, usize>,
}

/// Names seen so far in one scope (fields of a struct, variants of an enum, ...).
#[derive(Default)]
struct Seen(HashSet<String>);

impl Seen {
    /// Whether `name` is new in the scope; it is then seen.
    fn first(&mut self, name: &str) -> bool {
        self.0.insert(name.to_owned())
    }

    fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }
}

fn plain_tags(tags: &[RawTag]) -> Vec<Tag> {
    tags.iter().map(|t| t.tag.clone()).collect()
}

/// `@packed`, `@packed()`, `@packed(true)` mean true; `@packed(false)` false.
fn packed_tag(file: &str, tags: &[RawTag]) -> Result<Option<bool>, SchemaError> {
    let Some(t) = tags.iter().find(|t| t.tag.name == "packed") else {
        return Ok(None);
    };
    match t.tag.value.as_str() {
        "" | "true" => Ok(Some(true)),
        "false" => Ok(Some(false)),
        v => Err(SchemaError::new(
            file,
            t.span,
            format!(
                "invalid value `{}` for @packed, expected true or false",
                shorten(v)
            ),
        )),
    }
}

fn check_type_name(file: &str, name: &str, span: Span, what: &str) -> Result<(), SchemaError> {
    if !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Err(SchemaError::new(
            file,
            span,
            format!(
                "{what} `{}` must start with an uppercase letter",
                shorten(name)
            ),
        ));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(SchemaError::new(
            file,
            span,
            format!(
                "{what} `{}` may only use ASCII letters, digits and `_`",
                shorten(name)
            ),
        ));
    }
    Ok(())
}

/// Resolves and validates a parsed file.
pub(crate) fn resolve(file: &str, raw: RawSchema) -> Result<Schema, SchemaError> {
    let packed = packed_tag(file, &raw.tags)?.unwrap_or(false);
    let mut r = Resolver {
        file,
        packed,
        enums: Vec::new(),
        structs: Vec::new(),
        names: HashSet::new(),
        enum_index: HashMap::new(),
        struct_index: HashMap::new(),
    };
    let mut raw_interfaces = Vec::new();
    for item in raw.items {
        match item {
            RawItem::Enum(e) => {
                let e = r.enum_def(e)?;
                r.enum_index.insert(e.name.clone(), r.enums.len());
                r.enums.push(e);
            }
            RawItem::Struct(s) => {
                let s = r.struct_def(s)?;
                r.struct_index.insert(s.name.clone(), r.structs.len());
                r.structs.push(s);
            }
            RawItem::Interface(i) => raw_interfaces.push(i),
        }
    }
    // Interfaces may refer to structs declared anywhere in the file.
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut interface_names = Seen::default();
    for i in raw_interfaces {
        if !interface_names.first(&i.name) {
            return Err(SchemaError::new(
                file,
                i.span,
                format!("duplicated interface name `{}`", shorten(&i.name)),
            ));
        }
        interfaces.push(r.interface(i)?);
    }
    Ok(Schema {
        file: file.to_string(),
        name: raw.name,
        tags: plain_tags(&raw.tags),
        packed,
        enums: r.enums,
        structs: r.structs,
        interfaces,
    })
}

impl Resolver<'_> {
    fn err<T>(&self, span: Span, msg: impl Into<String>) -> Result<T, SchemaError> {
        Err(SchemaError::new(self.file, span, msg))
    }

    fn claim_name(&mut self, name: &str, span: Span) -> Result<(), SchemaError> {
        if !self.names.insert(name.to_string()) {
            return self.err(span, format!("duplicated type name `{}`", shorten(name)));
        }
        Ok(())
    }

    fn enum_def(&mut self, e: RawEnum) -> Result<EnumDef, SchemaError> {
        check_type_name(self.file, &e.name, e.span, "enum name")?;
        let repr = match Primitive::from_schema_name(&e.repr) {
            Some(p) if p.is_integer() => p,
            _ => {
                return self.err(
                    e.repr_span,
                    format!("invalid enum type `{}`, expected uint8, uint16, uint32, uint64, int8, int16, int32 or int64", shorten(&e.repr)),
                );
            }
        };
        let (min, max) = repr.integer_range().unwrap_or((0, 0));
        let mut variants: Vec<EnumVariant> = Vec::new();
        let mut variant_names = Seen::default();
        for (index, v) in e.variants.into_iter().enumerate() {
            check_type_name(self.file, &v.name, v.span, "enum variant name")?;
            if !variant_names.first(&v.name) {
                return self.err(
                    v.span,
                    format!("duplicated enum variant `{}`", shorten(&v.name)),
                );
            }
            // Implicit values are the variant's position, not previous + 1: that is what
            // the reference compiler does and therefore what is on the wire.
            let (value, explicit, span) = match &v.value {
                Some((text, span)) => match text.parse::<i128>() {
                    Ok(n) => (n, true, *span),
                    Err(_) => {
                        return self.err(*span, format!("invalid enum value `{}`", shorten(text)));
                    }
                },
                None => (index as i128, false, v.span),
            };
            if value < min || value > max {
                return self.err(
                    span,
                    format!(
                        "enum value {value} is out of range for {}",
                        repr.schema_name()
                    ),
                );
            }
            variants.push(EnumVariant {
                name: v.name,
                value,
                explicit,
                span: v.span,
            });
        }
        if !variants.iter().any(|v| v.value == 0) {
            return self.err(
                e.span,
                format!(
                    "enum `{}` must have a variant with value 0 (the default)",
                    shorten(&e.name)
                ),
            );
        }
        self.claim_name(&e.name, e.span)?;
        Ok(EnumDef {
            name: e.name,
            repr,
            variants,
            tags: plain_tags(&e.tags),
            span: e.span,
        })
    }

    fn struct_def(&mut self, s: RawStruct) -> Result<StructDef, SchemaError> {
        check_type_name(self.file, &s.name, s.span, "struct name")?;
        let packed = packed_tag(self.file, &s.tags)?.unwrap_or(self.packed);
        if let Some(t) = s.tags.iter().find(|t| t.tag.name == "id")
            && t.tag.value.parse::<u64>().is_err()
        {
            return self.err(
                t.span,
                format!(
                    "invalid @id `{}`, expected an unsigned 64-bit integer",
                    shorten(&t.tag.value)
                ),
            );
        }
        if s.fields.is_empty() {
            return self.err(
                s.span,
                format!("struct `{}` has no fields", shorten(&s.name)),
            );
        }
        let is_table = s.kind == StructKind::Table;
        // Tables start with their u32 size header.
        let mut content: u64 = if is_table { 4 } else { 0 };
        let mut fields: Vec<FieldDef> = Vec::new();
        let mut field_names = Seen::default();
        for f in s.fields {
            check_type_name(self.file, &f.name, f.span, "field name")?;
            if !field_names.first(&f.name) {
                return self.err(
                    f.span,
                    format!("duplicated field name `{}`", shorten(&f.name)),
                );
            }
            let (base, elem) = if let Some(p) = Primitive::from_schema_name(&f.base) {
                (BaseType::Primitive(p), p.size())
            } else if let Some(e) = self.enum_index.get(&f.base).map(|&i| &self.enums[i]) {
                (BaseType::Enum(e.name.clone()), e.repr.size())
            } else if let Some(st) = self.struct_index.get(&f.base).map(|&i| &self.structs[i]) {
                if st.is_table() {
                    (BaseType::Table(st.name.clone()), st.size.total)
                } else {
                    (BaseType::Inline(st.name.clone()), st.size.total)
                }
            } else if f.base == s.name {
                return self.err(
                    f.ty_span,
                    format!("struct `{}` cannot contain itself", shorten(&s.name)),
                );
            } else {
                return self.err(
                    f.ty_span,
                    format!(
                        "unknown type `{}` (types must be declared before they are used)",
                        shorten(&f.base)
                    ),
                );
            };
            let shape = match f.shape {
                RawShape::Single => Shape::Single,
                RawShape::Array(n) => Shape::Array(n),
                RawShape::Slice => Shape::Slice,
                RawShape::Limited(n) => Shape::LimitedSlice(n),
            };
            if shape != Shape::Single && matches!(base, BaseType::Enum(_) | BaseType::Table(_)) {
                return self.err(
                    f.ty_span,
                    "enums and tables cannot be used in arrays or slices; wrap them in an inline struct first",
                );
            }
            let header = if packed { 8 } else { 12 };
            let size: u64 = match (&shape, &base) {
                (Shape::Slice | Shape::LimitedSlice(_), _) => header,
                (_, BaseType::Table(_)) => 4,
                (Shape::Array(n), _) => u64::from(elem) * u64::from(*n),
                (Shape::Single, _) => u64::from(elem),
            };
            let offset = content;
            content += size;
            if content > u64::from(u32::MAX) {
                return self.err(
                    f.span,
                    format!("struct `{}` is larger than 4 GiB", shorten(&s.name)),
                );
            }
            fields.push(FieldDef {
                name: f.name,
                ty: FieldType {
                    base,
                    shape,
                    text: f.text,
                },
                offset: offset as u32,
                size: size as u32,
                elem_size: elem,
                tags: plain_tags(&f.tags),
                span: f.span,
            });
        }
        let content = content as u32;
        // Unpacked inline structs are padded to `content + (8 - content % 8)` (a full 8
        // bytes when already a multiple of 8: a quirk of the reference we must keep).
        // Tables are never padded.
        let padding = if !packed && !is_table {
            8 - content % 8
        } else {
            0
        };
        let Some(total) = content.checked_add(padding) else {
            return self.err(
                s.span,
                format!("struct `{}` is larger than 4 GiB", shorten(&s.name)),
            );
        };
        let minimum = match (is_table, packed) {
            (true, true) => 4,
            (true, false) => 8,
            (false, _) => content,
        };
        self.claim_name(&s.name, s.span)?;
        Ok(StructDef {
            name: s.name,
            kind: s.kind,
            packed,
            fields,
            size: StructSize {
                content,
                padding,
                total,
                minimum,
            },
            tags: plain_tags(&s.tags),
            span: s.span,
        })
    }

    fn interface(&self, i: RawInterface) -> Result<Interface, SchemaError> {
        let mut memories: Vec<MemoryDef> = Vec::new();
        let mut memory_names = Seen::default();
        for m in i.memories {
            if !memory_names.first(&m.name) {
                return self.err(m.span, format!("duplicated memory `{}`", shorten(&m.name)));
            }
            if !m.importer.can_write() && !m.exporter.can_write() {
                return self.err(
                    m.span,
                    format!(
                        "memory `{}` cannot be written by either side",
                        shorten(&m.name)
                    ),
                );
            }
            memories.push(MemoryDef {
                name: m.name,
                importer: m.importer,
                exporter: m.exporter,
                max_pages: m.max_pages,
                span: m.span,
            });
        }
        let mut functions: Vec<FunctionDef> = Vec::new();
        let mut function_names = Seen::default();
        for f in i.functions {
            if memory_names.contains(&f.name) || !function_names.first(&f.name) {
                return self.err(
                    f.span,
                    format!("duplicated member name `{}`", shorten(&f.name)),
                );
            }
            let mut args: Vec<ArgDef> = Vec::new();
            let mut arg_names = Seen::default();
            for a in f.args {
                if !arg_names.first(&a.name) {
                    return self.err(
                        a.span,
                        format!("duplicated argument `{}`", shorten(&a.name)),
                    );
                }
                args.push(self.arg(&i.name, &memory_names, a)?);
            }
            let result = match f.result {
                Some(a) => Some(self.arg(&i.name, &memory_names, a)?),
                None => None,
            };
            functions.push(FunctionDef {
                name: f.name,
                args,
                result,
                span: f.span,
            });
        }
        Ok(Interface {
            name: i.name,
            patterns: i.patterns,
            memories,
            functions,
            tags: plain_tags(&i.tags),
            span: i.span,
        })
    }

    /// Checks that an argument's type is a struct and its memory is declared.
    fn arg(&self, interface: &str, memories: &Seen, a: RawArg) -> Result<ArgDef, SchemaError> {
        if !self.struct_index.contains_key(&a.type_name) {
            return self.err(
                a.type_span,
                format!("unknown struct type `{}`", shorten(&a.type_name)),
            );
        }
        if !memories.contains(&a.memory) {
            return self.err(
                a.memory_span,
                format!(
                    "memory `{}` is not declared in interface `{}`",
                    shorten(&a.memory),
                    shorten(interface)
                ),
            );
        }
        Ok(ArgDef {
            name: a.name,
            type_name: a.type_name,
            memory: a.memory,
            span: a.span,
        })
    }
}
