//! The exit codes of `shoal` (listed in `shoal --help`) and the errors that carry them.

use std::fmt;

/// Everything worked.
pub(crate) const OK: u8 = 0;
/// A failure not covered below (I/O, the shoal node, a send).
pub(crate) const FAILURE: u8 = 1;
/// The command line is wrong: unknown option, bad value, `--data` that is not a message of `--type`, a `.proto`
/// file that does not compile (clap's own usage errors exit with 2 as well).
pub(crate) const USAGE: u8 = 2;
/// Nothing to work with: no such topic, type or service in registration, no message within `--timeout`.
pub(crate) const NOT_FOUND: u8 = 3;
/// A configuration file is invalid (`shoal config check`, or the `ecal.ini` the node would read).
pub(crate) const CONFIG: u8 = 4;

/// The text `shoal --help` ends with.
pub(crate) const HELP: &str = "\
Exit codes:
  0  success
  1  failure (I/O, the shoal node, sending; a service call no server executed)
  2  bad command line: unknown option, bad value, --data not matching --type, a .proto that does not compile
  3  not found: no such topic, type or service in registration, no message within --timeout
  4  invalid configuration file (shoal config check FILE shows every error with file:line)

Listings take --json (one JSON object per line). Logs go to stderr (RUST_LOG=debug for more).";

/// An error with its exit code; anywhere in an `anyhow` chain it decides the code.
#[derive(Debug)]
pub(crate) struct Coded {
    code: u8,
    message: String,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An error exiting with `code`.
pub(crate) fn coded(code: u8, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Coded { code, message: message.into() })
}

/// A bad command line (exit code 2).
pub(crate) fn usage(message: impl Into<String>) -> anyhow::Error {
    coded(USAGE, message)
}

/// Nothing found (exit code 3).
pub(crate) fn not_found(message: impl Into<String>) -> anyhow::Error {
    coded(NOT_FOUND, message)
}

/// The exit code of an error: the first [`Coded`] in its chain, [`CONFIG`] for a configuration error, else
/// [`FAILURE`].
pub(crate) fn code_of(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        if cause.downcast_ref::<shoal::config::ConfigError>().is_some() {
            return CONFIG;
        }
    }
    FAILURE
}

/// True when the error is a closed stdout (`shoal topic echo | head`): not a failure.
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn code_survives_context() {
        let e = Err::<(), _>(not_found("no topic")).context("echo").unwrap_err();
        assert_eq!(code_of(&e), NOT_FOUND);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), FAILURE);
        let io = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&io));
        assert_eq!(OK, 0);
    }
}
