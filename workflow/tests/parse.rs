//! Valid manifests: what they parse to, and the behaviour of the parsed workflow.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use faas_workflow::{Function, FunctionKind, HttpTrigger, Limits, ManifestError, Route, Workflow};

fn parse(text: &str) -> Workflow {
    Workflow::parse("workflow.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> ManifestError {
    match Workflow::parse("workflow.toml", text) {
        Ok(wf) => panic!("expected an error, got {wf:?}"),
        Err(e) => e,
    }
}

fn good_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/good")
}

#[test]
fn a_manifest_with_every_field_parses_into_the_full_model() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let expected = Workflow {
        name: "hello".into(),
        tenant: "demo".into(),
        description: Some("optional text".into()),
        functions: BTreeMap::from([(
            "hello".to_owned(),
            Function {
                component: "../../target/wasm32-wasip2/release/hello.wasm".into(),
                build: Some("cargo build --release --target wasm32-wasip2 -p hello".into()),
                kind: FunctionKind::Http,
                limits: Limits {
                    memory_mb: Some(64),
                    timeout_ms: Some(5000),
                    fuel: Some(1_000_000_000),
                },
                config: BTreeMap::from([("greeting".to_owned(), "hi".to_owned())]),
            },
        )]),
        http_triggers: vec![HttpTrigger {
            route: Route::parse("/hello").unwrap(),
            function: "hello".into(),
        }],
    };
    assert_eq!(wf, expected);
}

#[test]
fn omitted_optional_fields_take_their_defaults() {
    let wf = parse(
        r#"
        name = "hello"
        tenant = "demo"
        [functions.hello]
        component = "hello.wasm"
        [[triggers.http]]
        route = "/"
        function = "hello"
        "#,
    );
    let f = &wf.functions["hello"];
    assert_eq!(wf.description, None);
    assert_eq!(f.build, None);
    assert_eq!(f.kind, FunctionKind::Http);
    assert_eq!(f.limits, Limits::default());
    assert!(f.config.is_empty());
}

#[test]
fn limits_at_the_edges_of_their_ranges_are_accepted() {
    let wf = parse(
        r#"
        name = "a"
        tenant = "b"
        [functions.small]
        component = "s.wasm"
        memory_mb = 1
        timeout_ms = 1
        fuel = 1
        [functions.big]
        component = "b.wasm"
        memory_mb = 4096
        timeout_ms = 600000
        fuel = 18446744073709551615
        [[triggers.http]]
        route = "/s"
        function = "small"
        [[triggers.http]]
        route = "/b"
        function = "big"
        "#,
    );
    assert_eq!(wf.functions["small"].limits.memory_mb, Some(1));
    assert_eq!(wf.functions["big"].limits.memory_mb, Some(4096));
    assert_eq!(wf.functions["big"].limits.timeout_ms, Some(600_000));
    assert_eq!(wf.functions["big"].limits.fuel, Some(u64::MAX));
}

#[test]
fn step_functions_need_no_trigger() {
    let wf = parse(
        r#"
        name = "shop"
        tenant = "demo"
        [functions.checkout]
        component = "checkout.wasm"
        [functions.charge]
        component = "charge.wasm"
        kind = "step"
        [[triggers.http]]
        route = "/checkout"
        function = "checkout"
        "#,
    );
    assert_eq!(wf.functions["charge"].kind, FunctionKind::Step);
}

#[test]
fn component_paths_stay_relative_until_resolved_against_the_manifest_directory() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let relative = Path::new("../../target/wasm32-wasip2/release/hello.wasm");
    assert_eq!(wf.functions["hello"].component, relative);
    assert_eq!(
        wf.component_path(Path::new("/srv/functions/hello"), "hello"),
        Some(Path::new("/srv/functions/hello").join(relative))
    );
    assert_eq!(wf.component_path(Path::new("/srv"), "nope"), None);
}

#[test]
fn absolute_component_paths_are_not_changed_by_resolution() {
    let function = Function {
        component: "/opt/wasm/hello.wasm".into(),
        build: None,
        kind: FunctionKind::Http,
        limits: Limits::default(),
        config: BTreeMap::new(),
    };
    assert_eq!(
        function.component_path(Path::new("/srv")),
        Path::new("/opt/wasm/hello.wasm")
    );
}

#[test]
fn route_for_prefers_exact_routes_then_longer_prefixes() {
    let wf = parse(
        r#"
        name = "api"
        tenant = "demo"
        [functions.root]
        component = "root.wasm"
        [functions.api]
        component = "api.wasm"
        [functions.users]
        component = "users.wasm"
        [functions.me]
        component = "me.wasm"
        [[triggers.http]]
        route = "/..."
        function = "root"
        [[triggers.http]]
        route = "/api/..."
        function = "api"
        [[triggers.http]]
        route = "/api/users/..."
        function = "users"
        [[triggers.http]]
        route = "/api/users/me"
        function = "me"
        "#,
    );
    let target = |path: &str| wf.route_for(path).map(|t| t.function.as_str());
    assert_eq!(target("/"), Some("root"));
    assert_eq!(target("/apiary"), Some("root"));
    assert_eq!(target("/api"), Some("api"));
    assert_eq!(target("/api/orders"), Some("api"));
    assert_eq!(target("/api/users"), Some("users"));
    assert_eq!(target("/api/users/42"), Some("users"));
    assert_eq!(target("/api/users/me"), Some("me"));
    assert_eq!(target("/api/users/me/avatar"), Some("users"));
}

#[test]
fn route_for_returns_none_when_nothing_matches() {
    let wf = parse(
        r#"
        name = "hello"
        tenant = "demo"
        [functions.hello]
        component = "hello.wasm"
        [[triggers.http]]
        route = "/hello"
        function = "hello"
        "#,
    );
    assert!(wf.route_for("/goodbye").is_none());
    assert!(wf.route_for("/hello/world").is_none());
}

#[test]
fn an_exact_route_and_a_prefix_route_on_the_same_path_may_coexist() {
    let wf = parse(
        r#"
        name = "hello"
        tenant = "demo"
        [functions.index]
        component = "index.wasm"
        [functions.files]
        component = "files.wasm"
        [[triggers.http]]
        route = "/files"
        function = "index"
        [[triggers.http]]
        route = "/files/..."
        function = "files"
        "#,
    );
    assert_eq!(wf.route_for("/files").unwrap().function, "index");
    assert_eq!(wf.route_for("/files/a.txt").unwrap().function, "files");
}

#[test]
fn the_parsed_workflow_round_trips_through_json() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let json = serde_json::to_string(&wf).unwrap();
    let back: Workflow = serde_json::from_str(&json).unwrap();
    assert_eq!(back, wf);
}

#[test]
fn the_json_shape_uses_plain_strings_for_routes_and_kinds() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let json = serde_json::to_value(&wf).unwrap();
    assert_eq!(json["http_triggers"][0]["route"], "/hello");
    assert_eq!(json["functions"]["hello"]["kind"], "http");
    assert_eq!(json["functions"]["hello"]["limits"]["memory_mb"], 64);
}

#[test]
fn errors_expose_file_line_column_and_field_separately() {
    let err = parse_err(
        "name = \"hello\"\ntenant = \"demo\"\n[functions.hello]\ncomponent = \"h.wasm\"\n\
         [[triggers.http]]\nroute = \"/h\"\nfunction = \"helo\"\n",
    );
    assert_eq!(err.file(), "workflow.toml");
    assert_eq!(err.line(), 7);
    assert_eq!(err.column(), 12);
    assert_eq!(err.field(), "triggers.http[0].function");
    assert_eq!(err.message(), "unknown function `helo` (defined: hello)");
    let json = serde_json::to_value(err.diagnostic().unwrap()).unwrap();
    assert_eq!(json["line"], 7);
    assert_eq!(json["field"], "triggers.http[0].function");
}

#[test]
fn the_earliest_of_several_problems_is_reported() {
    let err = parse_err(
        r#"
        name = "hello"
        tenant = "Demo"
        [functions.hello]
        component = "h.wasm"
        memory_mb = 0
        [[triggers.http]]
        route = "h"
        function = "hello"
        "#,
    );
    assert_eq!(err.field(), "tenant");
}

#[test]
fn a_misspelt_trigger_function_is_reported_rather_than_the_function_it_leaves_unused() {
    let err = parse_err(
        r#"
        name = "hello"
        tenant = "demo"
        [functions.hello]
        component = "h.wasm"
        [[triggers.http]]
        route = "/hello"
        function = "helo"
        "#,
    );
    assert_eq!(err.field(), "triggers.http[0].function");
}

#[test]
fn from_file_names_the_path_in_errors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/unused_function.toml");
    let err = Workflow::from_file(&path).unwrap_err();
    assert_eq!(err.file(), path.display().to_string());
    assert!(
        err.to_string()
            .starts_with(&format!("{}:7:12: ", path.display()))
    );
}

#[test]
fn an_unreadable_file_is_a_read_error_without_a_position() {
    let path = good_dir().join("does-not-exist.toml");
    let err = Workflow::from_file(&path).unwrap_err();
    assert!(matches!(err, ManifestError::Read { .. }), "{err:?}");
    assert_eq!(err.line(), 0);
    assert_eq!(err.field(), "");
    assert!(err.to_string().contains("does-not-exist.toml"));
}
