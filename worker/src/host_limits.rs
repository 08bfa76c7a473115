//! Bounds on the host memory a guest holds through WASI resources. Header fields,
//! request and response bodies and their streams live in the host, outside the
//! instance's linear memory and so outside its memory limit; with Wasmtime's defaults
//! (100,000 handles per store, 128 KiB per set of header fields, 1 MiB buffered per
//! outgoing body) one event of `functions/hostile/resource-hog` held gigabytes. Here
//! each handle holds at most about [`MAX_FIELDS_BYTES`], and an instance at most
//! [`crate::WorkerConfig::max_handles_per_instance`] handles, its regions among them
//! (those hold no host memory: their bytes are in guest memory, which the memory limit
//! counts): past either, the guest is stopped (the event fails as `handle_limit` or
//! `fields_limit`).
//!
//! That bounds one instance, but a tenant runs hundreds at once, so each also claims
//! [`HANDLE_CHARGE_BYTES`] per handle it holds against the worker's guest memory
//! budget (`memory_budget.rs`), at the most it has held at once: many instances that
//! each stay under their own limits cannot hold more than their tenant's share.

/// The most one set of header fields may hold (Wasmtime counts its in-memory size, a
/// little over the bytes on the wire): four times the 16 KiB that common proxies and
/// servers accept for a whole request head.
pub const MAX_FIELDS_BYTES: usize = 64 << 10;

/// The most one write to an outgoing body takes, which is what each such body buffers
/// (one write's worth) until it is sent. The SDK writes 4 KiB at a time.
pub const MAX_BODY_WRITE_BYTES: usize = 64 << 10;

/// What one handle other than a region's is claimed as, in the worker's guest memory
/// budget: the most it can hold (a set of header fields, or a body's buffered write),
/// since the host cannot cheaply tell what it does hold.
pub const HANDLE_CHARGE_BYTES: usize = if MAX_FIELDS_BYTES > MAX_BODY_WRITE_BYTES {
    MAX_FIELDS_BYTES
} else {
    MAX_BODY_WRITE_BYTES
};

/// The most one outbound connection reads ahead: the response head must fit in it
/// (past it the request fails with `HTTP-response-header-size`), and it bounds the
/// body bytes read before the guest asks for them. Hyper's default, about 400 KiB,
/// let a server that trickles an endless head hold that much per pending request.
pub const MAX_OUTBOUND_READ_BYTES: usize = 64 << 10;

/// What one outbound connection is claimed as, in the worker's guest memory budget,
/// beside its handles: its read buffer ([`MAX_OUTBOUND_READ_BYTES`]), its write buffer
/// (the request head, up to a set of fields) and TLS's record buffers.
pub const CONNECTION_CHARGE_BYTES: usize = MAX_OUTBOUND_READ_BYTES + MAX_FIELDS_BYTES + (64 << 10);
