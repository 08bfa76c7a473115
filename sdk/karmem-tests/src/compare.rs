//! Semantic comparison of JSON values as the vectors define them.

use serde_json::Value;

/// First difference between `got` and `want`, or `None` when they are equal.
///
/// Objects must have the same keys in the same order (schema field order is part of the
/// contract); integers compare exactly; when either side is a float, numbers compare by
/// `f64` value (so `0` equals `0.0`); everything else compares exactly.
pub fn diff(got: &Value, want: &Value) -> Option<String> {
    diff_at(got, want, "$")
}

fn diff_at(got: &Value, want: &Value, path: &str) -> Option<String> {
    match (got, want) {
        (Value::Object(a), Value::Object(b)) => {
            let ka: Vec<_> = a.keys().collect();
            let kb: Vec<_> = b.keys().collect();
            if ka != kb {
                return Some(format!("{path}: keys {ka:?} != expected {kb:?}"));
            }
            a.iter()
                .zip(b.values())
                .find_map(|((k, x), y)| diff_at(x, y, &format!("{path}.{k}")))
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return Some(format!(
                    "{path}: {} elements != expected {}",
                    a.len(),
                    b.len()
                ));
            }
            a.iter()
                .zip(b)
                .enumerate()
                .find_map(|(i, (x, y))| diff_at(x, y, &format!("{path}[{i}]")))
        }
        (Value::Number(a), Value::Number(b)) => {
            let equal = if a.is_f64() || b.is_f64() {
                a.as_f64() == b.as_f64()
            } else {
                a.as_u64() == b.as_u64() && a.as_i64() == b.as_i64()
            };
            (!equal).then(|| format!("{path}: {a} != expected {b}"))
        }
        _ => (got != want).then(|| format!("{path}: {got} != expected {want}")),
    }
}
