//! Compiles the example's schema into `$OUT_DIR/blob.rs`.
fn main() {
    faas_karmem_compiler::build::compile("../blob.km").expect("compile blob.km");
}
