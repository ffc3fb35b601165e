//! The targets T1-T9, N1-N4 and S1-S6, evaluated from the JSON lines `shoal perf --json` printed: shoal against the
//! baseline ring of the same run (same method and wait mode, as deep as shoal's ring), fan-out against one
//! subscriber, the memory of a 100-topic process, the losses of reliable streams (rows marked `reliable`), and the
//! page size of rings asked to be on huge pages (rows of `--huge-pages` marked `huge_pages`, which no other target
//! reads); and N1-N4, shoal's UDP and TCP layers against the raw socket programs of the same run (rows of
//! `--transport udp|tcp`, which no other target reads); and S1-S6, issue 24's figures against the strongest
//! reference of the same run, read from the ratios `shoal perf` puts in its rows (see [`strongest`]). Only the
//! output format of `shoal perf` is read here, none of its code.
//!
//! A target passes only when everything it names was measured and holds. A measured value over its limit is a
//! FAIL (even if other values are missing); otherwise anything missing makes it NOT MEASURED.

use serde_json::{Value, json};

/// The sizes T1, T4 and T5 name, with their labels.
pub(crate) const SIZES: [(u64, &str); 5] =
    [(64, "64B"), (1 << 10, "1K"), (64 << 10, "64K"), (1 << 20, "1M"), (4 << 20, "4M")];

/// Subscriber processes of the fan-out target (T5).
pub(crate) const SUBSCRIBERS: u64 = 4;

/// The sizes of the huge-page target (T9), with their labels.
pub(crate) const HUGE_SIZES: [(u64, &str); 3] = [(64 << 10, "64K"), (1 << 20, "1M"), (4 << 20, "4M")];

/// T9's limit: the kernel page size of the rings, kB.
const HUGE_PAGE_KB: f64 = 2048.0;

/// The sizes of the large-message targets against the strongest plain ring and iceoryx2 (S1, S2), with labels.
pub(crate) const LARGE_SIZES: [(u64, &str); 4] = [(64 << 10, "64K"), (1 << 20, "1M"), (4 << 20, "4M"), (8 << 20, "8M")];

/// The sizes of the block-mode target against eCAL 6.1.1's C++ ping-pong (S3), with labels.
pub(crate) const ECAL_SIZES: [(u64, &str); 5] =
    [(64, "64B"), (64 << 10, "64K"), (1 << 20, "1M"), (4 << 20, "4M"), (8 << 20, "8M")];

/// Subscriber processes of the large fan-out target (S6).
pub(crate) const MANY_SUBSCRIBERS: u64 = 16;

/// The sizes of the large fan-out target (S6), with labels.
pub(crate) const MANY_SIZES: [(u64, &str); 2] = [(64, "64B"), (1 << 20, "1M")];

/// Topics of the memory target (T6).
pub(crate) const TOPICS: u64 = 100;

/// T6's limit: RSS outside the shared-memory mappings, MB.
const RSS_LIMIT_MB: f64 = 20.0;

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

/// The result of one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Everything the target names was measured and holds.
    Pass,
    /// A measured value breaks the limit.
    Fail,
    /// Something the target names was not measured (a run failed, a row or a value is missing).
    NotMeasured,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotMeasured => "NOT MEASURED",
        }
    }

    /// Fail if a measured value failed, else not measured if anything is missing, else pass.
    fn of(failed: bool, missing: bool) -> Status {
        match (failed, missing) {
            (true, _) => Status::Fail,
            (false, true) => Status::NotMeasured,
            (false, false) => Status::Pass,
        }
    }
}

/// One evaluated target (for one wait mode where the target is per wait mode).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    /// `T1` .. `T6`.
    pub(crate) id: &'static str,
    /// The wait mode evaluated (`spin`, `block`), if the target depends on it.
    pub(crate) wait: Option<&'static str>,
    /// What is compared.
    pub(crate) what: &'static str,
    /// The worst value measured, if any.
    pub(crate) value: Option<f64>,
    /// The limit.
    pub(crate) limit: f64,
    /// How value and limit compare.
    pub(crate) cmp: Cmp,
    /// `x` (ratio) or `MB`.
    pub(crate) unit: &'static str,
    /// The result.
    pub(crate) status: Status,
    /// The per-size values, what was not measured, and anything else that decided the result.
    pub(crate) detail: String,
}

impl Target {
    fn fmt_value(&self, x: f64) -> String {
        match self.unit {
            "x" => format!("{x:.2}x"),
            "kB" => format!("{x:.0} kB"),
            "msg/s" => format!("{:.2}M", x / 1e6),
            unit => format!("{x:.1} {unit}"),
        }
    }

    /// The JSON line of `shoal-bench targets --json`.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "target": self.id, "wait": self.wait, "what": self.what, "value": self.value, "limit": self.limit,
            "cmp": self.cmp.as_str(), "unit": self.unit, "status": self.status.as_str(),
            "pass": self.status == Status::Pass, "detail": self.detail,
        })
    }

    /// The table row.
    pub(crate) fn to_text(&self) -> String {
        format!(
            "{:<3} {:<5} {:<44} {:>9} {:<2} {:<8} {:<12}  {}",
            self.id,
            self.wait.unwrap_or("-"),
            self.what,
            self.value.map_or_else(|| "-".to_string(), |v| self.fmt_value(v)),
            self.cmp.as_str(),
            self.fmt_value(self.limit),
            self.status.as_str(),
            self.detail
        )
    }
}

/// A finite number at `key` of a row.
fn num(row: &Value, key: &str) -> Option<f64> {
    row.get(key)?.as_f64().filter(|x| x.is_finite())
}

/// Whether `r` is a row of `system` over the shared-memory rings (best effort or `reliable`, normal pages, not the
/// line or warm ring nor iceoryx2, which `shoal perf --baseline` measures beside the deep ring) of this mode, wait
/// mode and size.
fn is_ring_row(r: &Value, system: &str, mode: &str, wait: &str, size: u64, reliable: bool) -> bool {
    r["system"] == system
        && !["line_ring", "warm_ring", "iceoryx2"].iter().any(|t| r["transport"] == *t)
        && r["mode"] == mode
        && r["wait"] == wait
        && r["size_bytes"].as_u64() == Some(size)
        && (num(r, "reliable") == Some(1.0)) == reliable
        && num(r, "huge_pages") != Some(1.0)
        && !is_network(r)
}

/// Whether `r` is a shoal [ring row](is_ring_row) of this mode, wait mode and size that carries the ratio `key`,
/// which `shoal perf` computes against the references of the same run.
fn is_ratio_row(r: &Value, mode: &str, wait: &str, size: u64, reliable: bool, key: &str) -> bool {
    is_ring_row(r, "shoal", mode, wait, size, reliable) && num(r, key).is_some()
}

/// The JSON lines of the runs, queried the way the targets need them.
#[derive(Debug, Default)]
pub(crate) struct Rows(pub(crate) Vec<Value>);

impl Rows {
    /// The latest measurement row of a system, mode, wait mode and size, of a run with reliable endpoints (`shoal
    /// perf --reliable`) or without; never a row of rings put on huge pages by `--huge-pages` (only T9 reads
    /// those). A baseline row is the deep ring's (as deep as shoal's ring, what the targets are set against), not
    /// the line or warm ring's nor iceoryx2's, which `shoal perf --baseline` measures beside it.
    fn find_with(&self, system: &str, mode: &str, wait: &str, size: u64, reliable: bool) -> Option<&Value> {
        self.0.iter().rev().find(|r| is_ring_row(r, system, mode, wait, size, reliable))
    }

    /// The latest row of `shoal perf --transport udp|tcp` with this `transport` label (`udp`, `tcp`, `raw_udp`,
    /// `raw_tcp`), mode, wait mode and size.
    fn find_net(&self, transport: &str, mode: &str, wait: &str, size: u64) -> Option<&Value> {
        self.0.iter().rev().find(|r| {
            r["transport"] == transport
                && r["mode"] == mode
                && r["wait"] == wait
                && r["size_bytes"].as_u64() == Some(size)
        })
    }

    /// The latest shoal row of `shoal perf --huge-pages` with rings on huge pages, of a mode, wait and size.
    fn find_huge(&self, mode: &str, wait: &str, size: u64) -> Option<&Value> {
        self.0.iter().rev().find(|r| {
            r["system"] == "shoal"
                && r["mode"] == mode
                && r["wait"] == wait
                && r["size_bytes"].as_u64() == Some(size)
                && num(r, "huge_pages") == Some(1.0)
        })
    }

    /// Rows of the measurement modes (every mode but the memory mode's `rss` and the host checks, `host_check`).
    fn measurements(&self) -> impl Iterator<Item = &Value> {
        self.0.iter().filter(|r| r.get("size_bytes").is_some() && r["mode"] != "rss" && r["mode"] != "host_check")
    }
}

/// Rows of `--transport udp|tcp`, which only the network targets (N1-N4) read.
fn is_network(r: &Value) -> bool {
    ["udp", "tcp", "raw_udp", "raw_tcp"].iter().any(|t| r["transport"] == *t)
}

/// The wait mode of the network targets.
pub(crate) const NET_WAIT: &str = "block";

/// shoal over `transport` against the raw socket program of the same run: unpaced msg/s ratio at `size`.
fn net_ratio(
    rows: &Rows,
    (id, what): (&'static str, &'static str),
    (transport, raw): (&str, &str),
    size: u64,
    limit: f64,
) -> Target {
    let cmp = Cmp::AtLeast;
    let row = |t| rows.find_net(t, "throughput", NET_WAIT, size);
    let rate = |t| num(row(t)?, "msgs_per_s");
    let (shoal, base) = (rate(transport), rate(raw));
    let ratio = shoal.zip(base.filter(|b| *b > 0.0)).map(|(s, b)| s / b);
    let lost = |t| row(t).and_then(|r| r["lost"].as_u64()).map_or_else(|| "-".to_string(), |l| l.to_string());
    let fmt = |x: Option<f64>| x.map_or_else(|| "not measured".to_string(), |x| format!("{x:.0}"));
    Target {
        id,
        wait: Some(NET_WAIT),
        what,
        value: ratio,
        limit,
        cmp,
        unit: "x",
        status: Status::of(ratio.is_some_and(|r| !cmp.holds(r, limit)), ratio.is_none()),
        detail: format!(
            "unpaced {} ({} lost) vs {raw} {} ({} lost) msg/s",
            fmt(shoal),
            lost(transport),
            fmt(base),
            lost(raw)
        ),
    }
}

/// Runs of the 1 MiB UDP stream whose median N3 takes.
pub(crate) const N3_RUNS: usize = 3;

/// N3: 1 MiB over shoal's UDP layer with shoal's defaults (`send_mode = auto`: from the publisher's thread), unpaced,
/// at least 0.9x the raw UDP program of the same run (issue 24 item 4), the median of the last [`N3_RUNS`] runs: on
/// this VM a run now and then falls in a slow minute of one of the two programs (0.41x once, shoal 1,764 msg/s
/// against raw UDP's 4,348, between runs of 1.06-1.39x). Receive rates, as N1's.
fn n3(rows: &Rows) -> Target {
    let (limit, cmp) = (0.9, Cmp::AtLeast);
    let of = |transport: &'static str| {
        rows.0.iter().filter(move |r| {
            r["transport"] == transport
                && r["mode"] == "throughput"
                && r["wait"] == NET_WAIT
                && r["size_bytes"].as_u64() == Some(1 << 20)
        })
    };
    // Each run's shoal row with the raw program's row of the same run.
    let pairs: Vec<(&Value, &Value)> =
        of("udp").filter_map(|s| Some((s, of("raw_udp").rfind(|b| run_of(b) == run_of(s))?))).collect();
    let runs = &pairs[pairs.len().saturating_sub(N3_RUNS)..];
    let ratio_of = |(s, b): &(&Value, &Value)| Some(num(s, "msgs_per_s")? / num(b, "msgs_per_s").filter(|v| *v > 0.0)?);
    let ratios: Vec<f64> = runs.iter().filter_map(ratio_of).collect();
    let value = (ratios.len() == N3_RUNS).then(|| median_of_runs(ratios, cmp)).flatten().map(|(m, _)| m);
    let lost = |r: &Value| r["lost"].as_u64().map_or_else(|| "-".to_string(), |l| l.to_string());
    let each = runs
        .iter()
        .filter_map(|p| {
            let rate = |r: &Value| num(r, "msgs_per_s").map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
            Some(format!(
                "{:.2}x ({} msg/s, {} lost, vs raw_udp {}, {} lost)",
                ratio_of(p)?,
                rate(p.0),
                lost(p.0),
                rate(p.1),
                lost(p.1)
            ))
        })
        .collect::<Vec<_>>();
    let detail = if value.is_some() {
        format!("median of {N3_RUNS} runs: {}", each.join(", "))
    } else {
        format!("not measured: {} of {N3_RUNS} runs with a 1 MiB UDP stream and raw_udp beside it", each.len())
    };
    Target {
        id: "N3",
        wait: Some(NET_WAIT),
        what: "1M UDP throughput vs raw UDP (defaults)",
        value,
        limit,
        cmp,
        unit: "x",
        status: Status::of(value.is_some_and(|v| !cmp.holds(v, limit)), value.is_none()),
        detail,
    }
}

/// N2: 64 B over shoal's UDP layer with shoal's defaults, which batch a stream through the I/O thread, unpaced, at
/// least 1 M msg/s received with none lost: a receive rate of a run that lost messages does not count.
fn n2(rows: &Rows) -> Target {
    let (limit, cmp) = (1e6, Cmp::AtLeast);
    let row = rows.find_net("udp", "throughput", NET_WAIT, 64);
    let value = row.and_then(|r| num(r, "msgs_per_s"));
    let lost = row.and_then(|r| r["lost"].as_u64());
    let batched = row.and_then(|r| num(r, "udp_send_io_thread")) == Some(1.0);
    let failed =
        value.is_some_and(|v| !cmp.holds(v, limit)) || lost.is_some_and(|l| l > 0) || (row.is_some() && !batched);
    Target {
        id: "N2",
        wait: Some(NET_WAIT),
        what: "64B UDP throughput (defaults, batched), msg/s, 0 lost",
        value,
        limit,
        cmp,
        unit: "msg/s",
        status: Status::of(failed, value.is_none() || lost.is_none()),
        detail: match (row, lost) {
            (None, _) | (_, None) => "not measured".to_string(),
            (Some(_), Some(l)) if !batched => {
                format!("{l} lost; not sent through the I/O thread's batches (send_mode = user_thread)")
            }
            (Some(_), Some(l)) => format!("{l} lost (must be 0)"),
        },
    }
}

/// Builds a target from one value per target size: the worst measured is the value.
fn over_sizes(
    (id, wait, what): (&'static str, Option<&'static str>, &'static str),
    limit: f64,
    cmp: Cmp,
    points: &[(&str, Option<f64>)],
) -> Target {
    let measured: Vec<(&str, f64)> = points.iter().filter_map(|(s, v)| Some((*s, (*v)?))).collect();
    let value = measured.iter().map(|(_, v)| *v).reduce(|a, b| cmp.worse(a, b));
    let failed = measured.iter().any(|(_, v)| !cmp.holds(*v, limit));
    let missing: Vec<&str> = points.iter().filter(|(_, v)| v.is_none()).map(|(s, _)| *s).collect();
    let mut detail = measured.iter().map(|(s, v)| format!("{s} {v:.2}x")).collect::<Vec<_>>().join(", ");
    if !missing.is_empty() {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(&format!("not measured: {}", missing.join(", ")));
    }
    Target { id, wait, what, value, limit, cmp, unit: "x", status: Status::of(failed, !missing.is_empty()), detail }
}

/// Runs of the ping-pong with the plain rings (per wait mode) whose ratios the ping-pong targets (T1, T4, S1, S2,
/// S4) take the median of: one run measures the rings, then shoal, seconds apart, and on a small VM a run now and
/// then lands in another regime for one of them (where the host puts the two spinning threads), which one run's
/// ratio would take for shoal's.
pub(crate) const PINGPONG_RUNS: usize = 3;

/// The run (`shoal-bench` tags every row with the index of the run that printed it) a row came from; rows without
/// the tag (older `--save` files) are one run.
fn run_of(r: &Value) -> Option<u64> {
    r.get("bench_run").and_then(Value::as_u64)
}

/// Whether `r` came from a run made for `target` (`shoal-bench` tags every row with its run's targets); a row without
/// the tag (older `--save` files) counts for every target.
fn measured_for(r: &Value, target: &str) -> bool {
    r.get("bench_for").and_then(Value::as_str).is_none_or(|f| f.split(' ').any(|t| t == target))
}

/// The values `value` gives for each run among `rows` (in run order), of the last `n` runs that have one.
fn last_runs_of<'a, T>(
    rows: impl Iterator<Item = &'a Value>,
    value: impl Fn(Option<u64>) -> Option<T>,
    n: usize,
) -> Vec<T> {
    let mut runs: Vec<Option<u64>> = Vec::new();
    for r in rows {
        let run = run_of(r);
        if runs.last() != Some(&run) {
            runs.retain(|x| *x != run);
            runs.push(run);
        }
    }
    let mut values: Vec<T> = runs.into_iter().filter_map(value).collect();
    values.drain(..values.len().saturating_sub(n));
    values
}

/// The median of the runs' values and the values. Of an even number, the middle value on the failing side of a
/// target compared by `cmp` (of two runs, the larger against an upper bound, the smaller against a lower one): a
/// missing run never makes a target easier to pass.
fn median_of_runs(values: Vec<f64>, cmp: Cmp) -> Option<(f64, Vec<f64>)> {
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let at = if n.is_multiple_of(2) && cmp == Cmp::AtLeast { (n / 2).checked_sub(1)? } else { n / 2 };
    Some((*sorted.get(at)?, values))
}

/// A ping-pong target's points (the median per size) and, for the detail, each size's values run by run.
type RunPoints = (Vec<(&'static str, Option<f64>)>, String);

/// A size's label and its median with the runs' values.
type SizeRuns = (&'static str, Option<(f64, Vec<f64>)>);

fn run_points(per_size: Vec<SizeRuns>) -> RunPoints {
    let runs = per_size
        .iter()
        .filter_map(|(label, m)| {
            let (_, values) = m.as_ref()?;
            Some(format!("{label} {}", values.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join("/")))
        })
        .collect::<Vec<_>>();
    let n = per_size.iter().filter_map(|(_, m)| m.as_ref().map(|(_, v)| v.len())).max().unwrap_or(0);
    let detail = if n > 1 { format!("; median of {n} runs: {}", runs.join(", ")) } else { String::new() };
    (per_size.into_iter().map(|(label, m)| (label, m.map(|(median, _)| median))).collect(), detail)
}

/// Measurements of `wait` during which the host changed speed: `shoal perf --baseline` measures the line ring's 64 B
/// spin ping-pong right before each size's references and right after shoal's ping-pong of that size and, with the
/// line ring's own 64 B spin row where there is one, says whether they agree (a `host_check` row of that size,
/// `for_size_bytes`, and `steady`). On a VM they change from one minute to the next (95 ns, then 340 ns: the host
/// moved the vCPUs), and a ratio of shoal to references measured before such a change measures the change. A check
/// without `for_size_bytes` (an older `shoal perf`, which checked once around every size's ping-pong) covers its
/// whole run.
#[derive(Debug)]
struct Unsteady {
    run: Option<u64>,
    size: Option<u64>,
    /// The checks, ns, in the order measured, as the detail shows them.
    checks: String,
}

fn unsteady_runs(rows: &Rows, wait: &str) -> Vec<Unsteady> {
    rows.0
        .iter()
        .filter(|c| c["mode"] == "host_check" && c["wait"] == wait && c["steady"] == false)
        .map(|c| {
            let size = c.get("for_size_bytes").and_then(Value::as_u64);
            // In the order measured.
            let keys: &[&str] = match size {
                Some(_) => &["before_p50_ns", "start_p50_ns", "after_p50_ns"],
                None => &["start_p50_ns", "before_p50_ns", "after_p50_ns"],
            };
            let checks = keys.iter().filter_map(|k| num(c, k)).map(|v| format!("{v:.0}")).collect::<Vec<_>>();
            Unsteady { run: run_of(c), size, checks: checks.join("/") }
        })
        .collect()
}

/// Whether `r` was measured while the host kept its speed: no `unsteady` check covers its run and size.
fn steady(unsteady: &[Unsteady], r: &Value) -> bool {
    !unsteady.iter().any(|u| u.run == run_of(r) && u.size.is_none_or(|s| r["size_bytes"].as_u64() == Some(s)))
}

/// `points` of a ping-pong target of `sizes` whose rows left out the `unsteady` measurements, the detail saying
/// which of them were made for `target`.
fn noting_unsteady(
    mut points: RunPoints,
    unsteady: &[Unsteady],
    rows: &Rows,
    (target, sizes): (&str, &[(u64, &str)]),
) -> RunPoints {
    // Each with the label the target's size table gives its size ("the run" for a check of the whole run).
    let label = |u: &Unsteady| match u.size {
        Some(s) => sizes.iter().find(|(size, _)| *size == s).map_or("-", |(_, l)| *l),
        None => "the run",
    };
    let left: Vec<String> = unsteady
        .iter()
        .filter(|u| {
            rows.0.iter().any(|r| {
                let size = r["size_bytes"].as_u64();
                run_of(r) == u.run
                    && measured_for(r, target)
                    && r["mode"] == "pingpong"
                    && sizes.iter().any(|(s, _)| size == Some(*s))
                    && u.size.is_none_or(|s| size == Some(s))
            })
        })
        .map(|u| format!("{} {}", label(u), u.checks))
        .collect();
    if !left.is_empty() {
        points.1.push_str(&format!(
            "; left out {} measurement(s) during which the host changed speed (line ring 64 B spin p50 before, in \
             and after them, ns: {})",
            left.len(),
            left.join(", ")
        ));
    }
    points
}

/// Shoal's ping-pong p50 over the baseline's of the same run, per target size: the median of the last
/// [`PINGPONG_RUNS`] runs made for `target` that measured both, leaving out a run's size during which the host
/// changed speed ([`unsteady_runs`]).
fn pingpong_vs_baseline(rows: &Rows, wait: &str, target: &str) -> RunPoints {
    let unsteady = unsteady_runs(rows, wait);
    let points = run_points(
        SIZES
            .iter()
            .map(|&(size, label)| {
                let of = |system| {
                    let unsteady = &unsteady;
                    rows.0.iter().filter(move |r| {
                        is_ring_row(r, system, "pingpong", wait, size, false)
                            && measured_for(r, target)
                            && steady(unsteady, r)
                    })
                };
                let p50 = |system, run| of(system).rfind(|r| run_of(r) == run).and_then(|r| num(r, "p50_ns"));
                let ratio = |run| p50("shoal", run).zip(p50("baseline", run).filter(|b| *b > 0.0)).map(|(s, b)| s / b);
                (label, median_of_runs(last_runs_of(of("baseline"), ratio, PINGPONG_RUNS), Cmp::AtMost))
            })
            .collect(),
    );
    noting_unsteady(points, &unsteady, rows, (target, &SIZES))
}

/// [`over_sizes`] with the runs each median came from in the detail.
fn over_sizes_runs(
    target: (&'static str, Option<&'static str>, &'static str),
    limit: f64,
    cmp: Cmp,
    (points, runs): RunPoints,
) -> Target {
    let mut t = over_sizes(target, limit, cmp, &points);
    t.detail.push_str(&runs);
    t
}

/// Runs of the streaming comparison (`--throughput` with the plain rings, per wait mode) whose ratios T2 and T7 take
/// the median of, as the ping-pong targets do: unpaced streams vary by run as much as ping-pong (on a 2-core VM the
/// deep ring's 64 B block stream gave 2.6 M and 7.4 M msg/s in consecutive runs of the same command).
pub(crate) const STREAM_RUNS: usize = 3;

/// Shoal's unpaced stream rate over the deep ring's of the same run at `size`, per run (the last
/// [`STREAM_RUNS`]), their median, and the detail: each run's ratio and the median run's rates and losses.
fn stream_vs_baseline(rows: &Rows, wait: &str, size: u64) -> (Option<f64>, String) {
    let of = move |system| rows.0.iter().filter(move |r| is_ring_row(r, system, "throughput", wait, size, false));
    let row = move |system, run| of(system).rfind(|r| run_of(r) == run);
    let rate = |system, run| row(system, run).and_then(|r| num(r, "msgs_per_s"));
    let ratio = |run| rate("shoal", run).zip(rate("baseline", run).filter(|b| *b > 0.0)).map(|(s, b)| s / b);
    let runs: Vec<Option<u64>> = last_runs_of(of("baseline"), |run| ratio(run).map(|_| run), STREAM_RUNS);
    let ratios: Vec<f64> = runs.iter().filter_map(|run| ratio(*run)).collect();
    let Some((median, values)) = median_of_runs(ratios, Cmp::AtLeast) else {
        return (None, "unpaced: not measured".to_string());
    };
    let run = runs.iter().copied().find(|run| ratio(*run) == Some(median)).flatten();
    let shoal = row("shoal", run);
    let fmt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
    let mut detail = format!(
        "unpaced {} vs baseline {} msg/s ({} lost)",
        fmt(shoal.and_then(|r| num(r, "msgs_per_s"))),
        fmt(rate("baseline", run)),
        shoal.and_then(|s| s["lost"].as_u64()).map_or_else(|| "-".to_string(), |l| l.to_string())
    );
    if values.len() > 1 {
        let all = values.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join("/");
        detail.push_str(&format!(", the median of {} runs: {all}", values.len()));
    }
    if shoal.is_some_and(|r| num(r, "pinned") == Some(1.0)) {
        detail.push_str(" (pinned)");
    }
    (Some(median), detail)
}

fn t2(rows: &Rows, wait: &'static str) -> Target {
    let (limit, cmp) = (0.5, Cmp::AtLeast);
    let (ratio, mut detail) = stream_vs_baseline(rows, wait, 64);
    // The paced stream must be lossless in most of the runs the ratio comes from (as for the ratio, one run of a
    // small VM's where a stall of the reader's vCPU outlasted the ring does not decide; two do).
    let paced_rows = || rows.0.iter().filter(|r| is_ring_row(r, "shoal", "throughput_paced", wait, 64, false));
    let paced = paced_rows().next_back();
    let lost = |run| Some(paced_rows().rfind(|r| run_of(r) == run).and_then(|r| r["lost"].as_u64()));
    let losses = last_runs_of(paced_rows(), lost, STREAM_RUNS);
    // None when no run has a paced row, or one run's row does not say what it lost.
    let losses: Option<Vec<u64>> = Some(losses).filter(|l| !l.is_empty()).and_then(|l| l.into_iter().collect());
    let lossy = losses.as_ref().map(|l| l.iter().filter(|l| **l > 0).count());
    let fmt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.0}"));
    let at = fmt(paced.and_then(|p| num(p, "rate_target")));
    match &losses {
        Some(l) if l.len() > 1 => detail.push_str(&format!(
            "; paced streams (the last at {at} msg/s), lost per run: {} (0 in most runs)",
            l.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
        )),
        Some(l) => detail.push_str(&format!("; paced at {at} msg/s: {} lost (must be 0)", l[0])),
        None => detail.push_str("; paced run: not measured"),
    }
    let runs = losses.as_ref().map_or(0, Vec::len);
    let paced_failed = lossy.is_some_and(|n| n > 0 && n * 2 >= runs);
    let failed = ratio.is_some_and(|r| !cmp.holds(r, limit)) || paced_failed;
    Target {
        id: "T2",
        wait: Some(wait),
        what: "64B throughput vs baseline, paced loss = 0",
        value: ratio,
        limit,
        cmp,
        unit: "x",
        status: Status::of(failed, ratio.is_none() || losses.is_none()),
        detail,
    }
}

/// T7: 1 KB streaming at 0.4 x the plain ring's rate, the plain ring as deep as shoal's (median of the runs).
fn t7(rows: &Rows, wait: &'static str) -> Target {
    let (limit, cmp) = (0.4, Cmp::AtLeast);
    let (ratio, detail) = stream_vs_baseline(rows, wait, 1024);
    Target {
        id: "T7",
        wait: Some(wait),
        what: "1KB throughput vs baseline of the same depth",
        value: ratio,
        limit,
        cmp,
        unit: "x",
        status: Status::of(ratio.is_some_and(|r| !cmp.holds(r, limit)), ratio.is_none()),
        detail,
    }
}

/// T8: reliable publisher and subscriber: unpaced 64 B and 1 MiB streams lose nothing.
fn t8(rows: &Rows) -> Target {
    let sizes = [(64u64, "64B"), (1 << 20, "1M")];
    let lost: Vec<(&str, Option<u64>)> = sizes
        .iter()
        .map(|&(size, label)| {
            (label, rows.find_with("shoal", "throughput", "spin", size, true).and_then(|r| r["lost"].as_u64()))
        })
        .collect();
    let missing: Vec<&str> = lost.iter().filter(|(_, l)| l.is_none()).map(|(label, _)| *label).collect();
    let total: Option<u64> = lost.iter().filter_map(|(_, l)| *l).reduce(|a, b| a + b);
    let mut detail =
        lost.iter().filter_map(|(label, l)| l.map(|l| format!("{label} {l} lost"))).collect::<Vec<_>>().join(", ");
    if !missing.is_empty() {
        detail.push_str(&format!("; not measured: {}", missing.join(", ")));
    }
    Target {
        id: "T8",
        wait: Some("spin"),
        what: "reliable unpaced streams 64B, 1M: messages lost",
        value: total.map(|t| t as f64),
        limit: 0.0,
        cmp: Cmp::AtMost,
        unit: "",
        status: Status::of(total.is_some_and(|t| t > 0), !missing.is_empty()),
        detail,
    }
}

/// T9: with `huge_pages = true` the rings of both processes are on 2 MB pages (smaps), 64 KB - 4 MB streams; the
/// detail gives the huge/normal rate ratios measured in the same run.
fn t9(rows: &Rows) -> Target {
    let (limit, cmp) = (HUGE_PAGE_KB, Cmp::AtLeast);
    let mut parts = Vec::new();
    let mut missing = Vec::new();
    let mut value: Option<f64> = None;
    for (size, label) in HUGE_SIZES {
        let row = rows.find_huge("throughput", "spin", size);
        let kb = row.map(|r| (num(r, "ring_page_kb"), num(r, "peer_ring_page_kb")));
        match kb {
            Some((Some(own), Some(peer))) => {
                let worst = own.min(peer);
                value = Some(value.map_or(worst, |v| cmp.worse(v, worst)));
                let vs = row.and_then(|r| num(r, "vs_normal_msgs_per_s_ratio"));
                parts.push(format!(
                    "{label} {own:.0}/{peer:.0} kB{}",
                    vs.map_or_else(String::new, |v| format!(" (msg/s {v:.2}x normal pages)"))
                ));
            }
            _ => missing.push(label),
        }
    }
    let failed = value.is_some_and(|v| !cmp.holds(v, limit));
    let mut detail = parts.join(", ");
    if failed {
        detail.push_str("; rings not on 2 MB pages: is a hugetlbfs mounted at huge_pages_path, with free pages?");
    }
    if !missing.is_empty() {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(&format!("not measured: {}", missing.join(", ")));
    }
    Target {
        id: "T9",
        wait: Some("spin"),
        what: "huge_pages rings on 2MB pages (both), 64K-4M",
        value,
        limit,
        cmp,
        unit: "kB",
        status: Status::of(failed, !missing.is_empty()),
        detail,
    }
}

fn t3(rows: &Rows, wait: &'static str) -> Target {
    let (limit, cmp) = (2.0, Cmp::AtMost);
    // Each run's 4 MB p50 over its own 64 B p50; the median of the last PINGPONG_RUNS runs (a run whose host changed
    // speed between its sizes, e.g. b50_3's 215 ns at 64 B and 906 at 4 MB, is outvoted).
    let p50 = |run: Option<u64>, size| {
        let r =
            rows.0.iter().rev().find(|r| run_of(r) == run && is_ring_row(r, "shoal", "zero_copy", wait, size, false));
        r.and_then(|r| num(r, "p50_ns"))
    };
    let runs = last_runs_of(
        rows.0.iter().filter(|r| measured_for(r, "T3")),
        |run| p50(run, 4 << 20).zip(p50(run, 64).filter(|s| *s > 0.0)),
        PINGPONG_RUNS,
    );
    let median = median_of_runs(runs.iter().map(|(b, s)| b / s).collect(), cmp);
    let value = median.as_ref().map(|(v, _)| *v);
    let detail = match &median {
        None => "4M or 64B not measured".to_string(),
        Some((_, values)) => {
            let each: Vec<String> = runs.iter().map(|(b, s)| format!("{b:.0}/{s:.0} ns")).collect();
            let ratios: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
            format!("4M/64B p50 {}; median of {} runs: {}", each.join(", "), runs.len(), ratios.join("/"))
        }
    };
    Target {
        id: "T3",
        wait: Some(wait),
        what: "zero-copy p50 4M / p50 64B",
        value,
        limit,
        cmp,
        unit: "x",
        status: Status::of(value.is_some_and(|v| !cmp.holds(v, limit)), value.is_none()),
        detail,
    }
}

/// The fan-out rows' `send_cpu_ratio_vs_1` (cost of a send to `subscribers` processes over its cost to one) per size.
fn fanout_ratios(
    rows: &Rows,
    wait: &str,
    subscribers: u64,
    sizes: &[(u64, &'static str)],
) -> Vec<(&'static str, Option<f64>)> {
    sizes
        .iter()
        .map(|&(size, label)| {
            let row = rows.0.iter().rev().find(|r| {
                r["system"] == "shoal"
                    && r["mode"] == "fanout"
                    && r["wait"] == wait
                    && r["size_bytes"].as_u64() == Some(size)
                    && r["subscribers"].as_u64() == Some(subscribers)
            });
            (label, row.and_then(|r| num(r, "send_cpu_ratio_vs_1")))
        })
        .collect()
}

fn t5(rows: &Rows, wait: &'static str) -> Target {
    let points = fanout_ratios(rows, wait, SUBSCRIBERS, &SIZES);
    over_sizes(("T5", Some(wait), "fan-out cpu/send N=4 vs N=1, ABBA blocks"), 1.2, Cmp::AtMost, &points)
}

fn t6(rows: &Rows) -> Target {
    let mut missing = Vec::new();
    let rss = rows.0.iter().rev().find(|r| r["mode"] == "rss");
    let topics = rss.and_then(|r| r["topics"].as_u64());
    if rss.is_none() {
        missing.push(format!("the {TOPICS}-topic memory run"));
    } else if topics != Some(TOPICS) {
        missing.push(format!("{TOPICS} topics (the memory run had {})", topics.map_or("-".into(), |t| t.to_string())));
    }
    let kb = |k: &str| rss.and_then(|r| num(r, k));
    let value = kb("rss_without_shm_kb").map(|k| k / 1024.0);
    if rss.is_some() && value.is_none() {
        missing.push("rss_without_shm_kb".into());
    }
    let rows_total = rows.measurements().count();
    let reported = rows
        .measurements()
        .filter(|r| ["peak_rss_kb", "peer_peak_rss_kb"].iter().all(|k| num(r, k).is_some_and(|v| v > 0.0)))
        .count();
    if rows_total == 0 || reported < rows_total {
        missing.push(format!("peak RSS of both processes ({reported} of {rows_total} measurement rows have it)"));
    }
    let mb = |k: &str| kb(k).map_or_else(|| "-".to_string(), |v| format!("{:.1} MB", v / 1024.0));
    let ms = |k: &str| kb(k).map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let mut detail = format!(
        "{} topics: VmRSS {}, shm {}, peak {}, cpu {}/{} ms, {} threads; peak RSS of both processes in {reported} of \
         {rows_total} measurement rows",
        topics.map_or("-".into(), |t| t.to_string()),
        mb("vm_rss_kb"),
        mb("shm_rss_kb"),
        mb("peak_rss_kb"),
        ms("cpu_user_ms"),
        ms("cpu_sys_ms"),
        ms("threads"),
    );
    if !missing.is_empty() {
        detail.push_str(&format!("; not measured: {}", missing.join(", ")));
    }
    let (limit, cmp) = (RSS_LIMIT_MB, Cmp::Below);
    Target {
        id: "T6",
        wait: None,
        what: "100-topic process RSS outside shm mappings",
        value,
        limit,
        cmp,
        unit: "MB",
        status: Status::of(value.is_some_and(|v| !cmp.holds(v, limit)), !missing.is_empty()),
        detail,
    }
}

/// S1-S6: issue 24's figures, each against the strongest reference `shoal perf` measured in the same run. S1: copying
/// ping-pong p50 at 64 KB - 8 MB against the fastest plain ring (line, warm or deep; `p50_ratio`), at most 1.1x; S2:
/// the same against iceoryx2 0.10 (`iceoryx2_p50_ratio`, measured where `scripts/iceoryx2` built it), at most 1.0x;
/// S3: block-mode ping-pong at 64 B - 8 MB against eCAL 6.1.1's C++ (`ecal_p50_ratio`, where `scripts/ecal-cpp`
/// built it), at most 0.8x; S4: 64 B spin ping-pong against the strongest plain ring, at most 1.5x; S5: a reliable
/// 64 B stream (nothing lost) against the faster plain ring whose writer waits, the median of three runs, at least
/// 0.5x; S6: the cost of a send to 16 subscriber processes against one, at most 1.3x.
fn strongest(rows: &Rows) -> Vec<Target> {
    let mut out = Vec::new();
    // The median of the ratios of the last PINGPONG_RUNS runs made for the target (S3: the runs against eCAL; S4:
    // the runs of 64 B alone).
    // A run's size during which the host changed speed is left out (`unsteady_runs`).
    let pingpong = |target: &str, wait: &str, key: &str, sizes: &[(u64, &'static str)]| -> RunPoints {
        let unsteady = unsteady_runs(rows, wait);
        let points = run_points(
            sizes
                .iter()
                .map(|&(size, label)| {
                    let of = || {
                        rows.0.iter().filter(|r| {
                            is_ratio_row(r, "pingpong", wait, size, false, key)
                                && measured_for(r, target)
                                && steady(&unsteady, r)
                        })
                    };
                    let ratio = |run| of().rfind(|r| run_of(r) == run).and_then(|r| num(r, key));
                    (label, median_of_runs(last_runs_of(of(), ratio, PINGPONG_RUNS), Cmp::AtMost))
                })
                .collect(),
        );
        noting_unsteady(points, &unsteady, rows, (target, sizes))
    };
    for wait in ["spin", "block"] {
        let points = pingpong("S1", wait, "p50_ratio", &LARGE_SIZES);
        out.push(over_sizes_runs(
            ("S1", Some(wait), "ping-pong p50 vs strongest ring, 64K-8M"),
            1.1,
            Cmp::AtMost,
            points,
        ));
    }
    for wait in ["spin", "block"] {
        let points = pingpong("S2", wait, "iceoryx2_p50_ratio", &LARGE_SIZES);
        out.push(over_sizes_runs(("S2", Some(wait), "ping-pong p50 vs iceoryx2, 64K-8M"), 1.0, Cmp::AtMost, points));
    }
    let points = pingpong("S3", "block", "ecal_p50_ratio", &ECAL_SIZES);
    out.push(over_sizes_runs(
        ("S3", Some("block"), "ping-pong p50 vs eCAL 6.1.1 C++, 64B-8M"),
        0.8,
        Cmp::AtMost,
        points,
    ));
    let points = pingpong("S4", "spin", "p50_ratio", &[(64, "64B")]);
    out.push(over_sizes_runs(("S4", Some("spin"), "ping-pong p50 vs strongest ring, 64B"), 1.5, Cmp::AtMost, points));
    out.push(s5(rows));
    for wait in ["spin", "block"] {
        let points = fanout_ratios(rows, wait, MANY_SUBSCRIBERS, &MANY_SIZES);
        out.push(over_sizes(("S6", Some(wait), "fan-out cpu/send N=16 vs N=1, 64B, 1M"), 1.3, Cmp::AtMost, &points));
    }
    out
}

/// Runs of `shoal perf` whose reliable 64 B streams S5 takes the median of.
pub(crate) const S5_RUNS: usize = 3;

/// S5: the reliable unpaced 64 B stream (spin) against the faster plain ring whose writer waits, each ratio measured
/// in one run (the plain rings, then shoal), the median of the last [`S5_RUNS`] runs' ratios; a stream that lost
/// messages is no pass whatever its rate, and fewer runs are not measured.
fn s5(rows: &Rows) -> Target {
    let found: Vec<&Value> =
        rows.0.iter().filter(|r| is_ratio_row(r, "throughput", "spin", 64, true, "msgs_per_s_ratio")).collect();
    let runs = &found[found.len().saturating_sub(S5_RUNS)..];
    let ratios: Vec<f64> = runs.iter().filter_map(|r| num(r, "msgs_per_s_ratio")).collect();
    // A run whose row does not say what it lost is no measurement of a lossless stream.
    let lost = runs.iter().map(|r| r["lost"].as_u64()).sum::<Option<u64>>().filter(|_| !runs.is_empty());
    let ratio = (ratios.len() == S5_RUNS && lost.is_some())
        .then(|| median_of_runs(ratios, Cmp::AtLeast))
        .flatten()
        .map(|(median, _)| median);
    let median_row = ratio.and_then(|m| runs.iter().find(|r| num(r, "msgs_per_s_ratio") == Some(m)));
    let vs = median_row.and_then(|r| r["ratio_vs"].as_str()).unwrap_or("-");
    let all = runs.iter().filter_map(|r| num(r, "msgs_per_s_ratio")).map(|v| format!("{v:.2}x")).collect::<Vec<_>>();
    let detail = match (median_row.and_then(|r| num(r, "msgs_per_s")), lost) {
        (Some(rate), Some(l)) => {
            format!("median {:.2}M msg/s vs {vs} (runs {}), {l} lost (must be 0)", rate / 1e6, all.join(", "))
        }
        _ if runs.len() == S5_RUNS => "not measured: a run's row does not say what it lost".to_string(),
        _ => format!("not measured: {} of {S5_RUNS} runs with a reliable 64B stream and --baseline", runs.len()),
    };
    let (limit, cmp) = (0.5, Cmp::AtLeast);
    Target {
        id: "S5",
        wait: Some("spin"),
        what: "reliable 64B stream vs strongest ring (waits)",
        value: ratio,
        limit,
        cmp,
        unit: "x",
        status: Status::of(ratio.is_some_and(|v| !cmp.holds(v, limit)) || lost.is_some_and(|l| l > 0), ratio.is_none()),
        detail,
    }
}

/// Evaluates every target, in order; each is there whether or not it was measured.
pub(crate) fn evaluate(rows: &Rows) -> Vec<Target> {
    let waits = ["spin", "block"];
    let mut out = Vec::new();
    let spin = pingpong_vs_baseline(rows, "spin", "T1");
    out.push(over_sizes_runs(("T1", Some("spin"), "ping-pong p50 vs baseline, 64B-4M"), 1.5, Cmp::AtMost, spin));
    out.extend(waits.iter().map(|w| t2(rows, w)));
    out.extend(waits.iter().map(|w| t3(rows, w)));
    let block = pingpong_vs_baseline(rows, "block", "T4");
    out.push(over_sizes_runs(("T4", Some("block"), "ping-pong p50 vs baseline, 64B-4M"), 1.3, Cmp::AtMost, block));
    out.extend(waits.iter().map(|w| t5(rows, w)));
    out.push(t6(rows));
    out.extend(waits.iter().map(|w| t7(rows, w)));
    out.push(t8(rows));
    out.push(t9(rows));
    out.push(net_ratio(rows, ("N1", "64B UDP throughput vs raw sendmmsg"), ("udp", "raw_udp"), 64, 0.5));
    out.push(n2(rows));
    out.push(n3(rows));
    out.push(net_ratio(rows, ("N4", "1M TCP throughput vs raw TCP"), ("tcp", "raw_tcp"), 1 << 20, 0.7));
    out.extend(strongest(rows));
    out
}

/// How many targets have each status.
pub(crate) fn count(targets: &[Target], status: Status) -> usize {
    targets.iter().filter(|t| t.status == status).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measurement row as `shoal perf --json` prints it (the fields the targets read, and a few more).
    fn row(system: &str, mode: &str, wait: &str, size: u64, p50: u64, rate: f64) -> Value {
        json!({
            "system": system, "transport": "shm_ring", "wait": wait, "mode": mode, "size_bytes": size,
            "subscribers": 1, "p50_ns": p50, "p99_ns": p50, "msgs_per_s": rate, "messages": 10, "lost": 0,
            "peak_rss_kb": 1000, "peer_peak_rss_kb": 1000,
        })
    }

    fn rss_row(topics: u64, vm_rss_kb: u64, shm_rss_kb: u64) -> Value {
        json!({
            "mode": "rss", "system": "shoal", "topics": topics, "vm_rss_kb": vm_rss_kb, "shm_rss_kb": shm_rss_kb,
            "rss_without_shm_kb": vm_rss_kb - shm_rss_kb, "peak_rss_kb": vm_rss_kb, "cpu_user_ms": 12.0,
            "cpu_sys_ms": 30.0, "threads": 3,
        })
    }

    /// Every row a complete, passing run gives.
    fn passing() -> Vec<Value> {
        let mut rows = Vec::new();
        for wait in ["spin", "block"] {
            for system in ["baseline", "shoal"] {
                rows.push(row(system, "throughput", wait, 64, 1000, if system == "shoal" { 600.0 } else { 1000.0 }));
                rows.push(row(system, "throughput", wait, 1024, 1000, if system == "shoal" { 450.0 } else { 1000.0 }));
                let mut paced = row(system, "throughput_paced", wait, 64, 1000, 500.0);
                paced["rate_target"] = json!(500.0);
                rows.push(paced);
                for (size, _) in SIZES {
                    rows.push(row(system, "pingpong", wait, size, if system == "shoal" { 110 } else { 100 }, 1.0));
                    rows.push(row(system, "zero_copy", wait, size, 500, 1.0));
                }
            }
            // What `shoal perf` adds to shoal's ping-pong rows: its ratios to the strongest plain ring, to iceoryx2
            // (both from --baseline) and, in block mode, to eCAL's C++ ping-pong (--against ecal); and 8 MB.
            rows.push(row("shoal", "pingpong", wait, 8 << 20, 110, 1.0));
            for r in rows.iter_mut().filter(|r| r["system"] == "shoal" && r["mode"] == "pingpong" && r["wait"] == wait)
            {
                r["p50_ratio"] = json!(1.05);
                r["ratio_vs"] = json!("warm_ring");
                r["iceoryx2_p50_ratio"] = json!(0.98);
                if wait == "block" {
                    r["ecal_p50_ratio"] = json!(0.5);
                }
            }
            for (size, _) in SIZES {
                rows.push(row("shoal", "fanout", wait, size, 1, 1.0));
                let mut n = row("shoal", "fanout", wait, size, 1, 1.0);
                n["subscribers"] = json!(SUBSCRIBERS);
                n["send_cpu_ratio_vs_1"] = json!(1.1);
                rows.push(n);
            }
            for (size, _) in MANY_SIZES {
                let mut n = row("shoal", "fanout", wait, size, 1, 1.0);
                n["subscribers"] = json!(MANY_SUBSCRIBERS);
                n["send_cpu_ratio_vs_1"] = json!(1.25);
                rows.push(n);
            }
        }
        rows.push(rss_row(TOPICS, 9000, 2000));
        for (transport, size, rate) in [("udp", 64, 1.2e6), ("raw_udp", 64, 2e6)]
            .into_iter()
            .chain([("tcp", 1 << 20, 900.0), ("raw_tcp", 1 << 20, 1000.0)])
        {
            let mut r = row(
                if transport.starts_with("raw") { "baseline" } else { "shoal" },
                "throughput",
                "block",
                size,
                1000,
                rate,
            );
            r["transport"] = json!(transport);
            if transport == "udp" && size == 64 {
                r["udp_send_io_thread"] = json!(1.0);
            }
            rows.push(r);
        }
        // N3's three runs of 1 MiB over UDP, each beside the raw program: 0.95x, 0.92x, 1.10x.
        for (run, rate) in [(40, 950.0), (41, 920.0), (42, 1100.0)] {
            for (system, transport, rate) in [("baseline", "raw_udp", 1000.0), ("shoal", "udp", rate)] {
                let mut r = row(system, "throughput", "block", 1 << 20, 1000, rate);
                (r["transport"], r["bench_run"]) = (json!(transport), json!(run));
                rows.push(r);
            }
        }
        // S5's further runs of the reliable 64 B stream: the median of the three is the last run's 0.52.
        for ratio in [0.60, 0.40] {
            let mut r = row("shoal", "throughput", "spin", 64, 1000, 300.0);
            r["reliable"] = json!(1.0);
            (r["msgs_per_s_ratio"], r["ratio_vs"]) = (json!(ratio), json!("line_ring"));
            rows.push(r);
        }
        for size in [64, 1 << 20] {
            let mut r = row("shoal", "throughput", "spin", size, 1000, 300.0);
            r["reliable"] = json!(1.0);
            (r["msgs_per_s_ratio"], r["ratio_vs"]) = (json!(0.52), json!("line_ring"));
            rows.push(r);
        }
        for (size, _) in HUGE_SIZES {
            let mut r = row("shoal", "throughput", "spin", size, 1000, 300.0);
            r["huge_pages"] = json!(1.0);
            r["ring_page_kb"] = json!(2048.0);
            r["peer_ring_page_kb"] = json!(2048.0);
            r["vs_normal_msgs_per_s_ratio"] = json!(1.05);
            rows.push(r);
        }
        rows
    }

    fn statuses(rows: Vec<Value>) -> Vec<(&'static str, Option<&'static str>, Status)> {
        evaluate(&Rows(rows)).iter().map(|t| (t.id, t.wait, t.status)).collect()
    }

    fn target(rows: Vec<Value>, id: &str, wait: Option<&str>) -> Target {
        evaluate(&Rows(rows)).into_iter().find(|t| t.id == id && t.wait == wait).expect("every target is evaluated")
    }

    #[test]
    fn a_complete_run_within_the_limits_passes_every_target() {
        let s = statuses(passing());
        assert_eq!(s.len(), 26);
        assert!(s.iter().all(|(_, _, st)| *st == Status::Pass), "{s:?}");
        let t1 = target(passing(), "T1", Some("spin"));
        assert!((t1.value.unwrap() - 1.1).abs() < 1e-9);
        assert!(t1.detail.starts_with("64B 1.10x, 1K 1.10x"), "{}", t1.detail);
        let t6 = target(passing(), "T6", None);
        assert!((t6.value.unwrap() - 7000.0 / 1024.0).abs() < 1e-9);
        assert!(t6.to_text().contains("PASS") && t6.detail.contains("in 95 of 95 measurement rows"), "{}", t6.detail);
    }

    /// `shoal perf --baseline` also reports the line and warm rings and iceoryx2 as baseline rows, after the deep
    /// ring; the targets stay set against the deep ring.
    #[test]
    fn targets_read_the_deep_ring_not_the_other_references() {
        let mut rows = passing();
        for wait in ["spin", "block"] {
            for transport in ["line_ring", "warm_ring", "iceoryx2"] {
                for (size, _) in SIZES {
                    let mut r = row("baseline", "pingpong", wait, size, 10, 1.0);
                    r["transport"] = json!(transport);
                    rows.push(r);
                }
            }
        }
        let t1 = target(rows, "T1", Some("spin"));
        assert!((t1.value.unwrap() - 1.1).abs() < 1e-9, "{}", t1.detail);
    }

    #[test]
    fn n3_is_the_median_of_three_runs_each_against_its_own_raw_row() {
        let n3 = target(passing(), "N3", Some("block"));
        assert_eq!(n3.status, Status::Pass, "{}", n3.detail);
        assert!((n3.value.unwrap() - 0.95).abs() < 1e-9, "{}", n3.detail);
        assert!(n3.detail.starts_with("median of 3 runs: 0.95x (950 msg/s"), "{}", n3.detail);
        // One slow run does not decide; two do (the limit is 0.9).
        let with = |rates: [f64; 2]| {
            let mut rows = passing();
            for (run, rate) in [41, 42].into_iter().zip(rates) {
                let r = rows
                    .iter_mut()
                    .find(|r| r["transport"] == "udp" && r["bench_run"] == run)
                    .expect("N3 row of the run");
                r["msgs_per_s"] = json!(rate);
            }
            target(rows, "N3", Some("block"))
        };
        assert_eq!(with([410.0, 1100.0]).status, Status::Pass);
        assert_eq!(with([410.0, 880.0]).status, Status::Fail);
        // A shoal row is set against the raw row of its own run: a run whose raw row is missing is not measured.
        let rows: Vec<Value> =
            passing().into_iter().filter(|r| !(r["transport"] == "raw_udp" && r["bench_run"] == 41)).collect();
        let t = target(rows, "N3", Some("block"));
        assert_eq!(t.status, Status::NotMeasured, "{}", t.detail);
    }

    #[test]
    fn network_targets_compare_with_the_raw_rows_and_no_other_target_reads_network_rows() {
        let n1 = target(passing(), "N1", Some("block"));
        assert!((n1.value.unwrap() - 0.6).abs() < 1e-9, "{}", n1.detail);
        let mut rows = passing();
        // A network row that would break T2 if it read it, and a slow 1 MB TCP run.
        let mut udp = row("shoal", "throughput", "block", 64, 1000, 1.0);
        udp["transport"] = json!("udp");
        rows.push(udp);
        let mut tcp = row("shoal", "throughput", "block", 1 << 20, 1000, 500.0);
        tcp["transport"] = json!("tcp");
        rows.push(tcp);
        assert_eq!(target(rows.clone(), "T2", Some("block")).status, Status::Pass);
        assert_eq!(target(rows.clone(), "N1", Some("block")).status, Status::Fail);
        assert_eq!(target(rows.clone(), "N2", Some("block")).status, Status::Fail);
        // N2 counts only a lossless run of the I/O thread's batched sending.
        let lossy = |lost: u64, io: f64| {
            let mut rows = passing();
            let r = rows.iter_mut().rfind(|r| r["transport"] == "udp" && r["size_bytes"] == 64).expect("udp 64 row");
            (r["lost"], r["udp_send_io_thread"]) = (json!(lost), json!(io));
            target(rows, "N2", Some("block"))
        };
        assert_eq!(lossy(0, 1.0).status, Status::Pass);
        let t = lossy(29, 1.0);
        assert_eq!(t.status, Status::Fail, "{}", t.detail);
        assert!(t.detail.contains("29 lost (must be 0)"), "{}", t.detail);
        assert_eq!(lossy(0, 0.0).status, Status::Fail);
        assert_eq!(target(rows.clone(), "N4", Some("block")).status, Status::Fail);
        let rows: Vec<Value> = passing().into_iter().filter(|r| r["transport"] != "raw_tcp").collect();
        assert_eq!(target(rows, "N4", Some("block")).status, Status::NotMeasured);
    }

    /// S1-S6 read the ratios `shoal perf` computed against the strongest references of the same run; a row of a run
    /// without those references (here eCAL's, after the one with the plain rings) does not hide them.
    #[test]
    fn the_strongest_reference_targets_read_the_ratios_of_the_same_run() {
        let s1 = target(passing(), "S1", Some("spin"));
        assert_eq!(s1.status, Status::Pass, "{}", s1.detail);
        assert_eq!(s1.detail, "64K 1.05x, 1M 1.05x, 4M 1.05x, 8M 1.05x");
        let mut rows = passing();
        rows.push(row("shoal", "pingpong", "block", 1 << 20, 300, 1.0));
        assert_eq!(target(rows.clone(), "S1", Some("block")).status, Status::Pass);
        // Over the limits: iceoryx2 faster at 8 MB, eCAL's ratio at 64 B, a reliable stream that lost messages.
        for r in rows.iter_mut().filter(|r| r["mode"] == "pingpong" && r["system"] == "shoal") {
            if r["size_bytes"] == 8 << 20 {
                r["iceoryx2_p50_ratio"] = json!(1.15);
            }
            if r["size_bytes"] == 64 && r["wait"] == "block" {
                r["ecal_p50_ratio"] = json!(1.2);
            }
        }
        let s2 = target(rows.clone(), "S2", Some("spin"));
        assert_eq!((s2.status, s2.value), (Status::Fail, Some(1.15)), "{}", s2.detail);
        let s3 = target(rows.clone(), "S3", Some("block"));
        assert_eq!(s3.status, Status::Fail, "{}", s3.detail);
        assert!(s3.detail.starts_with("64B 1.20x, 64K 0.50x"), "{}", s3.detail);
        let r = rows.iter_mut().rfind(|r| r["reliable"] == 1.0 && r["size_bytes"] == 64).expect("reliable 64 B row");
        r["lost"] = json!(3);
        let s5 = target(rows.clone(), "S5", Some("spin"));
        assert_eq!(s5.status, Status::Fail, "{}", s5.detail);
        assert!(s5.detail.contains("vs line_ring (runs 0.60x, 0.40x, 0.52x), 3 lost"), "{}", s5.detail);
        assert_eq!(s5.value, Some(0.52), "the median of the three runs");
        // One run below the limit does not fail S5 (the median does), and two runs are not measured.
        let mut rows = passing();
        let slow = rows.iter_mut().find(|r| r["msgs_per_s_ratio"] == 0.40).expect("the slowest S5 run");
        slow["msgs_per_s_ratio"] = json!(0.1);
        assert_eq!(target(rows.clone(), "S5", Some("spin")).status, Status::Pass);
        let at = rows.iter().rposition(|r| r["reliable"] == 1.0 && r["size_bytes"] == 64).expect("reliable 64 B row");
        rows.remove(at);
        let s5 = target(rows, "S5", Some("spin"));
        assert_eq!(s5.status, Status::NotMeasured, "{}", s5.detail);
        assert!(s5.detail.contains("2 of 3 runs"), "{}", s5.detail);
        let mut rows = passing();
        let first = rows.iter_mut().find(|r| r["msgs_per_s_ratio"] == 0.60).expect("the first S5 run");
        first.as_object_mut().map(|o| o.remove("lost"));
        let s5 = target(rows, "S5", Some("spin"));
        assert_eq!((s5.status, s5.value), (Status::NotMeasured, None), "{}", s5.detail);
        assert!(s5.detail.contains("does not say what it lost"), "{}", s5.detail);
        // Without iceoryx2 (not built here) S2 is not measured, never a pass.
        let rows: Vec<Value> = passing()
            .into_iter()
            .map(|mut r| {
                if let Some(o) = r.as_object_mut() {
                    o.remove("iceoryx2_p50_ratio");
                }
                r
            })
            .collect();
        assert_eq!(target(rows.clone(), "S2", Some("block")).status, Status::NotMeasured);
        assert_eq!(target(rows, "S6", Some("block")).status, Status::Pass);
    }

    /// The ping-pong targets take the median of the runs' ratios, each run's shoal row paired with the same run's
    /// baseline row: one run in another regime does not decide them, two do.
    #[test]
    fn ping_pong_targets_take_the_median_of_the_runs() {
        let runs = |shoal_64b: [u64; 3], s4: [f64; 3]| {
            let mut rows = passing();
            for (i, (p50, ratio)) in shoal_64b.into_iter().zip(s4).enumerate() {
                let mut base = row("baseline", "pingpong", "spin", 64, 100, 1.0);
                base["bench_run"] = json!(10 + i);
                let mut shoal = row("shoal", "pingpong", "spin", 64, p50, 1.0);
                shoal["p50_ratio"] = json!(ratio);
                shoal["bench_run"] = json!(10 + i);
                rows.extend([base, shoal]);
            }
            rows
        };
        let t1 = target(runs([120, 300, 110], [1.2, 3.0, 1.1]), "T1", Some("spin"));
        assert_eq!((t1.status, t1.value), (Status::Pass, Some(1.2)), "{}", t1.detail);
        assert!(t1.detail.contains("median of 3 runs: 64B 1.20/3.00/1.10"), "{}", t1.detail);
        let s4 = target(runs([120, 300, 110], [1.2, 3.0, 1.1]), "S4", Some("spin"));
        assert_eq!((s4.status, s4.value), (Status::Pass, Some(1.2)), "{}", s4.detail);
        let t1 = target(runs([200, 300, 110], [1.6, 3.0, 1.1]), "T1", Some("spin"));
        assert_eq!((t1.status, t1.value), (Status::Fail, Some(2.0)), "{}", t1.detail);
        let s4 = target(runs([200, 300, 110], [1.6, 3.0, 1.1]), "S4", Some("spin"));
        assert_eq!((s4.status, s4.value), (Status::Fail, Some(1.6)), "{}", s4.detail);
        // A run without a baseline row (eCAL's, shoal only) is no run of T1's.
        let mut rows = runs([120, 300, 110], [1.2, 3.0, 1.1]);
        let mut lone = row("shoal", "pingpong", "spin", 64, 900, 1.0);
        lone["bench_run"] = json!(20);
        rows.push(lone);
        assert_eq!(target(rows, "T1", Some("spin")).value, Some(1.2));
    }

    /// S4 reads only the runs made for it (64 B alone) and T1 only its own, each the median of its runs, whichever
    /// come last.
    #[test]
    fn each_ping_pong_target_reads_the_runs_made_for_it() {
        let mut rows = passing();
        for (i, (for_targets, shoal_p50, ratio)) in
            [("T1 T3 T4 S1 S2", 120, 1.2), ("T1 T3 T4 S1 S2", 140, 1.4), ("S4", 300, 3.0), ("S4", 310, 3.1)]
                .into_iter()
                .enumerate()
        {
            let mut base = row("baseline", "pingpong", "spin", 64, 100, 1.0);
            let mut shoal = row("shoal", "pingpong", "spin", 64, shoal_p50, 1.0);
            shoal["p50_ratio"] = json!(ratio);
            for r in [&mut base, &mut shoal] {
                r["bench_run"] = json!(10 + i);
                r["bench_for"] = json!(for_targets);
            }
            rows.extend([base, shoal]);
        }
        // `passing()`'s untagged rows (an older `--save` file's) are one more run of every target.
        let t1 = target(rows.clone(), "T1", Some("spin"));
        assert!(t1.detail.contains("median of 3 runs: 64B 1.10/1.20/1.40,"), "{}", t1.detail);
        let s4 = target(rows, "S4", Some("spin"));
        assert_eq!((s4.status, s4.value), (Status::Fail, Some(3.0)), "{}", s4.detail);
        assert!(s4.detail.ends_with("median of 3 runs: 64B 1.05/3.00/3.10"), "{}", s4.detail);
    }

    /// A run during which the host changed speed (its host checks disagree) is left out of the ping-pong medians, and
    /// the detail says so; the other runs decide.
    #[test]
    fn a_run_during_which_the_host_changed_speed_is_left_out() {
        let mut rows = passing();
        for (i, (ratio, checks)) in [(1.2, (95, 100)), (3.0, (95, 340)), (1.3, (340, 345))].into_iter().enumerate() {
            let mut base = row("baseline", "pingpong", "spin", 64, 100, 1.0);
            let mut shoal = row("shoal", "pingpong", "spin", 64, 100, 1.0);
            shoal["p50_ratio"] = json!(ratio);
            let mut check = json!({
                "system": "baseline", "transport": "line_ring", "mode": "host_check", "wait": "spin",
                "size_bytes": 64, "before_p50_ns": checks.0, "after_p50_ns": checks.1,
                "steady": checks.1 <= checks.0 * 3 / 2,
            });
            for r in [&mut base, &mut shoal, &mut check] {
                r["bench_run"] = json!(10 + i);
                r["bench_for"] = json!("S4");
            }
            rows.extend([base, shoal, check]);
        }
        assert_eq!(target(rows.clone(), "T6", None).status, Status::Pass, "a host check is no measurement row");
        let s4 = target(rows.clone(), "S4", Some("spin"));
        assert_eq!((s4.status, s4.value), (Status::Pass, Some(1.2)), "{}", s4.detail);
        assert!(s4.detail.contains("median of 3 runs: 64B 1.05/1.20/1.30"), "{}", s4.detail);
        assert!(s4.detail.contains("left out 1 measurement(s) during which the host changed speed"), "{}", s4.detail);
        assert!(s4.detail.contains("ns: the run 95/340)"), "{}", s4.detail);
        // `shoal perf` decides (with the run's own line-ring row, `start_p50_ns`).
        let first = rows.iter_mut().find(|r| r["mode"] == "host_check").expect("a check");
        first["start_p50_ns"] = json!(340);
        first["steady"] = json!(false);
        let s4 = target(rows, "S4", Some("spin"));
        assert!(s4.detail.contains("left out 2 measurement(s)") && s4.detail.contains("340/95/100"), "{}", s4.detail);
        assert_eq!(s4.value, Some(1.3), "{}", s4.detail);
    }

    /// A check of one size (`for_size_bytes`) leaves out that size of its run only.
    #[test]
    fn a_size_during_which_the_host_changed_speed_is_left_out_alone() {
        let mut rows = passing();
        for (i, checks) in [((95, 95), (95, 95)), ((95, 95), (95, 340)), ((95, 95), (95, 95))].into_iter().enumerate() {
            for (size, ratio, (before, after)) in
                [(64, 1.2 + i as f64 / 10.0, checks.0), (65536, 1.0 + i as f64, checks.1)]
            {
                let mut base = row("baseline", "pingpong", "spin", size, 100, 1.0);
                let mut shoal = row("shoal", "pingpong", "spin", size, 100, 1.0);
                shoal["p50_ratio"] = json!(ratio);
                let mut check = json!({
                    "system": "baseline", "transport": "line_ring", "mode": "host_check", "wait": "spin",
                    "size_bytes": 64, "for_size_bytes": size, "before_p50_ns": before, "after_p50_ns": after,
                    "steady": after <= before * 3 / 2,
                });
                for r in [&mut base, &mut shoal, &mut check] {
                    r["bench_run"] = json!(20 + i);
                    r["bench_for"] = json!("S1 S4");
                }
                rows.extend([base, shoal, check]);
            }
        }
        let s1 = target(rows.clone(), "S1", Some("spin"));
        // 64K: `passing()`'s untagged run (1.05), runs 20 and 22 (1.0 and 3.0); run 21's (2.0) is left out.
        assert!(s1.detail.contains("64K 1.05/1.00/3.00"), "{}", s1.detail);
        assert!(
            s1.detail.contains("left out 1 measurement(s)") && s1.detail.contains("ns: 64K 95/340)"),
            "{}",
            s1.detail
        );
        let s4 = target(rows, "S4", Some("spin"));
        assert!(s4.detail.ends_with("median of 3 runs: 64B 1.20/1.30/1.40"), "{}", s4.detail);
    }

    /// Of two runs, the median is the one on the failing side of the target's limit.
    #[test]
    fn the_median_of_an_even_number_of_runs_never_favours_passing() {
        assert_eq!(median_of_runs(vec![1.0, 3.0, 2.0], Cmp::AtMost).map(|m| m.0), Some(2.0));
        assert_eq!(median_of_runs(vec![1.0, 3.0, 2.0], Cmp::AtLeast).map(|m| m.0), Some(2.0));
        assert_eq!(median_of_runs(vec![1.0, 3.0], Cmp::AtMost).map(|m| m.0), Some(3.0));
        assert_eq!(median_of_runs(vec![1.0, 3.0], Cmp::AtLeast).map(|m| m.0), Some(1.0));
        assert_eq!(median_of_runs(Vec::new(), Cmp::AtLeast), None);
    }

    #[test]
    fn stream_targets_take_the_median_of_the_runs_and_need_most_paced_runs_lossless() {
        // Three block-mode runs of the streams (the passing rows are one untagged run before them).
        let runs = |rates_64b: [f64; 3], paced_lost: [u64; 3]| {
            let mut rows = passing();
            for (i, (rate, lost)) in rates_64b.into_iter().zip(paced_lost).enumerate() {
                let mut run = vec![
                    row("baseline", "throughput", "block", 64, 100, 1000.0),
                    row("baseline", "throughput", "block", 1024, 100, 1000.0),
                    row("shoal", "throughput", "block", 64, 100, rate),
                    row("shoal", "throughput", "block", 1024, 100, rate),
                    row("shoal", "throughput_paced", "block", 64, 100, 500.0),
                ];
                run[4]["lost"] = json!(lost);
                run[4]["rate_target"] = json!(500.0);
                for r in &mut run {
                    r["bench_run"] = json!(10 + i);
                    r["pinned"] = json!(1.0);
                }
                rows.extend(run);
            }
            rows
        };
        let t2 = target(runs([900.0, 100.0, 700.0], [0; 3]), "T2", Some("block"));
        assert_eq!((t2.status, t2.value), (Status::Pass, Some(0.7)), "one collapsed run passes: {}", t2.detail);
        assert!(t2.detail.starts_with("unpaced 700 vs baseline 1000 msg/s (0 lost)"), "{}", t2.detail);
        assert!(t2.detail.contains("the median of 3 runs: 0.90/0.10/0.70 (pinned)"), "{}", t2.detail);
        assert!(t2.detail.contains("paced streams (the last at 500 msg/s), lost per run: 0/0/0"), "{}", t2.detail);
        let t7 = target(runs([900.0, 100.0, 300.0], [0; 3]), "T7", Some("block"));
        assert_eq!((t7.status, t7.value), (Status::Fail, Some(0.3)), "two slow runs fail: {}", t7.detail);
        let t2 = target(runs([900.0, 900.0, 900.0], [0, 2, 0]), "T2", Some("block"));
        assert_eq!(t2.status, Status::Pass, "a paced loss in one run of three: {}", t2.detail);
        assert!(t2.detail.contains("lost per run: 0/2/0 (0 in most runs)"), "{}", t2.detail);
        let t2 = target(runs([900.0, 900.0, 900.0], [0, 2, 5]), "T2", Some("block"));
        assert_eq!(t2.status, Status::Fail, "paced losses in two runs of three: {}", t2.detail);
        // A run whose paced row does not say what it lost measures no lossless paced stream.
        let mut rows = runs([900.0, 900.0, 900.0], [0; 3]);
        let paced = rows.iter_mut().rfind(|r| r["mode"] == "throughput_paced").unwrap();
        paced.as_object_mut().unwrap().remove("lost");
        assert_eq!(target(rows, "T2", Some("block")).status, Status::NotMeasured);
    }

    #[test]
    fn no_rows_at_all_measures_nothing() {
        let s = statuses(Vec::new());
        assert_eq!(s.len(), 26);
        assert!(s.iter().all(|(_, _, st)| *st == Status::NotMeasured), "{s:?}");
        let t = &evaluate(&Rows::default())[0];
        assert_eq!((t.value, t.to_json()["value"].clone()), (None, Value::Null));
        assert!(t.to_text().contains("NOT MEASURED"), "{}", t.to_text());
        assert_eq!(t.to_json()["pass"], false);
    }

    #[test]
    fn a_missing_size_is_not_measured_and_never_a_pass() {
        let rows: Vec<Value> = passing()
            .into_iter()
            .filter(|r| !(r["mode"] == "pingpong" && r["wait"] == "spin" && r["size_bytes"] == 4 << 20))
            .collect();
        let t1 = target(rows, "T1", Some("spin"));
        assert_eq!(t1.status, Status::NotMeasured);
        assert!((t1.value.unwrap() - 1.1).abs() < 1e-9, "the measured sizes still give the value");
        assert!(t1.detail.ends_with("; not measured: 4M"), "{}", t1.detail);
    }

    #[test]
    fn a_value_over_its_limit_fails_even_when_others_are_missing() {
        let mut rows: Vec<Value> = passing().into_iter().filter(|r| r["size_bytes"] != 1 << 20).collect();
        for r in rows.iter_mut().filter(|r| r["mode"] == "pingpong" && r["system"] == "shoal" && r["wait"] == "block") {
            if r["size_bytes"] == 64 {
                r["p50_ns"] = json!(140);
            }
        }
        let t4 = target(rows.clone(), "T4", Some("block"));
        assert_eq!(t4.status, Status::Fail, "1.4x > 1.3x: {}", t4.detail);
        assert!((t4.value.unwrap() - 1.4).abs() < 1e-9);
        assert!(t4.detail.contains("64B 1.40x") && t4.detail.contains("not measured: 1M"), "{}", t4.detail);
        assert_eq!(target(rows, "T1", Some("spin")).status, Status::NotMeasured);
    }

    #[test]
    fn t2_needs_half_the_rate_and_a_paced_run_without_loss() {
        let set = |rows: &mut Vec<Value>, mode: &str, key: &str, v: Value| {
            for r in rows.iter_mut().filter(|r| r["system"] == "shoal" && r["mode"] == mode && r["wait"] == "block") {
                r[key] = v.clone();
            }
        };
        let mut rows = passing();
        set(&mut rows, "throughput_paced", "lost", json!(3));
        let t = target(rows, "T2", Some("block"));
        assert_eq!(t.status, Status::Fail);
        assert!(t.detail.contains("paced at 500 msg/s: 3 lost"), "{}", t.detail);
        let mut rows = passing();
        set(&mut rows, "throughput", "msgs_per_s", json!(400.0));
        assert_eq!(target(rows, "T2", Some("block")).status, Status::Fail, "0.4x < 0.5x");
        let rows: Vec<Value> = passing().into_iter().filter(|r| r["mode"] != "throughput_paced").collect();
        let t = target(rows, "T2", Some("block"));
        assert_eq!(t.status, Status::NotMeasured);
        assert!(t.detail.contains("paced run: not measured"), "{}", t.detail);
        let mut rows = passing();
        set(&mut rows, "throughput", "msgs_per_s", Value::Null);
        assert_eq!(target(rows, "T2", Some("block")).status, Status::NotMeasured);
    }

    #[test]
    fn t3_t5_t6_limits_and_what_they_need() {
        let mut rows = passing();
        for r in rows.iter_mut().filter(|r| r["mode"] == "zero_copy" && r["size_bytes"] == 4 << 20) {
            r["p50_ns"] = json!(1100);
        }
        assert_eq!(target(rows, "T3", Some("spin")).status, Status::Fail, "2.2x > 2x");
        // Fan-out with another subscriber count than the target names measures nothing of it.
        let mut rows = passing();
        for r in rows.iter_mut().filter(|r| r["mode"] == "fanout" && r["subscribers"] == SUBSCRIBERS) {
            r["subscribers"] = json!(2);
        }
        let t5 = target(rows, "T5", Some("spin"));
        assert_eq!(t5.status, Status::NotMeasured);
        assert!(t5.detail.contains("not measured: 64B, 1K, 64K, 1M, 4M"), "{}", t5.detail);
        let mut rows = passing();
        *rows.last_mut().unwrap() = rss_row(TOPICS, 30_000, 5_000);
        assert_eq!(target(rows, "T6", None).status, Status::Fail, "25 MB");
        let mut rows = passing();
        *rows.last_mut().unwrap() = rss_row(10, 9000, 2000);
        assert_eq!(target(rows, "T6", None).status, Status::NotMeasured, "10 topics are not the target's 100");
        let mut rows = passing();
        rows[0]["peer_peak_rss_kb"] = json!(0);
        let t6 = target(rows, "T6", None);
        assert_eq!(t6.status, Status::NotMeasured);
        assert!(t6.detail.contains("94 of 95"), "{}", t6.detail);
        let rows: Vec<Value> = passing().into_iter().filter(|r| r["mode"] != "rss").collect();
        assert_eq!(target(rows, "T6", None).status, Status::NotMeasured);
    }

    #[test]
    fn t7_compares_1k_streams_and_t8_needs_reliable_rows_without_loss() {
        let mut rows = passing();
        for r in rows.iter_mut().filter(|r| r["system"] == "shoal" && r["size_bytes"] == 1024) {
            r["msgs_per_s"] = json!(300.0);
        }
        assert_eq!(target(rows, "T7", Some("spin")).status, Status::Fail, "0.3x < 0.4x");
        let rows: Vec<Value> = passing().into_iter().filter(|r| r["size_bytes"] != 1024).collect();
        assert_eq!(target(rows, "T7", Some("block")).status, Status::NotMeasured);
        // Best-effort rows never stand in for reliable ones, and the other way round.
        let rows: Vec<Value> = passing().into_iter().filter(|r| r.get("reliable").is_none()).collect();
        let t8 = target(rows, "T8", Some("spin"));
        assert_eq!(t8.status, Status::NotMeasured);
        assert!(t8.detail.contains("not measured: 64B, 1M"), "{}", t8.detail);
        let t2 = target(passing(), "T2", Some("spin"));
        assert!((t2.value.unwrap() - 0.6).abs() < 1e-9, "T2 reads the best-effort row: {}", t2.detail);
        let mut rows = passing();
        let reliable_1m = rows.iter_mut().rev().find(|r| r.get("reliable").is_some()).unwrap();
        reliable_1m["lost"] = json!(2);
        let t8 = target(rows, "T8", Some("spin"));
        assert_eq!((t8.status, t8.value), (Status::Fail, Some(2.0)));
        assert!(t8.detail.contains("1M 2 lost"), "{}", t8.detail);
    }

    #[test]
    fn t9_needs_2mb_pages_in_both_processes_and_no_other_target_reads_huge_rows() {
        let t9 = target(passing(), "T9", Some("spin"));
        assert_eq!((t9.status, t9.value), (Status::Pass, Some(2048.0)), "{}", t9.detail);
        assert!(t9.detail.starts_with("64K 2048/2048 kB (msg/s 1.05x normal pages)"), "{}", t9.detail);
        let mut rows = passing();
        let last = rows.last_mut().unwrap();
        last["peer_ring_page_kb"] = json!(4.0);
        last["msgs_per_s"] = json!(1e9);
        let t9 = target(rows.clone(), "T9", Some("spin"));
        assert_eq!((t9.status, t9.value), (Status::Fail, Some(4.0)), "{}", t9.detail);
        assert!(t9.detail.contains("4M 2048/4 kB") && t9.detail.contains("hugetlbfs"), "{}", t9.detail);
        // A huge-page row never stands in for the best-effort row of another target.
        rows.last_mut().unwrap()["size_bytes"] = json!(64);
        assert!((target(rows, "T2", Some("spin")).value.unwrap() - 0.6).abs() < 1e-9);
        let mut rows = passing();
        for r in rows.iter_mut().filter(|r| r.get("huge_pages").is_some() && r["size_bytes"] == 1 << 20) {
            r.as_object_mut().unwrap().remove("ring_page_kb");
        }
        let t9 = target(rows, "T9", Some("spin"));
        assert_eq!(t9.status, Status::NotMeasured, "{}", t9.detail);
        assert!(t9.detail.ends_with("not measured: 1M"), "{}", t9.detail);
        let rows: Vec<Value> = passing().into_iter().filter(|r| r.get("huge_pages").is_none()).collect();
        assert_eq!(target(rows, "T9", Some("spin")).status, Status::NotMeasured);
    }
}
