//! Writes the table the component carries: 1 Mi little-endian u32 from SplitMix64 with a
//! fixed seed (4 MiB of data segment, the same on every build).

fn main() {
    let mut state: u64 = 0x5eed;
    let mut table = Vec::with_capacity(4 << 20);
    for _ in 0..(1 << 20) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        table.extend_from_slice(&((z ^ (z >> 31)) as u32).to_le_bytes());
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("table.bin"), table).expect("writing the table");
    println!("cargo:rerun-if-changed=build.rs");
}
