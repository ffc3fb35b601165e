//! The baseline: a plain single-producer single-consumer ring in a /dev/shm file shared by two
//! processes, with no middleware. The writer copies the payload into a slot and publishes it by
//! advancing `write_idx`; the reader copies it out and frees the slot by advancing `read_idx`.
//! A full ring makes the writer wait (no overwrite). In block mode the reader sleeps on a futex
//! doorbell that the writer rings only when a reader announced itself in `waiters`; while messages
//! come back to back it polls up to 10 µs before it does, by the rule of shoal's block mode
//! ([`StreamPoll`]), so that block-mode ratios compare rings, not wait strategies.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use memmap2::MmapMut;

pub(crate) const MAGIC: u64 = 0x5348_4f41_4c42_4153; // "SHOALBAS"

/// How the reader waits for a message (and how a writer waits on a full ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Busy spin.
    Spin,
    /// Sleep on the ring's futex doorbell, after a poll of up to 10 µs while messages come back to back (the writer
    /// yields while the ring is full).
    Block,
}

/// What can go wrong with a ring.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating, sizing, opening or mapping the ring file failed.
    #[error("{context}")]
    Io {
        /// What was done, with the path and a hint.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a ring file of this crate, or its header does not fit its size.
    #[error("{0}")]
    BadFile(String),
    /// The requested slot size or slot count makes the ring larger than the address space.
    #[error("a ring of {slot_count} slots of {slot_size} bytes overflows")]
    TooBig {
        /// Slots asked for.
        slot_count: u64,
        /// Payload bytes per slot asked for.
        slot_size: usize,
    },
    /// A message larger than a slot.
    #[error("message of {len} bytes does not fit a {slot_size}-byte slot")]
    MessageTooLarge {
        /// The message's length.
        len: usize,
        /// The ring's slot size.
        slot_size: usize,
    },
    /// The ring stayed full for the whole timeout of a write.
    #[error("baseline ring stayed full for {0:?}: the reading process is gone or stuck")]
    Full(Duration),
    /// No message arrived within the timeout of a read.
    #[error("no message within {0:?}: the writing process is gone or stuck")]
    TimedOut(Duration),
    /// A slot's length word is larger than the slot.
    #[error("corrupt baseline ring: slot length {len} > slot size {slot_size}")]
    Corrupt {
        /// The length word read.
        len: u64,
        /// The ring's slot size.
        slot_size: usize,
    },
}

pub(crate) fn io_error(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { context, source }
}

/// Slots of a ring made by [`Ring::create`]: the fewest a grown shoal ring keeps. `shoal perf --baseline` uses
/// [`Ring::create_with`] instead, with the slot count of shoal's ring for the message size measured, so that both
/// rings are equally deep (the baseline writer waits when full, so its depth bounds how far it runs ahead).
pub const SLOT_COUNT: u64 = 16;

/// How long a spin-mode writer spins on a full ring before it yields the CPU on every check: the
/// spinning reader frees a slot within nanoseconds unless it is descheduled, possibly on this
/// very core (a loaded 2-core machine), and then spinning on would only keep it from running.
pub(crate) const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(50);

/// Polls a spin-mode receive makes before it reads the clock for its deadline, as shoal's busy spin does
/// (`Subscriber::BUSY_SPIN_POLLS_BEFORE_CLOCK`): a reply that comes within them finds the thread polling.
pub const SPIN_POLLS_BEFORE_CLOCK: u32 = 64;

/// Polls `ready` up to [`SPIN_POLLS_BEFORE_CLOCK`] times; whether it became true.
pub(crate) fn spin_before_clock(ready: impl Fn() -> bool) -> bool {
    for _ in 0..SPIN_POLLS_BEFORE_CLOCK {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// How long a block-mode reader polls before it sleeps while messages come back to back ([`StreamPoll`]); equal to
/// shoal's `PollState::SPIN` (a test of `shoal perf` checks it).
pub const STREAM_POLL_SPIN: Duration = Duration::from_micros(10);
/// While they do not, one wait in this many polls first ([`StreamPoll`]); equal to shoal's `PollState::PROBE_EVERY`.
pub const STREAM_POLL_PROBE_EVERY: u32 = 64;
/// How long a probe (a poll while not streaming) of a thread that published since its previous wait polls instead
/// (it waits for a reply); equal to shoal's `PollState::REPLY_SPIN`.
pub const STREAM_POLL_REPLY_SPIN: Duration = Duration::from_micros(50);
/// Added to a replying thread's poll per MiB it wrote since its previous wait; equal to shoal's
/// `PollState::REPLY_SPIN_PER_MIB`.
pub const STREAM_POLL_REPLY_SPIN_PER_MIB: Duration = Duration::from_micros(100);
/// The longest a replying thread's poll grows to; equal to shoal's `PollState::REPLY_SPIN_MAX`.
pub const STREAM_POLL_REPLY_SPIN_MAX: Duration = Duration::from_millis(2);
/// A poll yields its CPU after this much polling (a peer that can only run on this CPU gets it), and again after
/// twice as long each time; equal to shoal's `Pacer::FIRST`.
pub const STREAM_POLL_YIELD_FIRST: Duration = Duration::from_micros(5);
/// The longest polling between two yields; equal to shoal's `Pacer::LONGEST`.
pub const STREAM_POLL_YIELD_LONGEST: Duration = Duration::from_micros(160);
/// Polls in a row whose message came only after a yield ran another thread from which on a found message counts
/// as none; equal to shoal's `PollState::GAVE_WAY_IN_A_ROW`.
pub const STREAM_POLL_GAVE_WAY_IN_A_ROW: u32 = 4;
/// A yield that took longer ran another thread; equal to shoal's `Pacer::GAVE_WAY`.
pub const STREAM_POLL_GAVE_WAY: Duration = Duration::from_micros(2);

/// How much longer a thread that wrote `bytes` since its previous wait polls for the reply (shoal's
/// `PollState::reply_window`).
pub fn reply_window(bytes: u64) -> Duration {
    let per_mib = STREAM_POLL_REPLY_SPIN_PER_MIB.as_nanos() as u64;
    Duration::from_nanos(bytes.saturating_mul(per_mib) >> 20).min(STREAM_POLL_REPLY_SPIN_MAX)
}

thread_local! {
    /// Messages and bytes this thread has written to a ring (see [`StreamPoll`]).
    static PUBLISHED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counts a message of `bytes` written by the calling thread (a wait after one waits for a reply: [`StreamPoll`]).
pub(crate) fn note_publish(bytes: usize) {
    PUBLISHED.with(|c| {
        let (n, b) = c.get();
        c.set((n.wrapping_add(1), b.wrapping_add(bytes as u64)));
    });
}

/// Block mode's poll before a reader sleeps, the rule of shoal's block mode (its doorbell's `wait_until`), so that
/// a block-mode comparison is of rings, not of wait strategies: while messages come back to back (the last poll
/// found one), poll up to 10 µs before sleeping; otherwise poll first in one wait of 64 (to notice a stream), and
/// right after a stream ended in the 2nd, then 4th, ... wait; a probe of a thread that wrote a message since its
/// previous wait polls up to 50 µs instead, and a replying thread's poll grows by [`reply_window`] (100 µs per MiB
/// it wrote), as a probe and while streaming. A poll yields its CPU after 5 µs ([`STREAM_POLL_YIELD_FIRST`]) and
/// again after twice as long each time; from the 4th poll in a row whose message came only after a yield ran another
/// thread, a found message counts as none.
#[derive(Debug, Default)]
pub(crate) struct StreamPoll {
    streaming: std::cell::Cell<bool>,
    since_probe: std::cell::Cell<u32>,
    /// Waits between probes while not streaming (0: [`STREAM_POLL_PROBE_EVERY`]).
    interval: std::cell::Cell<u32>,
    published_seen: std::cell::Cell<(u64, u64)>,
    /// Polls in a row whose message came only after a yield ran another thread.
    gave_way: std::cell::Cell<u32>,
}

impl StreamPoll {
    /// Polls `ready` first if this wait should (see the type); whether it became true meanwhile.
    pub(crate) fn poll(&self, ready: impl Fn() -> bool) -> bool {
        let published = PUBLISHED.with(std::cell::Cell::get);
        let seen = self.published_seen.replace(published);
        let replied = (published.0 != seen.0).then(|| published.1.wrapping_sub(seen.1));
        let interval = match self.interval.get() {
            0 => STREAM_POLL_PROBE_EVERY,
            i => i,
        };
        if !self.streaming.get() {
            let n = self.since_probe.get() + 1;
            if n < interval {
                self.since_probe.set(n);
                return false;
            }
        }
        let probe = !self.streaming.get();
        let window = match replied {
            Some(bytes) if probe => STREAM_POLL_REPLY_SPIN + reply_window(bytes),
            Some(bytes) => STREAM_POLL_SPIN + reply_window(bytes),
            None => STREAM_POLL_SPIN,
        };
        let start = Instant::now();
        let end = start + window;
        let mut gap = STREAM_POLL_YIELD_FIRST;
        let mut next_yield = start + gap;
        let mut gave_way = false;
        let mut n = 0u32;
        let found = loop {
            if ready() {
                break true;
            }
            n = n.wrapping_add(1);
            if n.is_multiple_of(16) {
                let now = Instant::now();
                if now >= end {
                    break false;
                }
                if now >= next_yield {
                    std::thread::yield_now();
                    let after = Instant::now();
                    gave_way |= after.saturating_duration_since(now) > STREAM_POLL_GAVE_WAY;
                    gap = (gap * 2).min(STREAM_POLL_YIELD_LONGEST);
                    next_yield = after + gap;
                }
            }
            std::hint::spin_loop();
        };
        // Messages that came only after a yield ran another thread, several polls in a row, were written on this
        // CPU: as if none had come.
        if found {
            self.gave_way.set(if gave_way { self.gave_way.get().saturating_add(1) } else { 0 });
        }
        let counts = found && self.gave_way.get() < STREAM_POLL_GAVE_WAY_IN_A_ROW;
        let interval = if counts {
            1
        } else if self.streaming.get() {
            2
        } else {
            (interval * 2).min(STREAM_POLL_PROBE_EVERY)
        };
        self.interval.set(interval);
        self.streaming.set(counts);
        self.since_probe.set(0);
        found
    }
}

/// Offset of a slot's payload inside the slot (the slot starts with its length word).
const SLOT_DATA_OFFSET: usize = 64;

/// Control block at the start of the ring file; writer and reader fields on separate cache lines.
#[repr(C)]
#[derive(Debug)]
struct Header {
    magic: AtomicU64,
    slot_count: AtomicU64,
    slot_size: AtomicU64,
    _pad0: [u64; 5],
    /// Messages published so far (written by the writer).
    write_idx: AtomicU64,
    /// Futex word: bumped by the writer when a reader waits.
    doorbell: AtomicU32,
    _pad1: [u32; 13],
    /// Messages consumed so far (written by the reader).
    read_idx: AtomicU64,
    /// Readers sleeping (or about to sleep) on `doorbell`.
    waiters: AtomicU32,
    _pad2: [u32; 13],
}

const HEADER_SIZE: usize = std::mem::size_of::<Header>();

/// One end of a ring file mapped into this process.
#[derive(Debug)]
pub struct Ring {
    _map: MmapMut,
    base: *mut u8,
    slot_count: u64,
    slot_size: usize,
    stride: usize,
    wait: Wait,
    /// Set on the end that created the file: it is removed on drop.
    unlink: Option<PathBuf>,
    /// The reader's poll before it sleeps (block mode).
    poll: StreamPoll,
}

fn stride_for(slot_size: usize) -> Option<usize> {
    SLOT_DATA_OFFSET.checked_add(slot_size)?.checked_next_multiple_of(64)
}

fn total_size(slot_count: u64, slot_size: usize) -> Option<usize> {
    stride_for(slot_size)?.checked_mul(usize::try_from(slot_count).ok()?)?.checked_add(HEADER_SIZE)
}

pub(crate) fn map_file(file: &File, path: &Path) -> Result<MmapMut, Error> {
    // SAFETY: the file is a ring file of this tool; the other process only changes it through
    // the atomics of the header and slots, and slot contents are only accessed under the SPSC
    // protocol (see `write_with` / `read_with`).
    unsafe { MmapMut::map_mut(file) }.map_err(io_error(format!("mmap of {}", path.display())))
}

impl Ring {
    /// Creates the ring file (it must not exist) with slots of `slot_size` payload bytes.
    pub fn create(path: &Path, slot_size: usize, wait: Wait) -> Result<Ring, Error> {
        Ring::create_with(path, SLOT_COUNT, slot_size, wait)
    }

    /// Creates the ring file (it must not exist) with `slot_count` slots (at least 1) of `slot_size` payload bytes.
    pub fn create_with(path: &Path, slot_count: u64, slot_size: usize, wait: Wait) -> Result<Ring, Error> {
        let slot_count = slot_count.max(1);
        let total = total_size(slot_count, slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_error(format!("creating {} (is /dev/shm mounted and writable?)", path.display())))?;
        let mut ring = (|| {
            file.set_len(total as u64)
                .map_err(io_error(format!("sizing {} to {total} bytes (is /dev/shm full?)", path.display())))?;
            let map = map_file(&file, path)?;
            Ring::from_map(map, slot_count, slot_size, wait)
        })()
        .inspect_err(|_| {
            let _ = fs::remove_file(path);
        })?;
        ring.unlink = Some(path.to_path_buf());
        let h = ring.header();
        h.slot_count.store(slot_count, Ordering::Relaxed);
        h.slot_size.store(slot_size as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(ring)
    }

    /// Opens a ring file created by the other process.
    pub fn open(path: &Path, wait: Wait) -> Result<Ring, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_error(format!("opening ring file {}", path.display())))?;
        let len = file.metadata().map_err(io_error(format!("reading the size of {}", path.display())))?.len();
        if len < HEADER_SIZE as u64 {
            return Err(Error::BadFile(format!("{} is {len} bytes, too small for a ring header", path.display())));
        }
        let map = map_file(&file, path)?;
        let mut ring = Ring::from_map(map, 0, 0, wait)?;
        let h = ring.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(Error::BadFile(format!("{} is not a baseline ring file (bad magic)", path.display())));
        }
        let count = h.slot_count.load(Ordering::Relaxed);
        let size = usize::try_from(h.slot_size.load(Ordering::Relaxed))
            .map_err(|_| Error::BadFile(format!("{}: slot size too large", path.display())))?;
        match total_size(count, size) {
            Some(t) if count > 0 && t as u64 <= len => {}
            _ => {
                return Err(Error::BadFile(format!(
                    "{}: header says {count} slots of {size} bytes, which does not fit the file",
                    path.display()
                )));
            }
        }
        ring.slot_count = count;
        ring.slot_size = size;
        ring.stride = stride_for(size).ok_or(Error::TooBig { slot_count: count, slot_size: size })?;
        Ok(ring)
    }

    fn from_map(mut map: MmapMut, slot_count: u64, slot_size: usize, wait: Wait) -> Result<Ring, Error> {
        if map.len() < HEADER_SIZE {
            return Err(Error::BadFile("mapping too small for a ring header".into()));
        }
        let base = map.as_mut_ptr();
        let stride = stride_for(slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        Ok(Ring { _map: map, base, slot_count, slot_size, stride, wait, unlink: None, poll: StreamPoll::default() })
    }

    fn header(&self) -> &Header {
        // SAFETY: `base` is the page-aligned start of a live mapping of at least HEADER_SIZE
        // bytes (checked in `from_map`), and Header consists of atomics only, so shared access
        // (also from the other process) is sound.
        unsafe { &*(self.base as *const Header) }
    }

    /// The length word of slot `i` (`i < slot_count`).
    fn slot_len(&self, i: u64) -> &AtomicU64 {
        let off = HEADER_SIZE + (i % self.slot_count) as usize * self.stride;
        // SAFETY: `off + 8` is inside the mapping (its size was checked against slot_count and
        // stride), 64-byte aligned, and the word is only accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn slot_data(&self, i: u64) -> *mut u8 {
        let off = HEADER_SIZE + (i % self.slot_count) as usize * self.stride + SLOT_DATA_OFFSET;
        self.base.wrapping_add(off)
    }

    /// Slots in the ring.
    pub fn slot_count(&self) -> u64 {
        self.slot_count
    }

    /// Largest payload a slot holds.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Writes one message of `len` bytes: `f` fills the slot in place, then it is published.
    /// Waits (up to `timeout`) while the ring is full.
    pub fn write_with<R>(&mut self, len: usize, timeout: Duration, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, Error> {
        if len > self.slot_size {
            return Err(Error::MessageTooLarge { len, slot_size: self.slot_size });
        }
        let h = self.header();
        let w = h.write_idx.load(Ordering::Relaxed);
        let start = Instant::now();
        let mut spins = 0u32;
        let mut yielding = self.wait == Wait::Block;
        while w.wrapping_sub(h.read_idx.load(Ordering::Acquire)) >= self.slot_count {
            spins = spins.wrapping_add(1);
            // A full ring is not a receive wait. In spin mode the reader spins on the other core
            // and frees a slot within nanoseconds: spin (a yield would hand the core to any other
            // runnable process for a whole time slice); yield only once the reader seems
            // descheduled. In block mode, yield at once.
            if yielding {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            if spins.is_multiple_of(256) {
                let waited = start.elapsed();
                yielding |= waited > SPIN_BEFORE_YIELD;
                if waited > timeout {
                    return Err(Error::Full(timeout));
                }
            }
        }
        // SAFETY: slot `w` is free: the reader has consumed every index below `w - slot_count + 1`
        // (checked above with Acquire), and this process is the only writer of this ring, so no
        // one else touches these `len <= slot_size` bytes until `write_idx` passes `w`.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.slot_data(w), len) };
        let r = f(buf);
        self.slot_len(w).store(len as u64, Ordering::Relaxed);
        h.write_idx.store(w + 1, Ordering::Release);
        note_publish(len);
        fence(Ordering::SeqCst);
        if h.waiters.load(Ordering::Relaxed) > 0 {
            h.doorbell.fetch_add(1, Ordering::SeqCst);
            futex_wake(&h.doorbell);
        }
        Ok(r)
    }

    /// Reads the next message: `f` sees the slot in place, then the slot is freed.
    pub fn read_with<R>(&mut self, timeout: Duration, f: impl FnOnce(&[u8]) -> R) -> Result<R, Error> {
        let h = self.header();
        let r = h.read_idx.load(Ordering::Relaxed);
        if h.write_idx.load(Ordering::Acquire) == r {
            self.wait_for(r, timeout)?;
        }
        let len = self.slot_len(r).load(Ordering::Relaxed);
        if len > self.slot_size as u64 {
            return Err(Error::Corrupt { len, slot_size: self.slot_size });
        }
        // SAFETY: `write_idx > r` was observed with Acquire, so the writer finished slot `r` and
        // will not touch it until `read_idx` passes `r`; `len <= slot_size` keeps it in the slot.
        let data = unsafe { std::slice::from_raw_parts(self.slot_data(r), len as usize) };
        let out = f(data);
        h.read_idx.store(r + 1, Ordering::Release);
        Ok(out)
    }

    fn wait_for(&self, r: u64, timeout: Duration) -> Result<(), Error> {
        let h = self.header();
        let ready = || h.write_idx.load(Ordering::Acquire) != r;
        if self.wait == Wait::Spin && spin_before_clock(ready) {
            return Ok(());
        }
        let start = Instant::now();
        let timed_out = || Error::TimedOut(timeout);
        match self.wait {
            // A pure busy spin, like shoal's `WaitStrategy::BusySpin`.
            Wait::Spin => {
                let mut spins = 0u32;
                while !ready() {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) && start.elapsed() > timeout {
                        return Err(timed_out());
                    }
                }
            }
            Wait::Block if self.poll.poll(ready) => {}
            Wait::Block => loop {
                h.waiters.fetch_add(1, Ordering::SeqCst);
                let seen = h.doorbell.load(Ordering::SeqCst);
                fence(Ordering::SeqCst);
                if ready() {
                    h.waiters.fetch_sub(1, Ordering::SeqCst);
                    return Ok(());
                }
                let left = timeout.saturating_sub(start.elapsed());
                if left.is_zero() {
                    h.waiters.fetch_sub(1, Ordering::SeqCst);
                    return Err(timed_out());
                }
                futex_wait(&h.doorbell, seen, left.min(Duration::from_millis(100)));
                h.waiters.fetch_sub(1, Ordering::SeqCst);
                if ready() {
                    return Ok(());
                }
            },
        }
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if let Some(p) = &self.unlink {
            let _ = fs::remove_file(p);
        }
    }
}

/// FUTEX_WAIT without the private flag: the word lives in memory shared between processes.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts =
        libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a valid, aligned u32 that outlives the call; the timeout pointer is valid;
    // FUTEX_WAIT only reads the word. EAGAIN/ETIMEDOUT/EINTR are handled by the caller's re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access memory beyond it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32);
    }
}

/// Paths of the two rings of one baseline session (`<prefix>_ping`: main to peer, `_pong`: back).
pub fn ring_paths(prefix: &str) -> (PathBuf, PathBuf) {
    (PathBuf::from(format!("{prefix}_ping")), PathBuf::from(format!("{prefix}_pong")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn header_layout() {
        assert_eq!(HEADER_SIZE, 192);
        assert_eq!(offset_of!(Header, magic), 0);
        assert_eq!(offset_of!(Header, slot_count), 8);
        assert_eq!(offset_of!(Header, slot_size), 16);
        assert_eq!(offset_of!(Header, write_idx), 64);
        assert_eq!(offset_of!(Header, doorbell), 72);
        assert_eq!(offset_of!(Header, read_idx), 128);
        assert_eq!(offset_of!(Header, waiters), 136);
        assert_eq!(stride_for(100), Some(192));
        assert_eq!(total_size(16, 64), Some(192 + 16 * 128));
    }

    fn tmp(name: &str) -> PathBuf {
        PathBuf::from(format!("/dev/shm/shoal_perf_test_{}_{name}", std::process::id()))
    }

    #[test]
    fn ring_passes_messages_in_order_and_applies_backpressure() {
        for wait in [Wait::Spin, Wait::Block] {
            let p = tmp(&format!("order_{wait:?}"));
            let mut w = Ring::create(&p, 256, wait).unwrap();
            let mut r = Ring::open(&p, wait).unwrap();
            assert_eq!(r.slot_size(), 256);
            for i in 0..SLOT_COUNT {
                w.write_with(100, Duration::from_secs(1), |b| b.fill(i as u8)).unwrap();
            }
            // Full: the writer times out instead of overwriting.
            let e = w.write_with(1, Duration::from_millis(20), |_| ()).unwrap_err();
            assert!(matches!(e, Error::Full(_)) && e.to_string().contains("stayed full"), "{e}");
            for i in 0..SLOT_COUNT {
                let got = r.read_with(Duration::from_secs(1), <[u8]>::to_vec).unwrap();
                assert_eq!(got, vec![i as u8; 100]);
            }
            let e = r.read_with(Duration::from_millis(20), |_| ()).unwrap_err();
            assert!(matches!(e, Error::TimedOut(_)), "{e}");
            let e = w.write_with(257, Duration::from_secs(1), |_| ()).unwrap_err();
            assert!(matches!(e, Error::MessageTooLarge { len: 257, slot_size: 256 }), "{e}");
            drop(w);
            assert!(!p.exists(), "the creator unlinks the file");
        }
    }

    #[test]
    fn blocked_reader_is_woken_by_another_thread() {
        let p = tmp("wake");
        let mut w = Ring::create(&p, 64, Wait::Block).unwrap();
        let p2 = p.clone();
        let reader = std::thread::spawn(move || {
            let mut r = Ring::open(&p2, Wait::Block).unwrap();
            let mut got = Vec::new();
            for _ in 0..1000 {
                got.push(r.read_with(Duration::from_secs(5), |s| (s[..8].to_vec(), s.len())).unwrap());
            }
            got
        });
        for i in 0..1000u64 {
            w.write_with(48, Duration::from_secs(1), |b| b[..8].copy_from_slice(&i.to_le_bytes())).unwrap();
            if i % 100 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let got = reader.join().unwrap();
        for (i, (h, len)) in got.iter().enumerate() {
            assert_eq!(u64::from_le_bytes(h[..8].try_into().unwrap()), i as u64);
            assert_eq!(*len, 48);
        }
    }

    #[test]
    fn open_rejects_foreign_and_truncated_files() {
        let p = tmp("bad");
        fs::write(&p, vec![0u8; 4096]).unwrap();
        let e = Ring::open(&p, Wait::Spin).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
        let mut bytes = vec![0u8; 4096];
        bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[8..16].copy_from_slice(&1000u64.to_le_bytes());
        bytes[16..24].copy_from_slice(&4096u64.to_le_bytes());
        fs::write(&p, &bytes).unwrap();
        let e = Ring::open(&p, Wait::Spin).unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"x").unwrap();
        assert!(Ring::open(&p, Wait::Spin).is_err());
        fs::remove_file(&p).unwrap();
    }
}
