//! Name resolution, validation and wire layout (sizes and offsets), following the
//! reference compiler's rules so generated code reads and writes the same bytes.

use std::collections::HashSet;

use crate::ast::*;
use crate::error::SchemaError;
use crate::parser::{
    RawArg, RawEnum, RawInterface, RawItem, RawSchema, RawShape, RawStruct, RawTag,
};

struct Resolver<'a> {
    file: &'a str,
    packed: bool,
    enums: Vec<EnumDef>,
    structs: Vec<StructDef>,
    names: HashSet<String>,
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
            format!("invalid value `{v}` for @packed, expected true or false"),
        )),
    }
}

fn check_type_name(file: &str, name: &str, span: Span, what: &str) -> Result<(), SchemaError> {
    if !name.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Err(SchemaError::new(
            file,
            span,
            format!("{what} `{name}` must start with an uppercase letter"),
        ));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(SchemaError::new(
            file,
            span,
            format!("{what} `{name}` may only use ASCII letters, digits and `_`"),
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
    };
    let mut raw_interfaces = Vec::new();
    for item in raw.items {
        match item {
            RawItem::Enum(e) => {
                let e = r.enum_def(e)?;
                r.enums.push(e);
            }
            RawItem::Struct(s) => {
                let s = r.struct_def(s)?;
                r.structs.push(s);
            }
            RawItem::Interface(i) => raw_interfaces.push(i),
        }
    }
    // Interfaces may refer to structs declared anywhere in the file.
    let mut interfaces: Vec<Interface> = Vec::new();
    for i in raw_interfaces {
        if interfaces.iter().any(|o| o.name == i.name) {
            return Err(SchemaError::new(
                file,
                i.span,
                format!("duplicated interface name `{}`", i.name),
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
            return self.err(span, format!("duplicated type name `{name}`"));
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
                    format!("invalid enum type `{}`, expected uint8, uint16, uint32, uint64, int8, int16, int32 or int64", e.repr),
                );
            }
        };
        let (min, max) = repr.integer_range().unwrap_or((0, 0));
        let mut variants: Vec<EnumVariant> = Vec::new();
        for (index, v) in e.variants.into_iter().enumerate() {
            check_type_name(self.file, &v.name, v.span, "enum variant name")?;
            if variants.iter().any(|o| o.name == v.name) {
                return self.err(v.span, format!("duplicated enum variant `{}`", v.name));
            }
            // Implicit values are the variant's position, not previous + 1: that is what
            // the reference compiler does and therefore what is on the wire.
            let (value, explicit, span) = match &v.value {
                Some((text, span)) => match text.parse::<i128>() {
                    Ok(n) => (n, true, *span),
                    Err(_) => return self.err(*span, format!("invalid enum value `{text}`")),
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
                    e.name
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
                    t.tag.value
                ),
            );
        }
        if s.fields.is_empty() {
            return self.err(s.span, format!("struct `{}` has no fields", s.name));
        }
        let is_table = s.kind == StructKind::Table;
        // Tables start with their u32 size header.
        let mut content: u64 = if is_table { 4 } else { 0 };
        let mut fields: Vec<FieldDef> = Vec::new();
        for f in s.fields {
            check_type_name(self.file, &f.name, f.span, "field name")?;
            if fields.iter().any(|o| o.name == f.name) {
                return self.err(f.span, format!("duplicated field name `{}`", f.name));
            }
            let (base, elem) = if let Some(p) = Primitive::from_schema_name(&f.base) {
                (BaseType::Primitive(p), p.size())
            } else if let Some(e) = self.enums.iter().find(|e| e.name == f.base) {
                (BaseType::Enum(e.name.clone()), e.repr.size())
            } else if let Some(st) = self.structs.iter().find(|st| st.name == f.base) {
                if st.is_table() {
                    (BaseType::Table(st.name.clone()), st.size.total)
                } else {
                    (BaseType::Inline(st.name.clone()), st.size.total)
                }
            } else if f.base == s.name {
                return self.err(
                    f.ty_span,
                    format!("struct `{}` cannot contain itself", s.name),
                );
            } else {
                return self.err(
                    f.ty_span,
                    format!(
                        "unknown type `{}` (types must be declared before they are used)",
                        f.base
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
                return self.err(f.span, format!("struct `{}` is larger than 4 GiB", s.name));
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
            return self.err(s.span, format!("struct `{}` is larger than 4 GiB", s.name));
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
        for m in i.memories {
            if memories.iter().any(|o| o.name == m.name) {
                return self.err(m.span, format!("duplicated memory `{}`", m.name));
            }
            if !m.importer.can_write() && !m.exporter.can_write() {
                return self.err(
                    m.span,
                    format!("memory `{}` cannot be written by either side", m.name),
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
        for f in i.functions {
            if functions.iter().any(|o| o.name == f.name)
                || memories.iter().any(|m| m.name == f.name)
            {
                return self.err(f.span, format!("duplicated member name `{}`", f.name));
            }
            let mut args: Vec<ArgDef> = Vec::new();
            for a in f.args {
                if args.iter().any(|o| o.name == a.name) {
                    return self.err(a.span, format!("duplicated argument `{}`", a.name));
                }
                args.push(self.arg(&i.name, &memories, a)?);
            }
            let result = match f.result {
                Some(a) => Some(self.arg(&i.name, &memories, a)?),
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
    fn arg(
        &self,
        interface: &str,
        memories: &[MemoryDef],
        a: RawArg,
    ) -> Result<ArgDef, SchemaError> {
        if !self.structs.iter().any(|s| s.name == a.type_name) {
            return self.err(
                a.type_span,
                format!("unknown struct type `{}`", a.type_name),
            );
        }
        if !memories.iter().any(|m| m.name == a.memory) {
            return self.err(
                a.memory_span,
                format!(
                    "memory `{}` is not declared in interface `{interface}`",
                    a.memory
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
