//! The HTTP client the operator fetches Workflows' component URLs with. A tenant
//! writes the URL, and chooses what its name resolves to: fetched as it is, the URL
//! would reach what the operator's pod reaches (the cloud metadata address, the
//! cluster's services), and the Workflow's status would tell the tenant how each
//! answered. So, as for guests' outbound HTTP (`faas_workflow::OutboundAccess`), only
//! public addresses are fetched from, and those of the networks the operator opened
//! (`--component-private-networks`): names resolve through [`PublicResolver`], an
//! address in the URL is checked before the request, and so is each redirect's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use faas_workflow::OutboundAccess;
use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// How many redirects a fetch follows.
const MAX_REDIRECTS: usize = 5;

/// Whether a fetch may connect to `address`.
fn allowed(address: IpAddr, opened: &[IpNet]) -> bool {
    OutboundAccess::Named.allows_address(address, opened)
}

/// Why a URL is refused before any request: its host is an address not allowed.
pub(crate) fn refused_host(url: &reqwest::Url, opened: &[IpNet]) -> Option<String> {
    let host = url.host_str()?;
    let host = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
        .unwrap_or(host);
    let address: IpAddr = host.parse().ok()?;
    (!allowed(address, opened)).then(|| {
        format!(
            "{address} is not a public address (the operator's --component-private-networks \
             opens a network)"
        )
    })
}

/// Resolves names to the addresses a fetch may connect to; a name with none of
/// those fails.
struct PublicResolver {
    opened: Arc<[IpNet]>,
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let opened = self.opened.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|address| allowed(address.ip(), &opened))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address (the operator's \
                     --component-private-networks opens a network)"
                )
                .into());
            }
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

/// The client: `timeout` per fetch, connections only to allowed addresses.
///
/// # Errors
/// When reqwest cannot build it (no TLS backend).
pub(crate) fn build(
    timeout: Duration,
    opened: Arc<[IpNet]>,
) -> Result<reqwest::Client, reqwest::Error> {
    let redirects = opened.clone();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else if let Some(refused) = refused_host(attempt.url(), &redirects) {
            attempt.error(format!("redirected to {refused}"))
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(policy)
        .dns_resolver(Arc::new(PublicResolver { opened }))
        // A proxy from the environment (`HTTPS_PROXY` in the operator's pod) would
        // resolve the tenant's host itself, where `PublicResolver` checks nothing.
        .no_proxy()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).unwrap()
    }

    #[test]
    fn an_address_in_the_url_is_refused_unless_public_or_opened() {
        for refused in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:8080/c.wasm",
            "http://10.0.0.5/c.wasm",
            "http://[::1]/c.wasm",
            "http://[::ffff:127.0.0.1]/c.wasm",
        ] {
            assert!(refused_host(&url(refused), &[]).is_some(), "{refused}");
        }
        assert!(refused_host(&url("https://93.184.216.34/c.wasm"), &[]).is_none());
        assert!(refused_host(&url("https://example.com/c.wasm"), &[]).is_none());
        let opened: [IpNet; 1] = ["10.0.0.0/8".parse().unwrap()];
        assert!(refused_host(&url("http://10.0.0.5/c.wasm"), &opened).is_none());
        assert!(refused_host(&url("http://127.0.0.1/c.wasm"), &opened).is_some());
    }

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_connects_nowhere() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = build(Duration::from_secs(5), Arc::from([])).unwrap();
        let err = client
            .get(format!("http://localhost:{port}/c.wasm"))
            .send()
            .await
            .unwrap_err();
        let text = format!("{err:?}");
        assert!(text.contains("resolves to no public address"), "{text}");
        assert!(listener.accept().is_err(), "the listener was connected to");
        // Opened, the same name is fetched from.
        let opened: Arc<[IpNet]> =
            Arc::from(["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]);
        let client = build(Duration::from_secs(5), opened).unwrap();
        let fetch = tokio::spawn(async move {
            client
                .get(format!("http://localhost:{port}/c.wasm"))
                .send()
                .await
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if listener.accept().is_ok() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never connected");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        fetch.abort();
    }
}
