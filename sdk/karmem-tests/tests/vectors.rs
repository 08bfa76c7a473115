//! Byte compatibility with the reference Go implementation, on every vector found in the
//! vectors directory: generated views, owned types and the dynamic codec decode the
//! expected value for every listed reader schema, and generated writers, owned types and
//! the dynamic codec reproduce the bytes exactly for `roundtrip: true` vectors.

use faas_karmem_compiler::{Schema, decode_to_json, encode_from_json, parse_file};
use faas_karmem_tests::compare::diff;
use faas_karmem_tests::vectors::{Vector, dir, load_all, plain_type};
use faas_karmem_tests::{SCHEMAS, decode_owned, decode_view, encode_owned, encode_writer};
use serde_json::Value;

fn schema(key: &str) -> Schema {
    parse_file(&dir().join(key)).unwrap_or_else(|e| panic!("{e}"))
}

fn has_invalid_utf8(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.contains_key("invalid_utf8_hex") || m.values().any(has_invalid_utf8),
        Value::Array(a) => a.iter().any(has_invalid_utf8),
        _ => false,
    }
}

fn check_readers(v: &Vector, failures: &mut Vec<String>) -> usize {
    let mut checks = 0;
    for r in &v.readers {
        let ty = plain_type(&r.ty);
        let ctx = format!("{} read as {} ({})", v.name, r.ty, r.schema);
        match decode_view(&r.schema, ty, &v.bytes) {
            Some(got) => {
                if let Some(d) = diff(&got, &r.expected) {
                    failures.push(format!("{ctx}: generated view: {d}"));
                }
            }
            None => failures.push(format!("{ctx}: no generated code for this schema/type")),
        }
        match decode_to_json(&schema(&r.schema), &r.ty, &v.bytes) {
            Ok(got) => {
                if let Some(d) = diff(&got, &r.expected) {
                    failures.push(format!("{ctx}: dynamic decoder: {d}"));
                }
            }
            Err(e) => failures.push(format!("{ctx}: dynamic decoder: {e}")),
        }
        // Owned strings are `String`, so values with invalid UTF-8 are not representable.
        if !has_invalid_utf8(&r.expected)
            && let Some(got) = decode_owned(&r.schema, ty, &v.bytes)
            && let Some(d) = diff(&got, &r.expected)
        {
            failures.push(format!("{ctx}: owned decode: {d}"));
        }
        checks += 1;
    }
    checks
}

fn check_roundtrip(v: &Vector, failures: &mut Vec<String>) -> bool {
    if !v.roundtrip {
        return false;
    }
    let (Some((key, ty)), Some(input)) = (&v.writer, &v.input) else {
        failures.push(format!(
            "{}: roundtrip vector without writer_schema/writer_type/input",
            v.name
        ));
        return false;
    };
    let plain = plain_type(ty);
    let ctx = format!("{} written as {ty} ({key})", v.name);
    let mut buf = vec![0u8; v.bytes.len() + 64];
    match encode_writer(key, plain, input, &mut buf) {
        Some(Ok(n)) if buf[..n] == v.bytes[..] => {}
        Some(Ok(n)) => failures.push(format!(
            "{ctx}: generated writer wrote {:02x?}, expected {:02x?}",
            &buf[..n],
            v.bytes
        )),
        Some(Err(e)) => failures.push(format!("{ctx}: generated writer: {e}")),
        None => failures.push(format!("{ctx}: no generated code for this schema/type")),
    }
    // One byte short must be an error, not a panic or a truncated message.
    if !v.bytes.is_empty() {
        let mut small = vec![0u8; v.bytes.len() - 1];
        match encode_writer(key, plain, input, &mut small) {
            Some(Err(faas_karmem::Error::CapacityExceeded { needed, capacity })) => {
                assert!(
                    needed > capacity && capacity == small.len(),
                    "{ctx}: bad error fields"
                );
            }
            other => failures.push(format!(
                "{ctx}: writer into a too-small buffer gave {other:?}"
            )),
        }
    }
    match encode_owned(key, plain, input) {
        Some(Some(b)) if b == v.bytes => {}
        Some(Some(b)) => failures.push(format!(
            "{ctx}: owned encode wrote {b:02x?}, expected {:02x?}",
            v.bytes
        )),
        Some(None) => assert!(
            has_invalid_utf8(input),
            "{ctx}: owned type rejected a valid value"
        ),
        None => {}
    }
    match encode_from_json(&schema(key), ty, input) {
        Ok(b) if b == v.bytes => {}
        Ok(b) => failures.push(format!(
            "{ctx}: dynamic encoder wrote {b:02x?}, expected {:02x?}",
            v.bytes
        )),
        Err(e) => failures.push(format!("{ctx}: dynamic encoder: {e}")),
    }
    true
}

#[test]
fn every_vector_decodes_and_roundtrips() {
    let vectors = load_all();
    let mut failures = Vec::new();
    let (mut reads, mut roundtrips) = (0, 0);
    for v in &vectors {
        reads += check_readers(v, &mut failures);
        roundtrips += usize::from(check_roundtrip(v, &mut failures));
    }
    eprintln!(
        "{} vectors: {reads} reader checks, {roundtrips} byte-exact round trips",
        vectors.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(reads > 0, "no reader expectations found");
}

#[test]
fn every_vector_schema_was_compiled() {
    let mut on_disk: Vec<String> = std::fs::read_dir(dir().join("schemas"))
        .expect("schemas dir")
        .filter_map(|e| e.ok())
        .map(|e| format!("schemas/{}", e.file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".km"))
        .collect();
    on_disk.sort();
    let compiled: Vec<&str> = SCHEMAS
        .iter()
        .map(|s| s.key)
        .filter(|k| k.starts_with("schemas/"))
        .collect();
    assert_eq!(
        compiled, on_disk,
        "rebuild the test crate: the vector schemas changed"
    );
}
