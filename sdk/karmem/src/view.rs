//! Bounds-safe building blocks for zero-copy views.
//!
//! Every function here mirrors one check of the reference reader and returns an empty
//! slice where the reference returns its "null" viewer, so a generated view never has to
//! branch on validity: reads from an empty slice simply yield defaults.

use core::fmt;
use core::marker::PhantomData;

use crate::primitive::{Primitive, load};

/// Bytes of the table at `offset` of `data` (its `u32` size header included), or an
/// empty slice when the table is unreadable.
///
/// A table is unreadable when fewer than `min_size` bytes are left at `offset` (4 for
/// packed tables, 8 for unpacked ones) or when its recorded size runs past the buffer.
/// The returned slice is exactly the recorded size, so "field past the table's recorded
/// size" becomes "field past the slice".
#[inline]
pub fn table_at(data: &[u8], offset: u32, min_size: usize) -> &[u8] {
    let Some(rest) = data.get(offset as usize..) else {
        return &[];
    };
    if rest.len() < min_size {
        return &[];
    }
    let size = load::<u32>(rest, 0) as usize;
    rest.get(..size).unwrap_or(&[])
}

/// Bytes of an inline struct used as a root (or at a raw offset): at most `total` bytes
/// starting at `offset`, or an empty slice when fewer than `content` bytes are left.
///
/// `content` is the unpadded size, which is all the reference reader requires; the
/// padding may be cut off by the end of the buffer.
#[inline]
pub fn inline_root(data: &[u8], offset: u32, content: usize, total: usize) -> &[u8] {
    let Some(rest) = data.get(offset as usize..) else {
        return &[];
    };
    if rest.len() < content {
        return &[];
    }
    &rest[..total.min(rest.len())]
}

/// The bytes `start..end` of a struct, or an empty slice when they are not all there.
///
/// Used for fields of tables: a field that does not fit entirely inside the table's
/// recorded size reads as its default.
#[inline(always)]
pub fn field(bytes: &[u8], start: usize, end: usize) -> &[u8] {
    bytes.get(start..end).unwrap_or(&[])
}

/// The data a slice header points to, or an empty slice when it runs past `data`.
///
/// `header` holds the `u32 offset` and `u32 byte length` (an empty header reads as an
/// empty slice). The element size of unpacked headers is ignored when reading, as the
/// reference does: the schema's element size is authoritative.
#[inline]
pub fn slice_data<'a>(data: &'a [u8], header: &[u8]) -> &'a [u8] {
    let offset = load::<u32>(header, 0) as usize;
    let size = load::<u32>(header, 4) as usize;
    match data.get(offset..) {
        Some(rest) => rest.get(..size).unwrap_or(&[]),
        None => &[],
    }
}

/// A Karmem string (`[]char`, `[<N]char`, `[N]char`) read in place.
///
/// Karmem strings are bytes and need not be valid UTF-8, so this keeps the bytes and
/// lets the caller choose how to interpret them.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Str<'a>(&'a [u8]);

impl<'a> Str<'a> {
    /// Wraps raw string bytes.
    #[inline]
    pub fn new(bytes: &'a [u8]) -> Self {
        Str(bytes)
    }
    /// Wraps the data of a slice, keeping at most `limit` bytes (for `[<N]char`).
    #[inline]
    pub fn limited(bytes: &'a [u8], limit: usize) -> Self {
        Str(&bytes[..bytes.len().min(limit)])
    }
    /// The raw bytes.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
    /// The string, if it is valid UTF-8.
    #[inline]
    pub fn to_str(&self) -> Result<&'a str, core::str::Utf8Error> {
        core::str::from_utf8(self.0)
    }
    /// The string with invalid UTF-8 sequences replaced by U+FFFD (borrowed when valid).
    pub fn to_string_lossy(&self) -> alloc::borrow::Cow<'a, str> {
        alloc::string::String::from_utf8_lossy(self.0)
    }
    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the string is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            if !chunk.invalid().is_empty() {
                f.write_str("\u{FFFD}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_str() {
            Ok(s) => fmt::Debug::fmt(s, f),
            Err(_) => write!(f, "Str({:?})", self.0),
        }
    }
}

impl PartialEq<str> for Str<'_> {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Str<'_> {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// A read-only sequence of primitives (`[N]T`, `[]T`, `[<N]T`) read in place.
///
/// `len` is fixed when the view is made (the array length, or the slice's byte length
/// divided by the element size and capped by the limit); elements whose bytes are
/// missing (an array field outside its table) read as defaults.
#[derive(Clone, Copy)]
pub struct PrimSlice<'a, T> {
    bytes: &'a [u8],
    len: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Primitive> PrimSlice<'a, T> {
    /// An array of exactly `len` elements stored in `bytes`.
    #[inline]
    pub fn array(bytes: &'a [u8], len: usize) -> Self {
        PrimSlice {
            bytes,
            len,
            _t: PhantomData,
        }
    }
    /// A slice over `bytes` holding as many whole elements as fit, at most `limit`.
    #[inline]
    pub fn slice(bytes: &'a [u8], limit: usize) -> Self {
        let len = (bytes.len() / T::SIZE).min(limit);
        PrimSlice {
            bytes,
            len,
            _t: PhantomData,
        }
    }
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The element at `index`, or `None` past the end.
    #[inline]
    pub fn get(&self, index: usize) -> Option<T> {
        (index < self.len).then(|| load::<T>(self.bytes, index * T::SIZE))
    }
    /// Iterates over the elements.
    #[inline]
    pub fn iter(&self) -> PrimIter<'a, T> {
        PrimIter::new(self.bytes, self.len)
    }
    /// Copies the elements into a vector.
    pub fn to_vec(&self) -> alloc::vec::Vec<T> {
        self.iter().collect()
    }
    /// The underlying bytes (may be shorter than `len * SIZE` for a defaulted array).
    #[inline]
    pub fn raw_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<T: Primitive> fmt::Debug for PrimSlice<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, T: Primitive> IntoIterator for PrimSlice<'a, T> {
    type Item = T;
    type IntoIter = PrimIter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over a [`PrimSlice`].
#[derive(Clone)]
pub struct PrimIter<'a, T> {
    // Whole elements present in the bytes; fixed-size chunks let the loads compile
    // without further bounds checks.
    chunks: core::slice::ChunksExact<'a, u8>,
    // Elements of a defaulted array beyond the bytes (they read as defaults).
    missing: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Primitive> PrimIter<'a, T> {
    fn new(bytes: &'a [u8], len: usize) -> Self {
        let present = (bytes.len() / T::SIZE).min(len);
        PrimIter {
            chunks: bytes[..present * T::SIZE].chunks_exact(T::SIZE),
            missing: len - present,
            _t: PhantomData,
        }
    }
}

impl<T: Primitive> Iterator for PrimIter<'_, T> {
    type Item = T;
    #[inline]
    fn next(&mut self) -> Option<T> {
        match self.chunks.next() {
            Some(chunk) => Some(T::load(chunk, 0)),
            None if self.missing > 0 => {
                self.missing -= 1;
                Some(T::default())
            }
            None => None,
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.chunks.len() + self.missing;
        (n, Some(n))
    }
}

impl<T: Primitive> ExactSizeIterator for PrimIter<'_, T> {}

/// A generated view of an inline struct, which can be an element of an [`InlineSlice`].
pub trait InlineView<'a>: Copy {
    /// Size of one element in bytes (content plus padding).
    const SIZE: usize;
    /// Makes a view from the whole message `data` (to follow offsets) and the struct's
    /// own `bytes` (exactly `SIZE` bytes, or empty for a defaulted value).
    fn from_parts(data: &'a [u8], bytes: &'a [u8]) -> Self;
}

/// A sequence of inline structs (`[N]S`, `[]S`, `[<N]S`) read in place.
#[derive(Clone, Copy)]
pub struct InlineSlice<'a, V> {
    data: &'a [u8],
    bytes: &'a [u8],
    len: usize,
    _v: PhantomData<V>,
}

impl<'a, V: InlineView<'a>> InlineSlice<'a, V> {
    /// An array of exactly `len` elements stored in `bytes`.
    #[inline]
    pub fn array(data: &'a [u8], bytes: &'a [u8], len: usize) -> Self {
        InlineSlice {
            data,
            bytes,
            len,
            _v: PhantomData,
        }
    }
    /// A slice over `bytes` holding as many whole elements as fit, at most `limit`.
    #[inline]
    pub fn slice(data: &'a [u8], bytes: &'a [u8], limit: usize) -> Self {
        // A zero-sized element cannot be encoded by the reference compiler; guard the
        // division anyway so arbitrary schemas cannot make the reader panic.
        let len = bytes.len().checked_div(V::SIZE).unwrap_or(0).min(limit);
        InlineSlice {
            data,
            bytes,
            len,
            _v: PhantomData,
        }
    }
    /// Number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether there are no elements.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The element at `index`, or `None` past the end.
    #[inline]
    pub fn get(&self, index: usize) -> Option<V> {
        if index >= self.len {
            return None;
        }
        let start = index * V::SIZE;
        Some(V::from_parts(
            self.data,
            field(self.bytes, start, start + V::SIZE),
        ))
    }
    /// Iterates over the elements.
    #[inline]
    pub fn iter(&self) -> InlineSliceIter<'a, V> {
        // `max(1)` only guards the division; zero-sized elements cannot be declared.
        let size = V::SIZE.max(1);
        let present = (self.bytes.len() / size).min(self.len);
        InlineSliceIter {
            data: self.data,
            chunks: self.bytes[..present * size].chunks_exact(size),
            missing: self.len - present,
            _v: PhantomData,
        }
    }
}

impl<'a, V: InlineView<'a> + fmt::Debug> fmt::Debug for InlineSlice<'a, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, V: InlineView<'a>> IntoIterator for InlineSlice<'a, V> {
    type Item = V;
    type IntoIter = InlineSliceIter<'a, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Iterator over an [`InlineSlice`].
#[derive(Clone)]
pub struct InlineSliceIter<'a, V> {
    data: &'a [u8],
    chunks: core::slice::ChunksExact<'a, u8>,
    missing: usize,
    _v: PhantomData<V>,
}

impl<'a, V: InlineView<'a>> Iterator for InlineSliceIter<'a, V> {
    type Item = V;
    #[inline]
    fn next(&mut self) -> Option<V> {
        match self.chunks.next() {
            Some(chunk) => Some(V::from_parts(self.data, chunk)),
            None if self.missing > 0 => {
                self.missing -= 1;
                Some(V::from_parts(self.data, &[]))
            }
            None => None,
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.chunks.len() + self.missing;
        (n, Some(n))
    }
}

impl<'a, V: InlineView<'a>> ExactSizeIterator for InlineSliceIter<'a, V> {}
