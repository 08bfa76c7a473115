//! Valid manifests: what they parse to, and the behaviour of the parsed workflow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use faas_workflow::{
    Edge, EdgeMode, FanOut, Function, FunctionKind, HttpTrigger, InterfaceRef, JoinPolicy, Limits,
    MAX_REDIS_NAME_LEN, ManifestError, MemoryLimit, OnFailure, OutboundAccess, RedisTrigger,
    RetryPolicy, Route, RunSettings, SchemaType, Step, StepMemories, StreamTrigger, TriggerTarget,
    Workflow, is_valid_redis_name,
};

fn parse(text: &str) -> Workflow {
    Workflow::parse("workflow.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> ManifestError {
    match Workflow::parse("workflow.toml", text) {
        Ok(wf) => panic!("expected an error, got {wf:?}"),
        Err(e) => e,
    }
}

fn function(name: &str) -> TriggerTarget {
    TriggerTarget::Function(name.to_owned())
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
                allowed_outbound_hosts: Default::default(),
            },
        )]),
        steps: BTreeMap::new(),
        edges: Vec::new(),
        settings: RunSettings::default(),
        http_triggers: vec![HttpTrigger {
            route: Route::parse("/hello").unwrap(),
            target: function("hello"),
        }],
        redis_triggers: Vec::new(),
        stream_triggers: Vec::new(),
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
        allowed_outbound_hosts: Default::default(),
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
    let target = |path: &str| wf.route_for(path).map(|t| t.target.clone());
    assert_eq!(target("/"), Some(function("root")));
    assert_eq!(target("/apiary"), Some(function("root")));
    assert_eq!(target("/api"), Some(function("api")));
    assert_eq!(target("/api/orders"), Some(function("api")));
    assert_eq!(target("/api/users"), Some(function("users")));
    assert_eq!(target("/api/users/42"), Some(function("users")));
    assert_eq!(target("/api/users/me"), Some(function("me")));
    assert_eq!(target("/api/users/me/avatar"), Some(function("users")));
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
    assert_eq!(wf.route_for("/files").unwrap().target, function("index"));
    assert_eq!(
        wf.route_for("/files/a.txt").unwrap().target,
        function("files")
    );
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
    assert_eq!(json["http_triggers"][0]["function"], "hello");
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

fn karmem(file: &str, name: &str) -> SchemaType {
    SchemaType::Karmem {
        file: file.into(),
        name: name.into(),
    }
}

#[test]
fn a_v2_manifest_parses_into_steps_edges_settings_and_step_triggers() {
    let wf = Workflow::from_file(&good_dir().join("wordcount.toml")).unwrap();
    let chunk = karmem("wordcount.km", "Chunk");
    let counts = karmem("schemas/counts.km", "Counts");
    assert_eq!(
        wf.steps,
        BTreeMap::from([
            (
                "split".to_owned(),
                Step {
                    function: "split".into(),
                    input: SchemaType::Bytes,
                    output: chunk.clone(),
                    retry: RetryPolicy {
                        attempts: 3,
                        backoff_ms: 20
                    },
                    interface: None,
                    memories: StepMemories::default(),
                }
            ),
            (
                "count".to_owned(),
                Step {
                    function: "count".into(),
                    input: chunk.clone(),
                    output: counts.clone(),
                    retry: RetryPolicy::default(),
                    interface: None,
                    memories: StepMemories::default(),
                }
            ),
            (
                "merge".to_owned(),
                Step {
                    function: "merge".into(),
                    input: counts.clone(),
                    output: SchemaType::Json,
                    retry: RetryPolicy::default(),
                    interface: None,
                    memories: StepMemories::default(),
                }
            ),
        ])
    );
    assert_eq!(
        wf.edges,
        vec![
            Edge {
                from: "count".into(),
                to: "merge".into(),
                schema_type: counts,
                mode: EdgeMode::Join(JoinPolicy {
                    timeout_ms: 5000,
                    on_failure: OnFailure::Continue
                }),
            },
            Edge {
                from: "split".into(),
                to: "count".into(),
                schema_type: chunk,
                mode: EdgeMode::FanOut(FanOut::Each),
            },
        ]
    );
    assert_eq!(
        wf.settings,
        RunSettings {
            concurrency: 8,
            timeout_ms: 120_000,
            replicas: 1,
            spread_branches: false,
        }
    );
    assert_eq!(
        wf.route_for("/wordcount").unwrap().target,
        TriggerTarget::Step("split".into())
    );
    assert_eq!(wf.route_for("/health").unwrap().target, function("health"));
}

#[test]
fn the_chain_follows_the_edges_from_the_entry_step_whatever_their_order_in_the_file() {
    let wf = Workflow::from_file(&good_dir().join("wordcount.toml")).unwrap();
    assert_eq!(wf.entry_step(), Some("split"));
    let chain: Vec<(&str, Option<(&str, &str)>)> = wf
        .chain()
        .into_iter()
        .map(|(step, edge)| (step, edge.map(|e| (e.from.as_str(), e.to.as_str()))))
        .collect();
    assert_eq!(
        chain,
        [
            ("split", None),
            ("count", Some(("split", "count"))),
            ("merge", Some(("count", "merge"))),
        ]
    );
}

#[test]
fn karmem_files_lists_every_schema_file_any_type_mentions_once() {
    let wf = Workflow::from_file(&good_dir().join("wordcount.toml")).unwrap();
    assert_eq!(
        wf.karmem_files(),
        BTreeSet::from(["schemas/counts.km".to_owned(), "wordcount.km".to_owned()])
    );
}

#[test]
fn omitted_v2_fields_take_their_defaults() {
    let wf = parse(
        r#"
        name = "pipe"
        tenant = "demo"
        [functions.upper]
        component = "upper.wasm"
        kind = "step"
        [functions.fanned]
        component = "fanned.wasm"
        kind = "step"
        [functions.joined]
        component = "joined.wasm"
        kind = "step"
        [steps.upper]
        function = "upper"
        input = "text"
        output = "text"
        retries = {}
        [steps.fanned]
        function = "fanned"
        input = "text"
        output = "text"
        [steps.joined]
        function = "joined"
        input = "text"
        output = "text"
        [[edges]]
        from = "upper"
        to = "fanned"
        type = "text"
        fan_out = 1024
        [[edges]]
        from = "fanned"
        to = "joined"
        type = "text"
        join = {}
        "#,
    );
    assert_eq!(wf.steps["upper"].retry, RetryPolicy::default());
    assert_eq!(wf.steps["upper"].retry.attempts, 1);
    assert_eq!(wf.steps["fanned"].retry.backoff_ms, 0);
    assert_eq!(wf.edges[0].mode, EdgeMode::FanOut(FanOut::Static(1024)));
    assert_eq!(
        wf.edges[1].mode,
        EdgeMode::Join(JoinPolicy {
            timeout_ms: 30_000,
            on_failure: OnFailure::Fail
        })
    );
    assert_eq!(
        wf.settings,
        RunSettings {
            concurrency: 16,
            timeout_ms: 60_000,
            replicas: 1,
            spread_branches: false,
        }
    );
    // No trigger starts a run yet: allowed, runs may be started some other way later.
    assert!(wf.http_triggers.is_empty());
    assert!(wf.karmem_files().is_empty());
}

#[test]
fn an_edge_without_fan_out_or_join_is_a_sequence() {
    let wf = parse(
        r#"
        name = "pipe"
        tenant = "demo"
        [functions.a]
        component = "a.wasm"
        kind = "step"
        [functions.b]
        component = "b.wasm"
        kind = "step"
        [steps.a]
        function = "a"
        input = "json"
        output = "json"
        [steps.b]
        function = "b"
        input = "json"
        output = "json"
        [[edges]]
        from = "a"
        to = "b"
        type = "json"
        "#,
    );
    assert_eq!(wf.edges[0].mode, EdgeMode::Sequence);
}

#[test]
fn a_single_step_is_its_own_entry_and_whole_chain() {
    let wf = parse(
        r#"
        name = "echo"
        tenant = "demo"
        [functions.echo]
        component = "echo.wasm"
        kind = "step"
        [steps.echo]
        function = "echo"
        input = "bytes"
        output = "bytes"
        [[triggers.http]]
        route = "/echo"
        step = "echo"
        "#,
    );
    assert_eq!(wf.entry_step(), Some("echo"));
    assert_eq!(wf.chain(), vec![("echo", None)]);
}

#[test]
fn a_v1_manifest_has_no_steps_no_entry_and_default_run_settings() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    assert!(wf.steps.is_empty());
    assert!(wf.edges.is_empty());
    assert_eq!(wf.entry_step(), None);
    assert!(wf.chain().is_empty());
    assert_eq!(wf.settings, RunSettings::default());
}

#[test]
fn a_fan_out_may_be_left_unjoined_and_a_new_one_may_start_after_a_join() {
    let mut text = String::from("name = \"w\"\ntenant = \"demo\"\n");
    for step in ["a", "b", "c", "d", "e"] {
        text += &format!(
            "[functions.{step}]\ncomponent = \"{step}.wasm\"\nkind = \"step\"\n\
             [steps.{step}]\nfunction = \"{step}\"\ninput = \"json\"\noutput = \"json\"\n"
        );
    }
    for (from, to, mode) in [
        ("a", "b", "fan_out = \"each\""),
        ("b", "c", "join = {}"),
        ("c", "d", "fan_out = 3"),
        ("d", "e", ""),
    ] {
        text += &format!("[[edges]]\nfrom = \"{from}\"\nto = \"{to}\"\ntype = \"json\"\n{mode}\n");
    }
    let wf = parse(&text);
    let order: Vec<&str> = wf.chain().into_iter().map(|(step, _)| step).collect();
    assert_eq!(order, ["a", "b", "c", "d", "e"]);
    assert_eq!(wf.edges[2].mode, EdgeMode::FanOut(FanOut::Static(3)));
}

#[test]
fn steps_that_all_lie_on_a_cycle_are_reported_as_a_cycle() {
    let err = parse_err(
        r#"
        name = "loop"
        tenant = "demo"
        [functions.ping]
        component = "ping.wasm"
        kind = "step"
        [functions.pong]
        component = "pong.wasm"
        kind = "step"
        [steps.ping]
        function = "ping"
        input = "json"
        output = "json"
        [steps.pong]
        function = "pong"
        input = "json"
        output = "json"
        [[edges]]
        from = "ping"
        to = "pong"
        type = "json"
        [[edges]]
        from = "pong"
        to = "ping"
        type = "json"
        "#,
    );
    assert_eq!(err.field(), "edges[1]");
    assert_eq!(err.message(), "edge closes a cycle: ping -> pong -> ping");
}

#[test]
fn a_dangling_edge_is_reported_rather_than_the_step_it_leaves_unreachable() {
    let text = std::fs::read_to_string(good_dir().join("wordcount.toml"))
        .unwrap()
        .replace("to = \"merge\"", "to = \"mrege\"");
    let err = parse_err(&text);
    assert_eq!(err.field(), "edges[0].to");
    assert_eq!(
        err.message(),
        "unknown step `mrege` (defined: count, merge, split)"
    );
}

#[test]
fn a_misspelt_step_function_is_reported_rather_than_the_function_it_leaves_unused() {
    let text = std::fs::read_to_string(good_dir().join("wordcount.toml"))
        .unwrap()
        .replace("function = \"count\"", "function = \"cnt\"");
    assert_eq!(parse_err(&text).field(), "steps.count.function");
}

#[test]
fn a_step_function_of_a_v1_manifest_without_steps_is_not_reported_as_unused() {
    // v1 allowed declaring `step` functions before anything could use them.
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
    assert!(wf.steps.is_empty());
}

#[test]
fn a_v2_workflow_round_trips_through_json() {
    let wf = Workflow::from_file(&good_dir().join("wordcount.toml")).unwrap();
    let json = serde_json::to_string(&wf).unwrap();
    let back: Workflow = serde_json::from_str(&json).unwrap();
    assert_eq!(back, wf);
}

#[test]
fn triggers_serialize_their_target_inline_as_in_the_manifest() {
    let wf = Workflow::from_file(&good_dir().join("wordcount.toml")).unwrap();
    let json = serde_json::to_value(&wf).unwrap();
    assert_eq!(
        json["http_triggers"][0],
        serde_json::json!({"route": "/wordcount", "step": "split"})
    );
    assert_eq!(
        json["http_triggers"][1],
        serde_json::json!({"route": "/health", "function": "health"})
    );
    assert_eq!(json["steps"]["split"]["input"], "bytes");
    assert_eq!(json["edges"][1]["type"], "wordcount.km:Chunk");
}

#[test]
fn retry_backoff_doubles_before_each_further_retry() {
    let retry = RetryPolicy {
        attempts: 4,
        backoff_ms: 20,
    };
    assert_eq!(retry.backoff(), Duration::from_millis(20));
    assert_eq!(retry.backoff_before(0), Duration::ZERO);
    assert_eq!(retry.backoff_before(1), Duration::from_millis(20));
    assert_eq!(retry.backoff_before(2), Duration::from_millis(40));
    assert_eq!(retry.backoff_before(3), Duration::from_millis(80));
    // Saturates rather than overflowing.
    assert_eq!(retry.backoff_before(100), Duration::from_millis(u64::MAX));
}

#[test]
fn redis_and_stream_triggers_parse_with_their_defaults_filled_in() {
    let wf = Workflow::from_file(&good_dir().join("sensors.toml")).unwrap();
    assert!(wf.http_triggers.is_empty());
    assert_eq!(
        wf.redis_triggers,
        vec![
            RedisTrigger {
                channel: "sensors.raw".into(),
                step: "collect".into(),
            },
            RedisTrigger {
                channel: "sensors:backfill/π".into(),
                step: "collect".into(),
            },
        ]
    );
    assert_eq!(
        wf.stream_triggers,
        vec![
            StreamTrigger {
                stream: "orders".into(),
                group: "sensors".into(),
                step: "collect".into(),
                max_deliveries: 5,
                dead_letter: "orders:dead".into(),
                reclaim_idle_ms: 30_000,
                batch: 16,
            },
            StreamTrigger {
                stream: "orders".into(),
                group: "audit".into(),
                step: "collect".into(),
                max_deliveries: 100,
                dead_letter: "orders:audit:dead".into(),
                reclaim_idle_ms: 100,
                batch: 1024,
            },
        ]
    );
    assert_eq!(wf.entry_step(), Some("collect"));
}

#[test]
fn stream_trigger_defaults_are_the_documented_constants() {
    assert_eq!(StreamTrigger::default_group("sensors"), "sensors");
    assert_eq!(StreamTrigger::DEFAULT_MAX_DELIVERIES, 5);
    assert_eq!(StreamTrigger::DEFAULT_RECLAIM_IDLE_MS, 30_000);
    assert_eq!(StreamTrigger::DEFAULT_BATCH, 16);
    assert_eq!(StreamTrigger::MAX_DELIVERIES, 1..=100);
    assert_eq!(StreamTrigger::RECLAIM_IDLE_MS, 100..=3_600_000);
    assert_eq!(StreamTrigger::BATCH, 1..=1024);
    assert_eq!(
        StreamTrigger::default_dead_letter("orders"),
        "orders:dead".to_owned()
    );
    let wf = Workflow::from_file(&good_dir().join("sensors.toml")).unwrap();
    assert_eq!(
        wf.stream_triggers[0].reclaim_idle(),
        Duration::from_secs(30)
    );
}

#[test]
fn a_step_may_be_started_by_http_redis_and_stream_triggers_at_once() {
    let wf = parse(
        r#"
        name = "echo"
        tenant = "demo"
        [functions.echo]
        component = "echo.wasm"
        kind = "step"
        [steps.echo]
        function = "echo"
        input = "bytes"
        output = "bytes"
        [[triggers.http]]
        route = "/echo"
        step = "echo"
        [[triggers.redis]]
        channel = "echo"
        step = "echo"
        [[triggers.stream]]
        stream = "echo"
        step = "echo"
        dead_letter = "echo-failed"
        "#,
    );
    assert_eq!(wf.redis_triggers[0].channel, "echo");
    assert_eq!(wf.stream_triggers[0].dead_letter, "echo-failed");
}

#[test]
fn redis_names_may_be_256_characters_of_anything_but_whitespace_and_controls() {
    let long = "é".repeat(256);
    let wf = parse(&format!(
        r#"
        name = "echo"
        tenant = "demo"
        [functions.echo]
        component = "echo.wasm"
        kind = "step"
        [steps.echo]
        function = "echo"
        input = "bytes"
        output = "bytes"
        [[triggers.redis]]
        channel = "{long}"
        step = "echo"
        [[triggers.stream]]
        stream = "{long}"
        group = "{long}"
        step = "echo"
        "#
    ));
    assert_eq!(wf.redis_triggers[0].channel, long);
    // The default dead-letter stream may be longer than a name written in the file.
    assert_eq!(wf.stream_triggers[0].dead_letter, format!("{long}:dead"));
    assert!(is_valid_redis_name(&long));
    assert!(!is_valid_redis_name(&format!("{long}x")));
    assert_eq!(MAX_REDIS_NAME_LEN, 256);
}

#[test]
fn redis_and_stream_triggers_round_trip_through_json_and_are_absent_when_empty() {
    let wf = Workflow::from_file(&good_dir().join("sensors.toml")).unwrap();
    let json = serde_json::to_value(&wf).unwrap();
    assert_eq!(
        json["redis_triggers"][0],
        serde_json::json!({"channel": "sensors.raw", "step": "collect"})
    );
    assert_eq!(
        json["stream_triggers"][0],
        serde_json::json!({
            "stream": "orders",
            "group": "sensors",
            "step": "collect",
            "max_deliveries": 5,
            "dead_letter": "orders:dead",
            "reclaim_idle_ms": 30000,
            "batch": 16,
        })
    );
    let back: Workflow = serde_json::from_value(json).unwrap();
    assert_eq!(back, wf);

    // Workflows without them serialize exactly as before, and such JSON still loads.
    let v1 = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let json = serde_json::to_value(&v1).unwrap();
    assert!(json.get("redis_triggers").is_none());
    assert!(json.get("stream_triggers").is_none());
    let back: Workflow = serde_json::from_value(json).unwrap();
    assert_eq!(back, v1);
}

#[test]
fn an_http_function_is_still_unused_when_only_redis_triggers_start_runs() {
    let err = parse_err(
        r#"
        name = "echo"
        tenant = "demo"
        [functions.echo]
        component = "echo.wasm"
        kind = "step"
        [functions.web]
        component = "web.wasm"
        [steps.echo]
        function = "echo"
        input = "bytes"
        output = "bytes"
        [[triggers.redis]]
        channel = "echo"
        step = "echo"
        "#,
    );
    assert_eq!(err.field(), "functions.web");
    assert_eq!(err.message(), "function `web` is not used by any trigger");
}

#[test]
fn the_entry_input_rule_names_every_kind_of_payload_the_triggers_deliver() {
    let err = parse_err(
        r#"
        name = "echo"
        tenant = "demo"
        [functions.echo]
        component = "echo.wasm"
        kind = "step"
        [steps.echo]
        function = "echo"
        input = "echo.km:Msg"
        output = "bytes"
        [[triggers.stream]]
        stream = "echo"
        step = "echo"
        [[triggers.http]]
        route = "/echo"
        step = "echo"
        "#,
    );
    assert_eq!(err.field(), "steps.echo.input");
    assert_eq!(
        err.message(),
        "the entry step receives the HTTP request body and Redis message payloads, so its \
         input must be `bytes`, `text` or `json`, not `echo.km:Msg`"
    );
}

/// A producer feeding a consumer over `blob.km:Blob`; `{produce}` and `{consume}` are
/// extra lines of the two steps.
fn two_steps(produce: &str, consume: &str) -> String {
    format!(
        r#"
        name = "pipe"
        tenant = "demo"
        [functions.produce]
        component = "produce.wasm"
        kind = "step"
        [functions.consume]
        component = "consume.wasm"
        kind = "step"
        [steps.produce]
        function = "produce"
        input = "text"
        output = "blob.km:Blob"
        {produce}
        [steps.consume]
        function = "consume"
        input = "blob.km:Blob"
        output = "json"
        {consume}
        [[edges]]
        from = "produce"
        to = "consume"
        type = "blob.km:Blob"
        [[triggers.http]]
        route = "/pipe"
        step = "produce"
        "#
    )
}

const BLOB_KM: &str = r#"
karmem blob @packed(true);
struct Blob table { Data []byte; }
interface transfer {
    payload: memory (import: write, export: read, 16);
    consume: fn(blob: Blob @ payload);
}
interface scratch {
    payload: memory (import: write, export: readwrite, 16);
    consume: fn(blob: Blob @ payload);
}
interface source {
    made: memory (import: read, export: write, 2);
    make: fn() -> Blob @ made;
}
"#;

fn with_blob_km(text: &str) -> Workflow {
    let schemas = BTreeMap::from([("blob.km".to_owned(), BLOB_KM.to_owned())]);
    Workflow::parse_with_schemas("workflow.toml", text, &schemas).unwrap_or_else(|e| panic!("{e}"))
}

fn limit(memory: &str, pages: u64, read_only: bool) -> MemoryLimit {
    MemoryLimit {
        memory: memory.into(),
        max_bytes: Some(pages * 65_536),
        read_only,
    }
}

#[test]
fn a_consumers_interface_bounds_its_input_and_its_producers_output() {
    let text = two_steps("", r#"interface = "blob.km:transfer.consume""#);
    let wf = with_blob_km(&text);
    let payload = "blob.km:transfer.payload";
    assert_eq!(
        wf.steps["consume"].interface,
        Some(InterfaceRef::parse("blob.km:transfer.consume").unwrap())
    );
    // `export: read`: the consumer may only read.
    assert_eq!(
        wf.steps["consume"].memories,
        StepMemories {
            input: limit(payload, 16, true),
            output: MemoryLimit::default(),
        }
    );
    assert_eq!(
        wf.steps["produce"].memories,
        StepMemories {
            input: MemoryLimit::default(),
            output: limit(payload, 16, false),
        }
    );
    // The memories travel with the workflow.
    let json = serde_json::to_string(&wf).unwrap();
    assert_eq!(serde_json::from_str::<Workflow>(&json).unwrap(), wf);
    // Without schemas only the form of `interface` is checked.
    let plain = parse(&text);
    assert!(
        plain
            .steps
            .values()
            .all(|step| step.memories.is_unlimited())
    );
    assert!(plain.karmem_files().contains("blob.km"));
}

#[test]
fn a_readwrite_export_leaves_the_input_writable() {
    let wf = with_blob_km(&two_steps("", r#"interface = "blob.km:scratch.consume""#));
    assert_eq!(
        wf.steps["consume"].memories.input,
        limit("blob.km:scratch.payload", 16, false)
    );
}

#[test]
fn a_producers_result_memory_bounds_its_output_and_its_consumers_input() {
    let wf = with_blob_km(&two_steps(r#"interface = "blob.km:source.make""#, ""));
    let made = "blob.km:source.made";
    assert_eq!(wf.steps["produce"].memories.output, limit(made, 2, false));
    assert!(wf.steps["produce"].memories.input.is_unlimited());
    // `import: read`: the consumer reads the result with the importer's access.
    assert_eq!(wf.steps["consume"].memories.input, limit(made, 2, true));
}

#[test]
fn interface_errors_name_the_field_and_the_schema_position() {
    let text = two_steps("", r#"interface = "blob.km:transfer.consume""#);
    let broken = BLOB_KM.replace("export: read,", "export: reed,");
    let schemas = BTreeMap::from([("blob.km".to_owned(), broken)]);
    let err = Workflow::parse_with_schemas("workflow.toml", &text, &schemas).unwrap_err();
    assert_eq!(err.field(), "steps.consume.interface");
    assert!(
        err.message()
            .starts_with("blob.km:5:45: unknown access `reed`"),
        "{err}"
    );
    let err = Workflow::parse_with_schemas("workflow.toml", &text, &BTreeMap::new()).unwrap_err();
    assert_eq!(err.field(), "steps.consume.interface");
    assert!(err.message().contains("`blob.km` is missing"), "{err}");
}

#[test]
fn allowed_outbound_hosts_are_parsed_and_survive_the_json_trip() {
    let wf = Workflow::parse(
        "workflow.toml",
        r#"
        name = "fetch"
        tenant = "demo"

        [functions.fetch]
        component = "fetch.wasm"
        allowed_outbound_hosts = ["https://api.example.com", "http://127.0.0.1:8080", "*://*.example.org:*"]

        [[triggers.http]]
        route = "/fetch"
        function = "fetch"
        "#,
    )
    .unwrap();
    let hosts = &wf.functions["fetch"].allowed_outbound_hosts;
    let written: Vec<&str> = hosts.iter().map(|host| host.as_str()).collect();
    assert_eq!(
        written,
        [
            "https://api.example.com",
            "http://127.0.0.1:8080",
            "*://*.example.org:*"
        ]
    );
    assert_eq!(
        hosts.access("https", "api.example.com", 443),
        OutboundAccess::Named
    );
    assert_eq!(
        hosts.access("http", "a.example.org", 8000),
        OutboundAccess::PublicOnly
    );
    assert_eq!(
        hosts.access("http", "api.example.com", 80),
        OutboundAccess::Denied
    );
    let json = serde_json::to_string(&wf).unwrap();
    let back: Workflow = serde_json::from_str(&json).unwrap();
    assert_eq!(back, wf);
}

#[test]
fn functions_without_allowed_outbound_hosts_may_reach_nothing() {
    let wf = Workflow::from_file(&good_dir().join("hello.toml")).unwrap();
    let hosts = &wf.functions["hello"].allowed_outbound_hosts;
    assert!(hosts.is_empty());
    assert_eq!(
        hosts.access("https", "example.com", 443),
        OutboundAccess::Denied
    );
    // Nothing is serialized for an empty list: older readers see the same JSON.
    let json = serde_json::to_string(&wf).unwrap();
    assert!(!json.contains("allowed_outbound_hosts"), "{json}");
}

/// A manifest with `functions` hello functions, each with one route.
fn manifest_with_routes(functions: usize, routes_each: usize) -> String {
    let mut text = String::from("name = \"big\"\ntenant = \"demo\"\n");
    for f in 0..functions {
        text.push_str(&format!("[functions.f{f}]\ncomponent = \"h.wasm\"\n"));
    }
    for f in 0..functions {
        for r in 0..routes_each {
            text.push_str(&format!(
                "[[triggers.http]]\nroute = \"/f{f}/r{r}\"\nfunction = \"f{f}\"\n"
            ));
        }
    }
    text
}

#[test]
fn a_workflow_declares_at_most_its_limit_of_routes_and_functions() {
    // At the limits: accepted.
    let wf = parse(&manifest_with_routes(1, faas_workflow::MAX_HTTP_TRIGGERS));
    assert_eq!(wf.http_triggers.len(), faas_workflow::MAX_HTTP_TRIGGERS);
    parse(&manifest_with_routes(faas_workflow::MAX_FUNCTIONS, 1));

    // One route past: refused at that route, naming the limit and the way around it.
    let text = manifest_with_routes(1, faas_workflow::MAX_HTTP_TRIGGERS + 1);
    let err = parse_err(&text);
    let max = faas_workflow::MAX_HTTP_TRIGGERS;
    assert_eq!(err.field(), format!("triggers.http[{max}]"));
    let line = text
        .lines()
        .position(|line| line == format!("route = \"/f0/r{max}\""))
        .unwrap();
    assert_eq!(err.line(), line, "the line of its `[[triggers.http]]`");
    assert!(err.message().contains(&format!("at most {max}")), "{err}");
    assert!(err.message().contains("prefix route"), "{err}");

    // One function past: refused at the first function written past the limit, not
    // the last in name order.
    let err = parse_err(&manifest_with_routes(faas_workflow::MAX_FUNCTIONS + 1, 1));
    let max = faas_workflow::MAX_FUNCTIONS;
    assert_eq!(err.field(), format!("functions.f{max}"));
    assert!(err.message().contains(&format!("at most {max}")), "{err}");
}

/// A manifest is a tenant's upload, parsed by the gateway: one nested a hundred
/// thousand deep (arrays, inline tables) is refused at its line, not parsed by
/// recursion deep enough to overflow the gateway's stack.
#[test]
fn a_manifest_nested_past_reason_is_refused_at_its_line() {
    const DEPTH: usize = 100_000;
    for (open, close) in [("[", "]"), ("{ a = ", " }")] {
        let text = format!(
            "name = \"deep\"\nvalue = {}1{}\n",
            open.repeat(DEPTH),
            close.repeat(DEPTH)
        );
        let err = Workflow::parse("workflow.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("workflow.toml:2:"),
            "{}",
            &err[..err.len().min(300)]
        );
    }
}
