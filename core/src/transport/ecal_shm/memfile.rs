//! eCAL memory files: `/dev/shm/shoal_<pid>_ecal<hex>` for shoal's (eCAL readers open any announced name) =
//! 24-byte internal header + data area (64-byte `SMemFileHeader` + payload), guarded by the flag lock `<name>_mtx`
//! (see [`super::sync`]).
//!
//! Layout (x86_64 / 64-bit Linux, eCAL `ecal_memfile.h` `#pragma pack(1)` and `ecal_memfile_header.h`):
//! internal header `{u16 int_hdr_size = 24; u8[6]; u64 cur_data_size; u64 max_data_size}`; the data area starts at
//! `int_hdr_size` and holds `{u16 hdr_size = 64; u64 data_size, id, clock; i64 time; u64 hash; u8 options;
//! i64 ack_timout_ms}` (natural alignment) followed by the payload at data area + `hdr_size`.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memmap2::MmapOptions;

use super::sync::{FlagLock, InnerBudget, NamedSync, SHM_DIR, SyncOpenError};
use crate::sys::shm_guard::PeerMap;

/// The memfile's internal header (file offset 0).
#[repr(C, packed)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InternalHeader {
    /// Size of this header; the data area starts at this offset.
    pub(crate) int_hdr_size: u16,
    /// Reserved, 0.
    pub(crate) reserved: [u8; 6],
    /// Valid bytes in the data area (`SMemFileHeader` + payload).
    pub(crate) cur_data_size: u64,
    /// Capacity of the data area.
    pub(crate) max_data_size: u64,
}

/// The per-message header at the start of the data area.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemFileHeader {
    /// Size of this header; the payload starts at this offset in the data area.
    pub(crate) hdr_size: u16,
    /// Payload length.
    pub(crate) data_size: u64,
    /// User filter id.
    pub(crate) id: u64,
    /// Publisher clock (readers ignore content with a clock not above the last one they saw).
    pub(crate) clock: u64,
    /// Send time, µs.
    pub(crate) time: i64,
    /// eCAL's sample hash (`topic_id ^ (clock << 1)`, not checked by readers).
    pub(crate) hash: u64,
    /// Bit 0: zero copy.
    pub(crate) options: u8,
    /// Acknowledge timeout in ms; 0: readers do not acknowledge.
    pub(crate) ack_timeout_ms: i64,
}

/// `sizeof(SInternalHeader)`.
pub(crate) const INT_HDR_SIZE: usize = size_of::<InternalHeader>();
/// `sizeof(SMemFileHeader)`.
pub(crate) const MSG_HDR_SIZE: usize = size_of::<MemFileHeader>();
/// Oldest message header a reader accepts: eCAL 5.8's, which ends after `hash`.
const MIN_MSG_HDR_SIZE: usize = 48;

/// How long a writer waits for the flag lock before it gives the memfile up (eCAL `PUB_MEMFILE_OPEN_TO`).
pub(crate) const WRITER_LOCK_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a reader waits for the flag lock per attempt (eCAL's observer).
pub(crate) const READER_LOCK_TIMEOUT: Duration = Duration::from_millis(5);

/// Errors creating or opening a memfile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemfileOpenError {
    /// A file system call failed.
    #[error("{call} {path}: {source}")]
    Io {
        /// The call.
        call: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Its flag lock could not be opened.
    #[error(transparent)]
    Lock(#[from] SyncOpenError),
    /// The requested size does not fit the address space.
    #[error("memfile size {0} is too large")]
    TooLarge(u64),
    /// The name is not a plain file name.
    #[error("invalid memfile name {0:?}")]
    BadName(String),
}

/// Why a reader rejected what a memfile holds (the memfile is untrusted input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadHeader {
    /// `int_hdr_size` is below 24.
    #[error("internal header size {0} is below 24")]
    IntHdrSize(u16),
    /// The data area or its valid part does not fit in the file.
    #[error("data area (offset {offset}, {len} bytes) exceeds the file ({file} bytes)")]
    DataArea {
        /// Start of the data area.
        offset: u64,
        /// Bytes claimed.
        len: u64,
        /// File size.
        file: u64,
    },
    /// `hdr_size` is below 48 bytes.
    #[error("message header size {0} is too small")]
    MsgHdrSize(u16),
    /// `hdr_size + data_size` exceeds `cur_data_size`.
    #[error("message ({hdr} + {data} bytes) exceeds the valid data ({cur} bytes)")]
    Message {
        /// `hdr_size`.
        hdr: u64,
        /// `data_size`.
        data: u64,
        /// `cur_data_size`.
        cur: u64,
    },
}

/// Errors of [`MemfileReader::read`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The flag lock was not free in time.
    #[error("memfile is locked")]
    Locked,
    /// The content is invalid.
    #[error(transparent)]
    Bad(#[from] BadHeader),
    /// Re-mapping a grown file failed.
    #[error("remap: {0}")]
    Remap(io::Error),
    /// Another process truncated the file while it was read: what was read is dropped, and the next read maps the
    /// file again at its current size.
    #[error("the memfile was truncated while it was read")]
    Truncated,
}

/// Checks that a name is a plain `/dev/shm` file name (a registration sample is untrusted input).
fn check_name(name: &str) -> Result<PathBuf, MemfileOpenError> {
    if name.is_empty() || name.len() > 200 || name.contains('/') || name == "." || name == ".." || name.contains('\0') {
        return Err(MemfileOpenError::BadName(name.to_string()));
    }
    Ok(Path::new(SHM_DIR).join(name))
}

/// A memfile this process created and writes; removed (with its flag lock, if created here) on drop.
#[derive(Debug)]
pub(crate) struct MemfileWriter {
    name: String,
    path: PathBuf,
    /// Raw and guarded: eCAL readers of other processes map it (and one that can write it could truncate it).
    map: PeerMap,
    lock: NamedSync,
    max_data_size: u64,
    /// The flag lock is still ours: the unlock after the last write found the inner mutex held past its budget.
    /// The next write writes without locking again and retries the unlock.
    flag_held: bool,
    /// Held while the memfile lives (stale-file cleanup of other shoal processes).
    _owner: crate::sys::OwnerLock,
}

// SAFETY: the mapping is written only while holding the memfile's flag lock (or before it was announced), through
// raw pointers; no references into it are handed out.
unsafe impl Send for MemfileWriter {}

impl MemfileWriter {
    /// Creates `shoal_<pid>_ecal<random hex>` with a data area of `max_data_size` bytes (`O_CREAT|O_EXCL`, the
    /// mode of `[shoal_security] shm_access`), its `_mtx`, and an empty message header.
    pub(crate) fn create(max_data_size: u64) -> Result<MemfileWriter, MemfileOpenError> {
        let total =
            (INT_HDR_SIZE as u64).checked_add(max_data_size).ok_or(MemfileOpenError::TooLarge(max_data_size))?;
        let len = usize::try_from(total).map_err(|_| MemfileOpenError::TooLarge(max_data_size))?;
        let (name, path, file) = loop {
            // eCAL peers open whatever name is announced; the owner pid in it lets the stale-file cleanup of a
            // later shoal node remove the memfile (and its `_mtx` and event files) after a crash, as for rings.
            let name = format!("shoal_{}_ecal{:x}", std::process::id(), rand::random::<u32>());
            let path = check_name(&name)?;
            // Created with its final mode (the umask may narrow it; the chmod below sets it exactly), so that it is
            // never readable by others in between.
            let created = std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new().read(true).write(true).create_new(true),
                crate::sys::shm_write_mode(),
            )
            .open(&path);
            match created {
                Ok(f) => break (name, path, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(MemfileOpenError::Io { call: "open", path, source }),
            }
        };
        let io_err = |call: &'static str| {
            let path = path.clone();
            move |source| MemfileOpenError::Io { call, path, source }
        };
        let setup = || -> Result<(PeerMap, NamedSync, crate::sys::OwnerLock), MemfileOpenError> {
            use std::os::unix::fs::PermissionsExt;
            let owner = crate::sys::OwnerLock::hold(&file).map_err(io_err("owner lock"))?;
            let mode = crate::sys::shm_write_mode();
            file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(io_err("chmod"))?;
            file.set_len(total).map_err(io_err("ftruncate"))?;
            let map = PeerMap::new(MmapOptions::new().len(len).map_raw(&file).map_err(io_err("mmap"))?);
            let lock = NamedSync::open_or_create(&format!("{name}_mtx"))?;
            Ok((map, lock, owner))
        };
        let (map, lock, owner) = match setup() {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let w = MemfileWriter { name, path, map, lock, max_data_size, flag_held: false, _owner: owner };
        let hdr =
            InternalHeader { int_hdr_size: INT_HDR_SIZE as u16, reserved: [0; 6], cur_data_size: 0, max_data_size };
        // SAFETY: the mapping has `INT_HDR_SIZE + max_data_size >= INT_HDR_SIZE` bytes; nobody knows the name
        // yet, so nobody else accesses it. Unaligned write: the header is packed.
        unsafe { w.map.as_mut_ptr().cast::<InternalHeader>().write_unaligned(hdr) };
        if max_data_size >= MSG_HDR_SIZE as u64 {
            w.write_msg_header(&MemFileHeader { hdr_size: MSG_HDR_SIZE as u16, ..MemFileHeader::default() });
            w.set_cur_data_size(MSG_HDR_SIZE as u64);
        }
        Ok(w)
    }

    /// The memfile's name (as registered in `memory_file_list`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Capacity of the data area (message header + payload).
    pub(crate) fn max_data_size(&self) -> u64 {
        self.max_data_size
    }

    fn write_msg_header(&self, h: &MemFileHeader) {
        // SAFETY: the caller made sure the data area holds at least MSG_HDR_SIZE bytes (max_data_size checked
        // against it); offset INT_HDR_SIZE is 8-aligned in a page-aligned mapping.
        unsafe { self.map.as_mut_ptr().add(INT_HDR_SIZE).cast::<MemFileHeader>().write_unaligned(*h) };
    }

    fn set_cur_data_size(&self, v: u64) {
        // SAFETY: offset 8 of the internal header, inside the mapping; unaligned write because it is packed.
        unsafe { self.map.as_mut_ptr().add(8).cast::<u64>().write_unaligned(v) };
    }

    /// Writes one message under the flag lock. False (nothing written) if the payload does not fit, the flag lock
    /// was not free within [`WRITER_LOCK_TIMEOUT`], or its inner mutex stayed held past `budget`. An unlock that
    /// finds the inner mutex held past `budget` leaves the flag ours (readers wait), for the next write.
    pub(crate) fn write(&mut self, hdr: &MemFileHeader, payload: &[u8], budget: InnerBudget) -> bool {
        let need = MSG_HDR_SIZE as u64 + payload.len() as u64;
        if need > self.max_data_size {
            return false;
        }
        if !self.flag_held
            && self.lock.lock_flag_within(Instant::now() + WRITER_LOCK_TIMEOUT, budget) != FlagLock::Taken
        {
            return false;
        }
        self.flag_held = true;
        let h = MemFileHeader { hdr_size: MSG_HDR_SIZE as u16, data_size: payload.len() as u64, ..*hdr };
        self.write_msg_header(&h);
        // SAFETY: INT_HDR_SIZE + MSG_HDR_SIZE + payload.len() <= INT_HDR_SIZE + max_data_size = mapping length
        // (checked above); we hold the flag lock, so no reader copies meanwhile; `payload` is our own memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                self.map.as_mut_ptr().add(INT_HDR_SIZE + MSG_HDR_SIZE),
                payload.len(),
            )
        };
        self.set_cur_data_size(need);
        self.flag_held = !self.lock.unlock_within(budget);
        true
    }
}

impl Drop for MemfileWriter {
    fn drop(&mut self) {
        // The writer removes its memfile; the creator of `_mtx` removes that (eCAL's rules).
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::debug!("cannot remove {}: {e}", self.path.display());
        }
        if self.lock.created() {
            self.lock.unlink();
        }
    }
}

/// One message copied out of a memfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadMessage {
    /// The message header (fields the writer's header version lacks are 0).
    pub(crate) header: MemFileHeader,
    /// The payload.
    pub(crate) payload: Vec<u8>,
}

/// A memfile of another process, mapped read-only.
#[derive(Debug)]
pub(crate) struct MemfileReader {
    file: File,
    /// Raw, read-only and guarded: the writer (or anyone who can write the file) may truncate it while we read.
    map: PeerMap,
    map_len: usize,
    lock: NamedSync,
    /// Truncations seen (each dropped the message being read and remapped the file).
    truncations: u64,
}

// SAFETY: the mapping is only read through raw pointers while holding the flag lock; nothing references it.
unsafe impl Send for MemfileReader {}

impl MemfileReader {
    /// Opens an existing memfile read-only and its `_mtx` (opened or created, eCAL's reader does the same).
    #[cfg(test)]
    pub(crate) fn open(name: &str) -> Result<MemfileReader, MemfileOpenError> {
        MemfileReader::open_until(name, std::time::Instant::now() + super::sync::FLOCK_TIMEOUT)
    }

    /// [`open`](Self::open), waiting for the `_mtx` file's creation `flock` only until `flock_until`.
    pub(crate) fn open_until(name: &str, flock_until: std::time::Instant) -> Result<MemfileReader, MemfileOpenError> {
        let path = check_name(name)?;
        let io_err = |call: &'static str| {
            let path = path.clone();
            move |source| MemfileOpenError::Io { call, path, source }
        };
        // The name came from another process: no symlink, no FIFO, a regular file in /dev/shm only.
        let (file, size) = crate::sys::open_peer_file(&path, false, false).map_err(io_err("open"))?;
        let map_len = usize::try_from(size).map_err(|_| MemfileOpenError::TooLarge(size))?;
        if map_len < INT_HDR_SIZE {
            return Err(MemfileOpenError::Io {
                call: "fstat",
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, format!("{size} bytes, too small for a memfile")),
            });
        }
        let map = PeerMap::new(MmapOptions::new().len(map_len).map_raw_read_only(&file).map_err(io_err("mmap"))?);
        let lock = NamedSync::open_or_create_until(&format!("{name}_mtx"), flock_until)?;
        Ok(MemfileReader { file, map, map_len, lock, truncations: 0 })
    }

    /// Times the file was truncated under this reader (see [`ReadError::Truncated`]).
    pub(crate) fn truncations(&self) -> u64 {
        self.truncations
    }

    /// After a truncation: maps the file again at the size it has now (at least the internal header, or nothing is
    /// read until it has grown back).
    #[cold]
    fn remap_after_truncation(&mut self) -> Result<(), io::Error> {
        let size = self.file.metadata()?.len();
        let len = usize::try_from(size).map_err(|_| io::Error::other("file too large"))?.max(INT_HDR_SIZE);
        // Mapping past the end of the file is allowed; such pages fault (and the guard zero-fills them), and
        // read_locked checks the sizes it reads against `map_len`, which counts only what the file holds.
        self.map = PeerMap::new(MmapOptions::new().len(len).map_raw_read_only(&self.file)?);
        self.map_len = usize::try_from(size).unwrap_or(0);
        Ok(())
    }

    /// The flag lock (for tests and cleanup).
    pub(crate) fn lock_object(&self) -> &NamedSync {
        &self.lock
    }

    /// Copies `len` bytes at `offset` out of the mapping; the caller checked `offset + len <= map_len`.
    fn copy_out(&self, offset: usize, out: &mut [u8]) {
        debug_assert!(offset + out.len() <= self.map_len);
        // SAFETY: `offset + out.len() <= map_len` (checked by every caller against the mapped length, which is at
        // most the file size at mapping time); raw copy, no reference to shared memory is created.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
    }

    fn remap_if_grown(&mut self, need: u64) -> Result<(), io::Error> {
        if need <= self.map_len as u64 {
            return Ok(());
        }
        let size = self.file.metadata()?.len();
        if size > self.map_len as u64 {
            let len = usize::try_from(size).map_err(|_| io::Error::other("file too large"))?;
            self.map = PeerMap::new(MmapOptions::new().len(len).map_raw_read_only(&self.file)?);
            self.map_len = len;
        }
        Ok(())
    }

    /// Takes the flag lock (`timeout`), validates the headers against the mapping and copies the message out if
    /// its clock is above `after_clock` (`Ok(None)` otherwise).
    pub(crate) fn read(&mut self, timeout: Duration, after_clock: u64) -> Result<Option<ReadMessage>, ReadError> {
        if !self.lock.lock(timeout) {
            return Err(ReadError::Locked);
        }
        let r = self.read_locked(after_clock);
        self.lock.unlock();
        if self.map.truncated() {
            // Whatever was read came (partly) from zero pages the SIGBUS guard put over the mapping.
            self.truncations += 1;
            self.remap_after_truncation().map_err(ReadError::Remap)?;
            return Err(ReadError::Truncated);
        }
        r
    }

    fn read_locked(&mut self, after_clock: u64) -> Result<Option<ReadMessage>, ReadError> {
        if self.map_len < INT_HDR_SIZE {
            // Truncated below a header and not grown back yet.
            self.remap_if_grown(INT_HDR_SIZE as u64).map_err(ReadError::Remap)?;
            if self.map_len < INT_HDR_SIZE {
                return Ok(None);
            }
        }
        let mut raw = [0u8; INT_HDR_SIZE];
        self.copy_out(0, &mut raw);
        let int_hdr_size = u16::from_le_bytes([raw[0], raw[1]]);
        let cur = u64::from_le_bytes(raw[8..16].try_into().unwrap_or_default());
        let max = u64::from_le_bytes(raw[16..24].try_into().unwrap_or_default());
        if usize::from(int_hdr_size) < INT_HDR_SIZE {
            return Err(BadHeader::IntHdrSize(int_hdr_size).into());
        }
        let offset = u64::from(int_hdr_size);
        // eCAL readers remap when the writer announces a larger area than they mapped.
        self.remap_if_grown(offset.saturating_add(max)).map_err(ReadError::Remap)?;
        let file = self.map_len as u64;
        let avail = file - offset.min(file);
        if cur > avail || offset > file {
            return Err(BadHeader::DataArea { offset, len: cur, file }.into());
        }
        if cur < 2 {
            return Ok(None);
        }
        let offset = offset as usize;
        let mut hb = [0u8; 2];
        self.copy_out(offset, &mut hb);
        let hdr_size = u16::from_le_bytes(hb);
        if usize::from(hdr_size) < MIN_MSG_HDR_SIZE {
            return Err(BadHeader::MsgHdrSize(hdr_size).into());
        }
        let copy = usize::from(hdr_size).min(MSG_HDR_SIZE);
        if copy as u64 > cur {
            return Err(BadHeader::Message { hdr: u64::from(hdr_size), data: 0, cur }.into());
        }
        let mut hbuf = [0u8; MSG_HDR_SIZE];
        self.copy_out(offset, &mut hbuf[..copy]);
        let header = parse_msg_header(&hbuf);
        if header.clock <= after_clock {
            return Ok(None);
        }
        let end = u64::from(hdr_size).checked_add(header.data_size);
        if end.is_none_or(|e| e > cur) {
            return Err(BadHeader::Message { hdr: u64::from(hdr_size), data: header.data_size, cur }.into());
        }
        // data_size <= cur <= mapped length: the allocation is bounded by what we mapped.
        let mut payload = vec![0u8; header.data_size as usize];
        self.copy_out(offset + usize::from(hdr_size), &mut payload);
        Ok(Some(ReadMessage { header: MemFileHeader { hdr_size, ..header }, payload }))
    }
}

/// A memfile of another process read as a subscriber's observer reads it (open, then [`read`](Self::read) on each
/// event), for the `memfile_header` fuzz target and the test that runs its seeds (`fuzz/`); not an API.
#[doc(hidden)]
#[derive(Debug)]
pub struct MemfileProbe(MemfileReader);

/// A message [`MemfileProbe::read`] copied out: the message header's fields (those the writer's header version
/// lacks are 0) and the payload.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeMessage {
    pub hdr_size: u16,
    pub data_size: u64,
    pub id: u64,
    pub clock: u64,
    pub time: i64,
    pub hash: u64,
    pub options: u8,
    pub ack_timeout_ms: i64,
    pub payload: Vec<u8>,
}

impl MemfileProbe {
    /// Opens memfile `name` of `/dev/shm` (and opens or creates its `<name>_mtx`, which the caller removes).
    pub fn open(name: &str) -> Result<MemfileProbe, String> {
        MemfileReader::open_until(name, Instant::now() + super::sync::FLOCK_TIMEOUT)
            .map(MemfileProbe)
            .map_err(|e| e.to_string())
    }

    /// One read under the flag lock: the message if its clock is above `after_clock`.
    pub fn read(&mut self, after_clock: u64) -> Result<Option<ProbeMessage>, String> {
        let m = self.0.read(READER_LOCK_TIMEOUT, after_clock).map_err(|e| e.to_string())?;
        Ok(m.map(|ReadMessage { header: h, payload }| ProbeMessage {
            hdr_size: h.hdr_size,
            data_size: h.data_size,
            id: h.id,
            clock: h.clock,
            time: h.time,
            hash: h.hash,
            options: h.options,
            ack_timeout_ms: h.ack_timeout_ms,
            payload,
        }))
    }

    /// Times the file was truncated under this reader.
    pub fn truncations(&self) -> u64 {
        self.0.truncations()
    }
}

/// Decodes a (zero-padded) message header from its x86_64 byte layout.
fn parse_msg_header(b: &[u8; MSG_HDR_SIZE]) -> MemFileHeader {
    let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    MemFileHeader {
        hdr_size: u16::from_le_bytes([b[0], b[1]]),
        data_size: u(8),
        id: u(16),
        clock: u(24),
        time: u(32) as i64,
        hash: u(40),
        options: b[48],
        ack_timeout_ms: u(56) as i64,
    }
}
