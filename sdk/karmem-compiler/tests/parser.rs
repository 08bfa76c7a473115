//! Parser and validator: the language constructs, computed layouts, interfaces, and
//! error messages located at file:line:column.

use faas_karmem_compiler::*;

const SIMPLE: &str = "karmem simple @packed(false);

enum Color uint8 {
    Red;
    Green;
    Blue = 200;
}

struct Point inline {
    X int32;
    Y int32;
}

struct Simple table {
    Id    uint64;
    Name  []char;
    Pos   Point;
    Color Color;
}
";

#[test]
fn computes_the_reference_layout() {
    let s = parse_str("simple.km", SIMPLE).unwrap();
    assert_eq!(s.name, "simple");
    assert!(!s.packed);
    let point = s.find_struct("Point").unwrap();
    // Unpacked inline: 8 bytes of content padded by a full 8.
    assert_eq!(
        point.size,
        StructSize {
            content: 8,
            padding: 8,
            total: 16,
            minimum: 8
        }
    );
    let simple = s.find_struct("Simple").unwrap();
    let offsets: Vec<(u32, u32)> = simple.fields.iter().map(|f| (f.offset, f.size)).collect();
    assert_eq!(offsets, vec![(4, 8), (12, 12), (24, 16), (40, 1)]);
    assert_eq!(
        simple.size,
        StructSize {
            content: 41,
            padding: 0,
            total: 41,
            minimum: 8
        }
    );

    let packed = parse_str("p.km", &SIMPLE.replace("@packed(false)", "@packed(true)")).unwrap();
    let simple = packed.find_struct("Simple").unwrap();
    assert_eq!(simple.size.total, 4 + 8 + 8 + 8 + 1);
    assert_eq!(simple.size.minimum, 4);
}

#[test]
fn enums_take_implicit_values_from_their_position() {
    let s = parse_str(
        "e.km",
        "karmem e;\nenum E int16 { A = 5; B; Zero = 0; C = -7; }\n",
    )
    .unwrap();
    let values: Vec<i128> = s.enums[0].variants.iter().map(|v| v.value).collect();
    assert_eq!(values, vec![5, 1, 0, -7]);
    assert_eq!(s.enums[0].repr, Primitive::I16);
}

#[test]
fn parses_shapes_tags_and_struct_overrides() {
    let src = "karmem t @packed() @golang.package(`a/b`);
struct In inline @packed(false) { A uint8; S []char; }
struct T table @id(`9`) {
    Fixed [4]uint16;
    Lim [<3]In;
    Str [<8]char;
    Any []In;
}
";
    let s = parse_str("t.km", src).unwrap();
    assert!(s.packed);
    assert_eq!(
        s.tags[1],
        Tag {
            name: "golang.package".into(),
            value: "a/b".into()
        }
    );
    let inl = s.find_struct("In").unwrap();
    assert!(!inl.packed);
    // 1 byte + 12-byte unpacked slice header = 13, padded to 16.
    assert_eq!(inl.size.total, 16);
    let t = s.find_struct("T").unwrap();
    let shapes: Vec<Shape> = t.fields.iter().map(|f| f.ty.shape).collect();
    assert_eq!(
        shapes,
        vec![
            Shape::Array(4),
            Shape::LimitedSlice(3),
            Shape::LimitedSlice(8),
            Shape::Slice
        ]
    );
    assert_eq!(t.fields[0].size, 8);
    assert_eq!(t.fields[1].elem_size, 16);
    assert!(t.fields[2].ty.is_string());
    assert_eq!(
        t.tags[0],
        Tag {
            name: "id".into(),
            value: "9".into()
        }
    );
}

#[test]
fn parses_interfaces_with_memories() {
    let src = "karmem img;
struct Frame table { W uint32; }
interface resize (fanout) {
    input: memory (import: write, export: read, 64);
    output: memory (import: read, export: readwrite, pages: 2);
    process: fn(frame: Frame @ input) -> Frame @ output;
    fn stats(a: Frame @ output, b: Frame @ input);
}
";
    let s = parse_str("img.km", src).unwrap();
    let i = s.find_interface("resize").unwrap();
    assert_eq!(i.patterns, vec!["fanout"]);
    let input = i.memory("input").unwrap();
    assert_eq!(
        (input.importer, input.exporter, input.max_pages),
        (Access::Write, Access::Read, 64)
    );
    assert_eq!(input.max_bytes(), 64 * 65536);
    assert_eq!(i.memory("output").unwrap().exporter, Access::ReadWrite);
    let f = &i.functions[0];
    assert_eq!(
        (
            f.name.as_str(),
            f.args[0].type_name.as_str(),
            f.args[0].memory.as_str()
        ),
        ("process", "Frame", "input")
    );
    assert_eq!(f.result.as_ref().unwrap().memory, "output");
    assert_eq!(i.functions[1].args.len(), 2);
    let code = generate_rust(&s);
    assert!(code.contains("pub mod resize"));
    assert!(code.contains("max_pages: 64"));
}

fn error(src: &str) -> String {
    parse_str("bad.km", src).unwrap_err().to_string()
}

#[test]
fn errors_name_file_line_and_column() {
    let cases: &[(&str, &str)] = &[
        ("struct A table {}", "bad.km:1:1: expected header"),
        (
            "karmem x;\nstruct A table {\n    B Missing;\n}",
            "bad.km:3:7: unknown type `Missing`",
        ),
        (
            "karmem x;\nstruct a table { B uint8; }",
            "bad.km:2:8: struct name `a` must start with an uppercase",
        ),
        (
            "karmem x;\nstruct A { B uint8; }",
            "bad.km:2:10: expected struct kind",
        ),
        (
            "karmem x;\nstruct A table {\n B uint8;\n B uint16;\n}",
            "bad.km:4:2: duplicated field name `B`",
        ),
        (
            "karmem x;\nenum E uint8 { A = 1; }",
            "bad.km:2:6: enum `E` must have a variant with value 0",
        ),
        (
            "karmem x;\nenum E uint8 { A; B = 256; }",
            "bad.km:2:23: enum value 256 is out of range for uint8",
        ),
        (
            "karmem x;\nenum E float32 { A; }",
            "bad.km:2:8: invalid enum type `float32`",
        ),
        (
            "karmem x;\nstruct T table { A uint8; }\nstruct U table { L []T; }",
            "bad.km:3:20: enums and tables cannot",
        ),
        (
            "karmem x @packed(maybe);",
            "bad.km:1:10: invalid value `maybe` for @packed",
        ),
        (
            "karmem x;\nstruct A table { B uint8 }",
            "bad.km:2:26: expected `;`, found `}`",
        ),
        (
            "karmem x;\nstruct A table { B [<]uint8; }",
            "bad.km:2:22: expected array length",
        ),
        (
            "karmem x;\nstruct A table { B uint8; }\nstruct A inline { C uint8; }",
            "bad.km:3:8: duplicated type name `A`",
        ),
        (
            "karmem x;\nstruct E table { }",
            "bad.km:2:8: struct `E` has no fields",
        ),
        (
            "karmem x;\nstruct F table { A uint8; }\ninterface i {\n m: memory (import: read, export: read, 1);\n}",
            "bad.km:4:2: memory `m` cannot be written by either side",
        ),
        (
            "karmem x;\nstruct F table { A uint8; }\ninterface i {\n m: memory (import: write, export: read, 1);\n f: fn(a: F @ other);\n}",
            "bad.km:5:15: memory `other` is not declared in interface `i`",
        ),
        (
            "karmem x;\ninterface i {\n m: memory (import: write, export: sometimes, 1);\n}",
            "bad.km:3:36: unknown access `sometimes`",
        ),
        (
            "karmem x;\ninterface i {\n m: memory (import: write, export: read, 0);\n}",
            "bad.km:3:42: maximum size must be",
        ),
        (
            "karmem x;\ninterface i {\n m: memory (import: write, export: read);\n}",
            "bad.km:3:12: memory needs a maximum size",
        ),
        (
            "karmem x;\nstruct F table { A uint8; }\ninterface i {\n f: fn(a: G @ m);\n}",
            "bad.km:4:11: unknown struct type `G`",
        ),
        (
            "karmem x;\n/* never closed",
            "bad.km:2:1: unterminated block comment",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|(src, want)| (src, error(src), want))
        .filter(|(_, got, want)| !got.starts_with(*want))
        .map(|(src, got, want)| format!("for {src:?}\n got: {got}\nwant: {want}..."))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A schema may be a tenant's upload of up to a megabyte, and its error is copied into
/// the deploy's answer (once per step naming the file, before that was fixed): a token
/// or name quoted in a message is cut to its first [`MAX_QUOTED_CHARS`] characters, and
/// the message still names the file, line and column.
#[test]
fn errors_quote_at_most_the_start_of_a_huge_token() {
    let huge = |c: &str| c.repeat(1 << 20);
    let cut = |c: &str| {
        let start: String = huge(c).chars().take(MAX_QUOTED_CHARS).collect();
        format!("{start}…")
    };
    let cases: Vec<(String, String)> = vec![
        (
            format!("karmem x;\n{}", huge("A")),
            format!(
                "bad.km:2:1: expected `enum`, `struct` or `interface`, found `{}`",
                cut("A")
            ),
        ),
        (
            format!("karmem x;\n{}", huge("1")),
            format!("found number {}", cut("1")),
        ),
        (
            format!("karmem x;\n{}", huge("1a")),
            format!("bad.km:2:1: invalid number `{}`", cut("1a")),
        ),
        (
            format!("karmem x;\nstruct A table {{ B [{}]uint8; }}", huge("9")),
            format!(
                "bad.km:2:21: array length `{}` does not fit in 32 bits",
                cut("9")
            ),
        ),
        (
            format!("karmem x @packed(`{}`);", huge("é")),
            format!("bad.km:1:10: invalid value `{}` for @packed", cut("é")),
        ),
        (
            format!("karmem x;\nstruct A table {{ B {}; }}", huge("T")),
            format!("bad.km:2:20: unknown type `{}` (types must", cut("T")),
        ),
        (
            format!(
                "karmem x;\ninterface i {{\n m: memory (import: write, export: {}, 1);\n}}",
                huge("r")
            ),
            format!("bad.km:3:36: unknown access `{}`, expected", cut("r")),
        ),
    ];
    for (src, want) in cases {
        let got = error(&src);
        assert!(got.len() < 512, "{} bytes for {want}", got.len());
        assert!(got.contains(&want), "got: {got}\nwant: {want}");
    }
}

#[test]
fn types_must_be_declared_before_use() {
    let e = error("karmem x;\nstruct A table { B B; }\nstruct B table { C uint8; }");
    assert!(e.contains("declared before"), "{e}");
    let e = error("karmem x;\nstruct A table { B A; }");
    assert!(e.contains("cannot contain itself"), "{e}");
}

#[test]
fn parse_file_names_the_file() {
    let dir = std::env::temp_dir().join(format!("km-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.km");
    std::fs::write(&path, "karmem x;\nstruct A table { B Nope; }\n").unwrap();
    let e = parse_file(&path).unwrap_err();
    assert_eq!(e.file, path.display().to_string());
    assert_eq!((e.line, e.column), (2, 20));
    let missing = parse_file(&dir.join("missing.km")).unwrap_err();
    assert!(missing.message.contains("cannot read file"));

    // The build helper writes `<out>/<package>.rs`.
    std::fs::write(&path, SIMPLE).unwrap();
    let out = build::Builder::new()
        .runtime_path("::km")
        .out_dir(&dir)
        .compile(&path)
        .unwrap();
    assert_eq!(out, dir.join("simple.rs"));
    let code = std::fs::read_to_string(out).unwrap();
    assert!(code.contains("::km::Writer") && !code.contains("faas_karmem"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A schema is a tenant's upload (at most 1 MiB with the manifest), resolved by the
/// gateway at deploy, holding a thread that serves requests and the deploy lock: its
/// checks must cost what its declarations are long, not their square. A megabyte of
/// one kind of declaration at a time (fields of one struct, variants of one enum,
/// structs each holding the one before, functions of one interface) resolves here in
/// a fraction of a second; with a scan of the fields before each field, the first
/// took 15 s in this test's (debug) build.
#[test]
fn a_megabyte_of_declarations_resolves_in_time_linear_in_them() {
    use std::time::{Duration, Instant};
    let megabyte = |head: &str, line: &dyn Fn(usize) -> String, tail: &str| {
        let mut text = format!("karmem big @packed(true);\n\n{head}");
        let mut index = 0;
        while text.len() < (1 << 20) - 4096 {
            text.push_str(&line(index));
            index += 1;
        }
        text.push_str(tail);
        (text, index)
    };
    let schemas = [
        megabyte(
            "struct Wide table {\n",
            &|i| format!("    F{i} uint8;\n"),
            "}\n",
        ),
        megabyte("enum Kind uint32 {\n", &|i| format!("    K{i};\n"), "}\n"),
        megabyte(
            "struct S0 inline {\n    V uint8;\n}\n",
            &|i| format!("struct S{} inline {{\n    P S{i};\n}}\n", i + 1),
            "",
        ),
        megabyte(
            "struct One table {\n    V uint8;\n}\n\ninterface Many {\n    m: memory (import: write, export: read, 2);\n",
            &|i| format!("    f{i}: fn(o: One @ m);\n"),
            "}\n",
        ),
    ];
    for (text, count) in &schemas {
        let started = Instant::now();
        let schema = parse_str("big.km", text).unwrap();
        let took = started.elapsed();
        let what = format!("{count} declarations, {} structs", schema.structs.len());
        assert!(took < Duration::from_secs(5), "{what} took {took:?}");
    }
}

/// The schema is read as it is parsed, so the first problem in the text is the one
/// reported, whether the parser or the lexer meets it; a character no token starts
/// with is still reported where it stands, also right after a parse error.
#[test]
fn the_first_problem_in_the_text_is_reported_lexer_or_parser() {
    assert_eq!(
        error("karmem x;\nstruct 5 table {}\n#"),
        "bad.km:2:8: expected struct name, found number 5"
    );
    assert_eq!(
        error("karmem x;\nstruct A table { B uint8; }\n  #"),
        "bad.km:3:3: unexpected character '#'"
    );
    assert_eq!(
        error("karmem x;\nstruct A table { B # }"),
        "bad.km:2:20: unexpected character '#'"
    );
    assert_eq!(
        error("karmem x;\nstruct A table { B uint8; }\n/* open"),
        "bad.km:3:1: unterminated block comment"
    );
    // A bad character right behind a parse error (where the parser looks one token
    // ahead) does not hide it, however close.
    assert_eq!(
        error("karmem x;\nstruct 5 #"),
        "bad.km:2:8: expected struct name, found number 5"
    );
    assert_eq!(
        error("karmem x;\nenum E uint8 { A = x # }"),
        error("karmem x;\nenum E uint8 { A = x y }"),
    );
}
