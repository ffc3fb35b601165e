//! The shoal side of the links: a `Publisher` as [`Sender`] and a `Subscriber` as [`Receiver`].
//! Topics are `<name>_ping` (main to peers) and `<name>_pong` (peer to main); `<name>` holds the
//! main process's pid, so concurrent runs do not collide.

use std::time::Duration;

use anyhow::{Context, bail};
use shoal::config::WaitStrategy;
use shoal::monitor::Via;
use shoal::{Node, Publisher, RecvError, SampleRef, Subscriber, TypeInfo};

use super::args::{Pages, PeerArgs, Transport, WaitMode};
use super::link::{HEADER_LEN, Receiver, Sender, TimedOut};

/// How long discovery (registration) may take before a run gives up.
pub(crate) const MATCH_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a reliable publisher waits for a subscriber (as long as the baseline's writer on a full ring).
const RELIABLE_TIMEOUT: Duration = Duration::from_secs(10);

/// `shoal perf --reliable` (set once at start, in the main process and in every peer).
static RELIABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every publisher and subscriber created from now on reliable.
pub(crate) fn set_reliable(on: bool) {
    RELIABLE.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether endpoints are reliable.
pub(crate) fn reliable() -> bool {
    RELIABLE.load(std::sync::atomic::Ordering::Relaxed)
}

/// `shoal perf --huge-pages-path` (set once at start, in the main process and in every peer).
static HUGE_PAGES_PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Puts the rings asked to be on huge pages on the hugetlbfs mount `dir` (once per process).
pub(crate) fn set_huge_pages_path(dir: Option<std::path::PathBuf>) {
    if let Some(dir) = dir {
        let _ = HUGE_PAGES_PATH.set(dir);
    }
}

/// The hugetlbfs mount `shoal perf --huge-pages-path` named.
pub(crate) fn huge_pages_path() -> Option<std::path::PathBuf> {
    HUGE_PAGES_PATH.get().cloned()
}

/// The type name the perf topics carry.
const TYPE_NAME: &str = "shoal.perf.Bytes";

/// A publisher used as a [`Sender`].
#[derive(Debug)]
pub(crate) struct ShoalTx(pub(crate) Publisher);

/// A subscriber used as a [`Receiver`] (copy or header-only through `recv_with`), counting the layer each message
/// came through.
#[derive(Debug)]
pub(crate) struct ShoalRx(pub(crate) Subscriber, [u64; VIAS.len()]);

/// Every layer a sample can come through, in the order of [`via_index`].
const VIAS: [Via; 5] = [Via::SameProcess, Via::ShoalRing, Via::EcalShm, Via::Udp, Via::Tcp];

fn via_index(v: Via) -> usize {
    match v {
        Via::SameProcess => 0,
        Via::ShoalRing => 1,
        Via::EcalShm => 2,
        Via::Udp => 3,
        Via::Tcp => 4,
    }
}

impl Sender for ShoalTx {
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.0.send(payload).context("shoal send")
    }

    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()> {
        let loan = self.0.loan(len).context("shoal loan")?;
        loan.write(|b| b[..HEADER_LEN].copy_from_slice(header)).send();
        Ok(())
    }
}

fn map_recv(e: RecvError, timeout: Duration) -> anyhow::Error {
    match e {
        RecvError::Timeout => anyhow::Error::new(TimedOut(timeout)),
        e => anyhow::Error::new(e).context("shoal receive"),
    }
}

impl ShoalRx {
    /// Receives the next message with `f` on its view, counting the layer it came through.
    fn recv_counted<R>(&mut self, timeout: Duration, mut f: impl FnMut(&SampleRef<'_>) -> R) -> anyhow::Result<R> {
        let (r, via) = self.0.recv_with(Some(timeout), |s| (f(&s), s.via())).map_err(|e| map_recv(e, timeout))?;
        self.1[via_index(via)] += 1;
        Ok(r)
    }
}

impl Receiver for ShoalRx {
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.recv_counted(timeout, |s| {
            buf.clear();
            s.payload().extend_vec(buf);
        })
    }

    fn recv_sink(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.recv_counted(timeout, |s| {
            buf.clear();
            let p = s.payload();
            match p.as_slice() {
                Some(bytes) => buf.extend_from_slice(&bytes[..bytes.len().min(HEADER_LEN)]),
                None => p.extend_vec(buf),
            }
        })
    }

    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)> {
        self.recv_counted(timeout, |s| {
            let p = s.payload();
            let mut h = [0u8; HEADER_LEN];
            p.read_at(0, &mut h);
            (h, p.len())
        })
    }

    fn drops(&self) -> u64 {
        self.0.drops()
    }

    fn take_vias(&mut self) -> std::collections::BTreeMap<String, u64> {
        let counts = std::mem::take(&mut self.1);
        VIAS.iter().zip(counts).filter(|(_, n)| *n > 0).map(|(v, n)| (v.name().to_string(), n)).collect()
    }
}

/// The `WaitStrategy` of a wait mode.
pub(crate) fn strategy(wait: WaitMode) -> WaitStrategy {
    match wait {
        WaitMode::Spin => WaitStrategy::BusySpin,
        WaitMode::Block => WaitStrategy::Block,
    }
}

/// Topic names of a session.
pub(crate) fn topics(name: &str) -> (String, String) {
    (format!("{name}_ping"), format!("{name}_pong"))
}

/// Creates a publisher.
pub(crate) fn publisher(node: &Node, topic: &str) -> anyhow::Result<ShoalTx> {
    let b = node.publisher(topic).type_info(TypeInfo::raw(TYPE_NAME));
    let b = if reliable() { b.reliable(RELIABLE_TIMEOUT) } else { b.best_effort() };
    let p = b.create().with_context(|| format!("creating the shoal publisher of {topic}"))?;
    Ok(ShoalTx(p))
}

/// Creates a subscriber with the wait strategy of `wait`.
pub(crate) fn subscriber(node: &Node, topic: &str, wait: WaitMode) -> anyhow::Result<ShoalRx> {
    let s = node
        .subscriber(topic)
        .wait(strategy(wait))
        .reliable(reliable())
        .create()
        .with_context(|| format!("creating the shoal subscriber of {topic}"))?;
    Ok(ShoalRx(s, [0; VIAS.len()]))
}

/// The configuration of the ini shoal finds (`$ECAL_INI`, ...), read once per process: the nodes and the rows that
/// say which settings they ran with see the same one.
pub(crate) fn config() -> anyhow::Result<shoal::Config> {
    static CONFIG: std::sync::OnceLock<shoal::Config> = std::sync::OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let c = shoal::Config::load().context("reading the ecal.ini shoal's configuration comes from")?;
    Ok(CONFIG.get_or_init(|| c).clone())
}

/// A node whose rings are on `pages` (else as configured), for `shoal perf --huge-pages`, with only the layer of
/// `transport` on (`shoal perf --transport`), in network mode on interface `network` when that is given.
pub(crate) fn node(
    name: &str,
    pages: Option<Pages>,
    transport: Transport,
    network: Option<std::net::Ipv4Addr>,
) -> anyhow::Result<Node> {
    match (pages, transport, network) {
        (None, Transport::Shm, None) => Node::init(name),
        _ => {
            let c = config()?;
            let c = pages.map_or(c.clone(), |p| p.apply(c));
            Node::init_with_config(name, transport.apply(c, network))
        }
    }
    .context("starting the shoal node (check the ecal.ini it names)")
}

/// Waits until `tx` sees `n` subscribers.
pub(crate) fn wait_subscribers(tx: &ShoalTx, n: usize) -> anyhow::Result<()> {
    if tx.0.wait_for_subscribers(n, MATCH_TIMEOUT).is_err() {
        bail!(
            "{} of {n} subscriber(s) of {} matched within {MATCH_TIMEOUT:?}: check that shoal registration \
             (UDP port 14000 on loopback) works and that the peer processes started",
            tx.0.subscriber_count(),
            tx.0.topic()
        );
    }
    Ok(())
}

/// Waits until `rx` sees a publisher.
pub(crate) fn wait_publisher(rx: &ShoalRx) -> anyhow::Result<()> {
    if rx.0.wait_for_publishers(1, MATCH_TIMEOUT).is_err() {
        bail!(
            "no publisher of {} matched within {MATCH_TIMEOUT:?}: check that shoal registration \
             (UDP port 14000 on loopback) works",
            rx.0.topic()
        );
    }
    Ok(())
}

/// The peer's endpoints: a subscriber of `<name>_ping` and (unless sink-only) a publisher of
/// `<name>_pong`, both matched before it returns.
/// The node is returned so that it lives as long as the endpoints.
pub(crate) fn open_peer(args: &PeerArgs) -> anyhow::Result<(Node, ShoalRx, Option<ShoalTx>)> {
    let node = node(&format!("shoal-perf-peer-{}", args.index), args.pages, args.transport, args.local_addr)?;
    let (ping, pong) = topics(&args.name);
    let rx = subscriber(&node, &ping, args.wait)?;
    let tx = if args.sink_only { None } else { Some(publisher(&node, &pong)?) };
    wait_publisher(&rx)?;
    if let Some(tx) = &tx {
        wait_subscribers(tx, 1)?;
    }
    Ok((node, rx, tx))
}
