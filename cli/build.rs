//! Rebuilds `faas` when what `faas new` carries changes: `include_dir!` cannot tell
//! Cargo about files added to the folders it reads.

fn main() {
    for path in [
        "../templates",
        "../wit",
        "../sdk/python",
        "../sdk/js",
        "../rust-toolchain.toml",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
