//! A guest's log lines are its tenant's: they reach the worker's log sink (`faas logs`)
//! and stay out of the platform's own log at its default level, so a tenant can
//! neither write into the operator's log nor make the worker wait on its writes: here
//! `misbehave`'s `/misbehave/shout`, which logs 1000 lines of 8 KiB. An operator who
//! asks for them (target `faas_guest` at `debug`) gets them escaped: `/misbehave/forge`
//! logs a line break followed by a line that looks like the platform's.

use bytes::Bytes;
use faas_invoke::{LogLevel, LogLine, LogSink, LogSource};
use faas_worker::{Worker, WorkerConfig};
use faas_workflow::Workflow;
use http_body_util::{BodyExt, Empty};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer as _, filter};

/// Keeps every line it is handed.
#[derive(Default)]
struct Kept(Mutex<Vec<LogLine>>);

impl LogSink for Kept {
    fn push(&self, line: LogLine) {
        self.0.lock().unwrap().push(line);
    }
}

/// Where the platform's log lines are written in this test.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the platform's log takes guests' lines (`faas_guest=debug`): off at first,
/// as by default, then on.
static GUEST_TARGET_ON: AtomicBool = AtomicBool::new(false);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_lines_go_to_the_tenants_logs_and_not_to_the_platforms() {
    // The platform's log at its default level, from every thread (guests run on
    // threads of their own). The filter is asked per event, so turning the guests'
    // target on takes effect at once.
    let written = Written::default();
    let writer = written.clone();
    let levels = filter::dynamic_filter_fn(|meta, _| {
        if meta.target() == "faas_guest" {
            GUEST_TARGET_ON.load(Ordering::Relaxed)
        } else {
            *meta.level() <= tracing::Level::INFO
        }
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .with_filter(levels),
        )
        .init();

    let dir = tempfile::tempdir().unwrap();
    let kept = Arc::new(Kept::default());
    let worker = Worker::new(WorkerConfig::new(dir.path()))
        .unwrap()
        .with_logs(kept.clone());
    let text = format!(
        "name = \"loud\"\ntenant = \"t\"\n[functions.misbehave]\ncomponent = \"{}\"\n\
         [[triggers.http]]\nroute = \"/misbehave/...\"\nfunction = \"misbehave\"\n",
        faas_testing::component_path("misbehave").display()
    );
    let workflow = Workflow::parse("workflow.toml", &text).unwrap();
    let components = BTreeMap::from([(
        "misbehave".to_owned(),
        faas_invoke::Component::new(faas_testing::component("misbehave")),
    )]);
    let workflow = worker.load_workflow(&workflow, components).await.unwrap();

    let get = async |path: &str| {
        let request = hyper::Request::get(format!("http://localhost{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = worker
            .handle_http(&workflow, "misbehave", request)
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.unwrap().to_bytes()
    };
    assert_eq!(&get("/misbehave/shout").await[..], b"shouted\n");

    let shouted = "x".repeat(64);
    let lines = kept.0.lock().unwrap().clone();
    assert_eq!(lines.len(), 1000, "every line reached the tenant's logs");
    for line in &lines {
        assert_eq!((line.level, line.source), (LogLevel::Info, LogSource::Log));
        assert_eq!((&*line.tenant, &*line.workflow), ("t", "loud"));
        assert!(line.text.starts_with(&shouted));
    }

    let platform_log = String::from_utf8_lossy(&written.0.lock().unwrap()).into_owned();
    assert!(
        platform_log.contains("component loaded"),
        "the platform's own lines are written: {platform_log}"
    );
    assert!(
        !platform_log.contains(&shouted),
        "a guest's lines reached the platform's log ({} bytes of it)",
        platform_log.len()
    );

    // Asked for, a guest's line is one field of one line of the platform's log.
    GUEST_TARGET_ON.store(true, Ordering::Relaxed);
    assert_eq!(&get("/misbehave/forge").await[..], b"forged\n");
    let platform_log = String::from_utf8_lossy(&written.0.lock().unwrap()).into_owned();
    let guest_lines: Vec<&str> = platform_log
        .lines()
        .filter(|line| line.contains("forged by a guest"))
        .collect();
    assert_eq!(
        guest_lines.len(),
        1,
        "one line per guest line: {platform_log}"
    );
    assert!(
        guest_lines[0].contains("faas_guest") && guest_lines[0].contains(r#"text="done\n2026"#),
        "the guest's text is an escaped field of the platform's line: {}",
        guest_lines[0]
    );
    assert!(
        !platform_log
            .lines()
            .any(|line| line.starts_with("2026-01-01T00:00:00")),
        "a guest's line break started a line of the platform's log: {platform_log}"
    );
}
