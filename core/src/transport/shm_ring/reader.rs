//! The subscribing side of a ring: any number of readers, in any process, each with its own
//! cursor, reading the slots in place.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering, fence};
use std::time::{Duration, Instant};

use memmap2::MmapOptions;

use super::doorbell::Pacer;
use super::flow::{ACTIVE, ReaderFlow, TRACKING};
use super::layout::{
    DOORBELL_NAME_CAP, MAX_SLOT_COUNT, MAX_SLOT_SIZE, MIN_SLOT_COUNT, NEXT_PATH_CAP, RING_MAGIC, RING_VERSION,
    SEGMENT_HEADER_SIZE, SLOT_HEADER_SIZE, SegmentHeader, SlotHeader, ring_bytes, slot_stride, warm_reuse,
};
use super::pick::{FLAG_TIMED, TIMED_MIN_LEN};
use super::segment::{self, RingName};
use crate::sample::PayloadView;
use crate::sys::shared_bytes::{Arriving, SharedBytes};
use crate::sys::shm_guard::PeerMap;

/// Most generations followed in one `open` or one `try_read_*` call (guards against loops in
/// corrupted chains; real writers grow at most ~30 times: slot sizes double each time).
const MAX_HOPS: u32 = 64;
/// Largest ring mapping pre-faulted on open (`MAP_POPULATE`); larger rings fault in as they are read.
const POPULATE_MAX: usize = 64 << 20;
/// Most overrun skips in one `try_read_*` call before giving up with [`ReadOutcome::Torn`].
const MAX_SKIPS: u32 = 64;
/// Sequence numbers a reader accepts are below this (2^62 samples: 146 years at a billion a second). A write
/// sequence beyond it comes from a corrupt or hostile segment; refusing it keeps the slot words (`2 * seq + 2`) and
/// the cursor from wrapping around, which would let a reader circle through the same slots for ever.
const SEQ_LIMIT: u64 = 1 << 62;

/// A streamed write that makes no progress for this long is given up: the read is taken back (the cursor stays on the
/// sample, no drop) and the sample is read once it is published, as one that is not streamed.
const STREAM_STALL: Duration = Duration::from_millis(10);

/// Value of a slot's seqlock word once sample `seq` is published (`2 * seq + 2`). Wrapping: the
/// write sequence comes from shared memory, where a corrupt segment can hold any value; a real
/// writer never gets near 2^63 samples, so for it this is the plain formula.
#[inline]
fn published_word(seq: u64) -> u64 {
    seq.wrapping_mul(2).wrapping_add(2)
}

/// Error of [`RingReader::open`].
#[derive(Debug, thiserror::Error)]
pub enum RingOpenError {
    /// The name is not a path to a `shoal_<pid>_<unique>_g<generation>` file.
    #[error("not a shoal ring segment name: {0:?}")]
    BadName(String),
    /// Opening, sizing or mapping the file failed.
    #[error("shm ring {op} {path}: {source}")]
    Io {
        /// The failed step.
        op: &'static str,
        /// The file concerned.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is smaller than a segment header or than its declared geometry.
    #[error("segment {path} has {size} bytes, needs {needed}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// Bytes needed.
        needed: u64,
    },
    /// Wrong magic number (not a shoal ring, or not initialised yet).
    #[error("segment {path}: bad magic 0x{magic:016x}")]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic found.
        magic: u64,
    },
    /// Unsupported layout version.
    #[error("segment {path}: unsupported version {version}")]
    BadVersion {
        /// The file.
        path: PathBuf,
        /// The version found.
        version: u32,
    },
    /// Inconsistent geometry in the header.
    #[error("segment {path}: bad geometry: {what}")]
    BadGeometry {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: &'static str,
    },
    /// The file was truncated by another process while it was being opened.
    #[error("segment {path} was truncated while it was opened")]
    Truncated {
        /// The file.
        path: PathBuf,
    },
    /// The chain of superseded generations is longer than allowed.
    #[error("segment {path}: too many superseded generations")]
    ChainTooLong {
        /// The last file reached.
        path: PathBuf,
    },
}

/// What a `try_read_*` call produced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum ReadOutcome<R> {
    /// No new sample.
    Empty,
    /// A sample, verified not to have been overwritten while it was read.
    Sample(R),
    /// The writer overwrote the sample while it was being read (or lapped the reader
    /// repeatedly, or a superseded segment holds many samples it never published): the result was
    /// discarded and counted in [`RingReader::drops`]. Call again.
    Torn,
    /// The segment was superseded and its successor can no longer be opened (the writer is
    /// gone), or another process truncated the segment file ([`RingReader::truncated`]), or the
    /// chain of superseded generations is implausibly long; this reader will never deliver more
    /// samples.
    Ended,
}

/// Metadata of a sample (what [`RingReader::try_read_into`] returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleInfo {
    /// Sequence number (0-based, continuous across generations).
    pub seq: u64,
    /// Payload length.
    pub len: usize,
    /// Send time, nanoseconds since the Unix epoch.
    pub send_time_ns: i64,
    /// Per-publisher clock.
    pub clock: u64,
    /// Publisher id of the ring.
    pub publisher_id: u64,
}

/// A sample in place in shared memory, given to the closure of [`RingReader::try_read_with`].
///
/// The payload may be overwritten by the writer while the closure runs (a best-effort writer laps, a reliable one
/// evicts a reader that holds a slot past its flow-control timeout): it is a [`PayloadView`] that only copies bytes
/// out, never a `&[u8]` of the slot, and the closure must not trust what it copies (no panics on malformed bytes,
/// no side effects that cannot be undone). Its result is returned only if the slot was not overwritten meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct SampleView<'a> {
    payload: PayloadView<'a>,
    info: SampleInfo,
    streamed: bool,
}

impl<'a> SampleView<'a> {
    /// The payload in the shared segment, read by copying ([`PayloadView`]).
    pub fn payload(&self) -> PayloadView<'a> {
        self.payload
    }

    /// Payload length.
    pub fn len(&self) -> usize {
        self.info.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.info.len == 0
    }

    /// Send time, nanoseconds since the Unix epoch.
    pub fn send_time_ns(&self) -> i64 {
        self.info.send_time_ns
    }

    /// Per-publisher clock.
    pub fn clock(&self) -> u64 {
        self.info.clock
    }

    /// Publisher id of the ring.
    pub fn publisher_id(&self) -> u64 {
        self.info.publisher_id
    }

    /// Sequence number of the sample.
    pub fn seq(&self) -> u64 {
        self.info.seq
    }

    /// All metadata.
    pub fn info(&self) -> SampleInfo {
        self.info
    }

    /// Whether the sample was still being written when the view was handed over (a streamed write): its payload's
    /// copies wait for the bytes they take, and it is received once the closure returns and the sample is published.
    pub fn streamed(&self) -> bool {
        self.streamed
    }
}

/// Why a streamed read stopped following its write ([`StreamWait::gave_up`]).
const FOLLOWING: u8 = 0;
const STALLED: u8 = 1;
const OVERWRITTEN: u8 = 2;

/// What a wait for a streamed write saw in one poll.
enum StreamPoll<T> {
    Done(T),
    /// Not yet; the write's progress (a change restarts the stall clock).
    Pending(u64),
    /// The slot announces a later sample.
    Lost,
}

/// A sample read while it is written (`SlotHeader::stream_seq`): the payload's bytes arrive in order up to
/// `SlotHeader::written`.
struct StreamWait<'a> {
    slot: &'a SlotHeader,
    /// `2*s+1` of the sample read.
    mark: u64,
    len: usize,
    /// [`FOLLOWING`], or why the read stopped following the write.
    gave_up: AtomicU8,
    /// A yield of this read ran another thread: it yields at every poll ([`wait`](Self::wait)).
    shares_cpu: AtomicBool,
}

impl StreamWait<'_> {
    /// Polls until `poll` is done, paced by a [`Pacer`] from the last progress (it yields after 5 µs, then ever more
    /// rarely); once a yield ran another thread (most likely the writer, on this CPU: the two cannot copy at the same
    /// time) it yields at every poll from then on, for the rest of this read (1 MiB block ping-pong with both
    /// processes on one CPU: 96-101 µs, against 101-110 when it kept polling between yields and 101-103 when it read
    /// only published samples). `None` (and [`gave_up`](Self::gave_up) says why) when the write is overwritten or
    /// stalls for [`STREAM_STALL`].
    fn wait<T>(&self, mut poll: impl FnMut() -> StreamPoll<T>) -> Option<T> {
        if self.gave_up.load(Ordering::Relaxed) != FOLLOWING {
            return None;
        }
        let mut last = u64::MAX;
        // Since when the write made no progress, and the pacing of the poll since then (read lazily: most waits
        // end within a few polls).
        let mut paced: Option<(Instant, Pacer)> = None;
        let mut polls = 0u32;
        loop {
            match poll() {
                StreamPoll::Done(t) => return Some(t),
                StreamPoll::Lost => {
                    self.gave_up.store(OVERWRITTEN, Ordering::Relaxed);
                    return None;
                }
                StreamPoll::Pending(p) if p != last => {
                    (last, paced, polls) = (p, None, 0);
                }
                StreamPoll::Pending(_) => {}
            }
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(64) {
                let now = Instant::now();
                let (since, pacer) = paced.get_or_insert_with(|| (now, Pacer::new(now)));
                if now.saturating_duration_since(*since) >= STREAM_STALL {
                    self.gave_up.store(STALLED, Ordering::Relaxed);
                    return None;
                }
                pacer.pause(now);
                if pacer.gave_way() {
                    self.shares_cpu.store(true, Ordering::Relaxed);
                }
            }
            if self.shares_cpu.load(Ordering::Relaxed) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits until the writer published the sample (or gave it up, see [`wait`](Self::wait)).
    fn wait_published(&self) {
        self.wait(|| {
            if self.slot.seq.load(Ordering::Acquire) == self.mark {
                StreamPoll::Pending(self.slot.written.load(Ordering::Relaxed))
            } else {
                StreamPoll::Done(())
            }
        });
    }
}

impl Arriving for StreamWait<'_> {
    fn wait_for(&self, end: usize) -> usize {
        let written = self.wait(|| {
            let w = self.slot.written.load(Ordering::Acquire);
            // `written` of a later streamed write of this slot comes after its `stream_seq` (Release): seen here.
            if self.slot.stream_seq.load(Ordering::Relaxed) != self.mark {
                StreamPoll::Lost
            } else if w >= end as u64 {
                StreamPoll::Done(w)
            } else {
                StreamPoll::Pending(w)
            }
        });
        // Given up: the caller copies anyway and the read is discarded afterwards.
        written.map_or(self.len, |w| usize::try_from(w).unwrap_or(usize::MAX)).max(end)
    }
}

/// One validated, mapped generation.
#[derive(Debug)]
struct Mapped {
    /// Read-only, or read-write for a reliable reader (which writes only its entry of the reader table). Raw and
    /// guarded against truncation by the writer (or anyone who can write the file), see `sys::shm_guard`.
    map: Arc<PeerMap>,
    /// Kept open to ask whether the writer still holds its owner lock ([`RingReader::writer_alive`]); a reliable
    /// reader holds the lock on its reader-table entry through it (`flow.rs`).
    file: std::fs::File,
    path: PathBuf,
    name: RingName,
    slot_count: u32,
    slot_size: usize,
    stride: usize,
    writer_pid: u32,
    publisher_id: u64,
    base_seq: u64,
    /// Mapped read-write (a reliable reader, or a tracked one: it writes its reader-table entry).
    writable: bool,
}

impl Mapped {
    /// Opens `path` read-write for a reliable reader; for a best-effort one read-only, then read-write if its slots
    /// are large (a tracked reader, `RingReader::track`) and the file allows it.
    fn open_for(path: &Path, reliable: bool) -> Result<Mapped, RingOpenError> {
        let seg = Mapped::open(path, reliable)?;
        if reliable || !warm_reuse(seg.slot_count, seg.slot_size) {
            return Ok(seg);
        }
        match Mapped::open(path, true) {
            Ok(rw) => Ok(rw),
            Err(e) => {
                tracing::debug!("shm_ring: {} cannot be opened writable, read untracked: {e}", path.display());
                Ok(seg)
            }
        }
    }

    fn header(&self) -> &SegmentHeader {
        // SAFETY: open() checked the mapping holds at least SEGMENT_HEADER_SIZE bytes; it is
        // page aligned and SegmentHeader consists of atomics only.
        unsafe { &*self.map.as_ptr().cast::<SegmentHeader>() }
    }

    fn open(path: &Path, writable: bool) -> Result<Mapped, RingOpenError> {
        let bad_name = || RingOpenError::BadName(path.display().to_string());
        let name = path.file_name().and_then(|n| n.to_str()).and_then(RingName::parse).ok_or_else(bad_name)?;
        let io = |op| move |source| RingOpenError::Io { op, path: path.to_owned(), source };
        // The path came from another process: only /dev/shm or a hugetlbfs mount, no symlink, no FIFO.
        let (file, size) = crate::sys::open_peer_file(path, writable, true).map_err(io("open"))?;
        let too_small = |needed| RingOpenError::TooSmall { path: path.to_owned(), size, needed };
        if size < SEGMENT_HEADER_SIZE as u64 {
            return Err(too_small(SEGMENT_HEADER_SIZE as u64));
        }
        // The header first: the geometry it declares decides how much is mapped (a file announced by another
        // process may be far larger than its ring, or sparse; it is never mapped or populated whole).
        // On hugetlbfs (outside /dev/shm) mappings are whole huge pages: map the file the writer sized.
        let on_hugetlbfs = path.parent() != Some(Path::new(segment::SHM_DIR));
        let whole = usize::try_from(size).map_err(|_| too_small(size))?;
        let head_len = if on_hugetlbfs { whole } else { SEGMENT_HEADER_SIZE };
        // Raw, read-only and guarded: the file may be truncated between the fstat above and these loads.
        let head = PeerMap::new(MmapOptions::new().len(head_len).map_raw_read_only(&file).map_err(io("mmap"))?);
        // SAFETY: the mapping holds SEGMENT_HEADER_SIZE bytes, is page aligned, atomics only.
        let h = unsafe { &*head.as_ptr().cast::<SegmentHeader>() };
        let magic = h.magic.load(Ordering::Acquire);
        if magic != RING_MAGIC {
            return Err(RingOpenError::BadMagic { path: path.to_owned(), magic });
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != RING_VERSION {
            return Err(RingOpenError::BadVersion { path: path.to_owned(), version });
        }
        let geometry = |what| RingOpenError::BadGeometry { path: path.to_owned(), what };
        let r = Ordering::Relaxed;
        if h.header_size.load(r) as usize != SEGMENT_HEADER_SIZE
            || h.slot_header_size.load(r) as usize != SLOT_HEADER_SIZE
        {
            return Err(geometry("header sizes"));
        }
        let slot_count = h.slot_count.load(r);
        if !slot_count.is_power_of_two() || !(MIN_SLOT_COUNT..=MAX_SLOT_COUNT).contains(&slot_count) {
            return Err(geometry("slot count"));
        }
        let slot_size = usize::try_from(h.slot_size.load(r))
            .ok()
            .filter(|s| (1..=MAX_SLOT_SIZE).contains(s))
            .ok_or_else(|| geometry("slot size"))?;
        let stride = slot_stride(slot_size).ok_or_else(|| geometry("slot size"))?;
        if h.slot_stride.load(r) != stride as u64 {
            return Err(geometry("slot stride"));
        }
        let needed = ring_bytes(slot_count, slot_size).ok_or_else(|| geometry("too large"))?;
        if needed > size {
            return Err(too_small(needed));
        }
        if h.generation.load(r) != name.generation {
            return Err(geometry("generation differs from the name"));
        }
        if name.generation == u64::MAX {
            return Err(geometry("generation has no successor"));
        }
        let writer_pid = h.writer_pid.load(r);
        if writer_pid != name.pid {
            return Err(geometry("writer pid differs from the name"));
        }
        let (publisher_id, base_seq) = (h.publisher_id.load(r), h.base_seq.load(r));
        if head.truncated() {
            // The checks above ran on zero pages.
            return Err(RingOpenError::Truncated { path: path.to_owned() });
        }
        drop(head);
        let len = if on_hugetlbfs { whole } else { usize::try_from(needed).map_err(|_| geometry("too large"))? };
        // Pre-fault what a reader touches first, but never more than POPULATE_MAX of a peer's file.
        let mut options = MmapOptions::new();
        options.len(len);
        if len <= POPULATE_MAX {
            options.populate();
        }
        // The validated ring (header and slots, `needed <= size` bytes), read-only, or read-write for a reliable
        // reader (which writes only its entry of the reader table); all accesses go through atomics or the seqlock
        // protocol, and a truncation of the file by anyone is survived (the guard).
        let map = PeerMap::new(
            if writable { options.map_raw(&file) } else { options.map_raw_read_only(&file) }.map_err(io("mmap"))?,
        );
        // Sized again on the mapped file: a shrink after the first fstat is refused here, one after this by the guard.
        let now = file.metadata().map_err(io("fstat"))?.len();
        if now < needed {
            return Err(too_small(needed));
        }
        Ok(Mapped {
            publisher_id,
            base_seq,
            map: Arc::new(map),
            file,
            path: path.to_owned(),
            name,
            slot_count,
            slot_size,
            stride,
            writer_pid,
            writable,
        })
    }

    /// Path of the successor (valid once `superseded` was seen with Acquire): the one stored in
    /// the header if its file name is the expected one, else derived in the same directory.
    fn next_path(&self) -> PathBuf {
        let expected = self.name.file_name(self.name.generation + 1);
        let h = self.header();
        let n = (h.next_path_len.load(Ordering::Relaxed) as usize).min(NEXT_PATH_CAP);
        let bytes: Vec<u8> = h.next_path[..n].iter().map(|b| b.load(Ordering::Relaxed)).collect();
        if let Ok(stored) = std::str::from_utf8(&bytes) {
            let stored = Path::new(stored);
            if stored.is_absolute() && stored.file_name().and_then(|f| f.to_str()) == Some(&expected) {
                return stored.to_owned();
            }
        }
        self.path.with_file_name(expected)
    }

    #[inline]
    fn slot(&self, seq: u64) -> *const u8 {
        let index = (seq & u64::from(self.slot_count - 1)) as usize;
        // SAFETY: index < slot_count and open() checked that the mapping holds
        // SEGMENT_HEADER_SIZE + slot_count * stride bytes.
        unsafe { self.map.as_ptr().add(SEGMENT_HEADER_SIZE + index * self.stride) }
    }

    #[inline]
    fn slot_header(&self, seq: u64) -> &SlotHeader {
        // SAFETY: `slot` is in bounds and 64-byte aligned (header size and stride are
        // multiples of 64, the mapping is page aligned); SlotHeader is atomics only.
        unsafe { &*self.slot(seq).cast::<SlotHeader>() }
    }

    /// How often a reliable reader of this ring publishes its cursor (`flow::publish_every`).
    fn publish_every(&self) -> u64 {
        super::flow::publish_every(self.slot_count, self.slot_size)
    }

    /// The header of the slot whose payload area holds the sample that `slot` describes, if its `chunk` is in
    /// bounds, with the area's payload pointer.
    #[inline]
    fn area_of(&self, slot: &SlotHeader) -> Option<(&SlotHeader, *const u8)> {
        let chunk = slot.chunk.load(Ordering::Relaxed);
        if chunk >= self.slot_count {
            return None;
        }
        // `slot` maps index `chunk` (< slot_count) to itself, whatever the sequence's high bits.
        let at = self.slot(u64::from(chunk));
        // SAFETY: as in `slot_header`: in bounds (chunk < slot_count), 64-byte aligned, atomics only.
        Some((unsafe { &*at.cast::<SlotHeader>() }, at))
    }

    /// Whether the description of sample `seq` at `slot` is published and its payload area still holds it.
    fn holds(&self, slot: &SlotHeader, seq: u64) -> bool {
        let expected = published_word(seq);
        slot.seq.load(Ordering::Acquire) == expected
            && self.area_of(slot).is_some_and(|(area, _)| area.chunk_seq.load(Ordering::Acquire) == expected)
    }
}

/// A look at the slot a reader reads next that needs neither the reader nor its owner's lock
/// ([`RingReader::watch_next`]): a spinning receiver polls it, a load or two, and reads (under its lock) only once
/// it says something changed. It keeps the mapping alive, so it stays valid whatever happens to the reader.
#[derive(Debug)]
pub struct NextSlotWatch {
    map: Arc<PeerMap>,
    /// Byte offset of the slot's sequence word.
    seq_at: usize,
    /// That word when the watch was taken.
    seen: u64,
    /// Its value once the sample the reader waits for is published.
    published: u64,
    /// A plain ring's slot holds its sample's payload right after the header: asked for as soon as the sample is
    /// seen published, so that the payload crosses to this core while the receive takes its lock (`false` for a ring
    /// with warm reuse, whose payload may be in another slot).
    prefetch: bool,
}

impl NextSlotWatch {
    /// Whether a read may now find something it did not when the watch was taken: the slot's sequence word says
    /// the sample is published, or that it is being written in parts a read may take as they come (streamed), or
    /// changed otherwise (not to "being written": a read would find nothing; but to a later sample, or to zeros
    /// after a truncation), or the segment was superseded. Anything else a read would notice (a reader added
    /// elsewhere, an ended one) its owner checks besides.
    #[inline]
    pub fn changed(&self) -> bool {
        // SAFETY: `seq_at` is the offset of a slot header's first word (slot index < slot_count, 64-byte aligned)
        // and the superseded flag is in the segment header, both inside the mapping `open` validated; the `Arc`
        // keeps it mapped, and the guard keeps it readable after a truncation. Both words are atomics.
        let (seq, superseded) = unsafe {
            let base = self.map.as_ptr();
            (
                &*base.add(self.seq_at).cast::<std::sync::atomic::AtomicU64>(),
                &(*base.cast::<SegmentHeader>()).superseded,
            )
        };
        let s = seq.load(Ordering::Relaxed);
        if s == self.published {
            #[cfg(target_arch = "x86_64")]
            if self.prefetch {
                // A prefetch is a hint: it reads nothing into the program and cannot fault.
                let line = self.map.as_ptr().wrapping_add(self.seq_at + SLOT_HEADER_SIZE);
                // SAFETY: `_mm_prefetch` only hints the cache; any address is allowed (this one is in the mapping).
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast::<i8>()) };
            }
            return true;
        }
        if s == self.published.wrapping_sub(1) {
            // Being written: a read can begin only if the write is streamed (a large copy, readable as it comes);
            // a loan being filled or a small copy is left alone until it is published.
            // SAFETY: as above; `stream_seq` is an atomic of the same slot header.
            let stream = unsafe { &(*self.map.as_ptr().add(self.seq_at).cast::<SlotHeader>()).stream_seq };
            return stream.load(Ordering::Relaxed) == s;
        }
        s != self.seen || superseded.load(Ordering::Relaxed) != 0
    }
}

/// Reader of one publisher's ring; starts at the write position current when opened.
#[derive(Debug)]
pub struct RingReader {
    seg: Mapped,
    cursor: u64,
    drops: u64,
    ended: bool,
    /// Opened with [`RingReader::open_reliable`].
    reliable: bool,
    /// The reader's entry in the writer's flow control.
    flow: Option<ReaderFlow>,
    evicted: bool,
    /// The segment file was truncated under this reader (see [`RingReader::truncated`]).
    truncated: bool,
    /// A sample whose streamed read was taken back (its write stalled): read once published, not streamed again.
    stalled: Option<u64>,
}

/// A token no other reliable reader of this host uses: a random number drawn once per process (pids alone repeat
/// across pid namespaces sharing `/dev/shm`) and a counter.
fn flow_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static PROCESS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    // RandomState's keys come from the OS's random source.
    let process = *PROCESS.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(segment::own_pid());
        h.finish() << 32
    });
    process | u64::from(NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Drop for RingReader {
    fn drop(&mut self) {
        if let Some(f) = &self.flow {
            f.release(self.seg.header(), &self.seg.file);
        }
    }
}

impl RingReader {
    /// Opens the segment at `segment_name` (the path given by
    /// [`RingWriter::segment_name`](super::RingWriter::segment_name)). If it is already
    /// superseded the reader follows to the newest generation. Only samples written after
    /// opening are read.
    pub fn open(segment_name: &str) -> Result<RingReader, RingOpenError> {
        RingReader::open_with(segment_name, false)
    }

    /// Opens the segment like [`open`](Self::open) and joins the writer's flow control when the writer is
    /// reliable ([`RingWriter::set_flow_control`](super::RingWriter::set_flow_control)): the writer then waits
    /// (up to its timeout) instead of overwriting what this reader has not consumed. The segment is mapped
    /// read-write for that (the reader writes only its entry of the reader table). When the writer is best effort,
    /// or its table of reliable readers is full, the reader reads best effort ([`in_flow_control`] is false).
    ///
    /// [`in_flow_control`]: Self::in_flow_control
    pub fn open_reliable(segment_name: &str) -> Result<RingReader, RingOpenError> {
        RingReader::open_with(segment_name, true)
    }

    /// [`open_reliable`](Self::open_reliable) when `reliable`, else [`open`](Self::open).
    pub fn open_with_flow_control(segment_name: &str, reliable: bool) -> Result<RingReader, RingOpenError> {
        RingReader::open_with(segment_name, reliable)
    }

    fn open_with(segment_name: &str, reliable: bool) -> Result<RingReader, RingOpenError> {
        let mut seg = Mapped::open_for(Path::new(segment_name), reliable)?;
        let mut hops = 0;
        while seg.header().superseded.load(Ordering::Acquire) != 0 {
            hops += 1;
            if hops > MAX_HOPS {
                return Err(RingOpenError::ChainTooLong { path: seg.path });
            }
            seg = Mapped::open_for(&seg.next_path(), reliable)?;
        }
        let cursor = seg.header().write_seq.0.load(Ordering::Acquire);
        if cursor >= SEQ_LIMIT {
            return Err(RingOpenError::BadGeometry { path: seg.path, what: "write sequence beyond any writer" });
        }
        let mut r = RingReader {
            seg,
            cursor,
            drops: 0,
            ended: false,
            reliable,
            flow: None,
            evicted: false,
            truncated: false,
            stalled: None,
        };
        if reliable {
            r.join_flow_control(flow_token());
        }
        if r.flow.is_none() {
            r.track(flow_token());
        }
        Ok(r)
    }

    /// Claims an entry of the reader table when the writer is reliable.
    fn join_flow_control(&mut self, token: u64) {
        let h = self.seg.header();
        if h.flow.0.timeout_ms.load(Ordering::Acquire) == 0 {
            return;
        }
        self.flow = ReaderFlow::claim(h, &self.seg.file, (self.cursor, self.seg.publish_every()), token, ACTIVE);
        if self.flow.is_none() {
            tracing::warn!(
                "shm_ring: {}: the table of reliable readers is full; reading best effort",
                self.seg.path.display()
            );
        }
    }

    /// A best-effort reader of a large ring with large slots (`layout::warm_reuse`), mapped writable, publishes its
    /// cursor in the reader table (a tracked entry) so that the writer can reuse warm payload areas; where the table
    /// is full it reads untracked, and the writer then reuses nothing (it expects as many readers as subscribers it
    /// knows of).
    fn track(&mut self, token: u64) {
        if self.evicted || !self.seg.writable || !warm_reuse(self.seg.slot_count, self.seg.slot_size) {
            return;
        }
        self.flow = ReaderFlow::claim(
            self.seg.header(),
            &self.seg.file,
            (self.cursor, self.seg.publish_every()),
            token,
            TRACKING,
        );
    }

    /// Whether the writer waits for this reader (it asked for it, the writer is reliable and has not taken it out).
    pub fn in_flow_control(&self) -> bool {
        self.flow.is_some() && !self.evicted
    }

    /// Whether the writer took this reader out of flow control (it stayed a full ring behind for the writer's
    /// whole timeout); it reads on best effort.
    pub fn evicted(&self) -> bool {
        self.evicted
    }

    /// Moves the cursor back over the samples still in the ring that were sent at or after
    /// `min_send_time_ns` (at most `slot_count - 1` of them), so that a subscriber which opened
    /// the ring just after the publisher started serving it still gets those samples. Returns
    /// how many samples were rewound. A slot being overwritten stops the rewind.
    pub fn rewind_to_time(&mut self, min_send_time_ns: i64) -> u64 {
        self.rewind_while(|t, _| t >= min_send_time_ns)
    }

    /// Moves the cursor back over the newest samples still in the ring, from the newest back, while `more(send
    /// time, payload length)` of each says so (at most `slot_count - 1` of them; a late joiner's history is read
    /// this way). Each slot is validated as a read validates it: one not published, overwritten or being written
    /// stops the rewind, so the reader never starts on a slot the writer is in. Returns how many were rewound.
    pub fn rewind_while(&mut self, mut more: impl FnMut(i64, u64) -> bool) -> u64 {
        let mut rewound = 0u64;
        while self.cursor > 0 && rewound + 1 < u64::from(self.seg.slot_count) {
            let prev = self.cursor - 1;
            let slot = self.seg.slot_header(prev);
            // A sample whose payload area was reused (warm reuse, `writer.rs`) is gone like an overwritten one.
            if !self.seg.holds(slot, prev) {
                break;
            }
            let t = slot.send_time_ns.load(Ordering::Relaxed);
            let len = slot.len.load(Ordering::Relaxed);
            // Re-check after reading the time: the writer may have started to overwrite the slot.
            fence(Ordering::Acquire);
            if !self.seg.holds(slot, prev) || !more(t, len) {
                break;
            }
            self.cursor = prev;
            rewound += 1;
        }
        rewound
    }

    /// Path of the segment currently read.
    pub fn segment_name(&self) -> &str {
        segment::path_str(&self.seg.path)
    }

    /// Generation of the segment currently read.
    pub fn generation(&self) -> u64 {
        self.seg.name.generation
    }

    /// Publisher id of the ring.
    pub fn publisher_id(&self) -> u64 {
        self.seg.publisher_id
    }

    /// Path of the writer process's doorbell as its header names it (`RingWriter::announce_doorbell`), if it
    /// names one that is well formed (`shoal_db_<writer pid>_…` in [`SHM_DIR`](super::SHM_DIR)). This process must
    /// tell it when it stops being spin-only (`Doorbell::note_ringer`).
    pub fn writer_doorbell(&self) -> Option<String> {
        let h = self.seg.header();
        let n = h.doorbell_name_len.load(Ordering::Acquire) as usize;
        if n == 0 || n > DOORBELL_NAME_CAP {
            return None;
        }
        let bytes: Vec<u8> = h.doorbell_name[..n].iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let name = String::from_utf8(bytes).ok()?;
        let owner = name.strip_prefix("shoal_db_").and_then(|_| segment::owner_pid_of(&name));
        (owner == Some(self.seg.writer_pid) && !name.contains('/')).then(|| format!("{}/{name}", super::SHM_DIR))
    }

    /// Process id of the writer.
    pub fn writer_pid(&self) -> u32 {
        self.seg.writer_pid
    }

    /// Whether the writer process still lives: it holds the owner lock on its segment (`sys::OwnerLock`, asked with
    /// `F_OFD_GETLK`), which the kernel releases when the process dies. Unlike `kill(pid, 0)` this is right
    /// whatever pid namespace the writer is in (its pid means another process here, or none). Only where the
    /// kernel has no OFD locks is the pid asked.
    pub fn writer_alive(&self) -> bool {
        crate::sys::owner_holds(&self.seg.file).unwrap_or_else(|_| segment::pid_alive(self.seg.writer_pid))
    }

    /// Slots in the ring.
    pub fn slot_count(&self) -> u32 {
        self.seg.slot_count
    }

    /// Payload capacity of one slot of the current segment.
    pub fn slot_size(&self) -> usize {
        self.seg.slot_size
    }

    /// Sequence number of the next sample this reader expects.
    pub fn position(&self) -> u64 {
        self.cursor
    }

    /// Whether another process truncated the segment file while this reader had it mapped. The SIGBUS guard
    /// (`sys::shm_guard`) then replaced the mapping with zero pages; the read that saw it was discarded
    /// and counted in [`drops`](Self::drops), and the reader has ended ([`ReadOutcome::Ended`]).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Ends the reader if the guard replaced its mapping (one atomic load; checked only on reads that found no
    /// sample).
    #[inline]
    fn check_truncated(&mut self) -> bool {
        self.seg.map.truncated() && self.on_truncated()
    }

    #[cold]
    fn on_truncated(&mut self) -> bool {
        if !self.truncated {
            self.truncated = true;
            self.ended = true;
            self.drops = self.drops.saturating_add(1);
            tracing::warn!(
                "shm_ring: {} was truncated by another process while mapped here; the sample being read is dropped \
                 and this reader detached (the mapping now reads zeros)",
                self.seg.path.display()
            );
        }
        true
    }

    /// Samples lost so far: overwritten before they were read (overrun) or while they were
    /// read (torn).
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// Skips the samples older than the newest `n` written (at least 1), counting them as drops: a subscriber
    /// whose queue keeps fewer messages than the ring holds reads only its newest ones.
    ///
    /// A reader less than `n` behind learns that from the slot of sample `cursor + n`, which the writer has not begun
    /// yet, instead of from the write sequence: that line is written on every commit, so loading it on every read
    /// moved a cache line across cores per message; the slot `n` ahead was last written a ring ago.
    #[inline]
    pub fn keep_newest(&mut self, n: u64) {
        let n = n.max(1);
        if n < u64::from(self.seg.slot_count) {
            let ahead = self.cursor.wrapping_add(n);
            // Below `2 * ahead + 1`: sample `ahead` is not begun, so the writer is at most `n` ahead of the cursor.
            // (A superseded segment never gets there: the write sequence below decides for it.)
            if self.seg.slot_header(ahead).seq.load(Ordering::Acquire) < ahead.wrapping_mul(2).wrapping_add(1)
                && self.seg.header().superseded.load(Ordering::Relaxed) == 0
            {
                return;
            }
        }
        let w = self.seg.header().write_seq.0.load(Ordering::Acquire);
        let oldest = w.saturating_sub(n);
        if oldest > self.cursor && !self.ended {
            let _ = self.skip_to(oldest);
        }
    }

    /// Whether a `try_read_*` call would make progress (a sample is ready, the reader was
    /// overrun, or the segment was superseded). No syscall, two loads (three after an overrun).
    ///
    /// It agrees with `try_read_*`: while it is true, a read delivers a sample, moves the cursor on (counting what
    /// it skips as drops), follows the next generation or ends the reader, whatever the segment holds, so that a
    /// caller waiting for it never spins on a segment that cannot be read; while it is false, a read returns
    /// [`ReadOutcome::Empty`] (or [`ReadOutcome::Ended`]) without changing anything, unless the next sample's write
    /// is streamed ([`streaming`](Self::streaming)): the read then delivers that sample as it is written, or takes
    /// the read back if the write stalls.
    #[inline]
    pub fn has_data(&self) -> bool {
        if self.ended {
            return false;
        }
        let c = self.cursor;
        let expected = published_word(c);
        let s = self.seg.slot_header(c).seq.load(Ordering::Acquire);
        s == expected
            || self.seg.header().superseded.load(Ordering::Acquire) != 0
            || (s > expected && c < self.seg.header().write_seq.0.load(Ordering::Acquire))
    }

    /// A watch of the slot the next read looks at ([`NextSlotWatch`]); `None` once the reader ended.
    pub fn watch_next(&self) -> Option<NextSlotWatch> {
        if self.ended {
            return None;
        }
        let slot = self.seg.slot(self.cursor);
        let seq_at = slot as usize - self.seg.map.as_ptr() as usize;
        let seen = self.seg.slot_header(self.cursor).seq.load(Ordering::Relaxed);
        Some(NextSlotWatch {
            map: Arc::clone(&self.seg.map),
            seq_at,
            seen,
            published: published_word(self.cursor),
            prefetch: !warm_reuse(self.seg.slot_count, self.seg.slot_size),
        })
    }

    /// True while the writer writes the sample at the cursor: it loaned the slot and has not published it yet (a
    /// large copy under way, a loan being filled, or a writer that died in between).
    pub fn writing(&self) -> bool {
        !self.ended && self.seg.slot_header(self.cursor).seq.load(Ordering::Relaxed) == published_word(self.cursor) - 1
    }

    /// True while the sample at the cursor is written in parts that a read copies out as they come (a large copying
    /// write, `SlotHeader::stream_seq`): a read now delivers it, though [`has_data`](Self::has_data) is false.
    pub fn streaming(&self) -> bool {
        if self.ended {
            return false;
        }
        let slot = self.seg.slot_header(self.cursor);
        let mark = published_word(self.cursor).wrapping_sub(1);
        slot.seq.load(Ordering::Acquire) == mark && self.streamable(slot, self.cursor)
    }

    /// Whether sample `c`, which `slot` describes and whose write is under way, may be read as it is written: its
    /// write announced it as streamed, is not one its readers time (`pick.rs`), and did not stall under a read before.
    #[inline]
    fn streamable(&self, slot: &SlotHeader, c: u64) -> bool {
        slot.stream_seq.load(Ordering::Acquire) == published_word(c).wrapping_sub(1)
            && slot.flags.load(Ordering::Relaxed) & FLAG_TIMED == 0
            && self.stalled != Some(c)
    }

    /// Reads the next sample in place: `f` gets a view of the payload in shared memory (of a sample still being
    /// written if its write is streamed: the view's copies wait for the bytes they take, and the read waits for the
    /// sample's publication after `f`). After `f` returns, the slot is checked again; if the writer overwrote it meanwhile the result is
    /// discarded ([`ReadOutcome::Torn`], counted as a drop). A reader that fell more than
    /// `slot_count` behind skips ahead first and counts the skipped samples as drops. A drained,
    /// superseded segment is replaced by the next generation transparently; a sample that a superseded segment
    /// counts as written but whose slot holds no published sample is lost and counted as a drop.
    ///
    /// Every call either delivers a sample, moves the cursor on, follows the next generation, ends the reader, or
    /// returns [`ReadOutcome::Empty`] with [`has_data`](Self::has_data) false: no content of a segment, however
    /// broken, makes a reader report data forever without making progress.
    #[inline]
    pub fn try_read_with<R>(&mut self, f: impl FnOnce(SampleView<'_>) -> R) -> ReadOutcome<R> {
        if self.ended {
            return ReadOutcome::Ended;
        }
        let mut skips = 0;
        let mut hops = 0;
        loop {
            let c = self.cursor;
            let expected = published_word(c);
            let slot = self.seg.slot_header(c);
            let s1 = slot.seq.load(Ordering::Acquire);
            if s1 == expected {
                return self.read_slot(c, false, f);
            }
            if s1 == expected.wrapping_sub(1) && self.streamable(slot, c) {
                return self.read_slot(c, true, f);
            }
            if s1 > expected {
                // Overwritten (or being overwritten) by a later sample, if the write sequence says the writer got
                // that far; otherwise the slot claims a sample the writer has not begun (a write sequence not yet
                // visible here, or a corrupt segment) and reads as not published yet.
                let w = self.seg.header().write_seq.0.load(Ordering::Acquire);
                if c < w {
                    skips += 1;
                    if skips > MAX_SKIPS {
                        return ReadOutcome::Torn;
                    }
                    if !self.skip_ahead(w) {
                        return ReadOutcome::Ended;
                    }
                    continue;
                }
            }
            if self.seg.header().superseded.load(Ordering::Acquire) == 0 {
                // A truncated segment reads as zeros: an empty ring forever, unless the guard's flag is seen.
                if self.check_truncated() {
                    return ReadOutcome::Ended;
                }
                self.flow_consumed(true);
                return ReadOutcome::Empty;
            }
            // Superseded: everything ever written here is visible now, the slot at the cursor included.
            let w = self.seg.header().write_seq.0.load(Ordering::Acquire);
            if c < w {
                skips += 1;
                if skips > MAX_SKIPS {
                    return ReadOutcome::Torn;
                }
                let s2 = slot.seq.load(Ordering::Acquire);
                if s2 < expected && !self.skip_unpublished(w) {
                    // Counted as written, yet never published here (and nobody writes a superseded segment): lost.
                    return ReadOutcome::Ended;
                }
                // Otherwise published (or overwritten) after the first look: read it (or skip ahead) now.
                continue;
            }
            hops += 1;
            if hops > MAX_HOPS {
                self.ended = true;
                tracing::warn!(
                    "shm_ring: {} leads through more than {MAX_HOPS} superseded generations in one read; \
                     this reader detached",
                    self.seg.path.display()
                );
                return ReadOutcome::Ended;
            }
            if !self.switch_generation() {
                return ReadOutcome::Ended;
            }
        }
    }

    /// Reads sample `c`, published, or with `streamed` still being written in parts (`streamable`): the view's
    /// copies then wait for the bytes they take, and the read waits for the sample to be published before it checks
    /// the slot.
    #[inline]
    fn read_slot<R>(&mut self, c: u64, streamed: bool, f: impl FnOnce(SampleView<'_>) -> R) -> ReadOutcome<R> {
        let expected = published_word(c);
        let slot = self.seg.slot_header(c);
        let len = slot.len.load(Ordering::Relaxed);
        let info = SampleInfo {
            seq: c,
            len: len.min(self.seg.slot_size as u64) as usize,
            send_time_ns: slot.send_time_ns.load(Ordering::Relaxed),
            clock: slot.clock.load(Ordering::Relaxed),
            publisher_id: self.seg.publisher_id,
        };
        self.cursor = c.wrapping_add(1);
        // The payload area holding the sample (its own slot's, or a reused warm one), and that it still holds it.
        let holds = |seq: u64| seq == expected || (streamed && seq == expected.wrapping_sub(1));
        let area = self.seg.area_of(slot).filter(|(area, _)| holds(area.chunk_seq.load(Ordering::Acquire)));
        let Some((area, at)) = area.filter(|_| len <= self.seg.slot_size as u64) else {
            // Reused for a later sample after every tracked reader had read this one (a reader that is not tracked
            // or was not yet), overwritten meanwhile (re-check below), or a corrupt length or area: never accepted.
            if self.check_truncated() {
                return ReadOutcome::Ended;
            }
            self.drops = self.drops.saturating_add(1);
            return ReadOutcome::Torn;
        };
        // SAFETY: the payload area starts SLOT_HEADER_SIZE into its slot (index < slot_count, `area_of`) and holds
        // slot_size >= len bytes inside the mapping, which `self.seg` keeps mapped while the closure borrows `self`;
        // this process never writes it (the mapping is read-only, or read-write only for the reader-table entry).
        // The writer may write these bytes concurrently: `SharedBytes` only copies out of them, and the sequence
        // re-checks below discard anything read during such a write.
        let payload = unsafe {
            let p = std::ptr::NonNull::new_unchecked(at.add(SLOT_HEADER_SIZE).cast_mut());
            SharedBytes::new(p, info.len)
        };
        let stream = streamed.then(|| StreamWait {
            slot,
            mark: expected.wrapping_sub(1),
            len: info.len,
            gave_up: AtomicU8::new(FOLLOWING),
            shares_cpu: AtomicBool::new(false),
        });
        let payload = match &stream {
            Some(w) => payload.arriving(w),
            None => payload,
        };
        // A large sample of a ring with warm reuse: its read is timed for the writer's choice of areas (`pick.rs`)
        // if its write was.
        let timed = !streamed
            && info.len >= TIMED_MIN_LEN
            && slot.flags.load(Ordering::Relaxed) & FLAG_TIMED != 0
            && self.flow.is_some()
            && warm_reuse(self.seg.slot_count, self.seg.slot_size);
        let started = timed.then(Instant::now);
        let result = f(SampleView { payload: PayloadView::shared(payload), info, streamed });
        let read_ns = started.map(|t| t.elapsed().as_nanos() as u64);
        if let Some(w) = &stream {
            w.wait_published();
            if w.gave_up.load(Ordering::Relaxed) == STALLED {
                // Taken back: the sample is read again once it is published.
                self.cursor = c;
                self.stalled = Some(c);
                return ReadOutcome::Empty;
            }
        }
        // Seqlock reader: the payload reads above happen before the re-checks.
        fence(Ordering::Acquire);
        if slot.seq.load(Ordering::Relaxed) != expected || area.chunk_seq.load(Ordering::Relaxed) != expected {
            if self.check_truncated() {
                // Counted once by check_truncated.
                return ReadOutcome::Ended;
            }
            self.drops = self.drops.saturating_add(1);
            return ReadOutcome::Torn;
        }
        if let (Some(flow), Some(ns)) = (&self.flow, read_ns)
            && !self.evicted
        {
            flow.report_read(self.seg.header(), c, ns);
        }
        self.flow_consumed(false);
        ReadOutcome::Sample(result)
    }

    /// Tells the flow-control entry (if any) what is consumed: everything before the cursor (`caught_up`: and
    /// nothing after it is published yet), and notices whether the writer took the entry.
    #[inline]
    fn flow_consumed(&mut self, caught_up: bool) {
        let Some(flow) = &mut self.flow else { return };
        if self.evicted {
            return;
        }
        if caught_up {
            flow.caught_up(self.seg.header(), &self.seg.file, self.cursor);
        } else {
            flow.consumed(self.seg.header(), &self.seg.file, self.cursor);
        }
        if flow.evicted {
            if flow.tracking() {
                // The writer freed the entry (it judged this reader gone): read on untracked.
                self.flow = None;
            } else {
                self.evicted = true;
            }
        }
    }

    /// The slot at the cursor was overwritten (the writer is at `w`): jump to the oldest sample that may still be
    /// intact and count everything before it as dropped.
    /// False if that ended the reader ([`skip_to`](Self::skip_to)).
    #[cold]
    fn skip_ahead(&mut self, w: u64) -> bool {
        // Not the oldest slot (the writer is about to overwrite it) but the middle of the ring: an overrun
        // reader then has half a ring of slack to catch up instead of being lapped again at once.
        let resume = w.saturating_sub(u64::from(self.seg.slot_count / 2).max(1));
        self.skip_to(resume.max(self.cursor + 1))
    }

    /// The superseded segment (written up to `w`) never published the sample at the cursor: count it as dropped
    /// and move on, past everything before the last `slot_count` samples too (no slot can hold those).
    /// False if that ended the reader ([`skip_to`](Self::skip_to)).
    #[cold]
    fn skip_unpublished(&mut self, w: u64) -> bool {
        let oldest = w.saturating_sub(u64::from(self.seg.slot_count));
        self.skip_to(oldest.max(self.cursor + 1))
    }

    /// Moves the cursor forward to `target`, counting the samples passed over as drops. A target at or beyond
    /// [`SEQ_LIMIT`] (a corrupt write sequence) ends the reader instead, counting one drop: false.
    #[cold]
    fn skip_to(&mut self, target: u64) -> bool {
        if target >= SEQ_LIMIT {
            self.detach_beyond_limit();
            return false;
        }
        self.drops = self.drops.saturating_add(target.saturating_sub(self.cursor));
        self.cursor = target;
        true
    }

    #[cold]
    fn detach_beyond_limit(&mut self) {
        self.ended = true;
        self.drops = self.drops.saturating_add(1);
        tracing::warn!(
            "shm_ring: {} counts more samples than any writer writes (a corrupt write sequence); this reader detached",
            self.seg.path.display()
        );
    }

    /// Opens the next generation; false (and `ended`) if that fails.
    #[cold]
    fn switch_generation(&mut self) -> bool {
        let next = self.seg.next_path();
        match Mapped::open_for(&next, self.reliable) {
            Ok(seg) => {
                let w = seg.header().write_seq.0.load(Ordering::Acquire);
                if seg.base_seq >= SEQ_LIMIT || w >= SEQ_LIMIT {
                    self.detach_beyond_limit();
                    return false;
                }
                if seg.base_seq >= self.cursor {
                    self.drops = self.drops.saturating_add(seg.base_seq - self.cursor);
                    self.cursor = seg.base_seq;
                } else {
                    tracing::warn!(
                        "shm_ring: {} starts at sample {} but the reader is at {}; resyncing",
                        next.display(),
                        seg.base_seq,
                        self.cursor
                    );
                    self.cursor = w;
                }
                if let Some(old) = self.flow.take() {
                    // The new entry's lock first, then the old one's: the writer always finds one of them held.
                    if !self.evicted && (!old.tracking() || seg.writable) {
                        self.flow = old.follow(seg.header(), &seg.file, (self.cursor, seg.publish_every()));
                    }
                    old.release(self.seg.header(), &self.seg.file);
                }
                self.seg = seg;
                if self.flow.is_none() {
                    // Grown to large slots: publish the cursor from now on.
                    self.track(flow_token());
                }
                true
            }
            Err(e) => {
                tracing::warn!(
                    "shm_ring: {} was superseded but its successor cannot be opened: {e}",
                    self.seg.path.display()
                );
                self.ended = true;
                false
            }
        }
    }

    /// Copies the next sample into `buf` (cleared first), then validates it like
    /// [`try_read_with`](Self::try_read_with). On `Torn`, `buf` holds garbage.
    pub fn try_read_into(&mut self, buf: &mut Vec<u8>) -> ReadOutcome<SampleInfo> {
        self.try_read_with(|view| {
            buf.clear();
            view.payload().extend_vec(buf);
            view.info()
        })
    }
}
