//! How many requests one client address, and all clients together, may have in flight.
//!
//! Over HTTP/1.1 a connection carries one request at a time, so the connection limits
//! ([`crate::Admission`]) bound requests too. HTTP/2 multiplexes: one connection carries
//! as many streams at once as the server allows (hyper's default, 200), each holding its
//! decoded head (up to 64 KiB, which HPACK lets a client send in a few bytes) and its
//! handler until it is answered. A client that opens streams and never finishes their
//! bodies held 800 of them on 8 connections (60 MiB of the gateway every tenant shares,
//! in the run that found it) for as long as the body read timeout; at its share of
//! connections it would hold fifty thousand. Counting requests in flight per client address and in all, and
//! answering one past either limit at once, gives HTTP/2 clients the bounds HTTP/1.1
//! clients have.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most requests in flight at once: those of one client address, and all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most requests one client address may have in flight, across its connections.
    pub per_client: usize,
    /// Most requests in flight in all.
    pub total: usize,
}

/// Why a request was refused before it was handled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooManyRequests {
    /// Its client address has as many requests in flight as one may.
    #[error("client {client} has {limit} requests in flight, the most one client may")]
    Client {
        /// The client address.
        client: IpAddr,
        /// The limit per client.
        limit: usize,
    },
    /// The server has as many requests in flight as it may.
    #[error("the server has {limit} requests in flight, its most")]
    Total {
        /// The limit in all.
        limit: usize,
    },
}

/// The requests in flight of one client address (shared by all its connections) and
/// of all clients, with the limits they are held to.
#[derive(Debug, Clone)]
pub struct ClientRequests {
    pub(crate) client: IpAddr,
    pub(crate) limits: RequestLimits,
    pub(crate) of_client: Arc<AtomicUsize>,
    pub(crate) of_all: Arc<AtomicUsize>,
}

impl ClientRequests {
    /// Counts one more request in flight until the returned guard is dropped.
    ///
    /// # Errors
    /// [`TooManyRequests`] when the client, or the server, has as many in flight as it
    /// may; nothing is counted then.
    pub fn begin(&self) -> Result<InFlight, TooManyRequests> {
        if !take(&self.of_client, self.limits.per_client) {
            return Err(TooManyRequests::Client {
                client: self.client,
                limit: self.limits.per_client,
            });
        }
        if !take(&self.of_all, self.limits.total) {
            self.of_client.fetch_sub(1, Ordering::AcqRel);
            return Err(TooManyRequests::Total {
                limit: self.limits.total,
            });
        }
        Ok(InFlight {
            of_client: self.of_client.clone(),
            of_all: self.of_all.clone(),
        })
    }

    /// How many requests the client has in flight.
    pub fn in_flight(&self) -> usize {
        self.of_client.load(Ordering::Acquire)
    }
}

/// Adds one to `count` unless it is at `limit` already; says whether it did.
fn take(count: &AtomicUsize, limit: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok()
}

/// One request in flight; when dropped, it no longer counts.
#[derive(Debug)]
pub struct InFlight {
    of_client: Arc<AtomicUsize>,
    of_all: Arc<AtomicUsize>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.of_client.fetch_sub(1, Ordering::AcqRel);
        self.of_all.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Admission, ConnectionLimits};
    use std::time::Duration;

    #[test]
    fn a_client_past_its_share_of_requests_is_refused_across_its_connections() {
        let admission = Admission::new(ConnectionLimits {
            per_client: 8,
            total: 8,
            idle_timeout: Duration::from_secs(1),
            send_timeout: None,
            ipv6_client_prefix: 128,
        });
        let limits = RequestLimits {
            per_client: 3,
            total: 4,
        };
        let (greedy, other) = ([127, 0, 0, 2].into(), [127, 0, 0, 1].into());
        let (first, second) = (
            admission.admit(greedy).unwrap(),
            admission.admit(greedy).unwrap(),
        );
        let (first, second) = (first.requests(limits), second.requests(limits));
        let held = [
            first.begin().unwrap(),
            second.begin().unwrap(),
            first.begin().unwrap(),
        ];
        let refused = TooManyRequests::Client {
            client: greedy,
            limit: 3,
        };
        assert_eq!(second.begin().err(), Some(refused.clone()));
        assert_eq!(first.in_flight(), 3);
        let bystander = admission.admit(other).unwrap().requests(limits);
        let _served = bystander.begin().unwrap();
        assert_eq!(
            bystander.begin().err(),
            Some(TooManyRequests::Total { limit: 4 })
        );
        // A refusal counted nothing: one request ended makes room for one more.
        let [ended, ..] = held;
        drop(ended);
        let _again = second.begin().unwrap();
        assert_eq!(second.begin().err(), Some(refused));
    }
}
