//! Loading of the compatibility vectors (`out/*.json` with their `.bin` files).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One reader expectation of a vector.
#[derive(Debug, Clone)]
pub struct Reader {
    /// Schema file relative to the vectors directory (`schemas/x.km`).
    pub schema: String,
    /// Type name, possibly qualified with the package (`pkg.Type`).
    pub ty: String,
    /// Value a correct reader decodes.
    pub expected: Value,
}

/// One vector.
#[derive(Debug, Clone)]
pub struct Vector {
    /// Vector name.
    pub name: String,
    /// The message.
    pub bytes: Vec<u8>,
    /// Schema and type that wrote the message, if given.
    pub writer: Option<(String, String)>,
    /// Whether encoding `input` with the writer's schema must give exactly `bytes`.
    pub roundtrip: bool,
    /// Value given to the writer.
    pub input: Option<Value>,
    /// Reader expectations.
    pub readers: Vec<Reader>,
}

/// Strips the package qualifier of `pkg.Type`.
pub fn plain_type(ty: &str) -> &str {
    ty.rsplit_once('.').map_or(ty, |(_, t)| t)
}

/// The vectors directory (resolved at build time from `KARMEM_VECTORS_DIR` or the default
/// `<workspace>/../shared/karmem-vectors`). Panics with a clear message when missing.
pub fn dir() -> PathBuf {
    let d = PathBuf::from(crate::VECTORS_DIR);
    assert!(
        crate::VECTORS_DIR_EXISTS && d.is_dir(),
        "Karmem vectors directory {} is missing: set KARMEM_VECTORS_DIR or provide ../shared/karmem-vectors",
        d.display()
    );
    d
}

fn hex_decode(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn load(path: &Path) -> Vector {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = v["name"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| path.file_stem().unwrap().to_string_lossy().into());
    let from_hex = v["hex"].as_str().map(hex_decode);
    let from_bin = v["bin"].as_str().map(|b| {
        let p = path.with_file_name(b);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    });
    let bytes = match (from_bin, from_hex) {
        (Some(b), Some(h)) => {
            assert_eq!(b, h, "{name}: .bin and hex disagree");
            b
        }
        (Some(b), None) | (None, Some(b)) => b,
        (None, None) => panic!("{name}: no bin or hex"),
    };
    let writer = match (v["writer_schema"].as_str(), v["writer_type"].as_str()) {
        (Some(s), Some(t)) => Some((s.to_string(), t.to_string())),
        _ => None,
    };
    let readers = v["readers"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| Reader {
                    schema: r["schema"].as_str().expect("reader schema").to_string(),
                    ty: r["type"].as_str().expect("reader type").to_string(),
                    expected: r["expected"].clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Vector {
        name,
        bytes,
        writer,
        roundtrip: v["roundtrip"].as_bool().unwrap_or(false),
        input: v.get("input").cloned(),
        readers,
    }
}

/// Every vector in `<dir>/out/*.json`, sorted by file name. Panics when there are none.
pub fn load_all() -> Vec<Vector> {
    let out = dir().join("out");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap_or_else(|e| panic!("{}: {e}", out.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no vectors in {}", out.display());
    paths.iter().map(|p| load(p)).collect()
}
