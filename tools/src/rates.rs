//! `shoal topic hz TOPIC` and `shoal topic bw TOPIC`: message rate and bandwidth over a rolling window of the last
//! `--window` messages, as `ros2 topic hz/bw` report them, printed every `--period` seconds. Times are arrival times
//! at this subscriber (CLOCK_MONOTONIC); every message lost on the way here is counted and shown.

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use serde_json::json;

use crate::common::{bytes, json_line, start_node};
use crate::exit;

/// Arguments of `shoal topic hz` and `shoal topic bw`.
#[derive(Debug, Args)]
pub(crate) struct RateArgs {
    /// The topic name.
    topic: String,
    /// Messages in the rolling window (1..=1000000).
    #[arg(long, short = 'w', default_value_t = 10_000)]
    window: usize,
    /// Seconds between reports.
    #[arg(long, default_value_t = 1.0)]
    period: f64,
    /// Stop after this many seconds (default: run until interrupted).
    #[arg(long)]
    duration: Option<f64>,
    /// Give up when no message arrived for this many seconds (exit code 3; default: wait forever).
    #[arg(long)]
    timeout: Option<f64>,
    /// One JSON object per report.
    #[arg(long)]
    json: bool,
}

/// Which figure is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Figure {
    /// Messages per second and interval statistics.
    Rate,
    /// Bytes per second and message sizes.
    Bandwidth,
}

/// The last `capacity` messages: arrival time (ns since the start) and size.
#[derive(Debug)]
pub(crate) struct Window {
    capacity: usize,
    items: VecDeque<(u64, usize)>,
}

/// What a window holds, as `ros2 topic hz/bw` print it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stats {
    /// Messages in the window.
    pub(crate) messages: usize,
    /// Messages per second: 1 / mean interval.
    pub(crate) rate_hz: f64,
    /// Interval between consecutive arrivals, s.
    pub(crate) min_s: f64,
    pub(crate) max_s: f64,
    pub(crate) std_dev_s: f64,
    /// Bytes per second over the window's time span.
    pub(crate) bandwidth_bps: f64,
    /// Message size, bytes.
    pub(crate) mean_size: f64,
    pub(crate) min_size: usize,
    pub(crate) max_size: usize,
}

impl Window {
    pub(crate) fn new(capacity: usize) -> Window {
        Window { capacity: capacity.max(1), items: VecDeque::with_capacity(capacity.clamp(1, 65536)) }
    }

    pub(crate) fn push(&mut self, at_ns: u64, size: usize) {
        if self.items.len() == self.capacity {
            self.items.pop_front();
        }
        self.items.push_back((at_ns, size));
    }

    /// Statistics; `None` until two messages arrived (one interval).
    pub(crate) fn stats(&self) -> Option<Stats> {
        let n = self.items.len();
        if n < 2 {
            return None;
        }
        let first = self.items.front()?.0;
        let last = self.items.back()?.0;
        let intervals: Vec<f64> = self
            .items
            .iter()
            .zip(self.items.iter().skip(1))
            .map(|(a, b)| b.0.saturating_sub(a.0) as f64 / 1e9)
            .collect();
        let mean = intervals.iter().sum::<f64>() / intervals.len() as f64;
        let var = intervals.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / intervals.len() as f64;
        let span = last.saturating_sub(first) as f64 / 1e9;
        let sizes = self.items.iter().map(|&(_, s)| s);
        let total: usize = sizes.clone().sum();
        // Bytes that arrived after the first message, over the time since it.
        let after_first = total - self.items.front().map_or(0, |&(_, s)| s);
        Some(Stats {
            messages: n,
            rate_hz: if mean > 0.0 { 1.0 / mean } else { f64::INFINITY },
            min_s: intervals.iter().copied().fold(f64::INFINITY, f64::min),
            max_s: intervals.iter().copied().fold(0.0, f64::max),
            std_dev_s: var.sqrt(),
            bandwidth_bps: if span > 0.0 { after_first as f64 / span } else { f64::INFINITY },
            mean_size: total as f64 / n as f64,
            min_size: sizes.clone().min().unwrap_or(0),
            max_size: sizes.max().unwrap_or(0),
        })
    }
}

fn seconds(name: &str, v: Option<f64>) -> Result<Option<Duration>> {
    v.map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| exit::usage(format!("--{name} must be a number of seconds ≥ 0")))
}

/// Runs `shoal topic hz` or `shoal topic bw`.
pub(crate) fn run(a: &RateArgs, figure: Figure) -> Result<()> {
    if !(1..=1_000_000).contains(&a.window) {
        return Err(exit::usage("--window must be 1..=1000000 messages"));
    }
    let period = seconds("period", Some(a.period))?
        .filter(|p| !p.is_zero())
        .ok_or_else(|| exit::usage("--period must be a positive number of seconds"))?;
    let duration = seconds("duration", a.duration)?;
    let timeout = seconds("timeout", a.timeout)?;
    let node = start_node("shoal_topic")?;
    let sub = node.subscriber(&a.topic).create()?;
    let start = Instant::now();
    let mut window = Window::new(a.window);
    let mut next_report = start + period;
    let mut last_message = start;
    let mut received = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        let now = Instant::now();
        if duration.is_some_and(|d| now.duration_since(start) >= d) {
            break;
        }
        if now >= next_report {
            report(&mut out, a, figure, &window, received, sub.drops())?;
            while next_report <= now {
                next_report += period;
            }
        }
        let mut until = next_report;
        if let Some(d) = duration {
            until = until.min(start + d);
        }
        match sub.recv_with(Some(until.saturating_duration_since(Instant::now())), |s| s.payload().len()) {
            Ok(size) => {
                let at = Instant::now();
                last_message = at;
                received += 1;
                window.push(u64::try_from(at.duration_since(start).as_nanos()).unwrap_or(u64::MAX), size);
            }
            Err(shoal::RecvError::Timeout) => {
                if let Some(t) = timeout
                    && last_message.elapsed() >= t
                {
                    return Err(exit::not_found(format!(
                        "no message on `{}` for {t:?} ({received} received)",
                        a.topic
                    )));
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    report(&mut out, a, figure, &window, received, sub.drops())
}

fn report(out: &mut impl Write, a: &RateArgs, figure: Figure, w: &Window, received: u64, drops: u64) -> Result<()> {
    let Some(s) = w.stats() else {
        if a.json {
            return json_line(
                out,
                &json!({"topic": a.topic, "messages": w.items.len(), "received": received,
                                          "drops": drops}),
            );
        }
        writeln!(out, "no new messages ({received} received)")?;
        return Ok(());
    };
    if a.json {
        let v = match figure {
            Figure::Rate => json!({"topic": a.topic, "rate_hz": s.rate_hz, "min_s": s.min_s, "max_s": s.max_s,
                                   "std_dev_s": s.std_dev_s, "window": s.messages, "received": received,
                                   "drops": drops}),
            Figure::Bandwidth => json!({"topic": a.topic, "bandwidth_bps": s.bandwidth_bps,
                                        "mean_size": s.mean_size, "min_size": s.min_size, "max_size": s.max_size,
                                        "window": s.messages, "received": received, "drops": drops}),
        };
        return json_line(out, &v);
    }
    match figure {
        Figure::Rate => {
            writeln!(out, "average rate: {:.3}", s.rate_hz)?;
            writeln!(
                out,
                "\tmin: {:.6}s max: {:.6}s std dev: {:.6}s window: {} drops: {drops}",
                s.min_s, s.max_s, s.std_dev_s, s.messages
            )?;
        }
        Figure::Bandwidth => {
            writeln!(out, "{}/s from {} messages (drops: {drops})", bytes(s.bandwidth_bps), s.messages)?;
            writeln!(
                out,
                "\tMessage size mean: {} min: {} max: {}",
                bytes(s.mean_size),
                bytes(s.min_size as f64),
                bytes(s.max_size as f64)
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_statistics() {
        let mut w = Window::new(3);
        assert!(w.stats().is_none());
        w.push(0, 100);
        assert!(w.stats().is_none());
        w.push(100_000_000, 200);
        w.push(300_000_000, 300);
        let s = w.stats().unwrap();
        assert_eq!(s.messages, 3);
        assert!((s.rate_hz - 1.0 / 0.15).abs() < 1e-9, "{s:?}");
        assert!((s.min_s - 0.1).abs() < 1e-9 && (s.max_s - 0.2).abs() < 1e-9, "{s:?}");
        assert!((s.std_dev_s - 0.05).abs() < 1e-9, "{s:?}");
        assert!((s.bandwidth_bps - 500.0 / 0.3).abs() < 1e-6, "{s:?}");
        assert_eq!((s.min_size, s.max_size), (100, 300));
        // The window rolls: the oldest message goes.
        w.push(400_000_000, 400);
        let s = w.stats().unwrap();
        assert_eq!((s.messages, s.min_size), (3, 200));
        assert!((s.rate_hz - 1.0 / 0.15).abs() < 1e-9, "{s:?}");
    }
}
