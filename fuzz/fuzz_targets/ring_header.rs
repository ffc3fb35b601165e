//! `RingReader::open` on a ring segment file whose bytes come from the fuzzer, then a few reads.
//!
//! Input format (written by `seedgen`): `[flags u8]`, then if flags bit 1 is set `[len u16 LE]`,
//! then the bytes of the first segment file (`len` of them when a second file follows), then the
//! bytes of the second file.
//! - bit 0: name the file after the pid and generation stored in its own header (so that the
//!   name checks can pass); clear: a fixed name `shoal_1_<unique>_g0`.
//! - bit 1: a second file, generation + 1 of the same ring, exists (the successor a superseded
//!   segment points to).
//! - bits 2..=4: number of `try_read_*` calls (0..=7); bit 5: `rewind_to_time(i64::MIN)` first.
//!
//! The files are written to the directory /dev/shm/shoal-fuzz (created if needed; not matched by
//! the `shoal_*` patterns of stale-file cleanup and of `scripts/test`) under names unique to this
//! process, and removed afterwards.
//! Oracle: nothing panics or faults (bad headers are errors), and a sample never claims more
//! bytes than a slot holds.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use shoal::transport::shm_ring::{ReadOutcome, RingReader, SHM_DIR};

/// Offset of `writer_pid` (u32) in the segment header.
const WRITER_PID_OFFSET: usize = 40;
/// Offset of `generation` (u64) in the segment header.
const GENERATION_OFFSET: usize = 56;

/// Removes the files it names when dropped.
struct Files(Vec<PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Writes a segment file, creating its directory first (again if a concurrent `scripts/fuzz`
/// removed it in between).
fn write_file(path: &Path, bytes: &[u8]) {
    let dir = path.parent().expect("segment path has a directory");
    let mut attempts = 0;
    loop {
        attempts += 1;
        let result = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(path, bytes));
        match result {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 5 => {}
            Err(e) => panic!("cannot write {}: {e}", path.display()),
        }
    }
}

fn read_le<const N: usize>(data: &[u8], offset: usize) -> Option<[u8; N]> {
    data.get(offset..offset + N)?.try_into().ok()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let (first, second) = if flags & 2 != 0 {
        let Some((len, rest)) = rest.split_first_chunk::<2>() else { return };
        let (a, b) = rest.split_at(usize::from(u16::from_le_bytes(*len)).min(rest.len()));
        (a, Some(b))
    } else {
        (rest, None)
    };
    let (pid, generation) = if flags & 1 != 0 {
        let pid = read_le::<4>(first, WRITER_PID_OFFSET).map_or(1, u32::from_le_bytes);
        let generation = read_le::<8>(first, GENERATION_OFFSET).map_or(0, u64::from_le_bytes);
        (pid, generation)
    } else {
        (1, 0)
    };

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let unique = format!("fz{}n{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let dir = PathBuf::from(format!("{SHM_DIR}/shoal-fuzz"));
    let path = |generation: u64| dir.join(format!("shoal_{pid}_{unique}_g{generation}"));
    let mut files = Files(Vec::new());
    let first_path = path(generation);
    write_file(&first_path, first);
    files.0.push(first_path.clone());
    if let (Some(second), Some(next)) = (second, generation.checked_add(1)) {
        let p = path(next);
        write_file(&p, second);
        files.0.push(p);
    }

    let name = first_path.to_str().expect("UTF-8 path");
    let Ok(mut reader) = RingReader::open(name) else { return };
    let slot_size = reader.slot_size();
    let _ = (reader.segment_name(), reader.generation(), reader.publisher_id(), reader.slot_count());
    let _ = (reader.writer_pid(), reader.position(), reader.has_data());
    if flags & 0x20 != 0 {
        reader.rewind_to_time(i64::MIN);
    }
    let mut buf = Vec::new();
    for i in 0..(flags >> 2) & 7 {
        let drops_before = reader.drops();
        let outcome = if i % 2 == 0 {
            match reader.try_read_with(|view| {
                // Copy every byte out, so a view outside the mapping would fault here.
                let bytes = view.payload().to_vec();
                let sum = bytes.iter().fold(0u64, |acc, &b| acc.wrapping_add(u64::from(b)));
                (view.len(), view.payload().len(), sum)
            }) {
                ReadOutcome::Sample((len, payload_len, _)) => {
                    assert_eq!(len, payload_len);
                    assert!(len <= reader.slot_size().max(slot_size), "sample of {len} bytes > slot size");
                    ReadOutcome::Sample(())
                }
                ReadOutcome::Empty => ReadOutcome::Empty,
                ReadOutcome::Torn => ReadOutcome::Torn,
                ReadOutcome::Ended => ReadOutcome::Ended,
            }
        } else {
            match reader.try_read_into(&mut buf) {
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
        if outcome == ReadOutcome::Ended {
            assert_eq!(reader.try_read_into(&mut buf), ReadOutcome::Ended, "an ended reader read again");
            break;
        }
    }
    drop(reader);
    drop(files);
});
