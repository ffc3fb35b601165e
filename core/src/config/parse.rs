//! From ini text to a validated [`Config`]: entries are applied in file order through the key
//! declarations of [`super::keys`], then the cross-field rules run.

use std::path::Path;

use super::ini::{self, Line};
use super::keys::{self, Draft, KEYS};
use super::{Config, ConfigError, ConfigWarning};

/// A parsed file: the configuration, its warnings and the line on which each key of [`KEYS`] was set (`None`: not
/// set, default kept), by index in `KEYS`.
pub(crate) type Parsed = (Config, Vec<ConfigWarning>, Vec<Option<usize>>);

/// Longest value quoted back in an error message, in characters.
const MAX_VALUE_IN_ERROR: usize = 200;

/// Parses `text`; `origin` is used in messages and as [`Config::source`].
pub(crate) fn parse(text: &str, origin: &Path) -> Result<(Config, Vec<ConfigWarning>), ConfigError> {
    parse_with_lines(text, origin).map(|(cfg, warnings, _)| (cfg, warnings))
}

/// [`parse`], also returning the line on which each key of [`KEYS`] was set (`None`: not set, default kept), by
/// index in `KEYS`.
pub(crate) fn parse_with_lines(text: &str, origin: &Path) -> Result<Parsed, ConfigError> {
    parse_all(text, origin, 1).map_err(|mut errors| errors.swap_remove(0))
}

/// Most errors [`parse_all`] collects from one file for a caller that wants them all.
pub(crate) const MAX_ERRORS: usize = 100;

/// [`parse_with_lines`] that goes on after an error, up to `max_errors` (at least 1) of them: the errors of every
/// line, in file order (the cross-field rules run only on a file without line errors). `Err` is never empty.
pub(crate) fn parse_all(text: &str, origin: &Path, max_errors: usize) -> Result<Parsed, Vec<ConfigError>> {
    let max_errors = max_errors.max(1);
    let mut errors: Vec<ConfigError> = Vec::new();
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut draft = Draft::new(Config::default());
    let mut warnings = Vec::new();
    let warning = |line: usize, message: String| ConfigWarning { path: origin.to_path_buf(), line, message };
    // Line on which each key of KEYS was set.
    let mut seen: Vec<Option<usize>> = vec![None; KEYS.len()];
    // Current section and whether shoal reads any key of it.
    let mut section: Option<(&str, bool)> = None;

    for (index, raw) in text.lines().enumerate() {
        if errors.len() >= max_errors {
            break;
        }
        let line = index + 1;
        let parsed = match ini::parse_line(raw) {
            Ok(p) => p,
            Err(message) => {
                errors.push(ConfigError::Syntax { path: origin.to_path_buf(), line, message });
                continue;
            }
        };
        match parsed {
            Line::Blank => {}
            Line::Section(name) => {
                let known = keys::section_known(name);
                if !known {
                    warnings
                        .push(warning(line, format!("section [{name}] is not used by shoal; its keys are ignored")));
                }
                section = Some((name, known));
            }
            Line::Entry { key, value } => {
                let Some((section_name, known)) = section else {
                    errors.push(ConfigError::Syntax {
                        path: origin.to_path_buf(),
                        line,
                        message: format!("`{key}` comes before any [section] header"),
                    });
                    continue;
                };
                if !known {
                    continue;
                }
                let Some((idx, def)) = keys::lookup(section_name, key).and_then(|i| Some((i, KEYS.get(i)?))) else {
                    warnings.push(warning(line, format!("[{section_name}] {key} is not a key shoal knows; ignored")));
                    continue;
                };
                if let Some(first_line) = seen.get(idx).copied().flatten() {
                    errors.push(ConfigError::Duplicate {
                        path: origin.to_path_buf(),
                        line,
                        first_line,
                        section: def.section,
                        key: def.key,
                    });
                    continue;
                }
                if let Some(slot) = seen.get_mut(idx) {
                    *slot = Some(line);
                }
                let mut notes = Vec::new();
                let accepted = (def.set)(&mut draft, value, &mut notes).is_some();
                // A refused value's notes say why (e.g. a key file's mode); they are kept as warnings beside the error.
                warnings.extend(notes.into_iter().map(|m| warning(line, m)));
                if let Some((key_file, source)) = draft.key_file_refused.take() {
                    errors.push(ConfigError::KeyFile { path: origin.to_path_buf(), line, key_file, source });
                    continue;
                }
                if !accepted {
                    errors.push(ConfigError::Value {
                        path: origin.to_path_buf(),
                        line,
                        section: def.section,
                        key: def.key,
                        value: shorten(value),
                        allowed: def.allowed,
                    });
                    continue;
                }
            }
        }
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    cross_checks(&draft, &seen, origin, &mut warnings).map_err(|e| vec![e])?;
    let mut cfg = draft.finish();
    cfg.source = Some(origin.to_path_buf());
    Ok((cfg, warnings, seen))
}

fn shorten(value: &str) -> String {
    if value.chars().count() <= MAX_VALUE_IN_ERROR {
        value.to_owned()
    } else {
        let mut s: String = value.chars().take(MAX_VALUE_IN_ERROR).collect();
        s.push('…');
        s
    }
}

/// Rules between keys. Errors name the line of the key the file set (the later one in the table
/// when both are set); defaults alone never conflict.
fn cross_checks(
    draft: &Draft,
    seen: &[Option<usize>],
    origin: &Path,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<(), ConfigError> {
    let line_of = |section: &str, key: &str| keys::index_of(section, key).and_then(|i| seen.get(i).copied().flatten());
    let conflict = |line: Option<usize>, message: String| ConfigError::Conflict {
        path: origin.to_path_buf(),
        line: line.unwrap_or(0),
        message,
    };
    let c = &draft.cfg;

    if c.registration.timeout <= c.registration.refresh {
        let line = line_of("common", "registration_timeout").or_else(|| line_of("common", "registration_refresh"));
        return Err(conflict(
            line,
            format!(
                "[common] registration_timeout ({} ms) must be greater than \
                 registration_refresh ({} ms)",
                c.registration.timeout.as_millis(),
                c.registration.refresh.as_millis()
            ),
        ));
    }

    if c.network.data_port == c.registration.port {
        let line = line_of("shoal_network", "data_port").or_else(|| line_of("network", "multicast_port"));
        return Err(conflict(
            line,
            format!(
                "[shoal_network] data_port ({}) must differ from [network] multicast_port \
                 ({}, the registration port)",
                c.network.data_port, c.registration.port
            ),
        ));
    }

    if c.auth.key_file.is_some() && c.auth.key_from_hex {
        return Err(conflict(
            line_of("shoal_auth", "key_hex"),
            "[shoal_auth] key_file and key_hex are both set; set one (key_file is preferred)".to_owned(),
        ));
    }
    if c.auth.key.is_none() {
        let defaults = super::AuthConfig::default();
        let changed = [
            ("protected_topics", c.auth.protected_topics != defaults.protected_topics),
            ("max_age_ms", c.auth.max_age != defaults.max_age),
        ];
        for (key, _) in changed.iter().filter(|(_, changed)| *changed) {
            if let Some(line) = line_of("shoal_auth", key) {
                warnings.push(ConfigWarning {
                    path: origin.to_path_buf(),
                    line,
                    message: format!("[shoal_auth] {key} does nothing without key_file or key_hex"),
                });
            }
        }
    }
    if c.auth.key_from_hex
        && let Some(line) = line_of("shoal_auth", "key_hex")
        && let Ok(meta) = std::fs::metadata(origin)
        && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077 != 0
    {
        warnings.push(ConfigWarning {
            path: origin.to_path_buf(),
            line,
            message: "[shoal_auth] key_hex is in a file group or others can read; prefer key_file (chmod 600)"
                .to_owned(),
        });
    }

    if let Some(line) = line_of("network", "multicast_port")
        && line_of("shoal_network", "data_port").is_none()
    {
        let ecal5_data_port = u32::from(c.registration.port) + 2;
        if ecal5_data_port != u32::from(c.network.data_port) {
            warnings.push(ConfigWarning {
                path: origin.to_path_buf(),
                line,
                message: format!(
                    "eCAL 5 sends UDP data to multicast_port + 2 = {ecal5_data_port}, shoal to \
                     [shoal_network] data_port = {}; set data_port to match the eCAL 5 nodes \
                     that use this file",
                    c.network.data_port
                ),
            });
        }
    }
    Ok(())
}
