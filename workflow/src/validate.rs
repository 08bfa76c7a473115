//! From text to a validated [`Workflow`]: TOML syntax, then schema (serde), then the
//! rules serde cannot express (names, ranges, references between triggers and
//! functions).

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use serde_spanned::Spanned;
use toml::de::DeTable;

use crate::error::{Diagnostic, Source};
use crate::locate::{self, Segment};
use crate::model::{Function, FunctionKind, HttpTrigger, Limits, Workflow};
use crate::raw::{RawFunction, RawWorkflow};
use crate::route::Route;

/// The longest workflow, tenant or function name: one DNS label, since names end up in
/// hostnames and resource names.
pub const MAX_NAME_LEN: usize = 63;

/// Whether `name` is a valid workflow, tenant or function name: 1 to 63 characters from
/// `a-z`, `0-9` and `-`, starting with a letter.
pub fn is_valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

pub(crate) fn parse(source: Source<'_>) -> Result<Workflow, Diagnostic> {
    // `parse_recoverable` rather than `parse`: the partial tree lets a syntax error name
    // the field it is in.
    let (tree, syntax_errors) = DeTable::parse_recoverable(source.text);
    if let Some(error) = syntax_errors
        .iter()
        .min_by_key(|e| e.span().map_or(0, |s| s.start))
    {
        let span = error.span().unwrap_or(0..0);
        let field = locate::render(&locate::field_at(&tree, &span));
        let mut message = format!("TOML syntax error: {}", error.message());
        // toml points at the repeated key but does not name it.
        if error.message() == "duplicate key"
            && let Some(key) = source.text.get(span.clone())
        {
            message = format!("{message} `{key}`");
        }
        return Err(source.diagnostic(&span, field, message));
    }

    // The tree is consumed by deserialization; only clone it (by re-parsing) on error.
    let raw = RawWorkflow::deserialize(toml::de::Deserializer::from(tree))
        .map_err(|error| schema_error(source, &error))?;
    Checker::new(source).check(raw)
}

/// Turns a serde error (unknown/missing field, wrong type) into a diagnostic.
fn schema_error(source: Source<'_>, error: &toml::de::Error) -> Diagnostic {
    // No span means the error is about the document as a whole.
    let span = error.span().unwrap_or(0..0);
    let (tree, _) = DeTable::parse_recoverable(source.text);
    let mut path = locate::field_at(&tree, &span);
    // A missing field's span is its would-be parent table; name the field itself.
    if let Some(missing) = error
        .message()
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        path.push(Segment::Key(missing.to_owned()));
    }
    source.diagnostic(&span, locate::render(&path), error.message())
}

/// Applies the rules serde cannot, collecting every violation and reporting the one
/// earliest in the file, so the user fixes the file top to bottom (the stray-function
/// check excepted, see `check`).
struct Checker<'a> {
    source: Source<'a>,
    errors: Vec<(usize, Diagnostic)>,
}

impl<'a> Checker<'a> {
    fn new(source: Source<'a>) -> Self {
        Checker {
            source,
            errors: Vec::new(),
        }
    }

    fn error(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let diagnostic = self.source.diagnostic(&span, field, message);
        self.errors.push((span.start, diagnostic));
    }

    fn check(mut self, raw: RawWorkflow) -> Result<Workflow, Diagnostic> {
        self.name("name", &raw.name);
        self.name("tenant", &raw.tenant);

        let functions = self.functions(raw.functions);
        let http_triggers = self.http_triggers(&functions, raw.triggers.map(|t| t.http));

        // A function no trigger can reach is dead weight, and usually the other half of a
        // typo in a trigger; so it is only reported once everything else is right, where
        // the typo itself would have been reported instead. Only `http` functions are
        // checked: `step` functions are invoked by the workflow engine, and v1 has no
        // trigger that could name them.
        if self.errors.is_empty() {
            for (name, (span, function)) in &functions {
                let used = http_triggers.iter().any(|t| t.function == *name);
                if function.kind == FunctionKind::Http && !used {
                    self.error(
                        span.clone(),
                        function_field(name),
                        format!("function `{name}` is not used by any trigger"),
                    );
                }
            }
        }

        if let Some((_, first)) = self.errors.into_iter().min_by_key(|(offset, _)| *offset) {
            return Err(first);
        }
        Ok(Workflow {
            name: raw.name.into_inner(),
            tenant: raw.tenant.into_inner(),
            description: raw.description,
            functions: functions
                .into_iter()
                .map(|(name, (_, function))| (name, function))
                .collect(),
            http_triggers,
        })
    }

    fn name(&mut self, field: &str, name: &Spanned<String>) {
        if !is_valid_name(name.get_ref()) {
            self.error(name.span(), field, invalid_name(name.get_ref()));
        }
    }

    /// Checks each function; returns them with the span of their name.
    fn functions(
        &mut self,
        raw: Option<Spanned<BTreeMap<Spanned<String>, RawFunction>>>,
    ) -> BTreeMap<String, (Range<usize>, Function)> {
        let (span, raw) = match raw {
            Some(raw) => (raw.span(), raw.into_inner()),
            None => (0..0, BTreeMap::new()),
        };
        if raw.is_empty() {
            self.error(
                span,
                "functions",
                "at least one function is required, e.g. `[functions.hello]`",
            );
        }
        let mut functions = BTreeMap::new();
        for (name, raw) in raw {
            let name_span = name.span();
            let name = name.into_inner();
            let field = function_field(&name);
            if !is_valid_name(&name) {
                self.error(name_span.clone(), field.clone(), invalid_name(&name));
            }
            let function = self.function(&field, raw);
            functions.insert(name, (name_span, function));
        }
        functions
    }

    fn function(&mut self, field: &str, raw: RawFunction) -> Function {
        if raw.component.get_ref().trim().is_empty() {
            self.error(
                raw.component.span(),
                format!("{field}.component"),
                "must not be empty",
            );
        }
        if let Some(build) = &raw.build
            && build.get_ref().trim().is_empty()
        {
            self.error(
                build.span(),
                format!("{field}.build"),
                "must not be empty; omit `build` if there is nothing to build",
            );
        }
        if let Some(memory) = &raw.memory_mb {
            self.in_range(field, "memory_mb", memory, Limits::MEMORY_MB);
        }
        if let Some(timeout) = &raw.timeout_ms {
            self.in_range(field, "timeout_ms", timeout, Limits::TIMEOUT_MS);
        }
        if let Some(fuel) = raw.fuel.as_ref().filter(|fuel| *fuel.get_ref() == 0) {
            self.error(
                fuel.span(),
                format!("{field}.fuel"),
                "must be greater than 0; omit `fuel` for the platform default",
            );
        }
        Function {
            component: PathBuf::from(raw.component.into_inner()),
            build: raw.build.map(Spanned::into_inner),
            kind: raw.kind.unwrap_or_default(),
            limits: Limits {
                memory_mb: raw.memory_mb.map(Spanned::into_inner),
                timeout_ms: raw.timeout_ms.map(Spanned::into_inner),
                fuel: raw.fuel.map(Spanned::into_inner),
            },
            config: raw.config,
        }
    }

    fn in_range<T>(
        &mut self,
        function_field: &str,
        key: &str,
        value: &Spanned<T>,
        range: std::ops::RangeInclusive<T>,
    ) where
        T: PartialOrd + std::fmt::Display,
    {
        if !range.contains(value.get_ref()) {
            self.error(
                value.span(),
                format!("{function_field}.{key}"),
                format!(
                    "{} is out of range: must be between {} and {}",
                    value.get_ref(),
                    range.start(),
                    range.end()
                ),
            );
        }
    }

    /// Checks each HTTP trigger; returns those with a valid route.
    fn http_triggers(
        &mut self,
        functions: &BTreeMap<String, (Range<usize>, Function)>,
        raw: Option<Vec<crate::raw::RawHttpTrigger>>,
    ) -> Vec<HttpTrigger> {
        let mut triggers = Vec::new();
        // Route -> line of its first definition, for the duplicate message.
        let mut seen: HashMap<Route, usize> = HashMap::new();
        for (i, raw) in raw.unwrap_or_default().into_iter().enumerate() {
            let field = format!("triggers.http[{i}]");
            let route_span = raw.route.span();
            let route = match Route::parse(raw.route.get_ref()) {
                Ok(route) => Some(route),
                Err(e) => {
                    self.error(route_span.clone(), format!("{field}.route"), e.to_string());
                    None
                }
            };
            if let Some(route) = &route {
                if let Some(first) = seen.get(route) {
                    self.error(
                        route_span.clone(),
                        format!("{field}.route"),
                        format!("duplicate route `{route}` (first defined on line {first})"),
                    );
                } else {
                    let line = self.source.line_column(route_span.start).0;
                    seen.insert(route.clone(), line);
                }
            }

            let name = raw.function.get_ref();
            match functions.get(name) {
                None => {
                    let defined: Vec<&str> = functions.keys().map(String::as_str).collect();
                    let defined = if defined.is_empty() {
                        "none".to_owned()
                    } else {
                        defined.join(", ")
                    };
                    self.error(
                        raw.function.span(),
                        format!("{field}.function"),
                        format!("unknown function `{name}` (defined: {defined})"),
                    );
                }
                Some((_, function)) if function.kind != FunctionKind::Http => {
                    self.error(
                        raw.function.span(),
                        format!("{field}.function"),
                        format!(
                            "function `{name}` has kind `{}`, but HTTP triggers need kind `http`",
                            function.kind.as_str()
                        ),
                    );
                }
                Some(_) => {}
            }

            if let Some(route) = route {
                triggers.push(HttpTrigger {
                    route,
                    function: raw.function.into_inner(),
                });
            }
        }
        triggers
    }
}

fn function_field(name: &str) -> String {
    locate::render(&[
        Segment::Key("functions".to_owned()),
        Segment::Key(name.to_owned()),
    ])
}

fn invalid_name(name: &str) -> String {
    format!(
        "invalid name {name:?}: use 1 to {MAX_NAME_LEN} characters from a-z, 0-9 and `-`, \
         starting with a letter"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_alphanumerics_and_hyphens_starting_with_a_letter() {
        for good in ["a", "hello", "hello-world-2", &"a".repeat(63)] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "",
            "Hello",
            "2fast",
            "-a",
            "a_b",
            "a.b",
            "héllo",
            &"a".repeat(64),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
