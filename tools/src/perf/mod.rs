//! `shoal perf`: two-process latency and throughput of shoal's shared-memory path, zero-copy
//! latency, 1->N fan-out cost, and per-process memory, optionally as ratios to plain rings (`--baseline`: the
//! strongest of the line, warm and deep rings for each figure, the deep ring and iceoryx2 as second references) measured
//! in the same invocation, size by size (each size's references, then shoal).
//!
//! Modules: `args` (CLI), `peer` (the spawned echo/sink process and its stdin/stdout control),
//! `link` (the transport interface the loops use), `pingpong`, `throughput`, `fanout`, `rss`,
//! `pace` (fixed-rate sending), `baseline_link` (the plain rings of the `shoal-baseline` crate as
//! links), `iceoryx2` (runs the iceoryx2 ping-pong program of `bench/iceoryx2/` and reports its rows),
//! `shoal_link` (shoal as a link), `report` (table / JSON), `sys` (OS), `service` (`--service`: call
//! round trips and calls/s, with `--against ecal` beside eCAL's C++ client and server), and `ecal_cpp` (finds
//! `bench/ecal-cpp/`'s programs; runs its publish/subscribe ping-pong for `--pingpong --against ecal`). The project's
//! acceptance targets are evaluated from the `--json` output by `shoal-bench` (`bench/`).

mod args;
mod baseline_link;
mod ecal_cpp;
mod fanout;
mod iceoryx2;
mod link;
mod net_link;
mod pace;
mod peer;
mod pingpong;
mod report;
mod rss;
mod service;
mod shoal_link;
mod sys;
mod throughput;

use anyhow::Context;
use shoal::Node;

pub(crate) use args::{PeerArgs, PerfArgs};
pub(crate) use link::HEADER_LEN;
pub(crate) use peer::run_peer;
pub(crate) use sys::peak_rss_kb;

use args::{Against, Mode, Pages, System, Transport, WaitMode};
use baseline_link::{BaselineLink, RingKind};
use link::{Receiver, Sender};
use peer::{Peer, PeerSpec};
use report::Reporter;
use throughput::Pacing;

/// What one measurement session runs with.
#[derive(Debug)]
pub(crate) struct Run<'a> {
    pub(crate) args: &'a PerfArgs,
    pub(crate) system: System,
    pub(crate) wait: WaitMode,
    /// The layer measured (`--transport`).
    pub(crate) transport: Transport,
    /// CPUs available before this process pinned itself.
    pub(crate) cpus: usize,
    /// The `transport` label of the rows, when not the transport's own (the plain ring a baseline session measures).
    pub(crate) label: Option<&'static str>,
}

impl Run<'_> {
    /// The CPU for peer `i` with `--pin` (this process is on CPU 0).
    pub(crate) fn peer_cpu(&self, i: usize) -> Option<usize> {
        self.args.pin.then(|| (i + 1) % self.cpus.max(1))
    }

    /// The `transport` label of this session's rows.
    pub(crate) fn label(&self) -> &'static str {
        self.label.unwrap_or_else(|| self.transport.label(self.system))
    }
}

/// Entry point of `shoal perf`.
pub(crate) fn run(args: PerfArgs) -> anyhow::Result<()> {
    args.validate()?;
    if args.service {
        return service::run(&args);
    }
    if args.transport == Transport::Shm {
        sys::fix_malloc_mmap_threshold();
    }
    shoal_link::set_reliable(args.reliable);
    shoal_link::set_huge_pages_path(args.huge_pages_path.clone());
    let cpus = sys::cpu_count();
    if args.pin {
        sys::pin_to_cpu(0)?;
    }
    if let (true, Some(topics)) = (args.rss, args.topics) {
        return rss::run(&args, topics);
    }
    let pid = std::process::id();
    let mut session = 0u32;
    let mut next_name = move || {
        session += 1;
        format!("shoal_perf_{pid}_{session}")
    };
    let mut rep = Reporter::new(args.json);
    rep.note(&format!(
        "shoal perf: {} CPUs, pinning {}; latency = one-way (RTT/2); cpu = user/sys ms during the run; rss = peak (VmHWM)",
        cpus,
        if args.pin { "on" } else { "off" }
    ));
    // iceoryx2 beside the plain rings, where scripts/iceoryx2 built it.
    let iceoryx2 = if (args.baseline || args.baseline_only) && args.transport == Transport::Shm {
        iceoryx2::locate(&args, &mut rep)?
    } else {
        None
    };
    // eCAL 6.1.1's C++ ping-pong after shoal's block-mode ping-pong (`--pingpong --against ecal`).
    let ecal = match args.against {
        Some(Against::Ecal) if args.modes().contains(&Mode::PingPong) => {
            rep.hold_for_ecal();
            Some(ecal_cpp::dir(&args, &[ecal_cpp::PINGPONG])?)
        }
        _ => None,
    };
    // shoal's node on the default pages and, with --huge-pages, the one on huge pages (`shoal_sessions`).
    let mut node: Option<Node> = None;
    let mut huge_node: Option<Node> = None;
    let modes: Vec<Mode> = args.modes().into_iter().filter(|m| *m != Mode::Fanout).collect();
    for wait in args.waits() {
        if !modes.is_empty() {
            let refs =
                Run { args: &args, system: System::Baseline, wait, transport: args.transport, cpus, label: None };
            let run = Run { system: System::Shoal, ..refs };
            if (args.baseline || args.baseline_only) && args.transport == Transport::Shm {
                // Size by size: the strongest plain rings (line and warm; for latency the deep one counts too), the
                // deep ring, as deep as shoal's ring is for that size, iceoryx2 where it is built, then shoal. A
                // size's references and shoal lie seconds apart, not the minutes a run of every size takes, in which
                // this VM may change regime (a 1 MiB copy 5-10x slower for every system for a while, a cache line's
                // transfer 50, 95 or 340 ns as the host moves the vCPUs), which a ratio would then measure.
                let cfg = shoal::Config::load().context("reading the ecal.ini shoal's ring geometry comes from")?;
                // Per size, the host's speed right before the references and right after shoal's ping-pong
                // (`Reporter::host_check`): a size whose two checks differ measured a change of the host too. A
                // size's check after is the next size's check before (nothing runs between them).
                let check = !args.baseline_only && modes.contains(&Mode::PingPong);
                let mut last_check = None;
                for &size in &args.sizes() {
                    let before = match last_check.take() {
                        Some(ns) => Some(ns),
                        None if check => Some(host_check(&run, &next_name())?),
                        None => None,
                    };
                    for kind in [RingKind::Line, RingKind::Warm, RingKind::Deep] {
                        let refs = Run { label: Some(kind.label()), ..refs };
                        baseline_session(&refs, kind, &cfg, &modes, size, &next_name(), &mut rep)?;
                    }
                    if let Some(dir) = &iceoryx2 {
                        iceoryx2::run(&refs, dir, &modes, &[size], &mut rep)?;
                    }
                    if !args.baseline_only {
                        shoal_sessions(&run, (&mut node, &mut huge_node), &modes, &[size], &mut next_name, &mut rep)?;
                    }
                    if let Some(before) = before {
                        let after = host_check(&run, &next_name())?;
                        rep.host_check(wait, size, before, after);
                        last_check = Some(after);
                    }
                }
            } else {
                if args.baseline || args.baseline_only {
                    raw_session(&refs, &modes, &mut rep)?;
                }
                if !args.baseline_only {
                    shoal_sessions(&run, (&mut node, &mut huge_node), &modes, &args.sizes(), &mut next_name, &mut rep)?;
                }
            }
            if let (Some(dir), WaitMode::Block, true) = (&ecal, wait, modes.contains(&Mode::PingPong)) {
                let run =
                    Run { args: &args, system: System::EcalCpp, wait, transport: Transport::Shm, cpus, label: None };
                ecal_cpp::pingpong(&run, dir, &mut rep)?;
            }
        }
        if let Some(n) = args.subscribers {
            let run = Run { args: &args, system: System::Shoal, wait, transport: args.transport, cpus, label: None };
            fanout::run(&run, node_of(&mut node, default_pages(&args), &args)?, n, &mut next_name, &mut rep)?;
        }
    }
    rep.summary();
    Ok(())
}

fn node_of<'a>(node: &'a mut Option<Node>, pages: Option<Pages>, args: &PerfArgs) -> anyhow::Result<&'a Node> {
    if node.is_none() {
        *node = Some(shoal_link::node("shoal-perf", pages, args.transport, network_iface(args))?);
    }
    node.as_ref().context("shoal node")
}

/// The slot count of shoal's ring once it carries `size`-byte messages (the baseline ring gets as many).
fn shoal_slot_count(cfg: &shoal::Config, size: usize) -> u64 {
    shoal::ring_geometry(cfg, size).map_or(1, |(n, _)| u64::from(n))
}

fn baseline_session(
    run: &Run,
    kind: RingKind,
    cfg: &shoal::Config,
    modes: &[Mode],
    size: usize,
    name: &str,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let prefix = format!("/dev/shm/{name}");
    let slots = kind.slot_count(size, shoal_slot_count(cfg, size));
    let (mut tx, mut rx, mut peer) = baseline_pair(run, kind, &prefix, slots, size.max(HEADER_LEN))?;
    let what = match kind {
        RingKind::Line => "line ring (tag and payload in one slot; a reference)",
        RingKind::Warm => "warm ring (the buffer released last is written next; a reference)",
        RingKind::Deep => "deep SPSC ring (as many slots as shoal's ring has for this size; the second reference)",
    };
    rep.note(&format!(
        "-- baseline {}: {what} {}_{{ping,pong}}, {} slots of {} B, wait={}",
        kind.label(),
        prefix,
        tx.slot_count(),
        tx.slot_size(),
        run.wait
    ));
    run_modes(run, &mut tx, &mut rx, &mut peer, modes, &[size], rep)?;
    peer.quit()
}

/// A plain ring of `kind` each way at `prefix` (`slots` slots of `slot` bytes, waiting as `run` does) and the peer
/// that echoes through them, ready.
fn baseline_pair(
    run: &Run,
    kind: RingKind,
    prefix: &str,
    slots: u64,
    slot: usize,
) -> anyhow::Result<(BaselineLink, BaselineLink, Peer)> {
    let (ping, pong) = baseline_link::ring_paths(prefix);
    let tx = BaselineLink::create(kind, &ping, slots, slot, run.wait)?;
    let rx = BaselineLink::create(kind, &pong, slots, slot, run.wait)?;
    let spec = PeerSpec {
        system: System::Baseline,
        wait: run.wait,
        name: prefix,
        index: 0,
        sink_only: false,
        cpu: run.peer_cpu(0),
        pages: None,
        transport: Transport::Shm,
        netns: None,
    };
    let mut peer = Peer::spawn(&spec)?;
    peer.wait_ready()?;
    Ok((tx, rx, peer))
}

/// The line ring's 64 B spin ping-pong p50 in a short run (10,000 round trips): how fast this host moves a cache
/// line between the two processes' CPUs now. On a VM that figure changes from one minute to the next (95 ns, then
/// 340 ns, as the host moves the vCPUs), and a ratio of shoal to references measured before such a change measures
/// the change.
fn host_check(run: &Run, name: &str) -> anyhow::Result<u64> {
    let run = Run { system: System::Baseline, wait: WaitMode::Spin, label: Some(RingKind::Line.label()), ..*run };
    let prefix = format!("/dev/shm/{name}");
    let slots = RingKind::Line.slot_count(64, 1);
    let (mut tx, mut rx, mut peer) = baseline_pair(&run, RingKind::Line, &prefix, slots, HEADER_LEN.max(64))?;
    let m = pingpong::measure(&run, &mut tx, &mut rx, &mut peer, 64, false).context("the host check's ping-pong")?;
    peer.quit()?;
    m.latency.map(|l| l.p50).context("the host check measured no latency")
}

/// The pages of shoal's default node: as configured, or with --huge-pages normal ones (the huge-page node is the
/// other).
fn default_pages(args: &PerfArgs) -> Option<Pages> {
    args.huge_pages.then_some(Pages::Normal)
}

/// shoal's sessions for `sizes`: on the default pages and, with `--huge-pages`, on normal and then on huge pages
/// (`nodes`: the node of each, made when first needed).
fn shoal_sessions(
    run: &Run,
    nodes: (&mut Option<Node>, &mut Option<Node>),
    modes: &[Mode],
    sizes: &[usize],
    next_name: &mut impl FnMut() -> String,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let args = run.args;
    let pages = default_pages(args);
    let node = node_of(nodes.0, pages, args)?;
    shoal_session(run, node, pages, modes, sizes, &next_name(), rep)?;
    if args.huge_pages {
        let node = node_of(nodes.1, Some(Pages::Huge), args)?;
        shoal_session(run, node, Some(Pages::Huge), modes, sizes, &next_name(), rep)?;
    }
    Ok(())
}

fn shoal_session(
    run: &Run,
    node: &Node,
    pages: Option<Pages>,
    modes: &[Mode],
    sizes: &[usize],
    name: &str,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let (ping, pong) = shoal_link::topics(name);
    let mut tx = shoal_link::publisher(node, &ping)?;
    let mut rx = shoal_link::subscriber(node, &pong, run.wait)?;
    let spec = PeerSpec {
        system: System::Shoal,
        wait: run.wait,
        name,
        index: 0,
        sink_only: false,
        cpu: run.peer_cpu(0),
        pages,
        transport: run.transport,
        netns: peer_netns(run.args),
    };
    let mut peer = Peer::spawn(&spec)?;
    peer.wait_ready()?;
    shoal_link::wait_subscribers(&tx, 1)?;
    shoal_link::wait_publisher(&rx)?;
    if run.transport != Transport::Shm {
        handshake(&mut tx, &mut rx, &mut peer)?;
    }
    rep.note(&format!(
        "-- shoal: topics {ping} / {pong}, layer {}{}, wait={}{}{}",
        run.transport.as_str(),
        match run.args.peer_netns.as_deref() {
            Some(ns) => format!(" (network mode, peer in netns {ns})"),
            None => String::new(),
        },
        run.wait,
        if shoal_link::reliable() { ", reliable (the publisher waits up to 10 s for the subscriber)" } else { "" },
        match pages {
            Some(Pages::Huge) =>
                format!(", rings on huge pages ({})", node.config().shm_ring.huge_pages_path.display()),
            Some(Pages::Normal) => ", rings on normal pages".to_string(),
            None => String::new(),
        }
    ));
    rep.set_pages((run.transport == Transport::Shm).then(|| (pages, peer.pid())));
    let result = run_modes(run, &mut tx, &mut rx, &mut peer, modes, sizes, rep);
    rep.set_pages(None);
    result?;
    peer.quit()
}

/// The multicast interface of shoal's network mode when the peer is in another namespace.
fn network_iface(args: &PerfArgs) -> Option<std::net::Ipv4Addr> {
    args.peer_netns.as_ref().and(args.local_addr)
}

/// The peer's namespace and its address there.
fn peer_netns(args: &PerfArgs) -> Option<(&str, std::net::Ipv4Addr)> {
    Some((args.peer_netns.as_deref()?, args.peer_addr?))
}

/// The raw socket program of `--transport udp|tcp` for every size, one peer for all of them.
fn raw_session(run: &Run, modes: &[Mode], rep: &mut Reporter) -> anyhow::Result<()> {
    use std::net::{Ipv4Addr, SocketAddrV4};
    let netns = peer_netns(run.args);
    // Where each side sends to reach the other.
    let (to_main, to_peer) = match (netns, run.args.local_addr) {
        (Some((_, peer)), Some(local)) => (local, peer),
        _ => (net_link::LOOPBACK_BROADCAST, net_link::LOOPBACK_BROADCAST),
    };
    let mut spec = PeerSpec {
        system: System::Baseline,
        wait: run.wait,
        name: "",
        index: 0,
        sink_only: false,
        cpu: run.peer_cpu(0),
        pages: None,
        transport: run.transport,
        netns,
    };
    match run.transport {
        Transport::Udp => {
            let mut rx = net_link::RawUdpRx::new(run.wait)?;
            let name = SocketAddrV4::new(to_main, rx.port()?).to_string();
            spec.name = &name;
            let mut peer = Peer::spawn(&spec)?;
            let port: u16 = peer.wait_ready()?.parse().context("the raw UDP peer did not say its port")?;
            let mut tx = net_link::RawUdpTx::new(SocketAddrV4::new(to_peer, port))?;
            rep.note(&format!(
                "-- baseline: raw UDP, {name} <-> {to_peer}:{port}, datagrams of at most {} B (12-byte header),                  sendmmsg/recvmmsg up to {} at a time, wait={}",
                shoal_baseline::net::MAX_DATAGRAM,
                shoal_baseline::net::BATCH,
                run.wait
            ));
            run_modes(run, &mut tx, &mut rx, &mut peer, modes, &run.args.sizes(), rep)?;
            peer.quit()
        }
        Transport::Tcp => {
            let bind = if netns.is_some() { to_main } else { Ipv4Addr::LOCALHOST };
            let (port, listener) = net_link::RawTcp::listen(SocketAddrV4::new(bind, 0))?;
            let name = SocketAddrV4::new(bind, port).to_string();
            spec.name = &name;
            let mut peer = Peer::spawn(&spec)?;
            let (mut tx, mut rx) = net_link::RawTcp::accept(&listener)?;
            peer.wait_ready()?;
            rep.note(&format!(
                "-- baseline: raw TCP, length-prefixed stream, TCP_NODELAY, one connection via {name}, wait={}",
                run.wait
            ));
            run_modes(run, &mut tx, &mut rx, &mut peer, modes, &run.args.sizes(), rep)?;
            peer.quit()
        }
        Transport::Shm => anyhow::bail!("the shared-memory baseline is baseline_session's"),
    }
}

/// Probes until the peer echoes, then ends the peer's handshake: both directions are connected (a TCP subscriber
/// connects only after the match, once the publisher's port is in its registration).
fn handshake<S: Sender, R: Receiver>(tx: &mut S, rx: &mut R, peer: &mut Peer) -> anyhow::Result<()> {
    use std::time::{Duration, Instant};
    peer.command(peer::PeerCommand::Handshake)?;
    let deadline = Instant::now() + shoal_link::MATCH_TIMEOUT;
    let mut buf = Vec::new();
    for seq in 0.. {
        tx.send_copy(&link::header(seq, sys::mono_ns()))?;
        match rx.recv_copy(&mut buf, Duration::from_millis(50)) {
            Ok(()) => break,
            Err(e) if link::is_timeout(&e) && Instant::now() < deadline => {}
            Err(e) => {
                return Err(e.context(format!(
                    "no echo from the peer within {:?} of the match: the layer does not connect",
                    shoal_link::MATCH_TIMEOUT
                )));
            }
        }
    }
    tx.send_copy(&link::header(peer::HANDSHAKE_END, sys::mono_ns()))?;
    while link::parse_header(&buf).map(|(seq, _)| seq) != Some(peer::HANDSHAKE_END) {
        rx.recv_copy(&mut buf, peer::RECV_TIMEOUT).context("the end of the handshake")?;
    }
    peer.report().map(drop)
}

/// For shoal rows: every message must have come through the layer asked for, as the receivers saw it.
fn check_via(run: &Run, m: &report::Measurement) -> anyhow::Result<()> {
    if run.system != System::Shoal {
        return Ok(());
    }
    let want = run.transport.via();
    if m.via.keys().any(|k| k != want) {
        anyhow::bail!(
            "shoal was to use only the {} layer, but the receivers counted these layers: {:?}; check the ini \
             ($ECAL_INI) does not switch that layer off",
            run.transport.as_str(),
            m.via
        );
    }
    Ok(())
}

fn run_modes<S: Sender, R: Receiver>(
    run: &Run,
    tx: &mut S,
    rx: &mut R,
    peer: &mut Peer,
    modes: &[Mode],
    sizes: &[usize],
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    for &mode in modes {
        for &size in sizes {
            let context = || format!("{} {} {} with {size} B", run.system.as_str(), mode.as_str(), run.wait);
            match mode {
                Mode::PingPong | Mode::ZeroCopy => {
                    let m = pingpong::measure(run, tx, rx, peer, size, mode == Mode::ZeroCopy).with_context(context)?;
                    check_via(run, &m).with_context(context)?;
                    rep.report(m);
                }
                Mode::Throughput => {
                    let unpaced =
                        throughput::measure(run, tx, rx, peer, size, Pacing::Unpaced).with_context(context)?;
                    check_via(run, &unpaced).with_context(context)?;
                    let summary_of = unpaced.clone();
                    // The baseline's own unpaced run, just reported, sets its paced rate too; shoal's is paced at half
                    // the strongest plain ring's rate.
                    rep.report(unpaced);
                    let base = match run.system {
                        System::Baseline | System::EcalCpp => rep.baseline(Mode::Throughput, run.wait, size),
                        System::Shoal => rep.reference(Mode::Throughput, run.wait, size),
                    }
                    .map(|b| b.msgs_per_s);
                    let rate = throughput::paced_rate(run.args, size, base);
                    let mut paced =
                        throughput::measure(run, tx, rx, peer, size, Pacing::Rate(rate)).with_context(context)?;
                    check_via(run, &paced).with_context(context)?;
                    paced.note = Some(throughput::summary(&summary_of, &paced));
                    rep.report(paced);
                }
                Mode::ThroughputPaced | Mode::Fanout => {}
            }
        }
    }
    Ok(())
}
