//! Compiles the workflow's schema into `$OUT_DIR/wordcount.rs`.
fn main() {
    faas_karmem_compiler::build::compile("../wordcount.km").expect("compile wordcount.km");
}
