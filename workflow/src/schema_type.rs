//! The types of the regions that flow between steps: `bytes`, `text`, `json`, or a
//! Karmem schema type `file.km:TypeName`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The longest type text accepted, in bytes: far more than a schema file's path and a
/// type name need. The worker refuses a region whose type is longer (a guest chooses
/// it, and the host keeps it).
pub const MAX_SCHEMA_TYPE_LEN: usize = 512;

/// What a step takes, returns, or an edge carries, as written in `workflow.toml`
/// (`input = "bytes"`, `type = "wordcount.km:Chunk"`).
///
/// Displays and serializes as that text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SchemaType {
    /// `bytes`: uninterpreted bytes.
    Bytes,
    /// `text`: UTF-8 text.
    Text,
    /// `json`: a JSON document.
    Json,
    /// `file.km:TypeName`: a struct of a Karmem schema.
    Karmem {
        /// The schema file, a relative path ending in `.km`, exactly as written
        /// (relative to the directory holding the `workflow.toml`; not resolved).
        file: String,
        /// The type's name in that file, an identifier (`[A-Za-z_][A-Za-z0-9_]*`).
        name: String,
    },
}

/// Why a string is not a valid [`SchemaType`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaTypeError {
    /// Longer than [`MAX_SCHEMA_TYPE_LEN`] bytes.
    #[error("a type of {0} bytes is longer than the {MAX_SCHEMA_TYPE_LEN} allowed")]
    TooLong(usize),
    /// Neither a built-in type nor of the form `file.km:TypeName`.
    #[error(
        "unknown type `{0}`: use `bytes`, `text`, `json` or a Karmem type such as `schema.km:TypeName`"
    )]
    Unknown(String),
    /// The part before `:` is not a relative path ending in `.km`.
    #[error("type `{0}`: the schema file must be a relative path ending in `.km`")]
    BadFile(String),
    /// The part after `:` is not an identifier.
    #[error(
        "type `{ty}`: `{name}` is not a type name: use letters, digits and `_`, not starting with a digit"
    )]
    BadName {
        /// The rejected type.
        ty: String,
        /// Its type-name part.
        name: String,
    },
}

impl SchemaType {
    /// Parses `bytes`, `text`, `json` or `file.km:TypeName`.
    pub fn parse(text: &str) -> Result<SchemaType, SchemaTypeError> {
        match text {
            "bytes" => return Ok(SchemaType::Bytes),
            "text" => return Ok(SchemaType::Text),
            "json" => return Ok(SchemaType::Json),
            _ => {}
        }
        if text.len() > MAX_SCHEMA_TYPE_LEN {
            return Err(SchemaTypeError::TooLong(text.len()));
        }
        let Some((file, name)) = text.split_once(':') else {
            return Err(SchemaTypeError::Unknown(text.to_owned()));
        };
        if !is_schema_file(file) {
            return Err(SchemaTypeError::BadFile(text.to_owned()));
        }
        if !is_identifier(name) {
            return Err(SchemaTypeError::BadName {
                ty: text.to_owned(),
                name: name.to_owned(),
            });
        }
        Ok(SchemaType::Karmem {
            file: file.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Whether this is one of the built-in types `bytes`, `text` and `json` (which an
    /// HTTP request body can be), as opposed to a Karmem type.
    pub fn is_builtin(&self) -> bool {
        !matches!(self, SchemaType::Karmem { .. })
    }

    /// The schema file of a Karmem type; `None` for built-in types.
    pub fn karmem_file(&self) -> Option<&str> {
        match self {
            SchemaType::Karmem { file, .. } => Some(file),
            _ => None,
        }
    }
}

/// Whether `file` is a relative path ending in `.km`, without whitespace or control
/// characters.
pub(crate) fn is_schema_file(file: &str) -> bool {
    let file_name = file.rsplit(['/', '\\']).next().unwrap_or(file);
    file_name.len() > ".km".len()
        && file_name.ends_with(".km")
        && !file.starts_with(['/', '\\'])
        && !file.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Whether `name` is a Karmem identifier: letters, digits and `_`, not starting with a
/// digit.
pub(crate) fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaType::Bytes => f.write_str("bytes"),
            SchemaType::Text => f.write_str("text"),
            SchemaType::Json => f.write_str("json"),
            SchemaType::Karmem { file, name } => write!(f, "{file}:{name}"),
        }
    }
}

impl FromStr for SchemaType {
    type Err = SchemaTypeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchemaType::parse(s)
    }
}

impl TryFrom<String> for SchemaType {
    type Error = SchemaTypeError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        SchemaType::parse(&s)
    }
}

impl From<SchemaType> for String {
    fn from(ty: SchemaType) -> String {
        ty.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn karmem(file: &str, name: &str) -> SchemaType {
        SchemaType::Karmem {
            file: file.into(),
            name: name.into(),
        }
    }

    #[test]
    fn builtin_types_parse_by_name() {
        assert_eq!(SchemaType::parse("bytes"), Ok(SchemaType::Bytes));
        assert_eq!(SchemaType::parse("text"), Ok(SchemaType::Text));
        assert_eq!(SchemaType::parse("json"), Ok(SchemaType::Json));
    }

    #[test]
    fn karmem_types_split_into_file_and_type_name() {
        assert_eq!(
            SchemaType::parse("wordcount.km:Chunk"),
            Ok(karmem("wordcount.km", "Chunk"))
        );
        assert_eq!(
            SchemaType::parse("../schemas/shared.km:_Point2d"),
            Ok(karmem("../schemas/shared.km", "_Point2d"))
        );
    }

    #[test]
    fn every_type_displays_and_serializes_as_written() {
        for text in ["bytes", "text", "json", "a/b.km:Counts"] {
            let ty = SchemaType::parse(text).unwrap();
            assert_eq!(ty.to_string(), text);
            assert_eq!(serde_json::to_value(&ty).unwrap(), text);
            let back: SchemaType = serde_json::from_value(text.into()).unwrap();
            assert_eq!(back, ty);
        }
    }

    #[test]
    fn names_that_are_neither_builtin_nor_karmem_are_unknown() {
        for bad in ["", "Bytes", "string", "wordcount.km"] {
            assert_eq!(
                SchemaType::parse(bad),
                Err(SchemaTypeError::Unknown(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn schema_files_must_be_relative_km_paths() {
        for bad in [
            "wordcount.rs:Chunk",
            ":Chunk",
            ".km:Chunk",
            "dir/.km:Chunk",
            "/abs/wc.km:Chunk",
            "my file.km:Chunk",
        ] {
            assert_eq!(
                SchemaType::parse(bad),
                Err(SchemaTypeError::BadFile(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_type_longer_than_the_limit_is_refused() {
        let name = "T".repeat(MAX_SCHEMA_TYPE_LEN - "s.km:".len());
        assert!(SchemaType::parse(&format!("s.km:{name}")).is_ok());
        let long = format!("s.km:{name}U");
        assert_eq!(
            SchemaType::parse(&long),
            Err(SchemaTypeError::TooLong(MAX_SCHEMA_TYPE_LEN + 1))
        );
    }

    #[test]
    fn type_names_must_be_identifiers() {
        for bad in ["wc.km:", "wc.km:9Lives", "wc.km:Chunk-2", "wc.km:a:b"] {
            assert!(
                matches!(SchemaType::parse(bad), Err(SchemaTypeError::BadName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_karmem_types_name_a_schema_file() {
        assert!(SchemaType::Json.is_builtin());
        assert_eq!(SchemaType::Json.karmem_file(), None);
        let ty = karmem("wc.km", "Chunk");
        assert!(!ty.is_builtin());
        assert_eq!(ty.karmem_file(), Some("wc.km"));
    }

    #[test]
    fn deserializing_an_invalid_type_fails() {
        assert!(serde_json::from_str::<SchemaType>(r#""wc.km""#).is_err());
    }
}
