//! Classification of fields into the handful of cases readers and writers handle.
//!
//! Shared by the code generator and the dynamic codec so that both agree on what a
//! field is; each then implements the reading and writing on its own.

use crate::ast::{BaseType, EnumDef, FieldDef, Primitive, Schema, Shape, StructDef};

/// What a field is, with the declarations it refers to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind<'s> {
    /// A scalar stored in place.
    Prim(Primitive),
    /// An enum value stored in place.
    Enum(&'s EnumDef),
    /// `[]char` or `[<N]char` (limit).
    Str(Option<u32>),
    /// `[N]char`: exactly N bytes in place.
    CharArray(u32),
    /// `[]T` / `[<N]T` of scalars.
    PrimSlice(Primitive, Option<u32>),
    /// `[N]T` of scalars in place.
    PrimArray(Primitive, u32),
    /// An inline struct in place.
    Inline(&'s StructDef),
    /// `[N]S` of inline structs in place.
    InlineArray(&'s StructDef, u32),
    /// `[]S` / `[<N]S` of inline structs.
    InlineSlice(&'s StructDef, Option<u32>),
    /// A reference to a table.
    Table(&'s StructDef),
}

fn limit(shape: Shape) -> Option<u32> {
    match shape {
        Shape::LimitedSlice(n) => Some(n),
        _ => None,
    }
}

/// Classifies `field`. The schema was validated, so every name resolves.
pub(crate) fn classify<'s>(schema: &'s Schema, field: &FieldDef) -> Kind<'s> {
    let shape = field.ty.shape;
    match &field.ty.base {
        BaseType::Primitive(Primitive::Char) => match shape {
            Shape::Single => Kind::Prim(Primitive::Char),
            Shape::Array(n) => Kind::CharArray(n),
            Shape::Slice | Shape::LimitedSlice(_) => Kind::Str(limit(shape)),
        },
        BaseType::Primitive(p) => match shape {
            Shape::Single => Kind::Prim(*p),
            Shape::Array(n) => Kind::PrimArray(*p, n),
            Shape::Slice | Shape::LimitedSlice(_) => Kind::PrimSlice(*p, limit(shape)),
        },
        BaseType::Enum(name) => Kind::Enum(
            schema
                .find_enum(name)
                .expect("validated schema: enum exists"),
        ),
        BaseType::Inline(name) => {
            let s = schema
                .find_struct(name)
                .expect("validated schema: struct exists");
            match shape {
                Shape::Single => Kind::Inline(s),
                Shape::Array(n) => Kind::InlineArray(s, n),
                Shape::Slice | Shape::LimitedSlice(_) => Kind::InlineSlice(s, limit(shape)),
            }
        }
        BaseType::Table(name) => Kind::Table(
            schema
                .find_struct(name)
                .expect("validated schema: struct exists"),
        ),
    }
}

/// Whether encoding a value of `s` appends data after the struct itself (strings,
/// slices or tables anywhere inside it).
pub(crate) fn has_out_of_line(schema: &Schema, s: &StructDef) -> bool {
    s.fields.iter().any(|f| match classify(schema, f) {
        Kind::Str(_) | Kind::PrimSlice(..) | Kind::InlineSlice(..) | Kind::Table(_) => true,
        Kind::Inline(i) | Kind::InlineArray(i, _) => has_out_of_line(schema, i),
        _ => false,
    })
}

/// Whether `s` is an inline struct made only of scalars, enums and plain inline structs:
/// its bytes can be produced from the value alone (no offsets), which allows bulk
/// encoding of slices of it.
pub(crate) fn is_plain(schema: &Schema, s: &StructDef) -> bool {
    !s.is_table()
        && s.fields.iter().all(|f| match classify(schema, f) {
            Kind::Prim(_) | Kind::Enum(_) => true,
            Kind::Inline(i) => is_plain(schema, i),
            _ => false,
        })
}
