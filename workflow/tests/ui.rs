//! "UI tests" in the style of Spin's: every `tests/ui/*.toml` is a broken manifest and
//! its sibling `*.err` holds the exact message it must produce. Run with `BLESS=1` to
//! rewrite the `.err` files from the current output, then review the diff: each message
//! must point at the right line, column and field.
//!
//! Every manifest is parsed with the `tests/ui/*.km` schemas (by file name), so the
//! cases about a step's `interface` can name them.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use faas_workflow::Workflow;

#[test]
fn every_broken_manifest_reports_its_expected_error() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    let bless = std::env::var_os("BLESS").is_some_and(|v| v == "1");
    let mut cases: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no ui tests found in {}", dir.display());
    let schemas: BTreeMap<String, String> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "km"))
        .map(|path| {
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            (name, fs::read_to_string(&path).unwrap())
        })
        .collect();

    let mut failures = Vec::new();
    for toml_path in &cases {
        let file_name = toml_path.file_name().unwrap().to_str().unwrap();
        let err_path = toml_path.with_extension("err");
        let text = fs::read_to_string(toml_path).unwrap();
        let actual = match Workflow::parse_with_schemas(file_name, &text, &schemas) {
            Ok(_) => format!("<no error: {file_name} parsed successfully>"),
            Err(e) => e.to_string(),
        };
        if bless {
            fs::write(&err_path, format!("{actual}\n")).unwrap();
            continue;
        }
        let expected = fs::read_to_string(&err_path)
            .unwrap_or_else(|_| format!("<missing {}>", err_path.display()));
        if expected.trim_end() != actual {
            failures.push(format!(
                "{file_name}\n  expected: {}\n  actual:   {actual}",
                expected.trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} ui tests failed (rerun with BLESS=1 to update, then review):\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn every_expected_error_file_has_a_manifest() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "err") {
            assert!(
                path.with_extension("toml").exists(),
                "{} has no .toml sibling",
                path.display()
            );
        }
    }
}

/// Names and routes come from a tenant's manifest, of any length, and each reference
/// to an unknown name made a message listing every declared name: a function named
/// with 100 KB and 2,000 triggers naming another took 245 MB to parse (a 330 KB
/// manifest could take a gigabyte). A message now quotes a few names, cut short.
#[test]
fn an_error_quotes_no_more_of_the_manifest_than_a_few_short_names() {
    let parse_err = |text: &str| {
        faas_workflow::Workflow::parse("workflow.toml", text)
            .unwrap_err()
            .to_string()
    };
    let manifest = |functions: &[String], triggers: usize| {
        let mut text = "name = \"p\"\ntenant = \"t\"\n".to_owned();
        for name in functions {
            text.push_str(&format!("[functions.{name}]\ncomponent = \"c.wasm\"\n"));
        }
        for route in 0..triggers {
            text.push_str(&format!(
                "[[triggers.http]]\nroute = \"/r{route}\"\nfunction = \"g\"\n"
            ));
        }
        text
    };
    let error = parse_err(&manifest(&["a".repeat(100_000)], 2_000));
    assert!(error.len() < 400, "{} bytes: {error:.300}", error.len());
    assert!(error.starts_with("workflow.toml:3:12: "), "{error}");

    let functions: Vec<String> = (0..41).map(|i| format!("f{i}")).collect();
    let error = parse_err(&manifest(&functions, 2_000));
    assert!(error.contains("unknown function `g`"), "{error}");
    assert!(error.contains("and 25 more"), "{error}");
    assert!(error.len() < 400, "{error}");

    // A route is at most 1 KiB: the route checks compare routes by their prefixes.
    let route = format!("/{}", "a/".repeat(600));
    let text = format!(
        "name = \"p\"\ntenant = \"t\"\n[functions.f]\ncomponent = \"c.wasm\"\n\
         [[triggers.http]]\nroute = \"{route}\"\nfunction = \"f\"\n"
    );
    let error = parse_err(&text);
    assert!(error.contains("1201 bytes long"), "{error}");
    assert!(error.len() < 400, "{error}");
    // Read back from a record an earlier version wrote, it still parses: one such
    // record would otherwise fail every read of the deployments.
    assert!(route.parse::<faas_workflow::Route>().is_ok());
}
