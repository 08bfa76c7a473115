//! How much memory the events' bodies the gateway holds may take: two budgets of the
//! same kind, one for request bodies (held by client address) and one for pub/sub
//! messages and stream entries (held by tenant), each bounding what one holder and
//! all holders together take. Two, because clients are anyone who can reach the
//! gateway: with one budget, requests that declare large bodies and never send them
//! held the whole of it, and every tenant's messages were dropped meanwhile.
//!
//! An invocation's body is read whole before its event starts, and held until the
//! event's response is ready (an event waiting for a replica holds its body too). The
//! body limit bounds one body; without a bound on all of them, one client could send
//! `--max-connections-per-client` bodies at the limit at once over HTTP/1.1 (2 GiB by
//! default), as many over HTTP/2's streams (`--max-requests-per-client`), and the
//! gateway every tenant shares would run out of memory. So a body is counted against
//! the budget as its declared length before any of it is read (or chunk by chunk as it
//! arrives, when no length is declared, and twice over while those chunks are joined),
//! and one that does not fit is refused at once: 429 when its client holds its share,
//! 503 when all holders together hold the whole budget. A request without a body takes
//! nothing from it. A workflow run's answer is held whole until sent, so it takes a
//! claim of its client's too, until the connection has taken its last slice
//! (`response::held`).
//!
//! A pub/sub message is a body too, held from when it arrives until its run ends, and
//! messages arrive as fast as a tenant's guests publish them, whatever its runs keep
//! up with: its tenant holds it in the message budget (`redis/channel.rs`), and one
//! that does not fit is dropped, as pub/sub may drop messages. A stream consumer reserves room before it
//! reads (`redis/stream.rs`), so entries wait in Redis instead.
//!
//! Behind a proxy every client has the proxy's address, so the share per holder is a
//! generous part of the whole by default.
//!
//! The arithmetic of shares and claims is `faas-budget`'s, which a worker's guest
//! memory budget shares.

use std::net::IpAddr;

/// A budget's sizes, in bytes: all holders' bodies together (`total`), and one
/// holder's (`per_holder`: one client address's bodies, or one tenant's messages).
pub use faas_budget::BudgetLimits as BodyBudgetLimits;
pub(crate) use faas_budget::OverBudget;

/// The default [`BodyBudgetLimits::total`]: a quarter of the memory limit of the Helm
/// chart's gateway pod (1 GiB), thirty-two bodies at the default body limit.
pub const DEFAULT_BODY_BUDGET_MB: u64 = 256;

/// The default [`BodyBudgetLimits::per_holder`]: a quarter of the whole.
pub const DEFAULT_CLIENT_BODY_BUDGET_MB: u64 = 64;

/// The default total of the message budget: an eighth of the Helm chart's gateway
/// pod's memory limit, beside the bodies' quarter.
pub const DEFAULT_MESSAGE_BUDGET_MB: u64 = 128;

/// The default share of one tenant's messages: a quarter of the message budget.
pub const DEFAULT_TENANT_MESSAGE_BUDGET_MB: u64 = 32;

/// What a pub/sub message or stream entry claims beyond its bytes: what holding it
/// costs besides, so that empty messages are bounded too.
pub(crate) const MESSAGE_OVERHEAD: u64 = 256;

/// Who holds a body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    /// The client address that sent a request.
    Client(IpAddr),
    /// The tenant whose channel a message came on.
    Tenant(String),
}

/// The bodies the gateway holds, by holder.
pub(crate) type BodyBudget = faas_budget::Budget<Holder>;

/// The part of the budget one body holds; given back when dropped.
pub(crate) type Claim = faas_budget::Claim<Holder>;
