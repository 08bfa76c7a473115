//! A guest's log lines are its tenant's: they reach the worker's log sink (`faas logs`)
//! and stay out of the platform's own log at its default level, so a tenant can
//! neither write into the operator's log nor make the worker wait on its writes: here
//! `misbehave`'s `/misbehave/shout`, which logs 1000 lines of 8 KiB.

use bytes::Bytes;
use faas_invoke::{LogLevel, LogLine, LogSink, LogSource};
use faas_worker::{Worker, WorkerConfig};
use faas_workflow::Workflow;
use http_body_util::{BodyExt, Empty};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_lines_go_to_the_tenants_logs_and_not_to_the_platforms() {
    // The platform's log at its default level, from every thread (guests run on
    // threads of their own).
    let written = Written::default();
    let writer = written.clone();
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_writer(move || writer.clone())
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
    let components =
        BTreeMap::from([("misbehave".to_owned(), faas_testing::component("misbehave"))]);
    let workflow = worker.load_workflow(&workflow, components).await.unwrap();

    let request = hyper::Request::get("http://localhost/misbehave/shout")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = worker
        .handle_http(&workflow, "misbehave", request)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"shouted\n");

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
}
