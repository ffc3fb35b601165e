//! `shoal log`: follows the log messages of every process on eCAL's log channel (shoal processes with
//! `shoal::logging`'s layer, eCAL processes), filtered by level, process, host and text. Needs no node: it only
//! listens on the log port (`[shoal_logging] port`, 14001) as eCAL's log receiver does.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;
use shoal::Config;
use shoal::logging::{LogFilter, LogLevel, LogReceiver, LogRecord};
use shoal::monitor::printable;

use crate::common::{json_line, stop_on_signals};
use crate::exit;

/// Arguments of `shoal log`.
#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// Only records at or above this level: debug4, debug3, debug2, debug1 (debug), info, warning (warn), error,
    /// fatal.
    #[arg(long, value_parser = parse_level)]
    level: Option<LogLevel>,
    /// Only records whose process name or unit name contains this (case-insensitive).
    #[arg(long)]
    process: Option<String>,
    /// Only records whose host name contains this (case-insensitive).
    #[arg(long)]
    host: Option<String>,
    /// Only records whose content contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT")]
    grep: Option<String>,
    /// One JSON object per line and record: time_us, host_name, process_id, process_name, unit_name, level (eCAL's
    /// name), level_value (eCAL's eLogLevel), content.
    #[arg(long)]
    json: bool,
    /// Exit after this many records (exit code 3 if --duration ends first).
    #[arg(long, short = 'n')]
    count: Option<u64>,
    /// Exit after this many seconds (default: run until interrupted).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
}

fn parse_level(v: &str) -> Result<LogLevel, String> {
    LogLevel::parse(v)
        .ok_or_else(|| format!("unknown level {v:?} (debug4, debug3, debug2, debug1, info, warning, error, fatal)"))
}

/// Runs `shoal log`.
pub(crate) fn run(args: LogArgs) -> Result<()> {
    let cfg = Config::load().map_err(|e| exit::coded(exit::CONFIG, e.to_string()))?;
    let duration = match args.duration {
        Some(s) if !(s.is_finite() && s >= 0.0) => return Err(exit::usage(format!("--duration {s}: not a time"))),
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let mut rx = LogReceiver::bind(&cfg).context("listening for log messages")?;
    rx.set_filter(LogFilter { min_level: args.level, process: args.process, host: args.host, text: args.grep });
    let stop = stop_on_signals()?;
    let start = Instant::now();
    let mut out = std::io::stdout().lock();
    let mut shown = 0u64;
    while !stop.load(Ordering::Relaxed) && args.count.is_none_or(|n| shown < n) {
        let slice = match duration {
            Some(d) => match d.checked_sub(start.elapsed()) {
                Some(left) if !left.is_zero() => left.min(Duration::from_millis(200)),
                _ => break,
            },
            None => Duration::from_millis(200),
        };
        let Some(r) = rx.recv_timeout(slice)? else { continue };
        if args.json {
            json_line(&mut out, &record_json(&r))?;
        } else {
            writeln!(out, "{}", record_line(&r)).context("writing to stdout")?;
        }
        out.flush().context("writing to stdout")?;
        shown += 1;
    }
    if let Some(n) = args.count.filter(|&n| shown < n && !stop.load(Ordering::Relaxed)) {
        return Err(exit::not_found(format!("{shown} of {n} log records within the duration")));
    }
    Ok(())
}

fn record_json(r: &LogRecord) -> serde_json::Value {
    json!({
        "time_us": r.time_us,
        "host_name": r.host_name,
        "process_id": r.process_id,
        "process_name": r.process_name,
        "unit_name": r.unit_name,
        "level": r.level.name(),
        "level_value": r.level.to_wire(),
        "content": r.content,
    })
}

/// `2026-12-03 16:30:01.123456 warning host unit[pid]: content`, names escaped.
fn record_line(r: &LogRecord) -> String {
    format!(
        "{} {:<7} {} {}[{}]: {}",
        utc(r.time_us),
        r.level.name(),
        printable(&r.host_name),
        printable(if r.unit_name.is_empty() { &r.process_name } else { &r.unit_name }),
        r.process_id,
        printable(&r.content)
    )
}

/// µs since the epoch as `YYYY-MM-DD hh:mm:ss.uuuuuu` (UTC).
fn utc(time_us: i64) -> String {
    let secs = time_us.div_euclid(1_000_000);
    let us = time_us.rem_euclid(1_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{us:06}", sod / 3600, sod % 3600 / 60, sod % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000000");
        assert_eq!(utc(1_700_000_000_123_456), "2023-11-14 22:13:20.123456");
        assert_eq!(utc(951_782_400_000_000), "2000-02-29 00:00:00.000000");
    }

    #[test]
    fn a_line_escapes_names() {
        let r = LogRecord {
            time_us: 0,
            host_name: "h".into(),
            process_id: 7,
            process_name: "/bin/p".into(),
            unit_name: "u\nfake".into(),
            level: LogLevel::Warning,
            content: "c".into(),
        };
        let line = record_line(&r);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("1970-01-01 00:00:00.000000 warning h u"), "{line}");
    }
}
