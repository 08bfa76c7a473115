//! Splits schema text into tokens, tracking line and column for error messages.

use crate::error::{SchemaError, Span, shorten};

/// Kinds of tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    /// Identifier or keyword (letters, digits, `_`; dots allowed after the first char
    /// for dotted tag names such as `golang.package`).
    Ident(String),
    /// Unsigned decimal number.
    Number(String),
    /// Backtick-quoted text (tag values), without the backticks.
    Quoted(String),
    /// `->`.
    Arrow,
    /// Any other single punctuation character.
    Sym(char),
    /// End of input.
    Eof,
}

impl Tok {
    /// Human-readable description for error messages, with the token's text cut as
    /// [`shorten`] does.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{}`", shorten(s)),
            Tok::Number(s) => format!("number {}", shorten(s)),
            Tok::Quoted(s) => format!("`{}`", shorten(s)),
            Tok::Arrow => "`->`".to_string(),
            Tok::Sym(c) => format!("`{c}`"),
            Tok::Eof => "end of file".to_string(),
        }
    }
}

/// A token and where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Its position.
    pub span: Span,
}

struct Cursor<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: u32,
    column: u32,
}

impl Cursor<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }
    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }
    fn span(&self) -> Span {
        Span {
            line: self.line,
            column: self.column,
        }
    }
}

/// Tokenizes `src`. Whitespace, `// line` and `/* block */` comments are skipped, and a
/// leading UTF-8 byte-order mark is ignored (the reference parser does the same).
pub fn tokenize(file: &str, src: &str) -> Result<Vec<Token>, SchemaError> {
    let src = src.strip_prefix('\u{feff}').unwrap_or(src);
    let mut cur = Cursor {
        chars: src.chars().peekable(),
        line: 1,
        column: 1,
    };
    let mut out = Vec::new();
    loop {
        let span = cur.span();
        let Some(c) = cur.peek() else {
            out.push(Token {
                tok: Tok::Eof,
                span,
            });
            return Ok(out);
        };
        if c.is_whitespace() {
            cur.bump();
            continue;
        }
        if c == '/' {
            cur.bump();
            match cur.peek() {
                Some('/') => {
                    while cur.peek().is_some_and(|c| c != '\n') {
                        cur.bump();
                    }
                }
                Some('*') => {
                    cur.bump();
                    let mut prev = '\0';
                    loop {
                        match cur.bump() {
                            Some('/') if prev == '*' => break,
                            Some(c) => prev = c,
                            None => {
                                return Err(SchemaError::new(
                                    file,
                                    span,
                                    "unterminated block comment",
                                ));
                            }
                        }
                    }
                }
                _ => return Err(SchemaError::new(file, span, "unexpected `/`")),
            }
            continue;
        }
        let tok = if c.is_alphabetic() || c == '_' {
            let mut s = String::new();
            while let Some(c) = cur
                .peek()
                .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
            {
                s.push(c);
                cur.bump();
            }
            Tok::Ident(s)
        } else if c.is_ascii_digit() {
            let mut s = String::new();
            while let Some(c) = cur
                .peek()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                s.push(c);
                cur.bump();
            }
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(SchemaError::new(
                    file,
                    span,
                    format!("invalid number `{}`", shorten(&s)),
                ));
            }
            Tok::Number(s)
        } else if c == '`' {
            cur.bump();
            let mut s = String::new();
            loop {
                match cur.bump() {
                    Some('`') => break,
                    Some('\n') | None => {
                        return Err(SchemaError::new(
                            file,
                            span,
                            "unterminated backtick-quoted value",
                        ));
                    }
                    Some(c) => s.push(c),
                }
            }
            Tok::Quoted(s)
        } else if c == '-' {
            cur.bump();
            if cur.peek() == Some('>') {
                cur.bump();
                Tok::Arrow
            } else {
                Tok::Sym('-')
            }
        } else if "@(){}[]<>;:,=".contains(c) {
            cur.bump();
            Tok::Sym(c)
        } else {
            return Err(SchemaError::new(
                file,
                span,
                format!("unexpected character {c:?}"),
            ));
        };
        out.push(Token { tok, span });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_lines_and_columns() {
        let toks = tokenize("t.km", "karmem x;\n  struct A table {\n").unwrap();
        assert_eq!(toks[0].span, Span { line: 1, column: 1 });
        assert_eq!(toks[3].tok, Tok::Ident("struct".into()));
        assert_eq!(toks[3].span, Span { line: 2, column: 3 });
    }

    #[test]
    fn skips_comments_and_reads_quoted_values() {
        let toks = tokenize("t.km", "// c\n/* b\n */ @id(`12`) -> [<4]").unwrap();
        let kinds: Vec<_> = toks.into_iter().map(|t| t.tok).collect();
        assert_eq!(
            kinds,
            vec![
                Tok::Sym('@'),
                Tok::Ident("id".into()),
                Tok::Sym('('),
                Tok::Quoted("12".into()),
                Tok::Sym(')'),
                Tok::Arrow,
                Tok::Sym('['),
                Tok::Sym('<'),
                Tok::Number("4".into()),
                Tok::Sym(']'),
                Tok::Eof
            ]
        );
    }

    #[test]
    fn reports_bad_characters_with_position() {
        let err = tokenize("t.km", "karmem x;\n  #").unwrap_err();
        assert_eq!(err.to_string(), "t.km:2:3: unexpected character '#'");
    }
}
