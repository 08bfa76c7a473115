//! Schema-driven random values, in the canonical JSON form decoding produces (so that
//! `decode(encode(v)) == v` is the property to check).

use faas_karmem_compiler::dynamic::{bytes_to_json, f32_to_json, f64_to_json};
use faas_karmem_compiler::{BaseType, Primitive, Schema, Shape, StructDef};
use serde_json::{Map, Value};

/// A small deterministic generator (SplitMix64), seeded by proptest.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

fn int(rng: &mut Rng, min: i128, max: i128) -> i128 {
    // Favour edges and small values, where encoding bugs hide.
    match rng.below(4) {
        0 => [min, max, 0.max(min), 1.min(max)][rng.below(4) as usize],
        1 => (rng.below(100) as i128).clamp(min, max),
        _ => {
            let span = (max - min) as u128 + 1;
            let r = (u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())) % span;
            min + r as i128
        }
    }
}

fn prim(rng: &mut Rng, p: Primitive) -> Value {
    match p {
        Primitive::Bool => Value::Bool(rng.below(2) == 1),
        Primitive::F32 => {
            let x = f32::from_bits(rng.next_u64() as u32);
            f32_to_json(if x.is_finite() { x } else { -1.5 })
        }
        Primitive::F64 => {
            let x = f64::from_bits(rng.next_u64());
            f64_to_json(if x.is_finite() { x } else { 2.25 })
        }
        _ => {
            let (min, max) = p.integer_range().unwrap();
            let n = int(rng, min, max);
            if n < 0 {
                Value::from(n as i64)
            } else {
                Value::from(n as u64)
            }
        }
    }
}

const CHARS: &[char] = &[
    'a', 'z', 'Q', '0', ' ', '"', '\\', '\n', '\0', 'é', '世', '🚀',
];

fn string(rng: &mut Rng, max_bytes: usize) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(10) {
        let c = CHARS[rng.below(CHARS.len() as u64) as usize];
        if s.len() + c.len_utf8() > max_bytes {
            break;
        }
        s.push(c);
    }
    s
}

fn count(rng: &mut Rng, limit: Option<u32>) -> usize {
    let n = rng.below(5) as usize;
    limit.map_or(n, |l| n.min(l as usize))
}

/// A random value of struct `s`.
pub fn value(schema: &Schema, s: &StructDef, rng: &mut Rng) -> Value {
    let mut obj = Map::new();
    for f in &s.fields {
        let limit = match f.ty.shape {
            Shape::LimitedSlice(n) => Some(n),
            _ => None,
        };
        let v = match (&f.ty.base, f.ty.shape) {
            (BaseType::Primitive(Primitive::Char), Shape::Array(n)) => {
                // `[N]char` always decodes to exactly N bytes.
                let mut b: Vec<u8> = (0..n).map(|_| b"ab\0z"[rng.below(4) as usize]).collect();
                b.truncate(n as usize);
                bytes_to_json(&b)
            }
            (BaseType::Primitive(Primitive::Char), Shape::Slice | Shape::LimitedSlice(_)) => {
                Value::String(string(rng, limit.map_or(64, |l| l as usize)))
            }
            (BaseType::Primitive(p), Shape::Single) => prim(rng, *p),
            (BaseType::Primitive(p), Shape::Array(n)) => {
                Value::Array((0..n).map(|_| prim(rng, *p)).collect())
            }
            (BaseType::Primitive(p), _) => {
                Value::Array((0..count(rng, limit)).map(|_| prim(rng, *p)).collect())
            }
            (BaseType::Enum(e), _) => {
                let e = schema.find_enum(e).unwrap();
                if rng.below(2) == 0 {
                    let n = e.variants[rng.below(e.variants.len() as u64) as usize].value;
                    if n < 0 {
                        Value::from(n as i64)
                    } else {
                        Value::from(n as u64)
                    }
                } else {
                    prim(rng, e.repr)
                }
            }
            (BaseType::Inline(i) | BaseType::Table(i), Shape::Single) => {
                value(schema, schema.find_struct(i).unwrap(), rng)
            }
            (BaseType::Inline(i), Shape::Array(n)) => {
                let st = schema.find_struct(i).unwrap();
                Value::Array((0..n).map(|_| value(schema, st, rng)).collect())
            }
            (BaseType::Inline(i) | BaseType::Table(i), _) => {
                let st = schema.find_struct(i).unwrap();
                Value::Array(
                    (0..count(rng, limit))
                        .map(|_| value(schema, st, rng))
                        .collect(),
                )
            }
        };
        obj.insert(f.name.clone(), v);
    }
    Value::Object(obj)
}
