//! A Workflow's components: already in Redis under their SHA-256, or fetched from their
//! URL (bounded in size and time, verified against the digest, checked to be a
//! WebAssembly component) and stored there content-addressed.

use super::Context;
use super::reconcile::Refusal;
use faas_kube::ComponentSource;
use faas_kube::status::reason;
use faas_shared_state::SharedStateError;
use sha2::{Digest, Sha256};

/// Makes sure function `function`'s component `source` is in Redis.
///
/// # Errors
/// `Ok(Err(refusal))` when it is missing, cannot be fetched, or is not what the spec
/// names; `Err` when Redis fails (retried).
pub(crate) async fn ensure(
    context: &Context,
    function: &str,
    source: &ComponentSource,
) -> Result<Result<(), Refusal>, SharedStateError> {
    if context.shared.has_component(&source.sha256).await? {
        return Ok(Ok(()));
    }
    let field = format!("spec.functions.{function}.component");
    let Some(url) = &source.url else {
        return Ok(Err(Refusal::new(
            reason::COMPONENT_MISSING,
            format!(
                "{field}: component sha256:{} is not uploaded and no url is given (deploy it \
                 with `faas deploy`, or set {field}.url)",
                source.sha256
            ),
        )));
    };
    let bytes = match fetch(context, url).await {
        Ok(bytes) => bytes,
        Err(message) => {
            return Ok(Err(Refusal::new(
                reason::COMPONENT_FETCH_FAILED,
                format!("{field}.url: fetching {url}: {message}"),
            )));
        }
    };
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != source.sha256 {
        return Ok(Err(Refusal::new(
            reason::DIGEST_MISMATCH,
            format!(
                "{field}.sha256: {url} has SHA-256 {actual}, the spec says {}",
                source.sha256
            ),
        )));
    }
    if let Err(reason) = faas_workflow::check_component_header(&bytes) {
        return Ok(Err(Refusal::new(
            reason::INVALID_COMPONENT,
            format!("{field}.url: {url} is not a WebAssembly component: {reason}"),
        )));
    }
    context.shared.put_component(&actual, &bytes).await?;
    tracing::info!(function, url = %url, sha256 = %actual, bytes = bytes.len(), "fetched component");
    Ok(Ok(()))
}

/// The body at `url` (http or https), refused beyond the configured size.
async fn fetch(context: &Context, url: &str) -> Result<Vec<u8>, String> {
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("not a URL: {err}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("scheme `{}` is not http or https", parsed.scheme()));
    }
    let limit = context.config.max_component_bytes;
    let too_big = || format!("larger than the limit of {limit} bytes (--max-component-bytes)");
    let mut response = context
        .http
        .get(parsed)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|err| err.without_url().to_string())?;
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| err.without_url().to_string())?
    {
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(too_big());
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}
