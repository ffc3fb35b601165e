//! A userspace link impairment relay for the namespace tests, in place of `tc netem` (which this kernel lacks):
//! two threads of the test process enter the middle namespace of an impaired [`NetnsPair`](super::NetnsPair),
//! read every Ethernet frame arriving on one leg (an `AF_PACKET` raw socket) and write it to the other leg, each
//! frame lost with probability `loss`, the rest held back `delay` ± `jitter`, except that a `reorder` share of them
//! skips the delay and so overtakes those in flight. One seeded generator per direction decides loss, jitter and
//! reordering, so a given seed makes the same decisions for the same frame sequence (`SHOAL_IMPAIR_SEED` overrides
//! the default; every relay prints its seed). Everything is counted: frames seen, lost, forwarded, reordered, and
//! frames the relay could not carry (larger than the MTU, over the queue bound, a failed send, dropped by the kernel
//! before the relay read them), which a test asserts are none. The hosts' veth ends get checksum offload, TSO and
//! GSO switched off (`SIOCETHTOOL`), so the frames arriving here are at most MTU sized and carry real checksums:
//! corruption would be detected, and each TCP segment and IP fragment is lost on its own, as on a wire.

use std::collections::BinaryHeap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the relay does to each frame, the same in both directions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Impairment {
    /// Probability that a frame is dropped (0..1).
    pub(crate) loss: f64,
    /// Time every other frame is held back.
    pub(crate) delay: Duration,
    /// The hold time varies uniformly by ± this much.
    pub(crate) jitter: Duration,
    /// Probability that a kept frame is sent at once instead of after `delay` (it overtakes those in flight).
    pub(crate) reorder: f64,
    /// Seed of the generators (direction a → b uses it, b → a its complement).
    pub(crate) seed: u64,
}

impl Impairment {
    /// `loss` and `reorder` as probabilities, the seed from `SHOAL_IMPAIR_SEED` when set, else `default_seed`.
    pub(crate) fn new(loss: f64, delay: Duration, jitter: Duration, reorder: f64, default_seed: u64) -> Impairment {
        let seed = std::env::var("SHOAL_IMPAIR_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default_seed);
        Impairment { loss, delay, jitter, reorder, seed }
    }
}

/// Counters of one direction of the relay.
#[derive(Debug, Default)]
pub(crate) struct LinkCounters {
    /// Frames read from the incoming leg.
    pub(crate) frames: AtomicU64,
    /// Frames dropped on purpose (`loss`).
    pub(crate) lost: AtomicU64,
    /// Frames written to the outgoing leg.
    pub(crate) forwarded: AtomicU64,
    /// Frames sent before one that arrived earlier.
    pub(crate) reordered: AtomicU64,
    /// Frames larger than MTU + Ethernet header (offloads not switched off): dropped.
    pub(crate) oversized: AtomicU64,
    /// Frames dropped because the delay queue held its bound.
    pub(crate) overflow: AtomicU64,
    /// Frames whose send failed.
    pub(crate) send_errors: AtomicU64,
    /// Frames the kernel dropped before the relay read them (its socket buffer full: `PACKET_STATISTICS`).
    pub(crate) rx_overruns: AtomicU64,
}

/// A snapshot of [`LinkCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkStats {
    pub(crate) frames: u64,
    pub(crate) lost: u64,
    pub(crate) forwarded: u64,
    pub(crate) reordered: u64,
    pub(crate) oversized: u64,
    pub(crate) overflow: u64,
    pub(crate) send_errors: u64,
    pub(crate) rx_overruns: u64,
}

impl LinkStats {
    /// Frames the relay failed to carry (not the configured loss): a test expects none.
    pub(crate) fn failures(&self) -> u64 {
        self.oversized + self.overflow + self.send_errors + self.rx_overruns
    }
}

impl std::fmt::Display for LinkStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = if self.frames > 0 { 100.0 * self.lost as f64 / self.frames as f64 } else { 0.0 };
        write!(
            f,
            "frames {} lost {} ({pct:.2} %) forwarded {} reordered {} oversized {} overflow {} send_errors {} \
             rx_overruns {}",
            self.frames,
            self.lost,
            self.forwarded,
            self.reordered,
            self.oversized,
            self.overflow,
            self.send_errors,
            self.rx_overruns
        )
    }
}

impl LinkCounters {
    fn snapshot(&self) -> LinkStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        LinkStats {
            frames: l(&self.frames),
            lost: l(&self.lost),
            forwarded: l(&self.forwarded),
            reordered: l(&self.reordered),
            oversized: l(&self.oversized),
            overflow: l(&self.overflow),
            send_errors: l(&self.send_errors),
            rx_overruns: l(&self.rx_overruns),
        }
    }
}

/// The running relay; stopped (threads joined) on drop.
#[derive(Debug)]
pub(crate) struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// a → b and b → a.
    counters: [Arc<LinkCounters>; 2],
    /// Read by both threads at every wake-up; [`Relay::set`] changes it.
    impairment: Arc<Mutex<Impairment>>,
}

/// Bytes of frames the delay queue of one direction holds at most.
const QUEUE_BYTES: usize = 32 << 20;
/// The legs' MTU (veth default) plus the Ethernet header: the largest frame the relay expects.
const MAX_FRAME: usize = 1500 + 14;
/// `PACKET_IGNORE_OUTGOING` (Linux ≥ 4.20): the socket does not see the frames this host sends on the leg.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

impl Relay {
    /// Starts the relay in namespace `ns` between its interfaces `legs[0]` (towards host a) and `legs[1]`.
    pub(crate) fn start(ns: &str, legs: [&str; 2], impairment: Impairment) -> Result<Relay, String> {
        eprintln!(
            "impairment relay in {ns}: loss {:.1} %, delay {:?} ± {:?}, reorder {:.1} %, seed {} \
             (SHOAL_IMPAIR_SEED={} reproduces it)",
            impairment.loss * 100.0,
            impairment.delay,
            impairment.jitter,
            impairment.reorder * 100.0,
            impairment.seed,
            impairment.seed
        );
        let stop = Arc::new(AtomicBool::new(false));
        let counters = [Arc::new(LinkCounters::default()), Arc::new(LinkCounters::default())];
        let shared = Arc::new(Mutex::new(impairment));
        let mut threads = Vec::new();
        for dir in 0..2 {
            let (from, to) = (legs[dir].to_string(), legs[1 - dir].to_string());
            let ns = ns.to_string();
            let stop_flag = Arc::clone(&stop);
            let counters = Arc::clone(&counters[dir]);
            let imp = Arc::clone(&shared);
            let seed = if dir == 0 { impairment.seed } else { !impairment.seed };
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let thread = std::thread::Builder::new()
                .name(format!("impair-{from}"))
                .spawn(move || {
                    let sockets = enter_netns(&ns).and_then(|()| Ok((open_leg(&from, true)?, open_leg(&to, false)?)));
                    match sockets {
                        Ok((rx, tx)) => {
                            let _ = ready_tx.send(Ok(()));
                            forward(&rx, &tx, &imp, seed, &counters, &stop_flag);
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                })
                .map_err(|e| format!("spawn relay thread: {e}"))?;
            threads.push(thread);
            let started = ready_rx.recv().map_err(|_| "relay thread died".to_string()).and_then(|r| r);
            if let Err(e) = started {
                stop.store(true, Ordering::Relaxed);
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        Ok(Relay { stop, threads, counters, impairment: shared })
    }

    /// The counters of direction a → b (`0`) or b → a (`1`).
    pub(crate) fn stats(&self, dir: usize) -> LinkStats {
        self.counters[dir].snapshot()
    }

    /// The impairment in force.
    pub(crate) fn impairment(&self) -> Impairment {
        *self.impairment.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the impairment for the frames arriving from now on (the seed stays).
    pub(crate) fn set(&self, loss: f64, delay: Duration, jitter: Duration, reorder: f64) {
        let mut imp = self.impairment.lock().unwrap_or_else(PoisonError::into_inner);
        *imp = Impairment { loss, delay, jitter, reorder, seed: imp.seed };
        eprintln!(
            "impairment relay: now loss {:.1} %, delay {delay:?} ± {jitter:?}, reorder {:.1} %",
            loss * 100.0,
            reorder * 100.0
        );
    }

    /// Prints both directions' counters under `name`.
    pub(crate) fn report(&self, name: &str) {
        eprintln!("{name}: relay a->b {}", self.stats(0));
        eprintln!("{name}: relay b->a {}", self.stats(1));
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Moves the calling thread (only it) into network namespace `ns` (`ip netns add` made `/run/netns/<ns>`).
pub(crate) fn enter_netns(ns: &str) -> Result<(), String> {
    let file = std::fs::File::open(format!("/run/netns/{ns}")).map_err(|e| format!("open /run/netns/{ns}: {e}"))?;
    // SAFETY: setns with a namespace file descriptor we own; it changes only this thread's network namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(os_err(&format!("setns into {ns}")));
    }
    Ok(())
}

fn ifindex(name: &str) -> Result<libc::c_int, String> {
    let c = std::ffi::CString::new(name).map_err(|_| format!("interface name {name:?}"))?;
    // SAFETY: a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(os_err(&format!("interface {name}")));
    }
    libc::c_int::try_from(idx).map_err(|_| format!("interface index {idx}"))
}

/// An `AF_PACKET` raw socket bound to interface `name` of this thread's namespace: receiving every frame that
/// arrives on it (promiscuous, not those sent on it) when `receive`, else only for sending.
fn open_leg(name: &str, receive: bool) -> Result<OwnedFd, String> {
    let index = ifindex(name)?;
    let proto = if receive { (libc::ETH_P_ALL as u16).to_be() } else { 0 };
    // SAFETY: plain socket creation; the descriptor is owned right below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
    if fd < 0 {
        return Err(os_err("socket(AF_PACKET)"));
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = index;
    // SAFETY: addr is a valid sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(os_err(&format!("bind AF_PACKET to {name}")));
    }
    if receive {
        let one: libc::c_int = 1;
        // SAFETY: an int option of the size passed.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                (&raw const one).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(os_err("PACKET_IGNORE_OUTGOING"));
        }
        // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = index;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: a packet_mreq of the size passed.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&raw const mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(os_err("PACKET_ADD_MEMBERSHIP promiscuous"));
        }
        let buf: libc::c_int = 8 << 20;
        // SAFETY: an int option of the size passed (as root not capped by rmem_max; what still overflows it is
        // counted from PACKET_STATISTICS).
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&raw const buf).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    Ok(fd)
}

/// Frames the kernel dropped on `rx` since the last call (reading `PACKET_STATISTICS` resets it).
fn rx_drops(rx: &OwnedFd) -> u64 {
    let mut stats = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: a tpacket_stats of the size passed, written by the kernel.
    let r = unsafe {
        libc::getsockopt(
            rx.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&raw mut stats).cast(),
            &raw mut len,
        )
    };
    if r == 0 { u64::from(stats.tp_drops) } else { 0 }
}

/// splitmix64: small, seeded, good enough for test decisions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A frame waiting for its send time; the heap pops the earliest (then the first arrived).
struct Held {
    due: Instant,
    seq: u64,
    frame: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// One direction: frames from `rx` to `tx` until `stop`.
fn forward(rx: &OwnedFd, tx: &OwnedFd, shared: &Mutex<Impairment>, seed: u64, c: &LinkCounters, stop: &AtomicBool) {
    let mut rng = Rng(seed);
    let mut heap: BinaryHeap<Held> = BinaryHeap::new();
    let mut held_bytes = 0usize;
    let (mut seq, mut max_sent_seq) = (0u64, None::<u64>);
    // Room for a GSO super-frame, so an oversized frame is seen (and counted) whole rather than truncated.
    let mut buf = vec![0u8; 65536 + 128];
    let mut stats_read = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if stats_read.elapsed() >= Duration::from_millis(100) {
            c.rx_overruns.fetch_add(rx_drops(rx), Ordering::Relaxed);
            stats_read = Instant::now();
        }
        let imp = *shared.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let wait = heap.peek().map_or(Duration::from_millis(20), |h| h.due.saturating_duration_since(now));
        let wait = wait.min(Duration::from_millis(20));
        let ts = libc::timespec { tv_sec: 0, tv_nsec: wait.subsec_nanos() as libc::c_long };
        let mut pfd = libc::pollfd { fd: rx.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd and a valid timespec; no signal mask.
        unsafe { libc::ppoll(&raw mut pfd, 1, &raw const ts, std::ptr::null()) };
        for _ in 0..256 {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::recv(rx.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            let Ok(n) = usize::try_from(n) else { break };
            c.frames.fetch_add(1, Ordering::Relaxed);
            if n > MAX_FRAME {
                c.oversized.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if rng.unit() < imp.loss {
                c.lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let now = Instant::now();
            let due = if rng.unit() < imp.reorder {
                now
            } else {
                let j = imp.jitter.as_secs_f64() * (2.0 * rng.unit() - 1.0);
                now + Duration::from_secs_f64((imp.delay.as_secs_f64() + j).max(0.0))
            };
            if held_bytes + n > QUEUE_BYTES {
                c.overflow.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            held_bytes += n;
            seq += 1;
            heap.push(Held { due, seq, frame: buf[..n].to_vec() });
        }
        let now = Instant::now();
        while heap.peek().is_some_and(|h| h.due <= now) {
            let Some(h) = heap.pop() else { break };
            held_bytes -= h.frame.len();
            if max_sent_seq.is_some_and(|m| h.seq < m) {
                c.reordered.fetch_add(1, Ordering::Relaxed);
            }
            max_sent_seq = Some(max_sent_seq.map_or(h.seq, |m| m.max(h.seq)));
            // SAFETY: the frame's bytes are readable for its length.
            let r = unsafe { libc::send(tx.as_raw_fd(), h.frame.as_ptr().cast(), h.frame.len(), 0) };
            if usize::try_from(r) == Ok(h.frame.len()) {
                c.forwarded.fetch_add(1, Ordering::Relaxed);
            } else {
                c.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    c.rx_overruns.fetch_add(rx_drops(rx), Ordering::Relaxed);
}

/// `struct ifreq` with `ifr_data` (what `SIOCETHTOOL` takes), padded to the kernel's 40 bytes.
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GTXCSUM: u32 = 0x16;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

fn ethtool(sock: &OwnedFd, dev: &str, cmd: u32, data: u32) -> Result<u32, String> {
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfreqData { name: [0; libc::IFNAMSIZ], data: (&raw mut value).cast(), _pad: [0; 16] };
    for (d, s) in req.name.iter_mut().zip(dev.bytes().take(libc::IFNAMSIZ - 1)) {
        *d = s as libc::c_char;
    }
    // SAFETY: req is a valid ifreq whose ifr_data points at an ethtool_value that outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &raw mut req) } != 0 {
        return Err(os_err(&format!("SIOCETHTOOL {cmd:#x} on {dev}")));
    }
    Ok(value.data)
}

/// Switches off transmit checksum offload, scatter-gather, TSO, GSO and GRO on `dev` in namespace `ns` (what
/// `ethtool -K dev tx off sg off tso off gso off gro off` does), then checks TSO, GSO and checksum offload read back
/// off. Runs on a thread of its own, which enters the namespace.
pub(crate) fn offloads_off(ns: &str, dev: &str) -> Result<(), String> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    std::thread::spawn(move || -> Result<(), String> {
        enter_netns(&ns)?;
        // SAFETY: plain socket creation; the descriptor is owned right below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(os_err("socket(AF_INET)"));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        for cmd in [ETHTOOL_STXCSUM, ETHTOOL_SSG, ETHTOOL_STSO, ETHTOOL_SGSO, ETHTOOL_SGRO] {
            ethtool(&sock, &dev, cmd, 0)?;
        }
        for (cmd, what) in [(ETHTOOL_GTXCSUM, "tx checksum"), (ETHTOOL_GTSO, "TSO"), (ETHTOOL_GGSO, "GSO")] {
            if ethtool(&sock, &dev, cmd, 0)? != 0 {
                return Err(format!("{what} offload still on for {dev} in {ns}"));
            }
        }
        Ok(())
    })
    .join()
    .map_err(|_| "offload thread panicked".to_string())?
}
