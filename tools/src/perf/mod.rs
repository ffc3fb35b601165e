//! `shoal perf`: two-process latency and throughput of shoal's shared-memory path, zero-copy
//! latency, 1->N fan-out cost, and per-process memory, optionally as ratios to a plain SPSC ring
//! (`--baseline`) measured in the same invocation.
//!
//! Modules: `args` (CLI), `peer` (the spawned echo/sink process and its stdin/stdout control),
//! `link` (the transport interface the loops use), `pingpong`, `throughput`, `fanout`, `rss`,
//! `pace` (fixed-rate sending), `baseline_link` (the raw ring of the `shoal-baseline` crate as a
//! link), `shoal_link` (shoal as a link), `report` (table / JSON), `sys` (OS). The project's
//! acceptance targets are evaluated from the `--json` output by `shoal-bench` (`bench/`).

mod args;
mod baseline_link;
mod fanout;
mod link;
mod pace;
mod peer;
mod pingpong;
mod report;
mod rss;
mod shoal_link;
mod sys;
mod throughput;

use anyhow::Context;
use shoal::Node;

pub(crate) use args::{PeerArgs, PerfArgs};
pub(crate) use link::HEADER_LEN;
pub(crate) use peer::run_peer;

use args::{Mode, Pages, System, WaitMode};
use baseline_link::BaselineLink;
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
    /// CPUs available before this process pinned itself.
    pub(crate) cpus: usize,
}

impl Run<'_> {
    /// The CPU for peer `i` with `--pin` (this process is on CPU 0).
    pub(crate) fn peer_cpu(&self, i: usize) -> Option<usize> {
        self.args.pin.then(|| (i + 1) % self.cpus.max(1))
    }
}

/// Entry point of `shoal perf`.
pub(crate) fn run(args: PerfArgs) -> anyhow::Result<()> {
    args.validate()?;
    shoal_link::set_reliable(args.reliable);
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
    let mut node: Option<Node> = None;
    let mut huge_node: Option<Node> = None;
    // --huge-pages: shoal on normal pages, then on huge pages; the default node is the normal-page one.
    let default_pages = args.huge_pages.then_some(Pages::Normal);
    let modes: Vec<Mode> = args.modes().into_iter().filter(|m| *m != Mode::Fanout).collect();
    for wait in args.waits() {
        if !modes.is_empty() {
            if args.baseline || args.baseline_only {
                let run = Run { args: &args, system: System::Baseline, wait, cpus };
                // One ring per size, as deep as shoal's ring is for that size.
                let cfg = shoal::Config::load().context("reading the ecal.ini shoal's ring geometry comes from")?;
                for &size in &args.sizes {
                    baseline_session(&run, &cfg, &modes, size, &next_name(), &mut rep)?;
                }
            }
            if !args.baseline_only {
                let run = Run { args: &args, system: System::Shoal, wait, cpus };
                let node = node_of(&mut node, default_pages)?;
                shoal_session(&run, node, default_pages, &modes, &next_name(), &mut rep)?;
                if args.huge_pages {
                    let node = node_of(&mut huge_node, Some(Pages::Huge))?;
                    shoal_session(&run, node, Some(Pages::Huge), &modes, &next_name(), &mut rep)?;
                }
            }
        }
        if let Some(n) = args.subscribers {
            let run = Run { args: &args, system: System::Shoal, wait, cpus };
            fanout::run(&run, node_of(&mut node, default_pages)?, n, &mut next_name, &mut rep)?;
        }
    }
    Ok(())
}

fn node_of(node: &mut Option<Node>, pages: Option<Pages>) -> anyhow::Result<&Node> {
    if node.is_none() {
        *node = Some(shoal_link::node("shoal-perf", pages)?);
    }
    node.as_ref().context("shoal node")
}

/// The slot count of shoal's ring once it carries `size`-byte messages (the baseline ring gets as many).
fn shoal_slot_count(cfg: &shoal::Config, size: usize) -> u64 {
    shoal::ring_geometry(cfg, size).map_or(1, |(n, _)| u64::from(n))
}

fn baseline_session(
    run: &Run,
    cfg: &shoal::Config,
    modes: &[Mode],
    size: usize,
    name: &str,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let prefix = format!("/dev/shm/{name}");
    let (ping, pong) = baseline_link::ring_paths(&prefix);
    let slot = size.max(HEADER_LEN);
    let slots = shoal_slot_count(cfg, size);
    let mut tx = BaselineLink::create(&ping, slots, slot, run.wait)?;
    let mut rx = BaselineLink::create(&pong, slots, slot, run.wait)?;
    let spec = PeerSpec {
        system: System::Baseline,
        wait: run.wait,
        name: &prefix,
        index: 0,
        sink_only: false,
        cpu: run.peer_cpu(0),
        pages: None,
    };
    let mut peer = Peer::spawn(&spec)?;
    peer.wait_ready()?;
    rep.note(&format!(
        "-- baseline: SPSC ring {}_{{ping,pong}}, {} slots (as many as shoal's ring has for {size} B) of {} B, wait={}",
        prefix,
        tx.0.slot_count(),
        tx.0.slot_size(),
        run.wait
    ));
    run_modes(run, &mut tx, &mut rx, &mut peer, modes, &[size], rep)?;
    peer.quit()
}

fn shoal_session(
    run: &Run,
    node: &Node,
    pages: Option<Pages>,
    modes: &[Mode],
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
    };
    let mut peer = Peer::spawn(&spec)?;
    peer.wait_ready()?;
    shoal_link::wait_subscribers(&tx, 1)?;
    shoal_link::wait_publisher(&rx)?;
    rep.note(&format!(
        "-- shoal: topics {ping} / {pong}, wait={}{}{}",
        run.wait,
        if shoal_link::reliable() { ", reliable (the publisher waits up to 10 s for the subscriber)" } else { "" },
        match pages {
            Some(Pages::Huge) =>
                format!(", rings on huge pages ({})", node.config().shm_ring.huge_pages_path.display()),
            Some(Pages::Normal) => ", rings on normal pages".to_string(),
            None => String::new(),
        }
    ));
    rep.set_pages(pages.map(|p| (p, peer.pid())));
    let result = run_modes(run, &mut tx, &mut rx, &mut peer, modes, &run.args.sizes, rep);
    rep.set_pages(None);
    result?;
    peer.quit()
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
                    rep.report(m);
                }
                Mode::Throughput => {
                    let unpaced =
                        throughput::measure(run, tx, rx, peer, size, Pacing::Unpaced).with_context(context)?;
                    let summary_of = unpaced.clone();
                    // The baseline's own unpaced run, just reported, sets its paced rate too.
                    rep.report(unpaced);
                    let base = rep.baseline(Mode::Throughput, run.wait, size).map(|b| b.msgs_per_s);
                    let rate = throughput::paced_rate(run.args, size, base);
                    let mut paced =
                        throughput::measure(run, tx, rx, peer, size, Pacing::Rate(rate)).with_context(context)?;
                    paced.note = Some(throughput::summary(&summary_of, &paced));
                    rep.report(paced);
                }
                Mode::ThroughputPaced | Mode::Fanout => {}
            }
        }
    }
    Ok(())
}
