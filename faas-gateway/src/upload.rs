//! A deploy upload, read from its `multipart/form-data` body as it arrives.
//!
//! The body is a part [`HEAD_PART`] first: a [`DeployHead`] as JSON (the manifest, its
//! Karmem schemas, and the size of each function's component). Then one part
//! [`COMPONENT_PART`] per function, whose file name is the function's name and whose
//! content is the component's bytes as they are. Each component is read straight into
//! a buffer of the size the head gave for it, which is the buffer the platform keeps:
//! a deploy holds about one copy of its components while it is read. (A JSON body of
//! base64 text held three: the body, the text and the decoded bytes.)

use crate::body_budget::OverBudget;
use crate::deploy_admission::UploadClaim;
use crate::registry::DeployRequest;
use bytes::Bytes;
use faas_invoke::Component;
use futures_util::{Stream, StreamExt};
use http::StatusCode;
use multer::{Constraints, Multipart, SizeLimit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The name of a deploy upload's first part, its [`DeployHead`].
pub const HEAD_PART: &str = "upload";

/// The name of each part after the head: one function's component, the function's
/// name as the part's file name.
pub const COMPONENT_PART: &str = "component";

/// The most bytes a deploy's manifest may have, and its Karmem schemas together: far
/// more than any written by hand, and little enough that what a deployment keeps in
/// every gateway's memory and in the state database stays small, however many a
/// tenant deploys (its components are kept apart: compiled, on disk).
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// The longest manifest file name a deploy may give (it names the manifest in errors
/// and is kept with the deployment): far beyond any path.
pub const MAX_FILE_NAME_BYTES: usize = 4096;

/// The most bytes the head part may have: the manifest and the schemas at their limits,
/// with room for JSON's escapes (a `"` is two bytes, a control character six), so that
/// a text over its limit is refused naming that text rather than the part.
const MAX_HEAD_BYTES: u64 = 8 * MAX_MANIFEST_BYTES as u64;

/// The first part of a deploy upload: everything but the components' bytes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployHead {
    /// The manifest's file name, for error messages.
    pub file_name: String,
    /// The workflow.toml text.
    pub manifest: String,
    /// The size in bytes of each function's component, by function name: the
    /// [`COMPONENT_PART`] parts after the head carry exactly these.
    pub components: BTreeMap<String, u64>,
    /// The text of every Karmem `.km` file the manifest names, by file name as written
    /// in it (`blob.km`); the interfaces' memories are resolved from them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub schemas: BTreeMap<String, String>,
}

impl DeployHead {
    /// The head of an upload of `request`.
    #[must_use]
    pub fn of(request: &DeployRequest) -> Self {
        Self {
            file_name: request.file_name.clone(),
            manifest: request.manifest.clone(),
            components: request
                .components
                .iter()
                .map(|(function, component)| (function.clone(), component.len() as u64))
                .collect(),
            schemas: request.schemas.clone(),
        }
    }
}

/// Why an upload could not be read; each answers with its own status and kind.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    /// The body is not `multipart/form-data`.
    #[error(
        "a deploy upload is multipart/form-data: a part `{HEAD_PART}` (JSON: file_name, \
         manifest, components, schemas), then a part `{COMPONENT_PART}` per function named \
         after it; this one is `{0}` (a faas CLI older than the gateway? update it)"
    )]
    NotMultipart(String),
    /// The body, or the components its head lists, are past the gateway's limit.
    #[error("the deploy upload exceeds the limit of {0} bytes")]
    TooLarge(u64),
    /// The head part is past [`MAX_HEAD_BYTES`].
    #[error("the deploy upload's `{HEAD_PART}` part exceeds {MAX_HEAD_BYTES} bytes")]
    HeadTooLarge,
    /// The manifest or the schemas are past [`MAX_MANIFEST_BYTES`].
    #[error("the {what} is {size} bytes; a deploy's may have at most {MAX_MANIFEST_BYTES}")]
    TextTooLarge {
        /// Which text.
        what: String,
        /// Its size.
        size: usize,
    },
    /// The manifest's file name is past [`MAX_FILE_NAME_BYTES`].
    #[error("the manifest's file name is {0} bytes; it may have at most {MAX_FILE_NAME_BYTES}")]
    FileNameTooLong(usize),
    /// The parts are not what a deploy upload is made of.
    #[error("the deploy upload {0}")]
    Malformed(String),
    /// The body could not be read (the client went away).
    #[error("reading the deploy upload: {0}")]
    Read(String),
    /// The upload took longer than its size allows (see [`upload_deadline`]).
    #[error("the deploy upload took longer than {0} s: send it again (at least 1 MiB/s)")]
    TooSlow(u64),
    /// The components its head lists do not fit what uploads may hold in the gateway.
    #[error("{}", over_budget_message(*.0))]
    Budget(OverBudget),
}

/// What the upload budget's refusal `over` says.
fn over_budget_message(over: OverBudget) -> String {
    match over {
        OverBudget::Share { limit } => format!(
            "this tenant's deploy uploads in the gateway would exceed {} MiB (one upload \
             at --max-deploy-mb); try again when its deploy in progress is done",
            limit >> 20
        ),
        OverBudget::Total { limit } => format!(
            "the gateway holds {} MiB of deploy uploads (two at --max-deploy-mb); try \
             again shortly",
            limit >> 20
        ),
    }
}

impl UploadError {
    /// The status to answer with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Self::NotMultipart(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::TooLarge(_)
            | Self::HeadTooLarge
            | Self::TextTooLarge { .. }
            | Self::FileNameTooLong(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Malformed(_) | Self::Read(_) => StatusCode::BAD_REQUEST,
            Self::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Budget(OverBudget::Share { .. }) => StatusCode::TOO_MANY_REQUESTS,
            Self::Budget(OverBudget::Total { .. }) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The error's `kind`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::TooLarge(_)
            | Self::HeadTooLarge
            | Self::TextTooLarge { .. }
            | Self::FileNameTooLong(_) => "body_too_large",
            Self::Read(_) => "bad_body",
            Self::NotMultipart(_) | Self::Malformed(_) => "bad_upload",
            Self::Budget(_) => "deploy_budget",
            Self::TooSlow(_) => "upload_timeout",
        }
    }

    fn malformed(message: impl Into<String>) -> Self {
        Self::Malformed(message.into())
    }
}

impl From<multer::Error> for UploadError {
    fn from(err: multer::Error) -> Self {
        match err {
            multer::Error::StreamSizeExceeded { limit } => Self::TooLarge(limit),
            multer::Error::FieldSizeExceeded { .. } => Self::HeadTooLarge,
            multer::Error::UnknownField { field_name } => Self::malformed(format!(
                "has a part `{}`; its parts are `{HEAD_PART}` and `{COMPONENT_PART}`",
                field_name.unwrap_or_default()
            )),
            multer::Error::StreamReadFailed(err) => Self::Read(err.to_string()),
            other => Self::malformed(format!("is not valid multipart/form-data: {other}")),
        }
    }
}

/// How long an upload of at most `limit` bytes may take to arrive: a minute, and a
/// second a MiB. What it holds of the upload budget, it holds until then at most, so
/// uploads that stop short of their end (holding most of it) cannot keep others' out.
pub(crate) fn upload_deadline(limit: u64) -> Duration {
    Duration::from_secs(60 + (limit >> 20))
}

/// How long a refused upload is read on, at most, before its refusal is sent.
const DRAIN_PATIENCE: Duration = Duration::from_secs(10);

/// Reads the upload whose `Content-Type` is `content_type` from `body`, of at most
/// `limit` bytes.
pub(crate) async fn read<'a, S, O, E>(
    content_type: Option<&str>,
    body: S,
    limit: u64,
    held: &mut UploadClaim,
) -> Result<DeployRequest, UploadError>
where
    S: Stream<Item = Result<O, E>> + Send + 'a,
    O: Into<Bytes> + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'a,
{
    let content_type = content_type.unwrap_or("none");
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| UploadError::NotMultipart(content_type.to_owned()))?;
    let constraints = Constraints::new()
        .allowed_fields(vec![HEAD_PART, COMPONENT_PART])
        .size_limit(
            SizeLimit::new()
                .whole_stream(limit)
                .for_field(HEAD_PART, MAX_HEAD_BYTES),
        );
    let mut parts = Multipart::with_constraints(body, boundary, constraints);

    let head = match parts.next_field().await? {
        Some(field) if field.name() == Some(HEAD_PART) => field.bytes().await?,
        Some(_) => {
            return Err(UploadError::malformed(format!(
                "does not begin with its `{HEAD_PART}` part"
            )));
        }
        None => return Err(UploadError::malformed("has no parts")),
    };
    let head_len = head.len() as u64;
    let head: DeployHead = serde_json::from_slice(&head).map_err(|err| {
        UploadError::malformed(format!("has a `{HEAD_PART}` part that is not valid: {err}"))
    })?;
    check_text_sizes(&head)?;
    let listed = head
        .components
        .values()
        .try_fold(0u64, |sum, size| sum.checked_add(*size));
    // The head came in the same stream, so the whole is within `limit` too.
    if listed
        .and_then(|listed| listed.checked_add(head_len))
        .is_none_or(|bytes| bytes > limit)
    {
        return Err(UploadError::TooLarge(limit));
    }
    // What the upload holds grows with what arrives (a buffer of the listed size is
    // memory only once written), until the deploy is done: an upload that lists much
    // and sends little holds little.
    held.grow_to(head_len).map_err(UploadError::Budget)?;

    let mut components = BTreeMap::new();
    while let Some(mut field) = parts.next_field().await? {
        if field.name() != Some(COMPONENT_PART) {
            return Err(UploadError::malformed(format!(
                "has a second `{HEAD_PART}` part"
            )));
        }
        let Some(function) = field.file_name().map(str::to_owned) else {
            return Err(UploadError::malformed(format!(
                "has a `{COMPONENT_PART}` part without a file name (the function's name)"
            )));
        };
        let Some(&size) = head.components.get(&function) else {
            return Err(UploadError::malformed(format!(
                "has a component of function `{function}`, which its `{HEAD_PART}` part \
                 does not list"
            )));
        };
        if components.contains_key(&function) {
            return Err(UploadError::malformed(format!(
                "has two components of function `{function}`"
            )));
        }
        // The whole stream is within `limit`, and so is `size`: the listed sizes' sum is.
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(usize::MAX));
        while let Some(chunk) = field.chunk().await? {
            if (bytes.len() + chunk.len()) as u64 > size {
                return Err(wrong_size(&function, size, "more"));
            }
            held.grow_to(held.bytes() + chunk.len() as u64)
                .map_err(UploadError::Budget)?;
            bytes.extend_from_slice(&chunk);
        }
        if bytes.len() as u64 != size {
            return Err(wrong_size(&function, size, "fewer"));
        }
        components.insert(function, Component::new(bytes));
    }
    if let Some(missing) = head
        .components
        .keys()
        .find(|f| !components.contains_key(*f))
    {
        return Err(UploadError::malformed(format!(
            "lists a component of function `{missing}` in its `{HEAD_PART}` part and does \
             not send it"
        )));
    }
    Ok(DeployRequest {
        file_name: head.file_name,
        manifest: head.manifest,
        components,
        schemas: head.schemas,
    })
}

/// Reads what is left of a refused upload and drops it, up to `limit` bytes and for
/// [`DRAIN_PATIENCE`] at most. A client still sending when the refusal is written (the
/// head lied, or a text was too long) would otherwise find the connection reset, as
/// the gateway closes it with the body unread, before it reads why.
pub(crate) async fn drain<S, O, E>(body: &mut S, limit: u64)
where
    S: Stream<Item = Result<O, E>> + Unpin,
    O: AsRef<[u8]>,
{
    let read_on = async {
        let mut read = 0u64;
        while read < limit {
            match body.next().await {
                Some(Ok(chunk)) => read += chunk.as_ref().len() as u64,
                Some(Err(_)) | None => break,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_PATIENCE, read_on).await;
}

fn wrong_size(function: &str, size: u64, than: &str) -> UploadError {
    UploadError::malformed(format!(
        "sends {than} bytes of function `{function}`'s component than the {size} its \
         `{HEAD_PART}` part says"
    ))
}

/// Refuses a manifest file name past [`MAX_FILE_NAME_BYTES`], and a manifest, or
/// schemas with their names, past [`MAX_MANIFEST_BYTES`]: the head may be larger than
/// both (its JSON escapes), and what it names is kept with the deployment.
fn check_text_sizes(head: &DeployHead) -> Result<(), UploadError> {
    if head.file_name.len() > MAX_FILE_NAME_BYTES {
        return Err(UploadError::FileNameTooLong(head.file_name.len()));
    }
    let schemas: usize = head
        .schemas
        .iter()
        .map(|(name, text)| name.len() + text.len())
        .sum();
    let (what, size) = if head.manifest.len() > MAX_MANIFEST_BYTES {
        (format!("manifest {}", head.file_name), head.manifest.len())
    } else if schemas > MAX_MANIFEST_BYTES {
        (
            "Karmem schemas (.km files and their names, together)".to_owned(),
            schemas,
        )
    } else {
        return Ok(());
    };
    Err(UploadError::TextTooLarge { what, size })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    const BOUNDARY: &str = "b0undary";

    /// One part of a test body: its name, file name and content.
    type TestPart<'a> = (&'a str, Option<&'a str>, &'a [u8]);

    /// A multipart body of `parts`.
    fn body(parts: &[TestPart]) -> Vec<u8> {
        let mut body = Vec::new();
        for (name, file_name, content) in parts {
            body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
            let file_name = file_name.map_or(String::new(), |f| format!("; filename=\"{f}\""));
            body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"{file_name}\r\n\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(content);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
        body
    }

    fn head(components: &[(&str, u64)]) -> Vec<u8> {
        serde_json::to_vec(&DeployHead {
            file_name: "workflow.toml".into(),
            manifest: "name = \"x\"".into(),
            components: components
                .iter()
                .map(|(f, s)| ((*f).to_owned(), *s))
                .collect(),
            schemas: BTreeMap::new(),
        })
        .unwrap()
    }

    async fn read_body(body: Vec<u8>, limit: u64) -> Result<DeployRequest, UploadError> {
        // Sent in small chunks, as a network would, so parts span chunks.
        let chunks: Vec<Result<Bytes, Infallible>> = body
            .chunks(7)
            .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
            .collect();
        let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
        read(
            Some(&content_type),
            futures_util::stream::iter(chunks),
            limit,
            &mut unlimited(),
        )
        .await
    }

    /// A claim of a budget that takes anything.
    fn unlimited() -> UploadClaim {
        crate::deploy_admission::upload_budget(usize::MAX / 2).claim(None)
    }

    #[tokio::test]
    async fn components_arrive_whole_and_by_function() {
        let head = head(&[("a", 5), ("b", 3)]);
        let upload = body(&[
            (HEAD_PART, None, &head),
            (COMPONENT_PART, Some("b"), b"\r\n-"),
            (COMPONENT_PART, Some("a"), b"hello"),
        ]);
        let request = read_body(upload, 1 << 20).await.unwrap();
        assert_eq!(request.file_name, "workflow.toml");
        assert_eq!(&request.components["a"][..], b"hello");
        assert_eq!(&request.components["b"][..], b"\r\n-");
    }

    #[tokio::test]
    async fn a_body_that_is_not_multipart_is_refused_naming_its_type() {
        let err = read(
            Some("application/json"),
            futures_util::stream::iter(vec![Ok::<_, Infallible>(Bytes::from_static(b"{}"))]),
            1 << 20,
            &mut unlimited(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(err.to_string().contains("`application/json`"), "{err}");
    }

    #[tokio::test]
    async fn sizes_that_lie_are_refused() {
        for (listed, sent, says) in [(4, &b"hello"[..], "more"), (6, b"hello", "fewer")] {
            let head = head(&[("a", listed)]);
            let upload = body(&[(HEAD_PART, None, &head), (COMPONENT_PART, Some("a"), sent)]);
            let err = read_body(upload, 1 << 20).await.unwrap_err();
            assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{err}");
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[tokio::test]
    async fn listed_sizes_past_the_limit_are_refused_before_any_component_is_read() {
        // The parts after the head never come: the refusal must not wait for them.
        let head = head(&[("a", 600), ("b", u64::MAX)]);
        let mut upload = body(&[(HEAD_PART, None, &head)]);
        upload.truncate(upload.len() - format!("--{BOUNDARY}--\r\n").len());
        upload.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        let err = read_body(upload, 1000).await.unwrap_err();
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE, "{err}");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused() {
        let head = head(&[("a", 5)]);
        let upload = body(&[
            (HEAD_PART, None, &head),
            (COMPONENT_PART, Some("a"), b"hello"),
        ]);
        let limit = upload.len() as u64 - 1;
        let err = read_body(upload, limit).await.unwrap_err();
        assert!(
            matches!(err, UploadError::TooLarge(l) if l == limit),
            "{err}"
        );
    }

    #[tokio::test]
    async fn parts_out_of_place_are_refused_naming_what_is_wrong() {
        let listed = head(&[("a", 5)]);
        let cases: [(Vec<TestPart>, &str); 6] = [
            (
                vec![(COMPONENT_PART, Some("a"), b"hello")],
                "does not begin",
            ),
            (vec![], "has no parts"),
            (
                vec![
                    (HEAD_PART, None, &listed),
                    (COMPONENT_PART, Some("b"), b"hello"),
                ],
                "function `b`, which its `upload` part does not list",
            ),
            (
                vec![(HEAD_PART, None, &listed), (COMPONENT_PART, None, b"hello")],
                "without a file name",
            ),
            (vec![(HEAD_PART, None, &listed)], "does not send it"),
            (
                vec![(HEAD_PART, None, &listed), ("extra", None, b"x")],
                "has a part `extra`",
            ),
        ];
        for (parts, says) in cases {
            let err = read_body(body(&parts), 1 << 20).await.unwrap_err();
            assert_eq!(err.status(), StatusCode::BAD_REQUEST, "{err}");
            assert!(err.to_string().contains(says), "{says}: {err}");
        }
        let twice = body(&[
            (HEAD_PART, None, &listed),
            (COMPONENT_PART, Some("a"), b"hello"),
            (COMPONENT_PART, Some("a"), b"hello"),
        ]);
        let err = read_body(twice, 1 << 20).await.unwrap_err();
        assert!(err.to_string().contains("two components"), "{err}");
    }
}
