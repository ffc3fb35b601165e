//! The foundation targets T1-T6, evaluated from the measurements of one run (shoal against the
//! baseline ring measured by the same invocation, same method and wait mode). A target is
//! evaluated only when what it needs ran; `complete` says whether every size it names ran.

use serde_json::{Value, json};

use super::args::{Mode, System, TARGET_SIZES, TARGET_SUBSCRIBERS, TARGET_TOPICS, WaitMode};
use super::report::{Measurement, Reporter, find, fmt_size};
use super::rss::{RssReport, TARGET_KB};

/// How a target's value is compared with its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// value <= limit.
    AtMost,
    /// value >= limit.
    AtLeast,
    /// value < limit.
    Below,
}

impl Cmp {
    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Cmp::AtMost => value <= limit,
            Cmp::AtLeast => value >= limit,
            Cmp::Below => value < limit,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Cmp::AtMost => "<=",
            Cmp::AtLeast => ">=",
            Cmp::Below => "<",
        }
    }

    /// The worse of two values under this comparison.
    fn worse(self, a: f64, b: f64) -> f64 {
        match self {
            Cmp::AtLeast => a.min(b),
            Cmp::AtMost | Cmp::Below => a.max(b),
        }
    }
}

/// One evaluated target (for one wait mode where the target is per wait mode).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    /// `T1` .. `T6`.
    pub(crate) id: &'static str,
    /// The wait mode evaluated, if the target depends on it.
    pub(crate) wait: Option<WaitMode>,
    /// What is compared.
    pub(crate) what: &'static str,
    /// The worst value over the sizes evaluated.
    pub(crate) value: f64,
    /// The limit.
    pub(crate) limit: f64,
    /// How value and limit compare.
    pub(crate) cmp: Cmp,
    /// `x` (ratio) or `MB`.
    pub(crate) unit: &'static str,
    /// Every compared point (and any extra condition) holds.
    pub(crate) pass: bool,
    /// Everything the target names was measured (e.g. every size from 64 B to 4 MB).
    pub(crate) complete: bool,
    /// The per-size values and anything else that decided the result.
    pub(crate) detail: String,
}

impl Target {
    /// The JSON row (`mode: "target"`).
    pub(crate) fn to_json(&self) -> Value {
        let num = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
        json!({
            "mode": "target", "target": self.id, "wait": self.wait.map(WaitMode::as_str), "what": self.what,
            "value": num(self.value), "limit": self.limit, "cmp": self.cmp.as_str(), "unit": self.unit,
            "pass": self.pass, "complete": self.complete, "detail": self.detail,
        })
    }

    /// The table row.
    pub(crate) fn to_text(&self) -> String {
        let v = |x: f64| if self.unit == "x" { format!("{x:.2}x") } else { format!("{x:.1} {}", self.unit) };
        format!(
            "{:<3} {:<5} {:<44} {:>9} {:<2} {:<8} {:<4}{}  {}",
            self.id,
            self.wait.map_or("-", WaitMode::as_str),
            self.what,
            v(self.value),
            self.cmp.as_str(),
            v(self.limit),
            if self.pass { "PASS" } else { "FAIL" },
            if self.complete { "" } else { " (incomplete)" },
            self.detail
        )
    }
}

fn p50(m: &Measurement) -> Option<f64> {
    m.latency.map(|l| l.p50 as f64)
}

/// Sizes measured in a mode, in order of first appearance.
fn sizes(ms: &[Measurement], system: System, mode: Mode, wait: WaitMode) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for m in ms.iter().filter(|m| m.system == system && m.mode == mode && m.wait == wait) {
        if !out.contains(&m.size) {
            out.push(m.size);
        }
    }
    out
}

/// Builds a target from per-size values: the worst one is the value; `complete` when every
/// target size is among them. `None` when there is no point.
fn over_sizes(
    (id, wait, what): (&'static str, Option<WaitMode>, &'static str),
    limit: f64,
    cmp: Cmp,
    points: &[(usize, f64)],
) -> Option<Target> {
    let first = points.first()?.1;
    let value = points.iter().fold(first, |w, (_, v)| cmp.worse(w, *v));
    let pass = points.iter().all(|(_, v)| cmp.holds(*v, limit));
    let missing: Vec<String> =
        TARGET_SIZES.iter().filter(|s| !points.iter().any(|(p, _)| p == *s)).map(|s| fmt_size(*s)).collect();
    let mut detail = points.iter().map(|(s, v)| format!("{} {v:.2}x", fmt_size(*s))).collect::<Vec<_>>().join(", ");
    if !missing.is_empty() {
        detail.push_str(&format!("; not measured: {}", missing.join(", ")));
    }
    Some(Target { id, wait, what, value, limit, cmp, unit: "x", pass, complete: missing.is_empty(), detail })
}

/// Shoal's p50 over the baseline's, per size, for a mode and wait.
fn p50_vs_baseline(ms: &[Measurement], mode: Mode, wait: WaitMode) -> Vec<(usize, f64)> {
    sizes(ms, System::Shoal, mode, wait)
        .into_iter()
        .filter_map(|s| {
            let a = p50(find(ms, System::Shoal, mode, wait, s)?)?;
            let b = p50(find(ms, System::Baseline, mode, wait, s)?)?;
            Some((s, a / b))
        })
        .collect()
}

fn t2(ms: &[Measurement], wait: WaitMode) -> Option<Target> {
    let size = 64;
    let s = find(ms, System::Shoal, Mode::Throughput, wait, size)?;
    let b = find(ms, System::Baseline, Mode::Throughput, wait, size)?;
    let ratio = s.msgs_per_s / b.msgs_per_s;
    let (limit, cmp) = (0.5, Cmp::AtLeast);
    let paced = find(ms, System::Shoal, Mode::ThroughputPaced, wait, size);
    let paced_lost = paced.and_then(|p| p.lost);
    let mut detail =
        format!("unpaced {:.0} vs baseline {:.0} msg/s ({} lost)", s.msgs_per_s, b.msgs_per_s, s.lost.unwrap_or(0));
    match (paced, paced_lost) {
        (Some(p), Some(l)) => detail.push_str(&format!(
            "; paced at {:.0} msg/s: {l} lost (must be 0)",
            p.extra_value("rate_target").unwrap_or(f64::NAN)
        )),
        _ => detail.push_str("; paced run missing"),
    }
    Some(Target {
        id: "T2",
        wait: Some(wait),
        what: "64B throughput vs baseline, paced loss = 0",
        value: ratio,
        limit,
        cmp,
        unit: "x",
        pass: cmp.holds(ratio, limit) && paced_lost == Some(0),
        complete: paced_lost.is_some(),
        detail,
    })
}

fn t3(ms: &[Measurement], wait: WaitMode) -> Option<Target> {
    let big = p50(find(ms, System::Shoal, Mode::ZeroCopy, wait, 4 << 20)?)?;
    let small = p50(find(ms, System::Shoal, Mode::ZeroCopy, wait, 64)?)?;
    let ratio = big / small;
    let (limit, cmp) = (2.0, Cmp::AtMost);
    Some(Target {
        id: "T3",
        wait: Some(wait),
        what: "zero-copy p50 4M / p50 64B",
        value: ratio,
        limit,
        cmp,
        unit: "x",
        pass: cmp.holds(ratio, limit),
        complete: true,
        detail: format!("4M {big:.0} ns, 64B {small:.0} ns"),
    })
}

fn t5(ms: &[Measurement], wait: WaitMode) -> Option<Target> {
    let points: Vec<(usize, f64)> = ms
        .iter()
        .filter(|m| m.mode == Mode::Fanout && m.wait == wait && m.subscribers > 1)
        .filter_map(|m| Some((m.size, m.extra_value("send_cpu_ratio_vs_1")?)))
        .collect();
    let n = ms.iter().filter(|m| m.mode == Mode::Fanout && m.wait == wait).map(|m| m.subscribers).max()?;
    let mut t =
        over_sizes(("T5", Some(wait), "fan-out cpu/send N=4 vs N=1, phase medians"), 1.2, Cmp::AtMost, &points)?;
    if n != TARGET_SUBSCRIBERS {
        t.complete = false;
        t.detail.push_str(&format!("; ran with {n} subscribers, the target names {TARGET_SUBSCRIBERS}"));
    }
    Some(t)
}

fn t6(ms: &[Measurement], rss: &RssReport) -> Target {
    let unreported = ms.iter().filter(|m| m.peak_rss_kb == 0 || m.peer_peak_rss_kb == 0).count();
    let mb = rss.private_kb() as f64 / 1024.0;
    Target {
        id: "T6",
        wait: None,
        what: "100-topic process RSS outside shm mappings",
        value: mb,
        limit: TARGET_KB as f64 / 1024.0,
        cmp: Cmp::Below,
        unit: "MB",
        pass: rss.within_target() && unreported == 0,
        complete: rss.topics == TARGET_TOPICS,
        detail: format!(
            "{} topics: VmRSS {:.1} MB, shm {:.1} MB, peak {:.1} MB, cpu {:.0}/{:.0} ms, {} threads; cpu and peak RSS \
             reported for both processes of {} of {} rows",
            rss.topics,
            rss.vm_rss_kb as f64 / 1024.0,
            rss.shm_rss_kb as f64 / 1024.0,
            rss.peak_rss_kb as f64 / 1024.0,
            rss.cpu.user_us as f64 / 1000.0,
            rss.cpu.sys_us as f64 / 1000.0,
            rss.threads,
            ms.len() - unreported,
            ms.len()
        ),
    }
}

/// Evaluates every target whose measurements are present.
pub(crate) fn evaluate(ms: &[Measurement], rss: Option<&RssReport>) -> Vec<Target> {
    let waits = [WaitMode::Spin, WaitMode::Block];
    let mut out = Vec::new();
    let spin = p50_vs_baseline(ms, Mode::PingPong, WaitMode::Spin);
    out.extend(over_sizes(("T1", Some(WaitMode::Spin), "ping-pong p50 vs baseline, 64B-4M"), 1.5, Cmp::AtMost, &spin));
    out.extend(waits.iter().filter_map(|w| t2(ms, *w)));
    out.extend(waits.iter().filter_map(|w| t3(ms, *w)));
    let block = p50_vs_baseline(ms, Mode::PingPong, WaitMode::Block);
    out.extend(over_sizes(
        ("T4", Some(WaitMode::Block), "ping-pong p50 vs baseline, 64B-4M"),
        1.3,
        Cmp::AtMost,
        &block,
    ));
    out.extend(waits.iter().filter_map(|w| t5(ms, *w)));
    out.extend(rss.map(|r| t6(ms, r)));
    out
}

/// Prints the targets section (table) or one JSON row per target.
pub(crate) fn print(rep: &mut Reporter, targets: &[Target]) {
    if targets.is_empty() {
        return;
    }
    if rep.is_json() {
        for t in targets {
            rep.line(&t.to_json().to_string());
        }
        return;
    }
    let passed = targets.iter().filter(|t| t.pass).count();
    rep.line(&format!(
        "-- targets (shoal vs the baseline of this run; value = worst over sizes): {passed} of {} pass",
        targets.len()
    ));
    for t in targets {
        rep.line(&t.to_text());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::report::Latency;
    use crate::perf::sys::CpuTime;

    fn m(system: System, mode: Mode, wait: WaitMode, size: usize, p50: u64, rate: f64) -> Measurement {
        Measurement {
            system,
            wait,
            mode,
            size,
            subscribers: 1,
            latency: Some(Latency { p50, p90: p50, p99: p50, p999: p50, max: p50, mean: p50 as f64 }),
            msgs_per_s: rate,
            messages: 10,
            lost: Some(0),
            drops: Some(0),
            cpu: CpuTime::default(),
            peer_cpu: CpuTime::default(),
            peak_rss_kb: 1,
            peer_peak_rss_kb: 1,
            note: None,
            extra: Vec::new(),
        }
    }

    #[test]
    fn t1_takes_the_worst_size_and_knows_what_is_missing() {
        let (s, b, pp, w) = (System::Shoal, System::Baseline, Mode::PingPong, WaitMode::Spin);
        let ms = vec![
            m(b, pp, w, 64, 100, 0.0),
            m(b, pp, w, 1024, 200, 0.0),
            m(s, pp, w, 64, 120, 0.0),
            m(s, pp, w, 1024, 320, 0.0),
        ];
        let t = evaluate(&ms, None);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].id, "T1");
        assert!((t[0].value - 1.6).abs() < 1e-9);
        assert!(!t[0].pass && !t[0].complete);
        assert!(
            t[0].detail.contains("64B 1.20x") && t[0].detail.contains("not measured: 64K, 1M, 4M"),
            "{}",
            t[0].detail
        );
        assert_eq!(t[0].to_json()["cmp"], "<=");
    }

    #[test]
    fn t2_needs_half_the_rate_and_no_paced_loss() {
        let (s, b, w) = (System::Shoal, System::Baseline, WaitMode::Block);
        let mut paced = m(s, Mode::ThroughputPaced, w, 64, 1, 500.0);
        paced.extra.push(("rate_target", 500.0));
        let mut ms = vec![m(b, Mode::Throughput, w, 64, 1, 1000.0), m(s, Mode::Throughput, w, 64, 1, 600.0), paced];
        let t = evaluate(&ms, None);
        assert_eq!((t[0].id, t[0].pass, t[0].complete), ("T2", true, true));
        ms[2].lost = Some(3);
        let t = evaluate(&ms, None);
        assert!(!t[0].pass && t[0].detail.contains("3 lost"), "{}", t[0].detail);
    }

    #[test]
    fn t3_t5_t6() {
        let (s, w) = (System::Shoal, WaitMode::Spin);
        let mut f4 = m(s, Mode::Fanout, w, 64, 1, 0.0);
        f4.subscribers = 4;
        f4.extra.push(("send_cpu_ratio_vs_1", 1.1));
        let ms = vec![m(s, Mode::ZeroCopy, w, 64, 500, 0.0), m(s, Mode::ZeroCopy, w, 4 << 20, 1100, 0.0), f4];
        let rss = RssReport {
            topics: 100,
            received: 300,
            vm_rss_kb: 9000,
            shm_rss_kb: 2000,
            shm_mappings: 2,
            peak_rss_kb: 9000,
            cpu: CpuTime::default(),
            threads: 3,
        };
        let t = evaluate(&ms, Some(&rss));
        let ids: Vec<_> = t.iter().map(|t| (t.id, t.pass)).collect();
        assert_eq!(ids, vec![("T3", false), ("T5", true), ("T6", true)]);
        assert!((t[0].value - 2.2).abs() < 1e-9);
        assert!(!t[1].complete, "only 64B measured");
        assert!(t[2].to_text().contains("PASS"));
    }
}
