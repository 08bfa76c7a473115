//! JSON helpers used by the generated glue (test-only: panics on ill-typed input).

use serde_json::Value;

static NULL: Value = Value::Null;

/// Field `key` of object `v`, or `null`.
pub fn get<'a>(v: &'a Value, key: &str) -> &'a Value {
    v.get(key).unwrap_or(&NULL)
}

/// An integer (`null` is 0).
pub fn int<T: TryFrom<i128>>(v: &Value) -> T {
    let n: i128 = match v {
        Value::Null => 0,
        Value::Number(n) => n
            .as_u64()
            .map(i128::from)
            .or(n.as_i64().map(i128::from))
            .expect("integer"),
        other => panic!("expected integer, got {other}"),
    };
    T::try_from(n).ok().expect("integer in range")
}

/// A bool (`null` is false).
pub fn boolean(v: &Value) -> bool {
    v.as_bool().unwrap_or(false)
}

/// A float (`null` is 0).
pub fn float(v: &Value) -> f64 {
    if v.is_null() {
        0.0
    } else {
        faas_karmem_compiler::dynamic::float_from_json(v).expect("float")
    }
}

/// String bytes (`null` is empty).
pub fn bytes(v: &Value) -> Vec<u8> {
    if v.is_null() {
        Vec::new()
    } else {
        faas_karmem_compiler::dynamic::bytes_from_json(v).expect("string")
    }
}

/// An array (`null` is empty).
pub fn arr(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        _ => &[],
    }
}

/// See [`faas_karmem_compiler::dynamic::bytes_to_json`].
pub fn bytes_json(b: &[u8]) -> Value {
    faas_karmem_compiler::dynamic::bytes_to_json(b)
}

/// See [`faas_karmem_compiler::dynamic::f32_to_json`].
pub fn f32_json(x: f32) -> Value {
    faas_karmem_compiler::dynamic::f32_to_json(x)
}

/// See [`faas_karmem_compiler::dynamic::f64_to_json`].
pub fn f64_json(x: f64) -> Value {
    faas_karmem_compiler::dynamic::f64_to_json(x)
}
