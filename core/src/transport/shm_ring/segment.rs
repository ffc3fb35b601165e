//! Segment files: names, creation in /dev/shm or on hugetlbfs (with fallback) under an owner lock, pid checks
//! and stale-file cleanup.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use memmap2::MmapOptions;

use crate::sys::OwnerLock;
use crate::sys::shm_guard::PeerMap;

/// Directory of ordinary (4 KiB page) shared-memory files.
pub const SHM_DIR: &str = "/dev/shm";

/// `statfs.f_type` of a hugetlbfs mount.
const HUGETLBFS_MAGIC: u64 = 0x9584_58f6;
/// Huge page size assumed when the mount reports something unusable.
const DEFAULT_HUGE_PAGE: u64 = 2 << 20;
/// Attempts at finding an unused file name.
const NAME_ATTEMPTS: u32 = 16;

/// Error of [`remove_stale_segments`].
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// The directory could not be listed.
    #[error("cannot list {dir}: {source}")]
    ReadDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// A freshly created, mapped, zero-filled segment file.
#[derive(Debug)]
pub(super) struct CreatedFile {
    pub(super) path: PathBuf,
    /// Raw and guarded: other processes write parts of it (reliable readers their table entries, publishers a
    /// doorbell's words), and any process that can write the file can truncate it.
    pub(super) map: PeerMap,
    /// The file lives on hugetlbfs.
    pub(super) huge: bool,
    /// The page size of its mapping, bytes (the hugetlbfs mount's, or the system's normal page).
    pub(super) page_size: u64,
    /// Why huge pages were requested but not used.
    pub(super) fallback_reason: Option<String>,
    /// This process's owner lock on the file (kept for the file's life: the stale-file cleanup of other processes
    /// removes the file only once nobody holds it).
    pub(super) owner: OwnerLock,
}

/// Where to create a segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Placement<'a> {
    /// `Some(dir)`: try hugetlbfs at `dir` first.
    pub(super) huge_dir: Option<&'a Path>,
    /// Fall back to normal pages without a warning (`huge_pages = auto`).
    pub(super) quiet: bool,
}

/// A process-unique token for file names (no `_`, so names stay parseable).
pub(super) fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos =
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos() ^ (d.as_secs() as u32)).unwrap_or(0);
    format!("{nanos:08x}{n:x}")
}

/// This process's id.
pub(super) fn own_pid() -> u32 {
    std::process::id()
}

/// Whether a process with this pid exists (see [`crate::sys::pid_alive`]).
pub(super) use crate::sys::pid_alive;

/// Parsed `shoal_<pid>_<unique>_g<generation>` ring file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RingName {
    pub(super) pid: u32,
    pub(super) unique: String,
    pub(super) generation: u64,
}

impl RingName {
    /// File name of this ring at `generation`.
    pub(super) fn file_name(&self, generation: u64) -> String {
        format!("shoal_{}_{}_g{}", self.pid, self.unique, generation)
    }

    /// Parses a file name (not a path).
    pub(super) fn parse(file_name: &str) -> Option<RingName> {
        let rest = file_name.strip_prefix("shoal_")?;
        let (pid, rest) = rest.split_once('_')?;
        let (unique, generation) = rest.split_once("_g")?;
        if unique.is_empty() || !unique.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        Some(RingName { pid: parse_decimal(pid)?, unique: unique.to_owned(), generation: parse_decimal(generation)? })
    }
}

fn parse_decimal<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Owner pid of any shoal shared-memory file name (`shoal_<pid>_...` or `shoal_db_<pid>_...`).
pub(super) fn owner_pid_of(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix("shoal_")?;
    let rest = rest.strip_prefix("db_").unwrap_or(rest);
    let (pid, tail) = rest.split_once('_')?;
    if tail.is_empty() {
        return None;
    }
    parse_decimal(pid)
}

/// Path as a `&str` (shoal only creates UTF-8 paths).
pub(super) fn path_str(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

fn statfs(dir: &Path) -> io::Result<libc::statfs> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: statfs is plain data; all-zero is a valid value.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated string and `buf` a valid out-pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc == 0 { Ok(buf) } else { Err(io::Error::last_os_error()) }
}

/// Whether `dir` is a hugetlbfs mount.
#[cfg(test)]
pub(super) fn is_hugetlbfs(dir: &Path) -> bool {
    statfs(dir).is_ok_and(|fs| fs.f_type as u64 == HUGETLBFS_MAGIC)
}

/// The system's normal page size (4 KiB where it cannot be read).
fn normal_page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|n| *n > 0).unwrap_or(4096)
}

fn nr_hugepages() -> String {
    std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn create_exclusive(dir: &Path, file_name: &str, mode: u32) -> io::Result<(PathBuf, File)> {
    let path = dir.join(file_name);
    let file = OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(&path)?;
    // Exactly the configured mode ([shoal_security] shm_access), whatever the umask.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok((path, file))
}

/// Error while creating a segment file: which step failed, on which path.
#[derive(Debug)]
pub(super) struct CreateFailure {
    pub(super) op: &'static str,
    pub(super) path: PathBuf,
    pub(super) source: io::Error,
}

fn fail(op: &'static str, path: &Path, source: io::Error) -> CreateFailure {
    CreateFailure { op, path: path.to_owned(), source }
}

/// Creates `dir/file_name` exclusively with `size` bytes (rounded up on hugetlbfs), maps it
/// shared and read-write. `name_for` is called again with a fresh token if the name exists.
pub(super) fn create_mapped(
    placement: Placement<'_>,
    size: u64,
    mode: u32,
    mut name_for: impl FnMut() -> String,
) -> Result<CreatedFile, CreateFailure> {
    let mut fallback_reason = None;
    if let Some(dir) = placement.huge_dir {
        match try_huge(dir, size, mode, &mut name_for) {
            Ok(created) => return Ok(created),
            Err(reason) => {
                if placement.quiet {
                    tracing::debug!("shm_ring: no huge pages (huge_pages = auto), using {SHM_DIR}: {reason}");
                } else {
                    tracing::warn!("shm_ring: huge pages requested but not used, falling back to {SHM_DIR}: {reason}");
                }
                fallback_reason = Some(reason);
            }
        }
    }
    let (path, file, owner) = create_unique(Path::new(SHM_DIR), mode, &mut name_for)
        .map_err(|e| fail("create", &Path::new(SHM_DIR).join("shoal_*"), e))?;
    let result = (|| {
        let len = libc::off_t::try_from(size)
            .map_err(|_| ("fallocate", io::Error::new(io::ErrorKind::InvalidInput, "segment size exceeds off_t")))?;
        // SAFETY: posix_fallocate only reads the fd and the range; the fd is open for writing.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        if rc != 0 {
            return Err(("fallocate", io::Error::from_raw_os_error(rc)));
        }
        map_file(&file, size).map_err(|e| ("mmap", e))
    })();
    match result {
        Ok(map) => Ok(CreatedFile { path, map, huge: false, page_size: normal_page_size(), fallback_reason, owner }),
        Err((op, e)) => {
            let _ = std::fs::remove_file(&path);
            Err(fail(op, &path, e))
        }
    }
}

/// Creates a file under a fresh name and takes its owner lock (a file that a cleanup removed before the lock was
/// taken is given up and another name tried).
fn create_unique(
    dir: &Path,
    mode: u32,
    name_for: &mut impl FnMut() -> String,
) -> io::Result<(PathBuf, File, OwnerLock)> {
    let mut last = None;
    for _ in 0..NAME_ATTEMPTS {
        match create_exclusive(dir, &name_for(), mode) {
            Ok((path, file)) => match OwnerLock::hold(&file) {
                Ok(owner) => return Ok((path, file, owner)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => last = Some(e),
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
            },
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

fn map_file(file: &File, size: u64) -> io::Result<PeerMap> {
    let len = usize::try_from(size).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
    // A raw mapping (no Rust reference to it is made), registered with the SIGBUS guard: a process that can write
    // the file could truncate it.
    Ok(PeerMap::new(MmapOptions::new().len(len).populate().map_raw(file)?))
}

/// Tries hugetlbfs at `dir`; the error is a human-readable reason for the fallback.
fn try_huge(dir: &Path, size: u64, mode: u32, name_for: &mut impl FnMut() -> String) -> Result<CreatedFile, String> {
    let shown = dir.display();
    let fs = match statfs(dir) {
        Ok(fs) => fs,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("no hugetlbfs mounted at {shown} (it does not exist)"));
        }
        Err(e) => return Err(format!("cannot statfs {shown}: {e}")),
    };
    if fs.f_type as u64 != HUGETLBFS_MAGIC {
        return Err(format!(
            "no hugetlbfs mounted at {shown} (filesystem type 0x{:x}, want 0x{HUGETLBFS_MAGIC:x})",
            fs.f_type as u64
        ));
    }
    // Readers open ring files only directly in a hugetlbfs mount point (`sys::open_peer_file`).
    match crate::sys::is_hugetlbfs_mount_point(dir) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "{shown} is on a hugetlbfs but is not its mount point (readers open ring files only directly in one)"
            ));
        }
        Err(e) => return Err(format!("cannot read the mount table /proc/self/mountinfo: {e}")),
    }
    let page = u64::try_from(fs.f_bsize)
        .ok()
        .filter(|p| p.is_power_of_two() && *p >= DEFAULT_HUGE_PAGE)
        .unwrap_or(DEFAULT_HUGE_PAGE);
    let rounded = size.checked_next_multiple_of(page).ok_or_else(|| "segment size overflows".to_owned())?;
    let (path, file, owner) =
        create_unique(dir, mode, name_for).map_err(|e| format!("cannot create a file in {shown}: {e}"))?;
    let mapped = file.set_len(rounded).map_err(|e| format!("ftruncate {}: {e}", path.display())).and_then(|()| {
        map_file(&file, rounded).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOMEM) {
                format!(
                    "mmap ENOMEM on {}: not enough free huge pages (vm.nr_hugepages is {})",
                    path.display(),
                    nr_hugepages()
                )
            } else {
                format!("mmap {}: {e}", path.display())
            }
        })
    });
    match mapped {
        Ok(map) => Ok(CreatedFile { path, map, huge: true, page_size: page, fallback_reason: None, owner }),
        Err(reason) => {
            let _ = std::fs::remove_file(&path);
            Err(reason)
        }
    }
}

/// Deletes the `shoal_*` files in `dir` whose owner is gone, and returns their paths. Files that cannot be removed
/// are logged and skipped; other users' files that cannot be opened are kept.
///
/// The owner's liveness is its [`crate::sys::OwnerLock`]: the creator of a ring, doorbell or memfile holds it while
/// it lives, and the kernel releases it when the process dies,
/// SIGKILL included, so a file is removed only once its exclusive lock can be taken. A live owner in another pid
/// namespace sharing the directory keeps its files whatever its pid means here. A memfile's `_mtx` and event files
/// (which eCAL peers create and open too, and which hold no lock: a publisher may serve 256 subscriber processes)
/// go with their memfile. Files of shoal versions without the lock are also kept while the pid in their name is a
/// live process here: the pid can only keep a file, never condemn one.
///
/// Called at start-up by the runtime on `/dev/shm` (and on the hugetlbfs mount when huge pages are configured),
/// and after an entity of this host went away, at most once per registration period.
pub fn remove_stale_segments(dir: &Path) -> Result<Vec<PathBuf>, CleanupError> {
    let entries = std::fs::read_dir(dir).map_err(|source| CleanupError::ReadDir { dir: dir.to_owned(), source })?;
    let mut removed = Vec::new();
    let mut sync_files = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = owner_pid_of(name) else { continue };
        if pid_alive(pid) {
            continue;
        }
        let path = entry.path();
        if let Some(memfile) = memfile_of_sync_file(name) {
            // Decided by its memfile, once that one is decided.
            sync_files.push((path, dir.join(memfile)));
            continue;
        }
        match crate::sys::remove_if_unowned(&path) {
            Ok(true) => {
                tracing::debug!("shm_ring: removed stale {} (no owner holds it)", path.display());
                removed.push(path);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!("shm_ring: cannot remove stale {}: {e}", path.display()),
        }
    }
    // The `_mtx` and event files of a shoal memfile live as long as their memfile: they go when it is gone.
    for (path, memfile) in sync_files {
        if std::fs::symlink_metadata(&memfile).is_ok() {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::debug!("shm_ring: removed stale {} (its memfile is gone)", path.display());
                removed.push(path);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("shm_ring: cannot remove stale {}: {e}", path.display()),
        }
    }
    Ok(removed)
}

/// The memfile a shoal eCAL sync file belongs to: `shoal_<pid>_ecal<hex>` of `shoal_<pid>_ecal<hex>_mtx`,
/// `..._<pid>_evt` and `..._<pid>_ack_evt`. None for anything else (the memfile itself included).
fn memfile_of_sync_file(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("shoal_")?;
    let (pid, rest) = rest.split_once('_')?;
    parse_decimal::<u32>(pid)?;
    let hex = rest.strip_prefix("ecal")?;
    let (hex, suffix) = hex.split_once('_')?;
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) || suffix.is_empty() {
        return None;
    }
    Some(&name[..name.len() - suffix.len() - 1])
}
