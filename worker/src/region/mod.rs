//! Regions: one Karmem-encoded value handed from a workflow step to the next.
//!
//! Small values are plain bytes, copied once out of the producer and once into each
//! consumer. Large ones live in a [`payload::PayloadFile`]: the producer's pages are the
//! file mapped shared, so writing the value is the only copy there is; once sealed, the
//! file is mapped copy-on-write into each consumer's pages (or copied, below the
//! worker's map threshold, where a copy is cheaper than changing page tables).
//!
//! Every region carries its owner (tenant, workflow, run), and a store only accepts
//! regions of its own run.

mod mappings;
mod pages;
mod payload;

pub(crate) use mappings::answered as images_can_be_told_apart;

pub(crate) use pages::{MappedPages, PageRange, round_to_pages};

use crate::limits::FileBudget;
use crate::memory_budget::GuestMemoryClaim;
use bytes::Bytes;
use payload::PayloadFile;
use rustix::mm::ProtFlags;
use std::borrow::Cow;
use std::fmt;
use std::os::fd::AsFd;
use std::sync::Arc;

/// How a region's value reached a consumer's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// Its memory file mapped copy-on-write: no byte copied.
    Mapped,
    /// Copied into the consumer's memory.
    Copied,
}

impl Handoff {
    /// `mapped` or `copied`: its name in metrics and traces.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Mapped => "mapped",
            Self::Copied => "copied",
        }
    }
}

/// Who a region belongs to: one run of one tenant's workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionOwner {
    /// The tenant whose workflow created it.
    pub tenant: Arc<str>,
    /// The workflow.
    pub workflow: Arc<str>,
    /// The run.
    pub run_id: Arc<str>,
}

impl fmt::Display for RegionOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tenant `{}`, workflow `{}`, run {}",
            self.tenant, self.workflow, self.run_id
        )
    }
}

/// Why a region operation was refused. The guest sees the message as an error result;
/// the executor reports it as the step's failure.
#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    /// Pages passed for a region are not whole, aligned pages.
    #[error(
        "region pages must start on a {page}-byte page boundary and span whole pages (got {len} bytes)"
    )]
    Unaligned {
        /// Length of the slice passed.
        len: usize,
        /// The page size required.
        page: usize,
    },
    /// A consumer's pages cannot hold the value.
    #[error("region pages hold {given} bytes but the value needs {needed}")]
    TooSmall {
        /// Bytes needed (the value's length rounded up to whole pages).
        needed: usize,
        /// Bytes passed.
        given: usize,
    },
    /// A region is larger than the step's Karmem interface allows.
    #[error(
        "{what} of {len} bytes exceeds the {limit} bytes its Karmem memory `{memory}` declares"
    )]
    OverLimit {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The declared maximum.
        limit: u64,
        /// The memory's name in the interface.
        memory: String,
    },
    /// `seal` was given a length beyond the pages written.
    #[error("cannot seal {len} bytes in a region of {capacity}")]
    BeyondCapacity {
        /// The length asked for.
        len: usize,
        /// The region's capacity.
        capacity: usize,
    },
    /// `seal` on a region that was not made with `create-in`, or twice.
    #[error("only a region being written (made with `create-in`) can be sealed")]
    NotWriting,
    /// A region was handed on (returned, read, or sent) before it was sealed.
    #[error("region was not sealed: call `seal` with the value's length first")]
    NotSealed,
    /// A region of one run offered to a function of another.
    #[error("region belongs to {owner}; refused in {requester}")]
    ForeignOwner {
        /// Who owns it.
        owner: RegionOwner,
        /// Who asked for it.
        requester: RegionOwner,
    },
    /// Pages passed for a region already hold one (or an input placed there).
    #[error("region pages overlap pages that already hold a region; use fresh pages")]
    PagesInUse,
    /// Pages passed for a new region hold the component's initial data (its memory
    /// image), which must stay mapped as it is (see `mappings.rs`).
    #[error("region pages overlap the component's initial data; use pages the guest allocated")]
    InitialData,
    /// The kernel refused a memory operation.
    #[error("region memory operation failed: {0}")]
    Map(#[source] std::io::Error),
    /// A limit on regions was reached (a memory file received from another worker
    /// counts against this worker's budget, as one it made would).
    #[error(transparent)]
    Limit(#[from] RegionLimitExceeded),
}

/// A region limit the guest ran into: it fails the guest's event (a trap the worker
/// reports as `region_limit`), not just the call.
#[derive(Debug, thiserror::Error)]
pub enum RegionLimitExceeded {
    /// The instance created as many regions as it may.
    #[error("an instance may create at most {limit} regions")]
    PerInstance {
        /// `max_regions_per_instance`.
        limit: usize,
    },
    /// The region's type is longer than any a workflow may declare.
    #[error(
        "a region type of {len} bytes is longer than the {} allowed",
        faas_workflow::MAX_SCHEMA_TYPE_LEN
    )]
    SchemaType {
        /// The type's length in bytes.
        len: usize,
    },
    /// The instance placed values as many times as it may.
    #[error("an instance may place region values at most {limit} times")]
    Placements {
        /// `max_regions_per_instance`.
        limit: usize,
    },
    /// The worker, or the tenant's share of it, has as many guest page ranges mapped
    /// or protected for regions as it may (each splits the kernel's memory maps of the
    /// process, of which there are only so many).
    #[error("the worker holds {limit} region page mappings {whose}, its limit")]
    Mappings {
        /// The limit reached.
        limit: u64,
        /// `for this tenant` or `in all`.
        whose: &'static str,
    },
    /// Values received from another worker would take more guest memory than the
    /// worker, or the tenant's share of it, has left.
    #[error(
        "the values received from another worker would pass this worker's guest memory \
         {whose} ({limit} MiB)"
    )]
    GuestMemory {
        /// The limit reached, in MiB.
        limit: u64,
        /// `for this tenant` or `in all`.
        whose: &'static str,
    },
    /// The values a step sends back (a run's result to the gateway, a branch's to the
    /// worker that spread it) would take more guest memory than the worker, or the
    /// tenant's share of it, has left: the copy of them that is sent is counted.
    #[error("the values sent back would pass this worker's guest memory {whose} ({limit} MiB)")]
    Reply {
        /// The limit reached, in MiB.
        limit: u64,
        /// `for this tenant` or `in all`.
        whose: &'static str,
    },
    /// The worker, or the tenant's share of it (a quarter), has as many region
    /// memory files open as it may.
    #[error("the worker has {limit} region memory files open {whose}, its limit")]
    Files {
        /// The limit reached.
        limit: u64,
        /// `for this tenant` or `in all`.
        whose: &'static str,
    },
}

impl RegionLimitExceeded {
    /// The limit `over` reached, and whose it is, as the errors say it.
    pub(crate) fn whose(over: &faas_budget::OverBudget) -> (u64, &'static str) {
        match *over {
            faas_budget::OverBudget::Share { limit } => (limit, "for this tenant"),
            faas_budget::OverBudget::Total { limit } => (limit, "in all"),
        }
    }

    /// The file budget's refusal `over`.
    fn files(over: &faas_budget::OverBudget) -> Self {
        let (limit, whose) = Self::whose(over);
        Self::Files { limit, whose }
    }
}

/// One value handed between workflow steps: the host side of a `region` resource.
/// Cloning shares the value; nothing is copied until a guest reads it.
#[derive(Debug, Clone)]
pub struct Region {
    schema_type: String,
    owner: Option<RegionOwner>,
    body: Body,
    /// The producer's instance, kept until the consumers have placed (mapped or copied)
    /// the value.
    producer: Option<Arc<Retired>>,
    /// The guest memory the value holds once it has left its producer's store
    /// ([`Region::carry_claim`]), or came from another worker process
    /// ([`Region::holding`]), given back when the last clone goes: a value waiting
    /// out a retry's backoff or a join still counts against its tenant.
    claim: Option<Arc<GuestMemoryClaim>>,
}

/// A finished instance whose teardown is put off. Unmapping a producer's written pages
/// takes time in proportion to their size and holds the process's memory-map lock,
/// which the next step needs to map the value; so the producer is torn down once its
/// consumers have placed (or dropped) the value, and on a blocking thread. It still
/// holds an instance slot meanwhile, so the worker tears retired instances down early
/// when a new event finds no free slot ([`Retired::release`]).
pub(crate) struct Retired(std::sync::Mutex<Option<Box<dyn Send>>>);

impl Retired {
    /// Puts off dropping `instance`.
    pub(crate) fn new(instance: impl Send + 'static) -> Arc<Self> {
        Arc::new(Self(std::sync::Mutex::new(Some(Box::new(instance)))))
    }

    /// Tears the instance down now (on a blocking thread), freeing its slot. The
    /// regions it produced stay readable: their memory files outlive it.
    pub(crate) fn release(&self) {
        let instance = self.0.lock().map_or(None, |mut held| held.take());
        drop_off_thread(instance);
    }
}

impl fmt::Debug for Retired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Retired")
    }
}

impl Drop for Retired {
    fn drop(&mut self) {
        drop_off_thread(self.0.get_mut().map_or(None, Option::take));
    }
}

/// Drops `instance` on a blocking thread when inside the runtime, here otherwise.
/// The smallest value [`Region::received`] keeps in the buffer it arrived in: a smaller
/// one costs little to copy, and may have arrived in a read buffer many times its size.
const KEPT_IN_PLACE_FROM: usize = 64 << 10;

fn drop_off_thread(instance: Option<Box<dyn Send>>) {
    if instance.is_none() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(instance))),
        Err(_) => drop(instance),
    }
}

#[derive(Debug, Clone)]
enum Body {
    /// A value held in host memory: a small one copied there, or one received whole
    /// from another process, kept in the buffer it arrived in.
    Bytes(Bytes),
    /// Being written by its producer through `pages`, which are the file mapped shared.
    Writing {
        file: Arc<PayloadFile>,
        pages: PageRange,
    },
    /// Sealed: the first `len` bytes of `file`.
    Sealed { file: Arc<PayloadFile>, len: usize },
}

/// The Karmem memory declaration a step's region must fit: its maximum size and, for
/// inputs, whether the step may write to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryRule {
    /// The memory as `file.km:interface.memory` (for messages).
    pub memory: String,
    /// The declared maximum size in bytes; `None` when no interface is declared.
    pub max_bytes: Option<u64>,
    /// Whether the step may only read the value (inputs only): it is placed read-only,
    /// and a write traps. Without a declaration the value is the step's to change: it
    /// gets a private copy-on-write mapping.
    pub read_only: bool,
}

impl From<&faas_workflow::MemoryLimit> for MemoryRule {
    /// The rule a step's resolved memory (see [`faas_workflow::Step::memories`]) sets.
    fn from(limit: &faas_workflow::MemoryLimit) -> Self {
        Self {
            memory: limit.memory.clone(),
            max_bytes: limit.max_bytes,
            read_only: limit.read_only,
        }
    }
}

impl MemoryRule {
    /// Refuses `len` bytes of `what` beyond the declared maximum.
    pub(crate) fn check(&self, what: &'static str, len: usize) -> Result<(), RegionError> {
        match self.max_bytes {
            Some(limit) if len as u64 > limit => Err(RegionError::OverLimit {
                what,
                len,
                limit,
                memory: self.memory.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// What one store's regions may do.
#[derive(Debug, Clone)]
pub(crate) struct RegionScope {
    /// The run the store belongs to (`None` outside workflow runs, e.g. HTTP functions).
    pub owner: Option<RegionOwner>,
    /// Values at least this long are mapped into consumers; shorter ones are copied.
    pub map_threshold: usize,
    /// The step's declared input memory.
    pub input: MemoryRule,
    /// The step's declared output memory.
    pub output: MemoryRule,
    /// How many regions the store may create, and the worker's memory-file budget.
    pub limits: RegionLimits,
}

/// The counts a store's regions are held to.
#[derive(Debug, Clone)]
pub(crate) struct RegionLimits {
    /// Regions one instance may create.
    pub per_instance: usize,
    /// Memory files the whole worker may hold.
    pub files: Arc<FileBudget>,
    /// Guest page ranges the whole worker, and each tenant, may have mapped or
    /// protected.
    pub mappings: Arc<crate::limits::MappingBudget>,
}

/// One store's region state.
#[derive(Debug)]
pub(crate) struct StoreRegions {
    /// What its regions may do.
    pub scope: RegionScope,
    /// Guest pages the host changed; restored on drop.
    pub mapped: MappedPages,
    /// Bytes of copied regions the store created (held in host memory, so they count
    /// against its memory limit).
    pub copied_bytes: usize,
    /// Regions the store created.
    created: usize,
    /// Values the store placed in its memory.
    placed: usize,
}

impl StoreRegions {
    /// Fresh state under `scope`, for a store of `tenant`'s.
    pub(crate) fn new(scope: RegionScope, tenant: Arc<str>) -> Self {
        Self {
            mapped: MappedPages::new(scope.limits.mappings.claim(tenant)),
            scope,
            copied_bytes: 0,
            created: 0,
            placed: 0,
        }
    }

    /// Counts one more value placed by the store.
    ///
    /// # Errors
    /// [`RegionLimitExceeded::Placements`] past the limit: each placement may leave a
    /// range the host protects on every call into the host.
    pub(crate) fn count_placed(&mut self) -> Result<(), RegionLimitExceeded> {
        if self.placed >= self.scope.limits.per_instance {
            return Err(RegionLimitExceeded::Placements {
                limit: self.scope.limits.per_instance,
            });
        }
        self.placed += 1;
        Ok(())
    }

    /// Counts one more region created by the store, of type `schema_type`.
    ///
    /// # Errors
    /// [`RegionLimitExceeded::PerInstance`] past the limit,
    /// [`RegionLimitExceeded::SchemaType`] for a type longer than any declared.
    pub(crate) fn count_created(&mut self, schema_type: &str) -> Result<(), RegionLimitExceeded> {
        // The host keeps the type with the region, uncounted by any memory limit.
        if schema_type.len() > faas_workflow::MAX_SCHEMA_TYPE_LEN {
            return Err(RegionLimitExceeded::SchemaType {
                len: schema_type.len(),
            });
        }
        if self.created >= self.scope.limits.per_instance {
            return Err(RegionLimitExceeded::PerInstance {
                limit: self.scope.limits.per_instance,
            });
        }
        self.created += 1;
        Ok(())
    }
}

impl RegionScope {
    /// The scope of a store outside any workflow run (an HTTP function): its regions
    /// cannot reach another function.
    pub(crate) fn detached(map_threshold: usize, limits: RegionLimits) -> Self {
        Self {
            owner: None,
            map_threshold,
            input: MemoryRule::default(),
            output: MemoryRule::default(),
            limits,
        }
    }

    /// The scope of one attempt of a workflow step: regions owned by `owner`'s run,
    /// bounded by the step's resolved Karmem memories.
    pub(crate) fn step(
        owner: RegionOwner,
        map_threshold: usize,
        limits: RegionLimits,
        memories: &faas_workflow::StepMemories,
    ) -> Self {
        Self {
            owner: Some(owner),
            map_threshold,
            input: MemoryRule::from(&memories.input),
            output: MemoryRule::from(&memories.output),
            limits,
        }
    }
}

impl Region {
    /// A region of `schema_type` holding `bytes` (a run's input, or a small value).
    pub fn new(schema_type: impl Into<String>, bytes: impl Into<Bytes>) -> Self {
        Self {
            schema_type: schema_type.into(),
            owner: None,
            body: Body::Bytes(bytes.into()),
            producer: None,
            claim: None,
        }
    }

    /// A region of `schema_type` holding `value`, which arrived in a buffer of
    /// `buffer_len` bytes (a run's request body, a frame from another worker): kept in
    /// that buffer when it is large and most of it, so that a large value received is
    /// not copied once more; copied out otherwise, so that it never keeps alive many
    /// more bytes than it holds (and its tenant is counted for).
    pub(crate) fn received(
        schema_type: impl Into<String>,
        value: Bytes,
        buffer_len: usize,
    ) -> Self {
        let kept = value.len() >= KEPT_IN_PLACE_FROM && value.len() * 2 >= buffer_len;
        let value = if kept {
            value
        } else {
            Bytes::copy_from_slice(&value)
        };
        Self::new(schema_type, value)
    }

    /// Takes the part of `claim` (its producer's claim on guest memory) that the
    /// value holds, so that it stays counted after the producer's store is gone: its
    /// copied bytes, or its memory file's pages (which stay when the worker tears a
    /// retired producer down early, [`Retired::release`]).
    /// A value that holds a claim already (a step's input, returned as its output)
    /// keeps it: the step's own claim stands for its own memory only.
    pub(crate) fn carry_claim(&mut self, claim: &mut GuestMemoryClaim) {
        if self.claim.is_some() {
            return;
        }
        let held = match &self.body {
            Body::Bytes(bytes) => bytes.len(),
            Body::Sealed { len, .. } => pages::round_to_pages(*len),
            Body::Writing { .. } => return,
        };
        self.claim = Some(Arc::new(claim.split_off(held as u64)));
    }

    /// The same value, holding `claim` (the guest memory it takes here) until its last
    /// clone goes.
    pub(crate) fn holding(mut self, claim: GuestMemoryClaim) -> Self {
        self.claim = Some(Arc::new(claim));
        self
    }

    /// The Karmem schema type of the value.
    pub fn schema_type(&self) -> &str {
        &self.schema_type
    }

    /// The run that created it, if a step did.
    pub fn owner(&self) -> Option<&RegionOwner> {
        self.owner.as_ref()
    }

    /// The value's length in bytes (0 while still being written).
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Bytes(bytes) => bytes.len(),
            Body::Writing { .. } => 0,
            Body::Sealed { len, .. } => *len,
        }
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A sealed value another process passed as memory file `fd`, for `owner`'s run,
    /// holding one file of this worker's budget `files` while it lives.
    ///
    /// # Errors
    /// [`RegionError::Map`] if the file is not sealed or is too small;
    /// [`RegionError::Limit`] if the budget is spent.
    pub(crate) fn from_memory_file(
        schema_type: String,
        owner: RegionOwner,
        fd: std::os::fd::OwnedFd,
        len: usize,
        files: &Arc<FileBudget>,
    ) -> Result<Self, RegionError> {
        let ticket = crate::limits::take_file(files, &owner.tenant)
            .map_err(|over| RegionLimitExceeded::files(&over))?;
        Ok(Self {
            schema_type,
            owner: Some(owner),
            body: Body::Sealed {
                file: Arc::new(PayloadFile::received(fd, len, ticket)?),
                len,
            },
            producer: None,
            claim: None,
        })
    }

    /// The same value, owned by `owner`'s run (a value received from another process
    /// for that run).
    pub(crate) fn owned_by(mut self, owner: RegionOwner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The memory file holding the sealed value, to pass to another process.
    pub(crate) fn memory_file(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match &self.body {
            Body::Sealed { file, .. } => Some(std::os::fd::AsFd::as_fd(file.as_ref())),
            _ => None,
        }
    }

    /// Whether the value lives in a memory file that consumers can map.
    pub fn is_mappable(&self) -> bool {
        matches!(self.body, Body::Sealed { .. })
    }

    /// The value's bytes: borrowed when held in host memory, read from the memory file
    /// otherwise.
    ///
    /// # Errors
    /// [`RegionError::NotSealed`] while it is being written; [`RegionError::Map`] if
    /// the memory file cannot be read.
    pub fn bytes(&self) -> Result<Cow<'_, [u8]>, RegionError> {
        match &self.body {
            Body::Bytes(bytes) => Ok(Cow::Borrowed(bytes)),
            Body::Writing { .. } | Body::Sealed { .. } => {
                let mut out = Vec::with_capacity(self.len());
                self.append_to(&mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Appends the value's bytes to `out`: one copy, straight from the memory file
    /// when it is held in one (where [`Region::bytes`] makes one more).
    ///
    /// # Errors
    /// As for [`Region::bytes`]; `out` is as it was then.
    pub(crate) fn append_to(&self, out: &mut Vec<u8>) -> Result<(), RegionError> {
        match &self.body {
            Body::Bytes(bytes) => out.extend_from_slice(bytes),
            Body::Writing { .. } => return Err(RegionError::NotSealed),
            Body::Sealed { file, len } => {
                let start = out.len();
                out.resize(start + len, 0);
                if let Err(err) = file.read_at_start(&mut out[start..]) {
                    out.truncate(start);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Keeps `producer` alive while this region (or a clone) may still be placed.
    pub(crate) fn retain_producer(&mut self, producer: Arc<Retired>) {
        self.producer = Some(producer);
    }

    /// Lets go of the producer once this consumer has the value in its memory.
    pub(crate) fn release_producer(&mut self) {
        self.producer = None;
    }

    /// Refuses a region that belongs to another run than `requester`'s.
    pub(crate) fn check_owner(&self, requester: &RegionOwner) -> Result<(), RegionError> {
        match &self.owner {
            Some(owner) if owner != requester => Err(RegionError::ForeignOwner {
                owner: owner.clone(),
                requester: requester.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// A small region copied from guest bytes, owned by `scope`'s run.
    pub(crate) fn copied(scope: &RegionScope, schema_type: String, bytes: Vec<u8>) -> Self {
        Self {
            schema_type,
            owner: scope.owner.clone(),
            body: Body::Bytes(bytes.into()),
            producer: None,
            claim: None,
        }
    }

    /// A region being written in `pages` of the calling guest's memory: backs them with
    /// a fresh memory file mapped shared, so the guest's writes land in the file.
    ///
    /// The pages must not hold a region already: so every memory file a store creates
    /// is also a distinct part of its linear memory, and counts against its memory
    /// limit like any page the guest grew.
    ///
    /// # Errors
    /// The outer error is a limit that fails the event; the inner one the guest sees.
    ///
    /// # Safety
    /// `pages` must be unborrowed pages of the calling store's live guest memory.
    pub(crate) unsafe fn create_in(
        scope: &RegionScope,
        mapped: &mut MappedPages,
        schema_type: String,
        pages: PageRange,
    ) -> Result<Result<Self, RegionError>, RegionLimitExceeded> {
        if let Err(err) = scope.output.check("region capacity", pages.len()) {
            return Ok(Err(err));
        }
        if mapped.overlaps(pages) {
            return Ok(Err(RegionError::PagesInUse));
        }
        match pages.in_image() {
            Ok(false) => {}
            Ok(true) => return Ok(Err(RegionError::InitialData)),
            Err(err) => return Ok(Err(err)),
        }
        mapped.make_room()?;
        let ticket = crate::limits::take_file(&scope.limits.files, mapped.tenant())
            .map_err(|over| RegionLimitExceeded::files(&over))?;
        // SAFETY: forwarded from the caller.
        Ok(unsafe { Self::create_in_file(scope, mapped, schema_type, pages, ticket) })
    }

    /// [`Self::create_in`] once the limits are checked.
    ///
    /// # Safety
    /// As for [`Self::create_in`].
    unsafe fn create_in_file(
        scope: &RegionScope,
        mapped: &mut MappedPages,
        schema_type: String,
        pages: PageRange,
        ticket: crate::limits::FileTicket,
    ) -> Result<Self, RegionError> {
        let file = PayloadFile::create(pages.len(), ticket)?;
        // Recorded before mapping, so even a failure half-way leaves nothing behind.
        mapped.record(pages);
        // SAFETY: forwarded from the caller; the range is recorded for restoring.
        unsafe { pages.map_file(file.as_fd(), ProtFlags::READ | ProtFlags::WRITE, true) }?;
        Ok(Self {
            schema_type,
            owner: scope.owner.clone(),
            body: Body::Writing {
                file: Arc::new(file),
                pages,
            },
            producer: None,
            claim: None,
        })
    }

    /// Ends writing at `len` bytes. The producer's pages stay mapped until its store
    /// is dropped (unmapping them costs time in proportion to their size, so that
    /// happens off the path to the next step); the value is fixed by
    /// [`Region::hand_over`] once the producer has returned.
    pub(crate) fn seal(&mut self, len: usize) -> Result<(), RegionError> {
        let Body::Writing { file, pages } = &self.body else {
            return Err(RegionError::NotWriting);
        };
        if len > pages.len() {
            return Err(RegionError::BeyondCapacity {
                len,
                capacity: pages.len(),
            });
        }
        self.body = Body::Sealed {
            file: file.clone(),
            len,
        };
        Ok(())
    }

    /// Fixes a sealed value for its consumers, once its producer can no longer run:
    /// zeroes the last page's tail past the value and seals the file against writes,
    /// growth and shrinking. Idempotent.
    ///
    /// # Errors
    /// [`RegionError::NotSealed`] for a region still being written.
    pub(crate) fn hand_over(&self) -> Result<(), RegionError> {
        match &self.body {
            Body::Writing { .. } => Err(RegionError::NotSealed),
            Body::Sealed { file, len } => file.freeze(*len),
            Body::Bytes(_) => Ok(()),
        }
    }

    /// Places the value at the start of `pages` of the calling guest's memory: maps
    /// the file copy-on-write when the value is at least `scope.map_threshold` bytes,
    /// copies it otherwise; read-only if the step's interface says so. Says which.
    ///
    /// # Safety
    /// `pages` must be unborrowed pages of the calling store's live guest memory.
    pub(crate) unsafe fn read_into(
        &self,
        scope: &RegionScope,
        mapped: &mut MappedPages,
        pages: PageRange,
    ) -> Result<Handoff, RegionError> {
        let len = self.len();
        scope.input.check("input region", len)?;
        let needed = pages::round_to_pages(len);
        if needed > pages.len() {
            return Err(RegionError::TooSmall {
                needed,
                given: pages.len(),
            });
        }
        if needed == 0 {
            return Ok(Handoff::Copied);
        }
        let target = pages.prefix(needed);
        // Pages the host already mapped may be read-only, and would orphan what is
        // there: only fresh pages take a value.
        if mapped.overlaps(target) {
            return Err(RegionError::PagesInUse);
        }
        // A read-only value is placed writable and becomes read-only when this host
        // call returns (see `MappedPages::on_call`): Wasmtime still writes this call's
        // result into guest memory, wherever the guest asks.
        let read_only = scope.input.read_only;
        // Over the component's initial data the value is copied, never mapped, and
        // the pages are only protected in place (see `mappings.rs`). A writable value
        // below the map threshold is copied anyway: no need to ask the kernel then.
        let in_image = (read_only || len >= scope.map_threshold) && target.in_image()?;
        if read_only || len >= scope.map_threshold {
            // The range may be recorded below: room for it first, so nothing is
            // placed that the budget would not cover.
            mapped.make_room()?;
        }
        let record = |mapped: &mut MappedPages| match (read_only, in_image) {
            (true, false) => mapped.record_read_only(target),
            (true, true) => mapped.record_read_only_in_image(target),
            (false, _) => mapped.record(target),
        };
        match &self.body {
            Body::Writing { .. } => return Err(RegionError::NotSealed),
            Body::Sealed { file, .. } if len >= scope.map_threshold && !in_image => {
                record(mapped);
                // SAFETY: forwarded from the caller; recorded for restoring.
                unsafe {
                    target.map_file(file.as_fd(), ProtFlags::READ | ProtFlags::WRITE, false)
                }?;
                return Ok(Handoff::Mapped);
            }
            Body::Sealed { file, .. } => {
                // SAFETY: forwarded from the caller; the guest is suspended in this call.
                let slice = unsafe { target.as_mut_slice() };
                file.read_at_start(&mut slice[..len])?;
            }
            Body::Bytes(bytes) => {
                // SAFETY: as above.
                let slice = unsafe { target.as_mut_slice() };
                slice[..len].copy_from_slice(bytes);
            }
        }
        if read_only {
            record(mapped);
        }
        Ok(Handoff::Copied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory_budget::GuestMemory;

    /// Whether `region`'s bytes are `within`'s, not a copy of them.
    fn shares(region: &Region, within: &[u8]) -> bool {
        let bytes = region.bytes().unwrap();
        within.as_ptr_range().contains(&bytes.as_ptr())
    }

    /// A large value received whole (a frame's only value, a run's body) is not copied
    /// once more; a small one, or one that is a small part of its buffer, is copied
    /// out, so that it does not keep the rest alive uncounted.
    #[test]
    fn a_received_value_stays_in_its_buffer_only_when_it_is_large_and_most_of_it() {
        let buffer = Bytes::from((0..1u32 << 20).map(|i| i as u8).collect::<Vec<u8>>());
        let len = buffer.len();
        let whole = Region::received("t", buffer.clone(), len);
        assert!(shares(&whole, &buffer));
        assert_eq!(whole.bytes().unwrap().as_ref(), &buffer[..]);

        let most = Region::received("t", buffer.slice(1000..), len);
        assert!(shares(&most, &buffer));
        assert_eq!(most.bytes().unwrap().as_ref(), &buffer[1000..]);

        let small_part = Region::received("t", buffer.slice(..len / 4), len);
        assert!(!shares(&small_part, &buffer));
        assert_eq!(small_part.bytes().unwrap().as_ref(), &buffer[..len / 4]);

        let small = Bytes::from(vec![7u8; KEPT_IN_PLACE_FROM - 1]);
        let copied = Region::received("t", small.clone(), small.len());
        assert!(!shares(&copied, &small));
        assert_eq!(copied.bytes().unwrap().as_ref(), &small[..]);
    }

    /// A step may return its input as its output. The input holds its producer's claim
    /// on the value; taking the returning step's own (here, next to nothing) in its
    /// place left the value uncounted once the input was dropped, for as long as the
    /// run kept it (a later step's retries), and drained the returning step's claim.
    #[test]
    fn a_value_returned_by_the_step_it_was_given_to_keeps_its_producers_claim() {
        let budget = Arc::new(GuestMemory::new(faas_budget::BudgetLimits {
            total: 1 << 30,
            per_holder: 1 << 30,
        }));
        let tenant: Arc<str> = Arc::from("t");
        let value = 8 << 20;
        let mut producer = budget.claim(tenant.clone());
        producer.grow_to(value).unwrap();
        let mut input = Region::new("bytes", vec![7u8; value as usize]);
        input.carry_claim(&mut producer);
        drop(producer);
        assert_eq!(budget.held(), value);

        let mut returning = budget.claim(tenant);
        returning.grow_to(64 << 10).unwrap();
        let mut output = input.clone();
        output.carry_claim(&mut returning);
        drop(input);
        assert_eq!(
            returning.bytes(),
            64 << 10,
            "the step's own claim is its own"
        );
        drop(returning);
        assert_eq!(budget.held(), value, "the value is still counted");
        drop(output);
        assert_eq!(budget.held(), 0);
    }
}
