//! Where each value of a loaded configuration came from (`shoal config show`).

use std::path::PathBuf;

use super::keys::KEYS;
use super::{Config, ConfigWarning};

/// How the configuration file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// The environment variable `$ECAL_INI` named it.
    EcalIni,
    /// The first existing file of the search (`./ecal.ini`, `$HOME/.ecal/ecal.ini`, `/etc/ecal/ecal.ini`).
    Search,
    /// Named explicitly by the caller ([`Config::explain_file`]).
    Explicit,
}

/// Where one value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueOrigin {
    /// Not set by any file: the built-in default.
    Default,
    /// Set in a file, on this line (1-based).
    File {
        /// The file.
        path: PathBuf,
        /// The line.
        line: usize,
    },
}

/// One key of the configuration: its value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReport {
    /// The section (canonical spelling).
    pub section: &'static str,
    /// The key (canonical spelling).
    pub key: &'static str,
    /// The effective value, as written in a file.
    pub value: String,
    /// The built-in default, as written in a file.
    pub default: String,
    /// What the key accepts.
    pub allowed: &'static str,
    /// Where the value came from.
    pub origin: ValueOrigin,
}

/// A configuration with the origin of every value: what [`Config::explain_from`] and [`Config::explain_file`]
/// give.
#[derive(Debug, Clone)]
pub struct ConfigReport {
    /// The configuration.
    pub config: Config,
    /// The file read and how it was found (`None`: no file, every value is a default).
    pub file: Option<(PathBuf, FoundBy)>,
    /// Every key shoal reads, in the order of the documented default file.
    pub keys: Vec<KeyReport>,
    /// What the file set that was accepted but is probably not meant (unknown keys, "not supported yet").
    pub warnings: Vec<ConfigWarning>,
}

impl ConfigReport {
    /// `lines[i]` is the line on which `KEYS[i]` was set.
    pub(crate) fn new(
        config: Config,
        file: Option<(PathBuf, FoundBy)>,
        warnings: Vec<ConfigWarning>,
        lines: &[Option<usize>],
    ) -> ConfigReport {
        let defaults = Config::default();
        let keys = KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let origin = match (lines.get(i).copied().flatten(), &file) {
                    (Some(line), Some((path, _))) => ValueOrigin::File { path: path.clone(), line },
                    _ => ValueOrigin::Default,
                };
                KeyReport {
                    section: k.section,
                    key: k.key,
                    value: (k.get)(&config),
                    default: (k.get)(&defaults),
                    allowed: k.allowed,
                    origin,
                }
            })
            .collect();
        ConfigReport { config, file, keys, warnings }
    }
}

#[cfg(test)]
mod tests {
    use super::super::SearchPaths;
    use super::*;

    #[test]
    fn origins_name_the_line_or_the_default() {
        let dir = std::env::temp_dir().join(format!("shoal_report_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ecal.ini");
        std::fs::write(&path, "[common]\n\n; c\nregistration_refresh = 500\n[network]\nmulticast_ttl = 7\n").unwrap();
        let search = SearchPaths { ecal_ini: Some(path.clone()), candidates: Vec::new() };
        let r = Config::explain_from(&search).unwrap();
        assert_eq!(r.file, Some((path.clone(), FoundBy::EcalIni)));
        let get = |s: &str, k: &str| r.keys.iter().find(|e| e.section == s && e.key == k).unwrap().clone();
        let refresh = get("common", "registration_refresh");
        assert_eq!((refresh.value.as_str(), refresh.default.as_str()), ("500", "1000"));
        assert_eq!(refresh.origin, ValueOrigin::File { path: path.clone(), line: 4 });
        assert_eq!(get("network", "multicast_ttl").origin, ValueOrigin::File { path: path.clone(), line: 6 });
        let timeout = get("common", "registration_timeout");
        assert_eq!(timeout.origin, ValueOrigin::Default);
        assert_eq!(timeout.value, timeout.default);
        assert_eq!(r.keys.len(), KEYS.len());

        let none = SearchPaths { ecal_ini: None, candidates: vec![dir.join("missing.ini")] };
        let r = Config::explain_from(&none).unwrap();
        assert!(r.file.is_none());
        assert!(r.keys.iter().all(|k| k.origin == ValueOrigin::Default && k.value == k.default));
        let r = Config::explain_file(&path).unwrap();
        assert_eq!(r.file, Some((path.clone(), FoundBy::Explicit)));

        // check_file reports every bad line, not only the first.
        let bad = dir.join("bad.ini");
        std::fs::write(&bad, "[common]\nregistration_refresh = -1\n[network]\nmulticast_ttl = 999\nnot a line\n")
            .unwrap();
        let errors = Config::check_file(&bad).unwrap_err();
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{lines:?}");
        assert!(lines[0].contains("bad.ini:2:") && lines[0].contains("allowed"), "{lines:?}");
        assert!(lines[1].contains("bad.ini:4:") && lines[1].contains("multicast_ttl"), "{lines:?}");
        assert!(lines[2].contains("bad.ini:5: syntax error"), "{lines:?}");
        assert!(Config::check_file(&path).is_ok());
        let first = Config::from_file(&bad).unwrap_err().to_string();
        assert_eq!(first, lines[0], "loading stops at the first error");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
