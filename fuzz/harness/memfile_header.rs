//! The body of the `memfile_header` fuzz target: an eCAL memory file another process wrote, read the way a
//! subscriber's observer reads it (`transport::ecal_shm::MemfileProbe`, over the same `MemfileReader`), while the
//! file changes between reads. Shared (`#[path]`) by `fuzz_targets/memfile_header.rs` and by
//! `core/tests/fuzz_memfile_header.rs`, which runs the committed seeds through it in the test suite.
//!
//! Input format (written by `seedgen`): `[len u16 LE]`, `len` bytes: the memfile as first written; then at most 16
//! steps, each `[op u8]` and its operands, `op % 4` choosing:
//! - 0: a read that wants a clock above the last one read (what the observer does on each event);
//! - 1: a read that takes any clock (a subscriber that just connected);
//! - 2: `[offset u16 LE][n u8][n bytes]` written into the file at `offset` (a writer's next message, or a hostile
//!   process's bytes; the file grows when that ends past it);
//! - 3: `[len u16 LE]`: the file truncated or extended to `len` bytes (a peer truncating a mapped file: the reader
//!   must survive the SIGBUS, `sys::shm_guard`).
//!
//! A last read follows the steps. The memfile is `/dev/shm/shoal_<this pid>_fzm<n>` (its flag lock
//! `..._mtx`, created by the reader), removed after each input (`scripts/fuzz` removes what a crashed run left).
//!
//! Oracle: nothing panics or faults, and every message the reader returns is what the file holds: its header
//! fields and payload are the file's bytes at the places the internal and message headers name (zeros past the
//! file's end, which is what a mapping shows there), the message header is at least eCAL 5.8's 48 bytes, header
//! plus payload fit in the valid data size, and its clock is above the one asked for.

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal::transport::ecal_shm::{MemfileProbe, ProbeMessage};

/// Bytes of the internal header (`SInternalHeader`).
const INT_HDR_SIZE: usize = 24;
/// Bytes of the message header (`SMemFileHeader`) a reader copies at most.
const MSG_HDR_SIZE: usize = 64;

/// What one input did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The reader opened the file.
    pub(crate) opened: bool,
    /// Messages read.
    pub(crate) messages: u64,
    /// Reads that found nothing new.
    pub(crate) empty: u64,
    /// Reads that refused the content (or hit a truncation).
    pub(crate) errors: u64,
    /// Truncations the reader survived.
    pub(crate) truncations: u64,
}

/// The file as written so far: its bytes, zeros past its end (as a mapping shows them), and its size.
struct Model {
    bytes: Vec<u8>,
    size: usize,
}

impl Model {
    fn byte(&self, at: usize) -> u8 {
        if at < self.size { self.bytes.get(at).copied().unwrap_or(0) } else { 0 }
    }

    fn range(&self, at: usize, n: usize) -> Vec<u8> {
        (at..at + n).map(|i| self.byte(i)).collect()
    }

    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.range(at, 8).try_into().expect("8 bytes"))
    }

    fn write(&mut self, at: usize, data: &[u8]) {
        let end = at + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        // A write past the end extends the file with zeros up to `at`.
        for b in &mut self.bytes[self.size.min(at)..at] {
            *b = 0;
        }
        self.bytes[at..end].copy_from_slice(data);
        self.size = self.size.max(end);
    }

    fn set_len(&mut self, len: usize) {
        if len < self.size {
            for b in &mut self.bytes[len..self.size] {
                *b = 0;
            }
        } else {
            self.bytes.resize(self.bytes.len().max(len), 0);
            for b in &mut self.bytes[self.size..len] {
                *b = 0;
            }
        }
        self.size = len;
    }
}

/// Removes the memfile and its flag lock when dropped.
struct Files(String);

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{}_mtx", self.0));
    }
}

/// Checks a message the reader returned against the file's bytes.
fn check(m: &ProbeMessage, model: &Model, after_clock: u64) {
    let offset = usize::from(u16::from_le_bytes([model.byte(0), model.byte(1)]));
    assert!(offset >= INT_HDR_SIZE, "a message read behind an internal header of {offset} bytes");
    let cur = model.u64_at(8);
    assert_eq!(m.hdr_size, u16::from_le_bytes([model.byte(offset), model.byte(offset + 1)]), "hdr_size");
    assert!(m.hdr_size >= 48, "message header of {} bytes accepted", m.hdr_size);
    let copy = usize::from(m.hdr_size).min(MSG_HDR_SIZE);
    let mut h = model.range(offset, copy);
    h.resize(MSG_HDR_SIZE, 0);
    let u = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
    let expected = ProbeMessage {
        hdr_size: m.hdr_size,
        data_size: u(8),
        id: u(16),
        clock: u(24),
        time: u(32) as i64,
        hash: u(40),
        options: h[48],
        ack_timeout_ms: u(56) as i64,
        payload: Vec::new(),
    };
    assert_eq!(ProbeMessage { payload: Vec::new(), ..m.clone() }, expected, "header fields differ from the file");
    assert!(m.clock > after_clock, "clock {} returned, wanted above {after_clock}", m.clock);
    assert!(
        u64::from(m.hdr_size).checked_add(m.data_size).is_some_and(|end| end <= cur),
        "message of {} + {} bytes beyond the valid {cur}",
        m.hdr_size,
        m.data_size
    );
    assert_eq!(m.payload.len() as u64, m.data_size, "payload length");
    assert!(
        m.payload == model.range(offset + usize::from(m.hdr_size), m.payload.len()),
        "payload differs from the file"
    );
}

/// Runs one input (see the module docs).
pub(crate) fn run(data: &[u8]) -> Run {
    let mut run = Run::default();
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return run };
    let (first, mut steps) = rest.split_at(usize::from(u16::from_le_bytes(*len)).min(rest.len()));

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!("shoal_{}_fzm{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let files = Files(format!("/dev/shm/{name}"));
    std::fs::write(&files.0, first).expect("write a memfile into /dev/shm");
    let mut model = Model { bytes: first.to_vec(), size: first.len() };
    let Ok(mut reader) = MemfileProbe::open(&name) else { return run };
    run.opened = true;
    let file = std::fs::OpenOptions::new().write(true).open(&files.0).expect("open the memfile to change it");

    let mut last_clock = 0u64;
    let mut read = |after: u64, model: &Model, run: &mut Run| match reader.read(after) {
        Ok(Some(m)) => {
            check(&m, model, after);
            run.messages += 1;
            Some(m.clock)
        }
        Ok(None) => {
            run.empty += 1;
            None
        }
        Err(_) => {
            run.errors += 1;
            None
        }
    };
    for _ in 0..16 {
        let Some((&op, rest)) = steps.split_first() else { break };
        steps = rest;
        match op % 4 {
            0 | 1 => {
                let after = if op % 4 == 0 { last_clock } else { 0 };
                if let Some(clock) = read(after, &model, &mut run) {
                    last_clock = clock;
                }
            }
            2 => {
                let Some((head, rest)) = steps.split_first_chunk::<3>() else { break };
                let (at, n) = (usize::from(u16::from_le_bytes([head[0], head[1]])), usize::from(head[2]));
                let (bytes, rest) = rest.split_at(n.min(rest.len()));
                steps = rest;
                file.write_all_at(bytes, at as u64).expect("write into the memfile");
                model.write(at, bytes);
            }
            _ => {
                let Some((len, rest)) = steps.split_first_chunk::<2>() else { break };
                steps = rest;
                let len = usize::from(u16::from_le_bytes(*len));
                file.set_len(len as u64).expect("resize the memfile");
                model.set_len(len);
            }
        }
    }
    let _ = read(last_clock, &model, &mut run);
    run.truncations = reader.truncations();
    drop(reader);
    drop(files);
    run
}
