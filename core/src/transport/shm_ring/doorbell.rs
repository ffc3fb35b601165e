//! Futex doorbell: one per subscribing process, rung by writers after they publish.
//!
//! Protocol (no lost wake-up, no syscall while nobody sleeps, one per registration while somebody does):
//! - ringer: publish the slot; `fence(SeqCst)`; if `waiters > 0` and `rung != WOKEN` and `swap(rung, WOKEN) !=
//!   WOKEN` { `seq += 1`; `FUTEX_WAKE(all)` }.
//! - waiter: `waiters += 1`; `rung = ARMED` (SeqCst) + `fence(SeqCst)`; `observed = seq`; re-check the readers;
//!   if still nothing, `FUTEX_WAIT(seq, observed, timeout)`; `waiters -= 1`.
//!
//! Either the ringer sees the waiter (then `seq` changes after `observed` was loaded, so the
//! futex wait returns at once or is woken), or the waiter's re-check sees the published slot. `rung` makes the first
//! ringer after a registration the only one that wakes: until the woken thread runs and deregisters (on a busy host,
//! many samples later) the others would each make a `FUTEX_WAKE` for nobody. A ringer that finds `WOKEN` skips
//! safely: the ringer that stored it wakes every thread registered before, and a registration after its swap stores
//! `ARMED` and then re-checks, seeing what the skipping ringer published (or that ringer sees `ARMED` and wakes).
//! `rung` is 0 in a doorbell of a shoal that did not know it; its ringers then wake whenever `waiters > 0`.
//! The futex ops are the plain (shared, non-PRIVATE) ones: the word lives in a file mapping.
//!
//! A process whose threads never sleep (busy-spinning receivers) spares its publishers that fence, which makes them
//! wait for their ring stores to reach the other core on every send: its doorbell starts `spin_only`, and a ringer
//! that reads `spin_only == 1` after its publish (program order, no fence) neither fences nor looks for waiters.
//! Before the owner's first registration, it stores `spin_only = 0` and calls
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, a fence on every CPU that runs a thread of a process registered for
//! it (about 1 µs), before it goes on as above: the asymmetric form of the same store-buffering pairing (a ringer
//! that still read 1 had its publish made visible by that barrier, so the re-check sees it; a ringer that reads later
//! sees 0 and fences). Once per process. A process registers when it opens its first [`DoorbellRemote`] (its node's
//! own, at start-up), so every ringer that may skip the fence is registered; where the kernel lacks the command
//! (before Linux 4.16, or a seccomp filter refuses it) doorbells are never spin-only and ringers always fence.
//!
//! A publisher with sixteen subscriber processes would read sixteen flags on sixteen pages per send. Instead
//! ([`Ringers`]) it reads one word of its own process's doorbell, `spin_ends`, and the flags only when that moved: a
//! ring's header names its writer process's doorbell, and a subscriber process notes it when it opens the ring
//! ([`Doorbell::note_ringer`]) and bumps its `spin_ends` after storing `spin_only = 0` and before the barrier, the
//! same pairing on another word. A ringer noted after the switch is bumped at once, with a barrier of its own (its
//! publishers may have taken us for spin-only before we read their ring).
//!
//! [`LocalBell`] is the same protocol on a process-private word (PRIVATE futex ops), for threads of one process;
//! a publisher may hand its [`Ringers`] over to another thread of its process (the waker thread, module
//! `pubsub::waker`), so that a send with several sleeping subscriber processes makes one wake-up, not one per
//! process: that thread fences and checks each of them as the publisher would ([`Ringers::wake_sleepers`]).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, compiler_fence, fence};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memmap2::MmapOptions;

use crate::sys::shm_guard::PeerMap;

use super::layout::{DOORBELL_FILE_SIZE, DOORBELL_MAGIC, DOORBELL_VERSION, DoorbellHeader};
use super::segment::{self, Placement};

/// Error of [`Doorbell::create`].
#[derive(Debug, thiserror::Error)]
#[error("doorbell {op} {path}: {source}")]
pub struct DoorbellCreateError {
    /// The failed step.
    pub op: &'static str,
    /// The file concerned.
    pub path: PathBuf,
    /// The OS error.
    pub source: io::Error,
}

/// Error of [`DoorbellRemote::open`].
#[derive(Debug, thiserror::Error)]
pub enum DoorbellOpenError {
    /// The name is not a `shoal_db_<pid>_<unique>` path.
    #[error("not a shoal doorbell name: {0:?}")]
    BadName(String),
    /// Opening or mapping failed.
    #[error("doorbell {op} {path}: {source}")]
    Io {
        /// The failed step.
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file is too small.
    #[error("doorbell {path} has {size} bytes, needs {DOORBELL_FILE_SIZE}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Wrong magic or version.
    #[error("doorbell {path}: bad header (magic 0x{magic:016x}, version {version})")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// Magic found.
        magic: u64,
        /// Version found.
        version: u32,
    },
}

/// Error of a futex wait.
#[derive(Debug, thiserror::Error)]
#[error("futex wait failed: {0}")]
pub struct DoorbellWaitError(#[source] pub io::Error);

/// Why [`Doorbell::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeReason {
    /// Woken by `FUTEX_WAKE` (or spuriously).
    Woken,
    /// `seq` already differed from the observed value (EAGAIN).
    Changed,
    /// The timeout expired.
    TimedOut,
    /// Interrupted by a signal.
    Interrupted,
}

fn header(map: &PeerMap) -> &DoorbellHeader {
    debug_assert!(map.len() >= size_of::<DoorbellHeader>());
    // SAFETY: doorbell mappings are DOORBELL_FILE_SIZE (>= size_of::<DoorbellHeader>()) bytes,
    // page aligned, and DoorbellHeader consists of atomics only (made from the raw pointer, never from a slice).
    unsafe { &*map.as_ptr().cast::<DoorbellHeader>() }
}

/// Whether a futex word is shared between processes (in a file mapping) or private to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Shared,
    Private,
}

impl Scope {
    fn op(self, op: libc::c_int) -> libc::c_int {
        match self {
            Scope::Shared => op,
            Scope::Private => op | libc::FUTEX_PRIVATE_FLAG,
        }
    }
}

fn futex_wait(
    word: &AtomicU32,
    scope: Scope,
    expected: u32,
    timeout: Option<Duration>,
) -> Result<WakeReason, DoorbellWaitError> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT reads the u32 at a valid, aligned address inside a live shared
    // mapping and an optional valid timespec; the unused arguments are null / 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            scope.op(libc::FUTEX_WAIT),
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc == 0 {
        return Ok(WakeReason::Woken);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) => Ok(WakeReason::Changed),
        Some(libc::ETIMEDOUT) => Ok(WakeReason::TimedOut),
        Some(libc::EINTR) => Ok(WakeReason::Interrupted),
        _ => Err(DoorbellWaitError(e)),
    }
}

fn futex_wake_all(word: &AtomicU32, scope: Scope) {
    // SAFETY: FUTEX_WAKE only uses the address as a key (valid, aligned, in a live mapping or allocation).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            scope.op(libc::FUTEX_WAKE),
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if rc < 0 {
        tracing::debug!("shm_ring: FUTEX_WAKE failed: {}", io::Error::last_os_error());
    }
}

/// `membarrier(2)` commands (`linux/membarrier.h`).
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;

fn membarrier(cmd: libc::c_int) -> io::Result<libc::c_long> {
    // SAFETY: the membarrier commands used here take no pointer (flags 0); the call only returns a value.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// Whether this kernel offers the expedited global barrier and its registration (Linux 4.16 and later, where no
/// seccomp filter refuses `membarrier`): asked once per process.
fn expedited_barrier_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let wanted = libc::c_long::from(MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
        membarrier(MEMBARRIER_CMD_QUERY).is_ok_and(|mask| mask & wanted == wanted)
    })
}

/// Registers this process for the expedited global barriers of doorbell owners (once; module comment): whether it
/// is, and so may skip the fence for a spin-only doorbell.
fn registered_for_barriers() -> bool {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED
        .get_or_init(|| expedited_barrier_available() && membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED).is_ok())
}

/// `rung` of a doorbell whose owner predates the word: ringers wake whenever a waiter is registered.
const RUNG_UNKNOWN: u32 = 0;
/// `rung`: a thread registered since the last wake; the next ringer wakes.
const RUNG_ARMED: u32 = 1;
/// `rung`: a ringer woke every registered thread; the others skip until a thread registers again.
const RUNG_WOKEN: u32 = 2;

/// The words of the doorbell protocol (module comment), wherever they live.
#[derive(Clone, Copy)]
struct Words<'a> {
    seq: &'a AtomicU32,
    waiters: &'a AtomicU32,
    rung: &'a AtomicU32,
    scope: Scope,
}

impl Words<'_> {
    /// Registers a waiter; returns the `seq` to wait on.
    fn register(self) -> u32 {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        self.rung.store(RUNG_ARMED, Ordering::SeqCst);
        // StoreLoad: the registration is visible before the condition is re-checked.
        fence(Ordering::SeqCst);
        self.seq.load(Ordering::SeqCst)
    }

    fn deregister(self) {
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a registered thread has not been woken yet (after the ringer's fence).
    fn needs_wake(self) -> bool {
        self.waiters.load(Ordering::SeqCst) != 0 && self.rung.load(Ordering::Relaxed) != RUNG_WOKEN
    }

    /// Wakes the registered threads unless another ringer has since their registration. Returns whether it did.
    fn wake(self) -> bool {
        if self.rung.load(Ordering::Relaxed) != RUNG_UNKNOWN
            && self.rung.swap(RUNG_WOKEN, Ordering::SeqCst) == RUNG_WOKEN
        {
            return false;
        }
        self.seq.fetch_add(1, Ordering::SeqCst);
        futex_wake_all(self.seq, self.scope);
        true
    }

    /// After publishing: fence, and wake if anybody waits. Returns whether a wake was issued.
    fn ring(self) -> bool {
        fence(Ordering::SeqCst);
        self.needs_wake() && self.wake()
    }

    fn wait(self, observed: u32, timeout: Option<Duration>) -> Result<WakeReason, DoorbellWaitError> {
        futex_wait(self.seq, self.scope, observed, timeout)
    }
}

/// `FUTEX_WAIT` on a word in a shared mapping (the ring's flow control).
pub(super) fn futex_wait_shared(
    word: &AtomicU32,
    expected: u32,
    timeout: Option<Duration>,
) -> Result<WakeReason, DoorbellWaitError> {
    futex_wait(word, Scope::Shared, expected, timeout)
}

/// `FUTEX_WAKE` of every waiter on a word in a shared mapping.
pub(super) fn futex_wake_shared(word: &AtomicU32) {
    futex_wake_all(word, Scope::Shared);
}

fn shared_words(map: &PeerMap) -> Words<'_> {
    let h = header(map);
    Words { seq: &h.seq.0, waiters: &h.waiters.0, rung: &h.rung, scope: Scope::Shared }
}

/// The waiting side: owned by the subscribing process, unlinked on drop.
#[derive(Debug)]
pub struct Doorbell {
    path: PathBuf,
    /// Raw and guarded: publishers of other processes write its words (and could truncate the file).
    map: PeerMap,
    /// Held while the doorbell lives (stale-file cleanup).
    _owner: crate::sys::OwnerLock,
    /// The header's `spin_only` is 0 and every ringer sees it (module comment): a thread may register.
    may_sleep: AtomicBool,
    /// Taken by the thread that ends `spin_only`; the others wait for its barrier. Holds, while spin-only, the
    /// doorbells of the processes whose rings this one reads ([`note_ringer`](Self::note_ringer)), told then.
    ending_spin_only: Mutex<Vec<DoorbellRemote>>,
    /// Created spin-only (the kernel offers the barrier that ends it).
    began_spin_only: bool,
}

/// Noted ringers beyond which those whose process is gone are dropped before another is noted.
const NOTED_RINGERS_PRUNE: usize = 64;

thread_local! {
    /// Messages and bytes this thread has published (see [`note_publish`]).
    static PUBLISHED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counts a message of `bytes` published by the calling thread: a wait that follows one on the same thread waits for
/// a reply (request/response, ping-pong), and polls longer ([`PollState::reply_window`]).
pub fn note_publish(bytes: usize) {
    PUBLISHED.with(|c| {
        let (n, b) = c.get();
        c.set((n.wrapping_add(1), b.wrapping_add(bytes as u64)));
    });
}

/// One waiting thread's state for [`Doorbell::wait_until`]: whether its messages come back to back. Kept by the
/// thread that waits (a `recv` caller, the callback thread), not by the doorbell, which every receiving thread of
/// the process shares: one thread's stream must not make another thread's paced waits poll.
#[derive(Debug, Default, Clone, Copy)]
pub struct PollState {
    /// The last wait's poll found a message.
    streaming: bool,
    /// Waits since the last poll, while not streaming.
    since_probe: u32,
    /// Waits from one probe to the next while not streaming: 2 after a poll that ended a stream, doubling after each
    /// probe that finds nothing up to [`PollState::PROBE_EVERY`] (0 stands for that, a fresh state's).
    interval: u32,
    /// This thread's publish count and bytes when its last wait began ([`note_publish`]).
    published_seen: (u64, u64),
    /// Polls in a row that found their message only after a yield ran another thread ([`Pacer::gave_way`]).
    gave_way: u32,
}

impl PollState {
    /// How long a wait polls before it sleeps, while messages come back to back.
    pub const SPIN: Duration = Duration::from_micros(10);
    /// How long a probe (a poll while not streaming) polls instead when its thread published since its previous
    /// wait: long enough for a peer that sleeps to wake and reply (20-35 µs on a 2-core VM), so that a
    /// request/response exchange settles with both sides polling rather than both sleeping, which the 10 µs poll
    /// alone could never leave (the peer's reply comes a wake-up later). Polls while streaming stay at
    /// [`PollState::SPIN`]: with the long poll there too, a thread that republishes a stream arriving every 20-50 µs
    /// polled all the time (98 % of a core against 23-26 % when it slept per sample; with the long poll only in
    /// probes 37-48 %).
    pub const REPLY_SPIN: Duration = Duration::from_micros(50);
    /// Added to a replying thread's poll (as a probe and while streaming) per MiB it published since its previous
    /// wait: the peer copies that message out and a reply as large in before the reply is there (two copies at
    /// about 20 GB/s). Without it a 1 MiB ping-pong never settled into polling (the reply came 50-55 µs after the
    /// wait began) and both sides slept per message: 56-58 µs one-way against 50-51 µs with it, same script
    /// alternating on a VM whose idle vCPU halts.
    pub const REPLY_SPIN_PER_MIB: Duration = Duration::from_micros(100);
    /// The longest a replying thread's poll grows to with what it published.
    pub const REPLY_SPIN_MAX: Duration = Duration::from_millis(2);
    /// Polls in a row whose message came only after a yield ran another thread ([`Pacer::gave_way`]) from which on
    /// a found message counts as none: the writer needs this thread's CPU, and polling would take it from it (with
    /// both processes pinned to one CPU a 64 B block ping-pong took 7.0-7.9 µs one way polling, 2.6-2.8 sleeping). A
    /// single one (another thread of the process, or of the system, ran at that moment) does not end a stream.
    /// Sleeping is also what lets the scheduler part two processes it put on one CPU (a wake-up may place the woken
    /// one on the other, idle CPU): of six runs of three back-to-back 64 B measurements, three began on one CPU,
    /// and all six were apart by the third. Polling on for 100 ms instead, so that the idle CPU's load balancing
    /// would pull one over, parted a 64 B pair in 2-55 ms but kept others together for the whole 100 ms (a
    /// zero-copy ping-pong after a 1 MiB copying one: 7.0-7.8 µs one way, sleeping 0.2-0.3 µs).
    pub const GAVE_WAY_IN_A_ROW: u32 = 4;
    /// While they do not, one wait in this many at most still polls first (a probe), to notice a stream beginning.
    /// Right after a stream ends probes come sooner (every 2nd wait, then 4th, ... up to this), so an exchange that
    /// one slow round (a hiccup, a ring that grew) knocked out of polling finds back to it within a few rounds.
    pub const PROBE_EVERY: u32 = 64;

    /// A thread's state before its first wait: not streaming.
    pub const fn new() -> PollState {
        PollState { streaming: false, since_probe: 0, interval: 0, published_seen: (0, 0), gave_way: 0 }
    }

    /// How long a wait of a thread that published `bytes` (in one or more messages) since its previous wait polls
    /// for the reply beyond its usual poll ([`PollState::REPLY_SPIN_PER_MIB`], at most
    /// [`PollState::REPLY_SPIN_MAX`]): nothing for small messages.
    pub fn reply_window(bytes: u64) -> Duration {
        let per_mib = Self::REPLY_SPIN_PER_MIB.as_nanos() as u64;
        Duration::from_nanos(bytes.saturating_mul(per_mib) >> 20).min(Self::REPLY_SPIN_MAX)
    }

    /// How long this wait polls before it sleeps (zero: it does not), given what its thread published since its
    /// previous wait (`None`: nothing): while streaming, and at each probe; longer when replying, and longer still
    /// after large messages.
    fn poll_window(&mut self, replied: Option<u64>) -> Duration {
        let probe = !self.streaming;
        if !self.should_poll() {
            return Duration::ZERO;
        }
        match replied {
            Some(bytes) if probe => Self::REPLY_SPIN + Self::reply_window(bytes),
            Some(bytes) => Self::SPIN + Self::reply_window(bytes),
            None => Self::SPIN,
        }
    }

    /// Whether this wait polls before it sleeps: while streaming, and at each probe.
    fn should_poll(&mut self) -> bool {
        if self.streaming {
            return true;
        }
        self.since_probe += 1;
        if self.since_probe >= self.probe_interval() {
            self.since_probe = 0;
            return true;
        }
        false
    }

    /// Records what a poll found, and whether it came only after a yield ran another thread: found after
    /// [`PollState::GAVE_WAY_IN_A_ROW`] such polls in a row, it counts as none found ([`PollState::polled`]).
    fn poll_ended(&mut self, found: bool, gave_way: bool) {
        match (found, gave_way) {
            (true, true) => self.gave_way = self.gave_way.saturating_add(1),
            (true, false) => self.gave_way = 0,
            (false, _) => {}
        }
        self.polled(found && self.gave_way < Self::GAVE_WAY_IN_A_ROW);
    }

    /// Records what a poll found: a message keeps (or starts) the streaming state; nothing ends it, and the next
    /// probe comes after twice the waits of the last (from 2, up to [`PollState::PROBE_EVERY`]).
    fn polled(&mut self, found: bool) {
        self.interval = if found {
            1
        } else if self.streaming {
            2
        } else {
            (self.probe_interval() * 2).min(Self::PROBE_EVERY)
        };
        self.streaming = found;
        self.since_probe = 0;
    }

    /// Waits from one probe to the next while not streaming.
    fn probe_interval(&self) -> u32 {
        if self.interval == 0 { Self::PROBE_EVERY } else { self.interval }
    }
}

impl Doorbell {
    /// Creates `/dev/shm/shoal_db_<pid>_<unique>`, `spin_only` where the kernel offers the barrier that ends it
    /// (module comment): until a thread of this process first registers as a waiter, its publishers skip the
    /// doorbell's fence.
    pub fn create() -> Result<Doorbell, DoorbellCreateError> {
        let pid = segment::own_pid();
        let mode = crate::sys::shm_write_mode();
        let created =
            segment::create_mapped(Placement { huge_dir: None, quiet: true }, DOORBELL_FILE_SIZE as u64, mode, || {
                format!("shoal_db_{pid}_{}", segment::unique_token())
            })
            .map_err(|f| DoorbellCreateError { op: f.op, path: f.path, source: f.source })?;
        let h = header(&created.map);
        h.version.store(DOORBELL_VERSION, Ordering::Relaxed);
        h.owner_pid.store(pid, Ordering::Relaxed);
        let spin_only = expedited_barrier_available();
        h.spin_only.store(u32::from(spin_only), Ordering::Relaxed);
        h.rung.store(RUNG_ARMED, Ordering::Relaxed);
        h.magic.store(DOORBELL_MAGIC, Ordering::Release);
        Ok(Doorbell {
            path: created.path,
            map: created.map,
            _owner: created.owner,
            may_sleep: AtomicBool::new(!spin_only),
            ending_spin_only: Mutex::new(Vec::new()),
            began_spin_only: spin_only,
        })
    }

    /// Whether ringers still skip their fence because no thread of this process has registered yet.
    pub fn spin_only(&self) -> bool {
        self.header().spin_only.load(Ordering::SeqCst) != 0
    }

    /// Before a registration: ends `spin_only` (once per doorbell) and makes every ringer see that (module
    /// comment). A thread that comes while another ends it waits for that one's barrier.
    fn allow_sleep(&self) {
        if self.may_sleep.load(Ordering::Acquire) {
            return;
        }
        let mut ringers = self.ending_spin_only.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.may_sleep.load(Ordering::Acquire) {
            return;
        }
        self.header().spin_only.store(0, Ordering::SeqCst);
        // The ringers' processes ask their `spin_ends` instead of our `spin_only` (`Ringers`): the barrier covers
        // both stores.
        for r in ringers.drain(..) {
            r.tell_spin_ended();
        }
        global_barrier();
        self.may_sleep.store(true, Ordering::Release);
    }

    /// Notes the doorbell of a process whose ring this process reads (`RingReader::writer_doorbell`): its
    /// publishers may skip asking our `spin_only` while their own doorbell's `spin_ends` is unchanged ([`Ringers`]),
    /// so it is told (bumped, before the barrier) when this doorbell stops being spin-only. Noted after that, it is
    /// told at once, with a barrier of its own: it may have taken us for spin-only before we read its ring. Call
    /// after opening the ring and before waiting for its samples. Returns whether the doorbell could be opened. It
    /// can be whenever its ring could: both follow the writer's `shm_access` (a doorbell takes the write mode of
    /// the same class of users the ring's read mode lets in). False means it is gone with its process, or the
    /// writer named a file that is no doorbell of its own: such a writer can only fail to wake us, as one that
    /// never rings can.
    pub fn note_ringer(&self, path: &str) -> bool {
        if !self.began_spin_only {
            // Never spin-only: no ringer skips anything for us.
            return true;
        }
        let mut ringers = self.ending_spin_only.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ringers.iter().any(|r| r.name() == path) {
            return true;
        }
        let remote = match DoorbellRemote::open(path) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("shm_ring: cannot note the ringer {path}: {e}");
                return false;
            }
        };
        if self.may_sleep.load(Ordering::Acquire) {
            remote.tell_spin_ended();
            global_barrier();
            return true;
        }
        if ringers.len() >= NOTED_RINGERS_PRUNE {
            ringers.retain(DoorbellRemote::owner_alive);
        }
        ringers.push(remote);
        true
    }

    /// The word other processes bump when they stop being spin-only ([`note_ringer`](Self::note_ringer)).
    fn spin_ends(&self) -> &AtomicU32 {
        &self.header().spin_ends
    }

    fn header(&self) -> &DoorbellHeader {
        header(&self.map)
    }

    /// Path of the doorbell file; publishers pass it to [`DoorbellRemote::open`].
    pub fn name(&self) -> &str {
        segment::path_str(&self.path)
    }

    /// Current value of the futex word.
    pub fn seq(&self) -> u32 {
        self.header().seq.0.load(Ordering::SeqCst)
    }

    /// Threads currently registered as waiters.
    pub fn waiters(&self) -> u32 {
        self.header().waiters.0.load(Ordering::SeqCst)
    }

    /// Marks the calling thread as a waiter (until the guard is dropped) and loads `seq`.
    /// After this, re-check the readers; if they are still empty, call
    /// [`WaiterRegistration::wait`].
    pub fn register_waiter(&self) -> WaiterRegistration<'_> {
        self.allow_sleep();
        WaiterRegistration { bell: self, observed: shared_words(&self.map).register() }
    }

    /// Sleeps while `seq == observed_seq` (one `FUTEX_WAIT`). The caller must be registered
    /// (see [`register_waiter`](Self::register_waiter)), or ringers will not wake it.
    pub fn wait(&self, observed_seq: u32, timeout: Option<Duration>) -> Result<WakeReason, DoorbellWaitError> {
        shared_words(&self.map).wait(observed_seq, timeout)
    }

    /// Waits until `ready()` is true or `deadline` passes; returns `ready()`'s last value.
    /// `ready` should be cheap (e.g. `has_data()` of the readers served by this doorbell). `poll` is the calling
    /// thread's own state, kept from one wait to the next.
    ///
    /// While messages come back to back (the previous wait's poll found one), it polls `ready` for up to
    /// [`PollState::SPIN`] (10 µs) before it registers as a waiter and sleeps: a receiver that keeps up with a stream
    /// then never sleeps between its messages, so the publisher finds no waiter and makes no `FUTEX_WAKE` per message
    /// (several µs of its CPU each, ~9 µs on the VM this is measured on, and the receiver's wake-up latency). A poll
    /// that finds nothing ends the streaming state; otherwise one wait in [`PollState::PROBE_EVERY`] (64) polls first,
    /// so a paced receiver polls 10 µs per 64 messages and sleeps at once for the rest (right after a stream ends
    /// probes come sooner: every 2nd wait, then 4th, ... up to every 64th). A probe of a thread that published since
    /// its previous wait (it waits for a reply) polls up to [`PollState::REPLY_SPIN`] (50 µs) instead; after large
    /// messages a replying thread's poll grows by [`PollState::reply_window`] (100 µs per MiB), as a probe and while
    /// streaming. Polls are paced ([`Pacer`]); after [`PollState::GAVE_WAY_IN_A_ROW`] polls in a row whose message came
    /// only after they gave their CPU to another thread, a found message counts as none (the thread sleeps and probes).
    pub fn wait_until(
        &self,
        poll: &mut PollState,
        mut ready: impl FnMut() -> bool,
        deadline: Option<Instant>,
    ) -> Result<bool, DoorbellWaitError> {
        let published = PUBLISHED.with(std::cell::Cell::get);
        let replied = (published.0 != poll.published_seen.0).then(|| published.1.wrapping_sub(poll.published_seen.1));
        poll.published_seen = published;
        if ready() {
            return Ok(true);
        }
        let window = poll.poll_window(replied);
        if !window.is_zero() {
            let (found, gave_way) = poll_for(&mut ready, window, deadline);
            poll.poll_ended(found, gave_way);
            if found {
                return Ok(true);
            }
        }
        loop {
            let timeout = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(false),
                },
                None => None,
            };
            let registration = self.register_waiter();
            if ready() {
                return Ok(true);
            }
            registration.wait(timeout)?;
            drop(registration);
            if ready() {
                return Ok(true);
            }
        }
    }
}

/// Makes a poll give its CPU away now and then: after [`Pacer::FIRST`] of polling the polling thread yields
/// (`sched_yield`), and again after twice as long each time, up to [`Pacer::LONGEST`] apart. A peer that can only
/// run on this CPU (both pinned to one, or put there by the scheduler while they slept in turn) then writes the
/// message being waited for instead of waiting for this thread's time slice to end: with both processes of a 1 MiB
/// block ping-pong pinned to one CPU a round trip took 1.07-1.11 ms one way without (a receiver woken early polled
/// through the write it was preempting for all of `WRITE_POLL`), 63-76 µs with. A yield costs about 0.6 µs on a
/// 2-core VM when nobody else wants the CPU; polls of small messages mostly end before the first, and the long
/// polls for large messages make a few.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    next: Instant,
    gap: Duration,
    gave_way: bool,
}

impl Pacer {
    /// Polling before the first yield.
    pub const FIRST: Duration = Duration::from_micros(5);
    /// The longest polling between two yields.
    pub const LONGEST: Duration = Duration::from_micros(160);
    /// A yield that took longer than this ran another thread in between (the call alone takes under 1 µs).
    pub const GAVE_WAY: Duration = Duration::from_micros(2);

    /// The pacing of a poll that began at `now`.
    pub fn new(now: Instant) -> Pacer {
        Pacer { next: now + Self::FIRST, gap: Self::FIRST, gave_way: false }
    }

    /// Called between polls with the time: yields when its time has come.
    #[inline]
    pub fn pause(&mut self, now: Instant) {
        if now >= self.next {
            self.give_way(now);
        }
    }

    #[cold]
    fn give_way(&mut self, now: Instant) {
        std::thread::yield_now();
        let after = Instant::now();
        self.gave_way |= after.saturating_duration_since(now) > Self::GAVE_WAY;
        self.gap = (self.gap * 2).min(Self::LONGEST);
        self.next = after + self.gap;
    }

    /// Whether a yield ran another thread: what the poll waited for may have needed this CPU.
    pub fn gave_way(&self) -> bool {
        self.gave_way
    }
}

/// Polls `ready` for up to `spin` (and not past `deadline`), paced by a [`Pacer`]; whether it became true, and
/// whether the poll gave its CPU to another thread.
fn poll_for(ready: &mut impl FnMut() -> bool, spin: Duration, deadline: Option<Instant>) -> (bool, bool) {
    let start = Instant::now();
    let end = deadline.map_or(start + spin, |d| d.min(start + spin));
    let mut pacer = Pacer::new(start);
    let mut n: u32 = 0;
    loop {
        if ready() {
            return (true, pacer.gave_way());
        }
        n = n.wrapping_add(1);
        // A clock read every 16 polls (a poll is a few loads; the clock costs ~20 ns).
        if n.is_multiple_of(16) {
            let now = Instant::now();
            if now >= end {
                return (false, pacer.gave_way());
            }
            pacer.pause(now);
        }
        std::hint::spin_loop();
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!("shm_ring: cannot unlink {}: {e}", self.path.display());
        }
    }
}

/// The doorbells one publisher rings (one per subscriber process), with what it needs to know cheaply whether all of
/// them are spin-only (then a send neither fences nor looks for waiters, module comment).
///
/// Asking sixteen doorbells' `spin_only` on every send made a send to sixteen spin-only processes cost 1.7-2.0x a
/// send to one (sixteen mappings' lines and pages). Instead, with this process's own doorbell given (its name in
/// the ring's header, `RingWriter::announce_doorbell`), a send asks one word of it, `spin_ends`, which every
/// subscriber process that reads our rings bumps before the barrier that ends its spin-only
/// ([`Doorbell::note_ringer`]): while that word is what it was when all flags last read 1, they still do. The
/// store-buffering argument is the flag's (module comment), on the word. Without our doorbell, the flags are read,
/// from one array.
#[derive(Debug, Default)]
pub struct Ringers {
    bells: Vec<Arc<DoorbellRemote>>,
    /// `spin_only` of each of `bells`, in the same order; empty when one of them may never skip the fence.
    flags: Vec<*const AtomicU32>,
    /// This process's doorbell (kept alive for the pointer) and its `spin_ends` word.
    own: Option<(Arc<Doorbell>, *const AtomicU32)>,
    /// The value of `spin_ends` with which all flags last read 1; [`UNKNOWN`] before, [`NEVER`] once a flag read 0
    /// (a doorbell never becomes spin-only again).
    all_spin_at: AtomicU64,
}

const UNKNOWN: u64 = u64::MAX;
const NEVER: u64 = u64::MAX - 1;

// SAFETY: the pointers address atomics in mappings that `bells` and `own` keep alive (never remapped); atomics may
// be read from any thread.
unsafe impl Send for Ringers {}
// SAFETY: as for Send: shared access only loads and stores atomics.
unsafe impl Sync for Ringers {}

impl Ringers {
    /// The doorbells `bells`; `own`: this process's doorbell, if it is named in the ring's header (the subscriber
    /// processes then tell it when they stop being spin-only).
    pub fn new(bells: Vec<Arc<DoorbellRemote>>, own: Option<Arc<Doorbell>>) -> Ringers {
        let flags = if bells.iter().all(|b| b.barriers) {
            bells.iter().map(|b| std::ptr::from_ref(&header(&b.map).spin_only)).collect()
        } else {
            Vec::new()
        };
        let own = own.map(|d| {
            let word = std::ptr::from_ref(d.spin_ends());
            (d, word)
        });
        Ringers { bells, flags, own, all_spin_at: AtomicU64::new(UNKNOWN) }
    }

    /// Fences, then wakes every doorbell that needs it: what a thread does that the publisher handed these doorbells
    /// over to, once everything the publisher published before is visible to it (it took the publisher's mark with
    /// `Acquire`). Returns how many were woken.
    pub fn wake_sleepers(&self) -> usize {
        // StoreLoad between the publish (visible here) and the waiter checks: pairs with each waiter's fence as the
        // publisher's own would (see the doorbell protocol).
        fence(Ordering::SeqCst);
        self.wake_needing()
    }

    /// Wakes every doorbell that [needs a wake](DoorbellRemote::needs_wake), without the fence: call after publishing
    /// and `fence(SeqCst)`. Returns how many were woken.
    #[inline]
    pub fn wake_needing(&self) -> usize {
        self.bells.iter().filter(|b| b.needs_wake() && b.wake()).count()
    }

    /// The doorbells.
    pub fn bells(&self) -> &[Arc<DoorbellRemote>] {
        &self.bells
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.bells.is_empty()
    }

    /// [`DoorbellRemote::spin_only`] of all of them: true means the publish needs no fence and wakes nobody. Call
    /// after publishing, in program order (no fence needed).
    #[inline]
    pub fn all_spin_only(&self) -> bool {
        if self.flags.len() != self.bells.len() {
            return false;
        }
        let at = self.all_spin_at.load(Ordering::Relaxed);
        if at == NEVER {
            return false;
        }
        // The publish stays before these loads in the compiled code (see `DoorbellRemote::spin_only`).
        compiler_fence(Ordering::SeqCst);
        let Some((_, word)) = &self.own else { return self.flags_all_one() };
        // SAFETY: see the Send impl: the word is in the mapping of `own`'s doorbell.
        let ends = u64::from(unsafe { &**word }.load(Ordering::Relaxed));
        if ends == at {
            return true;
        }
        self.recheck(ends)
    }

    /// `spin_ends` moved (or was never seen): asks the flags, and remembers the answer.
    #[cold]
    #[inline(never)]
    fn recheck(&self, ends: u64) -> bool {
        // A bump we read was made after its process stored 0 in its flag: read the flags after the word.
        fence(Ordering::Acquire);
        let all = self.flags_all_one();
        self.all_spin_at.store(if all { ends } else { NEVER }, Ordering::Relaxed);
        all
    }

    fn flags_all_one(&self) -> bool {
        // SAFETY: see the Send impl: each pointer addresses a live atomic of a mapping `bells` holds.
        self.flags.iter().fold(true, |all, f| all & (unsafe { &**f }.load(Ordering::Relaxed) == 1))
    }
}

/// A registered waiter of a [`Doorbell`]; deregisters on drop.
#[derive(Debug)]
pub struct WaiterRegistration<'a> {
    bell: &'a Doorbell,
    observed: u32,
}

impl WaiterRegistration<'_> {
    /// The `seq` value loaded at registration.
    pub fn observed_seq(&self) -> u32 {
        self.observed
    }

    /// Sleeps until rung (after registration), the timeout, or a signal.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<WakeReason, DoorbellWaitError> {
        self.bell.wait(self.observed, timeout)
    }
}

impl Drop for WaiterRegistration<'_> {
    fn drop(&mut self) {
        shared_words(&self.bell.map).deregister();
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`: a fence on every CPU running a thread of a registered process.
fn global_barrier() {
    if let Err(e) = membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) {
        // Offered when the doorbell was made, refused now: a ringer's store still in flight reaches memory within
        // microseconds (a CPU that stops, a descheduled vCPU included, drains its store buffer first).
        tracing::warn!("shm_ring: membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) failed ({e}); waiting 1 ms instead");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The ringing side: a publisher's handle on a subscriber process's doorbell.
#[derive(Debug)]
pub struct DoorbellRemote {
    path: PathBuf,
    /// Raw and guarded: the owner and other publishers write its words, and could truncate the file.
    map: PeerMap,
    /// Kept open to ask whether the owner still holds its owner lock ([`DoorbellRemote::owner_alive`]).
    file: std::fs::File,
    owner_pid: u32,
    /// This process is registered for the owners' barriers: it may skip the fence while the owner is spin-only.
    barriers: bool,
}

impl DoorbellRemote {
    /// Opens the doorbell at `name` (a path given by [`Doorbell::name`]).
    pub fn open(name: &str) -> Result<DoorbellRemote, DoorbellOpenError> {
        let path = Path::new(name);
        let owner = path
            .file_name()
            .and_then(|f| f.to_str())
            .filter(|f| f.starts_with("shoal_db_"))
            .and_then(segment::owner_pid_of)
            .ok_or_else(|| DoorbellOpenError::BadName(name.to_owned()))?;
        let io = |op| move |source| DoorbellOpenError::Io { op, path: path.to_owned(), source };
        // The path came from another process: only /dev/shm, no symlink, no FIFO.
        let (file, size) = crate::sys::open_peer_file(path, true, false).map_err(io("open"))?;
        if size < DOORBELL_FILE_SIZE as u64 {
            return Err(DoorbellOpenError::TooSmall { path: path.to_owned(), size });
        }
        // Raw shared mapping of the doorbell, accessed only through atomics, guarded against truncation.
        let map = PeerMap::new(MmapOptions::new().len(DOORBELL_FILE_SIZE).map_raw(&file).map_err(io("mmap"))?);
        let h = header(&map);
        let magic = h.magic.load(Ordering::Acquire);
        let version = h.version.load(Ordering::Relaxed);
        if magic != DOORBELL_MAGIC || version != DOORBELL_VERSION || h.owner_pid.load(Ordering::Relaxed) != owner {
            return Err(DoorbellOpenError::BadHeader { path: path.to_owned(), magic, version });
        }
        Ok(DoorbellRemote { path: path.to_owned(), map, file, owner_pid: owner, barriers: registered_for_barriers() })
    }

    /// Path of the doorbell.
    pub fn name(&self) -> &str {
        segment::path_str(&self.path)
    }

    /// Process id of the subscriber owning the doorbell.
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// Whether the owning process still lives: it holds the owner lock on its doorbell (`sys::OwnerLock`, asked
    /// with `F_OFD_GETLK`), which the kernel releases when the process dies, whatever pid namespace it is in (its
    /// pid may mean another process here, or none). Only where the kernel has no OFD locks is the pid asked.
    pub fn owner_alive(&self) -> bool {
        crate::sys::owner_holds(&self.file).unwrap_or_else(|_| segment::pid_alive(self.owner_pid))
    }

    /// Call after publishing: wakes the subscriber's sleeping threads, if any. Without waiters
    /// this is one fence and one load (no syscall), and only a load while the owner is [spin
    /// only](Self::spin_only). Returns whether a wake was issued.
    #[inline]
    pub fn ring(&self) -> bool {
        !self.spin_only() && shared_words(&self.map).ring()
    }

    /// Whether no thread of the owning process has ever registered as a waiter (module comment): then nothing is
    /// to be woken and a ringer needs no fence. Call after publishing, in program order (no fence needed); false
    /// means: fence, then ask [`needs_wake`](Self::needs_wake).
    #[inline]
    pub fn spin_only(&self) -> bool {
        // The publish stays before this load in the compiled code (the barrier that ends `spin_only` orders it in
        // the CPU).
        compiler_fence(Ordering::SeqCst);
        self.barriers && header(&self.map).spin_only.load(Ordering::Relaxed) == 1
    }

    /// Tells the owning process that a process whose rings it reads stopped being spin-only
    /// ([`Doorbell::note_ringer`]).
    fn tell_spin_ended(&self) {
        header(&self.map).spin_ends.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether a thread of the owning process is registered as (about to be) sleeping and no ringer has woken it
    /// since it registered. Call after publishing and `fence(SeqCst)`; if true, the doorbell must be rung
    /// ([`wake`](Self::wake), or by the thread it is handed over to: [`Ringers::wake_sleepers`]).
    #[inline]
    pub fn needs_wake(&self) -> bool {
        shared_words(&self.map).needs_wake()
    }

    /// Wakes the owning process's sleeping threads (one syscall) unless another ringer has since they registered,
    /// without checking for waiters first. Returns whether it woke them.
    pub fn wake(&self) -> bool {
        shared_words(&self.map).wake()
    }
}

/// The doorbell protocol of this module on a process-private futex word: threads of one process wait on it and
/// other threads of that process ring it. No syscall for the ringer while nobody sleeps.
#[derive(Debug)]
pub struct LocalBell {
    seq: AtomicU32,
    waiters: AtomicU32,
    rung: AtomicU32,
}

impl Default for LocalBell {
    fn default() -> LocalBell {
        LocalBell { seq: AtomicU32::new(0), waiters: AtomicU32::new(0), rung: AtomicU32::new(RUNG_ARMED) }
    }
}

impl LocalBell {
    /// A bell nobody waits on.
    pub fn new() -> LocalBell {
        LocalBell::default()
    }

    /// Marks the calling thread as a waiter until the guard is dropped. After this, re-check the condition; if it
    /// is still false, call [`LocalWaiter::wait`].
    pub fn register_waiter(&self) -> LocalWaiter<'_> {
        LocalWaiter { bell: self, observed: self.words().register() }
    }

    fn words(&self) -> Words<'_> {
        Words { seq: &self.seq, waiters: &self.waiters, rung: &self.rung, scope: Scope::Private }
    }

    /// Call after making the condition true: wakes the waiters, if any. Returns whether a wake was issued.
    pub fn ring(&self) -> bool {
        self.words().ring()
    }
}

/// A registered waiter of a [`LocalBell`]; deregisters on drop.
#[derive(Debug)]
pub struct LocalWaiter<'a> {
    bell: &'a LocalBell,
    observed: u32,
}

impl LocalWaiter<'_> {
    /// Sleeps until rung (after registration), the timeout, or a signal.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<WakeReason, DoorbellWaitError> {
        self.bell.words().wait(self.observed, timeout)
    }
}

impl Drop for LocalWaiter<'_> {
    fn drop(&mut self) {
        self.bell.words().deregister();
    }
}

#[cfg(test)]
mod tests {
    use super::{PollState, poll_for};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// The poller and the thread it waits for may only run on one CPU: the poll yields to it (without the pacing
    /// the flag came only when the poller's time slice ended, and no yield ran anybody), and says so.
    #[test]
    fn a_poll_gives_its_cpu_to_a_writer_that_shares_it() {
        // SAFETY: sched_getcpu takes no argument and only returns a number.
        let Ok(cpu) = usize::try_from(unsafe { libc::sched_getcpu() }) else { return };
        let (pinned, polling, flag) =
            (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        // The writer is on the CPU, never sleeping, before the poller comes: only a yield of the poller (or the end
        // of its time slice) lets it run.
        let writer = {
            let (pinned, polling, flag) = (Arc::clone(&pinned), Arc::clone(&polling), Arc::clone(&flag));
            std::thread::spawn(move || {
                crate::sys::set_current_thread_affinity(&[cpu]).expect("pin the writer");
                pinned.store(true, Ordering::SeqCst);
                while !polling.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                // The message's copy, then its publication.
                let (src, mut dst) = (vec![1u8; 1 << 20], vec![0u8; 1 << 20]);
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&dst);
                flag.store(true, Ordering::SeqCst);
            })
        };
        while !pinned.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let poller = std::thread::spawn(move || {
            crate::sys::set_current_thread_affinity(&[cpu]).expect("pin the poller");
            polling.store(true, Ordering::SeqCst);
            poll_for(&mut || flag.load(Ordering::SeqCst), Duration::from_secs(5), None)
        });
        let (found, gave_way) = poller.join().expect("poller");
        writer.join().expect("writer");
        assert!(found, "the flag never came");
        assert!(gave_way, "the writer on the poller's CPU ran only when the poll did not yield to it");
    }

    /// Waits until the next probe (the probing wait included) of a thread that is not streaming.
    fn waits_to_probe(poll: &mut PollState) -> u32 {
        (1..=PollState::PROBE_EVERY).find(|_| poll.should_poll()).expect("a probe within PROBE_EVERY waits")
    }

    #[test]
    fn only_polls_that_give_way_in_a_row_end_a_stream() {
        let mut poll = PollState::new();
        poll.poll_ended(true, false);
        assert!(poll.streaming);
        // Another thread ran once while the poll yielded: the stream goes on, and a poll that needs no yield resets.
        poll.poll_ended(true, true);
        assert!(poll.streaming);
        poll.poll_ended(true, false);
        for _ in 1..PollState::GAVE_WAY_IN_A_ROW {
            poll.poll_ended(true, true);
            assert!(poll.streaming);
        }
        // The writer needs this CPU: its messages count as none, until one comes without a yield.
        poll.poll_ended(true, true);
        assert!(!poll.streaming);
        poll.poll_ended(true, true);
        assert!(!poll.streaming);
        poll.poll_ended(true, false);
        assert!(poll.streaming);
    }

    #[test]
    fn probes_back_off_to_every_64th_wait_and_stay_there() {
        let mut poll = PollState::new();
        // A fresh state's probe that finds nothing leaves it probing every 64th wait.
        assert_eq!(waits_to_probe(&mut poll), PollState::PROBE_EVERY);
        poll.polled(false);
        assert_eq!(waits_to_probe(&mut poll), PollState::PROBE_EVERY);
        poll.polled(false);
        // A stream, then its end: probes at the 2nd wait, then the 4th, ... up to the 64th, and no further apart.
        poll.polled(true);
        assert!(poll.should_poll(), "streaming: every wait polls");
        poll.polled(false);
        for expected in [2, 4, 8, 16, 32, 64, 64] {
            assert_eq!(waits_to_probe(&mut poll), expected);
            poll.polled(false);
        }
    }
}
