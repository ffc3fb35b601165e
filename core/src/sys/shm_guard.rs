//! Survive a peer truncating a shared file while it is mapped here.
//!
//! A process that can write a shared-memory file (a ring segment, a doorbell, an eCAL memfile or sync file) can
//! `ftruncate` it while this process has it mapped; the next access to a page past the new end raises SIGBUS, which
//! kills the process by default. Sizes are checked with `fstat` before mapping, but that leaves a race, so every
//! mapping of such a file is a [`PeerMap`]: it registers its address range in a fixed, process-wide table, and a
//! SIGBUS handler (installed once, chaining to whatever handler was there before) looks the fault address up in it.
//! When it lies inside a registered mapping, the handler maps anonymous zero pages over the whole mapping
//! (`mmap(MAP_FIXED | MAP_ANONYMOUS)`), flags it as truncated and returns, so the faulting access is retried on zero
//! memory. The owner sees [`PeerMap::truncated`], drops what it read and detaches. Faults anywhere else go to the
//! previous handler (Rust's own stack-overflow handler, or the default action, which ends the process).
//!
//! The table is lock-free: registering claims a free entry with a compare-and-swap, and the handler only loads
//! atomics and calls `mmap`, which is a plain system call on Linux (libwayland-server does the same in its wl_shm
//! SIGBUS handler).
#![allow(unsafe_code)]

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use memmap2::MmapRaw;

/// Entries of the process-wide table; a mapping made when it is full is not guarded (warned about, counted).
const SLOTS: usize = 4096;

/// Entry states (low two bits of `Entry::state`; the bits above count reuses, so a stale read is detected).
const FREE: u64 = 0;
const BUSY: u64 = 1;
const ACTIVE: u64 = 2;
const STATE_MASK: u64 = 3;
const GEN_STEP: u64 = 4;

struct Entry {
    state: AtomicU64,
    start: AtomicUsize,
    len: AtomicUsize,
    /// Set by the handler once it replaced the mapping with zero pages.
    truncated: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the initialiser of a static array, each element its own atomic
const EMPTY: Entry = Entry {
    state: AtomicU64::new(FREE),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    truncated: AtomicBool::new(false),
};

static TABLE: [Entry; SLOTS] = [EMPTY; SLOTS];
/// Where the next free entry is looked for first.
static HINT: AtomicUsize = AtomicUsize::new(0);
/// Mappings replaced by zero pages since the process started.
static TRUNCATIONS: AtomicU64 = AtomicU64::new(0);
/// Mappings left unguarded because the table was full.
static UNGUARDED: AtomicU64 = AtomicU64::new(0);

static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The handler that was installed before ours; valid once `PREVIOUS_READY` is set.
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static PREVIOUS_READY: AtomicBool = AtomicBool::new(false);

/// Mappings of peer files that were truncated under this process and replaced by zero pages (process-wide).
pub(crate) fn truncations() -> u64 {
    TRUNCATIONS.load(Ordering::Relaxed)
}

/// Whether the SIGBUS handler is installed (it is, once the first [`PeerMap`] was made, unless `sigaction` failed).
#[cfg(test)]
fn installed() -> bool {
    INSTALLED.load(Ordering::Acquire)
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction is plain data; all-zero is a valid value to fill in.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_sigbus;
        action.sa_sigaction = handler as libc::sighandler_t;
        // SA_ONSTACK: run on the alternate stack when the thread has one (Rust's threads do). SA_NODEFER is not
        // set: a second SIGBUS inside the handler would be a bug, and then the default action is right.
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: `action.sa_mask` is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: all-zero is a valid sigaction for the old value to be written into.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid sigaction structs; the handler is an extern "C" fn of the SA_SIGINFO
        // signature.
        let rc = unsafe { libc::sigaction(libc::SIGBUS, &action, &mut old) };
        if rc != 0 {
            tracing::warn!(
                "shm guard: cannot install the SIGBUS handler ({}); a peer truncating a shared file will crash this \
                 process",
                std::io::Error::last_os_error()
            );
            return;
        }
        // SAFETY: written once here, before PREVIOUS_READY is set with Release; the handler reads it only after
        // loading PREVIOUS_READY with Acquire, and nothing writes it again.
        unsafe { (*std::ptr::addr_of_mut!(PREVIOUS)).write(old) };
        PREVIOUS_READY.store(true, Ordering::Release);
        INSTALLED.store(true, Ordering::Release);
    });
}

/// The entry whose registered range holds `addr`, with the state word it was read under.
fn find(addr: usize) -> Option<(&'static Entry, u64)> {
    for e in &TABLE {
        let s = e.state.load(Ordering::Acquire);
        if s & STATE_MASK != ACTIVE {
            continue;
        }
        let (start, len) = (e.start.load(Ordering::Relaxed), e.len.load(Ordering::Relaxed));
        if e.state.load(Ordering::Acquire) != s {
            continue;
        }
        if addr >= start && addr - start < len {
            return Some((e, s));
        }
    }
    None
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // Only async-signal-safe work here: atomics, mmap, sigaction, raise. errno is restored for the interrupted code.
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let addr = if info.is_null() { 0 } else { (unsafe { (*info).si_addr() }) as usize };
    if addr != 0
        && let Some((entry, state)) = find(addr)
    {
        let (start, len) = (entry.start.load(Ordering::Relaxed), entry.len.load(Ordering::Relaxed));
        // SAFETY: [start, start + len) is a live mapping owned by the PeerMap registered under `state` (a PeerMap
        // unregisters before it unmaps, and the fault came from an access to it); replacing it with private zero
        // pages of the same size keeps every pointer into it valid.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED && entry.state.load(Ordering::Acquire) == state {
            entry.truncated.store(true, Ordering::Release);
            TRUNCATIONS.fetch_add(1, Ordering::Relaxed);
            // SAFETY: restoring this thread's errno.
            unsafe { *libc::__errno_location() = errno };
            return;
        }
    }
    chain(sig, info, ctx);
    // SAFETY: restoring this thread's errno.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands a SIGBUS that is not ours to the previous handler, or to the default action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if PREVIOUS_READY.load(Ordering::Acquire) {
        // SAFETY: PREVIOUS was written before PREVIOUS_READY was set (Release/Acquire) and is never written again.
        let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref() };
        let handler = prev.sa_sigaction;
        if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the handler takes only the signal number.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
            return;
        }
    }
    // Default action: restore it and return; a hardware fault repeats at once and ends the process with SIGBUS, a
    // signal sent by kill() is raised again.
    // SAFETY: all-zero is a valid sigaction; SIG_DFL (0) with an empty mask.
    let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
    dfl.sa_sigaction = libc::SIG_DFL;
    // SAFETY: valid sigaction; sigaction is async-signal-safe.
    unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let user_sent = !info.is_null() && unsafe { (*info).si_code } <= 0;
    if user_sent {
        // SAFETY: raise is async-signal-safe.
        unsafe { libc::raise(sig) };
    }
}

/// A shared mapping of a file that another process can write (and so truncate), registered with the SIGBUS guard
/// for its whole life. Accessed only through raw pointers ([`as_ptr`](Self::as_ptr),
/// [`as_mut_ptr`](Self::as_mut_ptr)) and atomics made from them: never through `&[u8]`.
#[derive(Debug)]
pub(crate) struct PeerMap {
    /// Index into the table and the state word of our registration; `None` when the table was full.
    slot: Option<(usize, u64)>,
    // Dropped after `Drop::drop` unregistered the range, so the handler never maps over memory no longer ours.
    map: MmapRaw,
}

// SAFETY: the mapping is memory shared with other processes anyway; PeerMap hands out raw pointers only, and every
// user synchronises through atomics or locks in that memory.
unsafe impl Send for PeerMap {}
// SAFETY: as for Send; `&PeerMap` gives nothing but raw pointers and atomic loads.
unsafe impl Sync for PeerMap {}

impl PeerMap {
    /// Registers `map` with the guard (installing the SIGBUS handler on first use).
    pub(crate) fn new(map: MmapRaw) -> PeerMap {
        install();
        let (start, len) = (map.as_ptr() as usize, map.len());
        let slot = if len == 0 { None } else { register(start, len) };
        if slot.is_none() && len != 0 {
            let n = UNGUARDED.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    "shm guard: {SLOTS} shared mappings registered; {n} more are not guarded against truncation"
                );
            }
        }
        PeerMap { slot, map }
    }

    /// Start of the mapping.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    /// Start of the mapping, for writing (only where the file was mapped writable).
    #[inline]
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Length of the mapping.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the file was truncated under the mapping and the guard replaced it with zero pages: what was read
    /// from it since is not the peer's data. One atomic load.
    #[inline]
    pub(crate) fn truncated(&self) -> bool {
        self.slot.is_some_and(|(i, _)| TABLE[i].truncated.load(Ordering::Acquire))
    }
}

fn register(start: usize, len: usize) -> Option<(usize, u64)> {
    let hint = HINT.load(Ordering::Relaxed);
    for k in 0..SLOTS {
        let i = (hint + k) % SLOTS;
        let e = &TABLE[i];
        let s = e.state.load(Ordering::Relaxed);
        if s & STATE_MASK != FREE {
            continue;
        }
        let busy = ((s & !STATE_MASK).wrapping_add(GEN_STEP)) | BUSY;
        if e.state.compare_exchange(s, busy, Ordering::Acquire, Ordering::Relaxed).is_err() {
            continue;
        }
        e.start.store(start, Ordering::Relaxed);
        e.len.store(len, Ordering::Relaxed);
        e.truncated.store(false, Ordering::Relaxed);
        let active = (busy & !STATE_MASK) | ACTIVE;
        e.state.store(active, Ordering::Release);
        HINT.store(i + 1, Ordering::Relaxed);
        return Some((i, active));
    }
    None
}

impl Drop for PeerMap {
    fn drop(&mut self) {
        if let Some((i, active)) = self.slot {
            let e = &TABLE[i];
            // Out of the table before `map` is unmapped (field drop after this): the handler never maps over a range
            // that may be reused.
            let _ =
                e.state.compare_exchange(active, (active & !STATE_MASK) | FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
#[allow(clippy::print_stdout)] // the child processes report to the parent test on stdout
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;

    /// Set in the child process the guard tests start (the test binary itself, running one test).
    const CHILD_ENV: &str = "SHOAL_SHM_GUARD_CHILD";

    fn temp_file(tag: &str, len: usize) -> (std::path::PathBuf, std::fs::File) {
        let path = std::path::PathBuf::from(format!("/dev/shm/shoal_guardtest_{}_{tag}", std::process::id()));
        let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        f.write_all(&vec![0xabu8; len]).unwrap();
        (path, f)
    }

    /// Runs the test `name` of this binary in a child process with CHILD_ENV set; returns its status and stdout.
    fn run_child(name: &str) -> (std::process::ExitStatus, String) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        (out.status, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The child's body: map a file, truncate it to 0, read it through the guard.
    fn truncated_read() {
        let (path, f) = temp_file("trunc", 3 * 4096);
        let map = memmap2::MmapOptions::new().len(3 * 4096).map_raw(&f).unwrap();
        let m = PeerMap::new(map);
        // SAFETY: inside the 3-page mapping.
        let before = unsafe { m.as_ptr().add(4096).read_volatile() };
        assert_eq!(before, 0xab);
        assert!(!m.truncated());
        f.set_len(0).unwrap();
        // SAFETY: inside the mapping; the page is gone from the file, so this faults and the guard zero-fills.
        let after = unsafe { m.as_ptr().add(2 * 4096 + 17).read_volatile() };
        assert_eq!(after, 0, "zero pages replace the truncated mapping");
        assert!(m.truncated());
        assert_eq!(truncations(), 1);
        // Writes land in the zero pages too, and atomics work on them.
        // SAFETY: inside the mapping, 8-aligned.
        let word = unsafe { &*m.as_mut_ptr().cast::<AtomicU64>() };
        word.store(5, Ordering::SeqCst);
        assert_eq!(word.load(Ordering::SeqCst), 5);
        drop(m);
        std::fs::remove_file(path).unwrap();
        println!("GUARD-CHILD-OK");
    }

    #[test]
    fn child_truncated_read() {
        if std::env::var_os(CHILD_ENV).is_some() {
            truncated_read();
        }
    }

    #[test]
    fn a_truncated_mapping_reads_zeros_and_is_flagged() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let (status, out) = run_child("sys::shm_guard::tests::child_truncated_read");
        assert!(status.success(), "child died: {status:?} (signal {:?})\n{out}", status.signal());
        assert!(out.contains("GUARD-CHILD-OK"), "{out}");
    }

    /// The child's body: a fault outside every registered mapping still ends the process with SIGBUS.
    fn unregistered_fault() {
        let (path, f) = temp_file("unreg", 2 * 4096);
        let guarded = PeerMap::new(memmap2::MmapOptions::new().len(4096).map_raw(&f).unwrap());
        let plain = memmap2::MmapOptions::new().len(2 * 4096).map_raw(&f).unwrap();
        f.set_len(0).unwrap();
        std::fs::remove_file(path).unwrap();
        println!("GUARD-CHILD-FAULTING");
        // SAFETY: deliberately faulting: the mapping is not registered, so the previous handler (default) ends us.
        let v = unsafe { plain.as_ptr().add(4096).read_volatile() };
        println!("GUARD-CHILD-SURVIVED {v} {}", guarded.truncated());
    }

    #[test]
    fn child_unregistered_fault() {
        if std::env::var_os(CHILD_ENV).is_some() {
            unregistered_fault();
        }
    }

    #[test]
    fn a_fault_outside_registered_mappings_still_kills() {
        if std::env::var_os(CHILD_ENV).is_some() {
            return;
        }
        let (status, out) = run_child("sys::shm_guard::tests::child_unregistered_fault");
        assert!(out.contains("GUARD-CHILD-FAULTING"), "{out}");
        assert!(!out.contains("GUARD-CHILD-SURVIVED"), "{out}");
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}\n{out}");
    }

    #[test]
    fn registration_frees_its_entry() {
        let (path, f) = temp_file("reg", 4096);
        let m = PeerMap::new(memmap2::MmapOptions::new().len(4096).map_raw(&f).unwrap());
        let addr = m.as_ptr() as usize;
        let (entry, state) = find(addr + 100).expect("registered");
        // (Other tests of this process register mappings too, one may sit right after this one: the entry found
        // past the end, or at the address once freed, must not be this registration.)
        let ours =
            |found: Option<(&'static Entry, u64)>| found.is_some_and(|(e, s)| std::ptr::eq(e, entry) && s == state);
        assert!(!ours(find(addr + 4096)), "the entry covers its 4096 bytes only");
        drop(m);
        assert!(!ours(find(addr + 100)), "dropping the mapping frees its entry");
        assert!(installed());
        std::fs::remove_file(path).unwrap();
    }
}
