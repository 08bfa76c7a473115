//! How many connections each client address, and all of them together, may hold.
//!
//! A client is an IPv4 address, or an IPv6 prefix ([`client_of`]): on the public
//! port a /64, since one host, or one home or phone, is given a whole /64 and may use
//! any of its 2^64 addresses, and counting them one by one would give such a client
//! as many shares as it likes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

use crate::requests::{ClientRequests, RequestLimits};

/// A server's connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections one client address may hold open.
    pub per_client: usize,
    /// Most connections open in all.
    pub total: usize,
    /// How long a connection may carry no request before it is closed.
    pub idle_timeout: Duration,
    /// How long a response may wait for its client to take more of it before the
    /// connection is cut off (see [`crate::drive`]); `None` for no limit.
    pub send_timeout: Option<Duration>,
    /// How many leading bits of an IPv6 address name its client:
    /// [`IPV6_CLIENT_SUBNET`] where anyone may connect, 128 where the clients are the
    /// platform's own processes (pods' addresses may share a /64).
    pub ipv6_client_prefix: u8,
}

impl ConnectionLimits {
    /// The timeouts [`crate::drive`] holds a connection to.
    pub fn timeouts(&self) -> crate::Timeouts {
        crate::Timeouts {
            idle: self.idle_timeout,
            send: self.send_timeout,
        }
    }
}

/// The IPv6 prefix length a public server counts as one client: a /64, the subnet one
/// host, home or phone is given.
pub const IPV6_CLIENT_SUBNET: u8 = 64;

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Its client address holds as many connections as one may.
    #[error("client {client} holds {limit} connections, the most one client may")]
    Client {
        /// The client address.
        client: IpAddr,
        /// The limit per client.
        limit: usize,
    },
    /// The server holds as many connections as it may.
    #[error("the server holds {limit} connections, its most")]
    Total {
        /// The limit in all.
        limit: usize,
    },
}

#[derive(Default)]
struct Open {
    by_client: HashMap<IpAddr, Client>,
    total: usize,
}

/// What one client address holds.
#[derive(Default)]
struct Client {
    connections: usize,
    /// Its requests in flight, counted by [`ClientRequests`] (shared by its connections
    /// so that no lock is taken per request).
    requests: Arc<AtomicUsize>,
}

/// The connections a server holds, by client address.
pub struct Admission {
    limits: ConnectionLimits,
    open: Mutex<Open>,
    /// All clients' requests in flight.
    requests: Arc<AtomicUsize>,
}

impl Admission {
    /// An empty admission under `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::default(),
            requests: Arc::default(),
        })
    }

    /// The limits it admits under.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// A slot for one more connection from `peer` (counted as its client,
    /// [`client_of`] under the limits' prefix), held until the slot is dropped.
    ///
    /// # Errors
    /// [`Refused`] when the client, or the server, holds as many as it may.
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Slot, Refused> {
        let client = client_of(peer, self.limits.ipv6_client_prefix);
        let mut open = self.lock();
        if open.total >= self.limits.total {
            return Err(Refused::Total {
                limit: self.limits.total,
            });
        }
        let entry = open.by_client.entry(client).or_default();
        if entry.connections >= self.limits.per_client {
            return Err(Refused::Client {
                client,
                limit: self.limits.per_client,
            });
        }
        entry.connections += 1;
        let requests = entry.requests.clone();
        open.total += 1;
        Ok(Slot {
            admission: self.clone(),
            client,
            requests,
        })
    }

    /// The next connection `listener` accepts that these limits admit, with its slot.
    /// A connection refused is closed at once and passed to `refused` (to be counted;
    /// not worth a warning, since a client flooding the port would choose how much the
    /// log grows). An accept that fails (out of descriptors, most likely) is retried
    /// shortly, never in a spin. Cancel-safe: a connection is only taken from the
    /// listener in the poll that returns it.
    pub async fn accept(
        self: &Arc<Self>,
        listener: &TcpListener,
        refused: impl Fn(&Refused),
    ) -> (TcpStream, Slot) {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.admit(peer.ip()) {
                Ok(slot) => return (stream, slot),
                Err(refusal) => {
                    tracing::debug!("refused a connection: {refusal}");
                    refused(&refusal);
                }
            }
        }
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Counts change by one under the lock: a poisoned lock still holds them whole.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The client a connection from `peer` counts as: an IPv4 address (also when it comes
/// as an IPv4-mapped IPv6 address, on a dual-stack listener), or an IPv6 address's
/// first `ipv6_prefix` bits (written as the prefix's first address, `2001:db8:1:2::`
/// for a /64).
pub fn client_of(peer: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(ipv6_prefix.min(128)));
            IpAddr::V6((v6.to_bits() & mask.unwrap_or(0)).into())
        }
        v4 => v4,
    }
}

/// One admitted connection; its place is freed when dropped.
pub struct Slot {
    admission: Arc<Admission>,
    client: IpAddr,
    requests: Arc<AtomicUsize>,
}

impl Slot {
    /// The client the connection came from ([`client_of`] its address).
    pub fn client(&self) -> IpAddr {
        self.client
    }

    /// The requests in flight of this connection's client (on all its connections)
    /// and of all clients, to be held to `limits` (a server that multiplexes requests
    /// on a connection, HTTP/2, needs these besides the connection limits).
    ///
    /// A client whose last connection closes while requests of it are still being
    /// answered starts from none on its next connection: those requests lost their
    /// connection, and end as soon as they are next polled.
    pub fn requests(&self, limits: RequestLimits) -> ClientRequests {
        ClientRequests {
            client: self.client,
            limits,
            of_client: self.requests.clone(),
            of_all: self.admission.requests.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.admission.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(entry) = open.by_client.get_mut(&self.client) {
            entry.connections = entry.connections.saturating_sub(1);
            if entry.connections == 0 {
                open.by_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_client: usize, total: usize) -> ConnectionLimits {
        ConnectionLimits {
            per_client,
            total,
            idle_timeout: Duration::from_secs(1),
            send_timeout: None,
            ipv6_client_prefix: IPV6_CLIENT_SUBNET,
        }
    }

    #[test]
    fn one_client_cannot_take_more_than_its_share_and_dropping_frees_places() {
        let admission = Admission::new(limits(2, 3));
        let (greedy, other) = ([127, 0, 0, 2].into(), [127, 0, 0, 1].into());
        let first = admission.admit(greedy).unwrap();
        let _second = admission.admit(greedy).unwrap();
        assert_eq!(
            admission.admit(greedy).err(),
            Some(Refused::Client {
                client: greedy,
                limit: 2
            })
        );
        let _third = admission.admit(other).unwrap();
        assert_eq!(
            admission.admit(other).err(),
            Some(Refused::Total { limit: 3 })
        );
        drop(first);
        assert_eq!(admission.open(), 2);
        assert!(admission.admit(greedy).is_ok());
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_address_is_the_ipv4_one() {
        let admission = Admission::new(limits(2, 100));
        let in_one_64: [IpAddr; 3] = [
            "2001:db8:1:2::1".parse().unwrap(),
            "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap(),
            "2001:db8:1:2:abcd::7".parse().unwrap(),
        ];
        let _held = [
            admission.admit(in_one_64[0]).unwrap(),
            admission.admit(in_one_64[1]).unwrap(),
        ];
        assert_eq!(
            admission.admit(in_one_64[2]).err(),
            Some(Refused::Client {
                client: "2001:db8:1:2::".parse().unwrap(),
                limit: 2
            })
        );
        let next_64 = admission.admit("2001:db8:1:3::1".parse().unwrap()).unwrap();
        assert_eq!(
            next_64.client(),
            "2001:db8:1:3::".parse::<IpAddr>().unwrap()
        );

        let mapped = admission
            .admit("::ffff:192.0.2.7".parse().unwrap())
            .unwrap();
        assert_eq!(mapped.client(), IpAddr::from([192, 0, 2, 7]));
        let _second = admission.admit([192, 0, 2, 7].into()).unwrap();
        assert!(
            admission
                .admit("::ffff:192.0.2.7".parse().unwrap())
                .is_err()
        );
        // Other IPv4 clients are not one /64 of mapped addresses.
        assert!(admission.admit("::ffff:192.0.2.8".parse().unwrap()).is_ok());
    }

    #[test]
    fn a_prefix_of_128_counts_each_ipv6_address() {
        let peer: IpAddr = "2001:db8::1:2".parse().unwrap();
        assert_eq!(client_of(peer, 128), peer);
        assert_eq!(
            client_of(peer, 112),
            "2001:db8::1:0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(client_of(peer, 0), "::".parse::<IpAddr>().unwrap());
    }
}
