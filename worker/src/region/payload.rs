//! The memory file behind a mapped region: a memfd the producer writes into through
//! its own pages, sealed once handed over so no later write can reach the consumers.

use super::RegionError;
use super::pages::round_to_pages;
use crate::limits::FileTicket;
use rustix::fs::{FallocateFlags, MemfdFlags, SealFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A payload buffer: an anonymous memory file, alive while any region refers to it
/// (consumers' mappings keep the pages alive until their stores restore them).
#[derive(Debug)]
pub(crate) struct PayloadFile {
    fd: OwnedFd,
    /// Its place in the worker's memory-file budget (a file received from another
    /// worker process too: it is open here, against this process's descriptor limit).
    _ticket: FileTicket,
}

impl PayloadFile {
    /// A zero-filled file of `capacity` bytes (whole pages), writable until sealed,
    /// holding `ticket` of the worker's file budget while it exists.
    pub(crate) fn create(capacity: usize, ticket: FileTicket) -> Result<Self, RegionError> {
        let fd = rustix::fs::memfd_create(
            "faas-region",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|errno| RegionError::Map(errno.into()))?;
        rustix::fs::ftruncate(&fd, capacity as u64)
            .map_err(|errno| RegionError::Map(errno.into()))?;
        Ok(Self {
            fd,
            _ticket: ticket,
        })
    }

    /// Freezes the file holding a `len`-byte value: zeroes the last page's tail (the
    /// producer may have written past `len`, and consumers map whole pages), frees the
    /// pages past the value's, and seals it against further writes, growth and
    /// shrinking. The producer's own mapping may still exist (it is removed when its
    /// store is dropped) but its guest no longer runs. Does nothing if already frozen.
    pub(crate) fn freeze(&self, len: usize) -> Result<(), RegionError> {
        let map_err = |errno: rustix::io::Errno| RegionError::Map(errno.into());
        if rustix::fs::fcntl_get_seals(&self.fd)
            .map_err(map_err)?
            .contains(SealFlags::SEAL)
        {
            return Ok(());
        }
        let size = round_to_pages(len);
        let tail = vec![0u8; size - len];
        let mut written = 0;
        while written < tail.len() {
            written += rustix::io::pwrite(&self.fd, &tail[written..], (len + written) as u64)
                .map_err(map_err)?;
        }
        // The value is what its run counts (`Region::carry_claim`), so the file may
        // hold no more: a producer could fill a large capacity and seal a few bytes.
        // A hole, not a shorter file, since the producer's pages still map it all.
        let capacity = rustix::fs::fstat(&self.fd).map_err(map_err)?.st_size;
        let beyond = u64::try_from(capacity)
            .unwrap_or(0)
            .saturating_sub(size as u64);
        if beyond > 0 {
            rustix::fs::fallocate(
                &self.fd,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                size as u64,
                beyond,
            )
            .map_err(map_err)?;
        }
        rustix::fs::fcntl_add_seals(
            &self.fd,
            SealFlags::FUTURE_WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(map_err)
    }

    /// A file another process sealed and passed over a Unix socket, holding a
    /// `len`-byte value. Refused unless it is sealed against writes, growth and
    /// shrinking, and holds the value's whole pages, so no one can change or cut what
    /// consumers map.
    pub(crate) fn received(
        fd: OwnedFd,
        len: usize,
        ticket: FileTicket,
    ) -> Result<Self, RegionError> {
        let map_err = |errno: rustix::io::Errno| RegionError::Map(errno.into());
        let seals = rustix::fs::fcntl_get_seals(&fd).map_err(map_err)?;
        let sealed = (seals.contains(SealFlags::WRITE) || seals.contains(SealFlags::FUTURE_WRITE))
            && seals.contains(SealFlags::GROW | SealFlags::SHRINK);
        let size = rustix::fs::fstat(&fd).map_err(map_err)?.st_size;
        if !sealed || (size as u64) < round_to_pages(len) as u64 {
            return Err(RegionError::Map(std::io::Error::other(format!(
                "a received memory file must be sealed and hold {len} bytes \
                 (seals {seals:?}, size {size})"
            ))));
        }
        Ok(Self {
            fd,
            _ticket: ticket,
        })
    }

    /// Copies `into.len()` bytes from the start of the file.
    pub(crate) fn read_at_start(&self, into: &mut [u8]) -> Result<(), RegionError> {
        let mut read = 0;
        while read < into.len() {
            let n = rustix::io::pread(&self.fd, &mut into[read..], read as u64)
                .map_err(|errno| RegionError::Map(errno.into()))?;
            if n == 0 {
                return Err(RegionError::Map(std::io::ErrorKind::UnexpectedEof.into()));
            }
            read += n;
        }
        Ok(())
    }
}

impl AsFd for PayloadFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::file_budget;

    fn ticket() -> FileTicket {
        crate::limits::take_file(&file_budget(1), &"t".into()).unwrap()
    }

    fn file_with(len: usize) -> PayloadFile {
        let file = PayloadFile::create(round_to_pages(len), ticket()).unwrap();
        rustix::io::pwrite(&file.fd, &vec![7u8; len], 0).unwrap();
        file
    }

    fn dup(file: &PayloadFile) -> OwnedFd {
        file.fd.try_clone().unwrap()
    }

    #[test]
    fn a_received_file_must_be_sealed() {
        let file = file_with(1000);
        assert!(PayloadFile::received(dup(&file), 1000, ticket()).is_err());
        file.freeze(1000).unwrap();
        let received = PayloadFile::received(dup(&file), 1000, ticket()).unwrap();
        let mut bytes = vec![0; 1000];
        received.read_at_start(&mut bytes).unwrap();
        assert!(bytes.iter().all(|byte| *byte == 7));
    }

    #[test]
    fn a_received_file_must_hold_the_whole_value() {
        let file = file_with(1000);
        file.freeze(1000).unwrap();
        let err = PayloadFile::received(dup(&file), 3 << 16, ticket()).unwrap_err();
        assert!(err.to_string().contains("hold 196608 bytes"), "{err}");
    }

    #[test]
    fn a_file_sealed_only_against_growth_is_refused() {
        let file = file_with(10);
        rustix::fs::fcntl_add_seals(&file.fd, SealFlags::GROW | SealFlags::SHRINK).unwrap();
        assert!(PayloadFile::received(dup(&file), 10, ticket()).is_err());
    }
}
