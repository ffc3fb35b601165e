//! Finding and reading the configuration file. The only I/O of this module: reading one file and
//! the `ECAL_INI` and `HOME` environment variables.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::parse::Parsed;
use super::report::{ConfigReport, FoundBy};
use super::{Config, ConfigError, ConfigWarning, parse};

/// Largest file accepted (a full eCAL 5 `ecal.ini` is about 12 KiB).
pub(crate) const MAX_FILE_BYTES: usize = 1 << 20;

/// Where [`Config::load_from`] looks for a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPaths {
    /// An explicitly named file (`$ECAL_INI`): when set, it is the only file tried and it must be
    /// readable.
    pub ecal_ini: Option<PathBuf>,
    /// Files tried in order when `ecal_ini` is `None`; the first that exists is used. A missing file
    /// is skipped; one that exists but cannot be read is an error.
    pub candidates: Vec<PathBuf>,
}

impl SearchPaths {
    /// The search of [`Config::load`], from the process environment (`$ECAL_INI`, `$HOME`).
    pub fn from_env() -> Self {
        Self::new(std::env::var_os("ECAL_INI"), std::env::var_os("HOME"))
    }

    /// The standard search given the values of `$ECAL_INI` and `$HOME` (`None` or empty: unset):
    /// `$ECAL_INI`, else `./ecal.ini`, `$HOME/.ecal/ecal.ini`, `/etc/ecal/ecal.ini`.
    pub fn new(ecal_ini: Option<OsString>, home: Option<OsString>) -> Self {
        let non_empty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
        let mut candidates = vec![PathBuf::from("./ecal.ini")];
        if let Some(home) = non_empty(home) {
            candidates.push(home.join(".ecal").join("ecal.ini"));
        }
        candidates.push(PathBuf::from("/etc/ecal/ecal.ini"));
        SearchPaths { ecal_ini: non_empty(ecal_ini), candidates }
    }
}

enum ReadFailure {
    Io(io::Error),
    TooLarge,
    Utf8 { line: usize },
}

fn read_capped(path: &Path) -> Result<String, ReadFailure> {
    let file = File::open(path).map_err(ReadFailure::Io)?;
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_FILE_BYTES).unwrap_or(u64::MAX).saturating_add(1);
    file.take(limit).read_to_end(&mut bytes).map_err(ReadFailure::Io)?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(ReadFailure::TooLarge);
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let newlines = e.as_bytes().get(..valid).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count());
        ReadFailure::Utf8 { line: newlines + 1 }
    })
}

/// Why [`read_and_parse`] failed: I/O (the caller picks the error variant, or skips a missing
/// candidate) or the content.
enum Failure<E = ConfigError> {
    Io(io::Error),
    Content(E),
}

fn read_and_parse(path: &Path) -> Result<Parsed, Failure> {
    read_and_parse_all(path, 1).map_err(|e| match e {
        Failure::Io(e) => Failure::Io(e),
        Failure::Content(mut errors) => Failure::Content(errors.swap_remove(0)),
    })
}

/// [`read_and_parse`] reporting up to `max_errors` content errors (never an empty list).
fn read_and_parse_all(path: &Path, max_errors: usize) -> Result<Parsed, Failure<Vec<ConfigError>>> {
    let text = match read_capped(path) {
        Ok(text) => text,
        Err(ReadFailure::Io(e)) => return Err(Failure::Io(e)),
        Err(ReadFailure::TooLarge) => {
            return Err(Failure::Content(vec![ConfigError::TooLarge {
                path: path.to_path_buf(),
                limit: MAX_FILE_BYTES,
            }]));
        }
        Err(ReadFailure::Utf8 { line }) => {
            return Err(Failure::Content(vec![ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                message: "not valid UTF-8".to_owned(),
            }]));
        }
    };
    parse::parse_all(&text, path, max_errors).map_err(Failure::Content)
}

fn log_warnings(warnings: &[ConfigWarning]) {
    for w in warnings {
        tracing::warn!("{w}");
    }
}

/// [`Config::from_file`] with the warnings returned.
pub(crate) fn from_file(path: &Path) -> Result<(Config, Vec<ConfigWarning>), ConfigError> {
    from_file_with_lines(path).map(|(cfg, warnings, _)| (cfg, warnings))
}

/// [`from_file`] with the line of every key.
pub(crate) fn from_file_with_lines(path: &Path) -> Result<Parsed, ConfigError> {
    read_and_parse(path).map_err(|e| match e {
        Failure::Io(source) => ConfigError::Read { path: path.to_path_buf(), source },
        Failure::Content(e) => e,
    })
}

/// The search of [`Config::load_from`]: which file was used and how it was found (`None`: none, the defaults),
/// with what parsing it gave.
pub(crate) fn search(search: &SearchPaths) -> Result<(Option<(PathBuf, FoundBy)>, Parsed), ConfigError> {
    if let Some(path) = &search.ecal_ini {
        let parsed = read_and_parse(path).map_err(|e| match e {
            Failure::Io(source) => ConfigError::EcalIni { path: path.clone(), source },
            Failure::Content(e) => e,
        })?;
        return Ok((Some((path.clone(), FoundBy::EcalIni)), parsed));
    }
    for path in &search.candidates {
        match read_and_parse(path) {
            Ok(parsed) => return Ok((Some((path.clone(), FoundBy::Search)), parsed)),
            Err(Failure::Io(e)) if e.kind() == io::ErrorKind::NotFound => {}
            Err(Failure::Io(source)) => {
                return Err(ConfigError::Read { path: path.clone(), source });
            }
            Err(Failure::Content(e)) => return Err(e),
        }
    }
    Ok((None, (Config::default(), Vec::new(), vec![None; super::keys::KEYS.len()])))
}

impl Config {
    /// Loads the configuration the way every shoal process does: the file named by `$ECAL_INI`
    /// (which must then be readable), else the first existing of `./ecal.ini`,
    /// `$HOME/.ecal/ecal.ini`, `/etc/ecal/ecal.ini`, else the built-in defaults
    /// ([`Config::default`], `source: None`). Warnings are logged with `tracing::warn!`.
    pub fn load() -> Result<Config, ConfigError> {
        Config::load_from(&SearchPaths::from_env())
    }

    /// [`Config::load`] with an explicit search (tests, tools that take a `--config` option).
    pub fn load_from(search: &SearchPaths) -> Result<Config, ConfigError> {
        let (found, (cfg, warnings, _)) = self::search(search)?;
        log_warnings(&warnings);
        match found {
            Some((path, FoundBy::EcalIni)) => {
                tracing::debug!(path = %path.display(), "configuration read ($ECAL_INI)");
            }
            Some((path, FoundBy::Search | FoundBy::Explicit)) => {
                tracing::debug!(path = %path.display(), "configuration read");
            }
            None => tracing::debug!("no ecal.ini found; using the built-in defaults"),
        }
        Ok(cfg)
    }

    /// What [`Config::load_from`] would load, explained: the file and how it was found, and for every key its
    /// value and origin (default, or the file's line). Warnings are returned, not logged.
    pub fn explain_from(search: &SearchPaths) -> Result<ConfigReport, ConfigError> {
        let (found, (cfg, warnings, lines)) = self::search(search)?;
        Ok(ConfigReport::new(cfg, found, warnings, &lines))
    }

    /// Checks one file and reports every error in it (up to 100, in file order; the rules between keys run only
    /// when no line has an error), for `shoal config check`. `Ok` is the file explained as
    /// [`Config::explain_file`] does.
    pub fn check_file(path: impl AsRef<Path>) -> Result<ConfigReport, Vec<ConfigError>> {
        let path = path.as_ref();
        let (cfg, warnings, lines) = read_and_parse_all(path, parse::MAX_ERRORS).map_err(|e| match e {
            Failure::Io(source) => vec![ConfigError::Read { path: path.to_path_buf(), source }],
            Failure::Content(errors) => errors,
        })?;
        Ok(ConfigReport::new(cfg, Some((path.to_path_buf(), FoundBy::Explicit)), warnings, &lines))
    }

    /// One file explained as [`Config::explain_from`] does (the file is read as if `$ECAL_INI` named it).
    pub fn explain_file(path: impl AsRef<Path>) -> Result<ConfigReport, ConfigError> {
        let path = path.as_ref();
        let (cfg, warnings, lines) = from_file_with_lines(path)?;
        Ok(ConfigReport::new(cfg, Some((path.to_path_buf(), FoundBy::Explicit)), warnings, &lines))
    }

    /// Reads and parses one file (keys it does not set keep their defaults). Warnings are logged
    /// with `tracing::warn!`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let (cfg, warnings) = from_file(path.as_ref())?;
        log_warnings(&warnings);
        Ok(cfg)
    }

    /// [`Config::from_file`], returning the warnings instead of logging them (for a caller that shows them itself).
    pub fn from_file_with_warnings(path: impl AsRef<Path>) -> Result<(Config, Vec<ConfigWarning>), ConfigError> {
        from_file(path.as_ref())
    }

    /// Parses ini text; `origin` names it in messages and becomes [`Config::source`]. Keys the text
    /// does not set keep their defaults. Warnings are logged with `tracing::warn!`.
    pub fn parse_str(text: &str, origin: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let (cfg, warnings) = parse::parse(text, origin.as_ref())?;
        log_warnings(&warnings);
        Ok(cfg)
    }

    /// [`Config::parse_str`], returning the warnings instead of logging them.
    pub fn parse_str_with_warnings(
        text: &str,
        origin: impl AsRef<Path>,
    ) -> Result<(Config, Vec<ConfigWarning>), ConfigError> {
        parse::parse(text, origin.as_ref())
    }
}
