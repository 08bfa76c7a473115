//! The worker's half of the internal API's frames (`faas_invoke::wire` holds the
//! contract): regions packed into a frame, as bytes or as memory file descriptors,
//! and rebuilt from one.

use crate::region::{Region, RegionError, RegionOwner};
use crate::run::{RunError, RunOutcome};
use faas_invoke::EventFailure;
use faas_invoke::wire::{Carried, MAX_FDS, RunHead, frame};
use std::os::fd::{BorrowedFd, OwnedFd};

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

/// Rebuilds the regions of a frame, owned by `owner`'s run when given.
pub(crate) fn uncarry(
    carried: Vec<Carried>,
    fds: Vec<OwnedFd>,
    mut inline: &[u8],
    owner: Option<&RegionOwner>,
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
                Region::from_memory_file(entry.schema_type, owner.clone(), fd, len)
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
