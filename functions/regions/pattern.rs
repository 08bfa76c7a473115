//! The blob pattern every regions example agrees on, shared (by `#[path]`) between the
//! region transfer and its HTTP+JSON baseline so both produce and check the same bytes.

/// The seed of a blob of `len` data bytes.
pub fn seed_for(len: usize) -> u64 {
    len as u64 ^ 0x5a
}

/// The byte at `index` of a blob made with `seed`.
pub fn expected_byte(index: usize, seed: u64) -> u8 {
    (index as u8) ^ (seed as u8)
}

/// Writes the blob pattern: one period by hand, then doubling copies (memcpy speed).
pub fn fill(data: &mut [u8], seed: u64) {
    let period = data.len().min(256);
    for (index, byte) in data[..period].iter_mut().enumerate() {
        *byte = expected_byte(index, seed);
    }
    let mut filled = period;
    while filled < data.len() {
        let n = filled.min(data.len() - filled);
        data.copy_within(..n, filled);
        filled += n;
    }
}
