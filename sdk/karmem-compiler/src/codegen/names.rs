//! Mapping schema names to Rust identifiers.

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// `PlainSchema` -> `plain_schema`, `HTTPCode` -> `http_code`, `Value2` -> `value2`.
pub fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if (prev.is_lowercase() || prev.is_ascii_digit() || (prev.is_uppercase() && next_lower))
                && !out.ends_with('_')
            {
                out.push('_');
            }
        }
        out.extend(c.to_lowercase());
    }
    out
}

/// `DarkRed` -> `DARK_RED`.
pub fn shouty_case(name: &str) -> String {
    snake_case(name).to_uppercase()
}

/// Appends `_` to identifiers that are Rust keywords or otherwise reserved.
pub fn escape(ident: String, reserved: &[&str]) -> String {
    if KEYWORDS.contains(&ident.as_str()) || reserved.contains(&ident.as_str()) {
        format!("{ident}_")
    } else {
        ident
    }
}

/// Rust name of a schema type (structs and enums keep their names; `Self` is escaped).
pub fn type_name(name: &str) -> String {
    escape(name.to_string(), &[])
}

/// Makes every name in `names` unique by appending `_2`, `_3`, ... to later duplicates
/// (two schema names such as `ID` and `Id` map to the same Rust name).
pub fn dedupe(names: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        let mut candidate = n.clone();
        let mut k = 2;
        while out.contains(&candidate) {
            candidate = format!("{n}_{k}");
            k += 1;
        }
        out.push(candidate);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_cases() {
        assert_eq!(snake_case("Id"), "id");
        assert_eq!(snake_case("PlainSchema"), "plain_schema");
        assert_eq!(snake_case("HTTPCode"), "http_code");
        assert_eq!(snake_case("ID"), "id");
        assert_eq!(snake_case("Value2"), "value2");
        assert_eq!(snake_case("Max_Len"), "max_len");
        assert_eq!(shouty_case("DarkRed"), "DARK_RED");
        assert_eq!(escape(snake_case("Type"), &[]), "type_");
        assert_eq!(escape("root".into(), &["root"]), "root_");
        assert_eq!(
            dedupe(vec!["id".into(), "id".into(), "x".into()]),
            vec!["id", "id_2", "x"]
        );
    }
}
