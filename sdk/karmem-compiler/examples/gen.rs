//! Prints the Rust module generated for a schema: `cargo run --example gen -- file.km`.
fn main() {
    let path = std::env::args().nth(1).expect("usage: gen <file.km>");
    match faas_karmem_compiler::parse_file(std::path::Path::new(&path)) {
        Ok(schema) => print!("{}", faas_karmem_compiler::generate_rust(&schema)),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
