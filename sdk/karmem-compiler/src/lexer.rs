//! Splits schema text into tokens, tracking line and column for error messages.
//!
//! Tokens are made one at a time as the parser asks for them ([`Lexer::next_token`])
//! and borrow their text from the schema: a schema is a tenant's upload, and a list of
//! every token, each with a copy of its text, held about 65 times the schema's size
//! (tokens past the first error included).

use crate::error::{SchemaError, Span, shorten};

/// Kinds of tokens, borrowing their text from the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok<'a> {
    /// Identifier or keyword (letters, digits, `_`; dots allowed after the first char
    /// for dotted tag names such as `golang.package`).
    Ident(&'a str),
    /// Unsigned decimal number.
    Number(&'a str),
    /// Backtick-quoted text (tag values), without the backticks.
    Quoted(&'a str),
    /// `->`.
    Arrow,
    /// Any other single punctuation character.
    Sym(char),
    /// End of input.
    Eof,
}

impl Tok<'_> {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'a> {
    /// The token.
    pub tok: Tok<'a>,
    /// Its position.
    pub span: Span,
}

/// Makes the tokens of one schema text, in order. Whitespace, `// line` and
/// `/* block */` comments are skipped, and a leading UTF-8 byte-order mark is ignored
/// (the reference parser does the same).
pub struct Lexer<'a> {
    file: &'a str,
    /// The text not read yet.
    rest: &'a str,
    line: u32,
    column: u32,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `src`, naming `file` in its errors.
    pub fn new(file: &'a str, src: &'a str) -> Self {
        Self {
            file,
            rest: src.strip_prefix('\u{feff}').unwrap_or(src),
            line: 1,
            column: 1,
        }
    }

    fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.rest = &self.rest[c.len_utf8()..];
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    /// Where the next character is.
    pub fn span(&self) -> Span {
        Span {
            line: self.line,
            column: self.column,
        }
    }

    /// Moves past the characters `keep` accepts and returns them.
    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let start = self.rest;
        while self.peek().is_some_and(&keep) {
            self.bump();
        }
        &start[..start.len() - self.rest.len()]
    }

    fn error(&self, span: Span, message: impl Into<String>) -> SchemaError {
        SchemaError::new(self.file, span, message)
    }

    /// The next token; [`Tok::Eof`] at the end, and again after it.
    ///
    /// # Errors
    /// An unterminated comment or quoted value, a malformed number, a character no
    /// token starts with.
    pub fn next_token(&mut self) -> Result<Token<'a>, SchemaError> {
        loop {
            let span = self.span();
            let Some(c) = self.peek() else {
                return Ok(Token {
                    tok: Tok::Eof,
                    span,
                });
            };
            if c.is_whitespace() {
                self.bump();
                continue;
            }
            if c == '/' {
                self.skip_comment(span)?;
                continue;
            }
            let tok = self.token(c, span)?;
            return Ok(Token { tok, span });
        }
    }

    /// Skips the comment starting with the `/` at `span`.
    fn skip_comment(&mut self, span: Span) -> Result<(), SchemaError> {
        self.bump();
        match self.peek() {
            Some('/') => {
                self.take_while(|c| c != '\n');
                Ok(())
            }
            Some('*') => {
                self.bump();
                let mut prev = '\0';
                loop {
                    match self.bump() {
                        Some('/') if prev == '*' => return Ok(()),
                        Some(c) => prev = c,
                        None => return Err(self.error(span, "unterminated block comment")),
                    }
                }
            }
            _ => Err(self.error(span, "unexpected `/`")),
        }
    }

    /// The token starting with `c` at `span` (no whitespace or comment).
    fn token(&mut self, c: char, span: Span) -> Result<Tok<'a>, SchemaError> {
        if c.is_alphabetic() || c == '_' {
            return Ok(Tok::Ident(
                self.take_while(|c| c.is_alphanumeric() || c == '_' || c == '.'),
            ));
        }
        if c.is_ascii_digit() {
            let s = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(self.error(span, format!("invalid number `{}`", shorten(s))));
            }
            return Ok(Tok::Number(s));
        }
        self.bump();
        match c {
            '`' => {
                let s = self.take_while(|c| c != '`' && c != '\n');
                if self.bump() != Some('`') {
                    return Err(self.error(span, "unterminated backtick-quoted value"));
                }
                Ok(Tok::Quoted(s))
            }
            '-' if self.peek() == Some('>') => {
                self.bump();
                Ok(Tok::Arrow)
            }
            '-' => Ok(Tok::Sym('-')),
            c if "@(){}[]<>;:,=".contains(c) => Ok(Tok::Sym(c)),
            c => Err(self.error(span, format!("unexpected character {c:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every token of `src`, up to and with the end.
    fn tokenize<'a>(file: &'a str, src: &'a str) -> Result<Vec<Token<'a>>, SchemaError> {
        let mut lexer = Lexer::new(file, src);
        let mut out = Vec::new();
        loop {
            let token = lexer.next_token()?;
            out.push(token);
            if token.tok == Tok::Eof {
                return Ok(out);
            }
        }
    }

    #[test]
    fn tracks_lines_and_columns() {
        let toks = tokenize("t.km", "karmem x;\n  struct A table {\n").unwrap();
        assert_eq!(toks[0].span, Span { line: 1, column: 1 });
        assert_eq!(toks[3].tok, Tok::Ident("struct"));
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
                Tok::Ident("id"),
                Tok::Sym('('),
                Tok::Quoted("12"),
                Tok::Sym(')'),
                Tok::Arrow,
                Tok::Sym('['),
                Tok::Sym('<'),
                Tok::Number("4"),
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
