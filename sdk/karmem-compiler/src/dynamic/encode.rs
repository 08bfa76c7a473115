//! Schema-driven encoding from JSON, laying data out exactly like the reference writer:
//! the root first, then the data of each out-of-line field appended depth first in
//! declaration order (an empty slice still records the current length as its offset).

use serde_json::Value;

use super::CodecError;
use super::json::{bytes_from_json, float_from_json};
use crate::ast::{EnumDef, Primitive, Schema, StructDef};
use crate::plan::{Kind, classify};

struct Enc<'s> {
    schema: &'s Schema,
    buf: Vec<u8>,
}

fn err<T>(path: &str, message: impl Into<String>) -> Result<T, CodecError> {
    Err(CodecError::Value {
        path: path.to_string(),
        message: message.into(),
    })
}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}...", &s[..s.floor_char_boundary(40)])
    } else {
        s
    }
}

fn integer(path: &str, p: Primitive, v: &Value) -> Result<i128, CodecError> {
    let (min, max) = p.integer_range().unwrap_or((0, 0));
    let n = match v {
        Value::Null => 0,
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => i128::from(u),
            (None, Some(i)) => i128::from(i),
            _ => return err(path, format!("expected an integer, got {n}")),
        },
        other => {
            return err(
                path,
                format!("expected an integer, got {}", describe(other)),
            );
        }
    };
    if n < min || n > max {
        return err(path, format!("{n} is out of range for {}", p.schema_name()));
    }
    Ok(n)
}

/// Little-endian bytes of scalar `v` of type `p`.
fn scalar(path: &str, p: Primitive, v: &Value) -> Result<Vec<u8>, CodecError> {
    Ok(match p {
        Primitive::Bool => match v {
            Value::Null => vec![0],
            Value::Bool(b) => vec![u8::from(*b)],
            other => {
                return err(
                    path,
                    format!("expected true or false, got {}", describe(other)),
                );
            }
        },
        Primitive::F32 | Primitive::F64 => {
            let x = match v {
                Value::Null => 0.0,
                other => match float_from_json(other) {
                    Some(x) => x,
                    None => {
                        return err(path, format!("expected a number, got {}", describe(other)));
                    }
                },
            };
            if p == Primitive::F32 {
                (x as f32).to_le_bytes().to_vec()
            } else {
                x.to_le_bytes().to_vec()
            }
        }
        _ => {
            let n = integer(path, p, v)?;
            // Two's complement truncated to the type's size is the wire form for both
            // signed and unsigned values already range-checked above.
            n.to_le_bytes()[..p.size() as usize].to_vec()
        }
    })
}

fn enum_value(path: &str, e: &EnumDef, v: &Value) -> Result<Vec<u8>, CodecError> {
    if let Value::String(name) = v {
        return match e.variants.iter().find(|x| &x.name == name) {
            Some(x) => Ok(x.value.to_le_bytes()[..e.repr.size() as usize].to_vec()),
            None => err(
                path,
                format!("`{name}` is not a variant of enum {}", e.name),
            ),
        };
    }
    scalar(path, e.repr, v)
}

fn array<'v>(path: &str, v: &'v Value) -> Result<&'v [Value], CodecError> {
    match v {
        Value::Null => Ok(&[]),
        Value::Array(a) => Ok(a),
        other => err(path, format!("expected an array, got {}", describe(other))),
    }
}

fn string(path: &str, v: &Value) -> Result<Vec<u8>, CodecError> {
    match v {
        Value::Null => Ok(Vec::new()),
        other => bytes_from_json(other).map_or_else(
            || {
                err(
                    path,
                    format!(
                        "expected a string or {{\"invalid_utf8_hex\": ...}}, got {}",
                        describe(other)
                    ),
                )
            },
            Ok,
        ),
    }
}

impl Enc<'_> {
    fn alloc(&mut self, n: usize) -> Result<usize, CodecError> {
        let at = self.buf.len();
        let end = at.checked_add(n).ok_or(CodecError::TooLarge(usize::MAX))?;
        if end > u32::MAX as usize {
            return Err(CodecError::TooLarge(end));
        }
        self.buf.resize(end, 0);
        Ok(at)
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn put_u32(&mut self, at: usize, v: usize) {
        self.put(at, &(v as u32).to_le_bytes());
    }

    fn slice_header(&mut self, s: &StructDef, at: usize, offset: usize, len: usize, elem: u32) {
        self.put_u32(at, offset);
        self.put_u32(at + 4, len);
        if !s.packed {
            self.put_u32(at + 8, elem as usize);
        }
    }

    fn table(&mut self, t: &StructDef, v: &Value, path: &str) -> Result<usize, CodecError> {
        let at = self.alloc(t.size.total as usize)?;
        self.put_u32(at, t.size.total as usize);
        self.fields(t, at, v, path)?;
        Ok(at)
    }

    /// Writes the fields of `s`, whose bytes start at `at`, from the JSON object `v`.
    fn fields(
        &mut self,
        s: &StructDef,
        at: usize,
        v: &Value,
        path: &str,
    ) -> Result<(), CodecError> {
        let empty = serde_json::Map::new();
        let obj = match v {
            Value::Null => &empty,
            Value::Object(m) => m,
            other => {
                return err(
                    path,
                    format!("expected an object for {}, got {}", s.name, describe(other)),
                );
            }
        };
        if let Some(k) = obj.keys().find(|k| !s.fields.iter().any(|f| &f.name == *k)) {
            return err(path, format!("{} has no field `{k}`", s.name));
        }
        for f in &s.fields {
            let fpath = format!("{path}.{}", f.name);
            let fv = obj.get(&f.name).unwrap_or(&Value::Null);
            let fat = at + f.offset as usize;
            match classify(self.schema, f) {
                Kind::Prim(p) => {
                    let b = scalar(&fpath, p, fv)?;
                    self.put(fat, &b);
                }
                Kind::Enum(e) => {
                    let b = enum_value(&fpath, e, fv)?;
                    self.put(fat, &b);
                }
                Kind::Str(_) => {
                    let b = string(&fpath, fv)?;
                    let off = self.alloc(b.len())?;
                    self.put(off, &b);
                    self.slice_header(s, fat, off, b.len(), 1);
                }
                Kind::CharArray(n) => {
                    let b = string(&fpath, fv)?;
                    if b.len() > n as usize {
                        return err(
                            &fpath,
                            format!("string of {} bytes does not fit in [{n}]char", b.len()),
                        );
                    }
                    self.put(fat, &b);
                }
                Kind::PrimSlice(p, _) => {
                    let items = array(&fpath, fv)?;
                    let size = p.size() as usize;
                    let off = self.alloc(items.len() * size)?;
                    for (i, item) in items.iter().enumerate() {
                        let b = scalar(&format!("{fpath}[{i}]"), p, item)?;
                        self.put(off + i * size, &b);
                    }
                    self.slice_header(s, fat, off, items.len() * size, p.size());
                }
                Kind::PrimArray(p, n) => {
                    let items = array(&fpath, fv)?;
                    if items.len() > n as usize {
                        return err(
                            &fpath,
                            format!("{} elements do not fit in [{n}]", items.len()),
                        );
                    }
                    for (i, item) in items.iter().enumerate() {
                        let b = scalar(&format!("{fpath}[{i}]"), p, item)?;
                        self.put(fat + i * p.size() as usize, &b);
                    }
                }
                Kind::Inline(i) => self.fields(i, fat, fv, &fpath)?,
                Kind::InlineArray(i, n) => {
                    let items = array(&fpath, fv)?;
                    if items.len() > n as usize {
                        return err(
                            &fpath,
                            format!("{} elements do not fit in [{n}]", items.len()),
                        );
                    }
                    // Every element is written, defaults included: a default element
                    // still allocates its (empty) slices and tables, as the reference does.
                    for k in 0..n as usize {
                        let item = items.get(k).unwrap_or(&Value::Null);
                        self.fields(
                            i,
                            fat + k * i.size.total as usize,
                            item,
                            &format!("{fpath}[{k}]"),
                        )?;
                    }
                }
                Kind::InlineSlice(i, _) => {
                    let items = array(&fpath, fv)?;
                    let size = i.size.total as usize;
                    let off = self.alloc(items.len() * size)?;
                    self.slice_header(s, fat, off, items.len() * size, i.size.total);
                    for (k, item) in items.iter().enumerate() {
                        self.fields(i, off + k * size, item, &format!("{fpath}[{k}]"))?;
                    }
                }
                Kind::Table(t) => {
                    // The reference allocates the table before writing the offset; the
                    // offset is only known once allocated, and nested data follows it.
                    let at_table = self.alloc(t.size.total as usize)?;
                    self.put_u32(at_table, t.size.total as usize);
                    self.put_u32(fat, at_table);
                    self.fields(t, at_table, fv, &fpath)?;
                }
            }
        }
        Ok(())
    }
}

/// Encodes the JSON `value` as a message whose root is a `type_name`.
///
/// The layout is the reference writer's, so the bytes are identical to what the Go
/// implementation and the generated writers produce. Missing fields take their default.
pub fn encode_from_json(
    schema: &Schema,
    type_name: &str,
    value: &Value,
) -> Result<Vec<u8>, CodecError> {
    let s = schema
        .resolve_type(type_name)
        .ok_or_else(|| CodecError::UnknownType {
            schema: schema.name.clone(),
            name: type_name.to_string(),
        })?;
    let mut enc = Enc {
        schema,
        buf: Vec::new(),
    };
    if s.is_table() {
        enc.table(s, value, &s.name)?;
    } else {
        let at = enc.alloc(s.size.total as usize)?;
        enc.fields(s, at, value, &s.name)?;
    }
    Ok(enc.buf)
}
