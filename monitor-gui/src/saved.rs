//! Saved snapshots: what the monitor knows at one moment, written as one JSON file (the window's **Export…**) and
//! opened later (`shoal-monitor --open FILE`), frozen, for a bug report.
//!
//! The file holds the core's [`Snapshot`] the shown view was built from and the one before it (serialized with the
//! `serde` feature of `shoal`), so opening it builds the [`View`] again with [`build_view`], the rule the live
//! monitor uses: the figures, problems and registration ages are those of the moment it was taken. Drops rising
//! and call rates are found between the two snapshots. The live monitor derives a call rate from the last
//! registration at least [`MIN_RATE_SPAN_S`](crate::model::MIN_RATE_SPAN_S) older, which can be older than the
//! snapshot before: where registrations came closer together than that, an opened file's call rate can differ from
//! the one the window showed, or be missing. Beside them: the events, the log records the
//! monitor kept, and the last minutes of each topic's rate, bandwidth, drops and latency ([`HistorySeries`]), which
//! the file carries for whoever reads it (`--open` does not plot them). A `format` name and a `version` come first:
//! a file of a newer version is refused with a message that says so, not misread.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use shoal::logging::LogRecord;
use shoal::monitor::Snapshot;

use crate::history::{Event, History};
use crate::model::{Interner, View, build_view};

/// The `format` of a saved snapshot file.
pub const FORMAT: &str = "shoal-monitor-snapshot";
/// The version this monitor writes and the newest it opens.
pub const FORMAT_VERSION: u32 = 1;
/// Files larger than this are not opened (a saved snapshot of a thousand topics with five minutes of history is
/// a few tens of MB).
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// One saved snapshot file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedSnapshot {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`FORMAT_VERSION`] when written.
    pub version: u32,
    /// When the snapshot was taken, seconds since the UNIX epoch.
    pub taken_at_s: f64,
    /// The host the monitor ran on.
    pub host: String,
    /// The monitor's version (`shoal-monitor 0.1.0`).
    pub monitor_version: String,
    /// The snapshot the shown view was built from.
    pub snapshot: Snapshot,
    /// The snapshot before it (drops rising and call rates are found between the two), if there was one.
    pub before: Option<Snapshot>,
    /// Every kept event, oldest first.
    pub events: Vec<Event>,
    /// Every kept log record, oldest first.
    pub logs: Vec<LogRecord>,
    /// The kept views' topic figures.
    pub history: HistorySeries,
}

/// The kept views' figures per topic: one entry per view in each list (`null` where the topic was not in that view,
/// or had no such figure).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HistorySeries {
    /// The views' times, seconds since the UNIX epoch, oldest first.
    pub times_s: Vec<f64>,
    /// By topic name.
    pub topics: BTreeMap<String, TopicSeries>,
}

/// One topic's figures over the kept views.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopicSeries {
    /// Messages per second.
    pub rate_hz: Vec<Option<f64>>,
    /// Payload bytes per second.
    pub bandwidth_bps: Vec<Option<f64>>,
    /// Messages lost, summed over the subscribers.
    pub drops: Vec<Option<u64>>,
    /// Median latency of the same-host connections, µs.
    pub latency_p50_us: Vec<Option<f64>>,
    /// 99th percentile of it, µs.
    pub latency_p99_us: Vec<Option<f64>>,
}

impl HistorySeries {
    /// The figures of every view in `history`.
    pub fn of(history: &History) -> HistorySeries {
        let n = history.len();
        let mut out = HistorySeries { times_s: Vec::with_capacity(n), topics: BTreeMap::new() };
        for (i, v) in history.views().enumerate() {
            out.times_s.push(v.time_s);
            for t in &v.topics {
                let s = out.topics.entry(t.name.to_string()).or_insert_with(|| TopicSeries {
                    rate_hz: vec![None; n],
                    bandwidth_bps: vec![None; n],
                    drops: vec![None; n],
                    latency_p50_us: vec![None; n],
                    latency_p99_us: vec![None; n],
                });
                s.rate_hz[i] = Some(t.rate_hz);
                s.bandwidth_bps[i] = Some(t.bandwidth_bps);
                s.drops[i] = Some(t.drops);
                s.latency_p50_us[i] = t.latency.map(|l| l.p50_us);
                s.latency_p99_us[i] = t.latency.map(|l| l.p99_us);
            }
        }
        out
    }
}

/// Why a saved snapshot could not be written or opened; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// The file could not be read.
    #[error("cannot read {path}: {source} (check the path)")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("{path} is {bytes} bytes, more than a saved snapshot can be ({MAX_FILE_BYTES}): open a file Export… wrote")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// Not JSON, or not a saved snapshot.
    #[error("{0}: open a file the monitor's Export… wrote")]
    Format(String),
    /// Written by a newer monitor.
    #[error(
        "the file is a saved snapshot of version {0}, newer than this monitor opens ({FORMAT_VERSION}): open it with \
         a newer shoal-monitor"
    )]
    Newer(u32),
    /// The file could not be written.
    #[error("cannot write {path}: {source} (choose a path in a writable directory)")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The fields read first, to tell a newer version from a broken file.
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
}

impl SavedSnapshot {
    /// What the monitor knows now: `snapshot` (the newest view's), `before` (the one before it), the kept events
    /// and views of `history` and the kept `logs`.
    pub fn new<'a>(
        snapshot: Snapshot,
        before: Option<Snapshot>,
        history: &History,
        logs: impl IntoIterator<Item = &'a LogRecord>,
    ) -> SavedSnapshot {
        let taken_at_s = snapshot
            .taken_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        let host = snapshot.processes.iter().find(|p| p.is_self).map(|p| p.host_name.clone()).unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "unknown".into(), |h| h.trim().into())
        });
        SavedSnapshot {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            taken_at_s,
            host,
            monitor_version: concat!("shoal-monitor ", env!("CARGO_PKG_VERSION")).into(),
            snapshot,
            before,
            events: history.events().iter().cloned().collect(),
            logs: logs.into_iter().cloned().collect(),
            history: HistorySeries::of(history),
        }
    }

    /// The file's bytes (JSON).
    pub fn to_json(&self) -> Vec<u8> {
        // Every map key is a string, and serde_json writes any number (a NaN or an infinity as null; the core's
        // figures that can be one are written as text): this cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Writes the file at `path` (replacing one that is there).
    pub fn save(&self, path: &Path) -> Result<(), SavedError> {
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(path)?;
            f.write_all(&self.to_json())?;
            f.sync_all()
        };
        write().map_err(|source| SavedError::Write { path: path.to_owned(), source })
    }

    /// Reads a saved snapshot from the bytes of a file; refuses another format and a newer version.
    pub fn from_json(bytes: &[u8]) -> Result<SavedSnapshot, SavedError> {
        let header: Header = serde_json::from_slice(bytes)
            .map_err(|e| SavedError::Format(format!("not a saved monitor snapshot ({e})")))?;
        if header.format != FORMAT {
            return Err(SavedError::Format(format!(
                "not a saved monitor snapshot (its format is `{}`, not `{FORMAT}`)",
                shoal::monitor::printable(&header.format)
            )));
        }
        if header.version > FORMAT_VERSION {
            return Err(SavedError::Newer(header.version));
        }
        serde_json::from_slice(bytes).map_err(|e| SavedError::Format(format!("a damaged saved snapshot ({e})")))
    }

    /// Opens the file at `path`.
    pub fn load(path: &Path) -> Result<SavedSnapshot, SavedError> {
        let read_err = |source| SavedError::Read { path: path.to_owned(), source };
        let bytes = std::fs::metadata(path).map_err(read_err)?.len();
        if bytes > MAX_FILE_BYTES {
            return Err(SavedError::TooLarge { path: path.to_owned(), bytes });
        }
        let data = std::fs::read(path).map_err(read_err)?;
        SavedSnapshot::from_json(&data).map_err(|e| match e {
            SavedError::Format(m) => SavedError::Format(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// The views the file shows: the view of the snapshot before (if any) and the view of the snapshot, built as
    /// the live monitor builds them.
    pub fn views(&self) -> (Option<Arc<View>>, Arc<View>) {
        let mut interner = Interner::default();
        let before = self.before.as_ref().map(|b| Arc::new(build_view(b, None, &mut interner)));
        let view = Arc::new(build_view(&self.snapshot, before.as_deref(), &mut interner));
        (before, view)
    }

    /// The line that says what is shown: `Opened FILE, taken at TIME on HOST — not live`.
    pub fn banner(&self, path: &Path) -> String {
        format!(
            "Opened {}, taken at {} on {} — not live",
            shoal::monitor::printable(&path.display().to_string()),
            utc_text(self.taken_at_s),
            shoal::monitor::printable(&self.host)
        )
    }
}

/// `2026-12-03 23:50:07 UTC`.
pub fn utc_text(time_s: f64) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(time_s);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// The name Export… suggests: `shoal-monitor-20261203-235007.json` (UTC).
pub fn default_file_name(time_s: f64) -> String {
    let (y, mo, d, h, mi, s) = utc_parts(time_s);
    format!("shoal-monitor-{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}.json")
}

/// Year, month, day, hour, minute, second (UTC) of `time_s` seconds since the epoch (0 before it).
fn utc_parts(time_s: f64) -> (i64, u32, u32, u32, u32, u32) {
    let secs = if time_s.is_finite() { time_s.clamp(0.0, 253_402_300_799.0) as i64 } else { 0 };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(mo <= 2);
    (y, mo, d, rem / 3600, rem / 60 % 60, rem % 60)
}

/// Encodes `image` as an 8-bit RGBA PNG.
pub fn png_bytes(image: &egui::ColorImage) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let [w, h] = image.size;
    let too_large = || png::EncodingError::LimitsExceeded;
    let mut enc = png::Encoder::new(&mut out, u32::try_from(w).map_err(|_| too_large())?, {
        u32::try_from(h).map_err(|_| too_large())?
    });
    enc.set_color(png::ColorType::Rgba);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    let rgba: Vec<u8> = image.pixels.iter().flat_map(|c| c.to_srgba_unmultiplied()).collect();
    writer.write_image_data(&rgba)?;
    writer.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_are_civil() {
        assert_eq!(utc_text(0.0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_text(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_text(1_796_341_807.9), "2026-12-03 23:50:07 UTC");
        assert_eq!(default_file_name(1_796_341_807.0), "shoal-monitor-20261203-235007.json");
        assert_eq!(utc_text(f64::NAN), "1970-01-01 00:00:00 UTC");
    }
}
