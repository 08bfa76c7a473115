//! Errors of the schema compiler.

use std::borrow::Cow;
use std::path::PathBuf;

/// The most characters of a token or name an error message quotes. A schema may be a
/// tenant's upload, parsed by the gateway at deploy: a message quoting a megabyte-long
/// token whole would be a megabyte, and copied wherever the error is reported.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `text` as an error message quotes it: whole up to [`MAX_QUOTED_CHARS`] characters,
/// else its first [`MAX_QUOTED_CHARS`] followed by `…` (cut at a character boundary).
pub fn shorten(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
    }
}

/// A position in a schema file (1-based line and column, columns counted in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Span {
    /// Line number, starting at 1.
    pub line: u32,
    /// Column number, starting at 1.
    pub column: u32,
}

/// A syntax or semantic error in a schema, located at file, line and column.
///
/// Displays as `file.km:LINE:COL: message`, the format editors and terminals link to.
/// The tokens and names the message quotes are cut after [`MAX_QUOTED_CHARS`]
/// characters, so it stays short however long they are in the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct SchemaError {
    /// File name as given to the parser.
    pub file: String,
    /// Line number, starting at 1.
    pub line: u32,
    /// Column number, starting at 1.
    pub column: u32,
    /// What is wrong.
    pub message: String,
}

impl SchemaError {
    /// An error at `span` of `file`.
    pub fn new(file: &str, span: Span, message: impl Into<String>) -> Self {
        SchemaError {
            file: file.to_string(),
            line: span.line,
            column: span.column,
            message: message.into(),
        }
    }
}

/// Errors of [`crate::parse_file`] and of the build-script helpers.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The schema file could not be read or the output could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The schema is invalid.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A required environment variable (such as `OUT_DIR`) is missing.
    #[error("environment variable {0} is not set (is this running from a build script?)")]
    MissingEnv(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_quoted_whole_and_long_text_is_cut_at_a_character() {
        let exact = "a".repeat(MAX_QUOTED_CHARS);
        assert_eq!(shorten(&exact), exact);
        assert!(matches!(shorten(&exact), Cow::Borrowed(_)));
        // Multi-byte characters: the cut counts characters and never splits one.
        let long = "é".repeat(MAX_QUOTED_CHARS + 1);
        assert_eq!(shorten(&long), format!("{}…", "é".repeat(MAX_QUOTED_CHARS)));
    }
}
