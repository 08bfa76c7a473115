//! `faas schema` (cli/src/schema_tools.rs, compiled here as is): build, decode and encode on
//! every vector agree with the generated code and reproduce the vector bytes.

#[path = "../../../cli/src/schema_tools.rs"]
mod schema;

use clap::Parser;
use faas_karmem_tests::compare::diff;
use faas_karmem_tests::vectors::{dir, load_all, plain_type};
use faas_karmem_tests::{decode_view, encode_writer};
use schema::{SchemaCommand, run};

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: SchemaCommand,
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("km-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn encode_and_build_via_the_cli_agree_with_generated_code() {
    for (i, v) in load_all().iter().enumerate() {
        let (Some((key, ty)), Some(input), true) = (&v.writer, &v.input, v.roundtrip) else {
            continue;
        };
        let value = tmp(&format!("value{i}.json"));
        let out = tmp(&format!("out{i}.bin"));
        std::fs::write(&value, input.to_string()).unwrap();
        let km = dir().join(key);
        let args = [
            "faas-schema",
            "encode",
            km.to_str().unwrap(),
            ty,
            value.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        run(Cli::parse_from(args).cmd).unwrap();
        let written = std::fs::read(&out).unwrap();
        assert_eq!(written, v.bytes, "{}: CLI encode", v.name);
        let mut buf = vec![0u8; written.len()];
        let n = encode_writer(key, plain_type(ty), input, &mut buf)
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], &written[..], "{}: generated writer", v.name);
        // Schema-driven decode is what `faas schema decode` prints; compare it with the
        // generated views on every reader.
        for r in &v.readers {
            let schema = faas_karmem_compiler::parse_file(&dir().join(&r.schema)).unwrap();
            let dynamic = faas_karmem_compiler::decode_to_json(&schema, &r.ty, &v.bytes).unwrap();
            let generated = decode_view(&r.schema, plain_type(&r.ty), &v.bytes).unwrap();
            assert!(
                diff(&dynamic, &generated).is_none(),
                "{}: {:?}",
                v.name,
                diff(&dynamic, &generated)
            );
        }
    }
    let km = dir().join("schemas/simple_packed.km");
    let out = tmp("gen");
    run(Cli::parse_from([
        "faas-schema",
        "build",
        km.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .cmd)
    .unwrap();
    let code = std::fs::read_to_string(out.join("simplepacked.rs")).unwrap();
    assert!(code.contains("pub struct SimpleView<'a>"));
}

#[test]
fn cli_errors_are_reported_not_panics() {
    let km = tmp("bad.km");
    std::fs::write(&km, "karmem x;\nstruct A table { B Nope; }\n").unwrap();
    let err = run(Cli::parse_from([
        "faas-schema",
        "decode",
        km.to_str().unwrap(),
        "A",
        "missing.bin",
    ])
    .cmd)
    .unwrap_err();
    assert!(
        err.to_string()
            .ends_with(":2:20: unknown type `Nope` (types must be declared before they are used)"),
        "{err}"
    );
    let good = dir().join("schemas/simple_packed.km");
    let value = tmp("bad.json");
    std::fs::write(&value, r#"{"Id": -1}"#).unwrap();
    let err = run(Cli::parse_from([
        "faas-schema",
        "encode",
        good.to_str().unwrap(),
        "Simple",
        value.to_str().unwrap(),
        "-o",
        "/dev/null",
    ])
    .cmd)
    .unwrap_err();
    assert_eq!(err.to_string(), "Simple.Id: -1 is out of range for uint64");
}
