//! Errors of the schema compiler.

use std::path::PathBuf;

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
