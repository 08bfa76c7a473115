//! `faas schema`: compile Karmem schemas to Rust and inspect or produce Karmem messages.
//!
//! Needs (in cli/Cargo.toml): `anyhow`, `clap` (derive), `serde_json` and
//! `faas-karmem-compiler = { path = "../sdk/karmem-compiler" }`.
//!
//! `decode` and `encode` are schema-driven (no code generation), so a region's contents
//! can be inspected with nothing but its `.km` file; they produce and accept the same
//! bytes as the generated code.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use faas_karmem_compiler::{
    Options, decode_to_json, encode_from_json, generate_rust_with, parse_file,
};

/// Subcommands of `faas schema`.
#[derive(Debug, clap::Subcommand)]
pub enum SchemaCommand {
    /// Generate the Rust module (views, writers, owned types) for a schema.
    Build {
        /// The Karmem schema (`.km`) to compile.
        file: PathBuf,
        /// Directory to write `<package name>.rs` into (created if missing).
        #[arg(short, long, default_value = ".")]
        out: PathBuf,
        /// Path of the Karmem runtime crate in the generated code.
        #[arg(long, default_value = "::faas_karmem")]
        runtime_path: String,
    },
    /// Print a Karmem message as JSON (schema field order, enums as integers,
    /// 64-bit integers exact, invalid UTF-8 as {"invalid_utf8_hex": "..."}).
    Decode {
        /// The Karmem schema (`.km`) describing the message.
        file: PathBuf,
        /// The root type of the message (`Type` or `package.Type`).
        type_name: String,
        /// The message bytes (`-` for standard input).
        message: PathBuf,
        /// Print on one line instead of indented.
        #[arg(long)]
        compact: bool,
    },
    /// Encode a JSON value as a Karmem message (missing fields take their default).
    Encode {
        /// The Karmem schema (`.km`) describing the message.
        file: PathBuf,
        /// The root type of the message (`Type` or `package.Type`).
        type_name: String,
        /// The JSON value (`-` for standard input).
        value: PathBuf,
        /// Write the bytes to this file instead of standard output.
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
}

/// Reads a file, or standard input for `-`.
fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
        return Ok(buf);
    }
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// Runs one `faas schema` subcommand.
pub fn run(cmd: SchemaCommand) -> anyhow::Result<()> {
    match cmd {
        SchemaCommand::Build {
            file,
            out,
            runtime_path,
        } => {
            let schema = parse_file(&file)?;
            let code = generate_rust_with(&schema, &Options { runtime_path });
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let dest = out.join(format!("{}.rs", schema.name));
            std::fs::write(&dest, code).with_context(|| format!("writing {}", dest.display()))?;
            println!("{}", dest.display());
        }
        SchemaCommand::Decode {
            file,
            type_name,
            message,
            compact,
        } => {
            let schema = parse_file(&file)?;
            let bytes = read_input(&message)?;
            let value = decode_to_json(&schema, &type_name, &bytes)?;
            let text = if compact {
                serde_json::to_string(&value)?
            } else {
                serde_json::to_string_pretty(&value)?
            };
            println!("{text}");
        }
        SchemaCommand::Encode {
            file,
            type_name,
            value,
            out,
        } => {
            let schema = parse_file(&file)?;
            let text = read_input(&value)?;
            let json: serde_json::Value = serde_json::from_slice(&text)
                .with_context(|| format!("parsing JSON from {}", value.display()))?;
            let bytes = encode_from_json(&schema, &type_name, &json)?;
            match out {
                Some(path) => std::fs::write(&path, &bytes)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => {
                    let mut stdout = std::io::stdout().lock();
                    if stdout.is_terminal() {
                        bail!(
                            "refusing to write binary to a terminal: redirect standard output or use -o FILE"
                        );
                    }
                    stdout.write_all(&bytes)?;
                    stdout.flush()?;
                }
            }
        }
    }
    Ok(())
}
