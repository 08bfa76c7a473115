//! JSON representations of Karmem scalars and strings.

use serde_json::{Map, Number, Value};

/// Key of the object that stands for a string with invalid UTF-8.
pub const INVALID_UTF8_KEY: &str = "invalid_utf8_hex";

fn non_finite(x: f64) -> Value {
    Value::String(
        if x.is_nan() {
            "NaN"
        } else if x > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        }
        .to_string(),
    )
}

/// A `float64` as JSON (shortest round-trip form; non-finite values as strings).
pub fn f64_to_json(x: f64) -> Value {
    Number::from_f64(x)
        .map(Value::Number)
        .unwrap_or_else(|| non_finite(x))
}

/// A `float32` as JSON, printed in its shortest 32-bit form (`0.1`, not
/// `0.10000000149011612`), which parses back to the same `f32`.
pub fn f32_to_json(x: f32) -> Value {
    if !x.is_finite() {
        return non_finite(f64::from(x));
    }
    // Rust's Display gives the shortest decimal that round-trips at 32 bits; reading it
    // as f64 keeps those digits when serde_json prints the number.
    let shortest: f64 = x.to_string().parse().unwrap_or(f64::from(x));
    f64_to_json(shortest)
}

/// Reads a float from a JSON number or from `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub fn float_from_json(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "+Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// String bytes as JSON: a string when valid UTF-8, else `{"invalid_utf8_hex": "..."}`.
pub fn bytes_to_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => {
            let mut hex = String::with_capacity(bytes.len() * 2);
            for b in bytes {
                hex.push_str(&format!("{b:02x}"));
            }
            let mut m = Map::new();
            m.insert(INVALID_UTF8_KEY.to_string(), Value::String(hex));
            Value::Object(m)
        }
    }
}

/// The bytes of a JSON string or of an `{"invalid_utf8_hex": "..."}` object.
pub fn bytes_from_json(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Object(m) if m.len() == 1 => {
            let hex = m.get(INVALID_UTF8_KEY)?.as_str()?;
            if !hex.len().is_multiple_of(2) {
                return None;
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_prints_shortest_form() {
        assert_eq!(f32_to_json(0.1).to_string(), "0.1");
        assert_eq!(
            f32_to_json(f32::MAX).as_f64().map(|x| x as f32),
            Some(f32::MAX)
        );
        assert_eq!(f32_to_json(f32::NAN), Value::String("NaN".into()));
    }

    #[test]
    fn invalid_utf8_round_trips() {
        let v = bytes_to_json(&[0x61, 0xff, 0x00]);
        assert_eq!(v, serde_json::json!({"invalid_utf8_hex": "61ff00"}));
        assert_eq!(bytes_from_json(&v), Some(vec![0x61, 0xff, 0x00]));
        assert_eq!(
            bytes_from_json(&serde_json::json!({"invalid_utf8_hex": "6"})),
            None
        );
    }
}
