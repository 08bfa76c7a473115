//! A real OpenTelemetry Collector for the trace tests: an OTLP/HTTP receiver on a free
//! loopback port and the contrib file exporter, which writes what it receives as OTLP
//! JSON lines into a temporary directory that [`Collector::spans`] reads back.
//!
//! The binary is built by `testing/otel/install-collector` (`./test` runs it) with the
//! collector's own builder, at the versions pinned in `testing/otel/versions.env`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{free_port, stop};

/// The pinned versions, read by the install script too.
const VERSIONS_ENV: &str = include_str!("../otel/versions.env");
/// How long a fresh collector may take to listen on its OTLP port.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a starting collector, or the exported spans, are looked at.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Fresh ports tried before giving up, in case another process takes the free port
/// between our probe and the collector binding it.
const PORT_ATTEMPTS: usize = 5;
/// The file exporter's output, in the collector's temporary directory.
const SPANS_FILE: &str = "spans.jsonl";
/// The collector's configuration, under this crate (shared with bench/traces-hello.sh):
/// it reads the port and the spans file from the environment.
const CONFIG: &str = "otel/collector.yaml";
/// The collector's own log (stdout and stderr), in its temporary directory.
const LOG_FILE: &str = "otelcol.log";
/// Lines of that log shown when the collector fails.
const LOG_TAIL_LINES: usize = 30;

/// The collector version `testing/otel/install-collector` builds (`OTELCOL_VERSION`).
pub fn collector_version() -> &'static str {
    crate::env_file_value(VERSIONS_ENV, "OTELCOL_VERSION")
        .expect("testing/otel/versions.env names OTELCOL_VERSION")
}

/// Where the install script puts the collector:
/// `${FAAS_TOOLS_DIR:-$HOME/.cache/faas-tools}/otelcol-<version>/otelcol`.
pub fn collector_path() -> PathBuf {
    crate::tools_base_dir()
        .join(format!("otelcol-{}", collector_version()))
        .join("otelcol")
}

/// A span as the collector received it, reduced to what tests assert on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 16 lowercase hex digits.
    pub span_id: String,
    /// 16 lowercase hex digits, or `""` for a root span.
    pub parent_span_id: String,
    /// The span's name.
    pub name: String,
    /// The `service.name` attribute of the resource that sent it (`""` if none).
    pub service: String,
    /// `"server"`, `"client"`, `"internal"`, `"producer"`, `"consumer"` or
    /// `"unspecified"`.
    pub kind: String,
    /// The span's attributes, values rendered as strings (integers in decimal, arrays
    /// and maps as JSON).
    pub attributes: BTreeMap<String, String>,
    /// Its W3C `tracestate` (`""` if none).
    pub trace_state: String,
}

/// Whether every span of `trace_id` has its parent among `spans`, but for those whose
/// parent is `root_parent` (the caller's span, or `""` for a trace the platform began).
///
/// A process exports its spans in the order they end, and a parent ends after its
/// children, so waiting for this (beside the span a test awaits) means the awaited span's
/// ancestry has arrived too, even when it came in a later export batch.
pub fn parents_arrived(spans: &[Span], trace_id: &str, root_parent: &str) -> bool {
    spans
        .iter()
        .filter(|span| span.trace_id == trace_id && span.parent_span_id != root_parent)
        .all(|child| {
            spans
                .iter()
                .any(|span| span.span_id == child.parent_span_id)
        })
}

/// A running collector, killed on drop (its temporary directory removed with it).
#[derive(Debug)]
pub struct Collector {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Collector {
    /// Starts a collector on a free loopback port and waits until it listens.
    ///
    /// # Panics
    /// If the binary is not installed (the message names the install script), or the
    /// collector does not start (the message shows its log).
    pub fn start() -> Self {
        let binary = collector_path();
        assert!(
            binary.is_file(),
            "{} is missing: run testing/otel/install-collector (or ./test) to build the \
             OpenTelemetry Collector the trace tests use",
            binary.display()
        );
        let dir = crate::temp_dir();
        let mut last_failure = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match spawn_and_wait(&binary, dir.path(), port) {
                Ok(child) => return Self { child, port, dir },
                Err(failure) => last_failure = failure,
            }
        }
        panic!("the OpenTelemetry Collector did not start: {last_failure}");
    }

    /// The OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`, for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span the collector has written out so far, in the order received.
    ///
    /// # Panics
    /// If the exporter's output is not the OTLP JSON expected.
    pub fn spans(&self) -> Vec<Span> {
        let path = self.dir.path().join(SPANS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            // Nothing exported yet: the exporter creates the file on its first write.
            Err(err) if err.kind() == ErrorKind::NotFound => return Vec::new(),
            Err(err) => panic!("reading {}: {err}", path.display()),
        };
        // The exporter's buffer may have been flushed in the middle of a line; only
        // lines it has finished count.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .filter(|line| !line.trim().is_empty())
            .flat_map(|line| {
                let request: Value = serde_json::from_str(line).unwrap_or_else(|err| {
                    panic!("the file exporter wrote invalid JSON ({err}): {line}")
                });
                parse_request(&request)
            })
            .collect()
    }

    /// Polls [`Collector::spans`] until `done` holds for them, and returns them.
    ///
    /// # Panics
    /// When `timeout` passes first, listing the spans seen.
    pub fn wait_for_spans(&self, timeout: Duration, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if Instant::now() > deadline {
                let mut listing = String::new();
                for span in &spans {
                    let _ = writeln!(listing, "  {span:?}");
                }
                panic!(
                    "the awaited spans did not reach the collector within {timeout:?}; it \
                     received {} span(s):\n{listing}collector log:\n{}",
                    spans.len(),
                    log_tail(self.dir.path())
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// Starts the collector on `port` and waits until it accepts connections there. `Err`
/// (with the reason and its log) when it exits or stays silent, so the caller may try
/// another port.
fn spawn_and_wait(binary: &Path, dir: &Path, port: u16) -> Result<Child, String> {
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::File::create(&log_path)
        .unwrap_or_else(|err| panic!("creating {}: {err}", log_path.display()));
    let log_copy = log
        .try_clone()
        .unwrap_or_else(|err| panic!("duplicating {}: {err}", log_path.display()));
    let mut child = Command::new(binary)
        .arg("--config")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(CONFIG))
        .env("FAAS_OTELCOL_PORT", port.to_string())
        .env("FAAS_OTELCOL_SPANS", dir.join(SPANS_FILE))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_copy)
        .spawn()
        .unwrap_or_else(|err| panic!("starting {}: {err}", binary.display()));
    // The receivers start last, after the exporters: once the port accepts, spans sent
    // to it reach the file.
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the collector on port {port} exited with {status}; its log:\n{}",
                log_tail(dir)
            ));
        }
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(child);
        }
        if Instant::now() > deadline {
            stop(&mut child);
            return Err(format!(
                "the collector did not listen on port {port} within {STARTUP_TIMEOUT:?}; its \
                 log:\n{}",
                log_tail(dir)
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// The last lines of the collector's log in `dir`.
fn log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// The spans of one line of the file exporter's output: an OTLP JSON
/// `ExportTraceServiceRequest` (ids as hex strings, enums as numbers).
fn parse_request(request: &Value) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource_spans in array(request, "resourceSpans") {
        let resource = attributes(&resource_spans["resource"]);
        let service = resource.get("service.name").cloned().unwrap_or_default();
        for scope_spans in array(resource_spans, "scopeSpans") {
            for span in array(scope_spans, "spans") {
                spans.push(Span {
                    trace_id: id(span, "traceId", 32),
                    span_id: id(span, "spanId", 16),
                    parent_span_id: id(span, "parentSpanId", 16),
                    name: string(span, "name"),
                    service: service.clone(),
                    kind: kind_name(span["kind"].as_u64().unwrap_or(0)).to_owned(),
                    attributes: attributes(span),
                    trace_state: string(span, "traceState"),
                });
            }
        }
    }
    spans
}

/// The array `object[key]`; empty when absent (OTLP JSON omits empty fields).
fn array<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    object[key].as_array().map_or(&[], Vec::as_slice)
}

/// The string `object[key]`; `""` when absent (OTLP JSON omits empty fields).
fn string(object: &Value, key: &str) -> String {
    object[key].as_str().unwrap_or_default().to_owned()
}

/// The id `object[key]`: `digits` lowercase hex digits (the form `traceparent` uses, and
/// the one OTLP JSON prescribes), or `""` when absent (a root span's parent).
///
/// # Panics
/// On any other form, so that a change in the exporter's encoding shows here rather
/// than as spans that never match.
fn id(object: &Value, key: &str, digits: usize) -> String {
    let id = string(object, key);
    assert!(
        id.is_empty()
            || (id.len() == digits
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))),
        "the file exporter wrote {key} {id:?}, not {digits} lowercase hex digits"
    );
    id
}

/// The `SpanKind` enum's name for `value`.
fn kind_name(value: u64) -> &'static str {
    match value {
        1 => "internal",
        2 => "server",
        3 => "client",
        4 => "producer",
        5 => "consumer",
        _ => "unspecified",
    }
}

/// `object.attributes` (a list of `{key, value: AnyValue}`) as a map of rendered values.
fn attributes(object: &Value) -> BTreeMap<String, String> {
    array(object, "attributes")
        .iter()
        .filter_map(|attribute| {
            let key = attribute["key"].as_str()?;
            Some((key.to_owned(), render(&attribute["value"])))
        })
        .collect()
}

/// An OTLP JSON `AnyValue` as text: strings as they are, numbers and booleans as
/// written (64-bit integers come as JSON strings), anything else as its JSON.
fn render(value: &Value) -> String {
    let Some((_, inner)) = value.as_object().and_then(|fields| fields.iter().next()) else {
        return String::new();
    };
    match inner {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_file_exporters_otlp_json() {
        let line = serde_json::json!({
            "resourceSpans": [{
                "resource": { "attributes": [
                    { "key": "service.name", "value": { "stringValue": "faas" } }
                ] },
                "scopeSpans": [{
                    "scope": { "name": "faas" },
                    "spans": [{
                        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                        "spanId": "00f067aa0ba902b7",
                        "name": "request",
                        "kind": 2,
                        "attributes": [
                            { "key": "http.status", "value": { "intValue": "200" } },
                            { "key": "ok", "value": { "boolValue": true } },
                            { "key": "route", "value": { "stringValue": "/hello" } },
                        ],
                    }, {
                        "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
                        "spanId": "1111111111111111",
                        "parentSpanId": "00f067aa0ba902b7",
                        "name": "step",
                    }],
                }],
            }],
        });
        let spans = parse_request(&line);
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(spans[0].parent_span_id, "");
        assert_eq!(spans[0].service, "faas");
        assert_eq!(spans[0].kind, "server");
        assert_eq!(spans[0].attributes["http.status"], "200");
        assert_eq!(spans[0].attributes["ok"], "true");
        assert_eq!(spans[0].attributes["route"], "/hello");
        assert_eq!(spans[1].parent_span_id, "00f067aa0ba902b7");
        assert_eq!(spans[1].kind, "unspecified");
        assert_eq!(spans[1].service, "faas");
    }

    #[test]
    fn parents_arrived_only_once_every_ancestor_of_the_trace_has() {
        let span = |id: &str, parent: &str| Span {
            trace_id: "t".into(),
            span_id: id.into(),
            parent_span_id: parent.into(),
            name: String::new(),
            service: String::new(),
            kind: String::new(),
            attributes: BTreeMap::new(),
            trace_state: String::new(),
        };
        let leaf = span("c", "b");
        let middle = span("b", "a");
        let root = span("a", "caller");
        assert!(!parents_arrived(std::slice::from_ref(&leaf), "t", "caller"));
        assert!(!parents_arrived(
            &[leaf.clone(), middle.clone()],
            "t",
            "caller"
        ));
        assert!(parents_arrived(&[leaf, middle, root], "t", "caller"));
        assert!(parents_arrived(&[], "t", "caller"));
    }

    #[test]
    #[should_panic(expected = "not 32 lowercase hex digits")]
    fn refuses_ids_in_another_encoding() {
        // OTLP/protobuf's bytes, as a protobuf-JSON encoder would write them (base64).
        let line = serde_json::json!({ "resourceSpans": [{ "scopeSpans": [{ "spans": [{
            "traceId": "S/kvNXezTaajzpKdDg5HNg==", "spanId": "APBnqguqArc=", "name": "x",
        }] }] }] });
        parse_request(&line);
    }
}
