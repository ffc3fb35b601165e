//! What shoal's bridges (`bridge-ros2`, `bridge-zenoh`) share: reading a TOML configuration file so that every
//! error names the file, line and column of the value at fault, what is wrong and what is allowed ([`FileCtx`],
//! [`ConfigError`]), as the eCAL ini of the core does; and their processes' set-up ([`process`]: log output, the
//! flag that SIGTERM and SIGINT set).

pub mod process;

use std::ops::Range;
use std::path::Path;

use serde::de::DeserializeOwned;
use toml::Spanned;

/// A configuration error: where (`file:line:column`, when from a file) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A key or value in the file is wrong.
    #[error("{path}:{line}:{column}: {message}")]
    File {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A command-line value is wrong.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag.
        flag: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

/// The text of the configuration file at `path`.
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| ConfigError::Read { path: path.display().to_string(), reason: e.to_string() })
}

/// Line and column (1-based, in characters) of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A configuration file being read: its name for messages and its text, to turn a value's span into a
/// [`ConfigError::File`].
#[derive(Debug, Clone, Copy)]
pub struct FileCtx<'a> {
    path: &'a str,
    text: &'a str,
}

impl<'a> FileCtx<'a> {
    /// The file named `path` (in messages) whose text is `text`.
    pub fn new(path: &'a str, text: &'a str) -> FileCtx<'a> {
        FileCtx { path, text }
    }

    /// The text as TOML, deserialized into `T`; a syntax error or a wrong key or type is an error at its place.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            self.err(span, e.message().trim().to_string())
        })
    }

    /// An error at the value whose bytes are `span`.
    pub fn err(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let (line, column) = line_col(self.text, span.start);
        ConfigError::File { path: self.path.into(), line, column, message: message.into() }
    }

    /// The integer `v` of key `key`, which must lie in `range` (both ends allowed) and fit in `T`.
    pub fn int<T: TryFrom<i64>>(&self, v: &Spanned<i64>, key: &str, range: (i64, i64)) -> Result<T, ConfigError> {
        let x = *v.get_ref();
        if x < range.0 || x > range.1 {
            return Err(self.err(v.span(), format!("{key} = {x}: allowed {}..={}", range.0, range.1)));
        }
        T::try_from(x).map_err(|_| self.err(v.span(), format!("{key} = {x}: out of range")))
    }

    /// The string `v` of key `key` as one of the values `parse` knows (`allowed` names them, for the message).
    pub fn choice<T>(
        &self,
        v: &Spanned<String>,
        key: &str,
        parse: fn(&str) -> Option<T>,
        allowed: &str,
    ) -> Result<T, ConfigError> {
        parse(v.get_ref()).ok_or_else(|| self.err(v.span(), format!("{key} = {:?}: allowed {allowed}", v.get_ref())))
    }

    /// The string `v` of key `key` through `check`, whose error message follows `key = `.
    pub fn with<T>(
        &self,
        v: &Spanned<String>,
        key: &str,
        check: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        check(v.get_ref()).map_err(|m| self.err(v.span(), format!("{key} = {m}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        depth: Option<Spanned<i64>>,
        mode: Option<Spanned<String>>,
    }

    fn parse(text: &str) -> Result<(Option<u8>, Option<bool>), ConfigError> {
        let cx = FileCtx::new("b.toml", text);
        let f: File = cx.parse()?;
        let depth = f.depth.as_ref().map(|v| cx.int(v, "depth", (1, 1000))).transpose()?;
        let on =
            f.mode.as_ref().map(|v| cx.choice(v, "mode", |s| ["off", "on"].iter().position(|m| *m == s), "off or on"));
        Ok((depth, on.transpose()?.map(|i| i == 1)))
    }

    #[test]
    fn errors_say_file_line_column_what_and_what_is_allowed() {
        assert_eq!(parse("depth = 8\nmode = \"on\"\n"), Ok((Some(8), Some(true))));
        let e = parse("mode = \"on\"\n  depth = 0\n").unwrap_err().to_string();
        assert_eq!(e, "b.toml:2:11: depth = 0: allowed 1..=1000");
        // In range, but too large for the type asked for.
        let e = parse("depth = 300").unwrap_err().to_string();
        assert_eq!(e, "b.toml:1:9: depth = 300: out of range");
        let e = parse("depth = 2\nmode = \"maybe\"").unwrap_err().to_string();
        assert_eq!(e, "b.toml:2:8: mode = \"maybe\": allowed off or on");
        let e = parse("deep = 2").unwrap_err().to_string();
        assert!(e.starts_with("b.toml:1:1: unknown field `deep`"), "{e}");
        let e = parse("depth = [").unwrap_err().to_string();
        assert!(e.starts_with("b.toml:1:"), "{e}");
    }

    #[test]
    fn a_column_counts_characters_and_an_offset_inside_one_is_its_start() {
        let text = "é = 1\nä = ü";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 2), (1, 2));
        assert_eq!(line_col(text, 1), (1, 1));
        assert_eq!(line_col(text, text.len() + 5), (2, 6));
        let e = read_file(Path::new("/nonexistent/bridge.toml")).unwrap_err();
        assert!(matches!(&e, ConfigError::Read { path, .. } if path == "/nonexistent/bridge.toml"), "{e}");
    }
}
