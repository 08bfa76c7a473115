//! Limits on the connections the platform's HTTP servers accept (the gateway's public
//! port and a worker's internal API), against clients that open connections and keep
//! them without using them:
//! - [`Admission`]: at most so many connections per client (an IPv4 address or an
//!   IPv6 prefix, a /64 on the public port: [`client_of`]), and in all; one more is
//!   refused (closed as soon as it is accepted) rather than let it take the process's
//!   descriptors, which every tenant shares;
//! - [`drive`]: serves one connection until it ends, the server stops, or it carried no
//!   request for the idle timeout; then it is told to close (HTTP/1 closes an idle
//!   keep-alive connection, HTTP/2 sends GOAWAY) and cut off if it does not. One whose
//!   client stops reading a response is cut off after the send timeout;
//! - [`ClientRequests`]: at most so many requests in flight per client, and in all,
//!   across connections (HTTP/2 carries many on one); one more is answered at once by
//!   the server (429 or 503) rather than held.
//!
//! A request counts as in flight from its head until its response body is sent or
//! dropped ([`Busy::track`]), so a long download is not idle.

mod admission;
mod idle;
mod requests;

pub use admission::{Admission, ConnectionLimits, IPV6_CLIENT_SUBNET, Refused, Slot, client_of};
pub use idle::{Activity, Busy, ERROR_FLUSH_GRACE, GracefulConnection, Timeouts, Tracked, drive};
pub use requests::{ClientRequests, InFlight, RequestLimits, TooManyRequests};
