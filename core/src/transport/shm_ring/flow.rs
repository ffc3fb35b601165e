//! Flow control for reliable readers: the writer of a ring with a flow-control timeout waits (spins, then sleeps
//! on a futex in the segment) while a reliable reader is a whole ring behind, for at most that timeout.
//!
//! A reliable reader holds one entry of the segment's reader table ([`ReaderSlot`]): its pid, a token, and its
//! cursor (every sample before it is consumed), stored after each read. The writer keeps the bound up to which it
//! may write without looking (`free_until`: the smallest cursor it saw plus the slot count) and scans the table
//! only when it reaches that bound, so the table costs a comparison per write. Nothing is locked: a reader that
//! dies leaves an entry whose pid is gone, which the writer takes out of flow control at once; a reader that
//! stalls past the timeout is taken out (evicted) and never holds the writer again; a writer that dies blocks
//! nobody (readers never wait for the writer here). Both are counted ([`FlowStats`]).
//!
//! A reader's liveness here is the pid in its entry (`kill(pid, 0)`), unlike the files' liveness elsewhere (their
//! owner's lock, `sys::OwnerLock`): the entry is a few atomics in the writer's segment, with no lock of its own.
//! So a live reader in another pid namespace sharing `/dev/shm`, whose pid means no process here, is taken out of
//! flow control as gone the first time the writer has to wait for it, and a dead one whose pid another process
//! has here holds the writer until the timeout.

use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::doorbell::{futex_wait_shared, futex_wake_shared};
use super::layout::{ReaderSlot, SegmentHeader};
use super::segment::{own_pid, pid_alive};

/// Entry states.
pub(super) const FREE: u32 = 0;
/// Being filled in by a reader (not yet in flow control).
pub(super) const CLAIMING: u32 = 1;
/// In flow control: the writer does not overwrite what the reader has not consumed.
pub(super) const ACTIVE: u32 = 2;
/// Taken out of flow control by the writer (stalled past the timeout); the reader reads on, best effort.
pub(super) const EVICTED: u32 = 3;

/// How long a blocked writer spins before it sleeps.
const SPIN: Duration = Duration::from_micros(20);
/// Longest single sleep of a blocked writer (it re-checks readers' liveness and its deadline after each).
const SLEEP_SLICE: Duration = Duration::from_millis(5);

/// What a writer's flow control did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlowStats {
    /// Writes that had to wait for a reliable reader.
    pub waits: u64,
    /// Time spent waiting, in nanoseconds.
    pub wait_ns: u64,
    /// Reliable readers taken out of flow control because their process was gone.
    pub evicted_dead: u64,
    /// Reliable readers taken out of flow control because they stayed a full ring behind for the whole timeout.
    pub evicted_stalled: u64,
}

impl FlowStats {
    /// Readers taken out of flow control, for either reason.
    pub fn evicted(&self) -> u64 {
        self.evicted_dead + self.evicted_stalled
    }
}

/// The writer's side.
#[derive(Debug)]
pub(super) struct WriterFlow {
    timeout: Duration,
    /// Samples with a smaller sequence can be written without looking at the reader table.
    free_until: u64,
    pub(super) stats: FlowStats,
}

/// The smallest cursor of the entries in flow control.
fn min_cursor(h: &SegmentHeader) -> Option<u64> {
    h.readers
        .iter()
        .filter(|r| r.state.load(Ordering::Acquire) == ACTIVE)
        .map(|r| r.cursor.load(Ordering::Acquire))
        .min()
}

fn evict(r: &ReaderSlot, to: u32) -> bool {
    r.state.compare_exchange(ACTIVE, to, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

impl WriterFlow {
    pub(super) fn new(timeout: Duration) -> WriterFlow {
        WriterFlow { timeout, free_until: 0, stats: FlowStats::default() }
    }

    /// Whether sample `seq` may be written without looking at the readers.
    #[inline]
    pub(super) fn may_write(&self, seq: u64) -> bool {
        seq < self.free_until
    }

    /// A new segment (growth): its table was carried over; look at it before the next write.
    pub(super) fn reset(&mut self) {
        self.free_until = 0;
    }

    /// Waits until writing sample `seq` overwrites nothing a reader in flow control has not consumed, taking dead
    /// readers out at once and stalled ones after the timeout.
    #[cold]
    #[inline(never)]
    pub(super) fn wait(&mut self, h: &SegmentHeader, seq: u64, slot_count: u32, publisher_id: u64) {
        let n = u64::from(slot_count);
        let mut started: Option<Instant> = None;
        loop {
            // Nobody in flow control: look again a ring later (a reader that joins meanwhile starts at or after
            // the current write position, so nothing it needs is overwritten before then).
            let bound = min_cursor(h).unwrap_or(seq);
            if seq < bound.saturating_add(n) {
                self.free_until = bound.saturating_add(n);
                if let Some(t) = started {
                    self.stats.wait_ns = self.stats.wait_ns.saturating_add(t.elapsed().as_nanos() as u64);
                }
                return;
            }
            let now = Instant::now();
            let t0 = *started.get_or_insert_with(|| {
                self.stats.waits += 1;
                now
            });
            let waited = now - t0;
            if waited < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let timed_out = waited >= self.timeout;
            for r in &h.readers {
                if r.state.load(Ordering::Acquire) != ACTIVE || r.cursor.load(Ordering::Acquire).saturating_add(n) > seq
                {
                    continue;
                }
                let pid = r.pid.load(Ordering::Relaxed);
                if !pid_alive(pid) {
                    if evict(r, FREE) {
                        self.stats.evicted_dead += 1;
                        tracing::warn!(
                            "shm_ring: publisher {publisher_id}: reliable reader of process {pid} is gone; \
                             taken out of flow control"
                        );
                    }
                } else if timed_out && evict(r, EVICTED) {
                    self.stats.evicted_stalled += 1;
                    tracing::warn!(
                        "shm_ring: publisher {publisher_id}: reliable reader of process {pid} stayed a full ring \
                         behind for {:?}; taken out of flow control for good (it reads on, losing what it misses)",
                        self.timeout
                    );
                }
            }
            if timed_out {
                continue;
            }
            // Sleep until a reader makes progress (or a slice passes): announce the wait, then re-check, so a
            // reader that consumed meanwhile either is seen here or sees the flag and wakes us.
            let f = &h.flow.0;
            f.writer_waiting.store(1, Ordering::SeqCst);
            let progress = f.progress.load(Ordering::SeqCst);
            if min_cursor(h).is_some_and(|m| seq >= m.saturating_add(n)) {
                let left = self.timeout.saturating_sub(waited).min(SLEEP_SLICE);
                if let Err(e) = futex_wait_shared(&f.progress, progress, Some(left)) {
                    tracing::debug!("shm_ring: flow-control futex wait failed: {e}");
                    std::thread::yield_now();
                }
            }
            f.writer_waiting.store(0, Ordering::Relaxed);
        }
    }
}

/// Entries in flow control now.
pub(super) fn active_readers(h: &SegmentHeader) -> usize {
    h.readers.iter().filter(|r| r.state.load(Ordering::Acquire) == ACTIVE).count()
}

/// Copies the entries in flow control into the table of a new generation, their cursors at its first sample
/// (they have not read any of it yet), so that the writer waits for them there too.
pub(super) fn carry_over(old: &SegmentHeader, new: &SegmentHeader, base_seq: u64) {
    for (o, n) in old.readers.iter().zip(&new.readers) {
        if o.state.load(Ordering::Acquire) == ACTIVE {
            n.pid.store(o.pid.load(Ordering::Relaxed), Ordering::Relaxed);
            n.token.store(o.token.load(Ordering::Relaxed), Ordering::Relaxed);
            n.cursor.store(base_seq, Ordering::Relaxed);
            n.state.store(ACTIVE, Ordering::Release);
        }
    }
}

/// A reliable reader's entry.
#[derive(Debug)]
pub(super) struct ReaderFlow {
    index: usize,
    token: u64,
    /// The writer took this reader out of flow control.
    pub(super) evicted: bool,
}

impl ReaderFlow {
    /// Takes a free entry (or one of a dead process that was evicted) for a reader at `cursor`; `None` when the
    /// table is full.
    pub(super) fn claim(h: &SegmentHeader, cursor: u64, token: u64) -> Option<ReaderFlow> {
        for (index, r) in h.readers.iter().enumerate() {
            let s = r.state.load(Ordering::Acquire);
            let takeable = s == FREE || (s == EVICTED && !pid_alive(r.pid.load(Ordering::Relaxed)));
            if takeable && r.state.compare_exchange(s, CLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                r.pid.store(own_pid(), Ordering::Relaxed);
                r.token.store(token, Ordering::Relaxed);
                r.cursor.store(cursor, Ordering::Relaxed);
                r.state.store(ACTIVE, Ordering::Release);
                return Some(ReaderFlow { index, token, evicted: false });
            }
        }
        None
    }

    /// The entry in a new generation: the one the writer carried over, else a new claim. `None`: table full.
    pub(super) fn follow(self, h: &SegmentHeader, cursor: u64) -> Option<ReaderFlow> {
        let r = &h.readers[self.index];
        if r.state.load(Ordering::Acquire) == ACTIVE
            && r.token.load(Ordering::Relaxed) == self.token
            && r.pid.load(Ordering::Relaxed) == own_pid()
        {
            r.cursor.store(cursor, Ordering::Release);
            return Some(self);
        }
        ReaderFlow::claim(h, cursor, self.token)
    }

    fn mine<'h>(&self, h: &'h SegmentHeader) -> &'h ReaderSlot {
        &h.readers[self.index]
    }

    /// After consuming everything before `cursor`: publishes it and wakes a waiting writer. Notices eviction.
    #[inline]
    pub(super) fn consumed(&mut self, h: &SegmentHeader, cursor: u64) {
        let r = self.mine(h);
        if r.state.load(Ordering::Relaxed) != ACTIVE || r.token.load(Ordering::Relaxed) != self.token {
            self.evicted = true;
            return;
        }
        r.cursor.store(cursor, Ordering::Release);
        // StoreLoad against the writer's "waiting" announcement (see `WriterFlow::wait`).
        fence(Ordering::SeqCst);
        let f = &h.flow.0;
        if f.writer_waiting.load(Ordering::Relaxed) != 0 {
            f.progress.fetch_add(1, Ordering::SeqCst);
            futex_wake_shared(&f.progress);
        }
    }

    /// Leaves flow control (the reader is dropped).
    pub(super) fn release(&self, h: &SegmentHeader) {
        let r = self.mine(h);
        if r.token.load(Ordering::Relaxed) == self.token && r.pid.load(Ordering::Relaxed) == own_pid() {
            let s = r.state.load(Ordering::Acquire);
            if s == ACTIVE || s == EVICTED {
                let _ = r.state.compare_exchange(s, FREE, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }
}
