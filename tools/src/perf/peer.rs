//! The peer process and its control channel. The main process spawns `shoal perf-peer ...`
//! (itself) and drives it with one-line commands on the child's stdin; the peer answers on
//! stdout (`ready`, `go`, `done <json>`). Logs go to stderr. The peer dies with its parent
//! (PR_SET_PDEATHSIG) and also exits on stdin EOF.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::args::{Pages, PeerArgs, System, Transport, WaitMode};
use super::baseline_link::BaselineLink;
use super::link::{Receiver, Sender, is_timeout, parse_header};
use super::net_link::{RawTcp, RawUdpRx, RawUdpTx};
use super::report::{Latency, new_histogram};
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// Timeout for one receive while a peer expects traffic.
pub(crate) const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// Silence after which a throughput sink stops and reports what it received.
const SINK_IDLE: Duration = Duration::from_secs(2);

/// A command to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerCommand {
    /// Echo `n` messages, copying each in and out.
    Echo { n: u64 },
    /// Echo `n` messages reading/writing only the header.
    EchoHeader { n: u64 },
    /// Receive (copying) until sequence `count - 1` or silence.
    Sink { count: u64 },
    /// Echo every message until one with sequence [`HANDSHAKE_END`] (echoed too): the main process probes until
    /// an echo comes back, so both directions are connected (the TCP layer connects after the match).
    Handshake,
}

/// The sequence number that ends a [`PeerCommand::Handshake`].
pub(crate) const HANDSHAKE_END: u64 = u64::MAX;

impl PeerCommand {
    fn encode(self) -> String {
        match self {
            PeerCommand::Echo { n } => format!("echo {n}"),
            PeerCommand::EchoHeader { n } => format!("zecho {n}"),
            PeerCommand::Sink { count } => format!("sink {count}"),
            PeerCommand::Handshake => "handshake".to_string(),
        }
    }

    fn decode(line: &str) -> anyhow::Result<Option<PeerCommand>> {
        let mut f = line.split_whitespace();
        let word = f.next().unwrap_or("");
        let mut num = || -> anyhow::Result<u64> {
            f.next().context("missing number")?.parse().with_context(|| format!("bad command {line:?}"))
        };
        Ok(Some(match word {
            "echo" => PeerCommand::Echo { n: num()? },
            "zecho" => PeerCommand::EchoHeader { n: num()? },
            "sink" => PeerCommand::Sink { count: num()? },
            "handshake" => PeerCommand::Handshake,
            "quit" => return Ok(None),
            _ => bail!("unknown command {line:?}"),
        }))
    }
}

/// What the peer reports after a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PeerReport {
    /// Messages received.
    pub(crate) received: u64,
    /// Drops counted by the transport during the command.
    pub(crate) drops: u64,
    /// CPU time spent during the command.
    pub(crate) cpu: CpuTime,
    /// VmHWM after the command, kB.
    pub(crate) peak_rss_kb: u64,
    /// CLOCK_MONOTONIC of the last receive, ns.
    pub(crate) last_ns: u64,
    /// Sink: send-to-receive latency from the message headers.
    pub(crate) latency: Option<Latency>,
    /// shoal: messages received per layer during the command.
    pub(crate) via: std::collections::BTreeMap<String, u64>,
}

impl PeerReport {
    fn to_json(&self) -> Value {
        json!({
            "received": self.received, "drops": self.drops,
            "cpu_user_us": self.cpu.user_us, "cpu_sys_us": self.cpu.sys_us,
            "peak_rss_kb": self.peak_rss_kb, "last_ns": self.last_ns,
            "latency": self.latency.map(Latency::to_json), "via": self.via,
        })
    }

    fn from_json(v: &Value) -> Option<PeerReport> {
        let u = |k: &str| v.get(k)?.as_u64();
        Some(PeerReport {
            received: u("received")?,
            drops: u("drops")?,
            cpu: CpuTime { user_us: u("cpu_user_us")?, sys_us: u("cpu_sys_us")? },
            peak_rss_kb: u("peak_rss_kb")?,
            last_ns: u("last_ns")?,
            latency: v.get("latency").and_then(Latency::from_json),
            via: v
                .get("via")?
                .as_object()?
                .iter()
                .map(|(k, n)| Some((k.clone(), n.as_u64()?)))
                .collect::<Option<_>>()?,
        })
    }
}

/// The main process's handle on a running peer; the peer is killed when this is dropped early.
#[derive(Debug)]
pub(crate) struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    index: usize,
}

/// How to start a peer.
#[derive(Debug, Clone)]
pub(crate) struct PeerSpec<'a> {
    pub(crate) system: System,
    pub(crate) wait: WaitMode,
    pub(crate) name: &'a str,
    pub(crate) index: usize,
    pub(crate) sink_only: bool,
    pub(crate) cpu: Option<usize>,
    /// shoal: the pages of the peer's rings (`None`: as its ini says).
    pub(crate) pages: Option<Pages>,
    /// The layer measured.
    pub(crate) transport: Transport,
    /// Run the peer in this network namespace (`ip netns exec`), with this address there.
    pub(crate) netns: Option<(&'a str, std::net::Ipv4Addr)>,
}

impl Peer {
    /// Spawns `current_exe perf-peer ...`. Call [`Peer::wait_ready`] before sending commands.
    pub(crate) fn spawn(spec: &PeerSpec<'_>) -> anyhow::Result<Peer> {
        let exe = std::env::current_exe().context("cannot find this executable to spawn the perf peer")?;
        let mut cmd = match spec.netns {
            None => Command::new(exe),
            Some((ns, addr)) => {
                // Its own UTS namespace with the network namespace's name as host name: another host to shoal (the
                // TCP layer connects to a publisher by its host name, which must resolve to `addr` here).
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "unshare", "-u", "sh", "-c", "hostname \"$0\" && exec \"$@\""]);
                c.arg(ns).arg(exe);
                c.args(["perf-peer", "--local-addr", &addr.to_string()]);
                c
            }
        };
        if spec.netns.is_none() {
            cmd.arg("perf-peer");
        }
        cmd.args(["--transport", spec.transport.as_str()])
            .args(["--system", spec.system.as_str(), "--wait", spec.wait.as_str(), "--name", spec.name])
            .args(["--index", &spec.index.to_string(), "--parent", &std::process::id().to_string()]);
        if spec.sink_only {
            cmd.arg("--sink-only");
        }
        if super::shoal_link::reliable() {
            cmd.arg("--reliable");
        }
        if let Some(c) = spec.cpu {
            cmd.args(["--cpu", &c.to_string()]);
        }
        if let Some(p) = spec.pages {
            cmd.args(["--pages", p.as_str()]);
        }
        if let Some(dir) = super::shoal_link::huge_pages_path() {
            cmd.arg("--huge-pages-path").arg(dir);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning the perf peer process")?;
        let stdin = child.stdin.take().context("peer stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("peer stdout")?);
        Ok(Peer { child, stdin, stdout, index: spec.index })
    }

    fn read_line(&mut self) -> anyhow::Result<String> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).context("reading from the perf peer")?;
        if n == 0 {
            let status = self.child.wait().ok();
            bail!("perf peer {} exited ({status:?}); its error is printed above", self.index);
        }
        Ok(line.trim_end().to_string())
    }

    fn expect(&mut self, word: &str) -> anyhow::Result<String> {
        let line = self.read_line()?;
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => bail!("perf peer {} said {line:?}, expected {word:?}", self.index),
        }
    }

    /// The peer's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the peer has set up its endpoints (and, for shoal, matched); returns the rest of its `ready`
    /// line (the raw UDP peer's port).
    pub(crate) fn wait_ready(&mut self) -> anyhow::Result<String> {
        self.expect("ready")
    }

    /// Sends a command; for [`PeerCommand::Sink`] also waits until the peer is receiving.
    pub(crate) fn command(&mut self, c: PeerCommand) -> anyhow::Result<()> {
        writeln!(self.stdin, "{}", c.encode())
            .and_then(|()| self.stdin.flush())
            .context("writing to the perf peer (did it exit?)")?;
        if matches!(c, PeerCommand::Sink { .. }) {
            self.expect("go")?;
        }
        Ok(())
    }

    /// Reads the report of the last command.
    pub(crate) fn report(&mut self) -> anyhow::Result<PeerReport> {
        let rest = self.expect("done")?;
        let v: Value = serde_json::from_str(&rest).context("bad report from the perf peer")?;
        PeerReport::from_json(&v).context("incomplete report from the perf peer")
    }

    /// Asks the peer to exit and waits for it.
    pub(crate) fn quit(mut self) -> anyhow::Result<()> {
        let _ = writeln!(self.stdin, "quit").and_then(|()| self.stdin.flush());
        let status = self.child.wait().context("waiting for the perf peer")?;
        if !status.success() {
            bail!("perf peer {} exited with {status}", self.index);
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Entry point of `shoal perf-peer`.
pub(crate) fn run_peer(args: PeerArgs) -> anyhow::Result<()> {
    if args.service {
        return super::service::run_server_peer(&args);
    }
    if args.transport == Transport::Shm {
        super::sys::fix_malloc_mmap_threshold();
    }
    super::sys::die_with_parent(args.parent)?;
    super::shoal_link::set_reliable(args.reliable);
    super::shoal_link::set_huge_pages_path(args.huge_pages_path.clone());
    if let Some(cpu) = args.cpu {
        super::sys::pin_to_cpu(cpu)?;
    }
    let main_addr = || -> anyhow::Result<std::net::SocketAddrV4> {
        args.name.parse().with_context(|| format!("--name {:?} is not the main process's ADDR:PORT", args.name))
    };
    match (args.system, args.transport) {
        (System::Baseline, Transport::Shm) => {
            let (ping, pong) = super::baseline_link::ring_paths(&args.name);
            let rx = BaselineLink::open(&ping, args.wait)?;
            let tx = if args.sink_only { None } else { Some(BaselineLink::open(&pong, args.wait)?) };
            serve(rx, tx, "")
        }
        (System::Baseline, Transport::Udp) => {
            let rx = RawUdpRx::new(args.wait)?;
            let tx = RawUdpTx::new(main_addr()?)?;
            let port = rx.port()?;
            serve(rx, Some(tx), &port.to_string())
        }
        (System::Baseline, Transport::Tcp) => {
            let (rx, tx) = RawTcp::connect(main_addr()?)?;
            serve(rx, Some(tx), "")
        }
        (System::Shoal, _) => {
            let (_node, rx, tx) = super::shoal_link::open_peer(&args)?;
            serve(rx, tx, "")
        }
        (System::EcalCpp, _) => {
            anyhow::bail!("the eCAL C++ ping-pong is its own program (bench/ecal-cpp/), not a perf-peer")
        }
    }
}

fn say(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).context("writing to the parent (is it gone?)")
}

/// The peer's command loop over its receiver `rx` and optional answer sender `tx`.
/// `ready` is said after the word `ready` (the raw UDP peer's port).
pub(crate) fn serve<R: Receiver, S: Sender>(mut rx: R, mut tx: Option<S>, ready: &str) -> anyhow::Result<()> {
    say(&format!("ready {ready}"))?;
    let stdin = std::io::stdin();
    let mut buf: Vec<u8> = Vec::new();
    for line in stdin.lock().lines() {
        let line = line.context("reading commands from the parent")?;
        let Some(cmd) = PeerCommand::decode(&line)? else { return Ok(()) };
        let cpu0 = CpuTime::now();
        let drops0 = rx.drops();
        let mut report = PeerReport {
            received: 0,
            drops: 0,
            cpu: CpuTime::default(),
            peak_rss_kb: 0,
            last_ns: 0,
            latency: None,
            via: Default::default(),
        };
        match cmd {
            PeerCommand::Echo { n } => {
                let tx = tx.as_mut().context("echo needs an answer link (peer started with --sink-only)")?;
                for _ in 0..n {
                    rx.recv_copy(&mut buf, RECV_TIMEOUT)?;
                    tx.send_copy(&buf)?;
                }
                report.received = n;
            }
            PeerCommand::EchoHeader { n } => {
                let tx = tx.as_mut().context("echo needs an answer link (peer started with --sink-only)")?;
                for _ in 0..n {
                    let (h, len) = rx.recv_header(RECV_TIMEOUT)?;
                    tx.send_header(len, &h)?;
                }
                report.received = n;
            }
            PeerCommand::Handshake => {
                let tx = tx.as_mut().context("a handshake needs an answer link (peer started with --sink-only)")?;
                loop {
                    rx.recv_copy(&mut buf, RECV_TIMEOUT).context("handshake with the main process")?;
                    tx.send_copy(&buf)?;
                    report.received += 1;
                    if parse_header(&buf).map(|(seq, _)| seq) == Some(HANDSHAKE_END) {
                        break;
                    }
                }
            }
            PeerCommand::Sink { count } => {
                say("go")?;
                let mut hist = new_histogram();
                let mut timeout = RECV_TIMEOUT;
                loop {
                    match rx.recv_sink(&mut buf, timeout) {
                        Ok(()) => {}
                        Err(e) if is_timeout(&e) => break,
                        Err(e) => return Err(e),
                    }
                    let now = mono_ns();
                    report.received += 1;
                    report.last_ns = now;
                    timeout = SINK_IDLE;
                    let (seq, sent) = parse_header(&buf).context("message shorter than the perf header")?;
                    let _ = hist.record(now.saturating_sub(sent).max(1));
                    if seq + 1 >= count {
                        break;
                    }
                }
                report.latency = Latency::from_histogram(&hist);
            }
        }
        report.drops = rx.drops().saturating_sub(drops0);
        report.via = rx.take_vias();
        report.cpu = CpuTime::now().since(cpu0);
        report.peak_rss_kb = peak_rss_kb();
        say(&format!("done {}", report.to_json()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_reports_round_trip() {
        for c in [
            PeerCommand::Echo { n: 5 },
            PeerCommand::EchoHeader { n: 1 },
            PeerCommand::Sink { count: 99 },
            PeerCommand::Handshake,
        ] {
            assert_eq!(PeerCommand::decode(&c.encode()).unwrap(), Some(c));
        }
        assert_eq!(PeerCommand::decode("quit").unwrap(), None);
        assert!(PeerCommand::decode("echo x").is_err());
        assert!(PeerCommand::decode("dance 3").is_err());
        let r = PeerReport {
            received: 3,
            drops: 1,
            cpu: CpuTime { user_us: 5, sys_us: 6 },
            peak_rss_kb: 7,
            last_ns: 8,
            latency: None,
            via: [("udp".to_string(), 3)].into(),
        };
        assert_eq!(PeerReport::from_json(&r.to_json()), Some(r));
    }
}
