//! Command-line arguments of `shoal perf` and of the hidden `perf-peer` subcommand.

use std::fmt;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};

/// `shoal perf`: latency, throughput, fan-out and memory measurements.
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Modes: without --pingpong/--throughput/--zero-copy/--subscribers, ping-pong and throughput run.
Latency is one-way = round-trip / 2 between two processes (this one and a spawned echo peer).
--baseline adds the same measurements over plain two-process rings in /dev/shm (no middleware):
the line ring (tag and payload in one slot; 1024 slots up to 4 KiB, else 4), the warm ring (4
buffers, the one released last written next) and the deep SPSC ring (as many slots as shoal's),
plus iceoryx2's ping-pong (copy into a loan, copy out) where scripts/iceoryx2 built it. Every
shoal figure is printed as a ratio to the strongest plain ring of the same run (latency: the
fastest of line, warm and deep; throughput: the faster of line and warm; JSON: ratio_vs names it), and to the deep ring and iceoryx2
(deep_*_ratio, iceoryx2_*_ratio); latency: shoal/reference, lower is better; throughput:
shoal/reference, higher is better. A closing table sums up ping-pong per size.
Throughput runs twice per size: unpaced (as fast as the sender can; shoal's ring is lossy, so
an overrun reader loses messages) and paced at --rate (default: half the baseline's unpaced
msg/s of that size and wait mode), where nothing may be lost. msg/s is what the reader received
over the run; when shoal's or the baseline's run lost messages, its ratio compares receive rates,
not lossless rates, and says so (table: after the ratio; JSON: msgs_per_s_ratio_lossy).
Fan-out's cost per send is the publishing thread's CPU time inside send() (preemption
excluded), one publisher in phases of 1, N, N, 1, ... subscriber processes at one pace; the N vs 1
ratio is the median of the ratios of each N phase's mean to each 1 phase's mean of the same four-phase
block (a block's phases follow each other, so a change of the host's speed falls on both counts alike; a
mean, because a blocking send costs ~0.3 µs or, when it wakes a sleeping thread, several µs, and a median
says only which is the more frequent), with the median of 8 phases' means per count, the median and mean
over all sends and the wall time alongside.
The publishing thread keeps CPU 0 and the subscribers share the others (in both wait modes: subscribers woken
on the publisher's core would evict its cache between sends, a cost of sharing the core, not of send()).
On a 2-core machine leave --pin off: the runtime threads of each process then share both cores.
--service measures services instead: the round trip of a call (request and response of the same
size, default 64 B and 1 MB) from a shoal client in this process to a shoal server in a spawned
one, and calls/s with 1 and with --clients concurrent clients (threads, a client each). --against
ecal adds, in the same run, an eCAL 6.1.1 C++ client/server pair (built by scripts/ecal-cpp) and
the mixed pairs (shoal client -> eCAL server, eCAL client -> shoal server), with each figure as a
ratio to the eCAL pair; the pairs take turns in 10 rounds. --iterations is then the number of
timed calls per size and client count, shared by the clients. Every call must be answered, in time and intact: a failed or timed-out
call is reported and makes the exit code non-zero.
--pingpong --against ecal runs, after shoal's block-mode ping-pong and for the same sizes, eCAL
6.1.1's C++ publish/subscribe ping-pong over eCAL's shared-memory layer with its default settings
(built by scripts/ecal-cpp; copy in by Send of a buffer, copy out in the receive callback, which
wakes the measuring thread: eCAL's block mode), as ecal-cpp/shm rows, each followed by shoal's
block-mode p50 over eCAL's (JSON: ecal_p50_ratio, ecal_p99_ratio, ecal_msgs_per_s_ratio on shoal's
block-mode ping-pong rows, which are printed once eCAL's rows are in).")]
#[command(group(clap::ArgGroup::new("against_what").args(["service", "pingpong"]).multiple(true)))]
pub(crate) struct PerfArgs {
    /// Payload sizes (k/m suffixes are 1024 multiples), e.g. 64,1k,64k,1m,4m [default: 64,1k,64k,1m,4m; with
    /// --service 64,1m].
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Round trips per size (default: 10000 for small sizes, fewer for big ones so a run stays short).
    #[arg(long)]
    pub(crate) iterations: Option<u64>,
    /// Messages per size in throughput and fan-out modes (default: scaled by size, 1 GiB a size, 4 GiB with
    /// --transport udp|tcp).
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Receive wait strategy: spin (busy spin) or block (futex doorbell). Default: both.
    #[arg(long, value_enum)]
    pub(crate) wait: Option<WaitMode>,
    /// Run ping-pong latency (copying send and receive).
    #[arg(long)]
    pub(crate) pingpong: bool,
    /// Run streaming throughput (the publisher sends as fast as it can).
    #[arg(long)]
    pub(crate) throughput: bool,
    /// Run zero-copy ping-pong: loaned slots, only a 16-byte header is written and read.
    #[arg(long)]
    pub(crate) zero_copy: bool,
    /// Run 1->N fan-out with N subscriber processes (compared with N=1): cost of send().
    /// `--subscribers` alone means 4.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "4")]
    pub(crate) subscribers: Option<usize>,
    /// Paced throughput rate in messages per second (default: half the baseline's unpaced rate
    /// for the same size and wait mode, or min(100k msg/s, 1 GB/s) without a baseline).
    #[arg(long, value_name = "MSG_PER_S")]
    pub(crate) rate: Option<f64>,
    /// Also measure a plain two-process SPSC ring in /dev/shm (no middleware) and print ratios.
    #[arg(long)]
    pub(crate) baseline: bool,
    /// Measure only the baseline ring (no shoal node is created).
    #[arg(long, conflicts_with = "baseline")]
    pub(crate) baseline_only: bool,
    /// Pin this process to CPU 0 and peer k to CPU k (modulo the CPU count; fan-out subscribers
    /// only on CPUs 1..). Off by default: on a 2-core machine pinning leaves no core for the
    /// runtime threads. (Fan-out always keeps CPU 0 for the publishing thread.)
    #[arg(long)]
    pub(crate) pin: bool,
    /// One JSON object per line and measurement instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Memory mode: create this many publishers and subscribers in one process (use with --rss).
    #[arg(long, value_name = "N", requires = "rss")]
    pub(crate) topics: Option<usize>,
    /// Memory mode: print RSS without shared-memory mappings and the thread count (use with --topics).
    #[arg(long, requires = "topics")]
    pub(crate) rss: bool,
    /// shoal's publishers and subscribers are reliable: the publisher waits (up to 10 s) instead of overwriting
    /// what the subscriber has not read, so unpaced streams lose nothing (the baseline ring always waits).
    #[arg(long)]
    pub(crate) reliable: bool,
    /// Run shoal twice per wait mode in the same invocation: its rings on normal (4 KiB) pages, then on 2 MB huge
    /// pages (the hugetlbfs mount of the ini's huge_pages_path); huge-page rows carry their ratios to the
    /// normal-page rows, and every shoal row the page size its rings are mapped with (/proc/<pid>/smaps).
    #[arg(long)]
    pub(crate) huge_pages: bool,
    /// With --huge-pages: the hugetlbfs mount to put the huge-page rings on, instead of the ini's huge_pages_path
    /// (`shoal-bench` passes the private mount it made for target T9 when the host has none).
    #[arg(long, value_name = "DIR", requires = "huge_pages")]
    pub(crate) huge_pages_path: Option<std::path::PathBuf>,
    /// The layer shoal's messages take between the two processes: shm (shoal's ring, the default), udp (eCAL's
    /// UDP data layer) or tcp (eCAL's TCP layer), the other layers switched off in both nodes' configuration; tcp
    /// publishers wait up to 10 s for room in a send queue (`[shoal_tcp] send_timeout_ms`, unless the ini sets it)
    /// and subscribers queue up to 64 MiB (`[shoal_receive] queue_bytes`, or more if the ini says so).
    /// --baseline then measures the raw socket program of the same layer: sendmmsg/recvmmsg datagrams for udp, a
    /// length-prefixed stream for tcp.
    #[arg(long, value_enum, default_value = "shm")]
    pub(crate) transport: Transport,
    /// Run the peer in this network namespace (`ip netns exec NAME`, in its own UTS namespace with host name NAME,
    /// which must resolve to --peer-addr here for the TCP layer; needs root). shoal then runs in network mode
    /// (multicast registration and UDP data) and the raw baselines use --peer-addr / --local-addr. scripts/netperf
    /// sets this up.
    #[arg(long, value_name = "NAME", requires_all = ["peer_addr", "local_addr"])]
    pub(crate) peer_netns: Option<String>,
    /// With --peer-netns: the peer's address in its namespace (raw baselines send there).
    #[arg(long, value_name = "IPV4")]
    pub(crate) peer_addr: Option<std::net::Ipv4Addr>,
    /// With --peer-netns: this process's address facing the peer (raw baselines send there; shoal's multicast
    /// interface).
    #[arg(long, value_name = "IPV4")]
    pub(crate) local_addr: Option<std::net::Ipv4Addr>,
    /// Measure services: call round trips and calls per second, shoal client -> shoal server (see below).
    #[arg(long)]
    pub(crate) service: bool,
    /// With --service or --pingpong: also measure this reference in the same run and print ratios to it (ecal:
    /// with --service an eCAL 6.1.1 C++ client/server pair on the eclipse-ecal wheel's libecal_core, and the mixed
    /// pairs; with --pingpong eCAL 6.1.1 C++ publish/subscribe ping-pong over eCAL's shared memory, block mode).
    #[arg(long, value_enum, requires = "against_what")]
    pub(crate) against: Option<Against>,
    /// With --against ecal: the directory of the eCAL C++ programs scripts/ecal-cpp builds [default:
    /// $SHOAL_ECAL_CPP, else ../ecal-cpp/bin beside this executable, i.e. target/ecal-cpp/bin].
    #[arg(long, value_name = "DIR", requires = "against")]
    pub(crate) ecal_cpp: Option<std::path::PathBuf>,
    /// With --baseline: the directory of the iceoryx2 ping-pong program scripts/iceoryx2 builds, measured in the same
    /// run (an error when it is not there) [default: $SHOAL_ICEORYX2, else ../iceoryx2-bench/bin beside this
    /// executable, i.e. target/iceoryx2-bench/bin, measured when it is there].
    #[arg(long, value_name = "DIR")]
    pub(crate) iceoryx2: Option<std::path::PathBuf>,
    /// With --service: the concurrent clients of the second calls/s run (the first has one).
    #[arg(long, value_name = "N", default_value_t = 8, requires = "service")]
    pub(crate) clients: usize,
    /// With --service: a call not answered within this time counts as timed out (a stall).
    #[arg(long, value_name = "MS", default_value_t = 10_000, requires = "service")]
    pub(crate) call_timeout_ms: u64,
}

/// What `shoal perf --service --against` and `--pingpong --against` measure beside shoal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Against {
    /// eCAL 6.1.1's C++ `CServiceServer` / `CServiceClient` (`--service`), `CPublisher` / `CSubscriber`
    /// (`--pingpong`).
    Ecal,
}

/// The hidden `perf-peer` subcommand: the echo/sink process spawned by `shoal perf`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PeerArgs {
    /// Which system the peer talks over.
    #[arg(long, value_enum)]
    pub(crate) system: System,
    /// Receive wait strategy.
    #[arg(long, value_enum)]
    pub(crate) wait: WaitMode,
    /// shoal: topic prefix; baseline: path prefix of the ring files.
    #[arg(long)]
    pub(crate) name: String,
    /// Index of this peer (fan-out: each peer has its own index).
    #[arg(long, default_value_t = 0)]
    pub(crate) index: usize,
    /// Pid of the parent: the peer exits when its parent is gone.
    #[arg(long)]
    pub(crate) parent: u32,
    /// Pin to this CPU.
    #[arg(long)]
    pub(crate) cpu: Option<usize>,
    /// Only receive (fan-out sinks): no answer link.
    #[arg(long)]
    pub(crate) sink_only: bool,
    /// Reliable shoal endpoints (`shoal perf --reliable`).
    #[arg(long)]
    pub(crate) reliable: bool,
    /// shoal: put this peer's rings on these pages (`shoal perf --huge-pages`); default: as the ini says.
    #[arg(long, value_enum)]
    pub(crate) pages: Option<Pages>,
    /// shoal: the hugetlbfs mount for `--pages huge` (`shoal perf --huge-pages-path`).
    #[arg(long, value_name = "DIR")]
    pub(crate) huge_pages_path: Option<std::path::PathBuf>,
    /// The layer (see `shoal perf --transport`).
    #[arg(long, value_enum, default_value = "shm")]
    pub(crate) transport: Transport,
    /// shoal: network mode with this multicast interface address (`shoal perf --peer-netns`); raw baselines: the
    /// address this peer binds.
    #[arg(long, value_name = "IPV4")]
    pub(crate) local_addr: Option<std::net::Ipv4Addr>,
    /// `shoal perf --service`: be the shoal service server (named --name) instead of an echo peer.
    #[arg(long)]
    pub(crate) service: bool,
}

/// `[shoal_tcp] send_timeout_ms` of `shoal perf --transport tcp` when the ini leaves it at 0 (drop when full).
pub(crate) const TCP_SEND_TIMEOUT_MS: u32 = 10_000;

/// `[shoal_receive] queue_bytes` at least, for `shoal perf --transport udp|tcp`.
pub(crate) const NET_QUEUE_BYTES: usize = 64 << 20;

/// The layer a run measures (`shoal perf --transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub(crate) enum Transport {
    /// shoal's shared-memory ring; baseline: the plain SPSC ring.
    Shm,
    /// eCAL's UDP data layer; baseline: raw sendmmsg/recvmmsg datagrams.
    Udp,
    /// eCAL's TCP layer; baseline: a raw length-prefixed TCP stream.
    Tcp,
}

impl Transport {
    /// The name on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }

    /// The `transport` label of a row of `system`.
    pub(crate) fn label(self, system: System) -> &'static str {
        match (system, self) {
            (System::Shoal, Transport::Shm) => "shm_ring",
            (System::Shoal, Transport::Udp) => "udp",
            (System::Shoal, Transport::Tcp) => "tcp",
            (System::Baseline, Transport::Shm) => "baseline_ring",
            (System::Baseline, Transport::Udp) => "raw_udp",
            (System::Baseline, Transport::Tcp) => "raw_tcp",
            (System::EcalCpp, _) => "shm",
        }
    }

    /// The layer shoal's receiver must report for every message (`Via::name`).
    pub(crate) fn via(self) -> &'static str {
        match self {
            Transport::Shm => "shoal_ring",
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }

    /// `config` with only this layer on, between two processes; `network`: network mode with this multicast
    /// interface (the peer in another namespace).
    pub(crate) fn apply(self, mut c: shoal::Config, network: Option<std::net::Ipv4Addr>) -> shoal::Config {
        if let Some(iface) = network {
            c.network.enabled = true;
            c.network.multicast_interface = iface;
        }
        if self == Transport::Shm {
            return c;
        }
        let l = &mut c.layers;
        c.shm_ring.enabled = false;
        l.pub_shm = false;
        l.sub_shm = false;
        l.pub_udp = self == Transport::Udp;
        l.sub_udp = self == Transport::Udp;
        l.pub_tcp = self == Transport::Tcp;
        l.sub_tcp = self == Transport::Tcp;
        // The raw receivers' queue is their socket buffer; shoal's subscriber queue behind its socket gets room
        // for as much, and more, so that a reader preempted for a moment does not drop what the layer delivered.
        c.receive.queue.bytes = c.receive.queue.bytes.max(NET_QUEUE_BYTES);
        if self == Transport::Tcp && c.tcp.send_timeout_ms == 0 {
            // A publisher that waits for room, as the raw stream's blocking writes do, instead of dropping.
            c.tcp.send_timeout_ms = TCP_SEND_TIMEOUT_MS;
        }
        c
    }
}

/// Which pages shoal's rings are put on (`shoal perf --huge-pages` measures both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub(crate) enum Pages {
    /// Normal pages: segments in /dev/shm (`huge_pages = false`).
    Normal,
    /// 2 MB pages: segments on the hugetlbfs mount `huge_pages_path` (`huge_pages = true`).
    Huge,
}

impl Pages {
    /// The name used in reports and on the peer's command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Pages::Normal => "normal",
            Pages::Huge => "huge",
        }
    }

    /// `config` with its rings on these pages (huge ones on the mount `shoal perf --huge-pages-path` named, if any).
    pub(crate) fn apply(self, mut config: shoal::Config) -> shoal::Config {
        config.shm_ring.huge_pages = if self == Pages::Huge { shoal::HugePages::On } else { shoal::HugePages::Off };
        if let Some(dir) = super::shoal_link::huge_pages_path() {
            config.shm_ring.huge_pages_path = dir;
        }
        config
    }
}

/// Receive wait strategy of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, ValueEnum)]
pub(crate) enum WaitMode {
    /// Busy spin (`WaitStrategy::BusySpin`).
    Spin,
    /// Futex doorbell (`WaitStrategy::Block`).
    Block,
}

impl WaitMode {
    /// The name used in reports and on the peer's command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WaitMode::Spin => "spin",
            WaitMode::Block => "block",
        }
    }
}

impl fmt::Display for WaitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The system under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum System {
    /// shoal publishers/subscribers (shared-memory ring transport).
    Shoal,
    /// The plain SPSC ring of `shoal_baseline::spsc`.
    Baseline,
    /// eCAL 6.1.1's C++ publish/subscribe (`--pingpong --against ecal`: its own program, never a perf-peer).
    #[value(skip)]
    EcalCpp,
}

impl System {
    /// `system` field of the report.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            System::Shoal => "shoal",
            System::Baseline => "baseline",
            System::EcalCpp => "ecal-cpp",
        }
    }
}

/// The measurement kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Copying ping-pong latency.
    PingPong,
    /// Streaming throughput, unpaced (the sender never waits for the reader).
    Throughput,
    /// Streaming throughput at a fixed rate (`--rate`); runs together with [`Mode::Throughput`].
    ThroughputPaced,
    /// Zero-copy ping-pong latency (header only).
    ZeroCopy,
    /// 1->N fan-out: publisher cost per send.
    Fanout,
}

impl Mode {
    /// `mode` field of the report.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::PingPong => "pingpong",
            Mode::Throughput => "throughput",
            Mode::ThroughputPaced => "throughput_paced",
            Mode::ZeroCopy => "zero_copy",
            Mode::Fanout => "fanout",
        }
    }
}

impl PerfArgs {
    /// The payload sizes (`--sizes`, else the default of the mode).
    pub(crate) fn sizes(&self) -> Vec<usize> {
        match (self.sizes.is_empty(), self.service) {
            (false, _) => self.sizes.clone(),
            (true, false) => vec![64, 1 << 10, 64 << 10, 1 << 20, 4 << 20],
            (true, true) => vec![64, 1 << 20],
        }
    }

    /// The wait modes to run, in order.
    pub(crate) fn waits(&self) -> Vec<WaitMode> {
        match self.wait {
            Some(w) => vec![w],
            None => vec![WaitMode::Spin, WaitMode::Block],
        }
    }

    /// The measurement modes to run, in order.
    pub(crate) fn modes(&self) -> Vec<Mode> {
        let mut modes = Vec::new();
        let explicit = self.pingpong || self.throughput || self.zero_copy || self.subscribers.is_some();
        // Throughput first: one publisher serves the whole run and its ring only grows, so streaming small
        // messages after the 4 MB ping-pong would measure a ring of 16 huge slots instead of the small-slot ring an
        // application sending small messages has.
        if self.throughput || !explicit {
            modes.push(Mode::Throughput);
        }
        if self.pingpong || !explicit {
            modes.push(Mode::PingPong);
        }
        if self.zero_copy {
            modes.push(Mode::ZeroCopy);
        }
        if self.subscribers.is_some() {
            modes.push(Mode::Fanout);
        }
        modes
    }

    /// Checks combinations clap cannot express.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if let Some(&s) = self.sizes().iter().find(|&&s| s < crate::perf::HEADER_LEN) {
            bail!(
                "size {s} is too small: every message carries a {}-byte header (sequence + timestamp); use --sizes with values >= {}",
                crate::perf::HEADER_LEN,
                crate::perf::HEADER_LEN
            );
        }
        if self.iterations == Some(0) || self.count == Some(0) {
            bail!("--iterations and --count must be at least 1");
        }
        if self.subscribers == Some(0) {
            bail!("--subscribers must be at least 1");
        }
        if self.baseline_only && self.subscribers.is_some() {
            bail!("--subscribers measures shoal's fan-out; it has no baseline-only form (drop --baseline-only)");
        }
        if self.huge_pages && self.baseline_only {
            bail!("--huge-pages compares shoal's rings on huge and normal pages; drop --baseline-only");
        }
        if self.iceoryx2.is_some() && !(self.baseline || self.baseline_only) {
            bail!("--iceoryx2 gives the iceoryx2 reference of --baseline: add --baseline (or --baseline-only)");
        }
        if self.iceoryx2.is_some() && self.transport != Transport::Shm {
            bail!("--iceoryx2 is a shared-memory reference; drop it with --transport udp|tcp");
        }
        if self.topics == Some(0) {
            bail!("--topics must be at least 1");
        }
        if self.transport != Transport::Shm || self.peer_netns.is_some() {
            let shm_only = [
                (self.zero_copy, "--zero-copy"),
                (self.subscribers.is_some(), "--subscribers"),
                (self.huge_pages, "--huge-pages"),
                (self.rss, "--rss"),
            ];
            if let Some((_, flag)) = shm_only.iter().find(|(on, _)| *on) {
                bail!("{flag} measures shoal's shared-memory ring; drop it with --transport udp|tcp or --peer-netns");
            }
        }
        if self.peer_netns.is_some() && self.transport == Transport::Shm {
            bail!("--peer-netns puts the peer on another host: shared memory cannot reach it; use --transport udp|tcp");
        }
        if let Some(r) = self.rate
            && !(r.is_finite() && r > 0.0)
        {
            bail!("--rate {r} must be a positive number of messages per second, e.g. --rate 500000");
        }
        if self.against.is_some() && !self.service {
            // --pingpong --against ecal (clap's group has made sure one of --service and --pingpong is there).
            let not_with_ecal = [
                (self.wait == Some(WaitMode::Spin), "--wait spin"),
                (self.baseline_only, "--baseline-only"),
                (self.transport != Transport::Shm, "--transport"),
                (self.peer_netns.is_some(), "--peer-netns"),
            ];
            if let Some((_, flag)) = not_with_ecal.iter().find(|(on, _)| *on) {
                bail!(
                    "--pingpong --against ecal compares shoal's block-mode ping-pong over shared memory with eCAL's \
                     (its receive callback is its blocking receive; on one host it uses its shared-memory layer): \
                     drop {flag}"
                );
            }
        }
        if self.service {
            let pubsub_only = [
                (self.pingpong, "--pingpong"),
                (self.throughput, "--throughput"),
                (self.zero_copy, "--zero-copy"),
                (self.subscribers.is_some(), "--subscribers"),
                (self.rate.is_some(), "--rate"),
                (self.baseline || self.baseline_only, "--baseline"),
                (self.reliable, "--reliable"),
                (self.huge_pages, "--huge-pages"),
                (self.rss, "--rss"),
                (self.wait.is_some(), "--wait"),
                (self.pin, "--pin"),
                (self.transport != Transport::Shm, "--transport"),
                (self.peer_netns.is_some(), "--peer-netns"),
            ];
            if let Some((_, flag)) = pubsub_only.iter().find(|(on, _)| *on) {
                bail!(
                    "{flag} is for publish/subscribe; --service measures calls over the service protocol (TCP): \
                     drop {flag}, or --service (its reference is --against ecal)"
                );
            }
            if self.clients == 0 {
                bail!("--clients must be at least 1");
            }
            if self.call_timeout_ms == 0 {
                bail!("--call-timeout-ms must be at least 1");
            }
        }
        Ok(())
    }

    /// Round trips for a payload size (excluding warm-up).
    pub(crate) fn iterations_for(&self, size: usize) -> u64 {
        self.iterations.unwrap_or_else(|| ((256u64 << 20) / size as u64).clamp(100, 10_000))
    }

    /// Warm-up round trips for a payload size.
    pub(crate) fn warmup_for(&self, size: usize) -> u64 {
        (self.iterations_for(size) / 10).clamp(10, 1000)
    }

    /// Messages per throughput run: 1 GiB of them (200..=200,000) over shared memory; 4 GiB (200..=1,000,000) over
    /// the network layers, whose rates vary more from run to run (a 1 MB run of 1,024 messages lasts a quarter of a
    /// second over loopback UDP, too short for a steady ratio to the raw program).
    pub(crate) fn count_for(&self, size: usize) -> u64 {
        let (total, most) = match self.transport {
            Transport::Shm => (1u64 << 30, 200_000),
            Transport::Udp | Transport::Tcp => (4u64 << 30, 1_000_000),
        };
        self.count.unwrap_or_else(|| (total / size as u64).clamp(200, most))
    }

    /// Messages per fan-out run.
    pub(crate) fn fanout_count_for(&self, size: usize) -> u64 {
        self.count.unwrap_or_else(|| ((512u64 << 20) / size as u64).clamp(200, 20_000))
    }
}

/// Parses `64`, `1k`, `64K`, `1m`, `4M` (1024 multiples).
pub(crate) fn parse_size(s: &str) -> anyhow::Result<usize> {
    let t = s.trim();
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1024usize),
        Some('m' | 'M') => (&t[..t.len() - 1], 1024 * 1024),
        _ => (t, 1),
    };
    let n: usize = digits.parse().with_context(|| {
        format!("bad size {s:?}: expected a number with an optional k or m suffix, e.g. 64, 1k, 4m")
    })?;
    let v = n.checked_mul(mult).with_context(|| format!("size {s:?} is too large"))?;
    if v == 0 {
        bail!("size {s:?} is zero: sizes must be positive");
    }
    if v > 1 << 30 {
        bail!("size {s:?} is larger than 1 GiB: pick a smaller size");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size(" 4M ").unwrap(), 4 << 20);
        assert!(parse_size("0").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("12x").is_err());
        assert!(parse_size("2048m").is_err());
    }

    #[test]
    fn iteration_defaults_scale_with_size() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            a: PerfArgs,
        }
        let t = T::parse_from(["x"]);
        assert_eq!(t.a.iterations_for(64), 10_000);
        assert_eq!(t.a.iterations_for(4 << 20), 100);
        assert_eq!(t.a.modes(), vec![Mode::Throughput, Mode::PingPong]);
        assert_eq!(t.a.waits(), vec![WaitMode::Spin, WaitMode::Block]);
        let t = T::parse_from(["x", "--zero-copy", "--wait", "block", "--iterations", "7"]);
        assert_eq!(t.a.modes(), vec![Mode::ZeroCopy]);
        assert_eq!(t.a.waits(), vec![WaitMode::Block]);
        assert_eq!(t.a.iterations_for(4 << 20), 7);
        assert!(T::try_parse_from(["x", "--rss"]).is_err());
        let t = T::parse_from(["x", "--subscribers", "--json"]);
        assert_eq!(t.a.subscribers, Some(4));
        assert!(t.a.json);
        let t = T::parse_from(["x", "--subscribers", "2"]);
        assert_eq!(t.a.subscribers, Some(2));
        assert!(T::try_parse_from(["x", "--targets"]).is_err(), "the targets are shoal-bench's");
        let t = T::parse_from(["x", "--rate", "0"]);
        assert!(t.a.validate().is_err());
    }
}
