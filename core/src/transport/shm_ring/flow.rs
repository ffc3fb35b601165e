//! Flow control for reliable readers: the writer of a ring with a flow-control timeout waits (spins, then sleeps
//! on a futex in the segment) while a reliable reader is a whole ring behind, for at most that timeout.
//!
//! A reliable reader holds one entry of the segment's reader table ([`ReaderSlot`]): its pid, a token, and its
//! cursor (every sample before it is consumed), stored once per sixteenth of the ring read and whenever the reader
//! finds the ring empty ([`publish_every`]: a store and a full fence per sample were a third of a 64 B stream's
//! read). The writer keeps the bound up to which it
//! may write without looking (`free_until`: the smallest cursor it saw plus the slot count) and scans the table
//! only when it reaches that bound, so the table costs a comparison per write. A writer that had to sleep is woken
//! once the slowest reader has left room for a quarter of the ring (`FlowHeader::wake_at`), so a stream limited by
//! its reader costs a futex wake and wait per quarter ring, not per sample. Nothing is locked that anyone waits
//! for: a reader that dies leaves an entry nobody holds, which the writer takes out of flow control at once; a
//! reader that stalls past the timeout is taken out (evicted) and never holds the writer again; a writer that dies
//! blocks nobody (readers never wait for the writer here). Both are counted ([`FlowStats`]).
//!
//! A reader's liveness is a lock it holds, as a file's is its owner's (`sys::OwnerLock`): while its entry is in
//! flow control the reader holds a shared open-file-description lock on the entry's own bytes of the segment file
//! (`sys::hold_range`), which the kernel releases when the reader's process dies, SIGKILL included. The writer asks
//! with `F_OFD_GETLK` (`sys::range_held`) whether anybody holds it, so a live reader in another pid namespace
//! sharing `/dev/shm` is waited for, and a dead one whose pid another process has here is not. When the ring grows
//! the writer carries the entries over to the new generation (same index) before their readers follow; a reader
//! takes the lock on its entry of the new file before it lets go of the old one, and the writer, which keeps every
//! generation's file open, asks them from the oldest to the newest, so a live reader is always found on the way.
//! The pid in an entry is only for messages, and for kernels without OFD locks (before 3.15), where it decides.
//!
//! The same table holds *tracked* best-effort readers of large rings with large slots (`TRACKING`, `layout::warm_reuse`): they publish their
//! cursor the same way, are never waited for, and let the writer reuse the payload area of a sample every reader has
//! consumed (warm reuse, `writer.rs`). A tracked entry whose reader is gone is freed by the writer when it holds
//! reuse back a full ring, or taken by the next reader that claims an entry.

use std::fs::File;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::doorbell::{futex_wait_shared, futex_wake_shared};
use super::layout::{ReaderSlot, SegmentHeader};
use super::segment::{own_pid, pid_alive};

/// Byte range of entry `index` in a segment file: the entry's own bytes (after the owner's byte, see
/// `sys::OWNER_BYTE`: the entries start on the header's ninth cache line).
fn entry_range(index: usize) -> (u64, u64) {
    let at = offset_of!(SegmentHeader, readers) + index * size_of::<ReaderSlot>();
    (at as u64, size_of::<ReaderSlot>() as u64)
}

/// Whether some process (other than through `file`'s own open file description) holds the lock of entry `index`
/// of the segment `file` is; `Err` where the kernel has no OFD locks.
fn entry_held(file: &File, index: usize) -> std::io::Result<bool> {
    let (start, len) = entry_range(index);
    crate::sys::range_held(file, start, len)
}

/// Whether the reader of entry `index` (pid `pid`) lives: it holds the entry's lock in one of `files`, the writer's
/// segment files from the oldest generation to the current one (a reader that has not followed the growth yet holds
/// it in an older one). Only where OFD locks are missing is the pid asked.
pub(super) fn reader_alive<'f>(files: impl Iterator<Item = &'f File>, index: usize, pid: u32) -> bool {
    for file in files {
        match entry_held(file, index) {
            Ok(true) => return true,
            Ok(false) => {}
            Err(_) => return pid_alive(pid),
        }
    }
    false
}

/// Entry states.
pub(super) const FREE: u32 = 0;
/// Being filled in by a reader (not yet in flow control).
pub(super) const CLAIMING: u32 = 1;
/// In flow control: the writer does not overwrite what the reader has not consumed.
pub(super) const ACTIVE: u32 = 2;
/// Taken out of flow control by the writer (stalled past the timeout); the reader reads on, best effort.
pub(super) const EVICTED: u32 = 3;
/// A best-effort reader of a large ring with large slots (`layout::warm_reuse`) that publishes its cursor so the writer can reuse the payload
/// area of a sample every reader has consumed (warm reuse, `writer.rs`); never waited for. Its liveness is its
/// lock, as for `ACTIVE`.
pub(super) const TRACKING: u32 = 4;

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
    /// readers out at once and stalled ones after the timeout. `alive(index, pid)` says whether the reader of an
    /// entry lives ([`reader_alive`] over the writer's files).
    #[cold]
    #[inline(never)]
    pub(super) fn wait(
        &mut self,
        h: &SegmentHeader,
        seq: u64,
        slot_count: u32,
        publisher_id: u64,
        alive: &dyn Fn(usize, u32) -> bool,
    ) {
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
            for (index, r) in h.readers.iter().enumerate() {
                if r.state.load(Ordering::Acquire) != ACTIVE || r.cursor.load(Ordering::Acquire).saturating_add(n) > seq
                {
                    continue;
                }
                let pid = r.pid.load(Ordering::Relaxed);
                if !alive(index, pid) {
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
            // A reader wakes it only once the slowest one left room for a quarter of the ring (at least this sample):
            // a writer woken at each consumed sample, writing one and sleeping again, costs both sides a futex call
            // per sample for as long as the reader is the slower.
            let f = &h.flow.0;
            f.wake_at.store((seq + 1 + n / 4).saturating_sub(n).min(seq), Ordering::Relaxed);
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

/// Copies the entries in flow control (and the tracked best-effort readers) into the table of a new generation,
/// their cursors at its first sample (they have not read any of it yet), so that the writer waits for them there too.
pub(super) fn carry_over(old: &SegmentHeader, new: &SegmentHeader, base_seq: u64) {
    for (o, n) in old.readers.iter().zip(&new.readers) {
        let state = o.state.load(Ordering::Acquire);
        if state == ACTIVE || state == TRACKING {
            n.pid.store(o.pid.load(Ordering::Relaxed), Ordering::Relaxed);
            n.token.store(o.token.load(Ordering::Relaxed), Ordering::Relaxed);
            n.cursor.store(base_seq, Ordering::Relaxed);
            n.state.store(state, Ordering::Release);
        }
    }
}

/// The readers whose cursor the writer knows (in flow control or tracked) and the smallest of their cursors.
pub(super) fn known_readers(h: &SegmentHeader) -> (usize, u64) {
    let mut n = 0;
    let mut min = u64::MAX;
    for r in &h.readers {
        let state = r.state.load(Ordering::Acquire);
        if state == ACTIVE || state == TRACKING {
            n += 1;
            min = min.min(r.cursor.load(Ordering::Acquire));
        }
    }
    (n, min)
}

/// Passes each known reader's (in flow control or tracked) last read report (`pick::pack`) with its entry's index.
pub(super) fn read_reports(h: &SegmentHeader, mut f: impl FnMut(usize, u64)) {
    for (index, r) in h.readers.iter().enumerate() {
        let state = r.state.load(Ordering::Acquire);
        if state == ACTIVE || state == TRACKING {
            f(index, r.read_report.load(Ordering::Relaxed));
        }
    }
}

/// Frees the tracked entries whose reader is gone and whose cursor is before `before` (`alive` as in
/// [`WriterFlow::wait`]); how many.
#[cold]
pub(super) fn free_dead_trackers(h: &SegmentHeader, before: u64, alive: &dyn Fn(usize, u32) -> bool) -> usize {
    let mut freed = 0;
    for (index, r) in h.readers.iter().enumerate() {
        if r.state.load(Ordering::Acquire) == TRACKING
            && r.cursor.load(Ordering::Acquire) < before
            && !alive(index, r.pid.load(Ordering::Relaxed))
            && r.state.compare_exchange(TRACKING, FREE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            freed += 1;
        }
    }
    freed
}

/// How many samples a reliable reader consumes between two publications of its cursor in a ring of `slot_count`
/// slots of `slot_size` bytes: a sixteenth of the ring (1 up to 31 slots). Publishing costs the reader a store to a
/// line the writer reads and a full fence (the wake-up check); once per sample, that was a third of a 64 B stream's
/// read. The writer sees a cursor at most this far behind, and a reader that finds its ring empty publishes at once
/// ([`ReaderFlow::caught_up`]), so the writer never waits for what was read. In a ring with warm reuse
/// (`layout::warm_reuse`, slots of 64 KiB and more) every sample: there the cursor also frees payload areas for
/// reuse, and a fence is nothing beside the copy.
pub(super) fn publish_every(slot_count: u32, slot_size: usize) -> u64 {
    if super::layout::warm_reuse(slot_count, slot_size) { 1 } else { u64::from(slot_count / 16).max(1) }
}

/// A reliable (or tracked) reader's entry.
#[derive(Debug)]
pub(super) struct ReaderFlow {
    index: usize,
    token: u64,
    /// `ACTIVE` (reliable) or `TRACKING` (best effort, cursor published for warm reuse).
    state: u32,
    /// The writer took this reader out of flow control (or freed its tracked entry).
    pub(super) evicted: bool,
    /// The cursor last stored in the entry.
    published: u64,
    /// A reliable reader publishes its cursor once it is this far past `published` ([`publish_every`]); a tracked
    /// one at every sample.
    every: u64,
}

impl ReaderFlow {
    /// Takes a free entry (or an evicted one whose reader is gone) for a reader at `cursor`, and the lock on it in
    /// the reader's `file` of the segment before the entry enters flow control; `None` when the table is full or
    /// the lock cannot be taken.
    /// `state` is `ACTIVE` (a reliable reader) or `TRACKING` (a best-effort one publishing its cursor).
    /// `every`: how often a reliable reader publishes its cursor ([`publish_every`] of the ring as it mapped it).
    pub(super) fn claim(
        h: &SegmentHeader,
        file: &File,
        (cursor, every): (u64, u64),
        token: u64,
        state: u32,
    ) -> Option<ReaderFlow> {
        for (index, r) in h.readers.iter().enumerate() {
            let s = r.state.load(Ordering::Acquire);
            // An evicted (or tracked) reader that still lives holds its lock until it notices the eviction (or
            // lets go of the entry).
            let takeable = s == FREE
                || ((s == EVICTED || s == TRACKING)
                    && !reader_alive(std::iter::once(file), index, r.pid.load(Ordering::Relaxed)));
            if takeable && r.state.compare_exchange(s, CLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let (start, len) = entry_range(index);
                if let Err(e) = crate::sys::hold_range(file, start, len) {
                    r.state.store(FREE, Ordering::Release);
                    tracing::warn!("shm_ring: cannot lock reliable reader entry {index}: {e}; reading best effort");
                    return None;
                }
                r.pid.store(own_pid(), Ordering::Relaxed);
                r.token.store(token, Ordering::Relaxed);
                r.cursor.store(cursor, Ordering::Relaxed);
                r.state.store(state, Ordering::Release);
                return Some(ReaderFlow::new(index, token, state, cursor, every));
            }
        }
        None
    }

    /// The entry in a new generation (header `h`, the reader's `file` of it): the one the writer carried over,
    /// locked in `file` (the caller releases the old generation's entry only afterwards), else a new claim.
    /// `None`: table full, or the lock cannot be taken.
    pub(super) fn follow(&self, h: &SegmentHeader, file: &File, (cursor, every): (u64, u64)) -> Option<ReaderFlow> {
        let r = &h.readers[self.index];
        if r.state.load(Ordering::Acquire) == self.state
            && r.token.load(Ordering::Relaxed) == self.token
            && r.pid.load(Ordering::Relaxed) == own_pid()
        {
            let (start, len) = entry_range(self.index);
            match crate::sys::hold_range(file, start, len) {
                Ok(()) => {
                    r.cursor.store(cursor, Ordering::Release);
                    return Some(ReaderFlow::new(self.index, self.token, self.state, cursor, every));
                }
                Err(e) => {
                    let _ = r.state.compare_exchange(self.state, FREE, Ordering::AcqRel, Ordering::Relaxed);
                    tracing::warn!(
                        "shm_ring: cannot lock reliable reader entry {} of a new generation: {e}; reading best effort",
                        self.index
                    );
                    return None;
                }
            }
        }
        ReaderFlow::claim(h, file, (cursor, every), self.token, self.state)
    }

    fn new(index: usize, token: u64, state: u32, cursor: u64, every: u64) -> ReaderFlow {
        let every = if state == TRACKING { 1 } else { every.max(1) };
        ReaderFlow { index, token, state, evicted: false, published: cursor, every }
    }

    /// Whether this is a tracked best-effort reader's entry (not in flow control).
    pub(super) fn tracking(&self) -> bool {
        self.state == TRACKING
    }

    /// Reports how long reading sample `seq` took (`pick.rs`); the writer sees it with the cursor that follows.
    pub(super) fn report_read(&self, h: &SegmentHeader, seq: u64, read_ns: u64) {
        self.mine(h).read_report.store(super::pick::pack(seq, read_ns), Ordering::Relaxed);
    }

    fn mine<'h>(&self, h: &'h SegmentHeader) -> &'h ReaderSlot {
        &h.readers[self.index]
    }

    /// After consuming everything before `cursor`: publishes it and wakes a waiting writer once it is
    /// [`publish_every`] past the last publication. Notices eviction then (and lets go of the entry's lock in
    /// `file`, so that another reader may take the entry).
    #[inline]
    pub(super) fn consumed(&mut self, h: &SegmentHeader, file: &File, cursor: u64) {
        if cursor.wrapping_sub(self.published) >= self.every {
            self.publish(h, file, cursor);
        }
    }

    /// The reader found nothing after `cursor`: publishes it if it has not (a writer waiting for room must see
    /// everything read before the reader waits in turn).
    #[inline]
    pub(super) fn caught_up(&mut self, h: &SegmentHeader, file: &File, cursor: u64) {
        if cursor != self.published {
            self.publish(h, file, cursor);
        }
    }

    fn publish(&mut self, h: &SegmentHeader, file: &File, cursor: u64) {
        self.published = cursor;
        let r = self.mine(h);
        if r.state.load(Ordering::Relaxed) != self.state || r.token.load(Ordering::Relaxed) != self.token {
            self.evicted = true;
            self.unlock(file);
            return;
        }
        r.cursor.store(cursor, Ordering::Release);
        if self.state == TRACKING {
            // Never waited for: nobody to wake.
            return;
        }
        // StoreLoad against the writer's "waiting" announcement (see `WriterFlow::wait`).
        fence(Ordering::SeqCst);
        let f = &h.flow.0;
        // Only the first reader to get there wakes it (`swap`): until the writer runs, the others would each make a
        // futex call for nobody. The writer stores the flag again, then re-checks the cursors, before it sleeps again.
        if f.writer_waiting.load(Ordering::Acquire) != 0
            && cursor >= f.wake_at.load(Ordering::Relaxed)
            && f.writer_waiting.swap(0, Ordering::SeqCst) != 0
        {
            f.progress.fetch_add(1, Ordering::SeqCst);
            futex_wake_shared(&f.progress);
        }
    }

    #[cold]
    fn unlock(&self, file: &File) {
        let (start, len) = entry_range(self.index);
        if let Err(e) = crate::sys::release_range(file, start, len) {
            tracing::debug!("shm_ring: cannot unlock reliable reader entry {}: {e}", self.index);
        }
    }

    /// Leaves flow control (the reader is dropped, or moved to another generation): frees the entry, then lets go
    /// of its lock in `file` (the reader's file of the segment of `h`).
    pub(super) fn release(&self, h: &SegmentHeader, file: &File) {
        let r = self.mine(h);
        if r.token.load(Ordering::Relaxed) == self.token && r.pid.load(Ordering::Relaxed) == own_pid() {
            let s = r.state.load(Ordering::Acquire);
            if s == ACTIVE || s == EVICTED || s == TRACKING {
                let _ = r.state.compare_exchange(s, FREE, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        self.unlock(file);
    }
}
