//! `allowed_outbound_hosts`: where a function's outbound HTTP requests may go.
//!
//! Outbound HTTP is denied unless the function lists the destination, as in Spin. Each
//! entry is `scheme://host[:port]`:
//! - `scheme` is `http`, `https`, or `*` for both;
//! - `host` is a DNS name (`api.example.com`), `*.example.com` for any subdomain of
//!   `example.com` (not `example.com` itself), `*` for any host, an IPv4 address or an
//!   IPv6 address in brackets (`[::1]`);
//! - `port` is a number, `*` for any port, or a range `1000..2000` (1000 to 1999: the end
//!   is excluded, as in Spin). Omitted, it is the scheme's default: 80 for `http`, 443
//!   for `https` (and whichever of the two the request uses for `*`).
//!
//! No path, query, user info, CIDR range, `{...}` list or template is accepted.
//!
//! Matching the request's URL is only the first check. The address the host resolves to
//! is checked too (see [`OutboundAccess`]): an address that is not public (loopback,
//! private, link-local such as the cloud metadata address, unspecified...; see
//! [`is_public_address`]) is reachable only where the operator opened its network to
//! outbound HTTP (a worker's `--outbound-private-networks`), and then only through an
//! entry that names its host explicitly (`http://127.0.0.1:8080`,
//! `http://localhost:3000`, `https://db.internal`), never through a wildcard host. A
//! tenant's entry alone opens no such address: the tenant chooses the name, and what it
//! resolves to (`http://metadata.tenant.example` may resolve to `169.254.169.254`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// A function's `allowed_outbound_hosts`, in file order. Empty (the default) denies
/// every outbound request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AllowedOutboundHosts(pub Vec<OutboundHost>);

/// Whether a request may be sent, and to which addresses. See
/// [`AllowedOutboundHosts::access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundAccess {
    /// No entry matches the request's scheme, host and port.
    Denied,
    /// Only wildcard entries match: the host may only resolve to public addresses.
    PublicOnly,
    /// An entry names the host explicitly: it may resolve to public addresses, and to
    /// those of the non-public networks the operator opened.
    Named,
}

impl OutboundAccess {
    /// Whether a connection to `address` (one the request's host resolved to) is
    /// allowed, where the operator opened the non-public networks `opened`.
    pub fn allows_address(self, address: IpAddr, opened: &[IpNet]) -> bool {
        match self {
            OutboundAccess::Denied => false,
            OutboundAccess::PublicOnly => is_public_address(address),
            OutboundAccess::Named => {
                // An IPv4-mapped address is its IPv4 one for the operator's ranges too.
                let address = address.to_canonical();
                is_public_address(address) || opened.iter().any(|net| net.contains(&address))
            }
        }
    }
}

impl AllowedOutboundHosts {
    /// Whether the list is empty (every request denied).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = &OutboundHost> {
        self.0.iter()
    }

    /// What a request to `scheme://host:port` may reach. `host` is as in the request's
    /// URL: a DNS name, an IPv4 address or an IPv6 address (bracketed or not). The
    /// caller must then check every address the host resolves to with
    /// [`OutboundAccess::allows_address`], and connect to a checked address.
    pub fn access(&self, scheme: &str, host: &str, port: u16) -> OutboundAccess {
        let Some(host) = RequestHost::parse(host) else {
            return OutboundAccess::Denied;
        };
        let mut access = OutboundAccess::Denied;
        for entry in self
            .iter()
            .filter(|entry| entry.allows(scheme, &host, port))
        {
            if entry.host.is_explicit() {
                return OutboundAccess::Named;
            }
            access = OutboundAccess::PublicOnly;
        }
        access
    }
}

/// One entry of `allowed_outbound_hosts`. Serializes as the text it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundHost {
    text: String,
    scheme: SchemePattern,
    host: HostPattern,
    port: PortPattern,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SchemePattern {
    Http,
    Https,
    Any,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `*`.
    Any,
    /// `*.example.com`, kept as `.example.com`.
    Subdomain(String),
    /// A lowercase DNS name.
    Name(String),
    /// An IP address.
    Ip(IpAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortPattern {
    /// No port given: 80 for `http`, 443 for `https`.
    Default,
    /// `:*`.
    Any,
    /// `:8080`.
    One(u16),
    /// `:1000..2000`, the end excluded.
    Range(u16, u16),
}

/// The host of a request, normalized for matching.
enum RequestHost {
    Name(String),
    Ip(IpAddr),
}

impl RequestHost {
    fn parse(host: &str) -> Option<RequestHost> {
        let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        if let Some(ip) = bracketed {
            return ip
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| RequestHost::Ip(ip.into()));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Some(RequestHost::Ip(ip));
        }
        // `example.com.` is `example.com`.
        let name = host.strip_suffix('.').unwrap_or(host);
        (!name.is_empty()).then(|| RequestHost::Name(name.to_ascii_lowercase()))
    }
}

impl HostPattern {
    /// Whether the entry names one host rather than a wildcard.
    fn is_explicit(&self) -> bool {
        matches!(self, HostPattern::Name(_) | HostPattern::Ip(_))
    }

    fn allows(&self, host: &RequestHost) -> bool {
        match (self, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Subdomain(suffix), RequestHost::Name(name)) => {
                name.len() > suffix.len() && name.ends_with(suffix.as_str())
            }
            (HostPattern::Name(pattern), RequestHost::Name(name)) => pattern == name,
            (HostPattern::Ip(pattern), RequestHost::Ip(ip)) => pattern == ip,
            _ => false,
        }
    }
}

impl OutboundHost {
    /// Parses one entry, e.g. `https://*.example.com:8443`.
    pub fn parse(text: &str) -> Result<OutboundHost, OutboundHostError> {
        let error = |problem| OutboundHostError {
            text: text.to_owned(),
            problem,
        };
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(error(Problem::NoScheme));
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => SchemePattern::Http,
            "https" => SchemePattern::Https,
            "*" => SchemePattern::Any,
            "" => return Err(error(Problem::NoScheme)),
            other => return Err(error(Problem::UnsupportedScheme(other.to_owned()))),
        };
        if rest.contains(['{', '}']) {
            return Err(error(Problem::Braces));
        }
        if rest.contains(char::is_whitespace) {
            return Err(error(Problem::Whitespace));
        }
        if rest.contains('@') {
            return Err(error(Problem::UserInfo));
        }
        if rest.contains(['?', '#']) {
            return Err(error(Problem::Query));
        }
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };

        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let Some((ip, after)) = inner.split_once(']') else {
                return Err(error(Problem::BadIpv6(inner.to_owned())));
            };
            let ip: Ipv6Addr = ip
                .parse()
                .map_err(|_| error(Problem::BadIpv6(ip.to_owned())))?;
            let port = match after {
                "" => None,
                after => match after.strip_prefix(':') {
                    Some(port) => Some(port),
                    None => return Err(error(Problem::BadHost(authority.to_owned()))),
                },
            };
            (HostPattern::Ip(ip.into()), port)
        } else {
            let (host, port) = match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            if port.is_some_and(|port| port.contains(':')) {
                return Err(error(Problem::UnbracketedIpv6));
            }
            (parse_host(host).map_err(error)?, port)
        };

        if !path.is_empty() && path != "/" {
            let problem = match host {
                // `10.0.0.0/8` reads as a CIDR range.
                HostPattern::Ip(_) if path[1..].starts_with(|c: char| c.is_ascii_digit()) => {
                    Problem::Cidr
                }
                _ => Problem::Path(path.to_owned()),
            };
            return Err(error(problem));
        }

        let port = match port {
            None => PortPattern::Default,
            Some(port) => parse_port(port).map_err(error)?,
        };
        Ok(OutboundHost {
            text: text.to_owned(),
            scheme,
            host,
            port,
        })
    }

    /// The entry as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the entry names one host (a DNS name or an IP address) rather than a
    /// wildcard (`*`, `*.example.com`). Only such entries reach non-public addresses.
    pub fn is_explicit(&self) -> bool {
        self.host.is_explicit()
    }

    /// Whether a request to `scheme://host:port` matches this entry by its URL alone.
    /// `host` is as in [`AllowedOutboundHosts::access`]. The address the host resolves
    /// to is not considered here.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        RequestHost::parse(host).is_some_and(|host| self.allows(scheme, &host, port))
    }

    fn allows(&self, scheme: &str, host: &RequestHost, port: u16) -> bool {
        let scheme = scheme.to_ascii_lowercase();
        let scheme_ok = match self.scheme {
            SchemePattern::Http => scheme == "http",
            SchemePattern::Https => scheme == "https",
            SchemePattern::Any => scheme == "http" || scheme == "https",
        };
        let port_ok = match self.port {
            PortPattern::Default => {
                (scheme == "http" && port == 80) || (scheme == "https" && port == 443)
            }
            PortPattern::Any => true,
            PortPattern::One(one) => port == one,
            PortPattern::Range(start, end) => (start..end).contains(&port),
        };
        scheme_ok && port_ok && self.host.allows(host)
    }
}

fn parse_host(host: &str) -> Result<HostPattern, Problem> {
    if host.is_empty() {
        return Err(Problem::NoHost);
    }
    if host == "*" {
        return Ok(HostPattern::Any);
    }
    if let Some(domain) = host.strip_prefix("*.") {
        if domain.contains('*') || !is_dns_name(domain) {
            return Err(Problem::Wildcard(host.to_owned()));
        }
        let domain = domain.strip_suffix('.').unwrap_or(domain);
        return Ok(HostPattern::Subdomain(format!(
            ".{}",
            domain.to_ascii_lowercase()
        )));
    }
    if host.contains('*') {
        return Err(Problem::Wildcard(host.to_owned()));
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Ip(ip.into()));
    }
    // `127.1` or `2130706433` would resolve to an address the entry does not spell.
    if host.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(Problem::BadIpv4(host.to_owned()));
    }
    if host.eq_ignore_ascii_case("self") {
        return Err(Problem::SelfHost);
    }
    if !is_dns_name(host) {
        return Err(Problem::BadHost(host.to_owned()));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    Ok(HostPattern::Name(name.to_ascii_lowercase()))
}

/// Labels of letters, digits, `-` and `_`, separated by dots (one trailing dot allowed).
fn is_dns_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

fn parse_port(port: &str) -> Result<PortPattern, Problem> {
    let number = |text: &str| -> Result<u16, Problem> {
        match text.parse::<u16>() {
            Ok(0) | Err(_) => Err(Problem::BadPort(port.to_owned())),
            Ok(n) => Ok(n),
        }
    };
    if port == "*" {
        return Ok(PortPattern::Any);
    }
    if let Some((start, end)) = port.split_once("..") {
        let (start, end) = (number(start)?, number(end)?);
        if start >= end {
            return Err(Problem::EmptyRange(port.to_owned()));
        }
        return Ok(PortPattern::Range(start, end));
    }
    number(port).map(PortPattern::One)
}

impl fmt::Display for OutboundHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for OutboundHost {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for OutboundHost {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        OutboundHost::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why an `allowed_outbound_hosts` entry is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid outbound host {text:?}: {problem}")]
pub struct OutboundHostError {
    text: String,
    problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Problem {
    #[error(
        "no scheme: write `scheme://host[:port]`, e.g. `https://api.example.com` \
         (`*://` for http and https)"
    )]
    NoScheme,
    #[error("unsupported scheme `{0}`: use `http`, `https` or `*` (both)")]
    UnsupportedScheme(String),
    #[error("no host: use a name, an IP address, `*.example.com` or `*`")]
    NoHost,
    #[error("invalid host `{0}`")]
    BadHost(String),
    #[error("`{0}` is not an IPv4 address: write all four numbers, e.g. `127.0.0.1`")]
    BadIpv4(String),
    #[error("invalid IPv6 address `{0}`: write it in brackets, e.g. `http://[::1]:8080`")]
    BadIpv6(String),
    #[error("IPv6 addresses go in brackets, e.g. `http://[::1]:8080`")]
    UnbracketedIpv6,
    #[error(
        "wildcards are `*` (any host) or a `*.` prefix (any subdomain, e.g. \
         `*.example.com`), not `{0}`"
    )]
    Wildcard(String),
    #[error("`self` (a Spin application's own host) is not supported: name the host")]
    SelfHost,
    #[error(
        "invalid port `{0}`: use a number from 1 to 65535, `*` (any port) or a range \
         `1000..2000`"
    )]
    BadPort(String),
    #[error("empty port range `{0}`: the end is excluded, so it must be above the start")]
    EmptyRange(String),
    #[error("a path (`{0}`) is not allowed: give only `scheme://host[:port]`")]
    Path(String),
    #[error("CIDR ranges are not supported: list each address")]
    Cidr,
    #[error("a query or fragment is not allowed: give only `scheme://host[:port]`")]
    Query,
    #[error("user info (`user@`) is not allowed: give only `scheme://host[:port]`")]
    UserInfo,
    #[error("whitespace is not allowed")]
    Whitespace,
    #[error("lists and variables in braces (`{{...}}`) are not supported")]
    Braces,
}

/// Whether `address` is a public unicast address, reachable through a wildcard entry.
///
/// Not public: unspecified (`0.0.0.0/8`, `::`), loopback (`127.0.0.0/8`, `::1`),
/// private (`10/8`, `172.16/12`, `192.168/16`, `fc00::/7`), shared (`100.64/10`),
/// link-local (`169.254/16`, `fe80::/10`, and the cloud metadata address in it),
/// IETF protocol (`192.0.0/24`), documentation, benchmarking (`198.18/15`), multicast,
/// reserved (`240/4`, broadcast), site-local (`fec0::/10`), discard (`100::/64`), and
/// IPv6 addresses embedding an IPv4 address that is not public (IPv4-mapped,
/// IPv4-compatible, IPv4-translated, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`), NAT64
/// local-use (`64:ff9b:1::/48`), Teredo (`2001::/32`), and Azure's WireServer
/// (`168.63.129.16`, the host agent every Azure VM can reach).
pub fn is_public_address(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let not_public = a == 0 // "this network", unspecified
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 192 && b == 168)
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224 // multicast, reserved, broadcast
        // Azure's WireServer: in a public range, but every Azure VM's host agent,
        // which hands out its VM's extension settings and secrets.
        || ip == Ipv4Addr::new(168, 63, 129, 16);
    !not_public
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let embedded_v4 = || {
        let [.., a, b, c, d] = ip.octets();
        Ipv4Addr::new(a, b, c, d)
    };
    // IPv4-mapped (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`, which also
    // covers `::` and `::1`).
    if segments[..5] == [0; 5] && (segments[5] == 0xffff || segments[5] == 0) {
        return is_public_v4(embedded_v4());
    }
    // IPv4-translated (SIIT, `::ffff:0:a.b.c.d`).
    if segments[..4] == [0; 4] && segments[4] == 0xffff && segments[5] == 0 {
        return is_public_v4(embedded_v4());
    }
    // NAT64 well-known prefix.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded_v4());
    }
    // 6to4: the IPv4 address is in the second and third segments.
    if segments[0] == 0x2002 {
        let [_, _, a, b, c, d, ..] = ip.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    let not_public = (segments[0] & 0xfe00) == 0xfc00 // unique local
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (segments[0] & 0xff00) == 0xff00 // multicast
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
        || segments[..4] == [0x100, 0, 0, 0] // discard-only
        // NAT64 local-use (RFC 8215): a network's own translator, to any IPv4
        // address, private ones too.
        || segments[..3] == [0x64, 0xff9b, 1]
        // Teredo: a tunnel to an IPv4 address the check cannot see.
        || segments[..2] == [0x2001, 0];
    !not_public
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> AllowedOutboundHosts {
        AllowedOutboundHosts(
            entries
                .iter()
                .map(|entry| OutboundHost::parse(entry).unwrap())
                .collect(),
        )
    }

    fn entry(text: &str) -> OutboundHost {
        OutboundHost::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn exact_hosts_match_their_scheme_and_default_port() {
        let api = entry("https://api.example.com");
        assert!(api.matches("https", "api.example.com", 443));
        assert!(api.matches("https", "API.Example.com.", 443));
        assert!(!api.matches("http", "api.example.com", 80));
        assert!(!api.matches("https", "api.example.com", 8443));
        assert!(!api.matches("https", "example.com", 443));
        assert!(!api.matches("https", "evilapi.example.com", 443));
        let plain = entry("http://example.com/");
        assert!(plain.matches("http", "example.com", 80));
        assert!(!plain.matches("http", "example.com", 443));
    }

    #[test]
    fn a_scheme_wildcard_uses_the_default_port_of_the_request_scheme() {
        let any = entry("*://example.com");
        assert!(any.matches("http", "example.com", 80));
        assert!(any.matches("https", "example.com", 443));
        assert!(!any.matches("http", "example.com", 443));
        assert!(!any.matches("ftp", "example.com", 80));
    }

    #[test]
    fn ports_may_be_any_one_or_a_range_without_its_end() {
        assert!(entry("http://example.com:*").matches("http", "example.com", 1));
        assert!(entry("http://example.com:8080").matches("http", "example.com", 8080));
        assert!(!entry("http://example.com:8080").matches("http", "example.com", 80));
        let range = entry("http://example.com:1000..2000");
        assert!(range.matches("http", "example.com", 1000));
        assert!(range.matches("http", "example.com", 1999));
        assert!(!range.matches("http", "example.com", 2000));
        assert!(!range.matches("http", "example.com", 999));
    }

    #[test]
    fn subdomain_wildcards_match_subdomains_only() {
        let sub = entry("https://*.example.com:443");
        assert!(sub.matches("https", "a.example.com", 443));
        assert!(sub.matches("https", "a.b.example.com", 443));
        assert!(!sub.matches("https", "example.com", 443));
        assert!(!sub.matches("https", "badexample.com", 443));
        assert!(!sub.is_explicit());
    }

    #[test]
    fn ip_addresses_match_the_same_address() {
        let v4 = entry("http://127.0.0.1:8080");
        assert!(v4.matches("http", "127.0.0.1", 8080));
        assert!(!v4.matches("http", "localhost", 8080));
        assert!(!v4.matches("http", "127.0.0.2", 8080));
        let v6 = entry("http://[::1]:8080");
        assert!(v6.matches("http", "[::1]", 8080));
        assert!(v6.matches("http", "[0:0::1]", 8080));
        assert!(v6.matches("http", "::1", 8080));
        assert!(v4.is_explicit() && v6.is_explicit());
    }

    #[test]
    fn wildcard_hosts_reach_public_addresses_only() {
        let hosts = list(&["http://*", "https://*.example.com"]);
        let access = hosts.access("http", "localhost", 80);
        assert_eq!(access, OutboundAccess::PublicOnly);
        let opened = ["127.0.0.0/8".parse().unwrap()];
        assert!(!access.allows_address("127.0.0.1".parse().unwrap(), &opened));
        assert!(!access.allows_address("169.254.169.254".parse().unwrap(), &[]));
        assert!(access.allows_address("93.184.215.14".parse().unwrap(), &[]));
        assert_eq!(
            hosts.access("http", "169.254.169.254", 80),
            OutboundAccess::PublicOnly
        );
        assert_eq!(hosts.access("http", "a.com", 8080), OutboundAccess::Denied);
    }

    #[test]
    fn an_explicit_entry_reaches_the_networks_the_operator_opened_and_no_other() {
        let hosts = list(&["http://*:*", "http://127.0.0.1:8080", "http://localhost:*"]);
        let access = hosts.access("http", "127.0.0.1", 8080);
        assert_eq!(access, OutboundAccess::Named);
        let address = |text: &str| text.parse::<IpAddr>().unwrap();
        // Named by a tenant, nothing non-public is open.
        for closed in [
            "127.0.0.1",
            "169.254.169.254",
            "10.0.0.5",
            "::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(!access.allows_address(address(closed), &[]), "{closed}");
        }
        assert!(access.allows_address(address("93.184.215.14"), &[]));
        let opened: [IpNet; 2] = ["127.0.0.1/32".parse().unwrap(), "::1/128".parse().unwrap()];
        for open in ["127.0.0.1", "::1", "::ffff:127.0.0.1"] {
            assert!(access.allows_address(address(open), &opened), "{open}");
        }
        for closed in ["127.0.0.2", "169.254.169.254", "10.0.0.5"] {
            assert!(!access.allows_address(address(closed), &opened), "{closed}");
        }
        assert_eq!(
            hosts.access("http", "LOCALHOST", 3000),
            OutboundAccess::Named
        );
        // Another loopback port than the one named is left to the wildcard.
        assert_eq!(
            hosts.access("http", "127.0.0.1", 9090),
            OutboundAccess::PublicOnly
        );
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let hosts = AllowedOutboundHosts::default();
        assert_eq!(
            hosts.access("https", "example.com", 443),
            OutboundAccess::Denied
        );
        let everything = ["0.0.0.0/0".parse().unwrap()];
        assert!(
            !OutboundAccess::Denied.allows_address("93.184.215.14".parse().unwrap(), &everything)
        );
    }

    #[test]
    fn entries_serialize_as_written() {
        let hosts = list(&["https://*.example.com", "http://[::1]:*"]);
        let json = serde_json::to_string(&hosts).unwrap();
        assert_eq!(json, r#"["https://*.example.com","http://[::1]:*"]"#);
        let back: AllowedOutboundHosts = serde_json::from_str(&json).unwrap();
        assert_eq!(back, hosts);
        assert!(serde_json::from_str::<AllowedOutboundHosts>(r#"["example.com"]"#).is_err());
    }

    #[test]
    fn malformed_entries_say_what_is_wrong() {
        let problem = |text: &str| OutboundHost::parse(text).unwrap_err().problem;
        assert_eq!(problem("example.com"), Problem::NoScheme);
        assert_eq!(problem("example.com:80"), Problem::NoScheme);
        assert_eq!(problem("://example.com"), Problem::NoScheme);
        assert_eq!(
            problem("redis://example.com"),
            Problem::UnsupportedScheme("redis".into())
        );
        assert_eq!(problem("http://"), Problem::NoHost);
        assert_eq!(problem("http://:80"), Problem::NoHost);
        assert_eq!(problem("http://a.com:"), Problem::BadPort("".into()));
        assert_eq!(problem("http://a.com:0"), Problem::BadPort("0".into()));
        assert_eq!(
            problem("http://a.com:65536"),
            Problem::BadPort("65536".into())
        );
        assert_eq!(
            problem("http://a.com:http"),
            Problem::BadPort("http".into())
        );
        assert_eq!(
            problem("http://a.com:2000..1000"),
            Problem::EmptyRange("2000..1000".into())
        );
        assert_eq!(
            problem("http://a.com:1..x"),
            Problem::BadPort("1..x".into())
        );
        assert_eq!(problem("https://a.com/v1"), Problem::Path("/v1".into()));
        assert_eq!(problem("http://10.0.0.0/8"), Problem::Cidr);
        assert_eq!(problem("https://a.com?x=1"), Problem::Query);
        assert_eq!(problem("https://u:p@a.com"), Problem::UserInfo);
        assert_eq!(problem("https://a .com"), Problem::Whitespace);
        assert_eq!(problem("https://{{ host }}"), Problem::Braces);
        assert_eq!(problem("http://*a.com"), Problem::Wildcard("*a.com".into()));
        assert_eq!(
            problem("http://api.*.com"),
            Problem::Wildcard("api.*.com".into())
        );
        assert_eq!(
            problem("http://*.*.com"),
            Problem::Wildcard("*.*.com".into())
        );
        assert_eq!(problem("http://127.1"), Problem::BadIpv4("127.1".into()));
        assert_eq!(problem("http://::1"), Problem::UnbracketedIpv6);
        assert_eq!(problem("http://[::g]"), Problem::BadIpv6("::g".into()));
        assert_eq!(problem("http://[::1"), Problem::BadIpv6("::1".into()));
        assert_eq!(problem("http://self"), Problem::SelfHost);
        assert_eq!(
            problem("http://a_b!.com"),
            Problem::BadHost("a_b!.com".into())
        );
        let message = OutboundHost::parse("example.com").unwrap_err().to_string();
        assert!(message.starts_with("invalid outbound host \"example.com\": no scheme"));
    }

    #[test]
    fn loopback_private_link_local_and_the_like_are_not_public() {
        for address in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "192.0.0.170",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1",
            "fc00::1",
            "fd00:ec2::254",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:db8::1",
            "168.63.129.16",
            "::ffff:0:127.0.0.1",
            "::ffff:0:a9fe:a9fe",
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b:1:a9fe:a9:fe00::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert!(!is_public_address(ip), "{address} counted as public");
        }
        for address in [
            "1.1.1.1",
            "93.184.215.14",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:1.1.1.1",
            "2002:0101:0101::",
            "168.63.129.17",
            "::ffff:0:1.1.1.1",
            "2001:4860:4860::8888",
        ] {
            let ip: IpAddr = address.parse().unwrap();
            assert!(is_public_address(ip), "{address} counted as not public");
        }
    }
}
