//! `faas new`: a ready-to-deploy function folder from one of the templates in
//! `templates/`, which this binary carries, with what its language needs beside it.

use anyhow::{Context as _, bail};
use include_dir::{Dir, include_dir};
use std::path::{Path, PathBuf};

/// The templates (`templates/<name>/`).
static TEMPLATES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../templates");
/// The platform's WIT, which Python and JavaScript builds read.
static WIT: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../wit");
/// The toolchain the Rust templates build with: the one this repository pins, with
/// its wasm32-wasip2 target.
const RUST_TOOLCHAIN: &str = include_str!("../../rust-toolchain.toml");
/// The Python and JavaScript SDKs: one file each (two for JavaScript's HTTP part).
const PYTHON_SDK: &str = include_str!("../../sdk/python/faas.py");
const JS_SDK: &str = include_str!("../../sdk/js/faas.js");
const JS_HTTP_SDK: &str = include_str!("../../sdk/js/faas-http.js");
/// The JavaScript SDK's type declarations, for the TypeScript templates.
const JS_SDK_TYPES: &str = include_str!("../../sdk/js/faas.d.ts");
const JS_HTTP_SDK_TYPES: &str = include_str!("../../sdk/js/faas-http.d.ts");
/// The README section that says how to install the Python and JavaScript builders,
/// named in the hint `faas new` prints for those templates.
const README_LANGUAGES_SECTION: &str = "Starting from a template";

/// A template's language: what `faas new` adds to its files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Language {
    Rust,
    Python,
    JavaScript,
    /// JavaScript's SDK and toolchain, with tsc first and type declarations.
    TypeScript,
}

/// One template: its folder under `templates/`, language and what it makes.
struct Template {
    name: &'static str,
    language: Language,
    about: &'static str,
}

const ALL: [Template; 9] = [
    Template {
        name: "http-rust",
        language: Language::Rust,
        about: "an HTTP function in Rust (faas-sdk)",
    },
    Template {
        name: "step-rust",
        language: Language::Rust,
        about: "a workflow step in Rust: text in, JSON out, key-value, config, logs",
    },
    Template {
        name: "http-python",
        language: Language::Python,
        about: "an HTTP function in Python (componentize-py)",
    },
    Template {
        name: "step-python",
        language: Language::Python,
        about: "a workflow step in Python: text in, JSON out, key-value, config, logs",
    },
    Template {
        name: "http-js",
        language: Language::JavaScript,
        about: "an HTTP function in JavaScript (componentize-js)",
    },
    Template {
        name: "step-js",
        language: Language::JavaScript,
        about: "a workflow step in JavaScript: text in, JSON out, key-value, config, logs",
    },
    Template {
        name: "http-ts",
        language: Language::TypeScript,
        about: "an HTTP function in TypeScript (tsc, then componentize-js)",
    },
    Template {
        name: "step-ts",
        language: Language::TypeScript,
        about: "a workflow step in TypeScript: text in, JSON out, key-value, config, logs",
    },
    Template {
        name: "workflow",
        language: Language::Rust,
        about: "a workflow in Rust: split, a fan-out of counts, merge",
    },
];

/// `faas new`'s arguments.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The template (`faas new --list` shows them).
    #[arg(required_unless_present = "list")]
    template: Option<String>,
    /// The name of the workflow and its function: the folder created, its route
    /// (`/<name>`) and its name in workflow.toml.
    #[arg(required_unless_present = "list")]
    name: Option<String>,
    /// Lists the templates.
    #[arg(long)]
    list: bool,
    /// The tenant the workflow is deployed for.
    #[arg(long, default_value = "demo")]
    tenant: String,
    /// Where the folder is created.
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// Runs `faas new`.
pub fn run(args: NewArgs) -> anyhow::Result<()> {
    let (Some(template), Some(name)) = (&args.template, &args.name) else {
        for template in &ALL {
            println!("{:<12} {}", template.name, template.about);
        }
        return Ok(());
    };
    let Some(template) = ALL.iter().find(|t| t.name == template) else {
        let names: Vec<&str> = ALL.iter().map(|t| t.name).collect();
        bail!(
            "no template `{template}`; the templates are {}",
            names.join(", ")
        );
    };
    if !faas_workflow::is_valid_name(name) {
        bail!(
            "`{name}` is not a valid name: 1 to 63 characters from a-z, 0-9 and `-`, \
             starting with a letter"
        );
    }
    if !faas_workflow::is_valid_name(&args.tenant) {
        bail!("`{}` is not a valid tenant name", args.tenant);
    }
    let folder = args.dir.join(name);
    if folder.exists() {
        bail!(
            "{} exists already; choose another name or --dir",
            folder.display()
        );
    }
    let values = Values {
        name,
        tenant: &args.tenant,
        sdk: &rust_sdk()?,
    };
    write_template(template, &folder, &values)
        .with_context(|| format!("creating {}", folder.display()))?;
    println!("created {} from {}", folder.display(), template.name);
    println!(
        "next: cd {} && faas deploy && faas invoke /{name}",
        folder.display()
    );
    if template.language != Language::Rust {
        println!(
            "(the build needs {} on PATH: see the README, \"{README_LANGUAGES_SECTION}\")",
            match template.language {
                Language::Python => "componentize-py",
                Language::TypeScript => "tsc and componentize-js",
                _ => "componentize-js",
            }
        );
    }
    Ok(())
}

/// What the placeholders stand for.
struct Values<'a> {
    name: &'a str,
    tenant: &'a str,
    sdk: &'a str,
}

impl Values<'_> {
    fn fill(&self, text: &str) -> String {
        text.replace("{{name}}", self.name)
            .replace("{{crate}}", &self.name.replace('-', "_"))
            .replace("{{tenant}}", self.tenant)
            .replace("{{sdk}}", self.sdk)
    }
}

/// The Rust SDK's folder: `FAAS_SDK_DIR`, or this repository's `sdk/faas-sdk`.
fn rust_sdk() -> anyhow::Result<String> {
    let path = std::env::var_os("FAAS_SDK_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/faas-sdk"),
        PathBuf::from,
    );
    let path = path.canonicalize().with_context(|| {
        format!(
            "the Rust SDK is not at {} (set FAAS_SDK_DIR to its folder)",
            path.display()
        )
    })?;
    path.to_str()
        .map(str::to_owned)
        .context("the Rust SDK's path is not UTF-8")
}

/// Writes `template`'s files, filled in, into `folder`, and what its language needs.
fn write_template(template: &Template, folder: &Path, values: &Values) -> anyhow::Result<()> {
    let files = TEMPLATES
        .get_dir(template.name)
        .context("the template's files are missing from this build")?;
    write_dir(files, Path::new(template.name), folder, values)?;
    match template.language {
        Language::Rust => write(folder, "rust-toolchain.toml", RUST_TOOLCHAIN)?,
        Language::Python => {
            write(folder, "faas.py", PYTHON_SDK)?;
            write_wit(folder)?;
        }
        Language::JavaScript | Language::TypeScript => {
            write(folder, "faas.js", JS_SDK)?;
            write(folder, "faas-http.js", JS_HTTP_SDK)?;
            if template.language == Language::TypeScript {
                write(folder, "faas.d.ts", JS_SDK_TYPES)?;
                write(folder, "faas-http.d.ts", JS_HTTP_SDK_TYPES)?;
            }
            write_wit(folder)?;
        }
    }
    Ok(())
}

/// Writes the platform's WIT into `folder/wit`, as the Python and JavaScript builds
/// expect it.
fn write_wit(folder: &Path) -> anyhow::Result<()> {
    let wit = folder.join("wit");
    std::fs::create_dir_all(wit.join("deps"))?;
    WIT.extract(&wit)?;
    Ok(())
}

/// Writes every file under `dir` (whose paths start with `prefix`) into `folder`.
fn write_dir(dir: &Dir, prefix: &Path, folder: &Path, values: &Values) -> anyhow::Result<()> {
    for file in dir.files() {
        let relative = file.path().strip_prefix(prefix)?;
        let text = file
            .contents_utf8()
            .with_context(|| format!("{} is not UTF-8", file.path().display()))?;
        write(folder, relative, &values.fill(text))?;
    }
    for sub in dir.dirs() {
        write_dir(sub, prefix, folder, values)?;
    }
    Ok(())
}

fn write(folder: &Path, relative: impl AsRef<Path>, text: &str) -> anyhow::Result<()> {
    let path = folder.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_has_a_manifest_naming_its_function() {
        for template in &ALL {
            let manifest = TEMPLATES
                .get_file(format!("{}/workflow.toml", template.name))
                .unwrap_or_else(|| panic!("{} has no workflow.toml", template.name));
            let text = manifest.contents_utf8().unwrap();
            assert!(text.contains("name = \"{{name}}\""), "{}", template.name);
            assert!(text.contains("route = \"/{{name}}\""), "{}", template.name);
        }
        // And no template folder is left out of the list.
        assert_eq!(TEMPLATES.dirs().count(), ALL.len());
    }

    #[test]
    fn the_build_hint_names_a_readme_section_that_exists() {
        let readme = include_str!("../../README.md");
        assert!(
            readme
                .lines()
                .any(|line| line.starts_with("## ") && line.contains(README_LANGUAGES_SECTION)),
            "README.md has no section \"{README_LANGUAGES_SECTION}\""
        );
    }
}
