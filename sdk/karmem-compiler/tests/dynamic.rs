//! The schema-driven codec: JSON conventions, errors, and the reference layout.

use faas_karmem_compiler::{CodecError, decode_to_json, encode_from_json, parse_str};
use serde_json::json;

const SRC: &str = "karmem d @packed(true);
enum E int8 { Neg = -1; Zero = 0; }
struct In inline { A uint16; S []char; }
struct Leaf table { N []char; }
struct Root table {
    U uint64;
    I int64;
    F float32;
    D float64;
    B bool;
    En E;
    Ins [2]In;
    Lim [<2]uint8;
    L Leaf;
}
";

#[test]
fn encodes_and_decodes_with_exact_integers_and_field_order() {
    let s = parse_str("d.km", SRC).unwrap();
    let v = json!({
        "U": 18446744073709551615u64, "I": -9223372036854775808i64, "F": 0.1, "D": -2.5, "B": true, "En": -1,
        "Ins": [{"A": 7, "S": "x"}, {"A": 8, "S": "é"}], "Lim": [1, 2], "L": {"N": "leaf"}
    });
    let bytes = encode_from_json(&s, "Root", &v).unwrap();
    let back = decode_to_json(&s, "d.Root", &bytes).unwrap();
    assert_eq!(back, v);
    assert_eq!(
        back.to_string(),
        v.to_string(),
        "field order and number text must be preserved"
    );
}

#[test]
fn missing_fields_default_and_limits_apply_on_read() {
    let s = parse_str("d.km", SRC).unwrap();
    let bytes = encode_from_json(&s, "Root", &json!({"Lim": [1, 2, 3, 4], "En": "Neg"})).unwrap();
    let back = decode_to_json(&s, "Root", &bytes).unwrap();
    // The writer keeps every element (like the reference); readers cap [<2] at 2.
    assert_eq!(back["Lim"], json!([1, 2]));
    assert_eq!(back["En"], json!(-1));
    assert_eq!(back["Ins"], json!([{"A": 0, "S": ""}, {"A": 0, "S": ""}]));
    assert_eq!(back["L"], json!({"N": ""}));
}

#[test]
fn invalid_utf8_is_shown_as_hex_and_accepted_back() {
    let s = parse_str("d.km", SRC).unwrap();
    let v = json!({"L": {"N": {"invalid_utf8_hex": "ff61"}}});
    let bytes = encode_from_json(&s, "Root", &v).unwrap();
    assert_eq!(
        decode_to_json(&s, "Root", &bytes).unwrap()["L"]["N"],
        json!({"invalid_utf8_hex": "ff61"})
    );
}

#[test]
fn reports_bad_values_with_a_path() {
    let s = parse_str("d.km", SRC).unwrap();
    let cases = [
        (json!({"U": -1}), "Root.U: -1 is out of range for uint64"),
        (json!({"En": 200}), "Root.En: 200 is out of range for int8"),
        (
            json!({"En": "Bogus"}),
            "Root.En: `Bogus` is not a variant of enum E",
        ),
        (
            json!({"Ins": [{"A": "x"}]}),
            "Root.Ins[0].A: expected an integer",
        ),
        (
            json!({"Ins": [{}, {}, {}]}),
            "Root.Ins: 3 elements do not fit in [2]",
        ),
        (json!({"Nope": 1}), "Root: Root has no field `Nope`"),
        (json!({"B": 1}), "Root.B: expected true or false"),
        (json!({"L": {"N": 3}}), "Root.L.N: expected a string"),
        (json!([]), "Root: expected an object"),
    ];
    for (v, want) in cases {
        let e = encode_from_json(&s, "Root", &v).unwrap_err().to_string();
        assert!(e.starts_with(want), "{v}: {e}");
    }
    assert!(matches!(
        decode_to_json(&s, "Nope", &[]),
        Err(CodecError::UnknownType { .. })
    ));
}

#[test]
fn decoding_garbage_yields_defaults() {
    let s = parse_str("d.km", SRC).unwrap();
    let zero = decode_to_json(&s, "Root", &[]).unwrap();
    assert_eq!(zero["U"], json!(0));
    assert_eq!(decode_to_json(&s, "Root", &[0xff; 3]).unwrap(), zero);
    // A size that runs past the buffer makes the whole table default.
    let mut bytes = encode_from_json(&s, "Root", &json!({"U": 9})).unwrap();
    bytes[0] = 0xff;
    assert_eq!(decode_to_json(&s, "Root", &bytes).unwrap(), zero);
}
