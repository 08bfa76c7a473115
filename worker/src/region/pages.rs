//! Pages of a guest's linear memory that the host maps a payload file onto, and the
//! bookkeeping that puts plain zero pages back before the memory is reused.
//!
//! Wasmtime elides bounds checks inside a memory's reservation and the pooling
//! allocator reuses memory slots, so three rules keep one guest's data out of another:
//! every range is checked (whole host pages, inside the memory as it is now); every
//! range the host changed is recorded; and every recorded range gets fresh anonymous
//! pages back before the store (and so the slot) is released, but for ranges over the
//! component's memory image, which are only ever protected, never replaced, and get
//! their protection lifted (see `mappings.rs`).

use super::{RegionError, RegionLimitExceeded};
use crate::limits::MappingClaim;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};
use std::os::fd::BorrowedFd;

/// The host's page size: the unit of `mmap`.
pub(crate) fn host_page_size() -> usize {
    rustix::param::page_size()
}

/// `len` rounded up to whole host pages.
pub(crate) fn round_to_pages(len: usize) -> usize {
    len.div_ceil(host_page_size()) * host_page_size()
}

/// Whole host pages inside one guest's linear memory, by host address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PageRange {
    addr: usize,
    len: usize,
}

impl PageRange {
    /// The pages `guest_pages` covers: a slice of a guest's linear memory, as a host
    /// function sees a `list<u8>` argument in place (Wasmtime has already checked that
    /// it lies inside the memory's current size).
    ///
    /// # Errors
    /// [`RegionError::Unaligned`] unless it starts on a page boundary and spans whole,
    /// non-zero pages.
    pub(crate) fn of_guest(guest_pages: &[u8]) -> Result<Self, RegionError> {
        let (addr, len) = (guest_pages.as_ptr() as usize, guest_pages.len());
        let page = host_page_size();
        if len == 0 || !addr.is_multiple_of(page) || !len.is_multiple_of(page) {
            return Err(RegionError::Unaligned { len, page });
        }
        Ok(Self { addr, len })
    }

    /// Its length in bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// The address just past its last page.
    fn end(self) -> usize {
        self.addr + self.len
    }

    /// Whether it shares a page with `other`.
    pub(crate) fn overlaps(self, other: Self) -> bool {
        self.addr < other.addr + other.len && other.addr < self.addr + self.len
    }

    /// The first `len` bytes (a whole number of pages, at most the range).
    pub(crate) fn prefix(self, len: usize) -> Self {
        debug_assert!(len <= self.len && len.is_multiple_of(host_page_size()));
        Self {
            addr: self.addr,
            len,
        }
    }

    /// Maps `len` bytes of `fd` from offset 0 onto the range's start.
    ///
    /// `shared`: writes go to the file (the producer writing in place); otherwise they
    /// go to private copies (a consumer, so no sibling sees them).
    ///
    /// # Safety
    /// The range must be pages of a live guest memory that no Rust reference points
    /// into, and be recorded in [`MappedPages`] so it is restored before the memory is
    /// released.
    pub(crate) unsafe fn map_file(
        self,
        fd: BorrowedFd<'_>,
        prot: ProtFlags,
        shared: bool,
    ) -> Result<(), RegionError> {
        let share = if shared {
            MapFlags::SHARED
        } else {
            MapFlags::PRIVATE
        };
        // SAFETY: MAP_FIXED replaces pages the caller guarantees are its guest's and
        // unborrowed; the guest only reaches them through Wasmtime's checked accesses.
        unsafe {
            rustix::mm::mmap(
                self.addr as *mut _,
                self.len,
                prot,
                share | MapFlags::FIXED,
                fd,
                0,
            )
        }
        .map_err(|errno| RegionError::Map(errno.into()))?;
        Ok(())
    }

    /// Makes the range read-only (a guest write to it then traps), or writable again.
    ///
    /// # Safety
    /// As for [`PageRange::map_file`].
    unsafe fn protect(self, read_only: bool) -> std::io::Result<()> {
        let flags = if read_only {
            MprotectFlags::READ
        } else {
            MprotectFlags::READ | MprotectFlags::WRITE
        };
        // SAFETY: see `map_file`.
        unsafe { rustix::mm::mprotect(self.addr as *mut _, self.len, flags) }?;
        Ok(())
    }

    /// Puts fresh, zeroed, writable anonymous pages in place of whatever is mapped.
    ///
    /// # Safety
    /// As for [`PageRange::map_file`].
    pub(crate) unsafe fn restore(self) -> std::io::Result<()> {
        // SAFETY: see `map_file`.
        unsafe {
            rustix::mm::mmap_anonymous(
                self.addr as *mut _,
                self.len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }?;
        Ok(())
    }

    /// Whether any of its pages belong to the component's memory image (its initial
    /// data, mapped copy-on-write), which must not be replaced (see `mappings.rs`).
    pub(crate) fn in_image(self) -> Result<bool, RegionError> {
        super::mappings::file_backed(self.addr, self.len).map_err(RegionError::Map)
    }

    /// The range as a byte slice, to copy a value into.
    ///
    /// # Safety
    /// The range must be pages of a live guest memory that nothing else reads or
    /// writes while the slice lives.
    pub(crate) unsafe fn as_mut_slice<'a>(self) -> &'a mut [u8] {
        // SAFETY: the caller guarantees exclusive access to live memory.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// Every range of one store's guest memory the host mapped or protected. Dropping it
/// restores them all, which must happen before Wasmtime returns the memory to its pool:
/// it is a field of the store's data, and Wasmtime drops a store's data before its
/// instances.
///
/// Read-only ranges are the one place where a guest's pages are not writable, and
/// Wasmtime writes into guest memory from host code (results of host calls, at an
/// address the guest chooses), where a fault would kill the process. So read-only
/// ranges are writable whenever the host runs on the guest's behalf: [`Self::on_call`]
/// lifts the protection when the guest calls the host and puts it back when the
/// outermost host call returns. The guest itself never runs while they are writable.
///
/// Putting protection back costs the process a TLB shootdown per `mprotect` (an
/// interrupt on every other core running its threads, other tenants' included), so
/// read-only ranges with only writable guest pages between them are protected as one
/// span, whose writable gaps are then lifted again (which needs no shootdown): one
/// per host call, however many values the guest placed, or scattered.
#[derive(Debug)]
pub(crate) struct MappedPages {
    /// This store's part of the worker's budget of ranges: one unit per range
    /// recorded, claimed by [`Self::make_room`] before the range is recorded.
    claim: MappingClaim,
    ranges: Vec<PageRange>,
    /// Read-only ranges by address, each with whether the pages between it and the
    /// one before are all readable and writable (so that the two are protected in one
    /// span, [`Self::on_call`]).
    read_only: Vec<(PageRange, bool)>,
    /// Read-only ranges over the component's memory image, where a value was copied:
    /// made writable again, not replaced, before the memory is reused (Wasmtime then
    /// resets their contents to the image's).
    in_image: Vec<PageRange>,
    /// Host calls under way (a host call may call back into the guest, e.g. its
    /// allocator, which may call the host again).
    host_depth: u32,
}

impl MappedPages {
    /// No range recorded yet; ranges are counted in `claim`.
    pub(crate) fn new(claim: MappingClaim) -> Self {
        Self {
            claim,
            ranges: Vec::new(),
            read_only: Vec::new(),
            in_image: Vec::new(),
            host_depth: 0,
        }
    }

    /// The tenant whose store this is.
    pub(crate) fn tenant(&self) -> &std::sync::Arc<str> {
        self.claim.holder()
    }

    /// Claims room in the worker's budget for one more range, before it is recorded.
    /// Idempotent until a range is recorded.
    ///
    /// # Errors
    /// [`RegionLimitExceeded::Mappings`] when the budget, or the tenant's share of it,
    /// is spent.
    pub(crate) fn make_room(&mut self) -> Result<(), RegionLimitExceeded> {
        let recorded = self.ranges.len() + self.in_image.len();
        self.claim.grow_to(recorded as u64 + 1).map_err(|over| {
            let (limit, whose) = RegionLimitExceeded::whose(&over);
            RegionLimitExceeded::Mappings { limit, whose }
        })
    }

    /// Remembers `range` to restore later.
    pub(crate) fn record(&mut self, range: PageRange) {
        self.ranges.push(range);
    }

    /// Remembers `range` to restore later, and to make read-only whenever the guest
    /// runs. Takes effect when the host call under way returns.
    pub(crate) fn record_read_only(&mut self, range: PageRange) {
        self.ranges.push(range);
        self.add_read_only(range);
    }

    /// Like [`Self::record_read_only`], for a range over the component's memory image:
    /// its protection is lifted, and its pages kept, at the end.
    pub(crate) fn record_read_only_in_image(&mut self, range: PageRange) {
        self.in_image.push(range);
        self.add_read_only(range);
    }

    /// Adds `range` to the read-only ranges in address order, joined to its neighbours
    /// where only writable pages lie between them. Ranges of different memories (or
    /// with anything else between them: guard pages, another slot) stay apart.
    fn add_read_only(&mut self, range: PageRange) {
        let at = self
            .read_only
            .partition_point(|(other, _)| other.addr < range.addr);
        let joined = at > 0 && writable_between(self.read_only[at - 1].0, range);
        self.read_only.insert(at, (range, joined));
        if let Some((next, next_joined)) = self.read_only.get_mut(at + 1) {
            *next_joined = writable_between(range, *next);
        }
    }

    /// The spans [`Self::on_call`] protects, each from the first page of a run of
    /// joined read-only ranges to the last, with the writable gaps inside it.
    fn read_only_spans(
        &self,
    ) -> impl Iterator<Item = (PageRange, impl Iterator<Item = PageRange>)> {
        self.read_only
            .chunk_by(|_, (_, joined)| *joined)
            .map(|run| {
                let (first, last) = (run[0].0, run[run.len() - 1].0);
                let span = PageRange {
                    addr: first.addr,
                    len: last.end() - first.addr,
                };
                let gaps = run
                    .windows(2)
                    .map(|pair| PageRange {
                        addr: pair[0].0.end(),
                        len: pair[1].0.addr - pair[0].0.end(),
                    })
                    .filter(|gap| gap.len > 0);
                (span, gaps)
            })
    }

    /// Whether the host mapped or protected no page at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.read_only.is_empty() && self.in_image.is_empty()
    }

    /// Whether the host already mapped or protected any page of `range`. Placing a
    /// region over such pages is refused: it would orphan the memory file mapped there
    /// (uncounted memory) or write over pages that may be read-only.
    pub(crate) fn overlaps(&self, range: PageRange) -> bool {
        self.ranges
            .iter()
            .chain(&self.in_image)
            .any(|recorded| recorded.overlaps(range))
    }

    /// Follows the guest's calls into the host (a Wasmtime call hook): read-only ranges
    /// are writable from the first call into the host until it returns.
    ///
    /// # Errors
    /// If the kernel refuses to change a protection: the guest must then stop, since
    /// its pages would be writable or the host could fault.
    pub(crate) fn on_call(&mut self, hook: wasmtime::CallHook) -> wasmtime::Result<()> {
        let read_only = match hook {
            wasmtime::CallHook::CallingHost => {
                self.host_depth += 1;
                if self.host_depth > 1 {
                    return Ok(());
                }
                false
            }
            wasmtime::CallHook::ReturningFromHost => {
                self.host_depth = self.host_depth.saturating_sub(1);
                if self.host_depth > 0 {
                    return Ok(());
                }
                true
            }
            _ => return Ok(()),
        };
        let failed =
            |err| wasmtime::Error::msg(format!("cannot change region page protection: {err}"));
        for (span, gaps) in self.read_only_spans() {
            // SAFETY: a span is pages of this store's live guest memory (read-only
            // ranges, and between them pages the guest may write, which are writable
            // again before it runs), and the guest is not running: it is calling, or
            // about to return to, the host.
            unsafe { span.protect(read_only) }.map_err(failed)?;
            if read_only {
                for gap in gaps {
                    // SAFETY: as above.
                    unsafe { gap.protect(false) }.map_err(failed)?;
                }
            }
        }
        Ok(())
    }
}

/// Whether only pages the guest may write lie between `before` and `after` (none
/// counts too): then they can be protected as one span.
fn writable_between(before: PageRange, after: PageRange) -> bool {
    let gap = after.addr.saturating_sub(before.end());
    gap == 0 || super::mappings::read_write(before.end(), gap).unwrap_or(false)
}

impl Drop for MappedPages {
    fn drop(&mut self) {
        let replaced = self.ranges.drain(..).map(|range| (range, true));
        let kept = self.in_image.drain(..).map(|range| (range, false));
        for (range, replace) in replaced.chain(kept) {
            // SAFETY: recorded ranges are pages of this store's guest memories, which
            // are still allocated (the store drops its data first) and no longer run.
            let restored = unsafe {
                if replace {
                    range.restore()
                } else {
                    range.protect(false)
                }
            };
            if let Err(err) = restored {
                // Returning the slot with a payload still mapped would show it to the
                // next tenant; stopping the process is the only safe way out.
                eprintln!("faas-worker: cannot restore region pages ({err}); aborting");
                std::process::abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::mm::{MapFlags, ProtFlags};
    use std::sync::Arc;

    /// Pages `first..first + count` of the mapping at `base`.
    fn pages(base: usize, first: usize, count: usize) -> PageRange {
        let page = host_page_size();
        PageRange {
            addr: base + first * page,
            len: count * page,
        }
    }

    fn read_write(range: PageRange) -> bool {
        super::super::mappings::read_write(range.addr, range.len).unwrap()
    }

    /// Read-only ranges with only writable pages between them are protected as one
    /// span (one TLB shootdown, not one per range), and the pages between them are
    /// writable again before the guest runs; a range with anything else between it
    /// and the others (here an inaccessible page, as a guard between memories) is
    /// protected on its own, and that page is left as it was.
    #[test]
    fn read_only_ranges_are_protected_together_only_across_writable_pages() {
        if !super::super::mappings::answered() {
            eprintln!("PROCMAP_QUERY is not available on this kernel: nothing to check");
            return;
        }
        // SAFETY: a fresh mapping that nothing else uses.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                12 * host_page_size(),
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap() as usize;
        let guard = pages(base, 7, 1);
        // SAFETY: a page of the mapping made above.
        unsafe { rustix::mm::mprotect(guard.addr as *mut _, guard.len, MprotectFlags::empty()) }
            .unwrap();
        let budget = Arc::new(crate::limits::mapping_budget(64));
        let mut mapped = MappedPages::new(budget.claim(Arc::from("t")));
        // Out of order, as a guest may place them: two adjacent, one past a writable
        // gap, one past the guard.
        let (a, b, c, d) = (
            pages(base, 0, 2),
            pages(base, 2, 1),
            pages(base, 5, 1),
            pages(base, 9, 1),
        );
        for range in [c, d, a, b] {
            mapped.record_read_only(range);
        }
        let spans: Vec<(PageRange, Vec<PageRange>)> = mapped
            .read_only_spans()
            .map(|(span, gaps)| (span, gaps.collect()))
            .collect();
        assert_eq!(
            spans,
            [(pages(base, 0, 6), vec![pages(base, 3, 2)]), (d, vec![])]
        );

        mapped.on_call(wasmtime::CallHook::CallingHost).unwrap();
        for range in [a, b, c, d, pages(base, 3, 2)] {
            assert!(read_write(range), "writable while the host runs: {range:?}");
        }
        mapped
            .on_call(wasmtime::CallHook::ReturningFromHost)
            .unwrap();
        for range in [a, b, c, d] {
            assert!(
                !read_write(range),
                "read-only while the guest runs: {range:?}"
            );
        }
        assert!(
            read_write(pages(base, 3, 2)),
            "the gap is the guest's to write"
        );
        assert!(read_write(pages(base, 6, 1)) && read_write(pages(base, 8, 1)));
        assert!(!read_write(guard), "the guard stays inaccessible");

        drop(mapped);
        // SAFETY: the mapping made above, no longer used.
        unsafe { rustix::mm::munmap(base as *mut _, 12 * host_page_size()) }.unwrap();
    }
}
