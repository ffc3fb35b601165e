//! `shoal perf --service`: the round trip of service calls and calls per second, shoal client -> shoal server in
//! two processes, and with `--against ecal` the same beside eCAL 6.1.1's C++ `CServiceClient` / `CServiceServer`
//! (the programs of `bench/ecal-cpp/`, built by `scripts/ecal-cpp`) and the mixed pairs, in the same run.
//!
//! Processes: this one holds the shoal clients (a `ServiceClient` per concurrent client, each called from a thread
//! of its own); `shoal perf-peer --service` is the shoal server; `shoal-ecal-svc-server` and
//! `shoal-ecal-svc-client` are eCAL's (the client measures itself and reports every round trip). Each server offers
//! method `echo` (the response is the request) under a service name of its own. All of them speak one-line
//! commands on stdin and JSON lines on stdout (`ready`, `stats`, `done`, `error`).
//!
//! Per size and client count (1, then `--clients`) the pairs take turns, in [`ROUNDS`] rounds of a tenth of the
//! calls each: shoal -> shoal, then with `--against ecal` eCAL -> eCAL, shoal -> eCAL and eCAL -> shoal (so that the
//! load of a shared machine falls on all alike); every row but the eCAL pair's gets its ratios to the eCAL pair's
//! row. Every call must be answered, in time, by one server, with the request's bytes: the others are
//! counted (failed, timed out), reported, and make the run fail at the end.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use serde_json::{Map, Value, json};
use shoal::{CallStatus, Node, ServiceClient, TypeInfo};

use super::args::{Against, PeerArgs, PerfArgs};
use super::link::{HEADER_LEN, header};
use super::report::{Latency, fmt_ns, fmt_rate, fmt_ratio, fmt_size, new_histogram};
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// The method every server offers: the response is the request.
const METHOD: &str = "echo";
/// The type both sides announce for requests and responses.
const TYPE_NAME: &str = "shoal.perf.Bytes";
/// How long the clients wait for their server's registration (and eCAL's client for its connection).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);
/// A client thread stops after this many calls that were not answered (a stalled server costs one timeout each).
const MAX_FAILURES: u64 = 10;
/// The calls of a size and client count are made in this many rounds, each pair's round after the other's, so that
/// the pairs meet alike whatever else the machine runs meanwhile.
const ROUNDS: u64 = 10;
/// The eCAL C++ programs (`scripts/ecal-cpp`).
const ECAL_SERVER: &str = "shoal-ecal-svc-server";
const ECAL_CLIENT: &str = "shoal-ecal-svc-client";

/// Whose client or server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Shoal,
    EcalCpp,
}

impl Side {
    fn as_str(self) -> &'static str {
        match self {
            Side::Shoal => "shoal",
            Side::EcalCpp => "ecal_cpp",
        }
    }
}

/// What one run of calls gave (one client kind, one server, one size, one client count).
#[derive(Debug)]
struct Outcome {
    /// Timed calls made.
    calls: u64,
    /// Round trips of the timed calls answered, ns.
    hist: Histogram<u64>,
    /// Calls not answered (warm-up included): failed (an error, a failed or wrong response), timed out.
    failed: u64,
    timed_out: u64,
    /// The first failure, described.
    error: Option<String>,
    /// From the start of the timed calls to the end of the last.
    elapsed: Duration,
    client_cpu: CpuTime,
    client_rss_kb: u64,
}

impl Outcome {
    /// Adds a later round of the same pair.
    fn merge(&mut self, later: Outcome) {
        let _ = self.hist.add(&later.hist);
        self.calls += later.calls;
        self.failed += later.failed;
        self.timed_out += later.timed_out;
        if self.error.is_none() {
            self.error = later.error;
        }
        self.elapsed += later.elapsed;
        self.client_cpu = self.client_cpu.plus(later.client_cpu);
        self.client_rss_kb = self.client_rss_kb.max(later.client_rss_kb);
    }
}

/// One row of the report.
#[derive(Debug, Clone)]
struct Row {
    client: Side,
    server: Side,
    size: usize,
    clients: usize,
    latency: Option<Latency>,
    /// Calls answered per second (all clients together).
    calls_per_s: f64,
    calls: u64,
    answered: u64,
    failed: u64,
    timed_out: u64,
    error: Option<String>,
    client_cpu: CpuTime,
    server_cpu: CpuTime,
    client_rss_kb: u64,
    server_rss_kb: u64,
}

impl Row {
    fn pair(&self) -> String {
        format!("{} -> {}", self.client.as_str(), self.server.as_str())
    }

    fn is_ecal_pair(&self) -> bool {
        self.client == Side::EcalCpp && self.server == Side::EcalCpp
    }
}

/// Ratios of a row to the eCAL pair's row of the same size and client count: p50, p99, calls/s.
fn ratios(m: &Row, e: &Row) -> Option<[f64; 3]> {
    let (a, b) = (m.latency?, e.latency?);
    let r = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
    Some([r(a.p50 as f64, b.p50 as f64), r(a.p99 as f64, b.p99 as f64), r(m.calls_per_s, e.calls_per_s)])
}

fn row_json(m: &Row, vs: Option<[f64; 3]>) -> Value {
    let mut o = Map::new();
    let f = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
    o.insert("mode".into(), "service".into());
    o.insert("client".into(), m.client.as_str().into());
    o.insert("server".into(), m.server.as_str().into());
    o.insert("transport".into(), "tcp".into());
    o.insert("size_bytes".into(), m.size.into());
    o.insert("clients".into(), m.clients.into());
    let l = m.latency;
    // Round trips (request out, response back), unlike the one-way latency of the publish/subscribe rows.
    o.insert("latency".into(), "round_trip".into());
    o.insert("p50_ns".into(), l.map(|l| l.p50).into());
    o.insert("p90_ns".into(), l.map(|l| l.p90).into());
    o.insert("p99_ns".into(), l.map(|l| l.p99).into());
    o.insert("p999_ns".into(), l.map(|l| l.p999).into());
    o.insert("max_ns".into(), l.map(|l| l.max).into());
    o.insert("mean_ns".into(), l.map(|l| l.mean).into());
    o.insert("calls_per_s".into(), f(m.calls_per_s));
    o.insert("calls".into(), m.calls.into());
    o.insert("answered".into(), m.answered.into());
    o.insert("failed".into(), m.failed.into());
    o.insert("timed_out".into(), m.timed_out.into());
    if let Some(e) = &m.error {
        o.insert("error".into(), e.clone().into());
    }
    o.insert("client_cpu_user_ms".into(), (m.client_cpu.user_us as f64 / 1000.0).into());
    o.insert("client_cpu_sys_ms".into(), (m.client_cpu.sys_us as f64 / 1000.0).into());
    o.insert("server_cpu_user_ms".into(), (m.server_cpu.user_us as f64 / 1000.0).into());
    o.insert("server_cpu_sys_ms".into(), (m.server_cpu.sys_us as f64 / 1000.0).into());
    o.insert("client_peak_rss_kb".into(), m.client_rss_kb.into());
    o.insert("server_peak_rss_kb".into(), m.server_rss_kb.into());
    if let Some([p50, p99, rate]) = vs {
        o.insert("vs".into(), "ecal_cpp -> ecal_cpp".into());
        o.insert("p50_ratio".into(), f(p50));
        o.insert("p99_ratio".into(), f(p99));
        o.insert("calls_per_s_ratio".into(), f(rate));
    }
    Value::Object(o)
}

const TABLE_HEADER: &str = "client -> server        size clients      p50      p90      p99    p99.9      max   calls/s  failed  timed_out  cpu client u/s ms  cpu server u/s ms  rss client/server MB";

fn row_text(m: &Row, vs: Option<[f64; 3]>) -> String {
    let lat = |f: fn(&Latency) -> u64| m.latency.as_ref().map(|l| fmt_ns(f(l))).unwrap_or_else(|| "-".into());
    let ms = |c: CpuTime| format!("{:.0}/{:.0}", c.user_us as f64 / 1e3, c.sys_us as f64 / 1e3);
    let mut s = format!(
        "{:<22} {:>5} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>10} {:>18} {:>18} {:>20}",
        m.pair(),
        fmt_size(m.size),
        m.clients,
        lat(|l| l.p50),
        lat(|l| l.p90),
        lat(|l| l.p99),
        lat(|l| l.p999),
        lat(|l| l.max),
        fmt_rate(m.calls_per_s),
        m.failed,
        m.timed_out,
        ms(m.client_cpu),
        ms(m.server_cpu),
        format!("{:.1}/{:.1}", m.client_rss_kb as f64 / 1024.0, m.server_rss_kb as f64 / 1024.0),
    );
    if let Some([p50, p99, rate]) = vs {
        s.push_str(&format!(
            "\n{:20}vs eCAL C++ pair: p50 {} p99 {} calls/s {}",
            "",
            fmt_ratio(p50),
            fmt_ratio(p99),
            fmt_ratio(rate)
        ));
    }
    if let Some(e) = &m.error {
        s.push_str(&format!("\n{:20}first failure: {e}", ""));
    }
    s
}

/// Prints rows as they come (table or JSON lines) and keeps them for the ratios and the verdict.
struct Report {
    json: bool,
    header_printed: bool,
    rows: Vec<Row>,
}

impl Report {
    fn note(&self, text: &str) {
        if !self.json {
            println!("{text}");
        }
    }

    /// Prints the rows of one size and client count, each but the eCAL pair's with its ratios to that pair's.
    fn add(&mut self, group: Vec<Row>) {
        let mut out = std::io::stdout().lock();
        for (row, vs) in group.iter().cloned().zip(group_ratios(&group)) {
            if self.json {
                let _ = writeln!(out, "{}", row_json(&row, vs));
            } else {
                if !self.header_printed {
                    let _ = writeln!(out, "{TABLE_HEADER}");
                    self.header_printed = true;
                }
                let _ = writeln!(out, "{}", row_text(&row, vs));
            }
            self.rows.push(row);
        }
        let _ = out.flush();
    }

    /// Prints the goal of issue 23 and returns the number of calls not answered in the whole run.
    fn verdict(&self, against: bool) -> u64 {
        let Goal { p50_ratio, calls_1m, lost_1m, not_answered } = goal(&self.rows);
        let p50_met = p50_ratio.map(|r| r <= 0.5);
        let ok_1m = (calls_1m + lost_1m > 0).then_some(lost_1m == 0);
        if self.json {
            println!(
                "{}",
                json!({
                    "mode": "service_goal",
                    "p50_ratio_64b_1_client": p50_ratio.filter(|r| r.is_finite()),
                    "p50_goal": 0.5,
                    "p50_goal_met": p50_met,
                    "calls_1m_answered": calls_1m,
                    "calls_1m_not_answered": lost_1m,
                    "no_loss_at_1m": ok_1m,
                    "calls_not_answered": not_answered,
                })
            );
        } else {
            let yes = |b: bool| if b { "met" } else { "MISSED" };
            match (p50_ratio, against) {
                (Some(r), _) => println!(
                    "goal: shoal -> shoal round trip p50 at 64 B, 1 client <= 0.5x the eCAL C++ pair's: {} ({})",
                    fmt_ratio(r),
                    yes(r <= 0.5)
                ),
                (None, true) => println!("goal: p50 at 64 B vs eCAL C++: not measured (no 64 B rows of both pairs)"),
                (None, false) => println!("goal: p50 at 64 B vs eCAL C++: not measured here (add --against ecal)"),
            }
            match ok_1m {
                Some(ok) => {
                    println!("goal: no loss or stall at 1 MB: {calls_1m} calls answered, {lost_1m} not ({})", yes(ok))
                }
                None => println!("goal: no loss or stall at 1 MB: not measured (no 1 MB rows; --sizes 64,1m)"),
            }
        }
        not_answered
    }
}

/// The ratios of each row of a group (one size and client count) to the eCAL pair's row of the group (none for
/// that row itself, nor without one).
fn group_ratios(group: &[Row]) -> Vec<Option<[f64; 3]>> {
    let ecal = group.iter().find(|e| e.is_ecal_pair());
    group.iter().map(|row| ecal.filter(|_| !row.is_ecal_pair()).and_then(|e| ratios(row, e))).collect()
}

/// What the goal of issue 23 is judged on: shoal's round trip P50 at 64 B with one client as a ratio to the eCAL
/// C++ pair's (at most 0.5), and shoal's 1 MB calls, all answered.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Goal {
    p50_ratio: Option<f64>,
    /// shoal -> shoal calls of 1 MB answered and not answered.
    calls_1m: u64,
    lost_1m: u64,
    /// Calls not answered in the whole run, every pair.
    not_answered: u64,
}

fn goal(rows: &[Row]) -> Goal {
    let find = |c: Side, s: Side, size: usize| {
        rows.iter().find(|r| r.client == c && r.server == s && r.size == size && r.clients == 1)
    };
    let p50_ratio = match (find(Side::Shoal, Side::Shoal, 64), find(Side::EcalCpp, Side::EcalCpp, 64)) {
        (Some(m), Some(e)) => ratios(m, e).map(|r| r[0]),
        _ => None,
    };
    let shoal_1m = || rows.iter().filter(|r| r.client == Side::Shoal && r.server == Side::Shoal && r.size == 1 << 20);
    Goal {
        p50_ratio,
        calls_1m: shoal_1m().map(|r| r.answered).sum(),
        lost_1m: shoal_1m().map(|r| r.failed + r.timed_out).sum(),
        not_answered: rows.iter().map(|r| r.failed + r.timed_out).sum(),
    }
}

/// A child process spoken to with one-line commands on stdin, answering with JSON lines (`{"event": ...}`) on
/// stdout; killed when dropped early.
struct LineProc {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// Where its stderr goes (eCAL's programs: eCAL's log lines), read back when it fails.
    log: Option<PathBuf>,
}

impl LineProc {
    fn spawn(name: &str, mut cmd: Command, log: Option<PathBuf>) -> anyhow::Result<LineProc> {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        match &log {
            Some(path) => {
                let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
                cmd.stderr(f);
            }
            None => {
                cmd.stderr(Stdio::inherit());
            }
        }
        let mut child = cmd.spawn().with_context(|| format!("starting {name} ({cmd:?})"))?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("child stdout")?);
        Ok(LineProc { name: name.to_string(), child, stdin, stdout, log })
    }

    fn log_tail(&self) -> String {
        let Some(path) = &self.log else { return String::new() };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        format!("\nits stderr ({}) ends with:\n{tail}", path.display())
    }

    fn send(&mut self, line: &str) -> anyhow::Result<()> {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .with_context(|| format!("writing to {} (did it exit?){}", self.name, self.log_tail()))
    }

    /// The next line of `event` (an `error` line or the end of the output is an error).
    fn expect(&mut self, event: &str) -> anyhow::Result<Value> {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).with_context(|| format!("reading from {}", self.name))?;
            if n == 0 {
                let status = self.child.wait().ok();
                bail!("{} exited ({status:?}) instead of saying {event:?}{}", self.name, self.log_tail());
            }
            let v: Value = serde_json::from_str(line.trim())
                .with_context(|| format!("{} said {:?}, not a JSON line", self.name, line.trim()))?;
            match v["event"].as_str() {
                Some(e) if e == event => return Ok(v),
                Some("error") => bail!("{}: {}{}", self.name, v["error"].as_str().unwrap_or("?"), self.log_tail()),
                _ => {}
            }
        }
    }

    /// A server's totals: calls served, CPU time, peak RSS.
    fn stats(&mut self) -> anyhow::Result<(u64, CpuTime, u64)> {
        self.send("stats")?;
        let v = self.expect("stats")?;
        let u = |k: &str| v[k].as_u64().with_context(|| format!("{}: no {k} in {v}", self.name));
        Ok((u("calls")?, CpuTime { user_us: u("cpu_user_us")?, sys_us: u("cpu_sys_us")? }, u("peak_rss_kb")?))
    }

    fn quit(mut self) -> anyhow::Result<()> {
        let _ = self.send("quit");
        let status = self.child.wait().with_context(|| format!("waiting for {}", self.name))?;
        if !status.success() {
            bail!("{} exited with {status}{}", self.name, self.log_tail());
        }
        if let Some(path) = self.log.take() {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

impl Drop for LineProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The servers of the run.
struct Servers {
    shoal: (String, LineProc),
    ecal: Option<(String, LineProc)>,
}

impl Servers {
    fn get(&mut self, side: Side) -> anyhow::Result<&mut (String, LineProc)> {
        match side {
            Side::Shoal => Ok(&mut self.shoal),
            Side::EcalCpp => self.ecal.as_mut().context("no eCAL server in this run"),
        }
    }
}

/// The clients of one server: shoal's (in this process, one `ServiceClient` per concurrent client) and eCAL's (a
/// process).
struct Clients {
    shoal: Vec<ServiceClient>,
    ecal: Option<LineProc>,
}

/// `shoal perf --service`.
pub(crate) fn run(args: &PerfArgs) -> anyhow::Result<()> {
    let against = args.against == Some(Against::Ecal);
    let ecal_dir = if against { Some(super::ecal_cpp::dir(args, &[ECAL_SERVER, ECAL_CLIENT])?) } else { None };
    let pid = std::process::id();
    let log_dir = std::env::temp_dir();
    let mut report = Report { json: args.json, header_printed: false, rows: Vec::new() };
    let max_clients = args.clients.max(1);
    let timeout = Duration::from_millis(args.call_timeout_ms);
    report.note(&format!(
        "shoal perf --service: {} CPUs, load average {}; round trip = request out, response (as large) back, of method \
         \"{METHOD}\" in another process on this host over the service protocol (TCP on loopback), default \
         configuration (shoal: what $ECAL_INI says, if set); calls/s = answered calls / wall time of the timed calls, all clients together; the pairs \
         take turns in {ROUNDS} rounds; a call not answered within {timeout:?} is timed out",
        super::sys::cpu_count(),
        load_average()
    ));

    // Servers first, then their clients: each waits for registration.
    let shoal_name = format!("shoal_perf_{pid}_svc_shoal");
    let mut shoal_server = spawn_shoal_server(&shoal_name)?;
    shoal_server.expect("ready")?;
    let mut servers = Servers { shoal: (shoal_name, shoal_server), ecal: None };
    if let Some(dir) = &ecal_dir {
        let name = format!("shoal_perf_{pid}_svc_ecal");
        let mut cmd = Command::new(dir.join(ECAL_SERVER));
        cmd.args(["--service", &name, "--unit", "shoal_perf_ecal_server"]);
        let mut p = LineProc::spawn(ECAL_SERVER, cmd, Some(log_dir.join(format!("shoal_perf_{pid}_ecal_server.log"))))?;
        p.expect("ready")?;
        servers.ecal = Some((name, p));
    }
    let node = Node::init("shoal-perf-svc-client").context("starting the shoal node of the clients")?;
    let clients_of = |server: Side, servers: &mut Servers| -> anyhow::Result<Clients> {
        let name = servers.get(server)?.0.clone();
        let mut shoal = Vec::new();
        for _ in 0..max_clients {
            let c =
                node.service_client(&name).method(METHOD, TypeInfo::raw(TYPE_NAME), TypeInfo::raw(TYPE_NAME)).build();
            c.wait_for_servers(1, DISCOVERY_TIMEOUT).with_context(|| {
                format!("the shoal client does not see the {} server: check that registration works", server.as_str())
            })?;
            shoal.push(c);
        }
        let ecal = match &ecal_dir {
            None => None,
            Some(dir) => {
                let mut cmd = Command::new(dir.join(ECAL_CLIENT));
                cmd.args(["--service", &name, "--clients", &max_clients.to_string()]);
                cmd.args(["--unit", "shoal_perf_ecal_client"]);
                let log = log_dir.join(format!("shoal_perf_{pid}_ecal_client_{}.log", server.as_str()));
                let mut p =
                    LineProc::spawn(&format!("{ECAL_CLIENT} (of the {} server)", server.as_str()), cmd, Some(log))?;
                p.expect("ready")?;
                Some(p)
            }
        };
        Ok(Clients { shoal, ecal })
    };
    let mut of_shoal = clients_of(Side::Shoal, &mut servers)?;
    let mut of_ecal = if against { Some(clients_of(Side::EcalCpp, &mut servers)?) } else { None };

    let mut counts = vec![1];
    if max_clients > 1 {
        counts.push(max_clients);
    }
    for size in args.sizes() {
        for &n in &counts {
            let calls = (args.iterations_for(size) / n as u64).max(20);
            let warmup = (args.warmup_for(size) / n as u64).max(5);
            let mut pairs = vec![(Side::Shoal, Side::Shoal)];
            if against {
                pairs.extend([
                    (Side::EcalCpp, Side::EcalCpp),
                    (Side::Shoal, Side::EcalCpp),
                    (Side::EcalCpp, Side::Shoal),
                ]);
            }
            let rounds = ROUNDS.min(calls);
            // Per pair: what its rounds gave, its server's CPU time and peak RSS.
            let mut acc: Vec<Option<(Outcome, CpuTime, u64)>> = pairs.iter().map(|_| None).collect();
            for round in 0..rounds {
                let share = calls / rounds + u64::from(round < calls % rounds);
                for (&(client, server), acc) in pairs.iter().zip(acc.iter_mut()) {
                    if acc.as_ref().is_some_and(|(o, ..)| o.failed + o.timed_out >= MAX_FAILURES) {
                        continue;
                    }
                    let warmup = if round == 0 { warmup } else { 0 };
                    let clients = match server {
                        Side::Shoal => &mut of_shoal,
                        Side::EcalCpp => of_ecal.as_mut().context("no clients of the eCAL server")?,
                    };
                    let (_, server_proc) = servers.get(server)?;
                    let (_, cpu0, _) = server_proc.stats()?;
                    let out = match client {
                        Side::Shoal => run_shoal(&clients.shoal[..n], size, share, warmup, timeout),
                        Side::EcalCpp => {
                            let p = clients.ecal.as_mut().context("no eCAL client")?;
                            run_ecal(p, size, n, share, warmup, timeout)?
                        }
                    };
                    let (_, cpu1, rss) = server_proc.stats()?;
                    let cpu = cpu1.since(cpu0);
                    match acc {
                        None => *acc = Some((out, cpu, rss)),
                        Some((o, c, r)) => {
                            o.merge(out);
                            *c = c.plus(cpu);
                            *r = rss;
                        }
                    }
                }
            }
            let mut group = Vec::new();
            for (&(client, server), acc) in pairs.iter().zip(acc) {
                let (out, server_cpu, server_rss_kb) = acc.context("a pair that never ran")?;
                let answered = out.hist.len();
                group.push(Row {
                    client,
                    server,
                    size,
                    clients: n,
                    latency: Latency::from_histogram(&out.hist),
                    calls_per_s: answered as f64 / out.elapsed.as_secs_f64().max(1e-9),
                    calls: out.calls,
                    answered,
                    failed: out.failed,
                    timed_out: out.timed_out,
                    error: out.error,
                    client_cpu: out.client_cpu,
                    server_cpu,
                    client_rss_kb: out.client_rss_kb,
                    server_rss_kb,
                });
            }
            report.add(group);
        }
    }
    report.note(&format!(
        "note: both sides share this host's {} CPUs with everything else running (load average now {}): figures \
         move from run to run, compare rows of the same run",
        super::sys::cpu_count(),
        load_average()
    ));
    let not_answered = report.verdict(against);

    for p in [of_shoal.ecal.take(), of_ecal.as_mut().and_then(|c| c.ecal.take())].into_iter().flatten() {
        p.quit()?;
    }
    drop((of_shoal, of_ecal));
    servers.shoal.1.quit()?;
    if let Some((_, p)) = servers.ecal {
        p.quit()?;
    }
    if not_answered > 0 {
        bail!("{not_answered} calls were not answered (failed or timed out): see the failed and timed_out columns");
    }
    Ok(())
}

/// /proc/loadavg's 1-minute figure, or "?".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn spawn_shoal_server(name: &str) -> anyhow::Result<LineProc> {
    let exe = std::env::current_exe().context("cannot find this executable to spawn the shoal server")?;
    let mut cmd = Command::new(exe);
    cmd.args(["perf-peer", "--service", "--system", "shoal", "--wait", "block", "--name", name])
        .args(["--parent", &std::process::id().to_string()]);
    LineProc::spawn("the shoal server (shoal perf-peer --service)", cmd, None)
}

/// One client thread's part of a run.
#[derive(Debug, Default)]
struct ThreadResult {
    rtt_ns: Vec<u64>,
    made: u64,
    failed: u64,
    timed_out: u64,
    error: Option<String>,
}

impl ThreadResult {
    fn not_answered(&self) -> u64 {
        self.failed + self.timed_out
    }

    /// One call of `echo` with `request`: its round trip when answered as asked, else the failure recorded.
    fn call(&mut self, client: &ServiceClient, request: &[u8], timeout: Duration) -> Option<u64> {
        let t0 = Instant::now();
        let result = client.call(METHOD, request, timeout);
        let rtt = t0.elapsed();
        let problem = match result {
            Err(e) => format!("call: {e}"),
            Ok(r) if r.len() == 1 && r[0].status == CallStatus::Executed && r[0].payload == request => {
                return Some((rtt.as_nanos() as u64).max(1));
            }
            Ok(r) => {
                if r.iter().any(|x| x.status == CallStatus::TimedOut) {
                    self.timed_out += 1;
                } else {
                    self.failed += 1;
                }
                if self.error.is_none() {
                    let each: Vec<String> = r
                        .iter()
                        .map(|x| format!("{:?}, {} B of {} B", x.status, x.payload.len(), request.len()))
                        .collect();
                    self.error = Some(format!("{} responses: {}", r.len(), each.join("; ")));
                }
                return None;
            }
        };
        self.failed += 1;
        self.error.get_or_insert(problem);
        None
    }
}

/// `clients.len()` threads, a client each: `warmup` calls, then all at once `calls` timed calls each.
fn run_shoal(clients: &[ServiceClient], size: usize, calls: u64, warmup: u64, timeout: Duration) -> Outcome {
    let barrier = Barrier::new(clients.len() + 1);
    let cpu0 = CpuTime::now();
    let seq_base = AtomicU64::new(0);
    let (results, elapsed) = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(t, client)| {
                let (barrier, seq_base) = (&barrier, &seq_base);
                s.spawn(move || {
                    let mut r = ThreadResult { rtt_ns: Vec::with_capacity(calls as usize), ..Default::default() };
                    let mut request: Vec<u8> = (0..size).map(|i| (t * 31 + i) as u8).collect();
                    let mut seq = seq_base.fetch_add(1 << 40, Ordering::Relaxed);
                    let mut stamp = |request: &mut Vec<u8>| {
                        let h = header(seq, mono_ns());
                        let n = HEADER_LEN.min(request.len());
                        request[..n].copy_from_slice(&h[..n]);
                        seq += 1;
                    };
                    for _ in 0..warmup {
                        if r.not_answered() >= MAX_FAILURES {
                            break;
                        }
                        stamp(&mut request);
                        r.call(client, &request, timeout);
                    }
                    barrier.wait();
                    for _ in 0..calls {
                        if r.not_answered() >= MAX_FAILURES {
                            break;
                        }
                        stamp(&mut request);
                        r.made += 1;
                        if let Some(rtt) = r.call(client, &request, timeout) {
                            r.rtt_ns.push(rtt);
                        }
                    }
                    r
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<ThreadResult> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| ThreadResult {
                    failed: 1,
                    error: Some("a client thread panicked".into()),
                    ..Default::default()
                })
            })
            .collect();
        (results, start.elapsed())
    });
    let client_cpu = CpuTime::now().since(cpu0);
    let mut out = Outcome {
        calls: 0,
        hist: new_histogram(),
        failed: 0,
        timed_out: 0,
        error: None,
        elapsed,
        client_cpu,
        client_rss_kb: peak_rss_kb(),
    };
    for r in results {
        for v in r.rtt_ns {
            let _ = out.hist.record(v);
        }
        out.calls += r.made;
        out.failed += r.failed;
        out.timed_out += r.timed_out;
        if out.error.is_none() {
            out.error = r.error;
        }
    }
    out
}

/// The same run by the eCAL C++ client process.
fn run_ecal(
    p: &mut LineProc,
    size: usize,
    n: usize,
    calls: u64,
    warmup: u64,
    timeout: Duration,
) -> anyhow::Result<Outcome> {
    let timeout_ms = timeout.as_millis().clamp(1, i32::MAX as u128);
    p.send(&format!("run {size} {n} {calls} {warmup} {timeout_ms}"))?;
    let v = p.expect("done")?;
    let u = |k: &str| v[k].as_u64().with_context(|| format!("no {k} in the eCAL client's report"));
    let mut hist = new_histogram();
    for x in v["rtt_ns"].as_array().context("no rtt_ns in the eCAL client's report")? {
        let _ = hist.record(x.as_u64().context("a round trip that is no number")?.max(1));
    }
    Ok(Outcome {
        calls: u("calls")?,
        hist,
        failed: u("failed")?,
        timed_out: u("timed_out")?,
        error: v["error"].as_str().filter(|e| !e.is_empty()).map(str::to_string),
        elapsed: Duration::from_nanos(u("elapsed_ns")?),
        client_cpu: CpuTime { user_us: u("cpu_user_us")?, sys_us: u("cpu_sys_us")? },
        client_rss_kb: u("peak_rss_kb")?,
    })
}

/// `shoal perf-peer --service`: the shoal server of `shoal perf --service`, named `--name`, method `echo`; speaks
/// the protocol of the eCAL server program (`ready`, `stats`, `quit`).
pub(crate) fn run_server_peer(args: &PeerArgs) -> anyhow::Result<()> {
    super::sys::die_with_parent(args.parent)?;
    let node = Node::init("shoal-perf-svc-server").context("starting the shoal node of the server")?;
    let calls = std::sync::Arc::new(AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&calls);
    let _server = node
        .service_server(&args.name)
        .method(METHOD, TypeInfo::raw(TYPE_NAME), TypeInfo::raw(TYPE_NAME), move |req: &[u8]| {
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(req.to_vec())
        })
        .build()
        .context("creating the shoal service server")?;
    let say = |v: Value| -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{v}").and_then(|()| out.flush()).context("writing to the parent (is it gone?)")
    };
    say(json!({"event": "ready", "pid": std::process::id()}))?;
    for line in std::io::stdin().lock().lines() {
        match line.context("reading commands from the parent")?.as_str() {
            "quit" => break,
            "stats" => {
                let cpu = CpuTime::now();
                say(json!({
                    "event": "stats",
                    "calls": calls.load(Ordering::Relaxed),
                    "cpu_user_us": cpu.user_us,
                    "cpu_sys_us": cpu.sys_us,
                    "peak_rss_kb": peak_rss_kb(),
                }))?;
            }
            other => say(json!({"event": "error", "error": format!("unknown command {other:?}")}))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(client: Side, server: Side, size: usize, p50: u64, rate: f64, failed: u64) -> Row {
        Row {
            client,
            server,
            size,
            clients: 1,
            latency: Some(Latency { p50, p90: p50, p99: 2 * p50, p999: 2 * p50, max: 3 * p50, mean: p50 as f64 }),
            calls_per_s: rate,
            calls: 100,
            answered: 100 - failed,
            failed,
            timed_out: 0,
            error: None,
            client_cpu: CpuTime::default(),
            server_cpu: CpuTime::default(),
            client_rss_kb: 1,
            server_rss_kb: 2,
        }
    }

    #[test]
    fn every_row_but_the_ecal_pairs_is_compared_with_it() {
        use Side::{EcalCpp, Shoal};
        let group = vec![
            row(Shoal, Shoal, 64, 40, 2000.0, 0),
            row(EcalCpp, EcalCpp, 64, 100, 1000.0, 0),
            row(Shoal, EcalCpp, 64, 80, 1500.0, 0),
        ];
        let r = group_ratios(&group);
        assert_eq!(r[0], Some([0.4, 0.4, 2.0]), "the shoal pair's row, printed before the eCAL pair's");
        assert_eq!(r[1], None);
        assert_eq!(r[2], Some([0.8, 0.8, 1.5]));
        let v = row_json(&group[0], r[0]);
        assert_eq!((v["p50_ratio"].as_f64(), v["calls_per_s_ratio"].as_f64()), (Some(0.4), Some(2.0)));
        assert_eq!((v["client"].as_str(), v["latency"].as_str()), (Some("shoal"), Some("round_trip")));
        assert!(row_text(&group[0], r[0]).contains("vs eCAL C++ pair: p50 0.40x p99 0.40x calls/s 2.00x"));
        assert_eq!(group_ratios(&group[..1]), vec![None], "no eCAL pair in the run");
    }

    #[test]
    fn the_goal_reads_the_64_byte_ratio_and_the_1_mb_calls() {
        use Side::{EcalCpp, Shoal};
        let mut rows = vec![
            row(Shoal, Shoal, 64, 40, 2000.0, 0),
            row(EcalCpp, EcalCpp, 64, 100, 1000.0, 0),
            row(Shoal, Shoal, 1 << 20, 1000, 100.0, 0),
        ];
        assert_eq!(goal(&rows), Goal { p50_ratio: Some(0.4), calls_1m: 100, lost_1m: 0, not_answered: 0 });
        rows.push(row(Shoal, Shoal, 1 << 20, 1000, 100.0, 3));
        rows.push(row(EcalCpp, Shoal, 64, 1000, 100.0, 2));
        assert_eq!(goal(&rows), Goal { p50_ratio: Some(0.4), calls_1m: 197, lost_1m: 3, not_answered: 5 });
        assert_eq!(goal(&rows[2..3]).p50_ratio, None, "no 64 B rows");
    }
}
