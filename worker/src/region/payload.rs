//! The memory file behind a mapped region: a memfd the producer writes into through
//! its own pages, sealed once handed over so no later write can reach the consumers.

use super::RegionError;
use super::pages::round_to_pages;
use rustix::fs::{MemfdFlags, SealFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A payload buffer: an anonymous memory file, alive while any region refers to it
/// (consumers' mappings keep the pages alive until their stores restore them).
#[derive(Debug)]
pub(crate) struct PayloadFile {
    fd: OwnedFd,
}

impl PayloadFile {
    /// A zero-filled file of `capacity` bytes (whole pages), writable until sealed.
    pub(crate) fn create(capacity: usize) -> Result<Self, RegionError> {
        let fd = rustix::fs::memfd_create(
            "faas-region",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|errno| RegionError::Map(errno.into()))?;
        rustix::fs::ftruncate(&fd, capacity as u64)
            .map_err(|errno| RegionError::Map(errno.into()))?;
        Ok(Self { fd })
    }

    /// Freezes the file holding a `len`-byte value: zeroes the last page's tail (the
    /// producer may have written past `len`, and consumers map whole pages) and seals
    /// it against further writes, growth and shrinking. The producer's own mapping may
    /// still exist (it is removed when its store is dropped) but its guest no longer
    /// runs. Does nothing if already frozen.
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
        rustix::fs::fcntl_add_seals(
            &self.fd,
            SealFlags::FUTURE_WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(map_err)
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
