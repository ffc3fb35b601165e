//! Small OS helpers: monotonic clock, CPU time, peak RSS, CPU pinning, parent-death signal,
//! and the /proc readers of the memory mode.

use std::fs;
use std::path::PathBuf;

use anyhow::{Context, bail};

pub(crate) use shoal_tools::{mono_ns, thread_cpu_ns};

/// User and system CPU time of this process (all threads), in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTime {
    /// User time, µs.
    pub(crate) user_us: u64,
    /// System time, µs.
    pub(crate) sys_us: u64,
}

impl CpuTime {
    /// getrusage(RUSAGE_SELF).
    pub(crate) fn now() -> CpuTime {
        // SAFETY: an all-zero rusage is a valid value (plain integers and timevals).
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage; RUSAGE_SELF is a valid `who`.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        if rc != 0 {
            return CpuTime::default();
        }
        let us = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
        CpuTime { user_us: us(ru.ru_utime), sys_us: us(ru.ru_stime) }
    }

    /// Both together.
    pub(crate) fn plus(self, other: CpuTime) -> CpuTime {
        CpuTime { user_us: self.user_us + other.user_us, sys_us: self.sys_us + other.sys_us }
    }

    /// The time spent since `earlier`.
    pub(crate) fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
        }
    }
}

/// Reads a `kB` field (e.g. `VmHWM`, `VmRSS`) of /proc/self/status.
pub(crate) fn status_kb(field: &str) -> anyhow::Result<u64> {
    let text = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_status_kb(&text, field).with_context(|| format!("no {field} line in /proc/self/status"))
}

fn parse_status_kb(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// Peak resident set size (VmHWM) of this process in kB, 0 if unreadable.
pub(crate) fn peak_rss_kb() -> u64 {
    status_kb("VmHWM").unwrap_or(0)
}

/// Number of CPUs this process may run on.
pub(crate) fn cpu_count() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Pins the calling thread (and the threads it creates later) to one CPU.
pub(crate) fn pin_to_cpu(cpu: usize) -> anyhow::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        bail!("CPU {cpu} is out of range");
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE` (checked above), so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("sched_setaffinity to CPU {cpu} failed: run without --pin"));
    }
    Ok(())
}

/// The calling thread's CPU affinity, restored on drop (see [`pin_thread_for_scope`]).
pub(crate) struct AffinityGuard {
    saved: libc::cpu_set_t,
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: `saved` is a valid cpu_set_t of the size passed; pid 0 means the calling thread.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.saved) };
        if rc != 0 {
            eprintln!("shoal perf: cannot restore the CPU affinity: {}", std::io::Error::last_os_error());
        }
    }
}

/// Pins the calling thread to `cpu` until the guard is dropped (threads it creates meanwhile keep the pin).
pub(crate) fn pin_thread_for_scope(cpu: usize) -> anyhow::Result<AffinityGuard> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills it.
    let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `saved` is a valid, writable cpu_set_t of the size passed; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("sched_getaffinity");
    }
    pin_to_cpu(cpu)?;
    Ok(AffinityGuard { saved })
}

/// Makes the kernel kill this process when its parent dies, then checks that the parent
/// (`parent_pid`) is still the parent (it may have died before the call).
pub(crate) fn die_with_parent(parent_pid: u32) -> anyhow::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number as its only argument.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("prctl(PR_SET_PDEATHSIG)");
    }
    if std::os::unix::process::parent_id() != parent_pid {
        bail!("the parent process {parent_pid} is gone; the peer exits");
    }
    Ok(())
}

/// Makes every allocation of 128 KiB or more a mapping of its own, for the whole run, in this process and in the
/// peers, for runs over shared memory. glibc raises its mmap threshold to the size of a freed mapped block (up to
/// 32 MiB): the systems measured first got their message buffers freshly mapped and those measured after them got
/// them from the heap, where an 8 MiB ping-pong ran 1.12 ms against 0.97 ms for the same ring with mapped buffers
/// (one run: shoal, measured last, 1.12 ms beside iceoryx2's 0.97 ms; with the threshold fixed 0.97 ms each). Every
/// system now copies from and into buffers of the same kind, whatever ran before it. Over shared memory neither
/// shoal nor the references allocate per message, so only those buffers change. Not over UDP or TCP: there shoal's
/// receive path allocates each large message, and with the threshold fixed each would be a fresh mapping faulted in
/// page by page, which no long-running application sees (1 MiB over UDP lost 93 % of the stream that way).
pub(crate) fn fix_malloc_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of glibc's allocator; it takes any value and allocations made before
    // stay valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// Memory of the shared-memory mappings of this process, from /proc/self/smaps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ShmRss {
    /// Sum of `Rss` of mappings under /dev/shm, memfd or a hugetlbfs mount, kB.
    pub(crate) rss_kb: u64,
    /// Number of such mappings.
    pub(crate) mappings: usize,
}

/// Mount points of hugetlbfs file systems (from /proc/self/mounts).
pub(crate) fn hugetlbfs_mounts() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, dir, ty) = (f.next()?, f.next()?, f.next()?);
            (ty == "hugetlbfs").then(|| PathBuf::from(dir))
        })
        .collect()
}

/// Sums the shared-memory mappings of this process.
pub(crate) fn shm_rss() -> anyhow::Result<ShmRss> {
    let text = fs::read_to_string("/proc/self/smaps").context("reading /proc/self/smaps")?;
    Ok(parse_smaps_shm(&text, &hugetlbfs_mounts()))
}

fn parse_smaps_shm(text: &str, huge_mounts: &[PathBuf]) -> ShmRss {
    let mut out = ShmRss::default();
    let mut counting = false;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        // A mapping header starts with an address range "lo-hi".
        if first.contains('-') && first.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            counting = path.starts_with("/dev/shm/")
                || path.starts_with("/memfd:")
                || huge_mounts.iter().any(|m| std::path::Path::new(path).starts_with(m));
            if counting {
                out.mappings += 1;
            }
        } else if counting && first == "Rss:" {
            out.rss_kb += fields.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    out
}

/// The smallest kernel page size (kB, `KernelPageSize` in `/proc/<pid>/smaps`) of the ring segments process `pid`
/// created and maps (files named `shoal_<pid>_...`, in /dev/shm or on a hugetlbfs mount); `None` when it maps none
/// (or is gone).
pub(crate) fn ring_page_kb(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    parse_ring_page_kb(&text, pid)
}

fn parse_ring_page_kb(text: &str, pid: u32) -> Option<u64> {
    let prefix = format!("shoal_{pid}_");
    let mut ring = false;
    let mut smallest: Option<u64> = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if first.contains('-') && first.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            let path = line.split_whitespace().nth(5).unwrap_or("");
            ring =
                std::path::Path::new(path).file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix));
        } else if ring && first == "KernelPageSize:" {
            if let Some(kb) = fields.next().and_then(|v| v.parse::<u64>().ok()) {
                smallest = Some(smallest.map_or(kb, |s| s.min(kb)));
            }
            ring = false;
        }
    }
    smallest
}

/// Number of threads of this process (/proc/self/task entries).
pub(crate) fn thread_count() -> anyhow::Result<usize> {
    Ok(fs::read_dir("/proc/self/task").context("reading /proc/self/task")?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_field_is_parsed() {
        let t = "Name:\tx\nVmHWM:\t   12345 kB\nVmRSS:\t  999 kB\n";
        assert_eq!(parse_status_kb(t, "VmHWM"), Some(12345));
        assert_eq!(parse_status_kb(t, "VmRSS"), Some(999));
        assert_eq!(parse_status_kb(t, "VmSwap"), None);
        assert!(peak_rss_kb() > 0);
    }

    #[test]
    fn smaps_counts_only_shared_memory_mappings() {
        let t = "\
7f0000000000-7f0000100000 rw-s 00000000 00:1a 42                         /dev/shm/shoal_x
Size:               1024 kB
Rss:                 300 kB
7f0000100000-7f0000200000 r--p 00000000 08:01 7                          /usr/lib/libc.so.6
Rss:                 500 kB
7f0000200000-7f0000400000 rw-s 00000000 00:2b 9                          /dev/hugepages/ring (deleted)
Rss:                2048 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Rss:                  40 kB
";
        let r = parse_smaps_shm(t, &[PathBuf::from("/dev/hugepages")]);
        assert_eq!(r, ShmRss { rss_kb: 2348, mappings: 2 });
        let r = parse_smaps_shm(t, &[]);
        assert_eq!(r, ShmRss { rss_kb: 300, mappings: 1 });
    }

    #[test]
    fn ring_page_size_is_the_smallest_of_the_process_rings() {
        let t = "\
7f0000000000-7f0000400000 rw-s 00000000 00:2b 9                          /mnt/huge/shoal_42_ab1_g0 (deleted)
Size:               4096 kB
KernelPageSize:     2048 kB
7f0000400000-7f0000500000 rw-s 00000000 00:1a 43                         /dev/shm/shoal_db_42_x
KernelPageSize:        4 kB
7f0000500000-7f0000600000 rw-s 00000000 00:1a 44                         /dev/shm/shoal_7_cd2_g0
KernelPageSize:        4 kB
";
        assert_eq!(parse_ring_page_kb(t, 42), Some(2048), "the doorbell and another process's ring do not count");
        assert_eq!(parse_ring_page_kb(t, 7), Some(4));
        assert_eq!(parse_ring_page_kb(t, 8), None);
        let both = format!(
            "{t}7f0000600000-7f0000700000 rw-s 00000000 00:1a 45   /dev/shm/shoal_42_ef3_g1\nKernelPageSize:        4 kB\n"
        );
        assert_eq!(parse_ring_page_kb(&both, 42), Some(4));
    }

    #[test]
    fn clock_and_cpu_time_advance() {
        let a = mono_ns();
        let c0 = CpuTime::now();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(mono_ns() > a);
        let t = thread_cpu_ns();
        std::hint::black_box((0..1_000_000u64).fold(0u64, |x, i| x.wrapping_mul(31).wrapping_add(i)));
        assert!(thread_cpu_ns() > t);
        let d = CpuTime::now().since(c0);
        assert!(d.user_us + d.sys_us > 0);
        assert!(thread_count().unwrap() >= 1);
    }
}
