//! Recursive-descent parser: tokens to unresolved declarations.
//!
//! Grammar (the published Karmem language plus interfaces from the Karmem paper):
//!
//! ```text
//! file      = "karmem" NAME tag* ";" item*
//! tag       = "@" NAME [ "(" [ value ] ")" ]
//! item      = enum | struct | interface
//! enum      = "enum" Name inttype tag* "{" ( Name [ "=" ["-"] NUMBER ] tag* ";" )* "}"
//! struct    = "struct" Name ( "inline" | "table" ) tag* "{" ( Name type tag* ";" )+ "}"
//! type      = Name | "[" NUMBER "]" Name | "[" "]" Name | "[" "<" NUMBER "]" Name
//! interface = "interface" name [ "(" name { "," name } ")" ] tag* "{" member* "}"
//! member    = name ":" "memory" "(" mem-item { "," mem-item } ")" ";"
//!           | name ":" "fn" signature ";"  |  "fn" name signature ";"
//! mem-item  = "import" ":" access | "export" ":" access | [ "pages" ":" ] NUMBER
//! signature = "(" [ arg { "," arg } ] ")" [ "->" Name "@" name ]
//! arg       = name ":" Name "@" name
//! ```

use crate::ast::{Access, StructKind, Tag};
use crate::error::{SchemaError, Span, shorten};
use crate::lexer::{Lexer, Tok, Token};

/// A tag with its position.
#[derive(Debug, Clone)]
pub(crate) struct RawTag {
    pub tag: Tag,
    pub span: Span,
}

/// The whole file before name resolution.
#[derive(Debug)]
pub(crate) struct RawSchema {
    pub name: String,
    pub tags: Vec<RawTag>,
    pub items: Vec<RawItem>,
}

#[derive(Debug)]
pub(crate) enum RawItem {
    Enum(RawEnum),
    Struct(RawStruct),
    Interface(RawInterface),
}

#[derive(Debug)]
pub(crate) struct RawEnum {
    pub name: String,
    pub span: Span,
    pub repr: String,
    pub repr_span: Span,
    pub tags: Vec<RawTag>,
    pub variants: Vec<RawVariant>,
}

#[derive(Debug)]
pub(crate) struct RawVariant {
    pub name: String,
    pub span: Span,
    /// Explicit value as text (with sign) and its position.
    pub value: Option<(String, Span)>,
}

#[derive(Debug)]
pub(crate) struct RawStruct {
    pub name: String,
    pub span: Span,
    pub kind: StructKind,
    pub tags: Vec<RawTag>,
    pub fields: Vec<RawField>,
}

#[derive(Debug)]
pub(crate) enum RawShape {
    Single,
    Array(u32),
    Slice,
    Limited(u32),
}

#[derive(Debug)]
pub(crate) struct RawField {
    pub name: String,
    pub span: Span,
    pub shape: RawShape,
    pub base: String,
    pub text: String,
    pub ty_span: Span,
    pub tags: Vec<RawTag>,
}

#[derive(Debug)]
pub(crate) struct RawInterface {
    pub name: String,
    pub span: Span,
    pub patterns: Vec<String>,
    pub tags: Vec<RawTag>,
    pub memories: Vec<RawMemory>,
    pub functions: Vec<RawFunction>,
}

#[derive(Debug)]
pub(crate) struct RawMemory {
    pub name: String,
    pub span: Span,
    pub importer: Access,
    pub exporter: Access,
    pub max_pages: u32,
}

#[derive(Debug)]
pub(crate) struct RawArg {
    pub name: String,
    pub span: Span,
    pub type_name: String,
    pub type_span: Span,
    pub memory: String,
    pub memory_span: Span,
}

#[derive(Debug)]
pub(crate) struct RawFunction {
    pub name: String,
    pub span: Span,
    pub args: Vec<RawArg>,
    pub result: Option<RawArg>,
}

struct Parser<'a> {
    file: &'a str,
    lexer: Lexer<'a>,
    /// The current token and the one after it: all the grammar looks ahead.
    ahead: [Token<'a>; 2],
    /// The lexer's error, which the parser sees as the end of the file.
    lex_error: Option<SchemaError>,
}

/// Parses the tokens `lexer` makes into declarations, taking them as it goes: a file
/// wrong from its third token is not read further.
pub(crate) fn parse(file: &str, mut lexer: Lexer<'_>) -> Result<RawSchema, SchemaError> {
    let mut lex_error = None;
    let first = pull(&mut lexer, &mut lex_error);
    let ahead = [first, pull(&mut lexer, &mut lex_error)];
    let mut parser = Parser {
        file,
        lexer,
        ahead,
        lex_error,
    };
    let parsed = parser.file();
    // The lexer's error is reported if the parse took its stand-in for the end of the
    // file, or if it comes first in the text: the parser may have stopped at the
    // stand-in, or at a token before it that the stand-in, looked at ahead, made
    // wrong; on the same spot, the lexer's says what is there.
    match (parsed, parser.lex_error) {
        (Ok(_), Some(lexed)) => Err(lexed),
        (Err(parse), Some(lexed)) if (lexed.line, lexed.column) <= (parse.line, parse.column) => {
            Err(lexed)
        }
        (parsed, _) => parsed,
    }
}

/// The next token from `lexer`: the end of the file once it failed, keeping its first
/// error in `lex_error`.
fn pull<'a>(lexer: &mut Lexer<'a>, lex_error: &mut Option<SchemaError>) -> Token<'a> {
    let end = |lexer: &Lexer<'_>| Token {
        tok: Tok::Eof,
        span: lexer.span(),
    };
    if lex_error.is_some() {
        return end(lexer);
    }
    lexer.next_token().unwrap_or_else(|err| {
        *lex_error = Some(err);
        end(lexer)
    })
}

impl<'a> Parser<'a> {
    fn peek(&self) -> &Token<'a> {
        &self.ahead[0]
    }

    /// The token `n` places ahead; 0 and 1 are all the grammar needs.
    fn peek_at(&self, n: usize) -> &Tok<'a> {
        debug_assert!(
            n <= 1,
            "the parser looks at most one token past the current one"
        );
        &self.ahead[n.min(1)].tok
    }

    /// Moves to the next token, unless at the end.
    fn advance(&mut self) {
        if self.ahead[0].tok == Tok::Eof {
            return;
        }
        self.ahead[0] = self.ahead[1];
        self.ahead[1] = pull(&mut self.lexer, &mut self.lex_error);
    }

    fn next(&mut self) -> Token<'a> {
        let t = *self.peek();
        self.advance();
        t
    }

    fn err<T>(&self, span: Span, msg: impl Into<String>) -> Result<T, SchemaError> {
        Err(SchemaError::new(self.file, span, msg))
    }

    fn unexpected<T>(&self, expected: &str) -> Result<T, SchemaError> {
        let t = self.peek();
        self.err(
            t.span,
            format!("expected {expected}, found {}", t.tok.describe()),
        )
    }

    fn is_sym(&self, c: char) -> bool {
        self.peek().tok == Tok::Sym(c)
    }

    fn eat_sym(&mut self, c: char) -> bool {
        if self.is_sym(c) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, c: char) -> Result<Span, SchemaError> {
        if self.is_sym(c) {
            Ok(self.next().span)
        } else {
            self.unexpected(&format!("`{c}`"))
        }
    }

    fn expect_ident(&mut self, what: &str) -> Result<(String, Span), SchemaError> {
        match self.peek().tok {
            Tok::Ident(s) if !s.contains('.') => Ok((s.to_owned(), self.next().span)),
            _ => self.unexpected(what),
        }
    }

    fn expect_number(&mut self, what: &str) -> Result<(u32, Span), SchemaError> {
        match self.peek().tok {
            Tok::Number(s) => {
                let span = self.peek().span;
                let n = s.parse::<u32>().or_else(|_| {
                    self.err(
                        span,
                        format!("{what} `{}` does not fit in 32 bits", shorten(s)),
                    )
                })?;
                self.next();
                Ok((n, span))
            }
            _ => self.unexpected(what),
        }
    }

    /// `tag*`: `@name`, `@name()`, `@name(value)`.
    fn tags(&mut self) -> Result<Vec<RawTag>, SchemaError> {
        let mut tags = Vec::new();
        while self.is_sym('@') {
            let span = self.next().span;
            let name = match self.peek().tok {
                Tok::Ident(s) => s,
                _ => return self.unexpected("tag name after `@`"),
            };
            self.next();
            let mut value = String::new();
            if self.eat_sym('(') {
                if self.eat_sym('-') {
                    value.push('-');
                }
                match self.peek().tok {
                    Tok::Ident(s) | Tok::Number(s) | Tok::Quoted(s) => {
                        value.push_str(s);
                        self.next();
                    }
                    _ => {}
                }
                self.expect_sym(')')?;
            }
            tags.push(RawTag {
                tag: Tag {
                    name: name.to_owned(),
                    value,
                },
                span,
            });
        }
        Ok(tags)
    }

    fn file(&mut self) -> Result<RawSchema, SchemaError> {
        if !matches!(self.peek().tok, Tok::Ident(s) if s == "karmem") {
            return self.unexpected("header `karmem <package name> [@tag(value)];`");
        }
        self.next();
        let (name, _) = self.expect_ident("package name")?;
        let tags = self.tags()?;
        self.expect_sym(';')?;
        let mut items = Vec::new();
        loop {
            let t = *self.peek();
            match t.tok {
                Tok::Eof => break,
                Tok::Ident("enum") => items.push(RawItem::Enum(self.enum_decl()?)),
                Tok::Ident("struct") => items.push(RawItem::Struct(self.struct_decl()?)),
                Tok::Ident("interface") => items.push(RawItem::Interface(self.interface_decl()?)),
                _ => return self.unexpected("`enum`, `struct` or `interface`"),
            }
        }
        Ok(RawSchema { name, tags, items })
    }

    fn enum_decl(&mut self) -> Result<RawEnum, SchemaError> {
        self.next();
        let (name, span) = self.expect_ident("enum name")?;
        let (repr, repr_span) = self.expect_ident("enum type (uint8, int32, ...)")?;
        let tags = self.tags()?;
        self.expect_sym('{')?;
        let mut variants = Vec::new();
        while !self.eat_sym('}') {
            let (vname, vspan) = self.expect_ident("enum variant name or `}`")?;
            let mut value = None;
            if self.eat_sym('=') {
                let neg = self.eat_sym('-');
                let t = self.next();
                match t.tok {
                    Tok::Number(n) => {
                        let text = if neg { format!("-{n}") } else { n.to_owned() };
                        value = Some((text, t.span));
                    }
                    other => {
                        return self.err(
                            t.span,
                            format!("expected enum value, found {}", other.describe()),
                        );
                    }
                }
            }
            // Tags on variants are accepted (and ignored) like the reference does.
            self.tags()?;
            self.expect_sym(';')?;
            variants.push(RawVariant {
                name: vname,
                span: vspan,
                value,
            });
        }
        Ok(RawEnum {
            name,
            span,
            repr,
            repr_span,
            tags,
            variants,
        })
    }

    fn struct_decl(&mut self) -> Result<RawStruct, SchemaError> {
        self.next();
        let (name, span) = self.expect_ident("struct name")?;
        let kind = match self.peek().tok {
            Tok::Ident("inline") => StructKind::Inline,
            Tok::Ident("table") => StructKind::Table,
            _ => return self.unexpected("struct kind `inline` or `table`"),
        };
        self.next();
        let tags = self.tags()?;
        self.expect_sym('{')?;
        let mut fields = Vec::new();
        while !self.eat_sym('}') {
            let (fname, fspan) = self.expect_ident("field name or `}`")?;
            let ty_span = self.peek().span;
            let (shape, text_prefix) = self.shape()?;
            let (base, _) = self.expect_ident("field type")?;
            let text = format!("{text_prefix}{base}");
            let ftags = self.tags()?;
            self.expect_sym(';')?;
            fields.push(RawField {
                name: fname,
                span: fspan,
                shape,
                base,
                text,
                ty_span,
                tags: ftags,
            });
        }
        Ok(RawStruct {
            name,
            span,
            kind,
            tags,
            fields,
        })
    }

    /// Optional `[N]`, `[]` or `[<N]` before a type name.
    fn shape(&mut self) -> Result<(RawShape, String), SchemaError> {
        if !self.eat_sym('[') {
            return Ok((RawShape::Single, String::new()));
        }
        if self.eat_sym(']') {
            return Ok((RawShape::Slice, "[]".into()));
        }
        let limited = self.eat_sym('<');
        let (n, _) = self.expect_number("array length")?;
        self.expect_sym(']')?;
        Ok(if limited {
            (RawShape::Limited(n), format!("[<{n}]"))
        } else {
            (RawShape::Array(n), format!("[{n}]"))
        })
    }

    fn interface_decl(&mut self) -> Result<RawInterface, SchemaError> {
        self.next();
        let (name, span) = self.expect_ident("interface name")?;
        let mut patterns = Vec::new();
        if self.eat_sym('(') {
            while !self.eat_sym(')') {
                patterns.push(self.expect_ident("communication pattern")?.0);
                if !self.eat_sym(',') && !self.is_sym(')') {
                    return self.unexpected("`,` or `)`");
                }
            }
        }
        let tags = self.tags()?;
        self.expect_sym('{')?;
        let mut memories = Vec::new();
        let mut functions = Vec::new();
        while !self.eat_sym('}') {
            if matches!(self.peek().tok, Tok::Ident(k) if k == "fn")
                && matches!(self.peek_at(1), Tok::Ident(_))
            {
                self.next();
                let (fname, fspan) = self.expect_ident("function name")?;
                functions.push(self.signature(fname, fspan)?);
                continue;
            }
            let (mname, mspan) = self.expect_ident("member name or `}`")?;
            self.expect_sym(':')?;
            match self.peek().tok {
                Tok::Ident("memory") => {
                    self.next();
                    memories.push(self.memory(mname, mspan)?);
                }
                Tok::Ident("fn") => {
                    self.next();
                    functions.push(self.signature(mname, mspan)?);
                }
                _ => return self.unexpected("`memory` or `fn`"),
            }
        }
        Ok(RawInterface {
            name,
            span,
            patterns,
            tags,
            memories,
            functions,
        })
    }

    fn access(&mut self) -> Result<Access, SchemaError> {
        let (word, span) = self.expect_ident("access (`none`, `read`, `write` or `readwrite`)")?;
        match Access::from_keyword(&word) {
            Some(a) => Ok(a),
            None => self.err(
                span,
                format!(
                    "unknown access `{}`, expected `none`, `read`, `write` or `readwrite`",
                    shorten(&word)
                ),
            ),
        }
    }

    /// `( import: ACCESS, export: ACCESS, PAGES );` in any order.
    fn memory(&mut self, name: String, span: Span) -> Result<RawMemory, SchemaError> {
        let open = self.expect_sym('(')?;
        let (mut importer, mut exporter, mut pages) = (None, None, None);
        while !self.eat_sym(')') {
            let t = *self.peek();
            match t.tok {
                Tok::Ident(k) if k == "import" || k == "export" => {
                    self.next();
                    self.expect_sym(':')?;
                    let a = self.access()?;
                    let slot = if k == "import" {
                        &mut importer
                    } else {
                        &mut exporter
                    };
                    if slot.replace(a).is_some() {
                        return self.err(t.span, format!("`{k}` given twice"));
                    }
                }
                Tok::Ident(k) if k == "pages" || k == "max" => {
                    self.next();
                    self.expect_sym(':')?;
                    let (n, s) = self.expect_number("maximum number of pages")?;
                    if pages.replace((n, s)).is_some() {
                        return self.err(t.span, "maximum size given twice");
                    }
                }
                Tok::Number(_) => {
                    let (n, s) = self.expect_number("maximum number of pages")?;
                    if pages.replace((n, s)).is_some() {
                        return self.err(t.span, "maximum size given twice");
                    }
                }
                _ => return self.unexpected("`import: ...`, `export: ...` or a number of pages"),
            }
            if !self.eat_sym(',') && !self.is_sym(')') {
                return self.unexpected("`,` or `)`");
            }
        }
        self.expect_sym(';')?;
        let Some(importer) = importer else {
            return self.err(open, "memory needs `import: <access>`");
        };
        let Some(exporter) = exporter else {
            return self.err(open, "memory needs `export: <access>`");
        };
        let Some((max_pages, pspan)) = pages else {
            return self.err(open, "memory needs a maximum size in 64 KiB pages");
        };
        if max_pages == 0 || max_pages > 65536 {
            return self.err(
                pspan,
                format!("maximum size must be 1..=65536 pages (4 GiB), got {max_pages}"),
            );
        }
        Ok(RawMemory {
            name,
            span,
            importer,
            exporter,
            max_pages,
        })
    }

    fn arg(&mut self, name: String, span: Span) -> Result<RawArg, SchemaError> {
        let (type_name, type_span) = self.expect_ident("argument type")?;
        self.expect_sym('@')?;
        let (memory, memory_span) = self.expect_ident("memory name after `@`")?;
        Ok(RawArg {
            name,
            span,
            type_name,
            type_span,
            memory,
            memory_span,
        })
    }

    /// `( args ) [-> Type @ memory] ;`
    fn signature(&mut self, name: String, span: Span) -> Result<RawFunction, SchemaError> {
        self.expect_sym('(')?;
        let mut args = Vec::new();
        while !self.eat_sym(')') {
            let (aname, aspan) = self.expect_ident("argument name or `)`")?;
            self.expect_sym(':')?;
            args.push(self.arg(aname, aspan)?);
            if !self.eat_sym(',') && !self.is_sym(')') {
                return self.unexpected("`,` or `)`");
            }
        }
        let mut result = None;
        if self.peek().tok == Tok::Arrow {
            let rspan = self.next().span;
            result = Some(self.arg("result".into(), rspan)?);
        }
        self.expect_sym(';')?;
        Ok(RawFunction {
            name,
            span,
            args,
            result,
        })
    }
}
