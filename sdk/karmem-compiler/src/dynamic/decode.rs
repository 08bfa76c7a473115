//! Schema-driven decoding to JSON, following the reference reader's rules.
//!
//! Written independently of the generated views (same rules, separate code), so the
//! tests comparing the two catch mistakes in either.

use serde_json::{Map, Value};

use super::CodecError;
use super::json::{bytes_to_json, f32_to_json, f64_to_json};
use crate::ast::{Primitive, Schema, StructDef};
use crate::plan::{Kind, classify};

/// `bytes[start..end]`, or empty when not all there.
fn sub(bytes: &[u8], start: usize, end: usize) -> &[u8] {
    bytes.get(start..end).unwrap_or(&[])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    match bytes.get(at..).and_then(|b| b.first_chunk::<4>()) {
        Some(c) => u32::from_le_bytes(*c),
        None => 0,
    }
}

/// The table at `offset`: empty when fewer than `minimum` bytes remain or its size runs
/// past the buffer.
fn table_at(data: &[u8], offset: u32, minimum: u32) -> &[u8] {
    let Some(rest) = data.get(offset as usize..) else {
        return &[];
    };
    if rest.len() < minimum as usize {
        return &[];
    }
    rest.get(..u32_at(rest, 0) as usize).unwrap_or(&[])
}

fn struct_at<'a>(s: &StructDef, data: &'a [u8], offset: u32) -> &'a [u8] {
    if s.is_table() {
        return table_at(data, offset, s.size.minimum);
    }
    match data.get(offset as usize..) {
        Some(rest) if rest.len() >= s.size.content as usize => {
            &rest[..rest.len().min(s.size.total as usize)]
        }
        _ => &[],
    }
}

/// Data of the slice whose header is `header` (empty when out of bounds).
fn slice_data<'a>(data: &'a [u8], header: &[u8]) -> &'a [u8] {
    let (offset, size) = (u32_at(header, 0) as usize, u32_at(header, 4) as usize);
    data.get(offset..)
        .and_then(|r| r.get(..size))
        .unwrap_or(&[])
}

/// Reads one scalar from `b` (which holds at least its size, or is empty for default).
pub(super) fn prim(p: Primitive, b: &[u8]) -> Value {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        b.first_chunk::<N>().copied().unwrap_or([0; N])
    }
    match p {
        Primitive::Bool => Value::Bool(b.first().is_some_and(|x| *x != 0)),
        Primitive::Byte | Primitive::Char | Primitive::U8 => Value::from(arr::<1>(b)[0]),
        Primitive::I8 => Value::from(i8::from_le_bytes(arr(b))),
        Primitive::U16 => Value::from(u16::from_le_bytes(arr(b))),
        Primitive::I16 => Value::from(i16::from_le_bytes(arr(b))),
        Primitive::U32 => Value::from(u32::from_le_bytes(arr(b))),
        Primitive::I32 => Value::from(i32::from_le_bytes(arr(b))),
        Primitive::U64 => Value::from(u64::from_le_bytes(arr(b))),
        Primitive::I64 => Value::from(i64::from_le_bytes(arr(b))),
        Primitive::F32 => f32_to_json(f32::from_le_bytes(arr(b))),
        Primitive::F64 => f64_to_json(f64::from_le_bytes(arr(b))),
    }
}

fn cap(n: usize, limit: Option<u32>) -> usize {
    limit.map_or(n, |l| n.min(l as usize))
}

fn decode_struct(schema: &Schema, s: &StructDef, data: &[u8], bytes: &[u8]) -> Value {
    let mut obj = Map::new();
    for f in &s.fields {
        let (o, z) = (f.offset as usize, f.size as usize);
        let fb = sub(bytes, o, o + z);
        let v = match classify(schema, f) {
            Kind::Prim(p) => prim(p, fb),
            Kind::Enum(e) => prim(e.repr, fb),
            Kind::Str(limit) => {
                let d = slice_data(data, fb);
                bytes_to_json(&d[..cap(d.len(), limit)])
            }
            Kind::CharArray(_) => bytes_to_json(fb),
            Kind::PrimSlice(p, limit) => {
                let d = slice_data(data, fb);
                let size = p.size() as usize;
                let n = cap(d.len() / size, limit);
                Value::Array(
                    (0..n)
                        .map(|i| prim(p, sub(d, i * size, (i + 1) * size)))
                        .collect(),
                )
            }
            Kind::PrimArray(p, n) => {
                let size = p.size() as usize;
                Value::Array(
                    (0..n as usize)
                        .map(|i| prim(p, sub(fb, i * size, (i + 1) * size)))
                        .collect(),
                )
            }
            Kind::Inline(i) => decode_struct(schema, i, data, fb),
            Kind::InlineArray(i, n) => {
                let size = i.size.total as usize;
                Value::Array(
                    (0..n as usize)
                        .map(|k| decode_struct(schema, i, data, sub(fb, k * size, (k + 1) * size)))
                        .collect(),
                )
            }
            Kind::InlineSlice(i, limit) => {
                let d = slice_data(data, fb);
                let size = i.size.total as usize;
                let n = cap(d.len().checked_div(size).unwrap_or(0), limit);
                Value::Array(
                    (0..n)
                        .map(|k| decode_struct(schema, i, data, sub(d, k * size, (k + 1) * size)))
                        .collect(),
                )
            }
            Kind::Table(t) => {
                // Tables check the field against their size (null viewer otherwise);
                // inline structs follow the offset unchecked, as the reference does.
                let tb = if s.is_table() && bytes.len() < o + 4 {
                    &[][..]
                } else {
                    table_at(data, u32_at(bytes, o), t.size.minimum)
                };
                decode_struct(schema, t, data, tb)
            }
        };
        obj.insert(f.name.clone(), v);
    }
    Value::Object(obj)
}

/// Decodes the message `bytes`, whose root is a `type_name`, into JSON.
///
/// Never fails on the bytes (malformed input reads as defaults, as in the reference
/// reader); only an unknown `type_name` is an error. The name may be qualified with the
/// schema's package name (`simplepacked.Simple`).
pub fn decode_to_json(schema: &Schema, type_name: &str, bytes: &[u8]) -> Result<Value, CodecError> {
    let s = schema
        .resolve_type(type_name)
        .ok_or_else(|| CodecError::UnknownType {
            schema: schema.name.clone(),
            name: type_name.to_string(),
        })?;
    Ok(decode_struct(schema, s, bytes, struct_at(s, bytes, 0)))
}
