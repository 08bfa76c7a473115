//! Generation of the view, writer and owned type of one struct.

use std::fmt::Write as _;

use super::names;
use super::rust_prim;
use crate::ast::{FieldDef, Schema, StructDef};
use crate::plan::{Kind, classify, has_out_of_line, is_plain};

/// Names that view accessors must not take (they are the view's own helpers).
const VIEW_RESERVED: &[&str] = &[
    "root",
    "at",
    "null",
    "raw_bytes",
    "message",
    "clone",
    "fmt",
    "eq",
    "ne",
    "into",
    "to_owned",
];

/// Rust identifiers of the fields of `s` (owned fields, view accessors, and the stem of
/// writer setters), in declaration order.
pub fn field_idents(s: &StructDef) -> Vec<String> {
    names::dedupe(
        s.fields
            .iter()
            .map(|f| names::escape(names::snake_case(&f.name), VIEW_RESERVED))
            .collect(),
    )
}

/// `expr * k`, without the `* 1` clippy would flag.
fn times(expr: &str, k: u32) -> String {
    if k == 1 {
        expr.to_string()
    } else {
        format!("{expr} * {k}")
    }
}

/// `base + k`, without the `+ 0` clippy would flag.
fn plus(base: &str, k: u32) -> String {
    if k == 0 {
        base.to_string()
    } else {
        format!("{base} + {k}")
    }
}

struct Field<'s> {
    def: &'s FieldDef,
    kind: Kind<'s>,
    ident: String,
}

fn limit_expr(limit: Option<u32>) -> String {
    match limit {
        Some(n) => format!("{n}"),
        None => "usize::MAX".to_string(),
    }
}

/// Emits everything generated for struct `s`.
pub(super) fn generate(out: &mut String, schema: &Schema, s: &StructDef, rt: &str) {
    let idents = field_idents(s);
    let fields: Vec<Field<'_>> = s
        .fields
        .iter()
        .zip(idents)
        .map(|(def, ident)| Field {
            def,
            kind: classify(schema, def),
            ident,
        })
        .collect();
    let ctx = Ctx {
        schema,
        s,
        rt,
        name: names::type_name(&s.name),
    };
    ctx.owned(out, &fields);
    ctx.view(out, &fields);
    ctx.writer(out, &fields);
}

struct Ctx<'s> {
    schema: &'s Schema,
    s: &'s StructDef,
    rt: &'s str,
    name: String,
}

impl Ctx<'_> {
    fn tn(&self, s: &StructDef) -> String {
        names::type_name(&s.name)
    }

    fn owned_type(&self, k: &Kind<'_>) -> String {
        let rt = self.rt;
        match k {
            Kind::Prim(p) => rust_prim(*p).to_string(),
            Kind::Enum(e) => names::type_name(&e.name),
            Kind::Str(_) | Kind::CharArray(_) => format!("{rt}::__rt::String"),
            Kind::PrimSlice(p, _) => format!("{rt}::__rt::Vec<{}>", rust_prim(*p)),
            Kind::PrimArray(p, n) => format!("[{}; {n}]", rust_prim(*p)),
            Kind::Inline(i) | Kind::Table(i) => self.tn(i),
            Kind::InlineArray(i, n) => format!("[{}; {n}]", self.tn(i)),
            Kind::InlineSlice(i, _) => format!("{rt}::__rt::Vec<{}>", self.tn(i)),
        }
    }

    fn owned(&self, out: &mut String, fields: &[Field<'_>]) {
        let (s, rt, name) = (self.s, self.rt, &self.name);
        let kind = if s.is_table() {
            "table"
        } else {
            "inline struct"
        };
        let _ = writeln!(
            out,
            "/// Owned value of {kind} `{}`: build it and [`{name}::encode`] it, or [`{name}::decode`] a message.\n\
             ///\n/// Strings are decoded lossily (invalid UTF-8 becomes U+FFFD); use [`{name}View`] for the exact bytes.",
            s.name
        );
        // `Default` cannot be derived for arrays longer than 32, so only structs with
        // arrays get a hand-written impl.
        let has_array = fields
            .iter()
            .any(|f| matches!(f.kind, Kind::PrimArray(..) | Kind::InlineArray(..)));
        let derives = if has_array {
            "Clone, Debug, PartialEq"
        } else {
            "Clone, Debug, PartialEq, Default"
        };
        let _ = writeln!(out, "#[derive({derives})]");
        let _ = writeln!(out, "pub struct {name} {{");
        for f in fields {
            let _ = writeln!(out, "    /// Field `{}` (`{}`).", f.def.name, f.def.ty.text);
            let _ = writeln!(out, "    pub {}: {},", f.ident, self.owned_type(&f.kind));
        }
        let _ = writeln!(out, "}}\n");

        if has_array {
            let _ = writeln!(out, "impl ::core::default::Default for {name} {{");
            let _ = writeln!(out, "    fn default() -> Self {{");
            let _ = writeln!(out, "        Self {{");
            for f in fields {
                let d = match f.kind {
                    Kind::PrimArray(..) | Kind::InlineArray(..) => {
                        "::core::array::from_fn(|_| ::core::default::Default::default())"
                    }
                    _ => "::core::default::Default::default()",
                };
                let _ = writeln!(out, "            {}: {d},", f.ident);
            }
            let _ = writeln!(out, "        }}\n    }}\n}}\n");
        }

        let _ = writeln!(out, "impl {name} {{");
        let _ = writeln!(
            out,
            "    /// Bytes the struct itself takes (content plus padding)."
        );
        let _ = writeln!(out, "    pub const SIZE: usize = {};", s.size.total);
        let _ = writeln!(
            out,
            "    /// Bytes of content (including the size header of a table)."
        );
        let _ = writeln!(
            out,
            "    pub const CONTENT_SIZE: usize = {};",
            s.size.content
        );
        let _ = writeln!(
            out,
            "    /// Bytes a reader needs before looking at the struct."
        );
        let _ = writeln!(out, "    pub const MIN_SIZE: usize = {};", s.size.minimum);
        let _ = writeln!(
            out,
            "    /// Whether the struct is a table (`[u32 size][fields]`, referenced by offset)."
        );
        let _ = writeln!(out, "    pub const IS_TABLE: bool = {};", s.is_table());
        let _ = writeln!(out, "    /// Whether the struct is packed.");
        let _ = writeln!(out, "    pub const PACKED: bool = {};\n", s.packed);

        let _ = writeln!(
            out,
            "    /// Decodes a message whose root is a `{}`. Never fails: malformed input reads as defaults.",
            s.name
        );
        let _ = writeln!(out, "    pub fn decode(data: &[u8]) -> Self {{");
        let _ = writeln!(out, "        Self::from_view(&{name}View::root(data))");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(out, "    /// Copies a view into an owned value.");
        let _ = writeln!(out, "    pub fn from_view(v: &{name}View<'_>) -> Self {{");
        let _ = writeln!(out, "        Self {{");
        for f in fields {
            let a = &f.ident;
            let e = match &f.kind {
                Kind::Prim(_) | Kind::Enum(_) => format!("v.{a}()"),
                Kind::Str(_) | Kind::CharArray(_) => {
                    format!("v.{a}().to_string_lossy().into_owned()")
                }
                Kind::PrimSlice(..) => format!("v.{a}().to_vec()"),
                Kind::PrimArray(..) => {
                    format!(
                        "{{ let s = v.{a}(); ::core::array::from_fn(|i| s.get(i).unwrap_or_default()) }}"
                    )
                }
                Kind::Inline(i) | Kind::Table(i) => format!("{}::from_view(&v.{a}())", self.tn(i)),
                Kind::InlineArray(i, _) => format!(
                    "{{ let s = v.{a}(); ::core::array::from_fn(|i| s.get(i).map(|e| {}::from_view(&e)).unwrap_or_default()) }}",
                    self.tn(i)
                ),
                Kind::InlineSlice(i, _) => format!(
                    "v.{a}().iter().map(|e| {}::from_view(&e)).collect()",
                    self.tn(i)
                ),
            };
            let _ = writeln!(out, "            {a}: {e},");
        }
        let _ = writeln!(out, "        }}\n    }}\n");

        // Exact size, so `encode` allocates once and never grows.
        let _ = writeln!(out, "    /// Exact size of the message `encode` produces.");
        let _ = writeln!(out, "    pub fn encoded_len(&self) -> usize {{");
        let _ = writeln!(out, "        Self::SIZE + self.heap_len()");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(
            out,
            "    /// Bytes this value appends after the struct itself (strings, slices, tables)."
        );
        let _ = writeln!(out, "    pub fn heap_len(&self) -> usize {{");
        let mut terms: Vec<String> = Vec::new();
        for f in fields {
            let a = &f.ident;
            match &f.kind {
                Kind::Str(_) => terms.push(format!("self.{a}.len()")),
                Kind::PrimSlice(p, _) => terms.push(times(&format!("self.{a}.len()"), p.size())),
                Kind::Inline(i) if has_out_of_line(self.schema, i) => {
                    terms.push(format!("self.{a}.heap_len()"))
                }
                Kind::InlineArray(i, _) if has_out_of_line(self.schema, i) => terms.push(format!(
                    "self.{a}.iter().map({}::heap_len).sum::<usize>()",
                    self.tn(i)
                )),
                Kind::InlineSlice(i, _) => {
                    terms.push(times(&format!("self.{a}.len()"), i.size.total));
                    if has_out_of_line(self.schema, i) {
                        terms.push(format!(
                            "self.{a}.iter().map({}::heap_len).sum::<usize>()",
                            self.tn(i)
                        ));
                    }
                }
                Kind::Table(t) => {
                    terms.push(format!("{}", t.size.total));
                    if has_out_of_line(self.schema, t) {
                        terms.push(format!("self.{a}.heap_len()"));
                    }
                }
                _ => {}
            }
        }
        let _ = writeln!(
            out,
            "        {}",
            if terms.is_empty() {
                "0".to_string()
            } else {
                terms.join(" + ")
            }
        );
        let _ = writeln!(out, "    }}\n");

        let _ = writeln!(
            out,
            "    /// Encodes into `buf` (from its first byte) and returns the message length."
        );
        let _ = writeln!(
            out,
            "    /// Fails with `CapacityExceeded` when `buf` is shorter than [`Self::encoded_len`]."
        );
        let _ = writeln!(
            out,
            "    pub fn encode_into(&self, buf: &mut [u8]) -> ::core::result::Result<usize, {rt}::Error> {{"
        );
        let _ = writeln!(out, "        let needed = self.encoded_len();");
        let _ = writeln!(out, "        if needed > buf.len() {{");
        let _ = writeln!(
            out,
            "            return ::core::result::Result::Err({rt}::Error::CapacityExceeded {{ needed, capacity: buf.len() }});"
        );
        let _ = writeln!(out, "        }}");
        let _ = writeln!(out, "        let mut w = {rt}::Writer::new(buf);");
        let _ = writeln!(
            out,
            "        self.write_to(&mut {name}Writer::new(&mut w)?)?;"
        );
        let _ = writeln!(out, "        ::core::result::Result::Ok(w.len())");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(
            out,
            "    /// Encodes into a new vector. Fails only for messages over 4 GiB."
        );
        let _ = writeln!(
            out,
            "    pub fn encode(&self) -> ::core::result::Result<{rt}::__rt::Vec<u8>, {rt}::Error> {{"
        );
        let _ = writeln!(
            out,
            "        let mut buf = {rt}::__rt::vec![0u8; self.encoded_len()];"
        );
        let _ = writeln!(out, "        let n = self.encode_into(&mut buf)?;");
        let _ = writeln!(out, "        buf.truncate(n);");
        let _ = writeln!(out, "        ::core::result::Result::Ok(buf)");
        let _ = writeln!(out, "    }}\n");

        let _ = writeln!(
            out,
            "    /// Writes every field through `w`, in declaration order (the reference layout)."
        );
        let _ = writeln!(
            out,
            "    pub fn write_to(&self, w: &mut {name}Writer<'_, '_>) -> ::core::result::Result<(), {rt}::Error> {{"
        );
        for f in fields {
            let a = &f.ident;
            let line = match &f.kind {
                Kind::Prim(_) | Kind::Enum(_) => format!("w.set_{a}(self.{a});"),
                Kind::Str(_) | Kind::PrimSlice(..) => format!("w.set_{a}(&self.{a})?;"),
                Kind::CharArray(_) | Kind::PrimArray(..) => format!("w.set_{a}(&self.{a});"),
                Kind::Inline(_) => format!("self.{a}.write_to(&mut w.{a}_mut())?;"),
                Kind::Table(_) => format!("self.{a}.write_to(&mut w.{a}_mut()?)?;"),
                Kind::InlineArray(..) => format!(
                    "for (i, x) in self.{a}.iter().enumerate() {{\n            if let ::core::option::Option::Some(mut e) = w.{a}_mut(i) {{\n                x.write_to(&mut e)?;\n            }}\n        }}"
                ),
                Kind::InlineSlice(i, _) if is_plain(self.schema, i) => {
                    format!("w.set_{a}_from(&self.{a})?;")
                }
                Kind::InlineSlice(..) => format!(
                    "w.set_{a}_with(self.{a}.len(), |i, e| match self.{a}.get(i) {{\n            ::core::option::Option::Some(x) => x.write_to(e),\n            ::core::option::Option::None => ::core::result::Result::Ok(()),\n        }})?;"
                ),
            };
            let _ = writeln!(out, "        {line}");
        }
        let _ = writeln!(out, "        ::core::result::Result::Ok(())");
        let _ = writeln!(out, "    }}");
        if is_plain(self.schema, s) {
            self.write_plain(out, fields);
        }
        let _ = writeln!(out, "}}\n");

        let _ = writeln!(
            out,
            "impl ::core::convert::From<{name}View<'_>> for {name} {{"
        );
        let _ = writeln!(out, "    fn from(v: {name}View<'_>) -> Self {{");
        let _ = writeln!(out, "        Self::from_view(&v)");
        let _ = writeln!(out, "    }}\n}}\n");
        self.record(out);
    }

    /// `impl Record`: what a platform needs to label, size, read and write a value of
    /// this type without knowing the type.
    fn record(&self, out: &mut String) {
        let (name, rt) = (&self.name, self.rt);
        let _ = writeln!(out, "impl {rt}::Record for {name} {{");
        let _ = writeln!(
            out,
            "    const SCHEMA: &'static str = {:?};",
            self.schema.name
        );
        let _ = writeln!(out, "    const NAME: &'static str = {:?};", self.s.name);
        let _ = writeln!(out, "    type View<'a> = {name}View<'a>;");
        let _ = writeln!(out, "    fn view(data: &[u8]) -> {name}View<'_> {{");
        let _ = writeln!(out, "        {name}View::root(data)");
        let _ = writeln!(out, "    }}");
        let _ = writeln!(out, "    fn encoded_len(&self) -> usize {{");
        let _ = writeln!(out, "        {name}::encoded_len(self)");
        let _ = writeln!(out, "    }}");
        let _ = writeln!(
            out,
            "    fn encode_into(&self, buf: &mut [u8]) -> ::core::result::Result<usize, {rt}::Error> {{"
        );
        let _ = writeln!(out, "        {name}::encode_into(self, buf)");
        let _ = writeln!(out, "    }}\n}}\n");
    }

    /// `write_plain`: encodes a plain inline struct into exactly `SIZE` bytes, every
    /// byte written (padding zeroed), so bulk slice encoding needs no pre-clearing.
    fn write_plain(&self, out: &mut String, fields: &[Field<'_>]) {
        let (s, rt) = (self.s, self.rt);
        let _ = writeln!(
            out,
            "\n    /// Encodes this value into `out` (its `SIZE` bytes), writing every byte."
        );
        let _ = writeln!(out, "    #[doc(hidden)]");
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn write_plain(&self, out: &mut [u8]) {{");
        for f in fields {
            let (a, o) = (&f.ident, f.def.offset);
            match &f.kind {
                Kind::Prim(p) => {
                    let _ = writeln!(
                        out,
                        "        {rt}::store::<{}>(out, {o}, self.{a});",
                        rust_prim(*p)
                    );
                }
                Kind::Enum(e) => {
                    let _ = writeln!(
                        out,
                        "        {rt}::store::<{}>(out, {o}, self.{a}.0);",
                        rust_prim(e.repr)
                    );
                }
                Kind::Inline(_) => {
                    let _ = writeln!(
                        out,
                        "        if let ::core::option::Option::Some(b) = out.get_mut({o}..{}) {{\n            self.{a}.write_plain(b);\n        }}",
                        o + f.def.size
                    );
                }
                _ => {}
            }
        }
        if s.size.padding > 0 {
            let _ = writeln!(
                out,
                "        if let ::core::option::Option::Some(pad) = out.get_mut({}..{}) {{\n            pad.fill(0);\n        }}",
                s.size.content, s.size.total
            );
        }
        let _ = writeln!(out, "    }}");
    }

    fn view(&self, out: &mut String, fields: &[Field<'_>]) {
        let (s, rt, name) = (self.s, self.rt, &self.name);
        let _ = writeln!(
            out,
            "/// Zero-copy view of a `{}` inside a message: each accessor reads its field in place.\n\
             ///\n/// Never panics and never reads out of bounds: fields that are missing or do not fit\n\
             /// read as their defaults, exactly like the reference reader.",
            s.name
        );
        let _ = writeln!(out, "#[derive(Clone, Copy)]");
        let _ = writeln!(out, "pub struct {name}View<'a> {{");
        let _ = writeln!(out, "    data: &'a [u8],");
        let _ = writeln!(out, "    bytes: &'a [u8],");
        let _ = writeln!(out, "}}\n");
        let _ = writeln!(out, "impl<'a> {name}View<'a> {{");
        let _ = writeln!(
            out,
            "    /// Views the message `data` whose root (offset 0) is a `{}`.",
            s.name
        );
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn root(data: &'a [u8]) -> Self {{");
        let _ = writeln!(out, "        Self::at(data, 0)");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(out, "    /// Views the `{}` at `offset` of `data`.", s.name);
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn at(data: &'a [u8], offset: u32) -> Self {{");
        if s.is_table() {
            let _ = writeln!(
                out,
                "        Self {{ data, bytes: {rt}::table_at(data, offset, {}) }}",
                s.size.minimum
            );
        } else {
            let _ = writeln!(
                out,
                "        Self {{ data, bytes: {rt}::inline_root(data, offset, {}, {}) }}",
                s.size.content, s.size.total
            );
        }
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(out, "    /// A view whose fields all read as defaults.");
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn null(data: &'a [u8]) -> Self {{");
        let _ = writeln!(out, "        Self {{ data, bytes: &[] }}");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(
            out,
            "    /// The struct's own bytes (empty when it could not be read)."
        );
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn raw_bytes(&self) -> &'a [u8] {{");
        let _ = writeln!(out, "        self.bytes");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(
            out,
            "    /// The whole message this view reads from (offsets are relative to it)."
        );
        let _ = writeln!(out, "    #[inline]");
        let _ = writeln!(out, "    pub fn message(&self) -> &'a [u8] {{");
        let _ = writeln!(out, "        self.data");
        let _ = writeln!(out, "    }}");
        for f in fields {
            let (o, z) = (f.def.offset, f.def.size);
            let fb = format!("{rt}::field(self.bytes, {o}, {})", o + z);
            let (ty, body) = match &f.kind {
                Kind::Prim(p) => (
                    rust_prim(*p).to_string(),
                    format!("{rt}::load::<{}>(self.bytes, {o})", rust_prim(*p)),
                ),
                Kind::Enum(e) => {
                    let en = names::type_name(&e.name);
                    (
                        en.clone(),
                        format!("{en}({rt}::load::<{}>(self.bytes, {o}))", rust_prim(e.repr)),
                    )
                }
                Kind::Str(limit) => (
                    format!("{rt}::Str<'a>"),
                    match limit {
                        Some(n) => {
                            format!("{rt}::Str::limited({rt}::slice_data(self.data, {fb}), {n})")
                        }
                        None => format!("{rt}::Str::new({rt}::slice_data(self.data, {fb}))"),
                    },
                ),
                Kind::CharArray(_) => (format!("{rt}::Str<'a>"), format!("{rt}::Str::new({fb})")),
                Kind::PrimSlice(p, limit) => (
                    format!("{rt}::PrimSlice<'a, {}>", rust_prim(*p)),
                    format!(
                        "{rt}::PrimSlice::slice({rt}::slice_data(self.data, {fb}), {})",
                        limit_expr(*limit)
                    ),
                ),
                Kind::PrimArray(p, n) => (
                    format!("{rt}::PrimSlice<'a, {}>", rust_prim(*p)),
                    format!("{rt}::PrimSlice::array({fb}, {n})"),
                ),
                Kind::Inline(i) => {
                    let v = format!("{}View<'a>", self.tn(i));
                    (
                        v.clone(),
                        format!("<{v} as {rt}::InlineView<'a>>::from_parts(self.data, {fb})"),
                    )
                }
                Kind::InlineArray(i, n) => (
                    format!("{rt}::InlineSlice<'a, {}View<'a>>", self.tn(i)),
                    format!("{rt}::InlineSlice::array(self.data, {fb}, {n})"),
                ),
                Kind::InlineSlice(i, limit) => (
                    format!("{rt}::InlineSlice<'a, {}View<'a>>", self.tn(i)),
                    format!(
                        "{rt}::InlineSlice::slice(self.data, {rt}::slice_data(self.data, {fb}), {})",
                        limit_expr(*limit)
                    ),
                ),
                Kind::Table(t) => {
                    let v = format!("{}View", self.tn(t));
                    let follow = format!("{v}::at(self.data, {rt}::load::<u32>(self.bytes, {o}))");
                    // In a table the reference checks the field against the table size
                    // and yields its null viewer; in an inline struct it follows the
                    // offset unchecked (a defaulted inline struct points at the root).
                    let body = if s.is_table() {
                        format!(
                            "if self.bytes.len() >= {} {{\n            {follow}\n        }} else {{\n            {v}::null(self.data)\n        }}",
                            o + 4
                        )
                    } else {
                        follow
                    };
                    (format!("{v}<'a>"), body)
                }
            };
            let _ = writeln!(
                out,
                "\n    /// Field `{}` (`{}`).",
                f.def.name, f.def.ty.text
            );
            let _ = writeln!(out, "    #[inline]");
            let _ = writeln!(out, "    pub fn {}(&self) -> {ty} {{", f.ident);
            let _ = writeln!(out, "        {body}");
            let _ = writeln!(out, "    }}");
        }
        let _ = writeln!(out, "}}\n");

        if !s.is_table() {
            let _ = writeln!(out, "impl<'a> {rt}::InlineView<'a> for {name}View<'a> {{");
            let _ = writeln!(out, "    const SIZE: usize = {};", s.size.total);
            let _ = writeln!(out, "    #[inline]");
            let _ = writeln!(
                out,
                "    fn from_parts(data: &'a [u8], bytes: &'a [u8]) -> Self {{"
            );
            let _ = writeln!(out, "        Self {{ data, bytes }}");
            let _ = writeln!(out, "    }}\n}}\n");
        }

        let _ = writeln!(out, "impl ::core::fmt::Debug for {name}View<'_> {{");
        let _ = writeln!(
            out,
            "    fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {{"
        );
        let _ = write!(out, "        f.debug_struct({:?})", s.name);
        for fd in fields {
            let _ = write!(
                out,
                "\n            .field({:?}, &self.{}())",
                fd.def.name, fd.ident
            );
        }
        let _ = writeln!(out, "\n            .finish()");
        let _ = writeln!(out, "    }}\n}}\n");
    }

    fn writer(&self, out: &mut String, fields: &[Field<'_>]) {
        let (s, rt, name) = (self.s, self.rt, &self.name);
        let res = |t: &str| format!("::core::result::Result<{t}, {rt}::Error>");
        let _ = writeln!(
            out,
            "/// In-place writer of a `{}`: fields are written straight into the [`{rt}::Writer`]'s buffer.\n\
             ///\n/// Setting fields in declaration order reproduces the reference layout byte for byte;\n\
             /// unset fields stay zero (their default).",
            s.name
        );
        let _ = writeln!(out, "pub struct {name}Writer<'w, 'b> {{");
        let _ = writeln!(out, "    w: &'w mut {rt}::Writer<'b>,");
        let _ = writeln!(out, "    at: usize,");
        let _ = writeln!(out, "}}\n");
        let _ = writeln!(out, "impl<'w, 'b> {name}Writer<'w, 'b> {{");
        let _ = writeln!(
            out,
            "    /// Allocates a zeroed `{}` at the end of `w` (the message root when `w` is empty).",
            s.name
        );
        let _ = writeln!(
            out,
            "    pub fn new(w: &'w mut {rt}::Writer<'b>) -> {} {{",
            res("Self")
        );
        if s.is_table() {
            let _ = writeln!(out, "        let at = w.alloc_table({})?;", s.size.total);
        } else {
            let _ = writeln!(out, "        let at = w.alloc({})?;", s.size.total);
        }
        let _ = writeln!(
            out,
            "        ::core::result::Result::Ok(Self {{ w, at: at as usize }})"
        );
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(
            out,
            "    /// A writer for a `{}` already allocated at `at` (used by generated code).",
            s.name
        );
        let _ = writeln!(out, "    #[doc(hidden)]");
        let _ = writeln!(
            out,
            "    pub fn from_raw(w: &'w mut {rt}::Writer<'b>, at: u32) -> Self {{"
        );
        let _ = writeln!(out, "        Self {{ w, at: at as usize }}");
        let _ = writeln!(out, "    }}\n");
        let _ = writeln!(out, "    /// Offset of this struct in the message.");
        let _ = writeln!(out, "    pub fn offset(&self) -> u32 {{");
        let _ = writeln!(out, "        self.at as u32");
        let _ = writeln!(out, "    }}");
        let packed = s.packed;
        for f in fields {
            let a = &f.ident;
            let o = f.def.offset;
            let at = plus("self.at", o);
            let doc = format!("field `{}` (`{}`)", f.def.name, f.def.ty.text);
            let _ = writeln!(out);
            match &f.kind {
                Kind::Prim(p) => {
                    let t = rust_prim(*p);
                    let _ = writeln!(out, "    /// Sets {doc}.");
                    let _ = writeln!(out, "    pub fn set_{a}(&mut self, v: {t}) -> &mut Self {{");
                    let _ = writeln!(out, "        self.w.put::<{t}>({at}, v);");
                    let _ = writeln!(out, "        self");
                    let _ = writeln!(out, "    }}");
                }
                Kind::Enum(e) => {
                    let t = rust_prim(e.repr);
                    let _ = writeln!(out, "    /// Sets {doc}.");
                    let _ = writeln!(
                        out,
                        "    pub fn set_{a}(&mut self, v: {}) -> &mut Self {{",
                        names::type_name(&e.name)
                    );
                    let _ = writeln!(out, "        self.w.put::<{t}>({at}, v.0);");
                    let _ = writeln!(out, "        self");
                    let _ = writeln!(out, "    }}");
                }
                Kind::Str(_) => {
                    let _ = writeln!(
                        out,
                        "    /// Appends the bytes of {doc} and points the field at them."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn set_{a}(&mut self, v: impl ::core::convert::AsRef<[u8]>) -> {} {{",
                        res("&mut Self")
                    );
                    let _ = writeln!(
                        out,
                        "        self.w.slice_of_bytes({at}, v.as_ref(), {packed})?;"
                    );
                    let _ = writeln!(out, "        ::core::result::Result::Ok(self)");
                    let _ = writeln!(out, "    }}");
                }
                Kind::CharArray(n) => {
                    let _ = writeln!(
                        out,
                        "    /// Sets {doc}: at most {n} bytes are kept, the rest stays zero."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn set_{a}(&mut self, v: impl ::core::convert::AsRef<[u8]>) -> &mut Self {{"
                    );
                    let _ = writeln!(out, "        let v = v.as_ref();");
                    let _ = writeln!(
                        out,
                        "        self.w.put_bytes({at}, &v[..v.len().min({n})]);"
                    );
                    let _ = writeln!(out, "        self");
                    let _ = writeln!(out, "    }}");
                }
                Kind::PrimSlice(p, _) => {
                    let t = rust_prim(*p);
                    let _ = writeln!(
                        out,
                        "    /// Appends the elements of {doc} and points the field at them."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn set_{a}(&mut self, v: &[{t}]) -> {} {{",
                        res("&mut Self")
                    );
                    let _ = writeln!(out, "        self.w.slice_of::<{t}>({at}, v, {packed})?;");
                    let _ = writeln!(out, "        ::core::result::Result::Ok(self)");
                    let _ = writeln!(out, "    }}");
                    // In place: the caller fills the elements where they lie, so a large
                    // payload is written once, straight into the message.
                    let _ = writeln!(
                        out,
                        "    /// Reserves {doc} for `count` elements and returns their bytes (little-endian, uninitialised) to fill in place."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn alloc_{a}(&mut self, count: usize) -> ::core::result::Result<&mut [u8], {rt}::Error> {{"
                    );
                    let _ = writeln!(
                        out,
                        "        self.w.slice_alloc_raw({at}, count, {}, {packed})",
                        p.size()
                    );
                    let _ = writeln!(out, "    }}");
                }
                Kind::PrimArray(p, n) => {
                    let t = rust_prim(*p);
                    let _ = writeln!(
                        out,
                        "    /// Sets {doc}: at most {n} elements are kept, the rest stays zero."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn set_{a}(&mut self, v: &[{t}]) -> &mut Self {{"
                    );
                    let _ = writeln!(
                        out,
                        "        for (i, x) in v.iter().take({n}).enumerate() {{"
                    );
                    let _ = writeln!(
                        out,
                        "            self.w.put::<{t}>({} + {}, *x);",
                        at,
                        times("i", p.size())
                    );
                    let _ = writeln!(out, "        }}");
                    let _ = writeln!(out, "        self");
                    let _ = writeln!(out, "    }}");
                }
                Kind::Inline(i) => {
                    let _ = writeln!(out, "    /// Writer of {doc}, stored in place.");
                    let _ = writeln!(
                        out,
                        "    pub fn {a}_mut(&mut self) -> {}Writer<'_, 'b> {{",
                        self.tn(i)
                    );
                    let _ = writeln!(
                        out,
                        "        {}Writer::from_raw(self.w, ({at}) as u32)",
                        self.tn(i)
                    );
                    let _ = writeln!(out, "    }}");
                }
                Kind::InlineArray(i, n) => {
                    let _ = writeln!(
                        out,
                        "    /// Writer of element `index` of {doc}, or `None` when `index >= {n}`."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn {a}_mut(&mut self, index: usize) -> ::core::option::Option<{}Writer<'_, 'b>> {{",
                        self.tn(i)
                    );
                    let _ = writeln!(out, "        if index >= {n} {{");
                    let _ = writeln!(out, "            return ::core::option::Option::None;");
                    let _ = writeln!(out, "        }}");
                    let _ = writeln!(
                        out,
                        "        ::core::option::Option::Some({}Writer::from_raw(self.w, ({} + {}) as u32))",
                        self.tn(i),
                        at,
                        times("index", i.size.total)
                    );
                    let _ = writeln!(out, "    }}");
                }
                Kind::InlineSlice(i, _) => {
                    let it = self.tn(i);
                    let _ = writeln!(
                        out,
                        "    /// Allocates `len` zeroed elements for {doc}, points the field at them and"
                    );
                    let _ = writeln!(
                        out,
                        "    /// calls `each(index, writer)` for every element in order."
                    );
                    let _ = writeln!(out, "    pub fn set_{a}_with(");
                    let _ = writeln!(out, "        &mut self,");
                    let _ = writeln!(out, "        len: usize,");
                    let _ = writeln!(
                        out,
                        "        mut each: impl FnMut(usize, &mut {it}Writer<'_, 'b>) -> {},",
                        res("()")
                    );
                    let _ = writeln!(out, "    ) -> {} {{", res("&mut Self"));
                    let _ = writeln!(
                        out,
                        "        let start = self.w.slice_alloc({at}, len, {}, {packed})? as usize;",
                        i.size.total
                    );
                    let _ = writeln!(out, "        for i in 0..len {{");
                    let _ = writeln!(
                        out,
                        "            let mut e = {it}Writer::from_raw(self.w, (start + {}) as u32);",
                        times("i", i.size.total)
                    );
                    let _ = writeln!(out, "            each(i, &mut e)?;");
                    let _ = writeln!(out, "        }}");
                    let _ = writeln!(out, "        ::core::result::Result::Ok(self)");
                    let _ = writeln!(out, "    }}");
                    if is_plain(self.schema, i) {
                        let _ = writeln!(
                            out,
                            "\n    /// Appends the elements of {doc} in one pass and points the field at them."
                        );
                        let _ = writeln!(
                            out,
                            "    pub fn set_{a}_from(&mut self, items: &[{it}]) -> {} {{",
                            res("&mut Self")
                        );
                        let _ = writeln!(
                            out,
                            "        let space = self.w.slice_alloc_raw({at}, items.len(), {}, {packed})?;",
                            i.size.total
                        );
                        let _ = writeln!(
                            out,
                            "        for (chunk, item) in space.chunks_exact_mut({}).zip(items) {{",
                            i.size.total
                        );
                        let _ = writeln!(out, "            item.write_plain(chunk);");
                        let _ = writeln!(out, "        }}");
                        let _ = writeln!(out, "        ::core::result::Result::Ok(self)");
                        let _ = writeln!(out, "    }}");
                    }
                }
                Kind::Table(t) => {
                    let tt = self.tn(t);
                    let _ = writeln!(
                        out,
                        "    /// Allocates the table of {doc}, points the field at it and returns its writer."
                    );
                    let _ = writeln!(
                        out,
                        "    pub fn {a}_mut(&mut self) -> {} {{",
                        res(&format!("{tt}Writer<'_, 'b>"))
                    );
                    let _ = writeln!(
                        out,
                        "        let off = self.w.alloc_table({})?;",
                        t.size.total
                    );
                    let _ = writeln!(out, "        self.w.put::<u32>({at}, off);");
                    let _ = writeln!(
                        out,
                        "        ::core::result::Result::Ok({tt}Writer::from_raw(self.w, off))"
                    );
                    let _ = writeln!(out, "    }}");
                }
            }
        }
        let _ = writeln!(out, "}}\n");
    }
}
