//! How many connections each client address, and all of them together, may hold.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::requests::{ClientRequests, RequestLimits};
use tokio::net::{TcpListener, TcpStream};

/// A server's connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most connections one client address may hold open.
    pub per_client: usize,
    /// Most connections open in all.
    pub total: usize,
    /// How long a connection may carry no request before it is closed.
    pub idle_timeout: Duration,
}

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

    /// A slot for one more connection from `client`, held until the slot is dropped.
    ///
    /// # Errors
    /// [`Refused`] when the client, or the server, holds as many as it may.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refused> {
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

/// One admitted connection; its place is freed when dropped.
pub struct Slot {
    admission: Arc<Admission>,
    client: IpAddr,
    requests: Arc<AtomicUsize>,
}

impl Slot {
    /// The client address the connection came from.
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
}
