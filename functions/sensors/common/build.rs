//! Compiles the pipeline's schema into `$OUT_DIR/sensors.rs`, once for all three steps.
fn main() {
    faas_karmem_compiler::build::compile("../sensors.km").expect("compile sensors.km");
}
