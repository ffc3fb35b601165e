//! Measurements, their ratios to the baseline, and the two output forms (table, JSON lines).

use std::io::Write;

use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};

use super::args::{Mode, Pages, System, WaitMode};
use super::baseline_link::{DEEP_LABEL, LINE_LABEL, WARM_LABEL};
use super::iceoryx2::LABEL as ICEORYX2_LABEL;
use super::sys::{CpuTime, ring_page_kb};

/// A new latency histogram in ns (1 ns .. 1 hour, 3 significant digits).
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid static histogram bounds")
}

/// Percentiles of a latency distribution, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Latency {
    pub(crate) p50: u64,
    pub(crate) p90: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
    pub(crate) max: u64,
    pub(crate) mean: f64,
}

impl Latency {
    /// Summarizes a histogram (`None` when it is empty).
    pub(crate) fn from_histogram(h: &Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: h.mean(),
        })
    }

    /// As a JSON object (the peer sends it to the main process).
    pub(crate) fn to_json(self) -> Value {
        json!({"p50": self.p50, "p90": self.p90, "p99": self.p99, "p999": self.p999, "max": self.max, "mean": self.mean})
    }

    /// Parses [`Latency::to_json`].
    pub(crate) fn from_json(v: &Value) -> Option<Latency> {
        let u = |k: &str| v.get(k)?.as_u64();
        Some(Latency {
            p50: u("p50")?,
            p90: u("p90")?,
            p99: u("p99")?,
            p999: u("p999")?,
            max: u("max")?,
            mean: v.get("mean")?.as_f64()?,
        })
    }
}

/// How far apart (as a factor) the host checks of one run may be for the run to count as steady.
pub(crate) const HOST_CHECK_TOLERANCE: f64 = 1.5;

/// Whether the largest of `p50s` is within [`HOST_CHECK_TOLERANCE`] of the smallest.
pub(crate) fn steady(p50s: &[u64]) -> bool {
    let (lo, hi) = (p50s.iter().min(), p50s.iter().max());
    lo.zip(hi).is_none_or(|(lo, hi)| *hi as f64 <= *lo as f64 * HOST_CHECK_TOLERANCE)
}

/// One measured run (one system, wait mode, mode and size).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Measurement {
    pub(crate) system: System,
    /// The `transport` label: the layer (shoal) or the raw program (baseline) the messages took.
    pub(crate) transport: &'static str,
    /// shoal: messages received per layer as the receiving side saw them (`Via::name`), both directions.
    pub(crate) via: std::collections::BTreeMap<String, u64>,
    pub(crate) wait: WaitMode,
    pub(crate) mode: Mode,
    pub(crate) size: usize,
    /// Subscribers (peer processes) of the run.
    pub(crate) subscribers: usize,
    /// Pingpong/zero-copy: one-way latency (RTT/2). Throughput: send-to-receive latency under
    /// load. Fan-out: time inside `send()`.
    pub(crate) latency: Option<Latency>,
    /// Pingpong: round trips per second; throughput: messages received per second; fan-out: sends per second.
    pub(crate) msgs_per_s: f64,
    /// Messages measured (excluding warm-up).
    pub(crate) messages: u64,
    /// Messages sent but not received (throughput, fan-out; summed over subscribers).
    pub(crate) lost: Option<u64>,
    /// Drops the transport counted at the receivers.
    pub(crate) drops: Option<u64>,
    /// CPU time of the main process during the run.
    pub(crate) cpu: CpuTime,
    /// CPU time of the peer processes during the run (summed).
    pub(crate) peer_cpu: CpuTime,
    /// Peak RSS of the main process (VmHWM, kB).
    pub(crate) peak_rss_kb: u64,
    /// Largest peak RSS of the peers (VmHWM, kB).
    pub(crate) peer_peak_rss_kb: u64,
    /// Extra note printed with the row (e.g. fan-out pacing).
    pub(crate) note: Option<String>,
    /// Extra numeric JSON fields (e.g. fan-out `send_cpu_ratio_vs_1`, paced `rate_target`).
    pub(crate) extra: Vec<(&'static str, f64)>,
}

impl Measurement {
    /// The value of extra figure `key`, if this measurement has it.
    pub(crate) fn extra_value(&self, key: &str) -> Option<f64> {
        self.extra.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn bytes_per_s(&self) -> f64 {
        self.msgs_per_s * self.size as f64
    }
}

/// shoal / baseline for each figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ratios {
    pub(crate) latency: Option<[f64; 5]>,
    pub(crate) msgs_per_s: f64,
    /// Messages lost by shoal's run and by the baseline's (`None` where the mode counts none). When either lost
    /// some, `msgs_per_s` compares receive rates, not lossless rates, and the report says so.
    pub(crate) lost: (Option<u64>, Option<u64>),
    /// The reference's `transport` label (JSON `ratio_vs`).
    pub(crate) vs: &'static str,
}

impl Ratios {
    /// Either run lost messages: the msg/s ratio is one of receive rates.
    pub(crate) fn lossy(&self) -> bool {
        self.lost.0.is_some_and(|l| l > 0) || self.lost.1.is_some_and(|l| l > 0)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

/// Ratios of `m` to baseline `b`.
pub(crate) fn ratios(m: &Measurement, b: &Measurement) -> Ratios {
    let latency = match (m.latency, b.latency) {
        (Some(x), Some(y)) => Some([
            ratio(x.p50 as f64, y.p50 as f64),
            ratio(x.p90 as f64, y.p90 as f64),
            ratio(x.p99 as f64, y.p99 as f64),
            ratio(x.p999 as f64, y.p999 as f64),
            ratio(x.max as f64, y.max as f64),
        ]),
        _ => None,
    };
    Ratios { latency, msgs_per_s: ratio(m.msgs_per_s, b.msgs_per_s), lost: (m.lost, b.lost), vs: b.transport }
}

/// The JSON object of one measurement.
pub(crate) fn to_json(m: &Measurement, r: Option<&Ratios>) -> Value {
    let mut o = Map::new();
    o.insert("system".into(), m.system.as_str().into());
    o.insert("transport".into(), m.transport.into());
    if !m.via.is_empty() {
        o.insert("via".into(), json!(m.via));
    }
    o.insert("wait".into(), m.wait.as_str().into());
    o.insert("mode".into(), m.mode.as_str().into());
    o.insert("size_bytes".into(), m.size.into());
    o.insert("subscribers".into(), m.subscribers.into());
    let l = m.latency;
    o.insert("p50_ns".into(), l.map(|l| l.p50).into());
    o.insert("p90_ns".into(), l.map(|l| l.p90).into());
    o.insert("p99_ns".into(), l.map(|l| l.p99).into());
    o.insert("p999_ns".into(), l.map(|l| l.p999).into());
    o.insert("max_ns".into(), l.map(|l| l.max).into());
    o.insert("mean_ns".into(), l.map(|l| l.mean).into());
    o.insert("msgs_per_s".into(), m.msgs_per_s.into());
    o.insert("bytes_per_s".into(), m.bytes_per_s().into());
    o.insert("messages".into(), m.messages.into());
    o.insert("lost".into(), m.lost.into());
    o.insert("drops".into(), m.drops.into());
    o.insert("cpu_user_ms".into(), (m.cpu.user_us as f64 / 1000.0).into());
    o.insert("cpu_sys_ms".into(), (m.cpu.sys_us as f64 / 1000.0).into());
    o.insert("peak_rss_kb".into(), m.peak_rss_kb.into());
    o.insert("peer_cpu_user_ms".into(), (m.peer_cpu.user_us as f64 / 1000.0).into());
    o.insert("peer_cpu_sys_ms".into(), (m.peer_cpu.sys_us as f64 / 1000.0).into());
    o.insert("peer_peak_rss_kb".into(), m.peer_peak_rss_kb.into());
    if let Some(n) = &m.note {
        o.insert("note".into(), n.clone().into());
    }
    for (k, v) in &m.extra {
        o.insert((*k).into(), if v.is_finite() { Value::from(*v) } else { Value::Null });
    }
    if let Some(r) = r {
        let f = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
        if let Some(lr) = r.latency {
            for (k, v) in ["p50_ratio", "p90_ratio", "p99_ratio", "p999_ratio", "max_ratio"].iter().zip(lr) {
                o.insert((*k).into(), f(v));
            }
        }
        o.insert("msgs_per_s_ratio".into(), f(r.msgs_per_s));
        o.insert("ratio_vs".into(), r.vs.into());
        o.insert("bytes_per_s_ratio".into(), f(r.msgs_per_s));
        if r.lost.0.is_some() || r.lost.1.is_some() {
            // True: a run lost messages, so the two ratios above compare receive rates, not lossless rates.
            o.insert("msgs_per_s_ratio_lossy".into(), r.lossy().into());
        }
    }
    Value::Object(o)
}

/// A row printed by a reference program (`bench/iceoryx2/`, `bench/ecal-cpp/`'s ping-pong), one JSON object per
/// size: `size_bytes`, `p50_ns` .. `max_ns`, `mean_ns`, `msgs_per_s`, `messages`, both processes' CPU (µs) and peak
/// RSS (kB); copying ping-pong with one subscriber. `None` when a field is missing.
pub(crate) fn program_row(system: System, transport: &'static str, wait: WaitMode, v: &Value) -> Option<Measurement> {
    let u = |k: &str| v.get(k)?.as_u64();
    Some(Measurement {
        system,
        transport,
        via: Default::default(),
        wait,
        mode: Mode::PingPong,
        size: usize::try_from(u("size_bytes")?).ok()?,
        subscribers: 1,
        latency: Some(Latency {
            p50: u("p50_ns")?,
            p90: u("p90_ns")?,
            p99: u("p99_ns")?,
            p999: u("p999_ns")?,
            max: u("max_ns")?,
            mean: v.get("mean_ns")?.as_f64()?,
        }),
        msgs_per_s: v.get("msgs_per_s")?.as_f64()?,
        messages: u("messages")?,
        lost: None,
        drops: None,
        cpu: CpuTime { user_us: u("cpu_user_us")?, sys_us: u("cpu_sys_us")? },
        peer_cpu: CpuTime { user_us: u("peer_cpu_user_us")?, sys_us: u("peer_cpu_sys_us")? },
        peak_rss_kb: u("peak_rss_kb")?,
        peer_peak_rss_kb: u("peer_peak_rss_kb")?,
        note: None,
        extra: Vec::new(),
    })
}

/// Formats ns compactly: `850ns`, `1.23us`, `45.6ms`.
pub(crate) fn fmt_ns(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns}ns"),
        1_000..1_000_000 => format!("{:.2}us", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

/// Formats a byte count with a binary suffix: `64B`, `1K`, `4M`.
pub(crate) fn fmt_size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}K", n >> 10)
    } else {
        format!("{n}B")
    }
}

/// Formats a rate compactly: `1.23M`, `45.6k`, `789`.
pub(crate) fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Formats a ratio: `1.12x`, `4.6e-3x`, `-` when undefined.
pub(crate) fn fmt_ratio(x: f64) -> String {
    match x {
        x if !x.is_finite() => "-".into(),
        x if x >= 0.095 => format!("{x:.2}x"),
        x => format!("{x:.1e}x"),
    }
}

/// Table header line.
pub(crate) const TABLE_HEADER: &str = "system/transport       wait  mode              size subs      p50      p90      p99    p99.9      max     msg/s     GB/s   lost  cpu main u/s ms  cpu peer u/s ms  rss main/peer MB";

/// One table row (plus a ratio line when `r` is given).
pub(crate) fn table_row(m: &Measurement, r: Option<&Ratios>) -> String {
    let lat = |f: fn(&Latency) -> u64| m.latency.as_ref().map(|l| fmt_ns(f(l))).unwrap_or_else(|| "-".into());
    let mut s = format!(
        "{:<22} {:<5} {:<16} {:>5} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8.3} {:>6} {:>16} {:>16} {:>16}",
        format!("{}/{}", m.system.as_str(), m.transport),
        m.wait.as_str(),
        m.mode.as_str(),
        fmt_size(m.size),
        m.subscribers,
        lat(|l| l.p50),
        lat(|l| l.p90),
        lat(|l| l.p99),
        lat(|l| l.p999),
        lat(|l| l.max),
        fmt_rate(m.msgs_per_s),
        m.bytes_per_s() / 1e9,
        m.lost.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
        format!("{:.0}/{:.0}", m.cpu.user_us as f64 / 1e3, m.cpu.sys_us as f64 / 1e3),
        format!("{:.0}/{:.0}", m.peer_cpu.user_us as f64 / 1e3, m.peer_cpu.sys_us as f64 / 1e3),
        format!("{:.1}/{:.1}", m.peak_rss_kb as f64 / 1024.0, m.peer_peak_rss_kb as f64 / 1024.0),
    );
    if let Some(n) = &m.note {
        s.push_str(&format!("\n{:20}{n}", ""));
    }
    if let Some(r) = r {
        s.push_str(&format!("\n{:20}vs {}:", "", r.vs));
        if let Some(l) = r.latency {
            for (name, v) in ["p50", "p90", "p99", "p99.9", "max"].iter().zip(l) {
                s.push_str(&format!(" {name} {}", fmt_ratio(v)));
            }
        }
        s.push_str(&format!("  msg/s {}", fmt_ratio(r.msgs_per_s)));
        if r.lossy() {
            let n = |l: Option<u64>| l.map_or_else(|| "-".to_string(), |l| l.to_string());
            s.push_str(&format!(
                " (receive rates of lossy runs, not lossless rates: {} lost here, {} in the baseline)",
                n(r.lost.0),
                n(r.lost.1)
            ));
        }
    }
    s
}

/// Prints measurements as they come and keeps them all (for the baseline ratios and the paced
/// rates).
#[derive(Debug)]
pub(crate) struct Reporter {
    json: bool,
    header_printed: bool,
    all: Vec<Measurement>,
    /// While shoal runs over its rings: the pages `shoal perf --huge-pages` put them on (`None`: as configured),
    /// and the peer's pid.
    pages: Option<(Option<Pages>, u32)>,
    /// The page line was printed for the rows since `set_pages` (without `--huge-pages` it is printed once).
    pages_noted: bool,
    /// `--pingpong --against ecal` with `--json`: shoal's block-mode ping-pong rows wait here (index in `all`, JSON
    /// object) for the eCAL C++ rows measured after them, whose ratios they then carry ([`Reporter::report_ecal`]).
    hold_for_ecal: bool,
    held: Vec<(usize, Value)>,
}

impl Reporter {
    /// A reporter writing JSON lines (`json`) or a table to stdout.
    pub(crate) fn new(json: bool) -> Reporter {
        Reporter {
            json,
            header_printed: false,
            all: Vec::new(),
            pages: None,
            pages_noted: false,
            hold_for_ecal: false,
            held: Vec::new(),
        }
    }

    /// eCAL C++ rows will follow shoal's block-mode ping-pong (`--pingpong --against ecal`): in JSON, hold those
    /// shoal rows back until [`Reporter::report_ecal`] adds their ratios to eCAL's.
    pub(crate) fn hold_for_ecal(&mut self) {
        self.hold_for_ecal = true;
    }

    /// Reports the eCAL C++ ping-pong rows of the run: each shoal block-mode ping-pong row of the same size gets
    /// `ecal_p50_ratio`, `ecal_p99_ratio` and `ecal_msgs_per_s_ratio` (shoal / eCAL; JSON: the held shoal rows are
    /// printed now, with them, before eCAL's), and in the table each eCAL row is followed by shoal's p50 over it.
    pub(crate) fn report_ecal(&mut self, rows: Vec<Measurement>) {
        let is_shoal_block =
            |m: &Measurement| m.system == System::Shoal && m.mode == Mode::PingPong && m.wait == WaitMode::Block;
        let mut lines: Vec<Vec<String>> = vec![Vec::new(); rows.len()];
        for i in 0..self.all.len() {
            if !is_shoal_block(&self.all[i]) || self.all[i].extra_value("ecal_p50_ratio").is_some() {
                continue;
            }
            let shoal = &self.all[i];
            let Some(k) = rows.iter().position(|e| e.mode == Mode::PingPong && e.size == shoal.size) else { continue };
            let r = ratios(shoal, &rows[k]);
            let Some(l) = r.latency else { continue };
            let (p50, e50) = (shoal.latency.map_or(0, |l| l.p50), rows[k].latency.map_or(0, |l| l.p50));
            lines[k].push(format!(
                "{:20}shoal{} block p50 / eCAL C++ p50: {} ({} / {}); p99 {}; msg/s {}",
                "",
                if shoal.extra_value("huge_pages") == Some(1.0) { " (huge pages)" } else { "" },
                fmt_ratio(l[0]),
                fmt_ns(p50),
                fmt_ns(e50),
                fmt_ratio(l[2]),
                fmt_ratio(r.msgs_per_s)
            ));
            let extra = [("ecal_p50_ratio", l[0]), ("ecal_p99_ratio", l[2]), ("ecal_msgs_per_s_ratio", r.msgs_per_s)];
            self.all[i].extra.extend(extra);
            if let Some((_, v)) = self.held.iter_mut().find(|(j, _)| *j == i)
                && let Some(o) = v.as_object_mut()
            {
                for (key, x) in extra {
                    o.insert(key.into(), if x.is_finite() { Value::from(x) } else { Value::Null });
                }
            }
        }
        self.flush_held();
        for (m, lines) in rows.into_iter().zip(lines) {
            self.report(m);
            if !self.json {
                let mut out = std::io::stdout().lock();
                for l in lines {
                    let _ = writeln!(out, "{l}");
                }
                let _ = out.flush();
            }
        }
    }

    /// Prints the held shoal rows (JSON), as they are.
    fn flush_held(&mut self) {
        let mut out = std::io::stdout().lock();
        for (_, v) in self.held.drain(..) {
            let _ = writeln!(out, "{v}");
        }
        let _ = out.flush();
    }

    /// Marks the shoal rows reported from now on as measured over rings, put on `pages` by `--huge-pages` (`None`:
    /// as configured), with the peer process whose rings are checked too; or unmarks them.
    pub(crate) fn set_pages(&mut self, pages: Option<(Option<Pages>, u32)>) {
        self.pages = pages;
        self.pages_noted = false;
    }

    /// The latest shoal measurement on normal pages of a mode, wait mode and size (`--huge-pages`).
    fn normal_pages(&self, mode: Mode, wait: WaitMode, size: usize) -> Option<&Measurement> {
        self.all.iter().rev().find(|m| {
            m.system == System::Shoal
                && m.mode == mode
                && m.wait == wait
                && m.size == size
                && m.extra_value("huge_pages") == Some(0.0)
        })
    }

    /// Adds the page figures to a shoal row over rings: the page size (kB) of the rings this process and the peer
    /// map (`ring_page_kb`, `peer_ring_page_kb`, from smaps, missing when it maps none); with `--huge-pages` also
    /// `huge_pages` (1 or 0) and for a huge-page row its ratios to the normal-page row of the same kind
    /// (`vs_normal_*`).
    fn add_pages(&self, m: &mut Measurement) -> Option<Ratios> {
        let (pages, peer) = self.pages.filter(|_| m.system == System::Shoal)?;
        if let Some(kb) = ring_page_kb(std::process::id()) {
            m.extra.push(("ring_page_kb", kb as f64));
        }
        if let Some(kb) = ring_page_kb(peer) {
            m.extra.push(("peer_ring_page_kb", kb as f64));
        }
        let pages = pages?;
        m.extra.push(("huge_pages", if pages == Pages::Huge { 1.0 } else { 0.0 }));
        if pages != Pages::Huge {
            return None;
        }
        let r = ratios(m, self.normal_pages(m.mode, m.wait, m.size)?);
        if let Some(l) = r.latency {
            m.extra.push(("vs_normal_p50_ratio", l[0]));
            m.extra.push(("vs_normal_p99_ratio", l[2]));
        }
        m.extra.push(("vs_normal_msgs_per_s_ratio", r.msgs_per_s));
        Some(r)
    }

    /// The latest baseline measurement of a mode, wait mode and size.
    pub(crate) fn baseline(&self, mode: Mode, wait: WaitMode, size: usize) -> Option<&Measurement> {
        self.all
            .iter()
            .rev()
            .find(|m| m.system == System::Baseline && m.mode == mode && m.wait == wait && m.size == size)
    }

    /// The reference a shoal figure is a ratio to: the strongest plain ring of the same mode, wait and size in this
    /// run (for latency the lowest p50 of the line, warm and deep rings: a ring that stays in the cache, as the deep
    /// ring does for mid sizes, is what a competent engineer would pick there; for streams the higher lossless rate of
    /// the line and warm rings; for a paced stream the ring whose unpaced stream was the reference), else the latest baseline row (the raw socket
    /// programs of `--transport udp|tcp`).
    pub(crate) fn reference(&self, mode: Mode, wait: WaitMode, size: usize) -> Option<&Measurement> {
        let of = |mode: Mode, label: &str| {
            self.all.iter().rev().find(|m| {
                m.system == System::Baseline
                    && m.transport == label
                    && m.mode == mode
                    && m.wait == wait
                    && m.size == size
            })
        };
        let strong = [LINE_LABEL, WARM_LABEL];
        let best = match mode {
            Mode::Throughput | Mode::ThroughputPaced => strong
                .iter()
                .filter_map(|l| of(Mode::Throughput, l))
                .filter(|m| m.lost.unwrap_or(0) == 0)
                .max_by(|a, b| a.msgs_per_s.total_cmp(&b.msgs_per_s))
                .and_then(|m| of(mode, m.transport)),
            _ => [LINE_LABEL, WARM_LABEL, DEEP_LABEL]
                .iter()
                .filter_map(|l| of(mode, l))
                .min_by_key(|m| m.latency.map_or(u64::MAX, |l| l.p50)),
        };
        best.or_else(|| {
            self.all.iter().rev().find(|m| {
                m.system == System::Baseline
                    && m.transport != DEEP_LABEL
                    && m.transport != ICEORYX2_LABEL
                    && m.mode == mode
                    && m.wait == wait
                    && m.size == size
            })
        })
        .or_else(|| self.baseline(mode, wait, size))
    }

    /// A shoal row's ratios to the second references: the deep ring (`deep_*`) and iceoryx2 (`iceoryx2_*`).
    fn add_second_references(&self, m: &mut Measurement) {
        for (label, prefix) in [(DEEP_LABEL, "deep"), (ICEORYX2_LABEL, "iceoryx2")] {
            let Some(b) = self.all.iter().rev().find(|b| {
                b.system == System::Baseline
                    && b.transport == label
                    && b.mode == m.mode
                    && b.wait == m.wait
                    && b.size == m.size
            }) else {
                continue;
            };
            let r = ratios(m, b);
            let key = |k: &str| -> &'static str {
                match (prefix, k) {
                    ("deep", "p50") => "deep_p50_ratio",
                    ("deep", "p99") => "deep_p99_ratio",
                    ("deep", _) => "deep_msgs_per_s_ratio",
                    (_, "p50") => "iceoryx2_p50_ratio",
                    (_, "p99") => "iceoryx2_p99_ratio",
                    _ => "iceoryx2_msgs_per_s_ratio",
                }
            };
            if let Some(l) = r.latency {
                m.extra.push((key("p50"), l[0]));
                m.extra.push((key("p99"), l[2]));
            }
            m.extra.push((key("msgs"), r.msgs_per_s));
        }
    }

    /// Table mode: the closing summary of copying ping-pong per wait and size, shoal against the strongest plain
    /// ring (named), the deep ring and iceoryx2, one-way p50/p99, with shoal's ratios to the strongest ring and to
    /// iceoryx2. Printed when shoal and a reference were both measured.
    pub(crate) fn summary(&self) {
        if self.json {
            return;
        }
        let shoal: Vec<&Measurement> = self
            .all
            .iter()
            .filter(|m| {
                m.system == System::Shoal && m.mode == Mode::PingPong && m.extra_value("huge_pages") != Some(1.0)
            })
            .collect();
        let mut lines = Vec::new();
        for m in shoal {
            let Some(best) = self.reference(m.mode, m.wait, m.size) else { continue };
            let find = |label: &str| {
                self.all.iter().rev().find(|b| {
                    b.system == System::Baseline
                        && b.transport == label
                        && b.mode == m.mode
                        && b.wait == m.wait
                        && b.size == m.size
                })
            };
            let pp = |x: Option<&Measurement>| match x.and_then(|x| x.latency) {
                Some(l) => format!("{}/{}", fmt_ns(l.p50), fmt_ns(l.p99)),
                None => "-".to_string(),
            };
            let r = ratios(m, best);
            let ri = find(ICEORYX2_LABEL).map(|b| ratios(m, b));
            let rl =
                |r: Option<&Ratios>, i: usize| r.and_then(|r| r.latency).map_or("-".to_string(), |l| fmt_ratio(l[i]));
            lines.push(format!(
                "{:<5} {:>5} {:>19} {:>19} {:<9} {:>19} {:>19} {:>13} {:>13} {:>14}",
                m.wait.as_str(),
                fmt_size(m.size),
                pp(Some(m)),
                pp(Some(best)),
                best.transport,
                pp(find(DEEP_LABEL)),
                pp(find(ICEORYX2_LABEL)),
                rl(Some(&r), 0),
                rl(Some(&r), 2),
                rl(ri.as_ref(), 0),
            ));
        }
        if lines.is_empty() {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "\nping-pong, one-way p50/p99: shoal against the strongest plain ring of this run (the fastest of \
             line_ring, warm_ring and the deep ring), the deep ring and iceoryx2\n{:<5} {:>5} {:>19} {:>19} {:<9} {:>19} {:>19} {:>13} {:>13} {:>14}",
            "wait",
            "size",
            "shoal",
            "strongest",
            "(which)",
            "deep ring",
            "iceoryx2",
            "p50 shoal/str",
            "p99 shoal/str",
            "p50 shoal/ice2"
        );
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }

    /// Reports the host check of one size and wait mode (`perf::host_check`): the line ring's 64 B spin p50 right
    /// before the size's references and right after shoal's ping-pong and, at 64 B in spin mode, the line ring's own
    /// row of the references. The size's measurements are steady when they agree within [`HOST_CHECK_TOLERANCE`]. In
    /// JSON a row of mode `host_check` (`for_size_bytes`, `start_p50_ns` where there is that row, `steady`); in the
    /// table a line, with a warning when the host changed speed.
    pub(crate) fn host_check(&mut self, wait: WaitMode, size: usize, before_ns: u64, after_ns: u64) {
        let start = self
            .all
            .iter()
            .rfind(|m| {
                m.system == System::Baseline
                    && m.transport == LINE_LABEL
                    && m.mode == Mode::PingPong
                    && m.wait == WaitMode::Spin
                    && wait == WaitMode::Spin
                    && m.size == 64
                    && size == 64
            })
            .and_then(|m| m.latency)
            .map(|l| l.p50);
        let checks: Vec<u64> = [before_ns].into_iter().chain(start).chain([after_ns]).collect();
        let steady = steady(&checks);
        let mut out = std::io::stdout().lock();
        if self.json {
            let mut v = json!({
                "system": "baseline", "transport": "line_ring", "mode": "host_check", "wait": wait.as_str(),
                "size_bytes": 64, "for_size_bytes": size, "before_p50_ns": before_ns, "after_p50_ns": after_ns,
                "steady": steady,
            });
            if let Some(s) = start {
                v["start_p50_ns"] = json!(s);
            }
            let _ = writeln!(out, "{v}");
        } else {
            let _ = writeln!(
                out,
                "-- host check ({}, {}): the line ring's 64 B spin p50 {} before the references{}, {} after shoal's \
                 ping-pong{}",
                wait.as_str(),
                fmt_size(size),
                fmt_ns(before_ns),
                start.map_or(String::new(), |s| format!(", {} in them", fmt_ns(s))),
                fmt_ns(after_ns),
                if steady {
                    ""
                } else {
                    ": the host changed speed meanwhile, so this size's ping-pong ratios measure that change too"
                }
            );
        }
        let _ = out.flush();
    }

    /// Prints a free-text line (table mode only; JSON output stays machine-readable).
    pub(crate) fn note(&mut self, text: &str) {
        if !self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
        }
    }

    /// Prints one measurement, with ratios when a baseline of the same kind was reported.
    pub(crate) fn report(&mut self, mut m: Measurement) {
        let vs_normal = self.add_pages(&mut m);
        let r = match m.system {
            System::Baseline | System::EcalCpp => None,
            System::Shoal => self.reference(m.mode, m.wait, m.size).map(|b| ratios(&m, b)),
        };
        if m.system == System::Shoal {
            self.add_second_references(&mut m);
        }
        let mut out = std::io::stdout().lock();
        if self.json {
            let v = to_json(&m, r.as_ref());
            if self.hold_for_ecal && m.system == System::Shoal && m.mode == Mode::PingPong && m.wait == WaitMode::Block
            {
                self.held.push((self.all.len(), v));
            } else {
                let _ = writeln!(out, "{v}");
            }
        } else {
            if !self.header_printed {
                let _ = writeln!(out, "{TABLE_HEADER}");
                self.header_printed = true;
            }
            let _ = writeln!(out, "{}", table_row(&m, r.as_ref()));
            let second: Vec<String> = [("deep ring", "deep"), ("iceoryx2", "iceoryx2")]
                .iter()
                .filter_map(|(name, p)| {
                    let v = |k: &str| m.extra_value(&format!("{p}_{k}_ratio")).map(fmt_ratio);
                    match (v("p50"), v("p99"), v("msgs_per_s")) {
                        (Some(a), Some(b), _) => Some(format!("vs {name}: p50 {a} p99 {b}")),
                        (None, None, Some(c)) => Some(format!("vs {name}: msg/s {c}")),
                        _ => None,
                    }
                })
                .collect();
            if !second.is_empty() {
                let _ = writeln!(out, "{:20}{}", "", second.join("; "));
            }
            let shown = self.pages.filter(|(p, _)| m.system == System::Shoal && (p.is_some() || !self.pages_noted));
            if let Some((pages, _)) = shown {
                self.pages_noted = true;
                let kb = |k| m.extra_value(k).map_or_else(|| "-".to_string(), |v| format!("{v:.0} kB"));
                let mut line = format!(
                    "{:20}{} pages: rings mapped with {} (this process) / {} (peer)",
                    "",
                    pages.map_or("configured", Pages::as_str),
                    kb("ring_page_kb"),
                    kb("peer_ring_page_kb")
                );
                if let Some(v) = vs_normal {
                    line.push_str("; vs normal pages:");
                    if let Some(l) = v.latency {
                        line.push_str(&format!(" p50 {} p99 {}", fmt_ratio(l[0]), fmt_ratio(l[2])));
                    }
                    line.push_str(&format!(" msg/s {}", fmt_ratio(v.msgs_per_s)));
                }
                let _ = writeln!(out, "{line}");
            }
        }
        let _ = out.flush();
        drop(out);
        self.all.push(m);
    }
}

impl Drop for Reporter {
    /// Shoal rows still held for eCAL's (its run failed) are printed as they are.
    fn drop(&mut self) {
        self.flush_held();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_steady_while_its_host_checks_agree_within_the_tolerance() {
        assert!(steady(&[95, 100, 90]));
        assert!(steady(&[100, 150]), "1.5x is within");
        assert!(!steady(&[100, 151]));
        assert!(!steady(&[95, 340, 345]), "the host moved the vCPUs");
        assert!(steady(&[]));
    }

    fn sample(system: System, p50: u64, rate: f64) -> Measurement {
        Measurement {
            system,
            transport: "shm_ring",
            via: Default::default(),
            wait: WaitMode::Spin,
            mode: Mode::PingPong,
            size: 64,
            subscribers: 1,
            latency: Some(Latency { p50, p90: p50, p99: p50, p999: p50, max: p50, mean: p50 as f64 }),
            msgs_per_s: rate,
            messages: 10,
            lost: None,
            drops: Some(0),
            cpu: CpuTime { user_us: 1500, sys_us: 0 },
            peer_cpu: CpuTime::default(),
            peak_rss_kb: 1024,
            peer_peak_rss_kb: 2048,
            note: None,
            extra: vec![("x_extra", 2.5)],
        }
    }

    #[test]
    fn json_has_the_required_fields_and_ratios() {
        let b = sample(System::Baseline, 1000, 2000.0);
        let m = sample(System::Shoal, 1120, 1000.0);
        let r = ratios(&m, &b);
        let v = to_json(&m, Some(&r));
        for k in [
            "system",
            "transport",
            "wait",
            "size_bytes",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p999_ns",
            "max_ns",
            "msgs_per_s",
            "bytes_per_s",
            "mode",
            "cpu_user_ms",
            "cpu_sys_ms",
            "peak_rss_kb",
            "p50_ratio",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["system"], "shoal");
        assert_eq!(v["transport"], "shm_ring");
        assert_eq!(v["mode"], "pingpong");
        assert_eq!(v["bytes_per_s"], 64_000.0);
        assert_eq!(v["cpu_user_ms"], 1.5);
        assert!((v["p50_ratio"].as_f64().unwrap() - 1.12).abs() < 1e-9);
        assert_eq!(v["msgs_per_s_ratio"], 0.5);
        assert!(table_row(&m, Some(&r)).contains("p50 1.12x"));
        assert!(to_json(&b, None).get("p50_ratio").is_none());
        assert_eq!(v["x_extra"], 2.5);
        assert!(v.get("msgs_per_s_ratio_lossy").is_none(), "ping-pong counts no losses");
    }

    #[test]
    fn ecal_rows_give_their_ratios_to_shoals_block_mode_rows_of_the_same_size() {
        let mut rep = Reporter::new(true);
        rep.hold_for_ecal();
        let mut spin = sample(System::Shoal, 500, 1000.0);
        spin.size = 64;
        let mut block = sample(System::Shoal, 900, 1000.0);
        block.wait = WaitMode::Block;
        let mut other_size = block.clone();
        other_size.size = 128;
        for m in [spin, block.clone(), other_size] {
            rep.report(m);
        }
        assert_eq!(rep.held.len(), 2, "shoal's block-mode ping-pong rows wait for eCAL's");
        let mut ecal = sample(System::EcalCpp, 1800, 500.0);
        (ecal.wait, ecal.transport) = (WaitMode::Block, "shm");
        rep.report_ecal(vec![ecal]);
        assert!(rep.held.is_empty());
        let ratio = |i: usize| rep.all[i].extra_value("ecal_p50_ratio");
        assert_eq!((ratio(0), ratio(1), ratio(2)), (None, Some(0.5), None));
        assert_eq!(rep.all[1].extra_value("ecal_msgs_per_s_ratio"), Some(2.0));
        assert_eq!(rep.all[3].system, System::EcalCpp);
        assert_eq!(to_json(&rep.all[3], None)["system"], "ecal-cpp");
        assert!(table_row(&rep.all[3], None).starts_with("ecal-cpp/shm "));
    }

    #[test]
    fn a_ratio_of_lossy_runs_says_so() {
        let mut b = sample(System::Baseline, 1000, 2000.0);
        let mut m = sample(System::Shoal, 1000, 3000.0);
        (b.mode, m.mode) = (Mode::Throughput, Mode::Throughput);
        (b.lost, m.lost) = (Some(0), Some(0));
        let r = ratios(&m, &b);
        assert_eq!(to_json(&m, Some(&r))["msgs_per_s_ratio_lossy"], false);
        assert!(!table_row(&m, Some(&r)).contains("lossy"));
        m.lost = Some(7);
        let r = ratios(&m, &b);
        assert_eq!(to_json(&m, Some(&r))["msgs_per_s_ratio_lossy"], true);
        assert!(
            table_row(&m, Some(&r)).contains(
                "msg/s 1.50x (receive rates of lossy runs, not lossless rates: 7 lost here, 0 in the baseline)"
            ),
            "{}",
            table_row(&m, Some(&r))
        );
        (m.lost, b.lost) = (Some(0), Some(3));
        assert_eq!(to_json(&m, Some(&ratios(&m, &b)))["msgs_per_s_ratio_lossy"], true);
    }

    #[test]
    fn latency_json_round_trip_and_formatting() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 100).unwrap();
        }
        let l = Latency::from_histogram(&h).unwrap();
        assert!((49_000..=51_000).contains(&l.p50), "{}", l.p50);
        assert_eq!(Latency::from_json(&l.to_json()), Some(l));
        assert!(Latency::from_histogram(&new_histogram()).is_none());
        assert_eq!(fmt_ns(850), "850ns");
        assert_eq!(fmt_ns(1234), "1.23us");
        assert_eq!(fmt_ns(45_600_000), "45.60ms");
        assert_eq!(fmt_size(64), "64B");
        assert_eq!(fmt_ratio(1.124), "1.12x");
        assert_eq!(fmt_ratio(0.0046), "4.6e-3x");
        assert_eq!(fmt_ratio(f64::NAN), "-");
        assert_eq!(fmt_size(4 << 20), "4M");
        assert_eq!(fmt_size(65536), "64K");
    }
}
