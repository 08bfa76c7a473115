//! Compiles the workflow's schema into `$OUT_DIR/image.rs`.
fn main() {
    faas_karmem_compiler::build::compile("../image.km").expect("compile image.km");
}
