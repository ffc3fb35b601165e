//! Writing a configuration as documented ini text, from the declarations in [`super::keys`].

use super::Config;
use super::ini::{self, Line};
use super::keys::{KEYS, SECTIONS};

const RULE: &str = "; ------------------------------------------------------------------------------";

const HEADER: &[&str] = &[
    "; ecal.ini for shoal (eCAL 5 style; the defaults equal eCAL 6 on the wire)",
    ";",
    "; shoal reads the first file found of: $ECAL_INI (which must then exist), ./ecal.ini,",
    "; $HOME/.ecal/ecal.ini, /etc/ecal/ecal.ini. Without one it uses the defaults written below.",
    "; Keys missing from a file keep their default, so a file may set just a few keys.",
    ";",
    "; Syntax: [section] headers and `key = value` lines; a line starting with ';' or '#' is a",
    "; comment, and so is the rest of a line from a ';' or '#' that follows whitespace. Values may",
    "; be wrapped in double quotes. Names are case-insensitive; booleans are true/false.",
    "; Sections and keys shoal does not know (e.g. the rest of an eCAL 5 ecal.ini) are ignored",
    "; with a warning; a bad value of a known key stops the program with file, line and the",
    "; allowed values. Keys of eCAL features shoal does not have yet say \"not supported yet\":",
    "; a value that asks for the feature is warned about at start-up, one that leaves it off",
    "; loads silently.",
    ";",
    "; This file is generated from the key table in core/src/config/keys.rs. To regenerate it:",
    ";   SHOAL_REGENERATE_INI=1 cargo test -p shoal --lib config",
];

/// `value` as written after `key = `, quoted when it would not read back unchanged.
fn render_value(value: &str) -> String {
    let plain = format!("k = {value}");
    match ini::parse_line(&plain) {
        Ok(Line::Entry { value: v, .. }) if v == value => value.to_owned(),
        _ => format!("\"{value}\""),
    }
}

fn entry(key: &str, value: &str) -> String {
    if value.is_empty() { format!("{key} =") } else { format!("{key} = {}", render_value(value)) }
}

/// The documented ini text of `cfg`: every key with its meaning, default and allowed values.
pub(crate) fn ini_text(cfg: &Config) -> String {
    let defaults = Config::default();
    let mut lines: Vec<String> = HEADER.iter().map(|s| (*s).to_owned()).collect();
    for section in SECTIONS {
        lines.push(String::new());
        lines.push(RULE.to_owned());
        lines.push(format!("; {}", section.title));
        lines.push(RULE.to_owned());
        lines.extend(section.doc.iter().map(|d| format!("; {d}")));
        lines.push(format!("[{}]", section.name));
        for key in KEYS.iter().filter(|k| k.section == section.name) {
            lines.push(String::new());
            lines.extend(key.doc.iter().map(|d| format!("; {d}")));
            let default = (key.get)(&defaults);
            let shown = if default.is_empty() { "(empty)".to_owned() } else { default };
            lines.push(format!("; default: {shown}"));
            lines.push(format!("; allowed: {}", key.allowed));
            lines.push(entry(key.key, &(key.get)(cfg)));
        }
    }
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

impl Config {
    /// The documented ini text of [`Config::default`], as committed in `etc/ecal.ini`.
    pub fn default_ini_text() -> String {
        ini_text(&Config::default())
    }

    /// This configuration as documented ini text (every key written; `source` is not). Parsing the
    /// result gives back this configuration.
    pub fn to_ini_text(&self) -> String {
        ini_text(self)
    }
}
