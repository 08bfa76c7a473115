use core::fmt;

/// Errors returned by [`crate::Writer`] and by generated encoders.
///
/// Reading never fails (malformed input reads as defaults), so this is only about writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The caller-provided buffer is too small: `needed` bytes would have been used in
    /// total, but only `capacity` are available.
    CapacityExceeded {
        /// Total number of bytes the message needed at the point of failure.
        needed: usize,
        /// Size of the buffer the writer was given.
        capacity: usize,
    },
    /// The message would grow past 4 GiB, which `u32` offsets cannot address.
    OffsetOverflow {
        /// Total number of bytes the message needed at the point of failure.
        needed: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::CapacityExceeded { needed, capacity } => write!(
                f,
                "karmem: buffer too small: needed {needed} bytes, capacity is {capacity}"
            ),
            Error::OffsetOverflow { needed } => write!(
                f,
                "karmem: message of {needed} bytes cannot be addressed with 32-bit offsets"
            ),
        }
    }
}

impl core::error::Error for Error {}
