//! The body type every gateway response uses, and JSON error responses.

use bytes::Bytes;
use http::{Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use serde::Serialize;

/// Errors a response body can fail with while streaming.
pub(crate) type BoxError = faas_invoke::BodyError;

/// The body of every response: our own are `Full`, a function's may stream.
pub(crate) type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A complete body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// How much of a held answer ([`held`]) is handed to the connection at a time.
const HELD_SLICE: usize = 64 << 10;

/// `bytes` as a body handed to the connection in slices as it takes them, holding
/// `claim` (a claim of a budget, a place) until it has taken the last: a client that
/// does not read leaves the body unfinished, and the claim held, instead of the
/// gateway holding the bytes uncounted.
pub(crate) fn held<C: Send + Unpin + 'static>(bytes: Bytes, claim: C) -> Body {
    Held {
        rest: bytes,
        _claim: claim,
    }
    .boxed_unsync()
}

/// The body [`held`] makes.
struct Held<C> {
    rest: Bytes,
    _claim: C,
}

impl<C: Unpin> hyper::body::Body for Held<C> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        if self.rest.is_empty() {
            return std::task::Poll::Ready(None);
        }
        let slice = self.rest.len().min(HELD_SLICE);
        let data = self.rest.split_to(slice);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.rest.len() as u64)
    }
}

/// A JSON response.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    json_holding(status, value, ())
}

/// A JSON response whose body holds `claim` until it is sent ([`held`]).
pub(crate) fn json_holding<T: Serialize, C: Send + Unpin + 'static>(
    status: StatusCode,
    value: &T,
    claim: C,
) -> Response<Body> {
    let bytes = serde_json::to_vec_pretty(value).unwrap_or_else(|err| {
        format!("{{\"error\":{{\"message\":\"serializing the response: {err}\"}}}}").into()
    });
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(held(bytes.into(), claim))
        .expect("static response parts are valid")
}

/// The JSON error body: `{"error": {"kind": ..., "message": ..., ...details}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorBody<'a, D: Serialize> {
    error: ErrorDetail<'a, D>,
}

#[derive(Debug, Serialize)]
struct ErrorDetail<'a, D: Serialize> {
    kind: &'a str,
    message: String,
    #[serde(flatten)]
    details: D,
}

/// A JSON error response with `kind`, `message` and extra `details` fields.
pub(crate) fn error_with<D: Serialize>(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
    details: D,
) -> Response<Body> {
    json(
        status,
        &ErrorBody {
            error: ErrorDetail {
                kind,
                message: message.into(),
                details,
            },
        },
    )
}

/// A JSON error response with just `kind` and `message`.
pub(crate) fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response<Body> {
    error_with(status, kind, message, serde_json::Map::new())
}

/// A JSON error response for a request refused for want of room, which its client may
/// send again shortly (`Retry-After: 1`).
pub(crate) fn refused(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
) -> Response<Body> {
    let mut response = error(status, kind, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

/// A plain-text response.
pub(crate) fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(full(body))
        .expect("static response parts are valid")
}

/// A function's streamed `body` that calls `on_error` once if it ends with an error:
/// its instance went before finishing it (its deadline, a trap after the head), or
/// its worker did, after a head that went out as a success.
pub(crate) fn watched(body: Body, on_error: impl FnOnce() + Send + Unpin + 'static) -> Body {
    Watched {
        body,
        on_error: Some(on_error),
    }
    .boxed_unsync()
}

/// The body [`watched`] makes.
struct Watched<F> {
    body: Body,
    on_error: Option<F>,
}

impl<F: FnOnce() + Unpin> hyper::body::Body for Watched<F> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, BoxError>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Err(_))) = &polled
            && let Some(on_error) = self.on_error.take()
        {
            on_error();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
