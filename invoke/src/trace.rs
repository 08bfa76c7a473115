//! W3C trace context (`traceparent`, `tracestate`) in HTTP headers, between the current
//! `tracing` span and the wire.
//!
//! Both ends go through the process's global text-map propagator (W3C trace context,
//! set where the process installs its subscriber) and the span's OpenTelemetry context.
//! With no OpenTelemetry layer installed (export off) a span has no context: nothing is
//! injected and a received parent is ignored, at the cost of a type check.

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header naming the trace and the parent span.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C header carrying vendors' trace state.
const TRACESTATE: &str = "tracestate";

/// The longest `tracestate` adopted: the 512 characters W3C trace context asks every
/// platform to pass on. A longer one (a client may send tens of KiB) is dropped,
/// since it would be copied into every span of the trace, the workers' and the
/// guests' host calls' included, and exported with each.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The most of a client's or a guest's text (a path, a host name) a span attribute
/// keeps: each span is held in the exporter's queue and sent with its attributes.
pub const MAX_ATTRIBUTE_BYTES: usize = 256;

/// `text` cut to [`MAX_ATTRIBUTE_BYTES`] (at a character boundary), for a span
/// attribute.
pub fn attribute(text: &str) -> &str {
    &text[..text.floor_char_boundary(MAX_ATTRIBUTE_BYTES)]
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let value = self.0.get(key).and_then(|value| value.to_str().ok())?;
        (key != TRACESTATE || value.len() <= MAX_TRACESTATE_BYTES).then_some(value)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes the trace context in `headers` (if any, and well formed) the parent of `span`.
pub fn continue_from(span: &tracing::Span, headers: &HeaderMap) {
    adopt(span, &Headers(headers));
}

/// Makes the trace context a message carried as its `traceparent` field (if well
/// formed) the parent of `span`.
pub fn continue_from_traceparent(span: &tracing::Span, traceparent: &str) {
    let fields = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    adopt(span, &fields);
}

fn adopt(span: &tracing::Span, carrier: &dyn Extractor) {
    let parent =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(carrier));
    // A context with no remote span leaves the span a root (or the child it already is).
    use opentelemetry::trace::TraceContextExt as _;
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// `span`'s trace context as a `traceparent` value, for a message that has fields
/// rather than headers (a stream entry); `None` when the span is not traced.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    use opentelemetry::trace::TraceContextExt as _;
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut fields = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut fields);
    });
    fields.remove(TRACEPARENT)
}

/// Writes `span`'s trace context into `headers`, replacing any there (a forwarded request's
/// own `traceparent` must not pass for the platform's).
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    let context = span.context();
    use opentelemetry::trace::TraceContextExt as _;
    if !context.span().span_context().is_valid() {
        return;
    }
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeadersMut(headers));
    });
}

/// The trace id of `span` in W3C form (32 lowercase hex digits), or `None` when the span
/// is not traced (export off).
pub fn trace_id(span: &tracing::Span) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
