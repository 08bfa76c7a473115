//! Whether guest pages belong to a file mapping: in a guest's linear memory, the
//! copy-on-write image of its component's initial data (Wasmtime's `memory_init_cow`).
//!
//! The host puts fresh anonymous pages back over every range it mapped a region onto or
//! protected ([`super::MappedPages`]). Over an image that would be wrong: Wasmtime
//! resets image pages by dropping their private copies (`madvise(MADV_DONTNEED)`),
//! which brings the image's bytes back only while the image is still mapped there.
//! Over anonymous pages it brings zeros, and the next instance of that component in
//! the slot would find part of its initial data zeroed. So regions are never mapped
//! over an image (a value is copied there instead, and a producer's pages must lie
//! elsewhere), and the engine maps images only where the kernel answers this question:
//! Linux 6.11 and later, with one `PROCMAP_QUERY` ioctl on `/proc/self/maps`.

use linux_raw_sys::general::{procmap_query, procmap_query_flags};
use rustix::ioctl::{Updater, ioctl, opcode};
use std::fs::File;
use std::sync::OnceLock;

/// `PROCMAP_QUERY` (`linux/fs.h`): `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: rustix::ioctl::Opcode = opcode::read_write::<procmap_query>(b'f', 17);

/// `/proc/self/maps`, open once, if the kernel answers `PROCMAP_QUERY` on it.
fn maps() -> Option<&'static File> {
    static MAPS: OnceLock<Option<File>> = OnceLock::new();
    MAPS.get_or_init(|| {
        let maps = File::open("/proc/self/maps").ok()?;
        // This function's code is in a file mapping (the executable): a kernel that
        // knows the ioctl says so.
        let code = answered as fn() -> bool as usize;
        matches!(mapping_at(&maps, code), Ok(Some(mapping)) if mapping.file_backed).then_some(maps)
    })
    .as_ref()
}

/// Whether [`file_backed`] can tell image pages from others here: only then may the
/// engine map memory images.
pub(crate) fn answered() -> bool {
    maps().is_some()
}

/// One mapping of the process, as the kernel describes it.
struct Mapping {
    end: usize,
    /// Whether a file backs it (a memory file included); anonymous memory has no inode.
    file_backed: bool,
    /// Whether it may be read and written.
    read_write: bool,
}

/// The mapping that covers `addr`; `None` where nothing is mapped.
fn mapping_at(maps: &File, addr: usize) -> std::io::Result<Option<Mapping>> {
    // SAFETY: `procmap_query` is plain integers, for which all zeros is a valid value.
    let mut query: procmap_query = unsafe { std::mem::zeroed() };
    query.size = std::mem::size_of::<procmap_query>() as u64;
    query.query_addr = addr as u64;
    // SAFETY: the opcode is the kernel's for this struct, which the kernel reads and
    // writes in place; no name or build id buffer is asked for.
    match unsafe { ioctl(maps, Updater::<{ PROCMAP_QUERY }, _>::new(&mut query)) } {
        Ok(()) => {
            let read_write = procmap_query_flags::PROCMAP_QUERY_VMA_READABLE as u64
                | procmap_query_flags::PROCMAP_QUERY_VMA_WRITABLE as u64;
            Ok(Some(Mapping {
                end: query.vma_end as usize,
                file_backed: query.inode != 0,
                read_write: query.vma_flags & read_write == read_write,
            }))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(errno) => Err(errno.into()),
    }
}

/// Whether `found` holds for any of the mappings that cover `addr..addr + len`, in
/// order, or for `None` at the first page of it that nothing maps (which ends the
/// walk); `None` where the kernel cannot say. One query per mapping the range spans:
/// guest pages are one or a few mappings.
fn any_mapping(
    addr: usize,
    len: usize,
    found: impl Fn(Option<&Mapping>) -> bool,
) -> std::io::Result<Option<bool>> {
    let Some(maps) = maps() else {
        return Ok(None);
    };
    let end = addr.saturating_add(len);
    let mut at = addr;
    while at < end {
        let mapping = mapping_at(maps, at)?;
        if found(mapping.as_ref()) {
            return Ok(Some(true));
        }
        match mapping {
            Some(mapping) => at = mapping.end,
            None => break,
        }
    }
    Ok(Some(false))
}

/// Whether any page of `addr..addr + len` belongs to a file mapping. Where the kernel
/// cannot say, no memory image is mapped either ([`answered`]), so none does.
///
/// # Errors
/// If the kernel fails a query it answered before.
pub(crate) fn file_backed(addr: usize, len: usize) -> std::io::Result<bool> {
    let found = any_mapping(addr, len, |mapping| mapping.is_some_and(|m| m.file_backed))?;
    Ok(found.unwrap_or(false))
}

/// Whether every page of `addr..addr + len` is mapped readable and writable: between
/// two read-only ranges of one guest memory, pages the guest may write, which may be
/// protected with them for a moment and made writable again. `false` where the
/// kernel cannot say.
///
/// # Errors
/// If the kernel fails a query it answered before.
pub(crate) fn read_write(addr: usize, len: usize) -> std::io::Result<bool> {
    let other = any_mapping(addr, len, |mapping| !mapping.is_some_and(|m| m.read_write))?;
    Ok(other == Some(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::mm::{MapFlags, ProtFlags};

    #[test]
    fn a_file_mapping_is_told_from_anonymous_pages_around_it() {
        if !answered() {
            eprintln!("PROCMAP_QUERY is not available on this kernel: nothing to check");
            return;
        }
        let page = rustix::param::page_size();
        // Three anonymous pages, the middle one then replaced by a file's page.
        // SAFETY: a fresh mapping that nothing else uses.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                3 * page,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap() as usize;
        let file = tempfile::tempfile().unwrap();
        file.set_len(page as u64).unwrap();
        // SAFETY: replaces the middle page of the mapping made above.
        unsafe {
            rustix::mm::mmap(
                (base + page) as *mut _,
                page,
                ProtFlags::READ,
                MapFlags::PRIVATE | MapFlags::FIXED,
                &file,
                0,
            )
        }
        .unwrap();
        assert!(!file_backed(base, page).unwrap());
        assert!(file_backed(base, 2 * page).unwrap());
        assert!(file_backed(base + page, page).unwrap());
        assert!(!file_backed(base + 2 * page, page).unwrap());
        // SAFETY: the mapping made above, no longer used.
        unsafe { rustix::mm::munmap(base as *mut _, 3 * page) }.unwrap();
    }
}
