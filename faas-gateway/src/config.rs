//! The gateway's settings, with safe defaults.

use std::net::SocketAddr;
use std::time::Duration;

/// How the gateway listens and what it allows.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Address to listen on (default 127.0.0.1:3000).
    pub listen: SocketAddr,
    /// Bearer token the admin API requires.
    pub token: String,
    /// Largest request body an invocation may send (default 8 MiB); larger gets 413.
    pub max_body_bytes: usize,
    /// Largest deploy upload (default 256 MiB).
    pub max_deploy_bytes: usize,
    /// How long a client may take to send a request's head and body (default 30 s).
    pub read_timeout: Duration,
    /// How long shutdown waits for requests in flight (default 10 s).
    pub shutdown_grace: Duration,
}

impl GatewayConfig {
    /// Defaults, with the admin API behind `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 3000)),
            token: token.into(),
            max_body_bytes: 8 << 20,
            max_deploy_bytes: 256 << 20,
            read_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}
