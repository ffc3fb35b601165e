//! Byte layout of ring segments and doorbells (shared between processes, `#[repr(C)]`).
//!
//! Every field that another process can observe is an atomic, so that no Rust reference ever
//! aliases memory that is written without synchronisation. The only plain bytes are the slot
//! payloads, which are protected by the per-slot seqlock (see `reader.rs`).

use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU32, AtomicU64};

/// Size of a cache line on the platforms shoal targets.
pub(super) const CACHE_LINE: usize = 64;

/// `b"SHOALRNG"` read as a little-endian u64.
pub(super) const RING_MAGIC: u64 = u64::from_le_bytes(*b"SHOALRNG");
/// Layout version of ring segments (6: the header names the writer process's doorbell, which every reader's process
/// must tell when it stops being spin-only, `SegmentHeader::doorbell_name`; a reader of version 5 would not, and its
/// publisher could then skip waking it. 5: a slot's header describes a sample whose payload may live in another
/// slot's payload area, `SlotHeader::chunk`, guarded by that area's own seqlock `SlotHeader::chunk_seq`).
pub(super) const RING_VERSION: u32 = 6;
/// `b"SHOALDBL"` read as a little-endian u64.
pub(super) const DOORBELL_MAGIC: u64 = u64::from_le_bytes(*b"SHOALDBL");
/// Layout version of doorbells.
pub(super) const DOORBELL_VERSION: u32 = 1;

/// Capacity of a segment header's doorbell name (`shoal_db_<pid>_<token>` takes at most 9 + 10 + 1 + 24 bytes).
pub(super) const DOORBELL_NAME_CAP: usize = 48;

/// Capacity of the "next generation path" field of a superseded segment.
pub(super) const NEXT_PATH_CAP: usize = 248;

/// Entries of a segment's reliable-reader table (readers beyond it read best effort).
pub(super) const MAX_RELIABLE_READERS: usize = 32;

/// Whether readers of a ring of `slot_count` slots of `slot_size` bytes publish their cursor (tracked readers,
/// `flow.rs`) and its writer reuses warm payload areas (`writer.rs`): slots of at least 64 KiB in a ring of at least
/// 8 MiB. A smaller ring stays in the last-level cache as it cycles, and there a plain ring is faster: an area the
/// reader has just read is in that core's own cache, and rewriting it pulls each line back across cores (64 KiB
/// ping-pong, 16 slots: 4.7 µs plain against 10.6 µs reusing; 512 KiB: 60 µs plain against 35 µs reusing, block
/// mode, same run).
pub(super) fn warm_reuse(slot_count: u32, slot_size: usize) -> bool {
    slot_size >= 64 << 10 && (slot_count as usize).saturating_mul(slot_size) >= 8 << 20
}

/// Smallest accepted slot count.
pub(super) const MIN_SLOT_COUNT: u32 = 2;
/// Largest accepted slot count.
pub(super) const MAX_SLOT_COUNT: u32 = 1 << 20;
/// Largest payload of one slot (1 GiB).
pub(super) const MAX_SLOT_SIZE: usize = 1 << 30;
/// Largest ring segment (slots plus header) that is created or accepted (64 GiB).
pub(super) const MAX_SEGMENT_SIZE: u64 = 1 << 36;

/// A value alone on its cache line.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(super) struct CacheLine<T>(pub(super) T);

/// Header at offset 0 of a ring segment.
///
/// Lines 0-1: geometry, written once before `magic` is stored (Release). Line 2: the write
/// sequence (hot, written on every commit). Lines 3-6: growth control (written once).
#[repr(C, align(64))]
#[derive(Debug)]
pub(super) struct SegmentHeader {
    /// [`RING_MAGIC`], stored last with Release once the rest is initialised.
    pub(super) magic: AtomicU64,
    /// [`RING_VERSION`].
    pub(super) version: AtomicU32,
    /// `size_of::<SegmentHeader>()`; slot 0 starts here.
    pub(super) header_size: AtomicU32,
    /// Number of slots, a power of two.
    pub(super) slot_count: AtomicU32,
    /// `size_of::<SlotHeader>()`; the payload starts this far into a slot.
    pub(super) slot_header_size: AtomicU32,
    /// Payload capacity of one slot in bytes.
    pub(super) slot_size: AtomicU64,
    /// Distance between two slots: slot header plus `slot_size` rounded up to 64.
    pub(super) slot_stride: AtomicU64,
    /// Process id of the writer.
    pub(super) writer_pid: AtomicU32,
    /// Length of `doorbell_name` (stored with Release after it; 0: none).
    pub(super) doorbell_name_len: AtomicU32,
    /// Publisher id given at creation.
    pub(super) publisher_id: AtomicU64,
    /// Generation of this segment (0 first, +1 on every growth).
    pub(super) generation: AtomicU64,
    /// Sequence number of the first sample written into this generation.
    pub(super) base_seq: AtomicU64,
    /// Size of the file as created (may exceed header + slots when rounded to huge pages).
    pub(super) segment_size: AtomicU64,
    /// File name (in [`SHM_DIR`](super::SHM_DIR)) of the writer process's doorbell, which a reader's process tells
    /// when it stops being spin-only (`Doorbell::note_ringer`).
    pub(super) doorbell_name: [AtomicU8; DOORBELL_NAME_CAP],
    /// Number of samples ever published by this writer (continuous across generations).
    pub(super) write_seq: CacheLine<AtomicU64>,
    /// Non-zero once the writer moved to the next generation (stored with Release after
    /// `next_path`; no sample is written here afterwards).
    pub(super) superseded: AtomicU32,
    /// Length of `next_path`.
    pub(super) next_path_len: AtomicU32,
    /// Path of the next generation (UTF-8), valid once `superseded` is set.
    pub(super) next_path: [AtomicU8; NEXT_PATH_CAP],
    /// Line 7: flow control of reliable readers (see `flow.rs`).
    pub(super) flow: CacheLine<FlowHeader>,
    /// Lines 8..: the reliable readers, one line each.
    pub(super) readers: [ReaderSlot; MAX_RELIABLE_READERS],
}

/// The writer's flow-control words.
#[repr(C)]
#[derive(Debug, Default)]
pub(super) struct FlowHeader {
    /// How long the writer waits for a reliable reader, ms (written before `magic`); 0: it never waits.
    pub(super) timeout_ms: AtomicU32,
    /// Non-zero while the writer sleeps (or is about to) on `progress`.
    pub(super) writer_waiting: AtomicU32,
    /// Futex word: bumped by a reliable reader that consumed while the writer waits.
    pub(super) progress: AtomicU32,
    /// While `writer_waiting`: the cursor at which a reader wakes the writer (room for a quarter of the ring, not
    /// one slot; `flow.rs`). 0 in a ring of a shoal before this field: its readers then wake at each sample, and a
    /// reader here woke an older writer at each sample as that writer expects.
    pub(super) wake_at: AtomicU64,
}

/// One reliable reader (see `flow.rs` for the states). While in flow control its reader holds a shared OFD lock on
/// this entry's bytes of the segment file (`flow.rs`).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(super) struct ReaderSlot {
    /// Free, claiming, active (in flow control) or evicted.
    pub(super) state: AtomicU32,
    /// Process id of the reader, in its own pid namespace (for messages; liveness is the entry's lock).
    pub(super) pid: AtomicU32,
    /// Chosen by the reader; identifies its entry across generations.
    pub(super) token: AtomicU64,
    /// Every sample before this sequence number is consumed.
    pub(super) cursor: AtomicU64,
    /// The last large sample the reader read and how long its read took (`pick::pack`; 0: none yet), stored before
    /// `cursor`; the writer of a ring with warm reuse chooses areas by it (`pick.rs`). Zero in a ring of a shoal
    /// before this field, whose readers do not report.
    pub(super) read_report: AtomicU64,
}

/// Header of one slot; the slot's payload area follows at offset `size_of::<SlotHeader>()`.
///
/// A slot is two things. Its header's first five fields describe the sample whose sequence number maps to the slot
/// (`seq % slot_count`); that sample's payload is in payload area `chunk`, which the writer chooses (warm reuse,
/// see `writer.rs`): usually the slot's own, for large samples read by tracked readers the area of a sample every
/// reader has consumed. `chunk_seq` belongs to the slot's payload area and says which sample it holds.
#[repr(C, align(64))]
#[derive(Debug)]
pub(super) struct SlotHeader {
    /// Seqlock of the description: 0 never written, `2*s+1` while sample `s` is written, `2*s+2` once published.
    pub(super) seq: AtomicU64,
    /// Payload length in bytes.
    pub(super) len: AtomicU64,
    /// Send time, nanoseconds since the Unix epoch.
    pub(super) send_time_ns: AtomicI64,
    /// Per-publisher clock given by the caller.
    pub(super) clock: AtomicU64,
    /// Seqlock of this slot's payload area, in the same words as `seq`: `2*s+1` while sample `s` is written into
    /// it, `2*s+2` once it holds sample `s`.
    pub(super) chunk_seq: AtomicU64,
    /// The payload area (slot index) that holds the sample described here.
    pub(super) chunk: AtomicU32,
    /// Bits about the sample described here: `pick::FLAG_TIMED` (its readers time their read, `pick.rs`). Zero in a
    /// ring of a shoal before this field.
    pub(super) flags: AtomicU32,
    /// `2*s+1` once the fields above describe sample `s` while it is still being written and its payload is written
    /// in parts (a large copying write, `writer.rs`), stored with Release after them: a reader may copy the payload
    /// out up to [`written`](Self::written) before the sample is published (`reader.rs`, streamed reads). Zero in a
    /// ring of a shoal before this field, and left as it was by writes that are not streamed.
    pub(super) stream_seq: AtomicU64,
    /// Bytes of sample `stream_seq` written so far, from the start of its payload (stored with Release after each
    /// part; 0 when `stream_seq` is stored).
    pub(super) written: AtomicU64,
}

/// A doorbell segment: one per subscribing process.
#[repr(C, align(64))]
#[derive(Debug)]
pub(super) struct DoorbellHeader {
    /// [`DOORBELL_MAGIC`], stored last with Release.
    pub(super) magic: AtomicU64,
    /// [`DOORBELL_VERSION`].
    pub(super) version: AtomicU32,
    /// Process id of the waiting (subscribing) process.
    pub(super) owner_pid: AtomicU32,
    /// 1 while no thread of the owning process has ever registered as a waiter (nothing can sleep, so a ringer needs
    /// neither its fence nor the waiter check); 0 once one may (stored before the owner's first registration, then
    /// made visible to every ringer by a system-wide memory barrier, `doorbell.rs`). Zero in a doorbell of a shoal
    /// that did not know the field: its ringers always fence.
    pub(super) spin_only: AtomicU32,
    /// 1 after a thread registers as a waiter, 2 once a ringer has woken the registered threads (later ringers skip
    /// their `FUTEX_WAKE` until the next registration, `doorbell.rs`). Zero in a doorbell of a shoal that did not
    /// know the field: its ringers wake whenever `waiters > 0`.
    pub(super) rung: AtomicU32,
    /// Bumped by another process reading this process's rings when its own doorbell stops being spin-only (before
    /// its barrier, `doorbell.rs`): this process's publishers, which ask it instead of every subscriber's `spin_only`
    /// on each send, then ask those again.
    pub(super) spin_ends: AtomicU32,
    /// Futex word: incremented by a ringer that saw a waiter.
    pub(super) seq: CacheLine<AtomicU32>,
    /// Number of threads registered as (about to be) sleeping on `seq`.
    pub(super) waiters: CacheLine<AtomicU32>,
}

/// Size of [`SegmentHeader`].
pub(super) const SEGMENT_HEADER_SIZE: usize = size_of::<SegmentHeader>();
/// Size of [`SlotHeader`].
pub(super) const SLOT_HEADER_SIZE: usize = size_of::<SlotHeader>();
/// Size of a doorbell file (one page).
pub(super) const DOORBELL_FILE_SIZE: usize = 4096;

/// Distance between two slots for a given payload capacity, `None` on overflow.
pub(super) fn slot_stride(slot_size: usize) -> Option<usize> {
    let rounded = slot_size.checked_add(CACHE_LINE - 1)? & !(CACHE_LINE - 1);
    rounded.checked_add(SLOT_HEADER_SIZE)
}

/// Bytes used by header plus slots, `None` on overflow or above [`MAX_SEGMENT_SIZE`].
pub(super) fn ring_bytes(slot_count: u32, slot_size: usize) -> Option<u64> {
    let stride = u64::try_from(slot_stride(slot_size)?).ok()?;
    let total = stride.checked_mul(u64::from(slot_count))?.checked_add(SEGMENT_HEADER_SIZE as u64)?;
    (total <= MAX_SEGMENT_SIZE).then_some(total)
}
