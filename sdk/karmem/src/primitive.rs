//! Unaligned little-endian loads and stores of the Karmem primitive types.

/// A fixed-size Karmem scalar (`uint8`..`int64`, `float32`, `float64`, `bool`, `byte`).
///
/// Loads and stores are unaligned and little-endian, and they are total: a load that
/// does not fit in the given bytes returns the default value and a store that does not
/// fit does nothing (returning `false`). This is what keeps readers panic-free.
pub trait Primitive: Copy + Default + PartialEq + core::fmt::Debug + 'static {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Reads the value at `offset`, or the default when `offset + SIZE` is past the end.
    fn load(bytes: &[u8], offset: usize) -> Self;
    /// Writes the value at `offset`; returns `false` (and writes nothing) when it does not fit.
    fn store(self, bytes: &mut [u8], offset: usize) -> bool;
}

macro_rules! numeric {
    ($($t:ty => $n:literal),* $(,)?) => {$(
        impl Primitive for $t {
            const SIZE: usize = $n;
            #[inline(always)]
            fn load(bytes: &[u8], offset: usize) -> Self {
                // `get(offset..)` cannot overflow, unlike `offset + SIZE`.
                match bytes.get(offset..).and_then(|b| b.first_chunk::<$n>()) {
                    Some(chunk) => <$t>::from_le_bytes(*chunk),
                    None => <$t>::default(),
                }
            }
            #[inline(always)]
            fn store(self, bytes: &mut [u8], offset: usize) -> bool {
                match bytes.get_mut(offset..).and_then(|b| b.first_chunk_mut::<$n>()) {
                    Some(chunk) => {
                        *chunk = self.to_le_bytes();
                        true
                    }
                    None => false,
                }
            }
        }
    )*};
}

numeric!(u8 => 1, i8 => 1, u16 => 2, i16 => 2, u32 => 4, i32 => 4, u64 => 8, i64 => 8, f32 => 4, f64 => 8);

impl Primitive for bool {
    const SIZE: usize = 1;
    #[inline(always)]
    fn load(bytes: &[u8], offset: usize) -> Self {
        // Any non-zero byte is true, as in the reference reader.
        bytes.get(offset).is_some_and(|b| *b != 0)
    }
    #[inline(always)]
    fn store(self, bytes: &mut [u8], offset: usize) -> bool {
        u8::from(self).store(bytes, offset)
    }
}

/// Reads a `T` at `offset` of `bytes`, or `T::default()` when it does not fit.
#[inline(always)]
pub fn load<T: Primitive>(bytes: &[u8], offset: usize) -> T {
    T::load(bytes, offset)
}

/// Writes `value` at `offset` of `bytes`; returns `false` when it does not fit.
#[inline(always)]
pub fn store<T: Primitive>(bytes: &mut [u8], offset: usize, value: T) -> bool {
    value.store(bytes, offset)
}
