//! Finding which field a toml error is about.
//!
//! toml's errors carry a byte span but not a usable field path (its key list skips array
//! indices and the key that was rejected), so we find the path by searching the
//! document's spanned tree for the node the span points at.

use std::fmt::Write as _;
use std::ops::Range;

use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// Renders a path as `functions.hello.memory_mb` or `triggers.http[0].route`; keys that
/// are not bare TOML keys are quoted, as they would be written in the file.
pub(crate) fn render(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                // A key is the tenant's to name, at any length; the line and column
                // locate it.
                let key = faas_karmem_compiler::shorten(key);
                let bare = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                if bare {
                    out.push_str(&key);
                } else {
                    let _ = write!(out, "{key:?}");
                }
            }
        }
    }
    out
}

/// The path of the field `span` points at in `root`.
///
/// A span that is exactly a key's or value's span names that field (unknown fields point
/// at the key, type errors at the value, missing fields at the enclosing table). Failing
/// that, the deepest value containing or ending at the span's start is used (syntax
/// errors inside or just after a value). Among equal candidates the deepest wins: an implicit parent table such as
/// `functions` in `[functions.hello]` shares its span with its key.
pub(crate) fn field_at(root: &Spanned<DeTable<'_>>, span: &Range<usize>) -> Vec<Segment> {
    let mut best = Best::default();
    if root.span() == *span {
        best.offer(true, &[]);
    }
    walk_table(root.get_ref(), span, &mut Vec::new(), &mut best);
    best.path
}

/// The best candidate found so far, ranked by (exact span match, depth).
#[derive(Default)]
struct Best {
    rank: Option<(bool, usize)>,
    path: Vec<Segment>,
}

impl Best {
    fn offer(&mut self, exact: bool, path: &[Segment]) {
        let rank = (exact, path.len());
        if self.rank.is_none_or(|best| rank > best) {
            self.rank = Some(rank);
            self.path = path.to_vec();
        }
    }
}

fn walk_table(table: &DeTable<'_>, span: &Range<usize>, path: &mut Vec<Segment>, best: &mut Best) {
    for (key, value) in table.iter() {
        path.push(Segment::Key(key.get_ref().to_string()));
        if key.span() == *span {
            best.offer(true, path);
        }
        walk_value(value, span, path, best);
        path.pop();
    }
}

fn walk_value(
    value: &Spanned<DeValue<'_>>,
    span: &Range<usize>,
    path: &mut Vec<Segment>,
    best: &mut Best,
) {
    let own = value.span();
    if own == *span {
        best.offer(true, path);
    } else if own.start <= span.start && span.start <= own.end {
        // Inclusive end: a syntax error right after a value (an unterminated string at
        // the end of its line) is about that value.
        best.offer(false, path);
    }
    match value.get_ref() {
        DeValue::Table(table) => walk_table(table, span, path, best),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                walk_value(item, span, path, best);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_are_not_bare_are_quoted() {
        let path = [
            Segment::Key("functions".into()),
            Segment::Key("my fn".into()),
            Segment::Key("config".into()),
        ];
        assert_eq!(render(&path), r#"functions."my fn".config"#);
    }

    #[test]
    fn array_indices_attach_to_the_previous_key() {
        let path = [
            Segment::Key("triggers".into()),
            Segment::Key("http".into()),
            Segment::Index(2),
            Segment::Key("route".into()),
        ];
        assert_eq!(render(&path), "triggers.http[2].route");
    }
}
