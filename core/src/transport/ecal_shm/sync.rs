//! eCAL's named synchronisation objects on Linux: a 96-byte POSIX shared-memory file holding a process-shared
//! glibc `pthread_mutex_t`, a `pthread_cond_t` (CLOCK_MONOTONIC) and one flag byte.
//!
//! The same layout serves two purposes (eCAL `ecal_named_mutex_impl.cpp` and `ecal_event.cpp`):
//! - `<memfile>_mtx`, the "flag lock" that guards a memfile: `flag` = locked;
//! - `<memfile>_<pid>_evt` / `<memfile>_<pid>_ack_evt`, auto-reset events: `flag` = set.
//!
//! Files are created under `flock` (eCAL 6.1's `open_or_create_mapped_region`): whoever finds the file empty sizes
//! and initialises it while holding the exclusive lock, and is its creator. The lock is taken without blocking and
//! retried for at most [`FLOCK_TIMEOUT`]: anyone who can open the file can hold it. An operation that opens several
//! files (a publisher's target change: two event files per subscriber process) shares one such wait among them
//! ([`NamedSync::open_or_create_until`]).
//!
//! The inner pthread mutex can be held by anyone who can open the file too (it is not robust, and eCAL's peers
//! lock it with no timeout). A publisher's send, and the I/O thread changing a publisher's targets, wait for inner
//! mutexes at most [`SEND_INNER_WAIT`] in all ([`InnerBudget`]); once that is spent they only try them. They never
//! sleep in `pthread_cond_timedwait` either (it re-acquires the mutex without a timeout): they poll the flag.
//! What they skip is counted ([`inner_lock_skips`], `shoal::shm_inner_lock_skips`); so does a subscriber waking an
//! observer to stop it ([`NamedSync::wake_within`]). Observer threads wait longer ([`INNER_LOCK_TIMEOUT`]) and on the
//! condition.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::MmapOptions;

use crate::sys::shm_guard::PeerMap;

/// Where POSIX shared-memory objects live (`shm_open("/name")` opens `/dev/shm/name` on glibc).
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// The shared object of eCAL's named mutex and named event (`struct alignas(8) { mtx; cvar; uint8_t flag; }`).
#[repr(C, align(8))]
pub(crate) struct SyncObject {
    /// Process-shared, non-robust, default-type mutex guarding `flag`.
    pub(crate) mtx: libc::pthread_mutex_t,
    /// Process-shared condition on CLOCK_MONOTONIC, signalled when `flag` changes.
    pub(crate) cvar: libc::pthread_cond_t,
    /// Mutex: 1 = locked. Event: 1 = set.
    pub(crate) flag: u8,
}

/// Size of the file (and of [`SyncObject`]): 96 bytes on glibc x86_64.
pub(crate) const SYNC_FILE_SIZE: usize = size_of::<SyncObject>();

/// Errors opening a named synchronisation object.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncOpenError {
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
    /// The file exists but is smaller than the object (another layout or a foreign file).
    #[error("{path} has {size} bytes, expected at least {SYNC_FILE_SIZE}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Someone kept the file's creation `flock` for [`FLOCK_TIMEOUT`] (a live creator holds it for microseconds).
    #[error("{path}: its creation lock (flock) stayed held for {waited:?}; the file is given up")]
    LockTimeout {
        /// The file.
        path: PathBuf,
        /// How long we tried.
        waited: Duration,
    },
    /// pthread initialisation failed.
    #[error("{call} failed for {path}: error {code}")]
    Pthread {
        /// The call.
        call: &'static str,
        /// The file.
        path: PathBuf,
        /// The returned error number.
        code: i32,
    },
}

/// An opened (mapped) named synchronisation object.
#[derive(Debug)]
pub(crate) struct NamedSync {
    /// Raw and guarded: eCAL peers lock and signal through it, and any of them could truncate the file (the guard
    /// then leaves zero pages, an unlocked mutex and a flag of 0, private to this process).
    map: PeerMap,
    path: PathBuf,
    /// This handle found the file empty and initialised it.
    created: bool,
    /// Since when the bounded path has found the inner mutex held (reset when it gets it): its owner is checked for
    /// death only after [`INNER_LOCK_TIMEOUT`] of that, as on the unbounded path.
    held_since: std::sync::Mutex<Option<Instant>>,
}

// SAFETY: the mapping is only accessed through the process-shared pthread objects it contains (and the flag, only
// while holding the mutex); those are designed for concurrent use from any thread of any process.
unsafe impl Send for NamedSync {}
// SAFETY: as above; every method takes `&self` and synchronises through the shared mutex.
unsafe impl Sync for NamedSync {}

fn io_err<'a>(call: &'static str, path: &'a std::path::Path) -> impl FnOnce(io::Error) -> SyncOpenError + 'a {
    move |source| SyncOpenError::Io { call, path: path.to_path_buf(), source }
}

/// Longest wait for the creation `flock` of a sync file. Its holders (shoal and eCAL's
/// `open_or_create_mapped_region`) keep it only while they size and initialise the 96-byte object, microseconds; a
/// wait this long means someone else holds it (any local user who can open the file can), and the caller, often the
/// I/O thread or a publisher under its lock, gives the file up instead of waiting forever.
pub(crate) const FLOCK_TIMEOUT: Duration = Duration::from_millis(250);

/// Sync files given up because their creation `flock` stayed held for [`FLOCK_TIMEOUT`] (process-wide).
static FLOCK_TIMEOUTS: AtomicU64 = AtomicU64::new(0);

/// How many times this process gave a sync file up because its creation `flock` stayed held (see
/// [`FLOCK_TIMEOUT`]; `shoal::shm_lock_timeouts`); the callers log each as a warning.
pub(crate) fn flock_timeouts() -> u64 {
    FLOCK_TIMEOUTS.load(Ordering::Relaxed)
}

/// Exclusive `flock` held until dropped.
struct Flock<'a>(&'a File);

impl<'a> Flock<'a> {
    /// Takes the lock without blocking (`LOCK_NB`), retrying with a backoff of 50 µs doubling to 5 ms until
    /// `timeout` has passed.
    fn lock(f: &'a File, path: &std::path::Path, timeout: Duration) -> Result<Self, SyncOpenError> {
        let started = std::time::Instant::now();
        let mut backoff = Duration::from_micros(50);
        loop {
            // SAFETY: flock on a valid, open descriptor owned by `f`.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Flock(f));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) => {}
                _ => return Err(SyncOpenError::Io { call: "flock", path: path.to_path_buf(), source: e }),
            }
            let waited = started.elapsed();
            if waited >= timeout {
                FLOCK_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
                return Err(SyncOpenError::LockTimeout { path: path.to_path_buf(), waited });
            }
            std::thread::sleep(backoff.min(timeout - waited));
            backoff = (backoff * 2).min(Duration::from_millis(5));
        }
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocking a descriptor that is still open (the borrow keeps the File alive).
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Opens `/dev/shm/<name>` read-write, creating it if it does not exist (mode from `[shoal_security] shm_access`;
/// eCAL itself creates 0666); true when created here. An existing file is opened as one another process named:
/// no symlink, no FIFO, a regular file only ([`crate::sys::open_peer_file`]).
pub(crate) fn open_or_create_shm(path: &std::path::Path) -> io::Result<(File, bool)> {
    let mode = crate::sys::shm_write_mode();
    match std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(path) {
        Ok(f) => {
            // Exactly the configured mode, whatever the umask.
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            Ok((f, true))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            Ok((crate::sys::open_peer_file(path, true, false)?.0, false))
        }
        Err(e) => Err(e),
    }
}

/// A CLOCK_MONOTONIC absolute time `d` from now (the clock eCAL's conditions use).
fn monotonic_deadline(d: Duration) -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    add_duration(ts, d)
}

/// A CLOCK_REALTIME absolute time `d` from now (the clock `pthread_mutex_timedlock` uses).
fn realtime_deadline(d: Duration) -> libc::timespec {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    add_duration(ts, d)
}

fn add_duration(mut ts: libc::timespec, d: Duration) -> libc::timespec {
    ts.tv_sec = ts.tv_sec.saturating_add(d.as_secs().min(i64::MAX as u64 / 2) as libc::time_t);
    ts.tv_nsec += libc::c_long::from(d.subsec_nanos());
    if ts.tv_nsec >= 1_000_000_000 {
        ts.tv_nsec -= 1_000_000_000;
        ts.tv_sec = ts.tv_sec.saturating_add(1);
    }
    ts
}

/// The inner pthread mutex is held only for a few instructions by any party; a wait this long means its holder
/// died inside that window (the mutex is not robust). We give up instead of hanging the thread forever.
const INNER_LOCK_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest a publisher's send (or the I/O thread changing a publisher's targets) waits in all for the inner mutexes
/// of eCAL sync objects; after that it only tries them (`pthread_mutex_trylock`). A live holder keeps the mutex for
/// a few instructions; a local user can keep it for ever.
pub(crate) const SEND_INNER_WAIT: Duration = Duration::from_millis(20);

/// Longest pause between two looks at a flag polled on the bounded path.
const POLL_MAX: Duration = Duration::from_millis(1);

/// Inner-mutex acquisitions given up on the bounded path (process-wide).
static INNER_SKIPS: AtomicU64 = AtomicU64::new(0);

/// How many times this process gave up an eCAL sync object's inner mutex on a bounded path (a send, a target
/// change, a subscriber's detach) because someone held it past the [`InnerBudget`]: each skipped a flag lock, an
/// unlock (done by the next send), an event, an acknowledge or a stopping observer's wake-up.
pub(crate) fn inner_lock_skips() -> u64 {
    INNER_SKIPS.load(Ordering::Relaxed)
}

/// What one bounded operation (a send, a target change, a detach) may still wait for inner mutexes: until `until`
/// ([`SEND_INNER_WAIT`] after it began), then nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InnerBudget {
    until: Instant,
}

impl InnerBudget {
    /// A budget of [`SEND_INNER_WAIT`] from now.
    pub(crate) fn start() -> InnerBudget {
        InnerBudget { until: Instant::now() + SEND_INNER_WAIT }
    }
}

/// The outcome of a bounded flag-lock attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagLock {
    /// The flag is ours (set to 1).
    Taken,
    /// Someone held the flag until the deadline.
    Busy,
    /// Someone held the inner mutex past the budget.
    InnerHeld,
}

/// The inner pthread mutex, unlocked on drop.
struct InnerGuard<'a>(&'a NamedSync);

impl Drop for InnerGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: we hold the mutex (the guard exists only after a successful lock); the object is mapped.
        unsafe { libc::pthread_mutex_unlock(&raw mut (*self.0.obj()).mtx) };
    }
}

impl NamedSync {
    /// Opens `/dev/shm/<name>`, creating and initialising it under `flock` when it is new or empty (waiting at
    /// most [`FLOCK_TIMEOUT`] for the `flock`).
    pub(crate) fn open_or_create(name: &str) -> Result<NamedSync, SyncOpenError> {
        NamedSync::open_or_create_until(name, Instant::now() + FLOCK_TIMEOUT)
    }

    /// [`open_or_create`](Self::open_or_create) waiting for the `flock` only until `deadline` (one try once it has
    /// passed): several files opened in one operation share one [`FLOCK_TIMEOUT`].
    pub(crate) fn open_or_create_until(name: &str, deadline: Instant) -> Result<NamedSync, SyncOpenError> {
        let path = PathBuf::from(SHM_DIR).join(name);
        let (file, _) = open_or_create_shm(&path).map_err(io_err("open", &path))?;
        let _flock = Flock::lock(&file, &path, deadline.saturating_duration_since(Instant::now()))?;
        let size = file.metadata().map_err(io_err("fstat", &path))?.len();
        let needs_init = size == 0;
        if needs_init {
            file.set_len(SYNC_FILE_SIZE as u64).map_err(io_err("ftruncate", &path))?;
        } else if size < SYNC_FILE_SIZE as u64 {
            return Err(SyncOpenError::TooSmall { path, size });
        }
        let map = PeerMap::new(MmapOptions::new().len(SYNC_FILE_SIZE).map_raw(&file).map_err(io_err("mmap", &path))?);
        let s = NamedSync { map, path, created: needs_init, held_since: std::sync::Mutex::new(None) };
        if needs_init {
            s.init()?;
        }
        Ok(s)
    }

    fn obj(&self) -> *mut SyncObject {
        self.map.as_mut_ptr().cast::<SyncObject>()
    }

    /// Whether this handle created (initialised) the file.
    pub(crate) fn created(&self) -> bool {
        self.created
    }

    /// `pthread_mutexattr_setpshared(SHARED)`, `pthread_condattr_setpshared(SHARED)` +
    /// `setclock(CLOCK_MONOTONIC)`, `flag = 0`, as eCAL initialises.
    fn init(&self) -> Result<(), SyncOpenError> {
        let o = self.obj();
        let check = |call: &'static str, code: i32| {
            if code == 0 { Ok(()) } else { Err(SyncOpenError::Pthread { call, path: self.path.clone(), code }) }
        };
        // SAFETY: the attribute objects are local and initialised before use and destroyed after; `o` points to
        // a freshly sized, mapped, page-aligned region of SYNC_FILE_SIZE bytes that no other process touches
        // while we hold the exclusive flock (openers wait for it before mapping).
        unsafe {
            let mut ma: libc::pthread_mutexattr_t = std::mem::zeroed();
            check("pthread_mutexattr_init", libc::pthread_mutexattr_init(&mut ma))?;
            let r = libc::pthread_mutexattr_setpshared(&mut ma, libc::PTHREAD_PROCESS_SHARED);
            let r = if r == 0 { libc::pthread_mutex_init(&raw mut (*o).mtx, &ma) } else { r };
            libc::pthread_mutexattr_destroy(&mut ma);
            check("pthread_mutex_init", r)?;
            let mut ca: libc::pthread_condattr_t = std::mem::zeroed();
            check("pthread_condattr_init", libc::pthread_condattr_init(&mut ca))?;
            let mut r = libc::pthread_condattr_setpshared(&mut ca, libc::PTHREAD_PROCESS_SHARED);
            if r == 0 {
                r = libc::pthread_condattr_setclock(&mut ca, libc::CLOCK_MONOTONIC);
            }
            if r == 0 {
                r = libc::pthread_cond_init(&raw mut (*o).cvar, &ca);
            }
            libc::pthread_condattr_destroy(&mut ca);
            check("pthread_cond_init", r)?;
            (&raw mut (*o).flag).write_volatile(0);
        }
        Ok(())
    }

    fn lock_inner(&self) -> Option<InnerGuard<'_>> {
        let timed_lock = || {
            let deadline = realtime_deadline(INNER_LOCK_TIMEOUT);
            // SAFETY: the mutex lives in our mapping and was initialised (process-shared) by the file's creator
            // under flock before anyone could map it.
            unsafe { libc::pthread_mutex_timedlock(&raw mut (*self.obj()).mtx, &deadline) }
        };
        let mut r = timed_lock();
        if r == libc::ETIMEDOUT && self.recover_dead_owner() {
            r = timed_lock();
        }
        if r == 0 {
            Some(InnerGuard(self))
        } else {
            tracing::warn!(
                "{}: inner pthread mutex not available (error {r}); its holder may have died",
                self.path.display()
            );
            None
        }
    }

    /// The inner mutex within `budget`: a timed lock until its end, then a try. `None` (counted) when someone held
    /// it throughout. An owner that died holding it is released once it has been found held for
    /// [`INNER_LOCK_TIMEOUT`] (over several calls), not sooner: a live holder in another pid namespace looks dead.
    fn lock_inner_within(&self, budget: InnerBudget) -> Option<InnerGuard<'_>> {
        let attempt = || {
            let left = budget.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // SAFETY: the mutex lives in our mapping and was initialised (process-shared) by the file's creator
                // under flock before anyone could map it.
                unsafe { libc::pthread_mutex_trylock(&raw mut (*self.obj()).mtx) }
            } else {
                let deadline = realtime_deadline(left);
                // SAFETY: as above.
                unsafe { libc::pthread_mutex_timedlock(&raw mut (*self.obj()).mtx, &deadline) }
            }
        };
        let mut r = attempt();
        if r != 0 {
            let since = *crate::sync::lock(&self.held_since).get_or_insert_with(Instant::now);
            if since.elapsed() >= INNER_LOCK_TIMEOUT && self.recover_dead_owner() {
                r = attempt();
            }
        }
        if r == 0 {
            *crate::sync::lock(&self.held_since) = None;
            return Some(InnerGuard(self));
        }
        INNER_SKIPS.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            "{}: inner pthread mutex held past the send's budget (error {r}); skipped",
            self.path.display()
        );
        None
    }

    /// Bounded flag lock (a publisher's send): polls until the flag is 0 and sets it to 1, until `deadline`; never
    /// waits for the inner mutex beyond `budget`.
    pub(crate) fn lock_flag_within(&self, deadline: Instant, budget: InnerBudget) -> FlagLock {
        match self.poll_flag(0, 1, deadline, budget) {
            Some(true) => FlagLock::Taken,
            Some(false) => FlagLock::Busy,
            None => FlagLock::InnerHeld,
        }
    }

    /// Bounded event wait (a publisher waiting for an acknowledge): `Some(true)` when the event was set by
    /// `deadline` (and is now reset), `Some(false)` when it was not, `None` when the inner mutex stayed held.
    pub(crate) fn wait_within(&self, deadline: Instant, budget: InnerBudget) -> Option<bool> {
        self.poll_flag(1, 0, deadline, budget)
    }

    /// Bounded unlock: false (counted) when the inner mutex stayed held; the flag is then still ours.
    pub(crate) fn unlock_within(&self, budget: InnerBudget) -> bool {
        let Some(g) = self.lock_inner_within(budget) else { return false };
        self.set_flag(&g, 0);
        self.signal(&g);
        true
    }

    /// Bounded event set: false (counted) when the inner mutex stayed held.
    pub(crate) fn set_within(&self, budget: InnerBudget) -> bool {
        let Some(g) = self.lock_inner_within(budget) else { return false };
        self.set_flag(&g, 1);
        self.signal(&g);
        true
    }

    /// Looks at the flag until it is `want` (then sets it to `new`: `Some(true)`) or `deadline` passes
    /// (`Some(false)`), pausing 20 µs doubling to [`POLL_MAX`] between looks; `None` when the inner mutex stayed
    /// held past `budget`.
    fn poll_flag(&self, want: u8, new: u8, deadline: Instant, budget: InnerBudget) -> Option<bool> {
        let mut pause = Duration::from_micros(20);
        loop {
            {
                let g = self.lock_inner_within(budget)?;
                if self.flag(&g) == want {
                    self.set_flag(&g, new);
                    return Some(true);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Some(false);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(POLL_MAX);
        }
    }

    /// The thread id glibc stored as the inner mutex's owner (0: unlocked). glibc's `pthread_mutex_t` on 64-bit
    /// Linux begins `{ int __lock; unsigned __count; int __owner; unsigned __nusers; ... }` (asserted in a test).
    pub(crate) fn owner_tid(&self) -> i32 {
        // SAFETY: the mutex is at least 40 bytes in our mapping; `__owner` is the aligned i32 at offset 8, written
        // by other processes under the mutex, so it is read atomically and only used as a hint.
        unsafe { (*self.obj().cast::<AtomicI32>().add(2)).load(Ordering::Relaxed) }
    }

    /// Releases the inner mutex if its owner thread no longer exists: a process killed between locking and
    /// unlocking it (it is not robust: eCAL initialises it so) would otherwise block every later waiter forever,
    /// including one inside `pthread_cond_timedwait` re-acquiring it. True when it released the mutex.
    ///
    /// The owner is checked with `kill(tid, 0)`: the mutex is eCAL's, whose processes hold no owner lock, so the
    /// thread id glibc stored is all there is. Processes in other pid namespaces that share `/dev/shm` look dead,
    /// so this runs only after the mutex was found held far longer than any live holder keeps it
    /// ([`INNER_LOCK_TIMEOUT`], over one wait or, on the bounded path, several; or an observer that did not stop
    /// when asked).
    pub(crate) fn recover_dead_owner(&self) -> bool {
        let owner = self.owner_tid();
        if owner <= 0 || crate::sys::pid_alive(owner as u32) {
            return false;
        }
        // SAFETY: the lock word is the aligned i32 at offset 0 of the mutex in our mapping; `__owner` at 8 and
        // `__nusers` at 12 are reset as pthread_mutex_unlock would before it releases the lock word.
        let released = unsafe {
            let words = self.obj().cast::<AtomicI32>();
            if (*words.add(2)).compare_exchange(owner, 0, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                return false;
            }
            let nusers = &*words.add(3);
            let _ = nusers.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n > 0).then(|| n - 1));
            let lock = &*words;
            let old = lock.swap(0, Ordering::Release);
            if old == 2 {
                // Waiters sleep on the lock word (shared futex: the mutex is process-shared).
                libc::syscall(libc::SYS_futex, lock.as_ptr(), libc::FUTEX_WAKE, 1);
            }
            old != 0
        };
        if released {
            tracing::warn!(
                "{}: released the inner mutex of thread {owner}, which died holding it",
                self.path.display()
            );
        }
        released
    }

    /// Locks the inner mutex and never unlocks it (tests: a process that dies holding it).
    #[cfg(test)]
    pub(crate) fn lock_inner_and_leak(&self) {
        // SAFETY: the mutex is initialised and in our mapping; leaving it locked is the point of the test.
        unsafe { libc::pthread_mutex_lock(&raw mut (*self.obj()).mtx) };
    }

    fn flag(&self, _g: &InnerGuard<'_>) -> u8 {
        // SAFETY: read while holding the mutex that guards the flag; the pointer is in our mapping.
        unsafe { (&raw const (*self.obj()).flag).read_volatile() }
    }

    fn set_flag(&self, _g: &InnerGuard<'_>, v: u8) {
        // SAFETY: written while holding the mutex that guards the flag; the pointer is in our mapping.
        unsafe { (&raw mut (*self.obj()).flag).write_volatile(v) }
    }

    fn signal(&self, _g: &InnerGuard<'_>) {
        // SAFETY: the condition was initialised by the file's creator; signalling with the mutex held is allowed.
        unsafe { libc::pthread_cond_signal(&raw mut (*self.obj()).cvar) };
    }

    /// Waits on the condition until `deadline` (CLOCK_MONOTONIC); false on timeout or error.
    fn wait_cond(&self, _g: &InnerGuard<'_>, deadline: &libc::timespec) -> bool {
        // SAFETY: we hold the mutex (the guard proves it); the condition uses CLOCK_MONOTONIC as `deadline` does.
        unsafe { libc::pthread_cond_timedwait(&raw mut (*self.obj()).cvar, &raw mut (*self.obj()).mtx, deadline) == 0 }
    }

    /// Waits until the flag is `want` (or `stop` is set, or the timeout passes), then sets it to `new`.
    fn wait_flag_then(&self, want: u8, new: u8, timeout: Duration, stop: Option<&AtomicBool>) -> bool {
        let Some(g) = self.lock_inner() else { return false };
        let deadline = monotonic_deadline(timeout);
        loop {
            // A stopping waiter consumes nothing (a successor may be waiting on the same event already).
            if stop.is_some_and(|s| s.load(Ordering::Acquire)) {
                return false;
            }
            if self.flag(&g) == want {
                self.set_flag(&g, new);
                return true;
            }
            if timeout.is_zero() {
                return false;
            }
            if !self.wait_cond(&g, &deadline) && self.flag(&g) != want {
                return false;
            }
        }
    }

    /// Flag lock (eCAL named mutex): waits up to `timeout` until the flag is 0, then sets it to 1.
    pub(crate) fn lock(&self, timeout: Duration) -> bool {
        self.wait_flag_then(0, 1, timeout, None)
    }

    /// Flag unlock: flag = 0 and signal one waiter.
    pub(crate) fn unlock(&self) {
        if let Some(g) = self.lock_inner() {
            self.set_flag(&g, 0);
            self.signal(&g);
        }
    }

    /// Event set: flag = 1 and signal the waiter.
    pub(crate) fn set(&self) {
        if let Some(g) = self.lock_inner() {
            self.set_flag(&g, 1);
            self.signal(&g);
        }
    }

    /// Event wait (auto-reset): true when the event was set within `timeout` (and is now reset). Returns false
    /// early when `stop` becomes true and [`NamedSync::wake_within`] is called.
    pub(crate) fn wait(&self, timeout: Duration, stop: Option<&AtomicBool>) -> bool {
        self.wait_flag_then(1, 0, timeout, stop)
    }

    /// Wakes every waiter without setting the flag (they re-check their stop flag and keep waiting otherwise),
    /// waiting for the inner mutex within `budget` (a subscriber detaching from an observer): false (counted) when
    /// the inner mutex stayed held, and nobody was woken.
    pub(crate) fn wake_within(&self, budget: InnerBudget) -> bool {
        let Some(_g) = self.lock_inner_within(budget) else { return false };
        // SAFETY: the condition was initialised by the file's creator; broadcasting with the mutex held is allowed.
        unsafe { libc::pthread_cond_broadcast(&raw mut (*self.obj()).cvar) };
        true
    }

    /// Removes the file name (the mapping stays valid until dropped).
    pub(crate) fn unlink(&self) {
        if let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::debug!("cannot remove {}: {e}", self.path.display());
        }
    }
}
