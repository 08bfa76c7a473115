//! Errors: every problem in a manifest is reported with its place in the file, so the
//! CLI can print it compiler-style and the gateway can return it as JSON.

use std::ops::Range;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Why a workflow manifest could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    /// Only [`Workflow::from_file`](crate::Workflow::from_file) returns this.
    #[error("{}: cannot read workflow manifest: {source}", path.display())]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not a valid workflow: a TOML syntax error, a schema error (unknown or
    /// missing field, wrong type) or a rule violation (bad name, unknown function...).
    #[error(transparent)]
    Invalid(#[from] Diagnostic),
    /// The manifest names a tenant other than the one deploying it (see
    /// [`TenantScope::Own`](crate::TenantScope::Own)): a matter of permission, not of
    /// syntax.
    #[error(transparent)]
    TenantMismatch(Diagnostic),
}

impl ManifestError {
    /// The positioned problem, unless the file could not be read at all.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            ManifestError::Read { .. } => None,
            ManifestError::Invalid(d) | ManifestError::TenantMismatch(d) => Some(d),
        }
    }

    /// The file name used in the message (as given to `parse`, or the path given to
    /// `from_file`).
    pub fn file(&self) -> String {
        match self {
            ManifestError::Read { path, .. } => path.display().to_string(),
            ManifestError::Invalid(d) | ManifestError::TenantMismatch(d) => d.file.clone(),
        }
    }

    /// The 1-based line of the problem; 0 when the file could not be read.
    pub fn line(&self) -> usize {
        self.diagnostic().map_or(0, |d| d.line)
    }

    /// The 1-based column (in characters) of the problem; 0 when the file could not be
    /// read.
    pub fn column(&self) -> usize {
        self.diagnostic().map_or(0, |d| d.column)
    }

    /// The dotted path of the offending field, e.g. `triggers.http[0].function`; empty
    /// when the problem is not about one field (unreadable file, some syntax errors).
    pub fn field(&self) -> &str {
        self.diagnostic().map_or("", |d| d.field.as_str())
    }

    /// What is wrong, without the `file:line:column: field:` prefix.
    pub fn message(&self) -> String {
        match self {
            ManifestError::Read { source, .. } => {
                format!("cannot read workflow manifest: {source}")
            }
            ManifestError::Invalid(d) | ManifestError::TenantMismatch(d) => d.message.clone(),
        }
    }
}

/// One problem at a place in a manifest. Displays as
/// `workflow.toml:9:12: triggers.http[0].function: unknown function ...`.
///
/// Serializable so the gateway can return it as JSON as-is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", self.render())]
pub struct Diagnostic {
    /// The file name given to the parser.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// Dotted path of the offending field (`functions.hello.memory_mb`,
    /// `triggers.http[0].route`); empty if the problem is not about one field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Diagnostic {
    fn render(&self) -> String {
        let Diagnostic {
            file,
            line,
            column,
            field,
            message,
        } = self;
        if field.is_empty() {
            format!("{file}:{line}:{column}: {message}")
        } else {
            format!("{file}:{line}:{column}: {field}: {message}")
        }
    }
}

/// The manifest being parsed: turns byte spans into `Diagnostic`s.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Source<'_> {
    /// A diagnostic pointing at the start of `span`.
    pub fn diagnostic(
        &self,
        span: &Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        let (line, column) = self.line_column(span.start);
        Diagnostic {
            file: self.file.to_owned(),
            line,
            column,
            field: field.into(),
            message: message.into(),
        }
    }

    /// 1-based line and character column of byte `offset`.
    pub fn line_column(&self, offset: usize) -> (usize, usize) {
        // Spans from toml may point one past the end (an unterminated string at EOF) or,
        // in principle, into a multi-byte character: clamp to a char boundary.
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_one_based_lines_and_character_columns() {
        let src = Source {
            file: "w.toml",
            text: "ab\nc\u{e9}d\n",
        };
        assert_eq!(src.line_column(0), (1, 1));
        assert_eq!(src.line_column(1), (1, 2));
        assert_eq!(src.line_column(3), (2, 1));
        // `é` is two bytes but one column.
        assert_eq!(src.line_column(6), (2, 3));
        assert_eq!(src.line_column(100), (3, 1));
    }

    #[test]
    fn diagnostic_without_field_omits_the_field_segment() {
        let d = Diagnostic {
            file: "w.toml".into(),
            line: 2,
            column: 3,
            field: String::new(),
            message: "oops".into(),
        };
        assert_eq!(d.to_string(), "w.toml:2:3: oops");
        let d = Diagnostic {
            field: "name".into(),
            ..d
        };
        assert_eq!(d.to_string(), "w.toml:2:3: name: oops");
    }
}
