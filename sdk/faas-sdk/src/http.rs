//! Whole-message HTTP requests and responses, and the `wasi:http` glue behind
//! [`macro@crate::http`].

use wasip2::http::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use wasip2::io::streams::StreamError;

/// An incoming HTTP request, body included.
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    path_with_query: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    /// The method, e.g. `GET`.
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The path without the query, e.g. `/hello`.
    pub fn path(&self) -> &str {
        self.path_with_query
            .split_once('?')
            .map_or(self.path_with_query.as_str(), |(path, _)| path)
    }

    /// The query string without the `?`, if there is one.
    pub fn query(&self) -> Option<&str> {
        self.path_with_query.split_once('?').map(|(_, query)| query)
    }

    /// The value of query parameter `name` (no percent-decoding).
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.query()?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_slice())
    }

    /// The body bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// An HTTP response to send, body included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Response {
    /// An empty response with `status`.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A `text/plain` response.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self::new(status)
            .with_header("content-type", "text/plain; charset=utf-8")
            .with_body(body.into())
    }

    /// An `application/json` response; `body` must already be JSON text.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::new(status)
            .with_header("content-type", "application/json")
            .with_body(body.into())
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The body bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }
}

/// What an HTTP handler may return.
pub trait IntoResponse {
    /// Converts `self` into the response to send.
    fn into_response(self) -> Response;
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for String {
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}

impl IntoResponse for &str {
    fn into_response(self) -> Response {
        Response::text(200, self)
    }
}

/// An error becomes a 500 whose body is the error's text.
impl<T: IntoResponse, E: core::fmt::Display> IntoResponse for Result<T, E> {
    fn into_response(self) -> Response {
        match self {
            Ok(ok) => ok.into_response(),
            Err(err) => Response::text(500, format!("{err}\n")),
        }
    }
}

/// Reads `request`, runs `handler` and writes its response: what
/// [`macro@crate::http`] expands to.
#[doc(hidden)]
pub fn serve<R: IntoResponse>(
    request: IncomingRequest,
    out: ResponseOutparam,
    handler: fn(Request) -> R,
) {
    let request = match read_request(request) {
        Ok(request) => request,
        Err(message) => {
            write_response(out, Response::text(400, message));
            return;
        }
    };
    write_response(out, handler(request).into_response());
}

fn read_request(request: IncomingRequest) -> Result<Request, String> {
    let method = match request.method() {
        Method::Get => "GET".to_owned(),
        Method::Head => "HEAD".to_owned(),
        Method::Post => "POST".to_owned(),
        Method::Put => "PUT".to_owned(),
        Method::Delete => "DELETE".to_owned(),
        Method::Connect => "CONNECT".to_owned(),
        Method::Options => "OPTIONS".to_owned(),
        Method::Trace => "TRACE".to_owned(),
        Method::Patch => "PATCH".to_owned(),
        Method::Other(other) => other,
    };
    let path_with_query = request.path_with_query().unwrap_or_else(|| "/".to_owned());
    let headers = request.headers().entries();
    let incoming = request
        .consume()
        .map_err(|()| "request body already consumed".to_owned())?;
    let body = read_body(&incoming)?;
    drop(incoming);
    Ok(Request {
        method,
        path_with_query,
        headers,
        body,
    })
}

fn read_body(incoming: &IncomingBody) -> Result<Vec<u8>, String> {
    let stream = incoming
        .stream()
        .map_err(|()| "request body stream already taken".to_owned())?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(body),
            Err(StreamError::LastOperationFailed(err)) => {
                return Err(format!("reading request body: {}", err.to_debug_string()));
            }
        }
    }
}

fn write_response(out: ResponseOutparam, response: Response) {
    let headers = match Fields::from_list(&response.headers) {
        Ok(headers) => headers,
        Err(err) => {
            let fallback = Response::text(500, format!("invalid response header: {err:?}\n"));
            return write_response(out, fallback);
        }
    };
    let outgoing = OutgoingResponse::new(headers);
    if outgoing.set_status_code(response.status).is_err() {
        let fallback = Response::text(500, format!("invalid status {}\n", response.status));
        return write_response(out, fallback);
    }
    let body = outgoing
        .body()
        .expect("a new response's body is taken once");
    ResponseOutparam::set(out, Ok(outgoing));
    let stream = body.write().expect("a new body's stream is taken once");
    // `blocking-write-and-flush` accepts at most 4096 bytes per call.
    for chunk in response.body.chunks(4096) {
        if stream.blocking_write_and_flush(chunk).is_err() {
            // The client went away; nothing useful is left to do.
            return;
        }
    }
    drop(stream);
    let _ = OutgoingBody::finish(body, None);
}
