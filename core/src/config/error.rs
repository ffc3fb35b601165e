//! Errors and warnings of configuration loading.

use std::fmt;
use std::path::PathBuf;

/// Why a configuration could not be loaded. Every variant names the file; those about its content
/// also name the line (1-based).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `$ECAL_INI` is set but the file it names cannot be read.
    #[error("$ECAL_INI is set to {}, which cannot be read: {source} (unset ECAL_INI to search the default places)", path.display())]
    EcalIni {
        /// The value of `$ECAL_INI`.
        path: PathBuf,
        /// The error from reading it.
        source: std::io::Error,
    },
    /// The file exists (or was named explicitly) but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error from reading it.
        source: std::io::Error,
    },
    /// The file is larger than any sensible configuration.
    #[error("{}: larger than {limit} bytes; this is not an ecal.ini", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: usize,
    },
    /// A line is neither a section header, an entry nor a comment (or the file is not UTF-8).
    #[error("{}:{line}: syntax error: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The offending line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A known key has a value outside its allowed set.
    #[error("{}:{line}: [{section}] {key} = {value:?}: allowed {allowed}", path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// The offending line.
        line: usize,
        /// The section of the key (canonical spelling).
        section: &'static str,
        /// The key (canonical spelling).
        key: &'static str,
        /// The value as written (cut to 200 characters).
        value: String,
        /// What the key accepts.
        allowed: &'static str,
    },
    /// A known key is set twice in one file.
    #[error("{}:{line}: [{section}] {key} is set again (first set on line {first_line}); keep one", path.display())]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The second occurrence.
        line: usize,
        /// The first occurrence.
        first_line: usize,
        /// The section of the key (canonical spelling).
        section: &'static str,
        /// The key (canonical spelling).
        key: &'static str,
    },
    /// `[shoal_auth] key_file` names a file that cannot serve as a key.
    #[error("{}:{line}: [shoal_auth] key_file = {}: {source}", path.display(), key_file.display())]
    KeyFile {
        /// The configuration file.
        path: PathBuf,
        /// The line of `key_file`.
        line: usize,
        /// The key file it names.
        key_file: PathBuf,
        /// Why it is refused.
        source: KeyFileError,
    },
    /// Values that are each allowed but not together (e.g. timeout not above refresh).
    #[error("{}:{line}: {message}", path.display())]
    Conflict {
        /// The file.
        path: PathBuf,
        /// The line of the key that was set last in table order (the one to change, usually).
        line: usize,
        /// What conflicts and what is required.
        message: String,
    },
}

/// Why a `[shoal_auth] key_file` is refused: it must be a regular file (not a symlink) of this user, with no
/// access for group or others, holding 32 to 128 hex digits.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyFileError {
    /// It cannot be opened (missing, no permission, or a symlink: it is opened with `O_NOFOLLOW`).
    #[error("cannot open it")]
    Open(#[source] std::io::Error),
    /// Its metadata cannot be read.
    #[error("cannot read its metadata")]
    Metadata(#[source] std::io::Error),
    /// This process's user cannot be told (from `/proc/self`).
    #[error("cannot tell this process's user")]
    WhoAmI(#[source] std::io::Error),
    /// It is a directory, a device, a FIFO or a socket.
    #[error("not a regular file")]
    NotRegular,
    /// Another user owns it.
    #[error("owned by uid {owner}, not by this user (uid {me})")]
    Owner {
        /// Its owner.
        owner: u32,
        /// This process's effective user.
        me: u32,
    },
    /// Group or others may access it.
    #[error("mode {mode:04o} lets group or others at the key; refused (chmod 600 the file)")]
    Mode {
        /// Its permission bits.
        mode: u32,
    },
    /// Reading it failed.
    #[error("cannot read it")]
    Read(#[source] std::io::Error),
    /// Its first 1024 bytes are not 32 to 128 hex digits.
    #[error("does not hold a key of 32 to 128 hex digits")]
    NotAKey,
}

/// Something in a file that was accepted but is probably not what its author meant (an unknown key,
/// a key that has no effect, an eCAL 5 value that was translated, a value asking for a feature that is
/// "not supported yet"). Logged with `tracing::warn!` by [`Config::load`](super::Config::load),
/// [`Config::from_file`](super::Config::from_file) and [`Config::parse_str`](super::Config::parse_str).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file.
    pub path: PathBuf,
    /// The line (1-based).
    pub line: usize,
    /// What was noticed.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}
