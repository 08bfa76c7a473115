//! A Workflow's components: already in Redis under their SHA-256 (stored by its own
//! tenant), or fetched from their URL (bounded in size and time and by the tenant's
//! code quota, verified against the digest, checked to be a WebAssembly component) and
//! stored there content-addressed.

use super::Context;
use super::reconcile::{CodeRoom, Refusal};
use faas_kube::ComponentSource;
use faas_kube::status::reason;
use faas_shared_state::SharedStateError;
use sha2::{Digest, Sha256};

/// Makes sure function `function`'s component `source` is in Redis, fetching it within
/// `room` (what the tenant's code quota leaves; `None`: no quota), which it takes from.
/// A component it stores, not stored before, is added to `created` (its digest and
/// stamp), to be deleted if the deploy does not go through.
///
/// # Errors
/// `Ok(Err(refusal))` when it is missing, cannot be fetched, would pass the quota, or
/// is not what the spec names; `Err` when Redis fails (retried).
pub(crate) async fn ensure(
    context: &Context,
    tenant: &str,
    function: &str,
    source: &ComponentSource,
    room: &mut Option<CodeRoom>,
    created: &mut Vec<(String, u64)>,
) -> Result<Result<(), Refusal>, SharedStateError> {
    // Only a component this tenant stored itself: another tenant's, named by its
    // digest, would run that tenant's code in this one's name. Refused as if it were
    // not stored at all, so that the refusal tells nothing of other tenants' code; with
    // a URL its bytes are fetched, and by matching the digest this tenant shows it has
    // them.
    if context
        .shared
        .has_component_of(tenant, &source.sha256)
        .await?
    {
        return Ok(Ok(()));
    }
    let field = format!("spec.functions.{function}.component");
    let Some(url) = &source.url else {
        return Ok(Err(Refusal::new(
            reason::COMPONENT_MISSING,
            format!(
                "{field}: component sha256:{} is not uploaded by this tenant and no url is \
                 given (deploy it with `faas deploy`, or set {field}.url)",
                source.sha256
            ),
        )));
    };
    let sha256 = &source.sha256;
    // A refusal of what the URL answered (or failed to) waits before the next fetch.
    let refused = |reason, message| {
        let refusal = Refusal::new(reason, message);
        Ok(Err(context
            .refused_fetches
            .refused(tenant, url, sha256, refusal)))
    };
    // Held until the bytes are in Redis: the command copies them.
    let (bytes, _fetching) = match fetch(context, tenant, url, *room).await {
        Ok(fetched) => fetched,
        Err(Unfetched::Failed(message)) => {
            return refused(
                reason::COMPONENT_FETCH_FAILED,
                format!("{field}.url: fetching {url}: {message}"),
            );
        }
        Err(Unfetched::Busy(message)) => {
            return Ok(Err(Refusal::new(
                reason::COMPONENT_FETCH_FAILED,
                format!("{field}.url: fetching {url}: {message}"),
            )));
        }
        Err(Unfetched::PastQuota(room)) => {
            return Ok(Err(Refusal::new(
                reason::QUOTA,
                format!(
                    "{field}.url: {url} is larger than the {:.1} MiB the tenant's \
                     code quota leaves (code_max_mb = {}); not fetched",
                    room.left as f64 / f64::from(1 << 20),
                    room.max_mb
                ),
            )));
        }
    };
    if let Some(room) = room {
        room.left -= bytes.len() as u64;
    }
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != *sha256 {
        return refused(
            reason::DIGEST_MISMATCH,
            format!("{field}.sha256: {url} has SHA-256 {actual}, the spec says {sha256}"),
        );
    }
    if let Err(why) = faas_workflow::check_component_header(&bytes) {
        return refused(
            reason::INVALID_COMPONENT,
            format!("{field}.url: {url} is not a WebAssembly component: {why}"),
        );
    }
    context.refused_fetches.fetched(tenant, url, sha256);
    let stored = context
        .shared
        .put_component(&actual, &bytes, tenant)
        .await?;
    if stored.created {
        created.push((actual.clone(), stored.stamp));
    }
    tracing::info!(function, url = %url, sha256 = %actual, bytes = bytes.len(), "fetched component");
    Ok(Ok(()))
}

/// The refusal of one of `sources` fetched lately for `tenant` and refused, while its
/// wait lasts ([`super::refetch`]); not of one the tenant has stored since (uploaded
/// by digest), which needs no fetch.
///
/// # Errors
/// When Redis fails (retried).
pub(crate) async fn refused_lately<'a>(
    context: &Context,
    tenant: &str,
    sources: impl Iterator<Item = &'a ComponentSource>,
) -> Result<Option<Refusal>, SharedStateError> {
    for source in sources {
        let Some(url) = source.url.as_deref() else {
            continue;
        };
        let standing = context
            .refused_fetches
            .standing(tenant, url, &source.sha256);
        if let Some(refusal) = standing
            && !context
                .shared
                .has_component_of(tenant, &source.sha256)
                .await?
        {
            return Ok(Some(refusal));
        }
    }
    Ok(None)
}

/// Why a component was not fetched.
enum Unfetched {
    /// The URL, the server or the size past `--max-component-bytes`.
    Failed(String),
    /// The operator is fetching as many bytes as it holds at once: no fault of the
    /// URL's, so tried again without waiting for it.
    Busy(String),
    /// It is larger than what the tenant's code quota leaves.
    PastQuota(CodeRoom),
}

/// The body at `url` (http or https), refused beyond the configured size or `room`, as
/// soon as its `Content-Length` or the bytes read so far are past either; with its
/// claim on the operator's bytes being fetched (`Context::fetching`).
async fn fetch(
    context: &Context,
    tenant: &str,
    url: &str,
    room: Option<CodeRoom>,
) -> Result<(Vec<u8>, faas_budget::Claim<String>), Unfetched> {
    let failed = |message: String| Unfetched::Failed(message);
    let parsed = reqwest::Url::parse(url).map_err(|err| failed(format!("not a URL: {err}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(failed(format!(
            "scheme `{}` is not http or https",
            parsed.scheme()
        )));
    }
    if let Some(refused) =
        super::fetch_client::refused_host(&parsed, &context.config.component_private_networks)
    {
        return Err(failed(refused));
    }
    let limit = context.config.max_component_bytes;
    let within = |size: u64| {
        if size > limit {
            Err(failed(format!(
                "larger than the limit of {limit} bytes (--max-component-bytes)"
            )))
        } else if let Some(room) = room.filter(|room| size > room.left) {
            Err(Unfetched::PastQuota(room))
        } else {
            Ok(())
        }
    };
    let mut response = context
        .http
        .get(parsed)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|err| failed(describe(err)))?;
    let mut fetching = context.fetching.claim(tenant.to_owned());
    let mut hold = |size: u64| {
        fetching.grow_to(size).map_err(|_| {
            Unfetched::Busy(format!(
                "the operator is fetching {limit} bytes of components already; retried later"
            ))
        })
    };
    if let Some(length) = response.content_length() {
        within(length)?;
        hold(length)?;
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| failed(describe(err)))?
    {
        let size = (bytes.len() + chunk.len()) as u64;
        within(size)?;
        hold(size)?;
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, fetching))
}

/// A fetch's error with its causes ("error sending request" alone would not say that
/// the name resolved to no public address, or that the server refused).
fn describe(err: reqwest::Error) -> String {
    let err = err.without_url();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}
