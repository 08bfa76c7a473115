//! From text to a validated [`Workflow`]: TOML syntax, then schema (serde), then the
//! rules serde cannot express (names, ranges, references between triggers, steps and
//! functions, the shape of the step graph).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::{Range, RangeInclusive};
use std::path::PathBuf;

use serde::Deserialize;
use serde_spanned::Spanned;
use toml::de::DeTable;

use crate::error::{Diagnostic, ManifestError, Source};
use crate::locate::{self, Segment};
use crate::memory::{self, InterfaceRef, MAX_LISTED_NAMES};
use crate::model::{
    Edge, EdgeMode, FanOut, Function, FunctionKind, HttpTrigger, JoinPolicy, Limits, Provenance,
    RedisTrigger, RetryPolicy, RunSettings, Step, StreamTrigger, TenantScope, TriggerTarget,
    Workflow,
};
use crate::outbound::{AllowedOutboundHosts, OutboundHost};
use crate::raw::{
    RawEdge, RawFanOut, RawFunction, RawHttpTrigger, RawJoin, RawRedisTrigger, RawSettings,
    RawStep, RawStreamTrigger, RawWorkflow,
};
use crate::route::Route;
use crate::schema_type::SchemaType;
use faas_karmem_compiler::shorten;

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

/// The longest Redis channel, stream or consumer group name accepted in a trigger, in
/// characters.
pub const MAX_REDIS_NAME_LEN: usize = 256;

/// Whether `name` is a valid Redis channel, stream or consumer group name for a trigger:
/// 1 to 256 characters, none of them whitespace or control characters.
pub fn is_valid_redis_name(name: &str) -> bool {
    let mut len = 0;
    for c in name.chars() {
        if c.is_whitespace() || c.is_control() {
            return false;
        }
        len += 1;
    }
    (1..=MAX_REDIS_NAME_LEN).contains(&len)
}

// The most items of each kind one workflow may declare: several times what a workflow
// written by hand has, and few enough that what the platform does per item stays small
// for every tenant (a route in every gateway's table and in the conflict check of every
// later deploy, a consumer and a Redis lease per message trigger, a compile per
// function).

/// The most `[functions.<name>]` tables one workflow may declare.
pub const MAX_FUNCTIONS: usize = 128;
/// The most `[steps.<name>]` tables one workflow may declare.
pub const MAX_STEPS: usize = 128;
/// The most `[[edges]]` one workflow may declare.
pub const MAX_EDGES: usize = 512;
/// The most `[[triggers.http]]` one workflow may declare; a prefix route (`/api/...`)
/// serves any number of paths.
pub const MAX_HTTP_TRIGGERS: usize = 128;
/// The most `[[triggers.redis]]` one workflow may declare.
pub const MAX_REDIS_TRIGGERS: usize = 32;
/// The most `[[triggers.stream]]` one workflow may declare.
pub const MAX_STREAM_TRIGGERS: usize = 32;

/// Parses and validates `source` for `scope`; with `schemas` (`.km` texts by file name
/// as written), also resolves the steps' interface memories. `provenance` says whether
/// limits added since the manifest may have been accepted apply.
pub(crate) fn parse(
    source: Source<'_>,
    schemas: Option<&BTreeMap<String, String>>,
    scope: TenantScope<'_>,
    provenance: Provenance,
) -> Result<Workflow, ManifestError> {
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
        return Err(source.diagnostic(&span, field, message).into());
    }

    // The tree is consumed by deserialization; only clone it (by re-parsing) on error.
    let raw = RawWorkflow::deserialize(toml::de::Deserializer::from(tree))
        .map_err(|error| schema_error(source, &error))?;
    let tenant = tenant(source, raw.tenant.as_ref(), scope)?;
    Ok(Checker::new(source, provenance).check(raw, tenant, schemas)?)
}

/// The tenant the manifest is deployed for under `scope`. A tenant named for another
/// tenant's token is refused before anything else is looked at.
fn tenant(
    source: Source<'_>,
    written: Option<&Spanned<String>>,
    scope: TenantScope<'_>,
) -> Result<String, ManifestError> {
    match (written, scope) {
        (Some(written), TenantScope::Own(own)) if written.get_ref() != own => {
            Err(ManifestError::TenantMismatch(source.diagnostic(
                &written.span(),
                "tenant",
                format!(
                    "tenant `{}` is not this token's tenant `{own}`",
                    written.get_ref()
                ),
            )))
        }
        (Some(written), _) => Ok(written.get_ref().clone()),
        (None, TenantScope::Own(own) | TenantScope::Unchecked(own)) => Ok(own.to_owned()),
        (None, TenantScope::Named) => Err(source
            .diagnostic(
                &(0..0),
                "tenant",
                "missing field `tenant`: a deploy with the admin credential must name the \
                 tenant it is for (a tenant token's deploy may leave it out)",
            )
            .into()),
    }
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
/// earliest in the file, so the user fixes the file top to bottom. Rules about the
/// workflow as a whole (the shape of the step graph, unused functions) are only checked
/// once everything else is right, see `check`.
struct Checker<'a> {
    source: Source<'a>,
    /// The error found earliest in the file so far (the one reported), as its span's
    /// start, field and message: made a [`Diagnostic`] once, at the end, since finding
    /// a line and column takes a pass over the text before it.
    first_error: Option<(usize, String, String)>,
    /// Where each line after the first starts, for [`Checker::line_of`].
    line_starts: Vec<usize>,
    provenance: Provenance,
}

/// A step as checked so far; its types are `None` if they did not parse.
struct CheckedStep {
    /// Where its name is written.
    span: Range<usize>,
    function: String,
    input: Option<SchemaType>,
    input_span: Range<usize>,
    output: Option<SchemaType>,
    retry: RetryPolicy,
    /// `interface`, if given and well-formed, with the span of its value.
    interface: Option<(InterfaceRef, Range<usize>)>,
}

/// An edge as checked so far; `schema_type` is `None` if it did not parse.
struct CheckedEdge {
    /// The whole `[[edges]]` table.
    span: Range<usize>,
    from: String,
    to: String,
    schema_type: Option<SchemaType>,
    mode: EdgeMode,
    /// `fan_out` or `join`, whichever is set.
    mode_span: Range<usize>,
}

/// A trigger's `step`, kept for the entry-step check.
struct StepTrigger {
    /// The trigger's table under `[triggers]`: `http`, `redis` or `stream`.
    table: &'static str,
    index: usize,
    span: Range<usize>,
    step: String,
}

impl<'a> Checker<'a> {
    fn new(source: Source<'a>, provenance: Provenance) -> Self {
        let line_starts = source
            .text
            .match_indices('\n')
            .map(|(at, _)| at + 1)
            .collect();
        Checker {
            source,
            first_error: None,
            line_starts,
            provenance,
        }
    }

    /// Records an error at `span`; the one earliest in the file is reported.
    fn error(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        if self
            .first_error
            .as_ref()
            .is_none_or(|(first, _, _)| span.start < *first)
        {
            self.first_error = Some((span.start, field.into(), message.into()));
        }
    }

    /// Whether an error was found.
    fn failed(&self) -> bool {
        self.first_error.is_some()
    }

    /// The 1-based line of byte `offset`, without a pass over the text before it: a
    /// manifest of tens of thousands of triggers asks for each one's.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    fn check(
        mut self,
        raw: RawWorkflow,
        tenant: String,
        schemas: Option<&BTreeMap<String, String>>,
    ) -> Result<Workflow, Diagnostic> {
        self.name("name", &raw.name);
        if let Some(written) = &raw.tenant {
            self.name("tenant", written);
        }

        if let Some(functions) = &raw.functions {
            self.at_most_keys("functions", functions.get_ref(), MAX_FUNCTIONS);
        }
        if let Some(steps) = &raw.steps {
            self.at_most_keys("steps", steps, MAX_STEPS);
        }
        let triggers = raw.triggers.unwrap_or_default();
        self.at_most("edges", &raw.edges, MAX_EDGES);
        self.at_most("triggers.http", &triggers.http, MAX_HTTP_TRIGGERS);
        self.at_most("triggers.redis", &triggers.redis, MAX_REDIS_TRIGGERS);
        self.at_most("triggers.stream", &triggers.stream, MAX_STREAM_TRIGGERS);

        let functions = self.functions(raw.functions);
        let steps = self.steps(&functions, raw.steps.unwrap_or_default());
        let edges = self.edges(&steps, raw.edges);
        let settings = self.settings(raw.workflow);
        let (http_triggers, mut step_triggers) =
            self.http_triggers(&functions, &steps, triggers.http);
        let redis_triggers = self.redis_triggers(&steps, triggers.redis, &mut step_triggers);
        let stream_triggers = self.stream_triggers(
            raw.name.get_ref(),
            &steps,
            triggers.stream,
            &mut step_triggers,
        );

        // The shape of the step graph is only judged once every edge is known to connect
        // two distinct, existing steps with at most one edge in and out of each: a typo
        // in an edge would otherwise also show up as an unreachable step, earlier in the
        // file than the typo itself.
        if !self.failed() {
            self.graph(&steps, &edges, &step_triggers);
        }

        // A function nothing uses is dead weight, and usually the other half of a typo in
        // a trigger or step; so it is only reported once everything else is right, where
        // the typo itself would have been reported instead. A v1 manifest has no steps
        // and may declare `step` functions for later, so those are only checked when
        // there are steps.
        if !self.failed() {
            for (name, (span, function)) in &functions {
                let unused_by = match function.kind {
                    FunctionKind::Http => http_triggers
                        .iter()
                        .all(|t| !matches!(&t.target, TriggerTarget::Function(f) if f == name))
                        .then_some("trigger"),
                    FunctionKind::Step => (!steps.is_empty()
                        && steps.values().all(|step| step.function != *name))
                    .then_some("step"),
                };
                if let Some(user) = unused_by {
                    self.error(
                        span.clone(),
                        function_field(name),
                        format!("function `{name}` is not used by any {user}"),
                    );
                }
            }
        }

        if let Some((offset, field, message)) = self.first_error.take() {
            return Err(self.source.diagnostic(&(offset..offset), field, message));
        }
        // No errors: every type parsed.
        let interface_spans: HashMap<String, Range<usize>> = steps
            .iter()
            .filter_map(|(name, step)| Some((name.clone(), step.interface.as_ref()?.1.clone())))
            .collect();
        let steps = steps
            .into_iter()
            .filter_map(|(name, step)| {
                let step = Step {
                    function: step.function,
                    input: step.input?,
                    output: step.output?,
                    retry: step.retry,
                    interface: step.interface.map(|(reference, _)| reference),
                    memories: Default::default(),
                };
                Some((name, step))
            })
            .collect();
        let edges = edges
            .into_iter()
            .filter_map(|edge| {
                Some(Edge {
                    from: edge.from,
                    to: edge.to,
                    schema_type: edge.schema_type?,
                    mode: edge.mode,
                })
            })
            .collect();
        let mut workflow = Workflow {
            name: raw.name.into_inner(),
            tenant,
            description: raw.description,
            functions: functions
                .into_iter()
                .map(|(name, (_, function))| (name, function))
                .collect(),
            steps,
            edges,
            settings,
            http_triggers,
            redis_triggers,
            stream_triggers,
        };
        // Memories are resolved last: they need the whole, valid step graph.
        if let Some(schemas) = schemas
            && let Err(errors) = memory::resolve(&mut workflow, schemas)
        {
            // The first in the file, like every other problem; only it is formatted, as
            // up to one problem per step may come.
            let first = errors
                .into_iter()
                .map(|error| {
                    let span = interface_spans.get(&error.step).cloned().unwrap_or(0..0);
                    (span, error)
                })
                .min_by_key(|(span, _)| span.start);
            if let Some((span, error)) = first {
                let field = format!("{}.interface", step_field(&error.step));
                let message = error.problem.to_string();
                return Err(self.source.diagnostic(&span, field, message));
            }
        }
        Ok(workflow)
    }

    /// Reports the first of the array `field`'s items past `max`, at its place.
    fn at_most<T>(&mut self, field: &str, items: &[Spanned<T>], max: usize) {
        if let Some(first_past) = items.get(max) {
            self.error(
                first_past.span(),
                format!("{field}[{max}]"),
                too_many(field, items.len(), max),
            );
        }
    }

    /// Reports the first of the table `field`'s entries past `max`, in the order they
    /// are written, at its name.
    fn at_most_keys<V>(&mut self, field: &str, table: &BTreeMap<Spanned<String>, V>, max: usize) {
        if table.len() <= max {
            return;
        }
        let mut names: Vec<&Spanned<String>> = table.keys().collect();
        names.sort_by_key(|name| name.span().start);
        let first_past = names[max];
        self.error(
            first_past.span(),
            format!("{field}.{}", first_past.get_ref()),
            too_many(field, table.len(), max),
        );
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
            self.in_range(format!("{field}.memory_mb"), memory, Limits::MEMORY_MB);
        }
        if let Some(timeout) = &raw.timeout_ms {
            self.in_range(format!("{field}.timeout_ms"), timeout, Limits::TIMEOUT_MS);
        }
        if let Some(fuel) = raw.fuel.as_ref().filter(|fuel| *fuel.get_ref() == 0) {
            self.error(
                fuel.span(),
                format!("{field}.fuel"),
                "must be greater than 0; omit `fuel` for the platform default",
            );
        }
        let mut allowed_outbound_hosts = Vec::new();
        for (i, entry) in raw.allowed_outbound_hosts.iter().enumerate() {
            match OutboundHost::parse(entry.get_ref()) {
                Ok(host) => allowed_outbound_hosts.push(host),
                Err(e) => self.error(
                    entry.span(),
                    format!("{field}.allowed_outbound_hosts[{i}]"),
                    e.to_string(),
                ),
            }
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
            allowed_outbound_hosts: AllowedOutboundHosts(allowed_outbound_hosts),
        }
    }

    /// Reports `value` at `field` unless it is within `range`.
    fn in_range<T>(&mut self, field: String, value: &Spanned<T>, range: RangeInclusive<T>)
    where
        T: PartialOrd + std::fmt::Display,
    {
        if !range.contains(value.get_ref()) {
            self.error(value.span(), field, out_of_range(value.get_ref(), &range));
        }
    }

    /// Parses a type, reporting it at `field` if it is invalid.
    fn schema_type(&mut self, field: String, raw: &Spanned<String>) -> Option<SchemaType> {
        SchemaType::parse(raw.get_ref())
            .map_err(|e| self.error(raw.span(), field, e.to_string()))
            .ok()
    }

    /// Checks each step on its own (not how the edges connect them).
    fn steps(
        &mut self,
        functions: &BTreeMap<String, (Range<usize>, Function)>,
        raw: BTreeMap<Spanned<String>, RawStep>,
    ) -> BTreeMap<String, CheckedStep> {
        let mut steps = BTreeMap::new();
        for (name, raw) in raw {
            let span = name.span();
            let name = name.into_inner();
            let field = step_field(&name);
            if !is_valid_name(&name) {
                self.error(span.clone(), field.clone(), invalid_name(&name));
            }

            let function = raw.function.get_ref();
            match functions.get(function) {
                None => self.error(
                    raw.function.span(),
                    format!("{field}.function"),
                    unknown("function", function, functions.keys()),
                ),
                Some((_, f)) if f.kind != FunctionKind::Step => self.error(
                    raw.function.span(),
                    format!("{field}.function"),
                    format!(
                        "function `{function}` has kind `{}`, but steps need kind `step`",
                        f.kind.as_str()
                    ),
                ),
                Some(_) => {}
            }
            let input = self.schema_type(format!("{field}.input"), &raw.input);
            let output = self.schema_type(format!("{field}.output"), &raw.output);

            let mut retry = RetryPolicy::default();
            if let Some(retries) = raw.retries {
                if let Some(attempts) = retries.attempts {
                    let field = format!("{field}.retries.attempts");
                    self.in_range(field, &attempts, RetryPolicy::ATTEMPTS);
                    retry.attempts = attempts.into_inner();
                }
                if let Some(backoff) = retries.backoff_ms {
                    let field = format!("{field}.retries.backoff_ms");
                    self.in_range(field, &backoff, RetryPolicy::BACKOFF_MS);
                    retry.backoff_ms = backoff.into_inner();
                }
            }

            let interface = raw.interface.and_then(|interface| {
                InterfaceRef::parse(interface.get_ref())
                    .map_err(|e| {
                        self.error(
                            interface.span(),
                            format!("{field}.interface"),
                            e.to_string(),
                        )
                    })
                    .ok()
                    .map(|reference| (reference, interface.span()))
            });

            let step = CheckedStep {
                span,
                function: raw.function.into_inner(),
                input,
                input_span: raw.input.span(),
                output,
                retry,
                interface,
            };
            steps.insert(name, step);
        }
        steps
    }

    /// Checks each edge on its own and against the steps it connects: that they exist,
    /// differ, agree on the type, and have no other edge in (for `to`) or out (for
    /// `from`).
    fn edges(
        &mut self,
        steps: &BTreeMap<String, CheckedStep>,
        raw: Vec<Spanned<RawEdge>>,
    ) -> Vec<CheckedEdge> {
        let mut edges = Vec::new();
        // Step -> index of the first edge into / out of it.
        let mut incoming: HashMap<String, usize> = HashMap::new();
        let mut outgoing: HashMap<String, usize> = HashMap::new();
        for (i, raw) in raw.into_iter().enumerate() {
            let field = format!("edges[{i}]");
            let span = raw.span();
            let raw = raw.into_inner();

            let schema_type = self.schema_type(format!("{field}.type"), &raw.schema_type);
            let from = steps.get(raw.from.get_ref());
            let to = steps.get(raw.to.get_ref());
            for (key, name, step) in [("from", &raw.from, from), ("to", &raw.to, to)] {
                if step.is_none() {
                    self.error(
                        name.span(),
                        format!("{field}.{key}"),
                        unknown("step", name.get_ref(), steps.keys()),
                    );
                }
            }
            if raw.from.get_ref() == raw.to.get_ref() {
                self.error(
                    raw.to.span(),
                    format!("{field}.to"),
                    format!(
                        "an edge cannot lead from step `{}` back to itself",
                        raw.to.get_ref()
                    ),
                );
            } else if from.is_some() && to.is_some() {
                let name = raw.from.get_ref();
                if let Some(j) = outgoing.get(name) {
                    self.error(
                        raw.from.span(),
                        format!("{field}.from"),
                        format!("step `{name}` already has an outgoing edge (edges[{j}])"),
                    );
                } else {
                    outgoing.insert(name.clone(), i);
                }
                let name = raw.to.get_ref();
                if let Some(j) = incoming.get(name) {
                    self.error(
                        raw.to.span(),
                        format!("{field}.to"),
                        format!("step `{name}` already has an incoming edge (edges[{j}])"),
                    );
                } else {
                    incoming.insert(name.clone(), i);
                }
            }

            // The edge carries what `from` returns and `to` takes; checked only where
            // both sides are known, so one typo gives one error.
            if let Some(carried) = &schema_type {
                let ends = [
                    (
                        raw.from.get_ref(),
                        from.and_then(|s| s.output.as_ref()),
                        "returns",
                    ),
                    (raw.to.get_ref(), to.and_then(|s| s.input.as_ref()), "takes"),
                ];
                for (name, step_type, verb) in ends {
                    if let Some(step_type) = step_type.filter(|t| *t != carried) {
                        self.error(
                            raw.schema_type.span(),
                            format!("{field}.type"),
                            format!(
                                "edge carries `{carried}` but step `{name}` {verb} `{step_type}`"
                            ),
                        );
                    }
                }
            }

            let (mode, mode_span) = self.edge_mode(&field, raw.fan_out, raw.join);
            edges.push(CheckedEdge {
                span,
                from: raw.from.into_inner(),
                to: raw.to.into_inner(),
                schema_type,
                mode,
                mode_span,
            });
        }
        edges
    }

    /// An edge's `fan_out` or `join`, and the span of whichever is set.
    fn edge_mode(
        &mut self,
        field: &str,
        fan_out: Option<Spanned<RawFanOut>>,
        join: Option<Spanned<RawJoin>>,
    ) -> (EdgeMode, Range<usize>) {
        if let (Some(fan_out), Some(join)) = (&fan_out, &join) {
            // Point at whichever comes second: that is the one that does not fit.
            let (span, key) = if join.span().start > fan_out.span().start {
                (join.span(), "join")
            } else {
                (fan_out.span(), "fan_out")
            };
            self.error(
                span,
                format!("{field}.{key}"),
                "an edge either fans out (`fan_out`) or joins (`join`), not both",
            );
        }
        if let Some(fan_out) = fan_out {
            let span = fan_out.span();
            let fan_out = match fan_out.into_inner() {
                RawFanOut::Each => FanOut::Each,
                RawFanOut::Static(n) => {
                    let range = FanOut::STATIC;
                    match u32::try_from(n).ok().filter(|n| range.contains(n)) {
                        Some(n) => FanOut::Static(n),
                        None => {
                            let message = out_of_range(&n, &range);
                            self.error(span.clone(), format!("{field}.fan_out"), message);
                            FanOut::Static(*range.start())
                        }
                    }
                }
            };
            return (EdgeMode::FanOut(fan_out), span);
        }
        if let Some(join) = join {
            let span = join.span();
            let join = join.into_inner();
            let mut policy = JoinPolicy::default();
            if let Some(timeout) = join.timeout_ms {
                let timeout_field = format!("{field}.join.timeout_ms");
                self.in_range(timeout_field, &timeout, JoinPolicy::TIMEOUT_MS);
                policy.timeout_ms = timeout.into_inner();
            }
            if let Some(on_failure) = join.on_failure {
                policy.on_failure = on_failure;
            }
            return (EdgeMode::Join(policy), span);
        }
        (EdgeMode::Sequence, 0..0)
    }

    fn settings(&mut self, raw: Option<RawSettings>) -> RunSettings {
        let mut settings = RunSettings::default();
        let Some(raw) = raw else {
            return settings;
        };
        if let Some(concurrency) = raw.concurrency {
            let field = "workflow.concurrency".to_owned();
            self.in_range(field, &concurrency, RunSettings::CONCURRENCY);
            settings.concurrency = concurrency.into_inner();
        }
        if let Some(timeout) = raw.timeout_ms {
            let field = "workflow.timeout_ms".to_owned();
            self.in_range(field, &timeout, RunSettings::TIMEOUT_MS);
            settings.timeout_ms = timeout.into_inner();
        }
        if let Some(replicas) = raw.replicas {
            let field = "workflow.replicas".to_owned();
            self.in_range(field, &replicas, RunSettings::REPLICAS);
            settings.replicas = replicas.into_inner();
        }
        settings.spread_branches = raw.spread_branches.unwrap_or(false);
        settings
    }

    /// The rules about the step graph as a whole. Relies on what `edges` established:
    /// every edge connects two distinct steps, and no step has two edges in or two out.
    /// So the graph is a set of disjoint chains and cycles.
    fn graph(
        &mut self,
        steps: &BTreeMap<String, CheckedStep>,
        edges: &[CheckedEdge],
        step_triggers: &[StepTrigger],
    ) {
        if steps.is_empty() {
            return;
        }
        // Step -> index of the edge out of it.
        let next: HashMap<&str, usize> = edges
            .iter()
            .enumerate()
            .map(|(i, edge)| (edge.from.as_str(), i))
            .collect();
        // A chain starts at each step no edge leads into.
        let chains: Vec<Vec<&str>> = steps
            .keys()
            .map(String::as_str)
            .filter(|name| !edges.iter().any(|edge| edge.to == *name))
            .map(|head| {
                let mut chain = vec![head];
                while let Some(&i) = next.get(chain[chain.len() - 1]) {
                    chain.push(edges[i].to.as_str());
                }
                chain
            })
            .collect();

        // Steps on no chain are on cycles. Report each cycle once, at its last edge in
        // the file, following it round from that edge's `to`.
        let on_chains: HashSet<&str> = chains.iter().flatten().copied().collect();
        let mut reported: HashSet<&str> = HashSet::new();
        for (i, edge) in edges.iter().enumerate().rev() {
            if on_chains.contains(edge.from.as_str()) || reported.contains(edge.from.as_str()) {
                continue;
            }
            let mut cycle = vec![edge.to.as_str()];
            // Every step on a cycle has an edge out, so this comes back round to edge
            // `i`; the bound is only a guard.
            for _ in 0..edges.len() {
                let Some(&j) = next.get(cycle[cycle.len() - 1]) else {
                    break;
                };
                cycle.push(edges[j].to.as_str());
                if j == i {
                    break;
                }
            }
            reported.extend(cycle.iter().copied());
            self.error(
                edge.span.clone(),
                format!("edges[{i}]"),
                format!("edge closes a cycle: {}", cycle.join(" -> ")),
            );
        }
        if !reported.is_empty() {
            return;
        }

        // Runs start at the head of the longest chain (the first in the file among
        // equals); any other chain could never run.
        let Some(chain) = chains
            .iter()
            .max_by_key(|chain| (chain.len(), std::cmp::Reverse(steps[chain[0]].span.start)))
        else {
            return;
        };
        let entry = chain[0];
        for (name, step) in steps {
            if !chain.contains(&name.as_str()) {
                self.error(
                    step.span.clone(),
                    step_field(name),
                    format!("step `{name}` is not reachable from the entry step `{entry}`"),
                );
            }
        }

        let entry_step = &steps[entry];
        if let Some(input) = entry_step.input.as_ref().filter(|t| !t.is_builtin()) {
            // Name what the triggers actually deliver; without any step trigger, runs
            // are still started with an HTTP body as in v2.
            let http = step_triggers.iter().any(|t| t.table == "http");
            let redis = step_triggers.iter().any(|t| t.table != "http");
            let receives = match (http, redis) {
                (true, true) => "the HTTP request body and Redis message payloads",
                (false, true) => "Redis message payloads",
                _ => "the HTTP request body",
            };
            self.error(
                entry_step.input_span.clone(),
                format!("{}.input", step_field(entry)),
                format!(
                    "the entry step receives {receives}, so its input must be \
                     `bytes`, `text` or `json`, not `{input}`"
                ),
            );
        }

        // Along the chain, a fan-out opens branches and a join closes them: joins need an
        // open fan-out and fan-outs do not nest.
        let mut open_fan_out: Option<usize> = None;
        for window in chain.windows(2) {
            let i = next[window[0]];
            let edge = &edges[i];
            match edge.mode {
                EdgeMode::Sequence => {}
                EdgeMode::FanOut(_) => match open_fan_out {
                    Some(j) => self.error(
                        edge.mode_span.clone(),
                        format!("edges[{i}].fan_out"),
                        format!(
                            "cannot fan out again before the fan-out at edges[{j}] is joined \
                             (fan-outs do not nest)"
                        ),
                    ),
                    None => open_fan_out = Some(i),
                },
                EdgeMode::Join(_) => match open_fan_out {
                    Some(_) => open_fan_out = None,
                    None => self.error(
                        edge.mode_span.clone(),
                        format!("edges[{i}].join"),
                        format!("nothing to join: no edge before `{}` fans out", edge.from),
                    ),
                },
            }
        }

        for trigger in step_triggers {
            if trigger.step != entry {
                self.error(
                    trigger.span.clone(),
                    format!("triggers.{}[{}].step", trigger.table, trigger.index),
                    format!(
                        "runs start at the entry step `{entry}`, not `{}`",
                        trigger.step
                    ),
                );
            }
        }
    }

    /// Checks each HTTP trigger; returns those with a valid route, and the `step`s they
    /// name (for the entry-step check).
    fn http_triggers(
        &mut self,
        functions: &BTreeMap<String, (Range<usize>, Function)>,
        steps: &BTreeMap<String, CheckedStep>,
        raw: Vec<Spanned<RawHttpTrigger>>,
    ) -> (Vec<HttpTrigger>, Vec<StepTrigger>) {
        let mut triggers = Vec::new();
        let mut step_triggers = Vec::new();
        // Route -> line of its first definition, for the duplicate message.
        let mut seen: HashMap<Route, usize> = HashMap::new();
        for (i, raw) in raw.into_iter().enumerate() {
            let field = format!("triggers.http[{i}]");
            let span = raw.span();
            let raw = raw.into_inner();
            let route_span = raw.route.span();
            let parsed = match self.provenance {
                Provenance::New => Route::parse_declared(raw.route.get_ref()),
                Provenance::Saved => Route::parse(raw.route.get_ref()),
            };
            let route = match parsed {
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
                    let line = self.line_of(route_span.start);
                    seen.insert(route.clone(), line);
                }
            }

            let target = match (raw.function, raw.step) {
                (Some(_), Some(_)) => {
                    self.error(
                        span,
                        field,
                        "a trigger names either `function` or `step`, not both",
                    );
                    None
                }
                (None, None) => {
                    self.error(span, field, "a trigger needs `function` or `step`");
                    None
                }
                (Some(function), None) => {
                    self.trigger_function(&field, functions, &function);
                    Some(TriggerTarget::Function(function.into_inner()))
                }
                (None, Some(step)) => {
                    let name = step.get_ref();
                    if !steps.contains_key(name) {
                        self.error(
                            step.span(),
                            format!("{field}.step"),
                            unknown("step", name, steps.keys()),
                        );
                    }
                    step_triggers.push(StepTrigger {
                        table: "http",
                        index: i,
                        span: step.span(),
                        step: name.clone(),
                    });
                    Some(TriggerTarget::Step(step.into_inner()))
                }
            };

            if let (Some(route), Some(target)) = (route, target) {
                triggers.push(HttpTrigger { route, target });
            }
        }
        (triggers, step_triggers)
    }

    /// Checks each `[[triggers.redis]]`: a valid channel, not subscribed twice, and a
    /// step; adds the steps to `step_triggers` for the entry-step check.
    fn redis_triggers(
        &mut self,
        steps: &BTreeMap<String, CheckedStep>,
        raw: Vec<Spanned<RawRedisTrigger>>,
        step_triggers: &mut Vec<StepTrigger>,
    ) -> Vec<RedisTrigger> {
        let mut triggers = Vec::new();
        // Channel -> line of its first definition, for the duplicate message.
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in raw.into_iter().enumerate() {
            let field = format!("triggers.redis[{i}]");
            let raw = raw.into_inner();
            let channel = &raw.channel;
            self.redis_name(format!("{field}.channel"), "channel", channel);
            if let Some(first) = seen.get(channel.get_ref()) {
                self.error(
                    channel.span(),
                    format!("{field}.channel"),
                    format!(
                        "duplicate channel `{}` (first defined on line {first})",
                        channel.get_ref()
                    ),
                );
            } else {
                let line = self.line_of(channel.span().start);
                seen.insert(channel.get_ref().clone(), line);
            }
            self.message_trigger_step("redis", i, steps, &raw.step, step_triggers);
            triggers.push(RedisTrigger {
                channel: raw.channel.into_inner(),
                step: raw.step.into_inner(),
            });
        }
        triggers
    }

    /// Checks each `[[triggers.stream]]`: valid names, no (stream, group) pair read
    /// twice, a dead-letter stream other than the stream itself, settings within range,
    /// and a step; fills in the defaults and adds the steps to `step_triggers` for the
    /// entry-step check.
    fn stream_triggers(
        &mut self,
        workflow: &str,
        steps: &BTreeMap<String, CheckedStep>,
        raw: Vec<Spanned<RawStreamTrigger>>,
        step_triggers: &mut Vec<StepTrigger>,
    ) -> Vec<StreamTrigger> {
        let mut triggers = Vec::new();
        // (stream, group) -> line of its first definition, for the duplicate message.
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for (i, raw) in raw.into_iter().enumerate() {
            let field = format!("triggers.stream[{i}]");
            let raw = raw.into_inner();
            let stream = raw.stream.get_ref();
            self.redis_name(format!("{field}.stream"), "stream", &raw.stream);
            self.message_trigger_step("stream", i, steps, &raw.step, step_triggers);

            let group = match &raw.group {
                Some(group) => {
                    self.redis_name(format!("{field}.group"), "consumer group", group);
                    group.get_ref().clone()
                }
                None => StreamTrigger::default_group(workflow),
            };
            let key = (stream.clone(), group.clone());
            if let Some(first) = seen.get(&key) {
                // Point at the group if it is written: that is what must change.
                let (span, key) = match &raw.group {
                    Some(group) => (group.span(), "group"),
                    None => (raw.stream.span(), "stream"),
                };
                self.error(
                    span,
                    format!("{field}.{key}"),
                    format!(
                        "duplicate stream `{stream}` with consumer group `{group}` (first \
                         defined on line {first})"
                    ),
                );
            } else {
                let line = self.line_of(raw.stream.span().start);
                seen.insert(key, line);
            }

            let mut max_deliveries = StreamTrigger::DEFAULT_MAX_DELIVERIES;
            if let Some(value) = raw.max_deliveries {
                let value_field = format!("{field}.max_deliveries");
                self.in_range(value_field, &value, StreamTrigger::MAX_DELIVERIES);
                max_deliveries = value.into_inner();
            }

            let dead_letter = match &raw.dead_letter {
                Some(dead_letter) => {
                    let dead_field = format!("{field}.dead_letter");
                    self.redis_name(dead_field.clone(), "dead-letter stream", dead_letter);
                    if dead_letter.get_ref() == stream {
                        self.error(
                            dead_letter.span(),
                            dead_field,
                            format!(
                                "the dead-letter stream must differ from `stream` \
                                 (`{stream}`), or failed messages would be read again"
                            ),
                        );
                    }
                    dead_letter.get_ref().clone()
                }
                None => StreamTrigger::default_dead_letter(stream),
            };

            let mut reclaim_idle_ms = StreamTrigger::DEFAULT_RECLAIM_IDLE_MS;
            if let Some(value) = raw.reclaim_idle_ms {
                let value_field = format!("{field}.reclaim_idle_ms");
                self.in_range(value_field, &value, StreamTrigger::RECLAIM_IDLE_MS);
                reclaim_idle_ms = value.into_inner();
            }

            let mut batch = StreamTrigger::DEFAULT_BATCH;
            if let Some(value) = raw.batch {
                self.in_range(format!("{field}.batch"), &value, StreamTrigger::BATCH);
                batch = value.into_inner();
            }

            triggers.push(StreamTrigger {
                stream: raw.stream.into_inner(),
                group,
                step: raw.step.into_inner(),
                max_deliveries,
                dead_letter,
                reclaim_idle_ms,
                batch,
            });
        }
        triggers
    }

    /// Reports `name` (a channel, stream or group, as `what`) at `field` unless it is a
    /// valid Redis name.
    fn redis_name(&mut self, field: String, what: &str, name: &Spanned<String>) {
        if !is_valid_redis_name(name.get_ref()) {
            self.error(name.span(), field, invalid_redis_name(what, name.get_ref()));
        }
    }

    /// The `step` of a Redis or Redis Streams trigger (`table`) number `index`: the
    /// workflow must have steps, and this must be one of them. It is added to
    /// `step_triggers` for the entry-step check.
    fn message_trigger_step(
        &mut self,
        table: &'static str,
        index: usize,
        steps: &BTreeMap<String, CheckedStep>,
        step: &Spanned<String>,
        step_triggers: &mut Vec<StepTrigger>,
    ) {
        let field = format!("triggers.{table}[{index}].step");
        let name = step.get_ref();
        if steps.is_empty() {
            self.error(
                step.span(),
                field,
                format!(
                    "a `[[triggers.{table}]]` trigger starts a workflow run, but the workflow \
                     has no steps (`[steps.<name>]`)"
                ),
            );
        } else if !steps.contains_key(name) {
            self.error(step.span(), field, unknown("step", name, steps.keys()));
        }
        step_triggers.push(StepTrigger {
            table,
            index,
            span: step.span(),
            step: name.clone(),
        });
    }

    /// A trigger's `function` must be an `http` function.
    fn trigger_function(
        &mut self,
        field: &str,
        functions: &BTreeMap<String, (Range<usize>, Function)>,
        name: &Spanned<String>,
    ) {
        match functions.get(name.get_ref()) {
            None => self.error(
                name.span(),
                format!("{field}.function"),
                unknown("function", name.get_ref(), functions.keys()),
            ),
            Some((_, function)) if function.kind != FunctionKind::Http => self.error(
                name.span(),
                format!("{field}.function"),
                format!(
                    "function `{}` has kind `{}`, but HTTP triggers need kind `http`",
                    name.get_ref(),
                    function.kind.as_str()
                ),
            ),
            Some(_) => {}
        }
    }
}

fn function_field(name: &str) -> String {
    locate::render(&[
        Segment::Key("functions".to_owned()),
        Segment::Key(name.to_owned()),
    ])
}

fn step_field(name: &str) -> String {
    locate::render(&[
        Segment::Key("steps".to_owned()),
        Segment::Key(name.to_owned()),
    ])
}

/// `unknown step `mrege` (defined: count, merge, split)`: at most
/// [`MAX_LISTED_NAMES`] names, each cut to a few dozen characters, as the names come
/// from the tenant's manifest (which may name hundreds of things, of any length), and
/// every reference to an unknown name makes a message.
fn unknown<'n>(what: &str, name: &str, defined: impl Iterator<Item = &'n String>) -> String {
    let mut defined = defined.peekable();
    let listed = if defined.peek().is_none() {
        "none".to_owned()
    } else {
        let mut listed: Vec<String> = defined
            .by_ref()
            .take(MAX_LISTED_NAMES)
            .map(|name| shorten(name).into_owned())
            .collect();
        let more = defined.count();
        if more > 0 {
            listed.push(format!("and {more} more"));
        }
        listed.join(", ")
    };
    format!("unknown {what} `{}` (defined: {listed})", shorten(name))
}

fn out_of_range<V, T>(value: &V, range: &RangeInclusive<T>) -> String
where
    V: std::fmt::Display,
    T: std::fmt::Display,
{
    format!(
        "{value} is out of range: must be between {} and {}",
        range.start(),
        range.end()
    )
}

fn too_many(field: &str, declared: usize, max: usize) -> String {
    let hint = if field == "triggers.http" {
        "; one prefix route (`/api/...`) serves any number of paths"
    } else {
        ""
    };
    format!("{declared} `{field}` entries; a workflow may declare at most {max}{hint}")
}

fn invalid_redis_name(what: &str, name: &str) -> String {
    let rule = format!(
        "use 1 to {MAX_REDIS_NAME_LEN} characters, none of them whitespace or control \
         characters"
    );
    let len = name.chars().count();
    if len > MAX_REDIS_NAME_LEN {
        // Quoting hundreds of characters back would bury the message.
        let start: String = name.chars().take(16).collect();
        format!("invalid {what} name {start:?}... ({len} characters): {rule}")
    } else {
        format!("invalid {what} name {name:?}: {rule}")
    }
}

fn invalid_name(name: &str) -> String {
    format!(
        "invalid name {:?}: use 1 to {MAX_NAME_LEN} characters from a-z, 0-9 and `-`, \
         starting with a letter",
        shorten(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_names_are_1_to_256_characters_without_whitespace_or_controls() {
        for good in [
            "a",
            "sensors.raw",
            "orders:dead",
            "a/b*c",
            "π",
            &"é".repeat(256),
        ] {
            assert!(is_valid_redis_name(good), "{good}");
        }
        for bad in [
            "",
            "a b",
            "a\tb",
            "a\nb",
            "a\u{7}b",
            "a\u{a0}b",
            &"a".repeat(257),
        ] {
            assert!(!is_valid_redis_name(bad), "{bad:?}");
        }
    }

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
