//! Thin safe wrappers over the few OS calls the runtime needs: host name, CPU affinity, pid liveness, opening files
//! that other processes announce (`open_peer_file`), owner locks on shared-memory files and the stale-file removal
//! they decide (`OwnerLock`, `remove_if_unowned`), range locks further into such a file (`hold_range`, `range_held`:
//! a reliable ring reader's liveness), the modes of the shared-memory files this process creates, the
//! SIGBUS guard for mappings of files that peers can truncate ([`shm_guard`]), copy-only access to bytes another
//! process may be writing ([`shared_bytes`]), payload copies that avoid a slow case of `memcpy` ([`copy`]), the
//! batched UDP calls `sendmmsg`/`recvmmsg` with GSO and the receive-overflow counter ([`mmsg`]), reading a socket into a buffer's spare capacity ([`recv_into_spare`]),
//! the process's CPU time and resident memory (`process_cpu_time`, `RssReader`), and the wall clock read from the CPU's
//! time-stamp counter that stamps every send ([`wall_clock`]).
#![allow(unsafe_code)]

pub(crate) mod copy;
pub(crate) mod mmsg;
pub(crate) mod shared_bytes;
pub(crate) mod shm_guard;
pub(crate) mod wall_clock;

use std::io;

/// The host name exactly as `gethostname(2)` returns it: eCAL compares it byte for byte.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is a valid writable buffer of the length passed; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::from("localhost");
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Pin the calling thread to the given CPUs.
pub(crate) fn set_current_thread_affinity(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("cpu {cpu} out of range")));
        }
        // SAFETY: `cpu` is below CPU_SETSIZE, so CPU_SET writes inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 means the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The full path of the running executable (eCAL's `process_name`).
pub(crate) fn current_exe_name() -> String {
    std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| String::from("unknown"))
}

/// The process command line, arguments joined by spaces.
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// True while a process with this pid exists (`kill(pid, 0)` does not fail with ESRCH).
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks; nothing is delivered.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Longest wait for this process's own owner lock on a file it just created (someone who took the file's
/// exclusive lock, a stale-file cleanup deciding, holds it for a few system calls).
const OWNER_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(250);

/// `fcntl` open-file-description lock of the whole file, `F_RDLCK` or `F_WRLCK`, without waiting.
fn ofd_lock(file: &std::fs::File, kind: libc::c_int) -> io::Result<()> {
    // l_start = 0, l_len = 0: the whole file, however it grows.
    ofd_lock_range(file, kind, 0, 0)
}

/// `F_OFD_SETLK` of `kind` (`F_RDLCK`, `F_WRLCK` or `F_UNLCK`) on `len` bytes from `start` (0: to the end, however
/// the file grows), without waiting.
fn ofd_lock_range(file: &std::fs::File, kind: libc::c_int, start: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fl = flock_of(kind, start, len)?;
    loop {
        // SAFETY: F_OFD_SETLK reads the valid, initialised `fl` for a descriptor `file` keeps open.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// A `struct flock` for an OFD lock request of `kind` on `len` bytes from `start`.
fn flock_of(kind: libc::c_int, start: u64, len: u64) -> io::Result<libc::flock> {
    let range = |v: u64| {
        libc::off_t::try_from(v).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "lock range exceeds off_t"))
    };
    // SAFETY: flock is plain data; all-zero is valid (l_pid must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = range(start)?;
    fl.l_len = range(len)?;
    Ok(fl)
}

/// The byte whose lock tells a file's owner: [`OwnerLock`] covers the whole file, [`owner_holds`] and
/// [`remove_if_unowned`] ask about this byte only, so that the range locks others take further into the file (a
/// reliable ring reader's on its reader-table entry, [`hold_range`]) never count as its owner.
const OWNER_BYTE: (u64, u64) = (0, 1);

/// Takes a shared lock (`F_OFD_SETLK`, `F_RDLCK`) on `len` bytes of `file` from `start`, without waiting; held
/// until [`release_range`] or until the last descriptor of `file`'s open file description closes (the process's
/// death included). What another process asks with [`range_held`]. `start` must lie after [`OWNER_BYTE`].
pub(crate) fn hold_range(file: &std::fs::File, start: u64, len: u64) -> io::Result<()> {
    debug_assert!(start >= OWNER_BYTE.0 + OWNER_BYTE.1 && len > 0);
    ofd_lock_range(file, libc::F_RDLCK, start, len)
}

/// Releases what [`hold_range`] took on the same range through the same open file description.
pub(crate) fn release_range(file: &std::fs::File, start: u64, len: u64) -> io::Result<()> {
    ofd_lock_range(file, libc::F_UNLCK, start, len)
}

/// Whether an open file description other than `file`'s holds a lock on any byte of `len` bytes from `start` that
/// conflicts with an exclusive one (`F_OFD_GETLK`), whatever pid namespace its process is in. Fails where the
/// kernel has no OFD locks (before 3.15).
pub(crate) fn range_held(file: &std::fs::File, start: u64, len: u64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut fl = flock_of(libc::F_WRLCK, start, len)?;
    loop {
        // SAFETY: F_OFD_GETLK reads and rewrites the valid, initialised `fl`, for a descriptor `file` keeps open.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) } == 0 {
            return Ok(fl.l_type != libc::F_UNLCK as libc::c_short);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// The owner's hold on a shared-memory file it created (ring segment, doorbell, eCAL memfile): a shared
/// open-file-description lock (`F_OFD_SETLK`, `F_RDLCK`) over the whole file, held while this value lives and
/// released by the kernel when the process ends however it ends (SIGKILL included). It is how
/// [`remove_if_unowned`] tells a live owner's file from a dead one's, in any pid namespace that shares the directory.
/// It does not interact with `flock` (which eCAL's sync files use), and readers never take it exclusively.
#[derive(Debug)]
pub(crate) struct OwnerLock {
    /// A descriptor of the locked open file description (the lock goes when the last one closes).
    file: std::fs::File,
}

impl OwnerLock {
    /// Locks `file` (open for reading) for its owner. Fails with `ErrorKind::NotFound` when the file lost its name
    /// before the lock was taken (a cleanup that saw it unlocked removed it: create another), and with
    /// `ErrorKind::WouldBlock` when someone held an exclusive lock on it for [`OWNER_LOCK_TIMEOUT`].
    pub(crate) fn hold(file: &std::fs::File) -> io::Result<OwnerLock> {
        use std::os::unix::fs::MetadataExt;
        let file = file.try_clone()?;
        let started = std::time::Instant::now();
        let mut backoff = std::time::Duration::from_micros(50);
        loop {
            match ofd_lock(&file, libc::F_RDLCK) {
                Ok(()) => break,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                    let waited = started.elapsed();
                    if waited >= OWNER_LOCK_TIMEOUT {
                        return Err(io::Error::new(
                            io::ErrorKind::WouldBlock,
                            format!("someone held an exclusive lock on it for {waited:?}"),
                        ));
                    }
                    std::thread::sleep(backoff.min(OWNER_LOCK_TIMEOUT - waited));
                    backoff = (backoff * 2).min(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
        if file.metadata()?.nlink() == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, "removed as stale before its owner locked it"));
        }
        Ok(OwnerLock { file })
    }

    /// The locked open file description: asking [`range_held`] through it ignores this lock (and any other this
    /// open file description holds), and sees everybody else's.
    pub(crate) fn file(&self) -> &std::fs::File {
        &self.file
    }
}

/// Whether some process holds a lock on the owner's byte of `file` ([`OWNER_BYTE`]) that conflicts with an exclusive
/// one (`F_OFD_GETLK`): the creator's [`OwnerLock`] while the creator lives, whatever pid namespace it is in. Locks
/// of `file`'s own open file description do not count (so a creator asking about its own file gets `false`); a
/// cleanup's brief exclusive lock does; a range lock further into the file ([`hold_range`]) does not. Fails where the
/// kernel has no OFD locks (before 3.15).
pub(crate) fn owner_holds(file: &std::fs::File) -> io::Result<bool> {
    range_held(file, OWNER_BYTE.0, OWNER_BYTE.1)
}

/// Removes `path` if no process holds an [`OwnerLock`] on it: opens it (no symlink, no FIFO, regular files only),
/// takes the exclusive lock of the owner's byte ([`OWNER_BYTE`]) without waiting, checks that the name still refers to
/// the file locked, unlinks it. `Ok(false)`: kept (owned, or not ours to open).
pub(crate) fn remove_if_unowned(path: &std::path::Path) -> io::Result<bool> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        // Another user's file (we could not remove it anyway), a symlink, or gone meanwhile.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::ELOOP | libc::ENOENT)) => {
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Ok(false);
    }
    // The owner's byte only: a reliable reader's lock on its entry of a ring (`hold_range`) is not the owner's.
    match ofd_lock_range(&file, libc::F_WRLCK, OWNER_BYTE.0, OWNER_BYTE.1) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => return Ok(false),
        Err(e) => return Err(e),
    }
    // The name may have been removed and created anew since we opened it: unlink only what we locked.
    match std::fs::symlink_metadata(path) {
        Ok(now) if now.ino() == meta.ino() && now.dev() == meta.dev() => {}
        _ => return Ok(false),
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// `f_type` of a hugetlbfs file system (`linux/magic.h`).
const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
/// `f_type` of a tmpfs file system (`linux/magic.h`).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// The directory of shared-memory files.
const SHM_DIR: &str = "/dev/shm";

/// `statfs(2)` of `path`, or of the open file `fd` (`fstatfs`), returning `f_type`.
fn fs_type(path: &std::path::Path, fd: Option<std::os::fd::RawFd>) -> io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: statfs is plain old data for which all-zero is valid.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = match fd {
        // SAFETY: the caller's descriptor is open for the duration of the call and `fs` is a valid, writable statfs.
        Some(fd) => unsafe { libc::fstatfs(fd, &mut fs) },
        None => {
            let c = std::ffi::CString::new(path.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
            // SAFETY: `c` is a valid NUL-terminated string and `fs` a valid, writable statfs.
            unsafe { libc::statfs(c.as_ptr(), &mut fs) }
        }
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's integer type differs between libc targets
    Ok(fs.f_type as i64)
}

/// Whether the kernel's mount table of this process (`/proc/self/mountinfo`: read from the kernel, touching no
/// mounted file system) has a hugetlbfs mounted on exactly `dir`, as the topmost mount there.
pub(crate) fn is_hugetlbfs_mount_point(dir: &std::path::Path) -> io::Result<bool> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(hugetlbfs_mount_point_in(&table, dir))
}

/// [`is_hugetlbfs_mount_point`] on the text of a `mountinfo` file: lines of `id parent major:minor root mount-point
/// options [optional fields...] - fstype source super-options`, paths with `\ooo` octal escapes; a later mount on
/// the same point hides the earlier ones.
fn hugetlbfs_mount_point_in(table: &str, dir: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut found = false;
    for line in table.lines() {
        let mut fields = line.split(' ');
        let Some(point) = fields.nth(4) else { continue };
        if unescape_mount_path(point).as_slice() != dir.as_os_str().as_bytes() {
            continue;
        }
        let mut after_separator = fields.skip_while(|f| *f != "-");
        let _separator = after_separator.next();
        found = after_separator.next() == Some("hugetlbfs");
    }
    found
}

/// A `mountinfo` path with its `\ooo` octal escapes (space, tab, newline, backslash) decoded.
fn unescape_mount_path(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && let Some(code) = b.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
        {
            let v = code.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Refuses, before anything is opened in it, a directory that is neither `/dev/shm` (a tmpfs) nor, when
/// `allow_hugetlbfs`, a hugetlbfs mount point: a path on FUSE, NFS or autofs could block its opener for as long as
/// the file system likes, and the opener is often the I/O thread.
fn check_peer_dir(dir: &std::path::Path, allow_hugetlbfs: bool) -> io::Result<()> {
    let refuse = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    if dir == std::path::Path::new(SHM_DIR) {
        let t = fs_type(dir, None)?;
        if t != TMPFS_MAGIC {
            return Err(refuse(format!("{SHM_DIR} is not a tmpfs (file system type 0x{t:x})")));
        }
        return Ok(());
    }
    if !allow_hugetlbfs {
        return Err(refuse(format!("not in {SHM_DIR}")));
    }
    // The mount table names the directory a hugetlbfs mount point, without touching it; statfs confirms that the
    // path reaches that mount.
    if !is_hugetlbfs_mount_point(dir)? || fs_type(dir, None)? != HUGETLBFS_MAGIC {
        return Err(refuse(format!(
            "neither in {SHM_DIR} nor directly in a hugetlbfs mount point ({})",
            dir.display()
        )));
    }
    Ok(())
}

/// Opens a file whose path another process announced (in registration or a segment header) without trusting it:
///
/// - the path must be absolute and plain (no `.` or `..` components), and the file must sit directly in `/dev/shm`
///   (a tmpfs) or, when `allow_hugetlbfs` is set, directly in a hugetlbfs mount point; both are checked before the
///   file is opened (by name, the kernel's mount table and `statfs` of the directory: a path on FUSE, NFS or autofs
///   is never opened, so it cannot block the caller), and the opened file must be on such a file system too;
/// - the last component is never followed if it is a symbolic link (`O_NOFOLLOW`);
/// - opening never blocks (`O_NONBLOCK`: a FIFO named like a segment would otherwise hang the caller);
/// - only a regular file is accepted.
///
/// Returns the file and its size. Errors are `io::Error`s whose message says which check failed.
pub(crate) fn open_peer_file(
    path: &std::path::Path,
    write: bool,
    allow_hugetlbfs: bool,
) -> io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    use std::os::unix::io::AsRawFd;
    use std::path::Component;

    let refuse = |why: &str| io::Error::new(io::ErrorKind::PermissionDenied, why.to_owned());
    let plain = path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    let (Some(dir), Some(_)) = (path.parent().filter(|_| plain), path.file_name()) else {
        return Err(refuse("not a plain absolute path"));
    };
    check_peer_dir(dir, allow_hugetlbfs)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { refuse("a symbolic link") } else { e })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        let what = if meta.file_type().is_fifo() { "a FIFO, not a regular file" } else { "not a regular file" };
        return Err(refuse(what));
    }
    // Checked again on the open file: the directory may have changed since.
    let (want, what) = if dir == std::path::Path::new(SHM_DIR) {
        (TMPFS_MAGIC, "the opened file is not on a tmpfs")
    } else {
        (HUGETLBFS_MAGIC, "the opened file is not on a hugetlbfs mount")
    };
    if fs_type(path, Some(file.as_raw_fd()))? != want {
        return Err(refuse(what));
    }
    Ok((file, meta.len()))
}

/// CPU time (user and system, every thread) this process has used since it started (`getrusage(RUSAGE_SELF)`).
pub(crate) fn process_cpu_time() -> io::Result<std::time::Duration> {
    // SAFETY: rusage is plain old data for which all-zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF exists on every Linux.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64).saturating_mul(1_000_000) + t.tv_usec.max(0) as u64;
    Ok(std::time::Duration::from_micros(us(ru.ru_utime).saturating_add(us(ru.ru_stime))))
}

/// Reads the resident memory of this process (`/proc/self/statm`'s resident pages times the page size) from a file
/// kept open: one `pread` per reading instead of opening, sizing, reading and closing the file each time (the I/O
/// thread reads it every registration refresh).
#[derive(Debug, Default)]
pub(crate) struct RssReader {
    statm: Option<std::fs::File>,
}

impl RssReader {
    /// Resident memory now, bytes.
    pub(crate) fn read(&mut self) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let file = match &mut self.statm {
            Some(f) => f,
            None => self.statm.insert(std::fs::File::open("/proc/self/statm")?),
        };
        // Seven numbers of at most 20 digits each.
        let mut buf = [0u8; 160];
        // A /proc file is made anew when read from its start.
        let n = match file.read_at(&mut buf, 0) {
            Ok(n) => n,
            Err(e) => {
                self.statm = None;
                return Err(e);
            }
        };
        let pages: u64 = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.split_ascii_whitespace().nth(1))
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "/proc/self/statm has no resident field"))?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Ok(pages.saturating_mul(u64::try_from(page).unwrap_or(4096)))
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): what tests measure to tell a thread that
/// waits from one that spins, whatever the machine's load.
#[cfg(test)]
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    // SAFETY: timespec is plain old data for which all-zero is valid.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID): {}", io::Error::last_os_error());
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Modes of the shared-memory files this process creates (`[shoal_security] shm_access`): files others only read
/// (rings), and files others write too (doorbells, eCAL memfiles and events). Owner only until a node sets them.
static SHM_READ_MODE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0o600);
static SHM_WRITE_MODE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0o600);

/// Sets the modes of the shared-memory files this process creates from now on (process-wide, like a umask: every
/// node started applies its configuration's values).
pub(crate) fn set_shm_modes(read: u32, write: u32) {
    SHM_READ_MODE.store(read, std::sync::atomic::Ordering::Relaxed);
    SHM_WRITE_MODE.store(write, std::sync::atomic::Ordering::Relaxed);
}

/// Mode of a shared-memory file other processes only read (ring segments).
pub(crate) fn shm_read_mode() -> u32 {
    SHM_READ_MODE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Mode of a shared-memory file other processes write too (doorbells, eCAL memfiles, locks and events).
pub(crate) fn shm_write_mode() -> u32 {
    SHM_WRITE_MODE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets `SO_RCVBUFFORCE` (`receive`) or `SO_SNDBUFFORCE` on socket `fd` to `bytes`: a buffer above
/// `net.core.{r,w}mem_max`, allowed to processes with `CAP_NET_ADMIN`.
pub(crate) fn force_socket_buffer(fd: std::os::fd::RawFd, receive: bool, bytes: usize) -> io::Result<()> {
    let option = if receive { libc::SO_RCVBUFFORCE } else { libc::SO_SNDBUFFORCE };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: the option value is a c_int read by the kernel from a pointer to a live local of exactly the size
    // passed; a stale or foreign `fd` makes the call fail with EBADF/ENOTSOCK, nothing else.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Reads at most `max` bytes from the socket `fd` (`recv(2)`, no flags) into the spare capacity of `buf`, without
/// zero-filling it first, and extends `buf` by the bytes read. `Ok(0)` means the peer closed the connection (or
/// `max` or the spare capacity is 0); a non-blocking socket without data gives `WouldBlock`.
pub(crate) fn recv_into_spare(fd: std::os::fd::BorrowedFd<'_>, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let spare = buf.spare_capacity_mut();
    let n = spare.len().min(max);
    // SAFETY: `spare` is `n` (or more) writable bytes owned by `buf`; recv writes at most `n` bytes there and
    // returns how many, or -1 and writes nothing.
    let r = unsafe { libc::recv(fd.as_raw_fd(), spare.as_mut_ptr().cast(), n, 0) };
    let Ok(r) = usize::try_from(r) else { return Err(io::Error::last_os_error()) };
    // SAFETY: recv initialised the first `r` (≤ `n` ≤ spare capacity) bytes after `buf.len()`.
    unsafe { buf.set_len(buf.len() + r) };
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::open_peer_file;
    use std::path::Path;

    fn unique(tag: &str) -> String {
        format!("/dev/shm/shoal_systest_{}_{tag}", std::process::id())
    }

    /// The process's figures are its own: memory it touches shows in the RSS, CPU it burns in the CPU time.
    #[test]
    fn process_memory_and_cpu_time_follow_what_the_process_does() {
        // One reader, read twice: the kept-open file gives the figure of now each time.
        let mut rss = super::RssReader::default();
        let rss0 = rss.read().unwrap();
        let block = vec![1u8; 64 << 20];
        let rss1 = rss.read().unwrap();
        assert!(rss1 >= rss0 + (48 << 20), "{rss0} -> {rss1} after touching 64 MiB");
        drop(std::hint::black_box(block));
        let cpu0 = super::process_cpu_time().unwrap();
        let until = super::thread_cpu_time() + std::time::Duration::from_millis(50);
        while super::thread_cpu_time() < until {
            std::hint::black_box(0u64);
        }
        let cpu1 = super::process_cpu_time().unwrap();
        assert!(cpu1 >= cpu0 + std::time::Duration::from_millis(45), "{cpu0:?} -> {cpu1:?} after 50 ms of spinning");
    }

    #[test]
    fn a_regular_file_in_dev_shm_opens() {
        let p = unique("reg");
        std::fs::write(&p, [7u8; 100]).unwrap();
        let (_, size) = open_peer_file(Path::new(&p), false, false).unwrap();
        assert_eq!(size, 100);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let p = unique("fifo");
        let c = std::ffi::CString::new(p.clone()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let err = open_peer_file(Path::new(&p), false, false).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        // Without O_NONBLOCK the open would wait for a writer forever.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn a_symlink_is_refused() {
        let target = unique("target");
        let link = unique("link");
        std::fs::write(&target, [1u8; 8]).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open_peer_file(Path::new(&link), false, false).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_file(&target).unwrap();
    }

    #[test]
    fn paths_outside_dev_shm_are_refused() {
        for p in ["/tmp/shoal_1_2_g0", "/dev/shm/../tmp/x", "relative/shoal_1_2_g0", "/dev/shm/sub/shoal_1_2_g0"] {
            let err = open_peer_file(Path::new(p), false, false).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{p}: {err}");
        }
        // A directory elsewhere is not a hugetlbfs mount either.
        let dir = std::env::temp_dir().join(format!("shoal_systest_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("shoal_1_2_g0");
        std::fs::write(&f, [0u8; 8]).unwrap();
        let err = open_peer_file(&f, false, true).unwrap_err();
        assert!(err.to_string().contains("hugetlbfs"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An inotify watch for opens of files in a directory: what tells a path refused before `open()` from one that
    /// was opened and then refused (on FUSE, NFS or autofs that open could already block).
    struct OpenWatch(std::os::fd::OwnedFd);

    impl OpenWatch {
        fn new(dir: &Path) -> OpenWatch {
            use std::os::fd::FromRawFd;
            use std::os::unix::ffi::OsStrExt;
            // SAFETY: no pointer arguments; the result is checked.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
            // SAFETY: `fd` is a new descriptor nobody else owns.
            let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
            // SAFETY: `c` is a valid NUL-terminated path and `fd` an inotify descriptor.
            let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_OPEN) };
            assert!(wd >= 0, "inotify_add_watch: {}", std::io::Error::last_os_error());
            OpenWatch(owned)
        }

        /// Whether something in the directory was opened since the last call.
        fn opened(&self) -> bool {
            use std::os::fd::AsRawFd;
            let mut buf = [0u8; 4096];
            // SAFETY: `buf` is valid for writes of its length; the descriptor is non-blocking.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            n > 0
        }
    }

    #[test]
    fn a_peer_path_outside_dev_shm_and_hugetlbfs_mount_points_is_refused_without_being_opened() {
        // A directory on another file system (standing in for a FUSE, NFS or autofs path, whose open could block),
        // and a subdirectory of /dev/shm (a tmpfs, but not /dev/shm itself).
        let elsewhere = std::env::temp_dir().join(format!("shoal_systest_noopen_{}", std::process::id()));
        let below = Path::new(&unique("noopen_dir")).to_owned();
        for dir in [&elsewhere, &below] {
            std::fs::create_dir_all(dir).unwrap();
            let f = dir.join("shoal_1_2_g0");
            std::fs::write(&f, [0u8; 8]).unwrap();
            let watch = OpenWatch::new(dir);
            let err = open_peer_file(&f, false, true).unwrap_err();
            assert!(!watch.opened(), "{} was opened before it was refused ({err})", f.display());
            assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{}: {err}", f.display());
            assert!(err.to_string().contains("hugetlbfs mount point"), "{err}");
            // The watch sees an open.
            drop(std::fs::File::open(&f).unwrap());
            assert!(watch.opened(), "the inotify watch missed an open of {}", f.display());
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    /// Unmounts and removes its directory when dropped.
    struct Mount(std::path::PathBuf);

    impl Drop for Mount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_file_directly_in_a_hugetlbfs_mount_point_opens_and_one_below_it_is_refused_without_being_opened() {
        let dir = std::env::temp_dir().join(format!("shoal_systest_huge_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if !root || !std::fs::read_to_string("/proc/filesystems").unwrap_or_default().contains("hugetlbfs") {
            let _ =
                std::io::Write::write_all(&mut std::io::stderr(), b"skipped: needs root and hugetlbfs to mount one\n");
            let _ = std::fs::remove_dir(&dir);
            return;
        }
        let mounted = std::process::Command::new("mount").args(["-t", "hugetlbfs", "none"]).arg(&dir).status();
        let mount = Mount(dir.clone());
        assert!(mounted.is_ok_and(|s| s.success()), "mount -t hugetlbfs none {}", dir.display());
        let f = dir.join("shoal_1_2_g0");
        std::fs::File::create(&f).unwrap();
        let (_, size) = open_peer_file(&f, false, true).expect("a file in a hugetlbfs mount point");
        assert_eq!(size, 0);
        let err = open_peer_file(&f, false, false).unwrap_err();
        assert!(err.to_string().contains("not in /dev/shm"), "{err}");
        // A directory below the mount point (where a symbolic link could lead anywhere) is not one.
        let sub = dir.join("sub");
        std::fs::create_dir(&sub).unwrap();
        let f = sub.join("shoal_1_2_g0");
        std::fs::File::create(&f).unwrap();
        let watch = OpenWatch::new(&sub);
        let err = open_peer_file(&f, false, true).unwrap_err();
        assert!(err.to_string().contains("hugetlbfs mount point"), "{err}");
        assert!(!watch.opened(), "{} was opened before it was refused", f.display());
        drop(mount);
    }

    #[test]
    fn mountinfo_names_hugetlbfs_mount_points_with_escapes_and_the_topmost_mount_wins() {
        use super::hugetlbfs_mount_point_in as huge;
        let table = "22 1 0:20 / /dev/hugepages rw,relatime shared:3 - hugetlbfs hugetlbfs rw,pagesize=2M\n\
                     30 1 0:30 / /mnt/huge\\0401g rw - hugetlbfs none rw\n\
                     31 1 0:31 / /mnt/over rw - hugetlbfs none rw\n\
                     32 31 0:32 / /mnt/over rw shared:9 - fuse.sshfs host: rw\n\
                     33 1 0:33 / /mnt/nfs rw shared:1 master:2 - nfs4 server:/ rw\n\
                     34 1 0:34 / /mnt/under rw - fuse.x x rw\n\
                     35 34 0:35 / /mnt/under rw - hugetlbfs none rw\n";
        assert!(huge(table, Path::new("/dev/hugepages")));
        assert!(huge(table, Path::new("/mnt/huge 1g")));
        assert!(!huge(table, Path::new("/mnt/huge\\0401g")));
        assert!(!huge(table, Path::new("/mnt/over")), "a FUSE mount hides the hugetlbfs below it");
        assert!(huge(table, Path::new("/mnt/under")));
        assert!(!huge(table, Path::new("/mnt/nfs")));
        assert!(!huge(table, Path::new("/dev")));
        assert!(!huge(table, Path::new("/dev/hugepages/sub")));
        assert!(!huge("", Path::new("/dev/hugepages")));
    }
}
