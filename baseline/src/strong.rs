//! The strongest plain rings a competent engineer would write, the references `shoal perf --baseline` takes shoal's
//! ratios against (the deep ring of [`crate::spsc`] stays as a second reference). Both live in a `/dev/shm` file
//! shared by two processes, copy in and copy out, and wait like [`crate::spsc::Ring`]: the reader busy-spins or
//! sleeps on a futex doorbell (polling briefly first while messages come back to back, as shoal's block mode
//! does), a writer with no free slot waits (no overwrite).
//!
//! [`LineRing`]: a FIFO ring whose slot is the message itself: a tag word (sequence and length) followed at once by
//! the payload, slots 128-byte aligned (a line pair the adjacent-line prefetcher fetches together). A 48-byte
//! message and its tag fill one cache line; a 64-byte one takes 72 bytes, so it spills 8 bytes into the second
//! line of its pair. The reader spins on the tag of the next slot, the only line it polls; the writer reads the
//! reader's index only when its cached copy says the ring is full, and in spin mode touches no doorbell. This is
//! the small-message floor, and with 1024 slots the streaming partner of a reliable publisher (a writer that waits
//! when full).
//!
//! [`WarmRing`]: large messages. A free list hands the writer the most recently released buffer (a stack, as
//! iceoryx2's publisher reuses the chunk freed last), so a ping-pong writes the same buffer every time, still
//! warm in the caches, while a stream can still have every buffer in flight. Buffers are page aligned; their
//! indices travel in two small tagged queues (published, released), one cache line per entry. A copy of at least
//! [`STREAM_MIN`] bytes ([`WarmRing::write_copy`]) is streamed: published before it is written, then announced in
//! parts of [`STREAM_PART`] bytes in its entry, so that [`WarmRing::read_copy`] copies part k out while part k+1 is
//! written, as shoal's ring streams its large copying writes (a reference without it would be weaker than shoal by
//! design, not by craft).
//!
//! Which of the two is faster at a given size is measured, not assumed: `shoal perf --baseline` runs both and
//! takes the faster one in the same run as the reference.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use memmap2::MmapMut;

use crate::spsc::{self, Error, SPIN_BEFORE_YIELD, StreamPoll, Wait, futex_wait, futex_wake, io_error, map_file};

/// Magic of a [`LineRing`] file ("SHOALLIN").
pub const LINE_MAGIC: u64 = 0x5348_4f41_4c4c_494e;
/// Magic of a [`WarmRing`] file ("SHOALWRM").
pub const WARM_MAGIC: u64 = 0x5348_4f41_4c57_524d;

/// The control block at the start of both ring files: configuration, then one line the writer owns and one the
/// reader owns. 256 bytes, so that what follows is 128-byte aligned.
#[repr(C)]
#[derive(Debug)]
struct Header {
    magic: AtomicU64,
    slot_count: AtomicU64,
    slot_size: AtomicU64,
    /// 1: created for block mode (the writer checks `waiters` after each publish); 0: spin mode (it never does,
    /// and readers must spin).
    block: AtomicU64,
    _pad0: [u64; 4],
    /// Futex word: bumped by the writer when a reader waits.
    doorbell: AtomicU32,
    _pad1: [u32; 15],
    /// Messages consumed so far (written by the reader; the line ring's writer reads it when it seems full).
    read_idx: AtomicU64,
    /// Readers sleeping (or about to sleep) on `doorbell`.
    waiters: AtomicU32,
    _pad2: [u32; 13],
    _pad3: [u64; 8],
}

const HEADER_SIZE: usize = std::mem::size_of::<Header>();
const LINE: usize = 64;

/// A mapped ring file: the creator removes it on drop.
#[derive(Debug)]
struct Shared {
    _map: MmapMut,
    base: *mut u8,
    len: usize,
    unlink: Option<PathBuf>,
    /// The reader's poll before it sleeps (block mode).
    poll: StreamPoll,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(p) = &self.unlink {
            let _ = fs::remove_file(p);
        }
    }
}

impl Shared {
    fn create(path: &Path, total: usize) -> Result<Shared, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(io_error(format!("creating {} (is /dev/shm mounted and writable?)", path.display())))?;
        let map = (|| {
            file.set_len(total as u64)
                .map_err(io_error(format!("sizing {} to {total} bytes (is /dev/shm full?)", path.display())))?;
            map_file(&file, path)
        })()
        .inspect_err(|_| {
            let _ = fs::remove_file(path);
        })?;
        Ok(Shared::from_map(map, Some(path.to_path_buf())))
    }

    fn open(path: &Path, magic: u64) -> Result<Shared, Error> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_error(format!("opening ring file {}", path.display())))?;
        let len = file.metadata().map_err(io_error(format!("reading the size of {}", path.display())))?.len();
        if len < HEADER_SIZE as u64 {
            return Err(Error::BadFile(format!("{} is {len} bytes, too small for a ring header", path.display())));
        }
        let s = Shared::from_map(map_file(&file, path)?, None);
        if s.header().magic.load(Ordering::Acquire) != magic {
            return Err(Error::BadFile(format!("{} is not a ring file of this kind (bad magic)", path.display())));
        }
        Ok(s)
    }

    fn from_map(mut map: MmapMut, unlink: Option<PathBuf>) -> Shared {
        let base = map.as_mut_ptr();
        let len = map.len();
        Shared { _map: map, base, len, unlink, poll: StreamPoll::default() }
    }

    fn header(&self) -> &Header {
        // SAFETY: `base` is the page-aligned start of a live mapping of at least HEADER_SIZE bytes (checked by
        // the callers of `from_map`: `create` sizes the file past the header, `open` checks the length), and
        // Header consists of atomics only, so shared access (also from the other process) is sound.
        unsafe { &*(self.base as *const Header) }
    }

    /// The atomic word at `off` (8-byte aligned, inside the mapping: checked by the callers' geometry).
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: the ring geometry (checked against the file size at create/open) keeps `off + 8` inside the
        // mapping; `off` is a multiple of 8 from a page-aligned base; the word is only accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn init(&self, magic: u64, slot_count: u64, slot_size: usize, wait: Wait) {
        let h = self.header();
        h.slot_count.store(slot_count, Ordering::Relaxed);
        h.slot_size.store(slot_size as u64, Ordering::Relaxed);
        h.block.store(u64::from(wait == Wait::Block), Ordering::Relaxed);
        h.magic.store(magic, Ordering::Release);
    }

    /// Slot count and size from the header, checked with `total` against the file size.
    fn geometry(&self, path: &Path, total: impl Fn(u64, usize) -> Option<usize>) -> Result<(u64, usize), Error> {
        let h = self.header();
        let count = h.slot_count.load(Ordering::Relaxed);
        let size = usize::try_from(h.slot_size.load(Ordering::Relaxed))
            .map_err(|_| Error::BadFile(format!("{}: slot size too large", path.display())))?;
        match total(count, size) {
            Some(t) if count > 0 && count <= u64::from(u32::MAX) && u32::try_from(size).is_ok() && t <= self.len => {
                Ok((count, size))
            }
            _ => Err(Error::BadFile(format!(
                "{}: header says {count} slots of {size} bytes, which does not fit the file",
                path.display()
            ))),
        }
    }

    /// Rings the doorbell if the ring was created for block mode and a reader waits (after a publish of `len`
    /// bytes, counted for the reply poll). A ring
    /// created for spin mode has readers that never sleep: its writer skips the fence and the check.
    fn wake(&self, len: usize) {
        crate::spsc::note_publish(len);
        let h = self.header();
        if h.block.load(Ordering::Relaxed) == 0 {
            return;
        }
        fence(Ordering::SeqCst);
        if h.waiters.load(Ordering::Relaxed) > 0 {
            h.doorbell.fetch_add(1, Ordering::SeqCst);
            futex_wake(&h.doorbell);
        }
    }

    /// Waits until `ready()`: a busy spin, or sleeps on the doorbell.
    fn wait_until(&self, wait: Wait, timeout: Duration, ready: impl Fn() -> bool) -> Result<(), Error> {
        let h = self.header();
        if wait == Wait::Spin && spsc::spin_before_clock(&ready) {
            return Ok(());
        }
        let start = Instant::now();
        match wait {
            Wait::Spin => {
                let mut spins = 0u32;
                while !ready() {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) && start.elapsed() > timeout {
                        return Err(Error::TimedOut(timeout));
                    }
                }
                Ok(())
            }
            Wait::Block if self.poll.poll(&ready) => Ok(()),
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
                    return Err(Error::TimedOut(timeout));
                }
                futex_wait(&h.doorbell, seen, left.min(Duration::from_millis(100)));
                h.waiters.fetch_sub(1, Ordering::SeqCst);
                if ready() {
                    return Ok(());
                }
            },
        }
    }
}

/// A writer with no free slot waits: spins a while (spin mode; the reader frees one within nanoseconds unless it
/// is descheduled), then yields on every check; in block mode it yields at once.
fn wait_for_room(wait: Wait, timeout: Duration, mut room: impl FnMut() -> bool) -> Result<(), Error> {
    let start = Instant::now();
    let mut spins = 0u32;
    let mut yielding = wait == Wait::Block;
    while !room() {
        spins = spins.wrapping_add(1);
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
    Ok(())
}

/// A tag word: the low 32 bits are the message's index + 1 (truncated), the high 32 bits a value (length or
/// buffer index). A slot's tag from an earlier lap differs in the low half by a non-zero multiple of the slot count
/// (< 2^32), so it never passes for the one expected.
fn tag(idx: u64, value: u32) -> u64 {
    (u64::from(value) << 32) | (idx.wrapping_add(1) & 0xffff_ffff)
}

fn tag_is(t: u64, idx: u64) -> bool {
    t & 0xffff_ffff == idx.wrapping_add(1) & 0xffff_ffff
}

/// Offset of a line ring slot's payload behind its tag.
const LINE_DATA: usize = 8;
/// Line ring slots are aligned to a line pair.
const LINE_ALIGN: usize = 128;

fn line_stride(slot_size: usize) -> Option<usize> {
    LINE_DATA.checked_add(slot_size)?.checked_next_multiple_of(LINE_ALIGN)
}

fn line_total(slot_count: u64, slot_size: usize) -> Option<usize> {
    line_stride(slot_size)?.checked_mul(usize::try_from(slot_count).ok()?)?.checked_add(HEADER_SIZE)
}

/// One end of a [`LineRing`] file (see the module documentation).
#[derive(Debug)]
pub struct LineRing {
    shm: Shared,
    slot_count: u64,
    slot_size: usize,
    stride: usize,
    wait: Wait,
    /// Writer: the next index to publish; reader: the next to read (each end keeps its own).
    next: u64,
    /// Writer: `read_idx` as last read.
    cached_read: u64,
}

impl LineRing {
    /// Creates the ring file (it must not exist) with `slot_count` slots (at least 1) of `slot_size` bytes.
    pub fn create(path: &Path, slot_count: u64, slot_size: usize, wait: Wait) -> Result<LineRing, Error> {
        let slot_count = slot_count.clamp(1, u64::from(u32::MAX));
        let total = line_total(slot_count, slot_size)
            .filter(|_| u32::try_from(slot_size).is_ok())
            .ok_or(Error::TooBig { slot_count, slot_size })?;
        let shm = Shared::create(path, total)?;
        shm.init(LINE_MAGIC, slot_count, slot_size, wait);
        let stride = line_stride(slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        Ok(LineRing { shm, slot_count, slot_size, stride, wait, next: 0, cached_read: 0 })
    }

    /// Opens a ring file created by the other process.
    pub fn open(path: &Path, wait: Wait) -> Result<LineRing, Error> {
        let shm = Shared::open(path, LINE_MAGIC)?;
        let (slot_count, slot_size) = shm.geometry(path, line_total)?;
        let stride = line_stride(slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        Ok(LineRing { shm, slot_count, slot_size, stride, wait, next: 0, cached_read: 0 })
    }

    /// Slots in the ring.
    pub fn slot_count(&self) -> u64 {
        self.slot_count
    }

    /// Largest payload a slot holds.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn slot_off(&self, i: u64) -> usize {
        HEADER_SIZE + (i % self.slot_count) as usize * self.stride
    }

    /// Writes one message of `len` bytes: `f` fills the slot in place, then it is published. Waits (up to
    /// `timeout`) while the ring is full.
    pub fn write_with<R>(&mut self, len: usize, timeout: Duration, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, Error> {
        if len > self.slot_size {
            return Err(Error::MessageTooLarge { len, slot_size: self.slot_size });
        }
        let w = self.next;
        if w - self.cached_read >= self.slot_count {
            let h = self.shm.header();
            let (count, cached) = (self.slot_count, &mut self.cached_read);
            wait_for_room(self.wait, timeout, || {
                *cached = h.read_idx.load(Ordering::Acquire);
                w - *cached < count
            })?;
        }
        let off = self.slot_off(w);
        // SAFETY: slot `w` is free: the reader has consumed every index below `w - slot_count + 1` (read_idx
        // observed with Acquire, now or when cached), and this process is the only writer of this ring, so no one
        // else touches these `len <= slot_size` bytes until the tag below publishes them.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.shm.base.add(off + LINE_DATA), len) };
        let r = f(buf);
        self.shm.word(off).store(tag(w, len as u32), Ordering::Release);
        self.next = w + 1;
        self.shm.wake(len);
        Ok(r)
    }

    /// Reads the next message: `f` sees the slot in place, then the slot is freed.
    pub fn read_with<R>(&mut self, timeout: Duration, f: impl FnOnce(&[u8]) -> R) -> Result<R, Error> {
        let r = self.next;
        let off = self.slot_off(r);
        let word = self.shm.word(off);
        let mut t = word.load(Ordering::Acquire);
        if !tag_is(t, r) {
            self.shm.wait_until(self.wait, timeout, || tag_is(word.load(Ordering::Acquire), r))?;
            t = word.load(Ordering::Acquire);
        }
        let len = t >> 32;
        if len > self.slot_size as u64 {
            return Err(Error::Corrupt { len, slot_size: self.slot_size });
        }
        // SAFETY: the tag of index `r` was observed with Acquire, so the writer finished the slot and will not
        // touch it until `read_idx` passes `r`; `len <= slot_size` keeps it in the slot.
        let data = unsafe { std::slice::from_raw_parts(self.shm.base.add(off + LINE_DATA), len as usize) };
        let out = f(data);
        self.next = r + 1;
        self.shm.header().read_idx.store(r + 1, Ordering::Release);
        Ok(out)
    }
}

/// Buffers of a [`WarmRing`] are page aligned.
const PAGE: usize = 4096;

/// A [`WarmRing`] message of at least this many bytes copied in by [`WarmRing::write_copy`] is streamed (shoal's
/// ring streams copying writes from the same size).
pub const STREAM_MIN: usize = 64 << 10;
/// Bytes of a streamed message announced at a time.
pub const STREAM_PART: usize = 16 << 10;
/// How long a reader of a streamed message spins for the next part before it yields between polls.
const STREAM_SPIN: Duration = Duration::from_micros(5);

/// Distance between two buffers: a page more than the slot size needs, so that buffers of a power-of-two size do not
/// start on the same cache sets.
fn warm_stride(slot_size: usize) -> Option<usize> {
    slot_size.max(1).checked_add(PAGE)?.checked_next_multiple_of(PAGE)
}

/// Offsets of a warm ring's parts: the published queue, the released queue, the buffers.
fn warm_layout(slot_count: u64, slot_size: usize) -> Option<(usize, usize, usize, usize)> {
    let n = usize::try_from(slot_count).ok()?;
    let published = HEADER_SIZE;
    let released = published.checked_add(n.checked_mul(LINE)?)?;
    let buffers = released.checked_add(n.checked_mul(LINE)?)?.checked_next_multiple_of(PAGE)?;
    let total = buffers.checked_add(warm_stride(slot_size)?.checked_mul(n)?)?;
    Some((published, released, buffers, total))
}

/// A published message of a [`WarmRing`], as its reader found it.
struct Message {
    /// Its index in the ring's order.
    index: u64,
    /// Offset of its published entry.
    entry: usize,
    buffer: u32,
    len: usize,
    /// Offset of its buffer.
    at: usize,
}

/// A writer's free list at the start (either end may be the writer): every buffer, buffer 0 on top.
fn all_free(slot_count: u64) -> Vec<u32> {
    (0..slot_count as u32).rev().collect()
}

/// One end of a [`WarmRing`] file (see the module documentation).
#[derive(Debug)]
pub struct WarmRing {
    shm: Shared,
    slot_count: u64,
    slot_size: usize,
    stride: usize,
    published: usize,
    released: usize,
    buffers: usize,
    wait: Wait,
    /// Writer: next published entry; reader: next published entry to read.
    next: u64,
    /// Writer: next released entry to take back; reader: next released entry to write.
    next_released: u64,
    /// Writer: free buffers, the most recently released on top.
    free: Vec<u32>,
}

impl WarmRing {
    /// Creates the ring file (it must not exist) with `slot_count` buffers (at least 1) of `slot_size` bytes.
    pub fn create(path: &Path, slot_count: u64, slot_size: usize, wait: Wait) -> Result<WarmRing, Error> {
        let slot_count = slot_count.clamp(1, 1 << 16);
        let (published, released, buffers, total) = warm_layout(slot_count, slot_size)
            .filter(|_| u32::try_from(slot_size).is_ok())
            .ok_or(Error::TooBig { slot_count, slot_size })?;
        let shm = Shared::create(path, total)?;
        shm.init(WARM_MAGIC, slot_count, slot_size, wait);
        let stride = warm_stride(slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        Ok(WarmRing {
            shm,
            slot_count,
            slot_size,
            stride,
            published,
            released,
            buffers,
            wait,
            next: 0,
            next_released: 0,
            free: all_free(slot_count),
        })
    }

    /// Opens a ring file created by the other process.
    pub fn open(path: &Path, wait: Wait) -> Result<WarmRing, Error> {
        let shm = Shared::open(path, WARM_MAGIC)?;
        let (slot_count, slot_size) = shm.geometry(path, |n, s| warm_layout(n, s).map(|l| l.3))?;
        let (published, released, buffers, _) =
            warm_layout(slot_count, slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        let stride = warm_stride(slot_size).ok_or(Error::TooBig { slot_count, slot_size })?;
        Ok(WarmRing {
            shm,
            slot_count,
            slot_size,
            stride,
            published,
            released,
            buffers,
            wait,
            next: 0,
            next_released: 0,
            free: all_free(slot_count),
        })
    }

    /// Buffers in the ring.
    pub fn slot_count(&self) -> u64 {
        self.slot_count
    }

    /// Largest payload a buffer holds.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn entry(&self, queue: usize, i: u64) -> &AtomicU64 {
        self.shm.word(queue + (i % self.slot_count) as usize * LINE)
    }

    /// Writer: takes back every buffer the reader released (in order: the last released ends on top).
    fn take_back(&mut self) -> Result<(), Error> {
        loop {
            let i = self.next_released;
            let t = self.entry(self.released, i).load(Ordering::Acquire);
            if !tag_is(t, i) {
                return Ok(());
            }
            let b = (t >> 32) as u32;
            if u64::from(b) >= self.slot_count {
                return Err(Error::BadFile(format!("warm ring: released buffer {b} of {}", self.slot_count)));
            }
            self.free.push(b);
            self.next_released = i + 1;
        }
    }

    /// Writes one message of `len` bytes into the most recently released buffer: `f` fills it in place, then it is
    /// published. Waits (up to `timeout`) while every buffer is in flight.
    pub fn write_with<R>(&mut self, len: usize, timeout: Duration, f: impl FnOnce(&mut [u8]) -> R) -> Result<R, Error> {
        let (b, p) = self.take_buffer(len, timeout)?;
        // SAFETY: `take_buffer`'s pointer is valid for `len` bytes that only this process writes until `publish`.
        let r = f(unsafe { std::slice::from_raw_parts_mut(p, len) });
        self.publish(b, len, len);
        self.shm.wake(len);
        Ok(r)
    }

    /// Copies `bytes` in as one message; one of at least [`STREAM_MIN`] bytes is streamed: published before it is
    /// written and announced in parts of [`STREAM_PART`] bytes, so that a reader's [`read_copy`](Self::read_copy)
    /// copies part k out while part k+1 is written (a copy out overlapping the copy in, as shoal's ring does).
    pub fn write_copy(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), Error> {
        let len = bytes.len();
        if len < STREAM_MIN {
            return self.write_with(len, timeout, |b| crate::copy::copy_from(b, bytes));
        }
        let (b, p) = self.take_buffer(len, timeout)?;
        // SAFETY: `take_buffer`'s pointer is valid for `len` bytes that only this process writes; the reader reads
        // each part only after its announcement below (Release), and never writes the buffer.
        let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
        let e = self.publish(b, len, 0);
        self.shm.wake(len);
        let written = self.shm.word(e + 16);
        for (i, (dst, src)) in buf.chunks_mut(STREAM_PART).zip(bytes.chunks(STREAM_PART)).enumerate() {
            crate::copy::copy_from(dst, src);
            written.store((i * STREAM_PART + src.len()) as u64, Ordering::Release);
        }
        Ok(())
    }

    /// Takes the most recently released buffer for a message of `len` bytes, waiting (up to `timeout`) while every
    /// buffer is in flight.
    fn take_buffer(&mut self, len: usize, timeout: Duration) -> Result<(u32, *mut u8), Error> {
        if len > self.slot_size {
            return Err(Error::MessageTooLarge { len, slot_size: self.slot_size });
        }
        self.take_back()?;
        if self.free.is_empty() {
            let mut err = None;
            wait_for_room(self.wait, timeout, || match self.take_back() {
                Ok(()) => !self.free.is_empty(),
                Err(e) => {
                    err = Some(e);
                    true
                }
            })?;
            if let Some(e) = err {
                return Err(e);
            }
        }
        let b = self.free.pop().ok_or(Error::Full(timeout))?;
        let off = self.buffers + b as usize * self.stride;
        // Buffer `b` came back through the released queue (Acquire) or was never handed out, so the reader is done
        // with it; this process is the only writer, and `len <= slot_size <= stride` keeps `len` bytes from here in
        // the buffer, inside the mapping `self` holds.
        // SAFETY: `off` is inside the mapping (the buffers' offsets come from `warm_layout`, b < slot_count).
        Ok((b, unsafe { self.shm.base.add(off) }))
    }

    /// Publishes buffer `b` as the next message of `len` bytes of which `written` are written (the rest follows,
    /// announced in the entry's third word); returns the entry's offset.
    fn publish(&mut self, b: u32, len: usize, written: usize) -> usize {
        let w = self.next;
        let e = self.published + (w % self.slot_count) as usize * LINE;
        // The entry's second word: the length; its third: the bytes written so far; the tag names the buffer. The
        // entry of `w - slot_count` was read before its buffer was released, and every buffer but the one in hand
        // is accounted for, so the reader is done with this entry.
        self.shm.word(e + 8).store(len as u64, Ordering::Relaxed);
        self.shm.word(e + 16).store(written as u64, Ordering::Relaxed);
        self.shm.word(e).store(tag(w, b), Ordering::Release);
        self.next = w + 1;
        e
    }

    /// Reads the next message: `f` sees the buffer in place, then it is released to the writer.
    pub fn read_with<R>(&mut self, timeout: Duration, f: impl FnOnce(&[u8]) -> R) -> Result<R, Error> {
        let m = self.next_message(timeout)?;
        // A streamed message (`write_copy`) is read in place once it is whole.
        self.wait_written(m.entry, m.len, m.len, timeout)?;
        // SAFETY: the entry was observed with Acquire (`next_message`) and all `len` bytes announced written
        // (Acquire, above), so the writer finished the buffer and will not touch it until it comes back through the
        // released queue; `len <= slot_size` keeps it in the buffer.
        let data = unsafe { std::slice::from_raw_parts(self.shm.base.add(m.at), m.len) };
        let out = f(data);
        self.release(m.index, m.buffer);
        Ok(out)
    }

    /// Waits (up to `timeout`) for the next message to be published and checks its entry.
    fn next_message(&self, timeout: Duration) -> Result<Message, Error> {
        let r = self.next;
        let e = self.published + (r % self.slot_count) as usize * LINE;
        let word = self.shm.word(e);
        let mut t = word.load(Ordering::Acquire);
        if !tag_is(t, r) {
            self.shm.wait_until(self.wait, timeout, || tag_is(word.load(Ordering::Acquire), r))?;
            t = word.load(Ordering::Acquire);
        }
        let b = t >> 32;
        let len = self.shm.word(e + 8).load(Ordering::Relaxed);
        if b >= self.slot_count || len > self.slot_size as u64 {
            return Err(Error::Corrupt { len, slot_size: self.slot_size });
        }
        let at = self.buffers + b as usize * self.stride;
        Ok(Message { index: r, entry: e, buffer: b as u32, len: len as usize, at })
    }

    /// Reads the next message into `buf` (cleared first); a streamed one (`write_copy`) is copied out part by part
    /// as it is written.
    pub fn read_copy(&mut self, timeout: Duration, buf: &mut Vec<u8>) -> Result<(), Error> {
        let m = self.next_message(timeout)?;
        buf.clear();
        buf.reserve(m.len);
        let mut done = 0;
        while done < m.len {
            let ready = self.wait_written(m.entry, done + 1, m.len, timeout)?;
            // SAFETY: bytes `done..ready` of the buffer are announced written (Acquire) and the writer does not
            // touch them again until the buffer comes back through the released queue; `len <= slot_size` keeps
            // them in the buffer.
            crate::copy::extend(buf, unsafe {
                std::slice::from_raw_parts(self.shm.base.add(m.at + done), ready - done)
            });
            done = ready;
        }
        self.release(m.index, m.buffer);
        Ok(())
    }

    /// Waits until at least `end` of the `len` bytes of the message at entry offset `e` are written; returns how
    /// many are (at most `len`). Spins, yielding after [`STREAM_SPIN`] without progress (the writer may wait for
    /// this CPU); an error after `timeout` without progress.
    fn wait_written(&self, e: usize, end: usize, len: usize, timeout: Duration) -> Result<usize, Error> {
        let written = self.shm.word(e + 16);
        let mut w = written.load(Ordering::Acquire) as usize;
        let mut since: Option<Instant> = None;
        let mut polls = 0u32;
        while w < end {
            polls = polls.wrapping_add(1);
            let idle = polls.is_multiple_of(64).then(|| since.get_or_insert_with(Instant::now).elapsed());
            if idle.is_some_and(|t| t >= timeout) {
                return Err(Error::TimedOut(timeout));
            } else if idle.is_some_and(|t| t >= STREAM_SPIN) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            let now = written.load(Ordering::Acquire) as usize;
            if now != w {
                (w, since) = (now, None);
            }
        }
        Ok(w.min(len))
    }

    /// Gives buffer `b` of message `r` back to the writer.
    fn release(&mut self, r: u64, b: u32) {
        self.next = r + 1;
        let i = self.next_released;
        self.entry(self.released, i).store(tag(i, b), Ordering::Release);
        self.next_released = i + 1;
    }
}

/// The kind of ring file at `path`, from its magic: `spsc` (the deep ring), `line` or `warm`.
pub fn kind_of(path: &Path) -> Result<&'static str, Error> {
    use std::io::Read;
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(io_error(format!("reading the magic of ring file {}", path.display())))?;
    match u64::from_ne_bytes(magic) {
        LINE_MAGIC => Ok("line"),
        WARM_MAGIC => Ok("warm"),
        crate::spsc::MAGIC => Ok("spsc"),
        _ => Err(Error::BadFile(format!("{} is no baseline ring file (bad magic)", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layout() {
        assert_eq!(HEADER_SIZE, 256);
        assert_eq!(offset_of!(Header, doorbell), 64);
        assert_eq!(offset_of!(Header, read_idx), 128);
        assert_eq!(offset_of!(Header, waiters), 136);
        // A 48-byte message and its tag fill one line; 64 bytes take a line pair.
        assert_eq!(line_stride(56), Some(128));
        assert_eq!(line_stride(64), Some(128));
        assert_eq!(line_stride(1 << 20), Some((1 << 20) + 128));
        let (p, r, b, t) = warm_layout(4, 1 << 20).unwrap();
        // Buffers a page apart beyond their size (`warm_stride`).
        assert_eq!((p, r, b, t), (256, 512, 4096, 4096 + 4 * ((1 << 20) + 4096)));
        assert!(tag_is(tag(u64::from(u32::MAX), 7), u64::from(u32::MAX)));
        assert!(!tag_is(tag(3, 7), 3 + 1024));
    }

    fn tmp(name: &str) -> PathBuf {
        PathBuf::from(format!("/dev/shm/shoal_strong_test_{}_{name}", std::process::id()))
    }

    /// Both rings: in order, back-pressure instead of overwrite, too-large messages refused, timeouts.
    #[test]
    fn rings_pass_messages_in_order_and_apply_backpressure() {
        for wait in [Wait::Spin, Wait::Block] {
            let p = tmp(&format!("line_{wait:?}"));
            let mut w = LineRing::create(&p, 4, 100, wait).unwrap();
            let mut r = LineRing::open(&p, wait).unwrap();
            assert_eq!((r.slot_count(), r.slot_size()), (4, 100));
            assert_eq!(kind_of(&p).unwrap(), "line");
            for lap in 0..3u8 {
                for i in 0..4u8 {
                    w.write_with(100, Duration::from_secs(1), |b| b.fill(lap * 10 + i)).unwrap();
                }
                let e = w.write_with(1, Duration::from_millis(20), |_| ()).unwrap_err();
                assert!(matches!(e, Error::Full(_)), "{e}");
                for i in 0..4u8 {
                    assert_eq!(r.read_with(Duration::from_secs(1), <[u8]>::to_vec).unwrap(), vec![lap * 10 + i; 100]);
                }
                let e = r.read_with(Duration::from_millis(20), |_| ()).unwrap_err();
                assert!(matches!(e, Error::TimedOut(_)), "{e}");
            }
            let e = w.write_with(101, Duration::from_secs(1), |_| ()).unwrap_err();
            assert!(matches!(e, Error::MessageTooLarge { len: 101, slot_size: 100 }), "{e}");
            drop(w);
            assert!(!p.exists());

            let p = tmp(&format!("warm_{wait:?}"));
            let mut w = WarmRing::create(&p, 3, 5000, wait).unwrap();
            let mut r = WarmRing::open(&p, wait).unwrap();
            assert_eq!(kind_of(&p).unwrap(), "warm");
            for lap in 0..3u8 {
                for i in 0..3u8 {
                    w.write_with(4000 + usize::from(i), Duration::from_secs(1), |b| b.fill(lap * 10 + i)).unwrap();
                }
                let e = w.write_with(1, Duration::from_millis(20), |_| ()).unwrap_err();
                assert!(matches!(e, Error::Full(_)), "{e}");
                for i in 0..3u8 {
                    let got = r.read_with(Duration::from_secs(1), <[u8]>::to_vec).unwrap();
                    assert_eq!(got, vec![lap * 10 + i; 4000 + usize::from(i)]);
                }
                let e = r.read_with(Duration::from_millis(20), |_| ()).unwrap_err();
                assert!(matches!(e, Error::TimedOut(_)), "{e}");
            }
            assert!(matches!(w.write_with(5001, Duration::from_secs(1), |_| ()), Err(Error::MessageTooLarge { .. })));
        }
    }

    /// A ping-pong through the warm ring writes the same buffer every time: the one released last. Here the end
    /// that opens the file writes (either end may).
    #[test]
    fn warm_ring_reuses_the_buffer_released_last() {
        let p = tmp("reuse");
        let mut r = WarmRing::create(&p, 4, 64, Wait::Spin).unwrap();
        let mut w = WarmRing::open(&p, Wait::Spin).unwrap();
        let mut addrs = std::collections::BTreeSet::new();
        for i in 0..50u8 {
            w.write_with(64, Duration::from_secs(1), |b| {
                b.fill(i);
                addrs.insert(b.as_ptr() as usize);
            })
            .unwrap();
            assert_eq!(r.read_with(Duration::from_secs(1), |s| s[0]).unwrap(), i);
        }
        assert_eq!(addrs.len(), 1, "one warm buffer: {addrs:?}");
    }

    /// Readers in another thread, blocked on the doorbell, see every message in order; the writers wait when full.
    #[test]
    fn blocked_readers_are_woken_and_see_every_message() {
        let p = tmp("wake_line");
        let q = tmp("wake_warm");
        let mut lw = LineRing::create(&p, 8, 64, Wait::Block).unwrap();
        let mut ww = WarmRing::create(&q, 2, 64, Wait::Block).unwrap();
        let (p2, q2) = (p.clone(), q.clone());
        let reader = std::thread::spawn(move || {
            let mut lr = LineRing::open(&p2, Wait::Block).unwrap();
            let mut wr = WarmRing::open(&q2, Wait::Block).unwrap();
            for i in 0..2000u64 {
                let seq = |s: &[u8]| u64::from_le_bytes(s[..8].try_into().unwrap());
                assert_eq!(lr.read_with(Duration::from_secs(5), seq).unwrap(), i);
                assert_eq!(wr.read_with(Duration::from_secs(5), seq).unwrap(), i);
            }
        });
        for i in 0..2000u64 {
            lw.write_with(64, Duration::from_secs(5), |b| b[..8].copy_from_slice(&i.to_le_bytes())).unwrap();
            ww.write_with(64, Duration::from_secs(5), |b| b[..8].copy_from_slice(&i.to_le_bytes())).unwrap();
            if i % 200 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        reader.join().unwrap();
    }

    #[test]
    fn open_rejects_other_kinds_and_truncated_files() {
        let p = tmp("kinds");
        let _l = LineRing::create(&p, 4, 64, Wait::Spin).unwrap();
        let e = WarmRing::open(&p, Wait::Spin).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
        let q = tmp("trunc");
        let mut bytes = vec![0u8; 4096];
        bytes[..8].copy_from_slice(&WARM_MAGIC.to_ne_bytes());
        bytes[8..16].copy_from_slice(&4u64.to_ne_bytes());
        bytes[16..24].copy_from_slice(&(1u64 << 20).to_ne_bytes());
        fs::write(&q, &bytes).unwrap();
        let e = WarmRing::open(&q, Wait::Spin).unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
        fs::write(&q, b"x").unwrap();
        assert!(kind_of(&q).is_err() && LineRing::open(&q, Wait::Spin).is_err());
        fs::remove_file(&q).unwrap();
    }
}
