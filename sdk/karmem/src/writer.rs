//! In-place encoder over a caller-provided buffer.

use crate::error::Error;
use crate::primitive::Primitive;

/// Encodes a Karmem message into a caller-provided buffer, without allocating.
///
/// The writer hands out space front to back ("allocation" is bumping `len`), which is
/// what produces the reference layout: the root at offset 0 and the data of each field
/// appended depth first in declaration order. Space is zero-filled when handed out so
/// padding and unset fields are deterministic even when the buffer is reused.
///
/// Running out of space returns [`Error::CapacityExceeded`]; nothing panics.
pub struct Writer<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> Writer<'b> {
    /// A writer that encodes into `buf`, starting at its first byte.
    pub fn new(buf: &'b mut [u8]) -> Self {
        Writer { buf, len: 0 }
    }

    /// Number of bytes written so far (the size of the message).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written yet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size of the buffer.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The encoded message so far.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Forgets everything written, keeping the buffer, to encode another message.
    pub fn reset(&mut self) {
        self.len = 0;
    }

    /// Reserves `n` bytes at the end without clearing them; returns their offset.
    #[inline]
    fn reserve(&mut self, n: usize) -> Result<usize, Error> {
        let start = self.len;
        let end = start
            .checked_add(n)
            .ok_or(Error::OffsetOverflow { needed: usize::MAX })?;
        if end > self.buf.len() {
            return Err(Error::CapacityExceeded {
                needed: end,
                capacity: self.buf.len(),
            });
        }
        // Offsets and byte lengths are u32 on the wire.
        if end > u32::MAX as usize {
            return Err(Error::OffsetOverflow { needed: end });
        }
        self.len = end;
        Ok(start)
    }

    /// Reserves `n` zeroed bytes at the end and returns their offset.
    #[inline]
    pub fn alloc(&mut self, n: usize) -> Result<u32, Error> {
        let start = self.reserve(n)?;
        if let Some(space) = self.buf.get_mut(start..start + n) {
            space.fill(0);
        }
        Ok(start as u32)
    }

    /// Appends `bytes` and returns their offset.
    #[inline]
    pub fn alloc_bytes(&mut self, bytes: &[u8]) -> Result<u32, Error> {
        let start = self.reserve(bytes.len())?;
        if let Some(space) = self.buf.get_mut(start..start + bytes.len()) {
            space.copy_from_slice(bytes);
        }
        Ok(start as u32)
    }

    /// Appends `items` encoded back to back and returns their offset.
    #[inline]
    pub fn alloc_prims<T: Primitive>(&mut self, items: &[T]) -> Result<u32, Error> {
        let n = items
            .len()
            .checked_mul(T::SIZE)
            .ok_or(Error::OffsetOverflow { needed: usize::MAX })?;
        let start = self.reserve(n)?;
        if let Some(space) = self.buf.get_mut(start..start + n) {
            for (chunk, item) in space.chunks_exact_mut(T::SIZE).zip(items) {
                item.store(chunk, 0);
            }
        }
        Ok(start as u32)
    }

    /// Writes `value` at absolute offset `at`, which must lie in space already allocated.
    ///
    /// Generated writers only pass offsets inside space they allocated; anything else is
    /// ignored rather than allowed to panic or to grow the message.
    #[inline(always)]
    pub fn put<T: Primitive>(&mut self, at: usize, value: T) {
        if let Some(space) = self.buf.get_mut(..self.len) {
            value.store(space, at);
        }
    }

    /// Copies `bytes` to absolute offset `at`, truncated to the space already allocated.
    #[inline]
    pub fn put_bytes(&mut self, at: usize, bytes: &[u8]) {
        if let Some(space) = self.buf.get_mut(at..self.len) {
            let n = bytes.len().min(space.len());
            space[..n].copy_from_slice(&bytes[..n]);
        }
    }

    /// Writes a slice header at `at`: data offset and byte length, plus the element size
    /// when the containing struct is unpacked.
    #[inline]
    pub fn put_slice_header(
        &mut self,
        at: usize,
        offset: u32,
        byte_len: usize,
        elem_size: Option<u32>,
    ) {
        self.put::<u32>(at, offset);
        self.put::<u32>(at + 4, byte_len as u32);
        if let Some(size) = elem_size {
            self.put::<u32>(at + 8, size);
        }
    }

    /// Appends a slice of primitives and points the header at `at` to it.
    #[inline]
    pub fn slice_of<T: Primitive>(
        &mut self,
        at: usize,
        items: &[T],
        packed: bool,
    ) -> Result<(), Error> {
        let offset = self.alloc_prims(items)?;
        let elem = (!packed).then_some(T::SIZE as u32);
        self.put_slice_header(at, offset, items.len() * T::SIZE, elem);
        Ok(())
    }

    /// Appends raw bytes (a string) and points the header at `at` to them.
    #[inline]
    pub fn slice_of_bytes(&mut self, at: usize, bytes: &[u8], packed: bool) -> Result<(), Error> {
        let offset = self.alloc_bytes(bytes)?;
        self.put_slice_header(at, offset, bytes.len(), (!packed).then_some(1));
        Ok(())
    }

    /// Allocates `count` zeroed elements of `elem_size` bytes, points the header at `at` to
    /// them and returns the offset of the first element.
    #[inline]
    pub fn slice_alloc(
        &mut self,
        at: usize,
        count: usize,
        elem_size: usize,
        packed: bool,
    ) -> Result<u32, Error> {
        let n = count
            .checked_mul(elem_size)
            .ok_or(Error::OffsetOverflow { needed: usize::MAX })?;
        let offset = self.alloc(n)?;
        self.put_slice_header(at, offset, n, (!packed).then_some(elem_size as u32));
        Ok(offset)
    }

    /// Reserves `count` elements of `elem_size` bytes *without clearing them*, points the
    /// header at `at` to them and returns the space, for bulk encoders that overwrite
    /// every byte (generated code uses it for slices of plain inline structs).
    #[inline]
    pub fn slice_alloc_raw(
        &mut self,
        at: usize,
        count: usize,
        elem_size: usize,
        packed: bool,
    ) -> Result<&mut [u8], Error> {
        let n = count
            .checked_mul(elem_size)
            .ok_or(Error::OffsetOverflow { needed: usize::MAX })?;
        let start = self.reserve(n)?;
        self.put_slice_header(at, start as u32, n, (!packed).then_some(elem_size as u32));
        Ok(self.buf.get_mut(start..start + n).unwrap_or(&mut []))
    }

    /// Allocates a table of `size` bytes, writes its size header and returns its offset.
    #[inline]
    pub fn alloc_table(&mut self, size: usize) -> Result<u32, Error> {
        let offset = self.alloc(size)?;
        self.put::<u32>(offset as usize, size as u32);
        Ok(offset)
    }
}

impl core::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Writer")
            .field("len", &self.len)
            .field("capacity", &self.buf.len())
            .finish()
    }
}
