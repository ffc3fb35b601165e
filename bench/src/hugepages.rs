//! Huge pages for target T9 on a host that has none set up: as root, `shoal-bench` reserves more 2 MB pages and
//! mounts a private hugetlbfs under `/tmp` for the T9 run (`shoal perf --huge-pages-path`), and gives both back
//! when it is done, as `scripts/test` does for the tests, so a bench run leaves the machine as it found it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// 2 MB pages reserved for the T9 run: its 64 KiB - 4 MiB streams' rings in both directions, grown generations
/// kept linked, on huge and on normal pages one after the other (enough with room to spare in every run so far).
pub(crate) const T9_PAGES: u64 = 600;

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

/// A private hugetlbfs mount with `added` more pages reserved; unmounted and given back on drop.
#[derive(Debug)]
pub(crate) struct HugePages {
    dir: PathBuf,
    added: u64,
}

impl HugePages {
    /// Reserves `pages` more 2 MB pages and mounts a hugetlbfs under `/tmp`; `Err` says why not (not root, no
    /// hugetlbfs, the kernel gave fewer pages), having undone what it did.
    pub(crate) fn provide(pages: u64) -> Result<HugePages, String> {
        if !is_root() {
            return Err("not root".into());
        }
        let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        if !filesystems.lines().any(|l| l.split_whitespace().last() == Some("hugetlbfs")) {
            return Err("the kernel has no hugetlbfs".into());
        }
        let before = read_u64(NR_HUGEPAGES).ok_or_else(|| format!("cannot read {NR_HUGEPAGES}"))?;
        std::fs::write(NR_HUGEPAGES, (before + pages).to_string()).map_err(|e| format!("{NR_HUGEPAGES}: {e}"))?;
        let after = read_u64(NR_HUGEPAGES).unwrap_or(before);
        // From here on, drop gives back what was added.
        let mut huge = HugePages { dir: PathBuf::new(), added: after.saturating_sub(before) };
        let free = meminfo("HugePages_Free:").unwrap_or(0);
        if huge.added < pages || free < pages {
            return Err(format!("asked for {pages} more 2 MB pages, the kernel gave {}; {free} free", huge.added));
        }
        let dir = std::env::temp_dir().join(format!("shoal-bench-hugepages.{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mounted = Command::new("mount")
            .args(["-t", "hugetlbfs", "-o", "pagesize=2M,mode=1777", "none"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("mount: {e}"))?;
        if !mounted.success() || !is_hugetlbfs(&dir) {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("mount -t hugetlbfs at {} failed", dir.display()));
        }
        huge.dir = dir;
        Ok(huge)
    }

    /// The mount.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many pages were reserved.
    pub(crate) fn added(&self) -> u64 {
        self.added
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let ok = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
            if !ok {
                eprintln!("shoal-bench: warning: cannot unmount {}", self.dir.display());
            }
            let _ = std::fs::remove_dir(&self.dir);
        }
        if self.added > 0 {
            let now = read_u64(NR_HUGEPAGES).unwrap_or(0);
            if std::fs::write(NR_HUGEPAGES, now.saturating_sub(self.added).to_string()).is_err() {
                eprintln!("shoal-bench: warning: cannot give back {} huge pages ({NR_HUGEPAGES} is {now})", self.added);
            }
        }
    }
}

fn is_root() -> bool {
    // The effective uid: the second field of the `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|u| u.split_whitespace().nth(1) == Some("0"))))
        .unwrap_or(false)
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// Whether `dir` is a hugetlbfs mount point (`/proc/self/mounts`).
fn is_hugetlbfs(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts.lines().any(|l| {
        let mut f = l.split_whitespace();
        let (_, at, kind) = (f.next(), f.next(), f.next());
        kind == Some("hugetlbfs") && at.is_some_and(|a| Path::new(a) == dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_figures() {
        assert!(read_u64(NR_HUGEPAGES).is_some() || !Path::new(NR_HUGEPAGES).exists());
        assert!(meminfo("MemTotal:").is_some_and(|kb| kb > 0));
        assert!(!is_hugetlbfs(Path::new("/proc")));
    }
}
