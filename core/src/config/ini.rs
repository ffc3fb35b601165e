//! The line-level `ecal.ini` lexer.
//!
//! Hand-written on purpose: the maintained crates.io ini parsers do not fit. `rust-ini` (0.21) merges
//! repeated keys into a multimap and keeps line numbers only for its own syntax errors, so neither
//! "duplicate key on line N" nor "bad value on line N" can be reported; `ini_core` (0.2) streams items
//! without any position at all. The syntax needed here (sections, `key = value`, `;`/`#` comments,
//! optional double quotes) is a few dozen lines, and owning it lets every error carry its line.
//!
//! Syntax accepted, per line (leading/trailing whitespace ignored):
//! - empty, or starting with `;` or `#`: a comment;
//! - `[name]`, optionally followed by a comment: a section header;
//! - `key = value`: an entry. `value` may be wrapped in double quotes (no escapes; the quotes are
//!   removed). Unquoted, a `;` or `#` that starts the value or follows whitespace begins a comment.
//!   Key names consist of ASCII letters, digits, `_`, `-` and `.`.

/// One classified line of an ini file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// Empty or comment-only.
    Blank,
    /// `[name]` (the name trimmed).
    Section(&'a str),
    /// `key = value` (both trimmed, quotes and trailing comment removed from the value).
    Entry {
        /// The key as written.
        key: &'a str,
        /// The value as written, unquoted.
        value: &'a str,
    },
}

/// Classifies one line; `Err` carries a syntax message (without file or line).
pub(crate) fn parse_line(raw: &str) -> Result<Line<'_>, String> {
    let line = raw.trim();
    if line.is_empty() || is_comment(line) {
        return Ok(Line::Blank);
    }
    if let Some(rest) = line.strip_prefix('[') {
        let Some(end) = rest.find(']') else {
            return Err("section header without closing `]`".to_owned());
        };
        let name = rest[..end].trim();
        let after = rest[end + 1..].trim();
        if !(after.is_empty() || is_comment(after)) {
            return Err(format!("unexpected text after section header: {after:?}"));
        }
        if name.is_empty() {
            return Err("empty section name `[]`".to_owned());
        }
        if !name.chars().all(is_name_char) {
            return Err(format!("invalid section name {name:?} (allowed: ASCII letters, digits, `_`, `-`, `.`)"));
        }
        return Ok(Line::Section(name));
    }
    let Some((key, rest)) = line.split_once('=') else {
        return Err(format!("expected `[section]`, `key = value` or a comment (`;` or `#`), found {line:?}"));
    };
    let key = key.trim();
    if key.is_empty() {
        return Err("entry without a key name before `=`".to_owned());
    }
    if !key.chars().all(is_name_char) {
        return Err(format!("invalid key name {key:?} (allowed: ASCII letters, digits, `_`, `-`, `.`)"));
    }
    let value = parse_value(rest.trim())?;
    Ok(Line::Entry { key, value })
}

fn is_comment(s: &str) -> bool {
    s.starts_with(';') || s.starts_with('#')
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// `v` is trimmed. Removes quotes or an inline comment.
fn parse_value(v: &str) -> Result<&str, String> {
    if let Some(inner) = v.strip_prefix('"') {
        let Some(end) = inner.find('"') else {
            return Err("value has an opening `\"` but no closing one".to_owned());
        };
        let after = inner[end + 1..].trim();
        if !(after.is_empty() || is_comment(after)) {
            return Err(format!("unexpected text after the quoted value: {after:?}"));
        }
        return Ok(&inner[..end]);
    }
    let mut prev_ws = true;
    for (i, c) in v.char_indices() {
        if prev_ws && (c == ';' || c == '#') {
            return Ok(v[..i].trim_end());
        }
        prev_ws = c.is_whitespace();
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_lines() {
        assert_eq!(parse_line(""), Ok(Line::Blank));
        assert_eq!(parse_line("   ; comment"), Ok(Line::Blank));
        assert_eq!(parse_line("# comment = x"), Ok(Line::Blank));
        assert_eq!(parse_line(" [network] "), Ok(Line::Section("network")));
        assert_eq!(parse_line("[ a.b ] ; c"), Ok(Line::Section("a.b")));
        assert_eq!(parse_line("multicast_ttl = 3"), Ok(Line::Entry { key: "multicast_ttl", value: "3" }));
        assert_eq!(parse_line("k="), Ok(Line::Entry { key: "k", value: "" }));
        assert_eq!(parse_line("k = ; nothing"), Ok(Line::Entry { key: "k", value: "" }));
        assert_eq!(parse_line("k = 3 # hops"), Ok(Line::Entry { key: "k", value: "3" }));
        assert_eq!(parse_line("k = a;b#c"), Ok(Line::Entry { key: "k", value: "a;b#c" }));
        assert_eq!(parse_line("k = \" a ; b \" ; c"), Ok(Line::Entry { key: "k", value: " a ; b " }));
        assert_eq!(parse_line("k = x = y"), Ok(Line::Entry { key: "k", value: "x = y" }));
    }

    #[test]
    fn rejects_malformed_lines() {
        for bad in
            ["[network", "[]", "[net work]", "[a] b", "just words", "= 3", "my key = 3", "k = \"open", "k = \"a\" b"]
        {
            assert!(parse_line(bad).is_err(), "{bad:?} should be a syntax error");
        }
    }
}
