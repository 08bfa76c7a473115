//! The worker's half of the internal API's frames (`faas_invoke::wire` holds the
//! contract): regions packed into a frame, as bytes or as memory file descriptors,
//! and rebuilt from one.

use crate::limits::FileBudget;
use crate::memory_budget::GuestMemory;
use crate::region::{Region, RegionError, RegionLimitExceeded, RegionOwner, round_to_pages};
use crate::run::{RunError, RunOutcome};
use faas_invoke::EventFailure;
use faas_invoke::wire::{Carried, MAX_FDS, RunHead, frame};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Arc;

/// A run's outcome as the reply body: a frame whose inline bytes are the outputs.
pub(crate) fn encode_run(outcome: RunOutcome) -> Vec<u8> {
    let packed = outcome.result.and_then(|regions| {
        carry(&regions, false)
            .map(|packed| (packed.carried, packed.inline))
            .map_err(|err| RunError::Output(err.to_string()))
    });
    let (outputs, inline, error) = match packed {
        Ok((outputs, inline)) => (outputs, inline, None),
        Err(err) => (Vec::new(), Vec::new(), Some(EventFailure::from(&err))),
    };
    let head = RunHead {
        record: outcome.record,
        outputs,
        error,
    };
    frame(&head, &inline)
}

/// Regions made ready for a frame.
pub(crate) struct Packed<'a> {
    /// One entry per region, in order.
    pub carried: Vec<Carried>,
    /// The memory files passed as descriptors.
    pub fds: Vec<BorrowedFd<'a>>,
    /// The bytes of the regions passed inline, in order.
    pub inline: Vec<u8>,
}

/// Splits `regions` into their frame entries, the memory files to pass (when `fds`),
/// and the inline bytes of the rest.
pub(crate) fn carry(regions: &[Region], fds: bool) -> Result<Packed<'_>, RegionError> {
    let mut carried = Vec::with_capacity(regions.len());
    let mut descriptors = Vec::new();
    let mut inline = Vec::with_capacity(inline_bytes(regions, fds));
    for (region, file) in files_of(regions, fds) {
        if let Some(file) = file {
            descriptors.push(file);
        } else {
            inline.extend_from_slice(&region.bytes()?);
        }
        carried.push(Carried {
            schema_type: region.schema_type().to_owned(),
            len: region.len() as u64,
            fd: file.is_some(),
        });
    }
    Ok(Packed {
        carried,
        fds: descriptors,
        inline,
    })
}

/// How many bytes [`carry`] copies inline for `regions`.
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
/// `budgets` for `owner`'s tenant.
pub(crate) fn uncarry(
    carried: Vec<Carried>,
    fds: Vec<OwnedFd>,
    mut inline: &[u8],
    owner: &RegionOwner,
    budgets: &Received,
) -> Result<Vec<Region>, RegionError> {
    let mut fds = fds.into_iter();
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
                if inline.len() < len {
                    return Err(malformed("the inline bytes are truncated"));
                }
                let (bytes, rest) = inline.split_at(len);
                inline = rest;
                Region::new(entry.schema_type, bytes).owned_by(owner.clone())
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
            &[],
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
            &[],
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
                &vec![7; count * (3 << 10)],
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
