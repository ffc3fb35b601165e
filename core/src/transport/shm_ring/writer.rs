//! The publishing side of a ring: one writer per publisher, never blocks, never locks.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::flow::{self, FlowStats, WriterFlow};
use super::layout::{
    DOORBELL_NAME_CAP, MAX_SLOT_COUNT, MAX_SLOT_SIZE, MIN_SLOT_COUNT, NEXT_PATH_CAP, RING_MAGIC, RING_VERSION,
    SEGMENT_HEADER_SIZE, SLOT_HEADER_SIZE, SegmentHeader, SlotHeader, ring_bytes, slot_stride, warm_reuse,
};
use super::pick::{AreaPick, FLAG_TIMED, TIMED_MIN_LEN, Temp};
use super::segment::{self, CreateFailure, Placement, RingName};
use crate::config::ShmRingConfig;
use crate::sys::copy;
use crate::sys::shm_guard::PeerMap;

/// A copying write of at least this many bytes is streamed: written in parts of [`STREAM_PART`] bytes, each announced
/// as it is complete, so that its readers copy it out while it is written (`SlotHeader::stream_seq`, `reader.rs`)
/// and the copy out overlaps the copy in.
pub(super) const STREAM_MIN_LEN: usize = 64 << 10;
/// Bytes of a streamed write announced at a time.
pub(super) const STREAM_PART: usize = 16 << 10;

/// Error of [`RingWriter::create`] (and of growth, inside [`SlotError::Grow`]).
#[derive(Debug, thiserror::Error)]
pub enum RingCreateError {
    /// `slot_count` is not a power of two in the accepted range.
    #[error("slot_count {0} must be a power of two between {MIN_SLOT_COUNT} and {MAX_SLOT_COUNT}")]
    InvalidSlotCount(u32),
    /// `slot_size` is zero or too large.
    #[error("slot_size {0} must be between 1 and {MAX_SLOT_SIZE}")]
    InvalidSlotSize(usize),
    /// The whole segment would be too large.
    #[error("a ring of {slot_count} slots of {slot_size} bytes is too large")]
    TooLarge {
        /// Requested slot count.
        slot_count: u32,
        /// Requested slot size.
        slot_size: usize,
    },
    /// A file operation failed.
    #[error("shm ring {op} {path}: {source}")]
    Io {
        /// The failed step (create, fallocate, mmap).
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl From<CreateFailure> for RingCreateError {
    fn from(f: CreateFailure) -> Self {
        RingCreateError::Io { op: f.op, path: f.path, source: f.source }
    }
}

/// Error of [`RingWriter::loan`] and [`RingWriter::write`].
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The message exceeds the largest slot a ring can have.
    #[error("message of {len} bytes exceeds the largest ring slot ({max} bytes)")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// Largest possible slot size.
        max: usize,
    },
    /// The message needed a bigger segment and creating it failed (the writer stays on the
    /// current one).
    #[error("cannot grow the ring: {0}")]
    Grow(#[from] RingCreateError),
}

/// Error of [`RingWriter::commit`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommitError {
    /// `commit` without a preceding `loan`.
    #[error("commit without a loan")]
    NoLoan,
    /// The committed length is larger than the loaned one.
    #[error("commit of {len} bytes exceeds the loan of {loaned} bytes")]
    LenExceedsLoan {
        /// Committed length.
        len: usize,
        /// Loaned length.
        loaned: usize,
    },
}

/// The fewest slots a ring that grew for large messages keeps by default (unless it started with fewer); see
/// [`RingWriter::set_grown_min_slots`].
pub const GROWN_MIN_SLOTS: u32 = 16;

/// Slots of a ring grown to `new_size`-byte slots: fewer, bigger slots keeping the payload `budget`, with at least
/// `min_slots` and never more than the `current` count.
fn grown_slot_count(budget: usize, new_size: usize, min_slots: u32, current: u32) -> u32 {
    let by_budget = u32::try_from(budget / new_size.max(1)).unwrap_or(u32::MAX).max(1);
    let by_budget = if by_budget.is_power_of_two() { by_budget } else { by_budget.next_power_of_two() / 2 };
    by_budget.clamp(min_slots.min(current), current)
}

/// The (slot count, slot size) a ring created with `cfg` has once it carries messages of `len` bytes, when a grown
/// ring keeps at least `grown_min_slots` slots ([`RingWriter::set_grown_min_slots`]); `None` for a message no ring
/// holds. What `shoal perf --baseline` gives its plain ring, so that both are equally deep.
pub fn geometry_for(cfg: &ShmRingConfig, grown_min_slots: u32, len: usize) -> Option<(u32, usize)> {
    if len <= cfg.slot_size {
        return Some((cfg.slot_count, cfg.slot_size));
    }
    let new_size = len.checked_next_power_of_two().filter(|s| *s <= MAX_SLOT_SIZE)?;
    let budget = (cfg.slot_count as usize).saturating_mul(cfg.slot_size);
    let min_slots = grown_min_slots.clamp(MIN_SLOT_COUNT, MAX_SLOT_COUNT).next_power_of_two();
    Some((grown_slot_count(budget, new_size, min_slots, cfg.slot_count), new_size))
}

/// Result of a successful publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Published {
    /// Sequence number of the sample (0 for the first sample of this writer).
    pub seq: u64,
    /// The writer moved to a new segment (bigger slots) since the previous publish: the caller
    /// must announce [`RingWriter::segment_name`] again. Readers that already follow the old
    /// segment switch by themselves.
    pub segment_changed: bool,
}

/// The current segment of a writer.
#[derive(Debug)]
struct Segment {
    path: PathBuf,
    /// Raw and guarded ([`PeerMap`]): reliable readers of other processes write their reader-table entries and the
    /// flow-control words, and a process that can write the file could truncate it.
    map: PeerMap,
    huge: bool,
    /// The page size of its mapping, bytes.
    page_size: u64,
    generation: u64,
    slot_count: u32,
    slot_size: usize,
    stride: usize,
    /// Held while the segment lives (stale-file cleanup); reliable readers' entry locks are asked through it.
    owner: crate::sys::OwnerLock,
}

impl Segment {
    fn header(&self) -> &SegmentHeader {
        // SAFETY: the mapping is at least SEGMENT_HEADER_SIZE bytes, page aligned (so aligned
        // for SegmentHeader), and every field of SegmentHeader is an atomic, so shared access
        // from several processes is sound.
        unsafe { &*self.map.as_ptr().cast::<SegmentHeader>() }
    }
}

/// Which payload area each sample of the current segment goes to (writer-private).
///
/// A plain ring writes sample `s` into slot `s % slot_count`'s own area, so a ring of 16 slots of 1 MiB cycles
/// through 16 MiB: each write and each read touches memory that left the caches long ago. (A ring small enough to
/// stay in the last-level cache is faster as a plain ring: an area the reader has just read sits in the reader
/// core's own cache, and writing it again pulls every line across; see [`warm_reuse`](super::layout::warm_reuse).)
/// When every reader of a large ring with large slots publishes its cursor (tracked readers, `flow.rs`), the payload
/// area of a sample all of them have consumed is free, and the writer reuses the one freed last, still warm in the
/// caches, as iceoryx2 hands back the chunk released last. Descriptions stay in ring order (slot `s % slot_count`
/// describes sample `s`, its `chunk` names the area): readers, skips, rewinds and flow control are unchanged, and a
/// reader that reads a sample whose area was reused sees it by the area's own seqlock and counts a drop, as for an
/// overrun. A large sample ([`TIMED_MIN_LEN`]) takes either the warm area or the one freed longest ago, whichever
/// cost the writer and its readers less so far ([`AreaPick`]).
///
/// Every area is, at any time, either free (in `free`) or holds a sample whose description is live and not yet
/// released: when sample `s` is written, the area of sample `s - slot_count` (whose description `s` overwrites) is
/// freed unless it already was, and the areas of the samples before the smallest known cursor are released. With no
/// cursor known (or a reader that does not publish one) only the first happens: exactly the plain ring.
#[derive(Debug)]
struct Chunks {
    /// Free payload areas, the warmest (freed last by a release) at the front, evicted ones at the back.
    free: VecDeque<u32>,
    /// Per slot: the area holding the sample its description names (`u32::MAX`: none yet).
    slot_chunk: Vec<u32>,
    /// Samples before this one have had their area freed (released or evicted).
    released_to: u64,
    /// The area of the outstanding loan.
    loaned: Option<u32>,
    /// Readers of this ring the publisher knows of (registration); warm reuse needs all of them tracked.
    expected_readers: usize,
    /// When dead tracked readers were last looked for.
    dead_check: Option<Instant>,
    /// Whether a large write takes the warm or the cold free area, by what each cost (`pick.rs`).
    pick: AreaPick,
    /// The outstanding loan's kind of area and when it was taken (measured large writes only, `AreaPick::measure_next`).
    loan_pick: Option<((Temp, bool), Instant)>,
}

/// How often a writer whose tracked readers hold warm reuse back a full ring asks whether they still live.
const DEAD_TRACKER_CHECK: Duration = Duration::from_millis(100);

impl Chunks {
    /// The areas of a segment of `slot_count` slots of `slot_size` bytes whose first sample is `base_seq`; empty for
    /// a plain ring (`warm_reuse` false: the writer never looks at them).
    fn new(slot_count: u32, slot_size: usize, base_seq: u64, expected_readers: usize) -> Chunks {
        let n = if warm_reuse(slot_count, slot_size) { slot_count } else { 0 };
        Chunks {
            free: (0..n).collect(),
            slot_chunk: vec![u32::MAX; n as usize],
            released_to: base_seq,
            loaned: None,
            expected_readers,
            dead_check: None,
            pick: AreaPick::default(),
            loan_pick: None,
        }
    }
}

/// Writer of one publisher's ring segment.
///
/// Hot path: `loan` + `commit` (or `write`) are a few relaxed/release stores and a memcpy;
/// no syscall, no lock, no wait for readers. Dropping the writer unlinks all its segment files.
#[derive(Debug)]
pub struct RingWriter {
    seg: Segment,
    /// Bytes of payload the configured geometry holds (slot_count × slot_size); a grown ring keeps about this
    /// budget by trading slots for size, but never drops below `grown_min_slots` slots.
    budget: usize,
    /// The fewest slots a grown ring keeps (a power of two; [`GROWN_MIN_SLOTS`] unless set).
    grown_min_slots: u32,
    /// Segment files of earlier generations, oldest first, kept linked (and owned, so no stale-file cleanup takes
    /// them) so that late readers can follow the chain of generations, and open so that flow control finds the
    /// entry locks of reliable readers that have not followed yet; unlinked on drop.
    old: Vec<(PathBuf, crate::sys::OwnerLock)>,
    name: RingName,
    huge_dir: Option<PathBuf>,
    /// `huge_pages = auto`: a ring that cannot go on huge pages falls back without a warning.
    huge_quiet: bool,
    huge_fallback: Option<String>,
    /// File name of this process's doorbell, written into every generation's header ([`announce_doorbell`]).
    ///
    /// [`announce_doorbell`]: Self::announce_doorbell
    doorbell_name: Option<String>,
    publisher_id: u64,
    /// Sequence number of the next sample.
    next_seq: u64,
    /// Length of the outstanding loan.
    loaned: Option<usize>,
    /// Segment changed since the last `Published` was returned.
    changed: bool,
    /// Flow control of reliable readers: `None` for a writer that never waits.
    flow: Option<WriterFlow>,
    /// Payload areas of the current segment.
    chunks: Chunks,
}

impl RingWriter {
    /// Creates generation 0 of a new ring segment for `publisher_id`.
    ///
    /// With `cfg.huge_pages` the file goes on the hugetlbfs mount `cfg.huge_pages_path` (size
    /// rounded to the huge page size); on any problem it falls back to `/dev/shm` with a
    /// `tracing::warn!` giving the reason (see [`RingWriter::huge_pages_fallback`]).
    pub fn create(cfg: &ShmRingConfig, publisher_id: u64) -> Result<RingWriter, RingCreateError> {
        let sc = cfg.slot_count;
        if !sc.is_power_of_two() || !(MIN_SLOT_COUNT..=MAX_SLOT_COUNT).contains(&sc) {
            return Err(RingCreateError::InvalidSlotCount(sc));
        }
        if cfg.slot_size == 0 || cfg.slot_size > MAX_SLOT_SIZE {
            return Err(RingCreateError::InvalidSlotSize(cfg.slot_size));
        }
        let huge_dir = cfg.huge_pages.wanted().then(|| cfg.huge_pages_path.clone());
        let mut name = RingName { pid: segment::own_pid(), unique: segment::unique_token(), generation: 0 };
        let huge_quiet = cfg.huge_pages == crate::config::HugePages::Auto;
        let placement = Placement { huge_dir: huge_dir.as_deref(), quiet: huge_quiet };
        let (seg, fallback) = Self::create_segment(&mut name, placement, sc, cfg.slot_size, publisher_id, 0, 0, 0)?;
        Ok(RingWriter {
            budget: (sc as usize).saturating_mul(cfg.slot_size),
            grown_min_slots: GROWN_MIN_SLOTS,
            seg,
            old: Vec::new(),
            name,
            huge_dir,
            huge_quiet,
            huge_fallback: fallback,
            doorbell_name: None,
            publisher_id,
            next_seq: 0,
            loaned: None,
            changed: false,
            flow: None,
            chunks: Chunks::new(sc, cfg.slot_size, 0, 0),
        })
    }

    /// Whether the current segment file was truncated under this writer by another process (the SIGBUS guard
    /// replaced the mapping with zero pages, see `sys::shm_guard`): what it writes reaches no reader.
    pub fn truncated(&self) -> bool {
        self.seg.map.truncated()
    }

    /// Creates and initialises one generation. On a name clash for generation 0 the unique
    /// token is replaced (later generations keep it: their names are derived).
    #[allow(clippy::too_many_arguments)]
    fn create_segment(
        name: &mut RingName,
        placement: Placement<'_>,
        slot_count: u32,
        slot_size: usize,
        publisher_id: u64,
        generation: u64,
        base_seq: u64,
        flow_timeout_ms: u32,
    ) -> Result<(Segment, Option<String>), RingCreateError> {
        let too_large = || RingCreateError::TooLarge { slot_count, slot_size };
        let bytes = ring_bytes(slot_count, slot_size).ok_or_else(too_large)?;
        let stride = slot_stride(slot_size).ok_or_else(too_large)?;
        let mut first = true;
        let created = segment::create_mapped(placement, bytes, crate::sys::shm_read_mode(), || {
            if !first && generation == 0 {
                name.unique = segment::unique_token();
            }
            first = false;
            name.file_name(generation)
        })?;
        let seg = Segment {
            path: created.path,
            map: created.map,
            huge: created.huge,
            page_size: created.page_size,
            generation,
            slot_count,
            slot_size,
            stride,
            owner: created.owner,
        };
        let h = seg.header();
        let r = Ordering::Relaxed;
        h.version.store(RING_VERSION, r);
        h.header_size.store(SEGMENT_HEADER_SIZE as u32, r);
        h.slot_count.store(slot_count, r);
        h.slot_header_size.store(SLOT_HEADER_SIZE as u32, r);
        h.slot_size.store(slot_size as u64, r);
        h.slot_stride.store(stride as u64, r);
        h.writer_pid.store(segment::own_pid(), r);
        h.publisher_id.store(publisher_id, r);
        h.generation.store(generation, r);
        h.base_seq.store(base_seq, r);
        h.segment_size.store(seg.map.len() as u64, r);
        h.write_seq.0.store(base_seq, r);
        h.flow.0.timeout_ms.store(flow_timeout_ms, r);
        h.magic.store(RING_MAGIC, Ordering::Release);
        Ok((seg, created.fallback_reason))
    }

    /// Makes the writer reliable (`Some(timeout)`): before it overwrites a sample that a reliable reader (see
    /// [`super::RingReader::open_reliable`]) has not consumed, it waits, spinning and then sleeping on a futex in
    /// the segment, for at most `timeout`; a reader whose process is gone is taken out of flow control at once, one
    /// that stays a full ring behind for the whole timeout is taken out for good. `None`: never wait (readers that
    /// fall behind lose samples). Readers see the setting in the segment.
    pub fn set_flow_control(&mut self, timeout: Option<Duration>) {
        let ms = timeout.map_or(0, |t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1));
        self.seg.header().flow.0.timeout_ms.store(ms, Ordering::Release);
        self.flow = timeout.map(|t| WriterFlow::new(t.max(Duration::from_millis(1))));
    }

    /// Whether flow control is on ([`set_flow_control`](Self::set_flow_control) with a timeout).
    pub fn flow_stats_enabled(&self) -> bool {
        self.flow.is_some()
    }

    /// What flow control did so far (all zero for a writer that never waits).
    pub fn flow_stats(&self) -> FlowStats {
        self.flow.as_ref().map(|f| f.stats).unwrap_or_default()
    }

    /// Reliable readers of the current segment in flow control now.
    pub fn reliable_readers(&self) -> usize {
        flow::active_readers(self.seg.header())
    }

    /// The fewest slots the ring keeps when it grows for larger messages: `n` rounded up to a power of two, at
    /// most the current slot count (a subscriber queue depth of the publishing process). Applies to later growths.
    pub fn set_grown_min_slots(&mut self, n: u32) {
        self.grown_min_slots = n.clamp(MIN_SLOT_COUNT, MAX_SLOT_COUNT).next_power_of_two();
    }

    /// Path of the current segment; this is what readers pass to [`super::RingReader::open`].
    pub fn segment_name(&self) -> &str {
        segment::path_str(&self.seg.path)
    }

    /// Generation of the current segment (0, then +1 per growth).
    pub fn generation(&self) -> u64 {
        self.seg.generation
    }

    /// Slots in the ring.
    pub fn slot_count(&self) -> u32 {
        self.seg.slot_count
    }

    /// Payload capacity of one slot of the current segment.
    pub fn slot_size(&self) -> usize {
        self.seg.slot_size
    }

    /// Publisher id given at creation.
    pub fn publisher_id(&self) -> u64 {
        self.publisher_id
    }

    /// Sequence number the next published sample will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether the current segment is on hugetlbfs.
    pub fn uses_huge_pages(&self) -> bool {
        self.seg.huge
    }

    /// The page size of the current segment's mapping, bytes (2 MiB on huge pages, else the system's page size).
    pub fn page_size(&self) -> u64 {
        self.seg.page_size
    }

    /// Why huge pages were requested but not used for the most recent segment, if so.
    pub fn huge_pages_fallback(&self) -> Option<&str> {
        self.huge_fallback.as_deref()
    }

    /// Names this process's doorbell (`Doorbell::name`) in the segment's header, and in every later generation's:
    /// a reader's process tells that doorbell when it stops being spin-only, so that this process's publishers may
    /// ask it instead of every subscriber's doorbell on each send (`Ringers`). Call before readers are told of the
    /// ring. A name longer than the field holds is not written (readers then tell nobody, and the publisher must
    /// not use [`Ringers`](super::Ringers)' shortcut: [`doorbell_announced`](Self::doorbell_announced) says false).
    pub fn announce_doorbell(&mut self, path: &str) {
        let name = std::path::Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.is_empty() || name.len() > DOORBELL_NAME_CAP {
            tracing::debug!("shm_ring: doorbell name {path} does not fit the segment header");
            return;
        }
        write_doorbell_name(self.seg.header(), name);
        self.doorbell_name = Some(name.to_owned());
    }

    /// Whether [`announce_doorbell`](Self::announce_doorbell) named this process's doorbell in the header.
    pub fn doorbell_announced(&self) -> bool {
        self.doorbell_name.is_some()
    }

    /// The subscribers reading this ring that the publisher knows of (from registration). Payload areas are reused
    /// warm only while at least this many readers publish their cursor, so a reader that does not (it could not
    /// map the segment writable, or the table is full) is never overrun by the reuse.
    pub fn set_expected_readers(&mut self, n: usize) {
        self.chunks.expected_readers = n;
    }

    #[inline]
    fn slot_index(&self, seq: u64) -> usize {
        // slot_count is a power of two (checked at creation, kept by growth).
        (seq & (u64::from(self.seg.slot_count) - 1)) as usize
    }

    #[inline]
    fn slot_at(&mut self, index: usize) -> *mut u8 {
        debug_assert!(index < self.seg.slot_count as usize);
        // SAFETY: index < slot_count (callers pass a slot index or an area index, both below it), and the mapping
        // holds SEGMENT_HEADER_SIZE + slot_count * stride bytes (checked by ring_bytes at creation).
        unsafe { self.seg.map.as_mut_ptr().add(SEGMENT_HEADER_SIZE + index * self.seg.stride) }
    }

    /// The payload area for sample `seq` of `len` bytes (see [`Chunks`]): frees the area of the sample whose
    /// description `seq` overwrites, releases those every reader consumed (when all are tracked), and takes the
    /// warmest free one, or for a large sample the warm or the cold one by what each cost so far (`pick.rs`).
    #[inline]
    fn take_chunk(&mut self, seq: u64, len: usize) -> u32 {
        let n = u64::from(self.seg.slot_count);
        let slot = self.slot_index(seq);
        if !warm_reuse(self.seg.slot_count, self.seg.slot_size) {
            // A plain ring: every sample in its own slot's area (no bookkeeping on the small-message path).
            return slot as u32;
        }
        let c = &mut self.chunks;
        // The description of sample seq - n is overwritten now: its area is free unless it was released already.
        if let Some(evicted) = seq.checked_sub(n)
            && evicted >= c.released_to
        {
            let j = c.slot_chunk[slot];
            if j != u32::MAX {
                c.free.push_back(j);
            }
            c.released_to = evicted + 1;
        }
        let mut reusing = false;
        if c.expected_readers > 0 {
            let h = self.seg.header();
            let (known, min) = flow::known_readers(h);
            if known >= c.expected_readers {
                reusing = true;
                // Release, oldest first, so that the newest consumed sample's area ends at the front.
                let until = min.min(seq);
                for m in c.released_to..until {
                    let j = c.slot_chunk[(m & (n - 1)) as usize];
                    if j != u32::MAX {
                        c.free.push_front(j);
                    }
                }
                c.released_to = c.released_to.max(until);
                if min.saturating_add(n) <= seq && c.dead_check.is_none_or(|t| t.elapsed() >= DEAD_TRACKER_CHECK) {
                    // A tracked reader a full ring behind holds reuse back: maybe it is gone.
                    c.dead_check = Some(Instant::now());
                    let (seg, old) = (&self.seg, &self.old);
                    let files = || old.iter().map(|(_, owner)| owner.file()).chain(std::iter::once(seg.owner.file()));
                    flow::free_dead_trackers(h, seq.saturating_sub(n), &|index, pid| {
                        flow::reader_alive(files(), index, pid)
                    });
                }
            }
        }
        // One area per live, unreleased description and at most slot_count - 1 of those before `seq`'s: never empty.
        let j = if reusing && len >= TIMED_MIN_LEN && c.free.len() > 1 {
            let measured = c.pick.measure_next();
            if measured {
                flow::read_reports(self.seg.header(), |entry, report| c.pick.reported(entry, report));
            }
            let pick = c.pick.choose(measured);
            if measured {
                c.loan_pick = Some((pick, Instant::now()));
            }
            match pick.0 {
                Temp::Warm => c.free.pop_front(),
                Temp::Cold => c.free.pop_back(),
            }
        } else {
            c.free.pop_front()
        }
        .unwrap_or(slot as u32);
        c.slot_chunk[slot] = j;
        j
    }

    /// Lends the payload area of the next slot (exactly `len` bytes), marked as being written.
    ///
    /// If `len` exceeds [`slot_size`](Self::slot_size), the writer first moves to a new
    /// generation with slots of the next power of two ≥ `len`; the following `Published`
    /// reports `segment_changed`. A second `loan` without `commit` replaces the first.
    #[inline]
    pub fn loan(&mut self, len: usize) -> Result<&mut [u8], SlotError> {
        let area = self.loan_area(len, None)?;
        // SAFETY: the payload area `area` starts SLOT_HEADER_SIZE after its slot's header and holds slot_size >= len
        // bytes inside our mapping (`loan_area`). Readers in other processes may read these bytes concurrently; they
        // detect that through the area's odd sequence and discard what they read.
        Ok(unsafe { std::slice::from_raw_parts_mut(area.add(SLOT_HEADER_SIZE), len) })
    }

    /// The loan itself: takes the next sample's payload area for `len` bytes, marks the sample as being written and
    /// returns the area's slot (its header; the payload follows `SLOT_HEADER_SIZE` later). With `stream` (send time
    /// and clock of a copying write), the description is complete before the payload is written and announced as
    /// streamed (`SlotHeader::stream_seq`, `written` 0): readers may copy the payload out as it is written.
    #[inline]
    fn loan_area(&mut self, len: usize, stream: Option<(i64, u64)>) -> Result<*mut u8, SlotError> {
        if len > self.seg.slot_size {
            self.grow(len)?;
        }
        let seq = self.next_seq;
        if let Some(flow) = &mut self.flow
            && !flow.may_write(seq)
        {
            let (seg, old) = (&self.seg, &self.old);
            let files = || old.iter().map(|(_, owner)| owner.file()).chain(std::iter::once(seg.owner.file()));
            flow.wait(seg.header(), seq, seg.slot_count, self.publisher_id, &|index, pid| {
                flow::reader_alive(files(), index, pid)
            });
        }
        // A second loan of the same sample keeps its area.
        let chunk = match self.chunks.loaned {
            Some(j) => j,
            None => {
                let j = self.take_chunk(seq, len);
                self.chunks.loaned = Some(j);
                j
            }
        };
        let index = self.slot_index(seq);
        let slot = self.slot_at(index);
        let area = self.slot_at(chunk as usize);
        // SAFETY: `slot` and `area` point to SlotHeaders inside our mapping (64-byte aligned: the header size and
        // the stride are multiples of 64); their fields are atomics.
        let (header, area_header) = unsafe { (&*slot.cast::<SlotHeader>(), &*area.cast::<SlotHeader>()) };
        area_header.chunk_seq.store(2 * seq + 1, Ordering::Relaxed);
        header.seq.store(2 * seq + 1, Ordering::Relaxed);
        // Orders the "being written" marks before the payload stores (seqlock writer side).
        fence(Ordering::Release);
        if let Some((send_time_ns, clock)) = stream {
            // The description as `commit` will store it, then the announcement (Release: a reader that sees it sees
            // the description). A measured write is not streamed by its readers (they time their read, `pick.rs`).
            let flags = if self.chunks.loan_pick.is_some() { FLAG_TIMED } else { 0 };
            header.len.store(len as u64, Ordering::Relaxed);
            header.send_time_ns.store(send_time_ns, Ordering::Relaxed);
            header.clock.store(clock, Ordering::Relaxed);
            header.chunk.store(chunk, Ordering::Relaxed);
            header.flags.store(flags, Ordering::Relaxed);
            header.written.store(0, Ordering::Relaxed);
            header.stream_seq.store(2 * seq + 1, Ordering::Release);
        }
        self.loaned = Some(len);
        Ok(area)
    }

    /// Publishes the loaned slot with `len` payload bytes (≤ the loaned length).
    #[inline]
    pub fn commit(&mut self, len: usize, send_time_ns: i64, clock: u64) -> Result<Published, CommitError> {
        let loaned = self.loaned.ok_or(CommitError::NoLoan)?;
        if len > loaned {
            return Err(CommitError::LenExceedsLoan { len, loaned });
        }
        self.loaned = None;
        let seq = self.next_seq;
        let index = self.slot_index(seq);
        let chunk = self.chunks.loaned.take().unwrap_or(index as u32);
        let mut flags = 0;
        if let Some((pick, taken)) = self.chunks.loan_pick.take() {
            self.chunks.pick.written(seq, pick, taken.elapsed().as_nanos() as u64, len);
            flags = FLAG_TIMED;
        }
        let slot = self.slot_at(index);
        let area = self.slot_at(chunk as usize);
        // SAFETY: as in `loan`.
        let (header, area_header) = unsafe { (&*slot.cast::<SlotHeader>(), &*area.cast::<SlotHeader>()) };
        header.len.store(len as u64, Ordering::Relaxed);
        header.send_time_ns.store(send_time_ns, Ordering::Relaxed);
        header.clock.store(clock, Ordering::Relaxed);
        header.chunk.store(chunk, Ordering::Relaxed);
        header.flags.store(flags, Ordering::Relaxed);
        area_header.chunk_seq.store(2 * seq + 2, Ordering::Release);
        header.seq.store(2 * seq + 2, Ordering::Release);
        self.seg.header().write_seq.0.store(seq + 1, Ordering::Release);
        self.next_seq = seq + 1;
        Ok(Published { seq, segment_changed: std::mem::take(&mut self.changed) })
    }

    /// Copies `bytes` into the next slot and publishes it (`loan` + memcpy + `commit`).
    #[inline]
    pub fn write(&mut self, bytes: &[u8], send_time_ns: i64, clock: u64) -> Result<Published, SlotError> {
        self.write_announced(bytes, send_time_ns, clock, || {})
    }

    /// [`write`](Self::write), running `started` once the slot is marked as being written ([`RingReader::writing`]
    /// is true from then on) and before the copy: a publisher wakes its sleeping readers there for a large message,
    /// so that their wake-up overlaps the copy.
    ///
    /// [`RingReader::writing`]: super::RingReader::writing
    #[inline]
    pub fn write_announced(
        &mut self,
        bytes: &[u8],
        send_time_ns: i64,
        clock: u64,
        started: impl FnOnce(),
    ) -> Result<Published, SlotError> {
        let len = bytes.len();
        if len < STREAM_MIN_LEN {
            let slot = self.loan(len)?;
            started();
            copy::copy_from(slot, bytes);
        } else {
            let area = self.loan_area(len, Some((send_time_ns, clock)))?;
            let slot = self.slot_at(self.slot_index(self.next_seq));
            // SAFETY: `slot` is the SlotHeader of the sample just loaned, inside our mapping (as in `loan_area`);
            // `area` is its payload area's slot, holding slot_size >= len payload bytes after the header (`loan`'s
            // SAFETY).
            let (header, payload) = unsafe {
                (&*slot.cast::<SlotHeader>(), std::slice::from_raw_parts_mut(area.add(SLOT_HEADER_SIZE), len))
            };
            started();
            // In parts, each announced (Release after its bytes): readers copy part k out while part k+1 is written.
            for (i, (dst, src)) in payload.chunks_mut(STREAM_PART).zip(bytes.chunks(STREAM_PART)).enumerate() {
                copy::copy_from(dst, src);
                header.written.store(((i * STREAM_PART) + src.len()) as u64, Ordering::Release);
            }
        }
        let published = self.commit(len, send_time_ns, clock);
        // A loan of bytes.len() was just made, so commit cannot fail.
        Ok(published.unwrap_or(Published { seq: self.next_seq.wrapping_sub(1), segment_changed: false }))
    }

    /// Moves to generation + 1 with slots of at least `len` bytes.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, len: usize) -> Result<(), SlotError> {
        let new_size = len
            .checked_next_power_of_two()
            .filter(|s| *s <= MAX_SLOT_SIZE)
            .ok_or(SlotError::TooLarge { len, max: MAX_SLOT_SIZE })?;
        let generation = self.seg.generation + 1;
        let mut name = self.name.clone();
        let slot_count = grown_slot_count(self.budget, new_size, self.grown_min_slots, self.seg.slot_count);
        let (seg, fallback) = Self::create_segment(
            &mut name,
            Placement { huge_dir: self.huge_dir.as_deref(), quiet: self.huge_quiet },
            slot_count,
            new_size,
            self.publisher_id,
            generation,
            self.next_seq,
            self.seg.header().flow.0.timeout_ms.load(Ordering::Relaxed),
        )?;
        // Reliable readers are waited for in the new generation from its first sample.
        flow::carry_over(self.seg.header(), seg.header(), self.next_seq);
        if let Some(name) = &self.doorbell_name {
            write_doorbell_name(seg.header(), name);
        }
        if let Some(flow) = &mut self.flow {
            flow.reset();
        }
        // Announce the successor in the old header, then mark it superseded (Release: a
        // reader that sees the flag also sees the path and the final write_seq).
        let old = self.seg.header();
        let path = seg.path.as_os_str().as_encoded_bytes();
        let n = path.len().min(NEXT_PATH_CAP);
        for (dst, src) in old.next_path.iter().zip(&path[..n]) {
            dst.store(*src, Ordering::Relaxed);
        }
        old.next_path_len.store(n as u32, Ordering::Relaxed);
        old.superseded.store(1, Ordering::Release);
        tracing::debug!(
            "shm_ring: publisher {} grew to {} ({} bytes per slot)",
            self.publisher_id,
            seg.path.display(),
            new_size
        );
        let old = std::mem::replace(&mut self.seg, seg);
        self.old.push((old.path, old.owner));
        self.huge_fallback = fallback;
        self.loaned = None;
        self.chunks = Chunks::new(self.seg.slot_count, self.seg.slot_size, self.next_seq, self.chunks.expected_readers);
        self.changed = true;
        Ok(())
    }
}

impl Drop for RingWriter {
    fn drop(&mut self) {
        for path in self.old.iter().map(|(path, _)| path).chain(std::iter::once(&self.seg.path)) {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::debug!("shm_ring: cannot unlink {}: {e}", path.display());
            }
        }
    }
}

/// Stores `name` as the header's doorbell name, its length last (Release): a reader that loads the length with
/// Acquire reads the whole name.
fn write_doorbell_name(h: &SegmentHeader, name: &str) {
    let n = name.len().min(DOORBELL_NAME_CAP);
    for (dst, src) in h.doorbell_name.iter().zip(&name.as_bytes()[..n]) {
        dst.store(*src, Ordering::Relaxed);
    }
    h.doorbell_name_len.store(n as u32, Ordering::Release);
}
