//! The body of the `ring_header` fuzz target: `RingReader::open` on a ring segment file whose bytes come from the
//! input, then reads. Shared (`#[path]`) by `fuzz_targets/ring_header.rs` and by `core/tests/fuzz_ring_header.rs`,
//! which runs the committed seeds through it in the test suite (so the target is known to reach the reader).
//!
//! Input format (written by `seedgen`): `[flags u8]`, then if flags bit 1 is set `[len u16 LE]`, then if bit 6 is
//! set `[plen u16 LE]`; then the bytes of the first segment file (`len` of them when a second file follows), then
//! the bytes of the second file, then (bit 6) `plen` bytes of patches.
//! - bit 0: name the first file after the generation stored in its header, and store this process's pid as the
//!   writer pid of both files (so that the name checks can pass); clear: the name `..._g0`, the bytes as given.
//! - bit 1: a second file, generation + 1 of the same ring, exists (the successor a superseded
//!   segment points to).
//! - bits 2..=4: number of `try_read_*` calls (0..=7); bit 5: `rewind_to_time(i64::MIN)` first.
//! - bit 6: once the reader is open, the patches are written into the file it reads, as a writer (broken, hostile,
//!   or just running) changes a segment a reader has mapped: records `[offset u16 LE][n u8][n bytes]`, those that
//!   end beyond the file skipped. A reader only ever opens a segment that is not superseded; this is how inputs
//!   reach the states a segment gets into afterwards (superseded, samples counted but not published, ...).
//!
//! The files are written directly into /dev/shm (the only directory besides hugetlbfs mount points that
//! `sys::open_peer_file` opens) as `shoal_<this pid>_fz<n>_g<generation>`, and removed after each input. The live
//! pid keeps stale-file cleanups of other processes (and `scripts/test`'s leftover check) off them; `fz` never occurs
//! in a real writer's names (hexadecimal tokens), so `scripts/fuzz` removes what a crashed run left behind.
//!
//! Oracle: nothing panics or faults (bad headers are errors), a sample never claims more bytes than a slot holds,
//! drops never go backwards, an ended reader stays ended, and the reader settles: within a bound set by the input's
//! size (every read of a static segment makes progress) it reports no data, and a read then changes nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal::transport::shm_ring::{ReadOutcome, RingReader, SHM_DIR};

/// Offset of `writer_pid` (u32) in the segment header.
const WRITER_PID_OFFSET: usize = 40;
/// Offset of `generation` (u64) in the segment header.
const GENERATION_OFFSET: usize = 56;

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// `RingReader::open` succeeded.
    pub(crate) opened: bool,
    /// Samples read (the flagged reads and the reads until the reader settled).
    pub(crate) samples: u64,
    /// `Torn` outcomes.
    pub(crate) torn: u64,
    /// Generations the reader moved on by.
    pub(crate) followed: u64,
    /// The reader ended.
    pub(crate) ended: bool,
    /// Its drops at the end.
    pub(crate) drops: u64,
}

/// Removes the files it names when dropped.
struct Files(Vec<PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn read_le<const N: usize>(data: &[u8], offset: usize) -> Option<[u8; N]> {
    data.get(offset..offset + N)?.try_into().ok()
}

/// The input's file bytes, with this process's pid stored as the writer pid when `own_pid`.
fn segment_bytes(bytes: &[u8], own_pid: bool) -> Vec<u8> {
    let mut v = bytes.to_vec();
    if own_pid && let Some(field) = v.get_mut(WRITER_PID_OFFSET..WRITER_PID_OFFSET + 4) {
        field.copy_from_slice(&std::process::id().to_le_bytes());
    }
    v
}

/// Writes the patch records (see the module docs) into the file at `path`.
fn apply_patches(path: &str, mut patches: &[u8]) {
    use std::os::unix::fs::FileExt;
    if patches.is_empty() {
        return;
    }
    let file = std::fs::OpenOptions::new().write(true).open(path).expect("open the segment file to patch it");
    let size = file.metadata().expect("fstat the segment file").len();
    while let Some((head, rest)) = patches.split_first_chunk::<3>() {
        let (offset, n) = (u64::from(u16::from_le_bytes([head[0], head[1]])), usize::from(head[2]));
        let (bytes, rest) = rest.split_at(n.min(rest.len()));
        if offset + bytes.len() as u64 <= size {
            file.write_all_at(bytes, offset).expect("patch the segment file");
        }
        patches = rest;
    }
}

/// One read, checked; `None` once the reader ended.
fn read(reader: &mut RingReader, buf: &mut Vec<u8>, i: u32, run: &mut Run) -> Option<ReadOutcome<()>> {
    let drops_before = reader.drops();
    let generation_before = reader.generation();
    let outcome = if i.is_multiple_of(2) {
        match reader.try_read_with(|view| {
            // Copy every byte out, so a view outside the mapping would fault here.
            let bytes = view.payload().to_vec();
            let sum = bytes.iter().fold(0u64, |acc, &b| acc.wrapping_add(u64::from(b)));
            (view.len(), view.payload().len(), sum)
        }) {
            ReadOutcome::Sample((len, payload_len, _)) => {
                assert_eq!(len, payload_len);
                assert!(len <= reader.slot_size(), "sample of {len} bytes > slot size");
                ReadOutcome::Sample(())
            }
            ReadOutcome::Empty => ReadOutcome::Empty,
            ReadOutcome::Torn => ReadOutcome::Torn,
            ReadOutcome::Ended => ReadOutcome::Ended,
        }
    } else {
        match reader.try_read_into(buf) {
            ReadOutcome::Sample(info) => {
                assert_eq!(info.len, buf.len());
                assert!(info.len <= reader.slot_size(), "sample of {} bytes > slot size", info.len);
                ReadOutcome::Sample(())
            }
            ReadOutcome::Empty => ReadOutcome::Empty,
            ReadOutcome::Torn => ReadOutcome::Torn,
            ReadOutcome::Ended => ReadOutcome::Ended,
        }
    };
    assert!(reader.drops() >= drops_before, "drop counter went backwards");
    assert!(reader.generation() >= generation_before, "generation went backwards");
    match outcome {
        ReadOutcome::Sample(()) => run.samples += 1,
        ReadOutcome::Torn => run.torn += 1,
        ReadOutcome::Ended => {
            assert_eq!(reader.try_read_into(buf), ReadOutcome::Ended, "an ended reader read again");
            assert!(!reader.has_data(), "an ended reader reports data");
            run.ended = true;
            return None;
        }
        ReadOutcome::Empty => {}
    }
    Some(outcome)
}

/// Runs one input (see the module docs).
pub(crate) fn run(data: &[u8]) -> Run {
    let mut run = Run::default();
    let Some((&flags, rest)) = data.split_first() else { return run };
    let (len, rest) = if flags & 2 != 0 {
        let Some((len, rest)) = rest.split_first_chunk::<2>() else { return run };
        (Some(usize::from(u16::from_le_bytes(*len))), rest)
    } else {
        (None, rest)
    };
    let (rest, patches) = if flags & 0x40 != 0 {
        let Some((plen, rest)) = rest.split_first_chunk::<2>() else { return run };
        rest.split_at(rest.len() - usize::from(u16::from_le_bytes(*plen)).min(rest.len()))
    } else {
        (rest, &[][..])
    };
    let (first, second) = match len {
        Some(len) => {
            let (a, b) = rest.split_at(len.min(rest.len()));
            (a, Some(b))
        }
        None => (rest, None),
    };
    let own_pid = flags & 1 != 0;
    let generation = if own_pid { read_le::<8>(first, GENERATION_OFFSET).map_or(0, u64::from_le_bytes) } else { 0 };

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (pid, n) = (std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let path = |generation: u64| PathBuf::from(format!("{SHM_DIR}/shoal_{pid}_fz{n}_g{generation}"));
    let mut files = Files(Vec::new());
    let first_path = path(generation);
    files.0.push(first_path.clone());
    std::fs::write(&first_path, segment_bytes(first, own_pid)).expect("write a segment file into /dev/shm");
    if let (Some(second), Some(next)) = (second, generation.checked_add(1)) {
        let p = path(next);
        files.0.push(p.clone());
        std::fs::write(&p, segment_bytes(second, own_pid)).expect("write a segment file into /dev/shm");
    }

    let name = first_path.to_str().expect("UTF-8 path");
    let Ok(mut reader) = RingReader::open(name) else { return run };
    run.opened = true;
    let first_generation = reader.generation();
    let _ = (reader.segment_name(), reader.publisher_id(), reader.slot_count(), reader.writer_pid());
    let _ = (reader.position(), reader.has_data(), reader.writer_alive());
    if let Some(bell) = reader.writer_doorbell() {
        let name = bell.strip_prefix(&format!("{SHM_DIR}/")).expect("a doorbell in the shared-memory directory");
        assert!(name.starts_with("shoal_db_") && !name.contains('/'), "a doorbell name believed: {bell}");
    }
    apply_patches(reader.segment_name(), patches);
    if flags & 0x20 != 0 {
        let rewound = reader.rewind_to_time(i64::MIN);
        assert!(rewound < u64::from(reader.slot_count()), "rewound {rewound} samples of a ring of fewer slots");
    }
    let mut buf = Vec::new();
    let mut i = 0;
    while i < u32::from((flags >> 2) & 7) {
        if read(&mut reader, &mut buf, i, &mut run).is_none() {
            break;
        }
        i += 1;
    }
    // Every read of a segment nobody writes makes progress (a sample, a skip, the next generation, the end) until
    // the reader has nothing to do, and the slots the files hold bound the progress: at most a few passes over them.
    let max_reads = 4 * (data.len() / 64) + 16;
    let mut reads = 0;
    while !run.ended && reader.has_data() {
        reads += 1;
        assert!(
            reads <= max_reads,
            "the reader still reports data after {max_reads} reads (position {}, {} drops, generation {})",
            reader.position(),
            reader.drops(),
            reader.generation()
        );
        if read(&mut reader, &mut buf, i, &mut run).is_none() {
            break;
        }
        i += 1;
    }
    if !run.ended {
        let (position, drops) = (reader.position(), reader.drops());
        let outcome = read(&mut reader, &mut buf, i, &mut run);
        assert!(matches!(outcome, Some(ReadOutcome::Empty) | None), "{outcome:?} from a reader without data");
        if outcome.is_some() {
            assert_eq!(
                (reader.position(), reader.drops()),
                (position, drops),
                "a read without data changed the reader"
            );
        }
    }
    run.followed = reader.generation() - first_generation;
    run.drops = reader.drops();
    drop(reader);
    drop(files);
    run
}
