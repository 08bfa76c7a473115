//! The worker's half of the internal API's frames (`faas_invoke::wire` holds the
//! contract): regions packed into a frame, as bytes or as memory file descriptors,
//! and rebuilt from one.

use crate::limits::FileBudget;
use crate::memory_budget::{GuestMemory, GuestMemoryClaim};
use crate::region::{Region, RegionError, RegionLimitExceeded, RegionOwner, round_to_pages};
use crate::run::{RunError, RunOutcome};
use bytes::Bytes;
use faas_invoke::wire::{Carried, FrameHead, MAX_FDS, RunHead, frame};
use faas_invoke::{EventFailure, RunStatus};
use serde::Serialize;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

/// A run's outcome as the reply body: a frame whose inline bytes are the outputs,
/// counted in `claim` (the run's tenant's guest memory here) for as long as the caller
/// keeps it, until it is sent. Outputs it has no room for fail the run instead.
pub(crate) fn encode_run(outcome: RunOutcome, claim: &mut GuestMemoryClaim) -> Vec<u8> {
    let mut head = RunHead {
        record: outcome.record,
        outputs: Vec::new(),
        error: None,
    };
    let outputs = outcome.result.and_then(|regions| {
        let mut packed = carry(&regions, false);
        head.outputs = std::mem::take(&mut packed.carried);
        packed
            .frame(&head, claim)
            .map_err(|err| RunError::Output(err.to_string()))
    });
    outputs.unwrap_or_else(|err| {
        head.outputs = Vec::new();
        head.record.status = RunStatus::Failed;
        head.record.error = Some(err.to_string());
        head.error = Some(EventFailure::from(&err));
        frame(&head, &[])
    })
}

/// Regions made ready for a frame: their entries, and the memory files to pass;
/// [`Packed::frame`] writes the bytes of the rest.
pub(crate) struct Packed<'a> {
    /// One entry per region, in order.
    pub carried: Vec<Carried>,
    /// The memory files passed as descriptors.
    pub fds: Vec<BorrowedFd<'a>>,
    /// The regions passed inline, in order.
    inline: Vec<&'a Region>,
}

impl Packed<'_> {
    /// The frame of `head` and the inline regions' bytes, copied into it once, and
    /// counted in `claim` before it is allocated (it holds them as long as the caller
    /// keeps it: until the connection has taken the frame).
    ///
    /// # Errors
    /// [`RegionLimitExceeded::Reply`] when `claim` has no room for the frame;
    /// [`RegionError::Map`] when a memory file cannot be read.
    pub(crate) fn frame(
        &self,
        head: &impl Serialize,
        claim: &mut GuestMemoryClaim,
    ) -> Result<Vec<u8>, RegionError> {
        let head = FrameHead::new(head);
        let inline_len = self.inline.iter().map(|region| region.len()).sum();
        claim
            .grow_to(head.frame_len(inline_len) as u64)
            .map_err(|over| {
                let (limit, whose) = RegionLimitExceeded::whose(&over);
                RegionLimitExceeded::Reply {
                    limit: limit >> 20,
                    whose,
                }
            })?;
        let mut frame = head.start_frame(inline_len);
        for region in &self.inline {
            if let Err(err) = region.append_to(&mut frame) {
                // The frame goes: what it claimed with it.
                drop(claim.split_off(head.frame_len(inline_len) as u64));
                return Err(err);
            }
        }
        Ok(frame)
    }
}

/// Splits `regions` into their frame entries, the memory files to pass (when `fds`),
/// and the rest, passed inline.
pub(crate) fn carry(regions: &[Region], fds: bool) -> Packed<'_> {
    let mut carried = Vec::with_capacity(regions.len());
    let mut descriptors = Vec::new();
    let mut inline = Vec::new();
    for (region, file) in files_of(regions, fds) {
        if let Some(file) = file {
            descriptors.push(file);
        } else {
            inline.push(region);
        }
        carried.push(Carried {
            schema_type: region.schema_type().to_owned(),
            len: region.len() as u64,
            fd: file.is_some(),
        });
    }
    Packed {
        carried,
        fds: descriptors,
        inline,
    }
}

/// How many bytes [`carry`] passes inline for `regions`.
pub(crate) fn inline_bytes(regions: &[Region], fds: bool) -> usize {
    files_of(regions, fds)
        .filter(|(_, file)| file.is_none())
        .map(|(region, _)| region.len())
        .sum()
}

/// Each of `regions` with the memory file it is passed as, if it is (when `fds`: the
/// first [`MAX_FDS`] that have one).
fn files_of(
    regions: &[Region],
    fds: bool,
) -> impl Iterator<Item = (&Region, Option<BorrowedFd<'_>>)> {
    let mut passed = 0;
    regions.iter().map(move |region| {
        let file = region.memory_file().filter(|_| fds && passed < MAX_FDS);
        passed += usize::from(file.is_some());
        (region, file)
    })
}

/// What the regions another worker process hands this one count against here: each
/// memory file takes one of the files, and each value its bytes of its tenant's guest
/// memory (a value held here while its run goes on, at a join perhaps, after the
/// sender has let it go).
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// This worker's region memory files.
    pub files: Arc<FileBudget>,
    /// This worker's guest memory.
    pub memory: Arc<GuestMemory>,
}

/// Rebuilds the regions of a frame, owned by `owner`'s run, counted against
/// `budgets` for `owner`'s tenant. A large value passed inline stays in the frame's
/// buffer ([`Region::received`]).
pub(crate) fn uncarry(
    carried: Vec<Carried>,
    fds: Vec<OwnedFd>,
    inline: Bytes,
    owner: &RegionOwner,
    budgets: &Received,
) -> Result<Vec<Region>, RegionError> {
    let mut fds = fds.into_iter();
    let frame_len = inline.len();
    let mut rest = inline;
    let malformed = |what: &str| RegionError::Map(std::io::Error::other(what.to_owned()));
    carried
        .into_iter()
        .map(|entry| {
            let len = usize::try_from(entry.len).map_err(|_| malformed("length"))?;
            let mut claim = budgets.memory.claim(owner.tenant.clone());
            // A file holds the value's whole pages.
            let held = if entry.fd { round_to_pages(len) } else { len };
            claim.grow_to(held as u64).map_err(|over| {
                let (limit, whose) = RegionLimitExceeded::whose(&over);
                RegionLimitExceeded::GuestMemory {
                    limit: limit >> 20,
                    whose,
                }
            })?;
            let region = if entry.fd {
                let fd = fds
                    .next()
                    .ok_or_else(|| malformed("a memory file is missing"))?;
                Region::from_memory_file(entry.schema_type, owner.clone(), fd, len, &budgets.files)?
            } else {
                if rest.len() < len {
                    return Err(malformed("the inline bytes are truncated"));
                }
                let value = rest.split_to(len);
                Region::received(entry.schema_type, value, frame_len).owned_by(owner.clone())
            };
            Ok(region.holding(claim))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::RegionLimitExceeded;
    use rustix::fs::{MemfdFlags, SealFlags};

    /// A one-page memory file sealed as a producer's would be.
    fn sealed_file() -> OwnedFd {
        let fd = rustix::fs::memfd_create("test", MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        rustix::fs::fcntl_add_seals(
            &fd,
            SealFlags::FUTURE_WRITE | SealFlags::GROW | SealFlags::SHRINK,
        )
        .unwrap();
        fd
    }

    fn by_descriptor() -> Carried {
        Carried {
            schema_type: "bytes".into(),
            len: 100,
            fd: true,
        }
    }

    fn owner() -> RegionOwner {
        RegionOwner {
            tenant: "a".into(),
            workflow: "w".into(),
            run_id: "r".into(),
        }
    }

    /// Budgets of `files` memory files and `memory` bytes of guest memory, half of it a
    /// tenant's share.
    fn budgets(files: usize, memory: u64) -> Received {
        Received {
            files: crate::limits::file_budget(files),
            memory: Arc::new(GuestMemory::new(faas_budget::BudgetLimits {
                total: memory,
                per_holder: memory / 2,
            })),
        }
    }

    #[test]
    fn received_memory_files_are_charged_to_this_workers_budget() {
        let owner = owner();
        let received = budgets(1, 1 << 30);
        let carried = vec![by_descriptor(), by_descriptor()];
        let refused = uncarry(
            carried,
            vec![sealed_file(), sealed_file()],
            Bytes::new(),
            &owner,
            &received,
        );
        match refused {
            Err(RegionError::Limit(RegionLimitExceeded::Files { limit: 1, .. })) => {}
            other => panic!("expected the file budget to refuse, got {other:?}"),
        }
        // Nothing of the refused frame stays charged.
        assert_eq!(received.files.held(), 0);
        assert_eq!(received.memory.held(), 0);

        let received = budgets(8, 1 << 30);
        let carried = vec![by_descriptor(), by_descriptor()];
        let regions = uncarry(
            carried,
            vec![sealed_file(), sealed_file()],
            Bytes::new(),
            &owner,
            &received,
        )
        .unwrap();
        assert_eq!(received.files.held(), 2);
        // Each file holds the value's whole page.
        assert_eq!(received.memory.held(), 2 * 4096);
        drop(regions);
        assert_eq!(received.files.held(), 0);
        assert_eq!(received.memory.held(), 0);
    }

    /// A run's result sent back to the gateway was copied twice more (out of its
    /// memory files, into the frame), uncounted: as many runs as a tenant may have
    /// returning values the size of its share took three times that. It is copied
    /// once now, into the frame, which counts in the tenant's share until it is sent.
    #[test]
    fn a_run_result_is_sent_as_one_copy_that_counts_in_its_tenants_share() {
        let owner = owner();
        // A share of 64 KiB.
        let received = budgets(8, 128 << 10);
        let outcome = |inline_len: usize| {
            let mapped = Region::from_memory_file(
                "bytes".into(),
                owner.clone(),
                sealed_file(),
                100,
                &received.files,
            )
            .unwrap();
            RunOutcome {
                record: faas_invoke::RunRecord {
                    run_id: "r".into(),
                    workflow: "w".into(),
                    started_at_ms: 0,
                    duration_ms: 1.0,
                    status: RunStatus::Succeeded,
                    error: None,
                    steps: Vec::new(),
                    omitted_steps: 0,
                },
                result: Ok(vec![Region::new("bytes", vec![7; inline_len]), mapped]),
            }
        };
        let mut claim = received.memory.claim(owner.tenant.clone());
        let reply = bytes::Bytes::from(encode_run(outcome(32 << 10), &mut claim));
        assert_eq!(claim.bytes(), reply.len() as u64);
        assert_eq!(received.memory.held(), reply.len() as u64);
        let (record, result) = faas_invoke::wire::decode_run(&reply).unwrap();
        assert_eq!(record.status, RunStatus::Succeeded);
        let outputs = result.unwrap();
        assert_eq!(outputs[0].bytes.len(), 32 << 10);
        // The memory file's bytes, read straight into the frame.
        assert_eq!(outputs[1].bytes.len(), 100);
        drop(claim);
        assert_eq!(received.memory.held(), 0);

        // More than the share: the run fails, saying why, and nothing stays claimed.
        let mut claim = received.memory.claim(owner.tenant.clone());
        let reply = bytes::Bytes::from(encode_run(outcome(96 << 10), &mut claim));
        assert!(reply.len() < 4 << 10, "{}", reply.len());
        assert_eq!(received.memory.held(), 0);
        let (record, result) = faas_invoke::wire::decode_run(&reply).unwrap();
        assert_eq!(record.status, RunStatus::Failed);
        let failure = result.unwrap_err();
        assert!(
            failure.message.contains("guest memory for this tenant"),
            "{failure:?}"
        );
    }

    #[test]
    fn received_values_count_in_their_tenants_share_of_guest_memory_while_they_live() {
        let owner = owner();
        // A share of 8 KiB: two values of 3 KiB fit, a third does not.
        let received = budgets(8, 16 << 10);
        let inline = |count: usize| {
            let carried = (0..count)
                .map(|_| Carried {
                    schema_type: "bytes".into(),
                    len: 3 << 10,
                    fd: false,
                })
                .collect();
            uncarry(
                carried,
                Vec::new(),
                Bytes::from(vec![7; count * (3 << 10)]),
                &owner,
                &received,
            )
        };
        let held = inline(2).unwrap();
        assert_eq!(received.memory.held(), 6 << 10);
        match inline(1) {
            Err(RegionError::Limit(RegionLimitExceeded::GuestMemory {
                whose: "for this tenant",
                ..
            })) => {}
            other => panic!("expected the tenant's share to refuse, got {other:?}"),
        }
        // A clone shares the claim; the last one gives it back.
        let clones = held.clone();
        drop(held);
        assert_eq!(received.memory.held(), 6 << 10);
        drop(clones);
        assert_eq!(received.memory.held(), 0);
        assert!(inline(2).is_ok());
    }
}
