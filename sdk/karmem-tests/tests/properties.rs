//! Property tests over every compiled schema (vector schemas and `schemas/`):
//!
//! * reading arbitrary or corrupted bytes never panics, and the generated views, the
//!   owned types and the dynamic decoder (two independent implementations of the reader
//!   rules) agree on every input;
//! * random values round-trip: generated writers, owned types and the dynamic encoder
//!   produce identical bytes, which decode back to the value.

use std::sync::OnceLock;

use faas_karmem_compiler::{
    BaseType, Schema, StructDef, decode_to_json, encode_from_json, parse_file,
};
use faas_karmem_tests::compare::diff;
use faas_karmem_tests::random::{Rng, value};
use faas_karmem_tests::{SCHEMAS, decode_owned, decode_view, encode_owned, encode_writer};
use proptest::prelude::*;
use proptest::sample::Index;

/// Every (schema key, parsed schema, type name) compiled into this crate.
fn types() -> &'static [(&'static str, Schema, &'static str)] {
    static TYPES: OnceLock<Vec<(&'static str, Schema, &'static str)>> = OnceLock::new();
    TYPES.get_or_init(|| {
        let mut out = Vec::new();
        for e in SCHEMAS {
            let schema =
                parse_file(std::path::Path::new(e.path)).unwrap_or_else(|err| panic!("{err}"));
            for t in e.types {
                out.push((e.key, schema.clone(), *t));
            }
        }
        assert!(out.len() > 10, "too few types compiled");
        out
    })
}

/// Whether `s` is, or leads to, an unpacked table of fewer than 8 bytes.
fn reaches_tiny_unpacked_table(schema: &Schema, s: &StructDef) -> bool {
    (s.is_table() && !s.packed && s.size.total < 8)
        || s.fields.iter().any(|f| match &f.ty.base {
            BaseType::Inline(n) | BaseType::Table(n) => {
                reaches_tiny_unpacked_table(schema, schema.find_struct(n).unwrap())
            }
            _ => false,
        })
}

/// Decodes `bytes` three ways and checks they agree (and that nothing panics).
fn check_readers_agree(
    key: &str,
    schema: &Schema,
    ty: &str,
    bytes: &[u8],
) -> Result<(), TestCaseError> {
    let view = decode_view(key, ty, bytes).expect("generated code for type");
    let dynamic = decode_to_json(schema, ty, bytes).expect("type exists");
    prop_assert!(
        diff(&view, &dynamic).is_none(),
        "{key} {ty} on {bytes:02x?}: {:?}",
        diff(&view, &dynamic)
    );
    // Owned decoding goes through the views; it must not panic either.
    let _ = decode_owned(key, ty, bytes).expect("generated code for type");
    Ok(())
}

fn encode_all_ways(
    key: &str,
    schema: &Schema,
    ty: &str,
    v: &serde_json::Value,
) -> Result<Vec<u8>, TestCaseError> {
    let dynamic = encode_from_json(schema, ty, v).expect("dynamic encode");
    let mut buf = vec![0xAAu8; dynamic.len() + 16];
    let n = encode_writer(key, ty, v, &mut buf)
        .expect("generated code")
        .expect("writer encode");
    prop_assert_eq!(
        &buf[..n],
        &dynamic[..],
        "{} {}: writer and dynamic encoder differ",
        key,
        ty
    );
    let owned = encode_owned(key, ty, v)
        .expect("generated code")
        .expect("representable");
    prop_assert_eq!(
        &owned,
        &dynamic,
        "{} {}: owned and dynamic encoder differ",
        key,
        ty
    );
    Ok(dynamic)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_and_readers_agree(
        which in any::<Index>(),
        mut bytes in proptest::collection::vec(any::<u8>(), 0..160),
        plausible_size in any::<bool>(),
    ) {
        let (key, schema, ty) = which.get(types());
        // Random headers almost never fit; half the time make the root size plausible so
        // the readers look at the fields and follow (random) offsets.
        if plausible_size && bytes.len() >= 4 {
            let n = bytes.len() as u32;
            bytes[..4].copy_from_slice(&n.to_le_bytes());
        }
        check_readers_agree(key, schema, ty, &bytes)?;
    }

    #[test]
    fn corrupted_messages_never_panic_and_readers_agree(
        which in any::<Index>(),
        seed in any::<u64>(),
        flips in proptest::collection::vec((any::<Index>(), any::<u8>()), 0..6),
        cut in any::<Index>(),
        truncate in any::<bool>(),
    ) {
        let (key, schema, ty) = which.get(types());
        let s = schema.resolve_type(ty).unwrap();
        let v = value(schema, s, &mut Rng(seed));
        let mut bytes = encode_from_json(schema, ty, &v).unwrap();
        if !bytes.is_empty() {
            for (at, b) in &flips {
                let i = at.index(bytes.len());
                bytes[i] = *b;
            }
            if truncate {
                bytes.truncate(cut.index(bytes.len()));
            }
        }
        check_readers_agree(key, schema, ty, &bytes)?;
    }

    #[test]
    fn random_values_round_trip(which in any::<Index>(), seed in any::<u64>()) {
        let (key, schema, ty) = which.get(types());
        let s = schema.resolve_type(ty).unwrap();
        let v = value(schema, s, &mut Rng(seed));
        let bytes = encode_all_ways(key, schema, ty, &v)?;
        // The reference reader rejects unpacked tables smaller than 8 bytes when they end
        // the message (it cannot read back what it wrote); such values need not survive.
        let want = if reaches_tiny_unpacked_table(schema, s) {
            decode_to_json(schema, ty, &bytes).unwrap()
        } else {
            v
        };
        let view = decode_view(key, ty, &bytes).unwrap();
        prop_assert!(diff(&view, &want).is_none(), "{key} {ty}: view {:?}", diff(&view, &want));
        let dynamic = decode_to_json(schema, ty, &bytes).unwrap();
        prop_assert!(diff(&dynamic, &want).is_none(), "{key} {ty}: dynamic {:?}", diff(&dynamic, &want));
        let owned = decode_owned(key, ty, &bytes).unwrap();
        prop_assert!(diff(&owned, &want).is_none(), "{key} {ty}: owned {:?}", diff(&owned, &want));
    }
}

/// Writers into buffers of every size up to the message length fail cleanly with
/// `CapacityExceeded`, never panic, and succeed exactly at the full length.
#[test]
fn writers_report_capacity_instead_of_panicking() {
    let mut rng = Rng(7);
    for (key, schema, ty) in types() {
        let v = value(schema, schema.resolve_type(ty).unwrap(), &mut rng);
        let full = encode_from_json(schema, ty, &v).unwrap();
        for cap in 0..full.len() {
            let mut buf = vec![0u8; cap];
            match encode_writer(key, ty, &v, &mut buf).unwrap() {
                Err(faas_karmem::Error::CapacityExceeded { needed, capacity }) => {
                    assert_eq!(capacity, cap);
                    assert!(
                        needed > cap && needed <= full.len(),
                        "{key} {ty}: needed {needed} for {cap}"
                    );
                }
                other => panic!(
                    "{key} {ty}: capacity {cap} of {} gave {other:?}",
                    full.len()
                ),
            }
        }
        let mut buf = vec![0u8; full.len()];
        assert_eq!(
            encode_writer(key, ty, &v, &mut buf).unwrap(),
            Ok(full.len())
        );
        assert_eq!(buf, full);
    }
}
