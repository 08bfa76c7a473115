//! The worker's half of the internal API's frames (`faas_invoke::wire` holds the
//! contract): regions packed into a frame, as bytes or as memory file descriptors,
//! and rebuilt from one.

use crate::limits::FileBudget;
use crate::region::{Region, RegionError, RegionOwner};
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
    let mut inline = Vec::new();
    for region in regions {
        let file = region
            .memory_file()
            .filter(|_| fds && descriptors.len() < MAX_FDS);
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

/// Rebuilds the regions of a frame, owned by `owner`'s run when given; each memory
/// file received takes one of this worker's budget `files`.
pub(crate) fn uncarry(
    carried: Vec<Carried>,
    fds: Vec<OwnedFd>,
    mut inline: &[u8],
    owner: Option<&RegionOwner>,
    files: &Arc<FileBudget>,
) -> Result<Vec<Region>, RegionError> {
    let mut fds = fds.into_iter();
    let malformed = |what: &str| RegionError::Map(std::io::Error::other(what.to_owned()));
    carried
        .into_iter()
        .map(|entry| {
            let len = usize::try_from(entry.len).map_err(|_| malformed("length"))?;
            if entry.fd {
                let fd = fds
                    .next()
                    .ok_or_else(|| malformed("a memory file is missing"))?;
                let owner = owner.ok_or_else(|| malformed("a memory file needs a run"))?;
                Region::from_memory_file(entry.schema_type, owner.clone(), fd, len, files)
            } else {
                if inline.len() < len {
                    return Err(malformed("the inline bytes are truncated"));
                }
                let (bytes, rest) = inline.split_at(len);
                inline = rest;
                let region = Region::new(entry.schema_type, bytes);
                Ok(match owner {
                    Some(owner) => region.owned_by(owner.clone()),
                    None => region,
                })
            }
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

    #[test]
    fn received_memory_files_are_charged_to_this_workers_budget() {
        let owner = RegionOwner {
            tenant: "a".into(),
            workflow: "w".into(),
            run_id: "r".into(),
        };
        let budget = FileBudget::new(1);
        let carried = vec![by_descriptor(), by_descriptor()];
        let refused = uncarry(
            carried,
            vec![sealed_file(), sealed_file()],
            &[],
            Some(&owner),
            &budget,
        );
        match refused {
            Err(RegionError::Limit(RegionLimitExceeded::Files { limit: 1 })) => {}
            other => panic!("expected the file budget to refuse, got {other:?}"),
        }
        // Nothing of the refused frame stays charged.
        assert_eq!(budget.open(), 0);

        let budget = FileBudget::new(2);
        let carried = vec![by_descriptor(), by_descriptor()];
        let regions = uncarry(
            carried,
            vec![sealed_file(), sealed_file()],
            &[],
            Some(&owner),
            &budget,
        )
        .unwrap();
        assert_eq!(budget.open(), 2);
        drop(regions);
        assert_eq!(budget.open(), 0);
    }
}
