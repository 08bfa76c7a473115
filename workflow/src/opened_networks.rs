//! The non-public networks the operator opened to guests' outbound HTTP
//! (`--outbound-private-networks`), to every tenant or to one.
//!
//! Workers are shared by tenants, so a network opened for one tenant's database would,
//! opened to all, be open to every other tenant's code too (any tenant may write an
//! entry naming the database's address). An entry `TENANT=NETWORK` opens `NETWORK` to
//! that tenant's functions only; a bare `NETWORK` opens it to every tenant.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::is_valid_name;

/// One entry of `--outbound-private-networks`: `[TENANT=]NETWORK`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedNetwork {
    /// The tenant it is opened to; `None` for every tenant.
    pub tenant: Option<String>,
    /// The network: a CIDR range, or one address.
    pub network: IpNet,
}

impl FromStr for OpenedNetwork {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let Some((tenant, network)) = text.split_once('=') else {
            return Ok(Self {
                tenant: None,
                network: parse_network(text)?,
            });
        };
        let tenant = tenant.trim();
        if !is_valid_name(tenant) {
            return Err(format!(
                "`{text}`: `{tenant}` before `=` is not a tenant name (a lowercase letter, \
                 then lowercase letters, digits and `-`)"
            ));
        }
        Ok(Self {
            tenant: Some(tenant.to_owned()),
            network: parse_network(network).map_err(|err| format!("`{text}`: {err}"))?,
        })
    }
}

impl fmt::Display for OpenedNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.tenant {
            Some(tenant) => write!(f, "{tenant}={}", self.network),
            None => write!(f, "{}", self.network),
        }
    }
}

/// A network of `--outbound-private-networks` or `--component-private-networks`: a CIDR
/// range, or one address.
///
/// # Errors
/// A message naming `text` when it is neither.
/// A network holding one of [`CLOUD_METADATA`] is refused.
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    let network = text
        .parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is neither a CIDR range (10.1.0.0/16) nor an address"))?;
    if let Some(metadata) = CLOUD_METADATA
        .iter()
        .find(|address| network.contains(&address.parse::<std::net::IpAddr>().unwrap()))
    {
        return Err(format!(
            "`{text}` holds {metadata}, a cloud provider's metadata or host-agent address: \
             code it is opened to could read the node's cloud credentials (and a Kubernetes \
             NetworkPolicy opens it to every worker pod, whatever the tenant); open a \
             narrower network"
        ));
    }
    Ok(network)
}

/// Addresses no opened network may hold: where a cloud VM's metadata service (its
/// credentials among them) or host agent answers, reachable from every machine of the
/// cloud. AWS, GCP, Azure and others at `169.254.169.254`, AWS's IPv6
/// `fd00:ec2::254`, Azure's WireServer `168.63.129.16`, Alibaba Cloud's
/// `100.100.100.200`.
pub const CLOUD_METADATA: [&str; 4] = [
    "169.254.169.254",
    "fd00:ec2::254",
    "168.63.129.16",
    "100.100.100.200",
];

/// Every network opened, looked up by tenant ([`OpenedNetworks::of`]) on each event.
#[derive(Debug, Clone, Default)]
pub struct OpenedNetworks {
    /// Opened to every tenant.
    everyone: Arc<[IpNet]>,
    /// Each tenant with networks of its own: those and [`Self::everyone`]'s.
    by_tenant: HashMap<String, Arc<[IpNet]>>,
}

impl OpenedNetworks {
    /// The networks `entries` open.
    pub fn new(entries: &[OpenedNetwork]) -> Self {
        let everyone: Vec<IpNet> = entries
            .iter()
            .filter(|entry| entry.tenant.is_none())
            .map(|entry| entry.network)
            .collect();
        let mut own: HashMap<String, Vec<IpNet>> = HashMap::new();
        for entry in entries {
            if let Some(tenant) = &entry.tenant {
                own.entry(tenant.clone())
                    .or_insert_with(|| everyone.clone())
                    .push(entry.network);
            }
        }
        Self {
            everyone: everyone.into(),
            by_tenant: own
                .into_iter()
                .map(|(tenant, networks)| (tenant, networks.into()))
                .collect(),
        }
    }

    /// The networks opened to `tenant`'s functions.
    pub fn of(&self, tenant: &str) -> Arc<[IpNet]> {
        self.by_tenant.get(tenant).unwrap_or(&self.everyone).clone()
    }

    /// Whether no network is opened to anyone.
    pub fn is_empty(&self) -> bool {
        self.everyone.is_empty() && self.by_tenant.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(entries: &[&str]) -> OpenedNetworks {
        let entries: Vec<OpenedNetwork> = entries.iter().map(|e| e.parse().unwrap()).collect();
        OpenedNetworks::new(&entries)
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|net| net.parse().unwrap()).collect()
    }

    #[test]
    fn a_network_named_for_a_tenant_is_opened_to_it_alone_and_a_bare_one_to_all() {
        let opened = opened(&[
            "10.0.0.0/8",
            "acme=192.168.1.0/24",
            "acme=::1",
            "beta=127.0.0.1",
        ]);
        assert_eq!(
            *opened.of("acme"),
            *nets(&["10.0.0.0/8", "192.168.1.0/24", "::1/128"])
        );
        assert_eq!(*opened.of("beta"), *nets(&["10.0.0.0/8", "127.0.0.1/32"]));
        assert_eq!(*opened.of("mallory"), *nets(&["10.0.0.0/8"]));
        assert!(OpenedNetworks::default().of("acme").is_empty());
    }

    #[test]
    fn an_entry_reads_back_as_written_and_a_bad_one_says_which_part_is_wrong() {
        for text in ["10.1.0.0/16", "acme=10.1.0.0/16", "acme=fd00::5/128"] {
            assert_eq!(text.parse::<OpenedNetwork>().unwrap().to_string(), text);
        }
        let address: OpenedNetwork = " acme = 127.0.0.1 ".parse().unwrap();
        assert_eq!(address.tenant.as_deref(), Some("acme"));
        assert_eq!(address.network, "127.0.0.1/32".parse::<IpNet>().unwrap());
        let err = "Acme=10.0.0.0/8".parse::<OpenedNetwork>().unwrap_err();
        assert!(
            err.contains("`Acme` before `=` is not a tenant name"),
            "{err}"
        );
        let err = "=10.0.0.0/8".parse::<OpenedNetwork>().unwrap_err();
        assert!(err.contains("is not a tenant name"), "{err}");
        let err = "acme=10.0.0".parse::<OpenedNetwork>().unwrap_err();
        assert!(
            err.contains("`acme=10.0.0`: `10.0.0` is neither a CIDR range"),
            "{err}"
        );
        let err = "db.internal".parse::<OpenedNetwork>().unwrap_err();
        assert!(err.contains("`db.internal` is neither"), "{err}");
    }

    #[test]
    fn a_network_holding_a_cloud_metadata_address_is_refused() {
        for (entry, holds) in [
            ("acme=169.254.0.0/16", "169.254.169.254"),
            ("0.0.0.0/0", "169.254.169.254"),
            ("acme=169.254.169.254", "169.254.169.254"),
            ("fd00::/8", "fd00:ec2::254"),
            ("168.63.0.0/16", "168.63.129.16"),
            ("acme=100.64.0.0/10", "100.100.100.200"),
        ] {
            let err = entry.parse::<OpenedNetwork>().unwrap_err();
            assert!(
                err.contains(&format!("holds {holds}, a cloud")),
                "{entry}: {err}"
            );
        }
        for entry in [
            "169.254.20.10",
            "fd00:ec2::/120",
            "10.0.0.0/8",
            "100.64.0.0/16",
        ] {
            entry.parse::<OpenedNetwork>().expect(entry);
        }
    }
}
