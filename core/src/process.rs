//! Process state: what a process announces about its own health, as eCAL's `Process::SetState`.
//!
//! A process sets its state with [`crate::Node::set_state`]; the state travels in the process registration
//! (eCAL's `ProcessState`: severity, severity level, info text), so the eCAL Monitor, eCAL Sys, `shoal process
//! list` and `shoal-monitor` show it alike, for shoal's and eCAL's processes. Like eCAL, a process that never sets
//! it announces [`Severity::Unknown`] at [`SeverityLevel::Level1`].
//!
//! This module is the one rule for reading a state: [`ProcessState::from_wire`] turns what registration carries
//! into the typed state (unknown numbers read as [`Severity::Unknown`] and [`SeverityLevel::Level1`]), its
//! `Display` is the text every tool shows, and [`Severity::is_problem`] says which states count as a problem.

use std::fmt;

/// The longest info text a process announces, in bytes (longer texts are cut at a character boundary; eCAL sets no
/// bound, shoal keeps its registration samples small).
pub const MAX_INFO_LEN: usize = 1024;

/// How a process rates its own condition (eCAL's `eProcessSeverity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Severity {
    /// Condition unknown: what a process announces until it sets a state (0).
    #[default]
    Unknown,
    /// Healthy (1).
    Healthy,
    /// Warning (2).
    Warning,
    /// Critical (3).
    Critical,
    /// Failed (4).
    Failed,
}

impl Severity {
    /// The severity eCAL's registration number stands for; numbers eCAL does not define read as `Unknown`.
    pub fn from_wire(value: i32) -> Severity {
        match value {
            1 => Severity::Healthy,
            2 => Severity::Warning,
            3 => Severity::Critical,
            4 => Severity::Failed,
            _ => Severity::Unknown,
        }
    }

    /// eCAL's registration number.
    pub fn to_wire(self) -> i32 {
        match self {
            Severity::Unknown => 0,
            Severity::Healthy => 1,
            Severity::Warning => 2,
            Severity::Critical => 3,
            Severity::Failed => 4,
        }
    }

    /// The lower-case name tools show (`unknown`, `healthy`, `warning`, `critical`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Unknown => "unknown",
            Severity::Healthy => "healthy",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
            Severity::Failed => "failed",
        }
    }

    /// Whether tools count the state as a problem of the process: warning, critical and failed.
    pub fn is_problem(self) -> bool {
        matches!(self, Severity::Warning | Severity::Critical | Severity::Failed)
    }
}

/// A name [`Severity::from_str`](std::str::FromStr) does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown severity {0:?}: expected unknown, healthy, warning, critical or failed")]
pub struct ParseSeverityError(String);

/// Parses the names [`Severity::as_str`] gives, in any case.
impl std::str::FromStr for Severity {
    type Err = ParseSeverityError;

    fn from_str(s: &str) -> Result<Severity, ParseSeverityError> {
        [Severity::Unknown, Severity::Healthy, Severity::Warning, Severity::Critical, Severity::Failed]
            .into_iter()
            .find(|v| v.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| ParseSeverityError(s.to_owned()))
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A finer grade within a severity (eCAL's `eProcessSeverityLevel`, 1 to 5; what level 1 to 5 mean is the
/// application's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum SeverityLevel {
    /// Level 1, the default.
    #[default]
    Level1,
    /// Level 2.
    Level2,
    /// Level 3.
    Level3,
    /// Level 4.
    Level4,
    /// Level 5.
    Level5,
}

impl SeverityLevel {
    /// The level eCAL's registration number stands for; 0 ("unknown" in eCAL's protobuf) and numbers eCAL does not
    /// define read as `Level1`, eCAL's default.
    pub fn from_wire(value: i32) -> SeverityLevel {
        match value {
            2 => SeverityLevel::Level2,
            3 => SeverityLevel::Level3,
            4 => SeverityLevel::Level4,
            5 => SeverityLevel::Level5,
            _ => SeverityLevel::Level1,
        }
    }

    /// eCAL's registration number (1 to 5).
    pub fn to_wire(self) -> i32 {
        match self {
            SeverityLevel::Level1 => 1,
            SeverityLevel::Level2 => 2,
            SeverityLevel::Level3 => 3,
            SeverityLevel::Level4 => 4,
            SeverityLevel::Level5 => 5,
        }
    }
}

/// A process's announced state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessState {
    /// The severity.
    pub severity: Severity,
    /// The level within it.
    pub level: SeverityLevel,
    /// Free text (at most [`MAX_INFO_LEN`] bytes are announced).
    pub info: String,
}

impl ProcessState {
    /// A state; `info` longer than [`MAX_INFO_LEN`] bytes is cut at a character boundary.
    pub fn new(severity: Severity, level: SeverityLevel, info: &str) -> ProcessState {
        let mut end = info.len().min(MAX_INFO_LEN);
        while !info.is_char_boundary(end) {
            end -= 1;
        }
        ProcessState { severity, level, info: info[..end].to_owned() }
    }

    /// The state registration numbers and text stand for (see [`Severity::from_wire`]).
    pub fn from_wire(severity: i32, level: i32, info: &str) -> ProcessState {
        ProcessState {
            severity: Severity::from_wire(severity),
            level: SeverityLevel::from_wire(level),
            info: info.to_owned(),
        }
    }
}

/// `healthy`, `warning (level 3)`, `critical: disk full`, `failed (level 2): no camera`: the level is shown when it
/// is not the default.
impl fmt::Display for ProcessState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.severity.as_str())?;
        if self.level != SeverityLevel::Level1 {
            write!(f, " (level {})", self.level.to_wire())?;
        }
        if !self.info.is_empty() {
            write!(f, ": {}", self.info)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_numbers_round_trip_and_unknown_numbers_read_as_defaults() {
        for s in [Severity::Unknown, Severity::Healthy, Severity::Warning, Severity::Critical, Severity::Failed] {
            assert_eq!(Severity::from_wire(s.to_wire()), s);
        }
        for l in [
            SeverityLevel::Level1,
            SeverityLevel::Level2,
            SeverityLevel::Level3,
            SeverityLevel::Level4,
            SeverityLevel::Level5,
        ] {
            assert_eq!(SeverityLevel::from_wire(l.to_wire()), l);
        }
        assert_eq!(Severity::from_wire(5), Severity::Unknown);
        assert_eq!(Severity::from_wire(-1), Severity::Unknown);
        assert_eq!(SeverityLevel::from_wire(0), SeverityLevel::Level1);
        assert_eq!(SeverityLevel::from_wire(6), SeverityLevel::Level1);
        assert_eq!("Warning".parse::<Severity>(), Ok(Severity::Warning));
        assert_eq!(" failed".parse::<Severity>(), Ok(Severity::Failed));
        assert!("bad".parse::<Severity>().is_err());
    }

    #[test]
    fn display_shows_level_only_when_not_default() {
        assert_eq!(ProcessState::default().to_string(), "unknown");
        assert_eq!(ProcessState::new(Severity::Healthy, SeverityLevel::Level1, "").to_string(), "healthy");
        assert_eq!(ProcessState::new(Severity::Warning, SeverityLevel::Level3, "").to_string(), "warning (level 3)");
        assert_eq!(
            ProcessState::new(Severity::Failed, SeverityLevel::Level2, "no camera").to_string(),
            "failed (level 2): no camera"
        );
        assert!(!Severity::Healthy.is_problem() && !Severity::Unknown.is_problem());
        assert!(Severity::Warning.is_problem() && Severity::Failed.is_problem());
    }

    #[test]
    fn long_info_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_INFO_LEN);
        let s = ProcessState::new(Severity::Healthy, SeverityLevel::Level1, &long);
        assert!(s.info.len() <= MAX_INFO_LEN && s.info.len() >= MAX_INFO_LEN - 1);
        assert!(s.info.chars().all(|c| c == 'é'));
    }
}
