//! `shoal perf --topics N --rss`: N publishers and N subscribers in one process exchange a few
//! messages; then the private memory (VmRSS minus the shared-memory mappings), the peak RSS, the
//! CPU time and the thread count are printed. Target (T6): < 20 MB without the mappings.
//! `--targets` runs this mode in a child process of its own and reads its JSON line.

use std::io::Write;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use shoal::Node;

use super::args::{PerfArgs, WaitMode};
use super::link::{Receiver, Sender};
use super::shoal_link;
use super::sys::{CpuTime, peak_rss_kb, shm_rss, status_kb, thread_count};

/// The private-memory target of the memory mode.
pub(crate) const TARGET_KB: u64 = 20 * 1024;

const MESSAGES_PER_TOPIC: u64 = 3;

/// The memory of a process with `topics` publishers and subscribers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RssReport {
    /// Topics (one publisher and one subscriber each).
    pub(crate) topics: usize,
    /// Messages received over all topics.
    pub(crate) received: u64,
    /// VmRSS, kB.
    pub(crate) vm_rss_kb: u64,
    /// Rss of the shared-memory mappings, kB.
    pub(crate) shm_rss_kb: u64,
    /// Number of shared-memory mappings.
    pub(crate) shm_mappings: usize,
    /// Peak RSS (VmHWM), kB.
    pub(crate) peak_rss_kb: u64,
    /// CPU time of the whole process.
    pub(crate) cpu: CpuTime,
    /// Threads of the process.
    pub(crate) threads: usize,
}

impl RssReport {
    /// VmRSS without the shared-memory mappings, kB.
    pub(crate) fn private_kb(&self) -> u64 {
        self.vm_rss_kb.saturating_sub(self.shm_rss_kb)
    }

    /// Whether the private memory is within [`TARGET_KB`].
    pub(crate) fn within_target(&self) -> bool {
        self.private_kb() < TARGET_KB
    }

    /// The JSON line of the memory mode.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "mode": "rss", "system": "shoal", "topics": self.topics, "publishers": self.topics,
            "subscribers": self.topics, "messages_received": self.received, "vm_rss_kb": self.vm_rss_kb,
            "shm_rss_kb": self.shm_rss_kb, "shm_mappings": self.shm_mappings, "rss_without_shm_kb": self.private_kb(),
            "peak_rss_kb": self.peak_rss_kb, "cpu_user_ms": self.cpu.user_us as f64 / 1000.0,
            "cpu_sys_ms": self.cpu.sys_us as f64 / 1000.0, "threads": self.threads, "target_kb": TARGET_KB,
            "within_target": self.within_target(),
        })
    }

    /// Parses [`RssReport::to_json`].
    pub(crate) fn from_json(v: &Value) -> Option<RssReport> {
        let u = |k: &str| v.get(k)?.as_u64();
        let ms = |k: &str| v.get(k)?.as_f64().map(|x| (x * 1000.0).round() as u64);
        Some(RssReport {
            topics: usize::try_from(u("topics")?).ok()?,
            received: u("messages_received")?,
            vm_rss_kb: u("vm_rss_kb")?,
            shm_rss_kb: u("shm_rss_kb")?,
            shm_mappings: usize::try_from(u("shm_mappings")?).ok()?,
            peak_rss_kb: u("peak_rss_kb")?,
            cpu: CpuTime { user_us: ms("cpu_user_ms")?, sys_us: ms("cpu_sys_ms")? },
            threads: usize::try_from(u("threads")?).ok()?,
        })
    }

    /// The human-readable form.
    pub(crate) fn to_text(&self) -> String {
        let mb = |kb: u64| kb as f64 / 1024.0;
        format!(
            "{t} publishers + {t} subscribers in one process, {r} messages received\n\
             VmRSS                {:>8.1} MB  (peak {:.1} MB)\n\
             shared-memory Rss    {:>8.1} MB  ({} mappings under /dev/shm, memfd, hugetlbfs)\n\
             RSS without shm      {:>8.1} MB  (target < {} MB: {})\n\
             cpu user/sys         {:>8.0} / {:.0} ms\n\
             threads              {:>8}",
            mb(self.vm_rss_kb),
            mb(self.peak_rss_kb),
            mb(self.shm_rss_kb),
            self.shm_mappings,
            mb(self.private_kb()),
            TARGET_KB / 1024,
            if self.within_target() { "ok" } else { "OVER TARGET" },
            self.cpu.user_us as f64 / 1000.0,
            self.cpu.sys_us as f64 / 1000.0,
            self.threads,
            t = self.topics,
            r = self.received,
        )
    }
}

/// Runs the memory mode in this process and prints its result.
pub(crate) fn run(args: &PerfArgs, topics: usize) -> anyhow::Result<()> {
    let r = measure(topics)?;
    let text = if args.json { r.to_json().to_string() } else { r.to_text() };
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// Creates `topics` publishers and subscribers in this process, exchanges a few messages on each
/// and measures the memory.
pub(crate) fn measure(topics: usize) -> anyhow::Result<RssReport> {
    let node = Node::init("shoal-perf-rss").context("starting the shoal node")?;
    let pid = std::process::id();
    let mut pubs = Vec::with_capacity(topics);
    let mut subs = Vec::with_capacity(topics);
    for i in 0..topics {
        let topic = format!("shoal_perf_{pid}_rss_{i}");
        subs.push(shoal_link::subscriber(&node, &topic, WaitMode::Block)?);
        pubs.push(shoal_link::publisher(&node, &topic)?);
    }
    for p in &pubs {
        shoal_link::wait_subscribers(p, 1)?;
    }
    let payload = [0x5au8; 256];
    for p in &mut pubs {
        for _ in 0..MESSAGES_PER_TOPIC {
            p.send_copy(&payload)?;
        }
    }
    let mut received = 0u64;
    let mut buf = Vec::new();
    for s in &mut subs {
        for _ in 0..MESSAGES_PER_TOPIC {
            s.recv_copy(&mut buf, Duration::from_secs(5))
                .with_context(|| format!("topic {} delivered fewer than {MESSAGES_PER_TOPIC} messages", s.0.topic()))?;
            received += 1;
        }
    }
    let vm_rss_kb = status_kb("VmRSS")?;
    let shm = shm_rss()?;
    Ok(RssReport {
        topics,
        received,
        vm_rss_kb,
        shm_rss_kb: shm.rss_kb,
        shm_mappings: shm.mappings,
        peak_rss_kb: peak_rss_kb(),
        cpu: CpuTime::now(),
        threads: thread_count()?,
    })
}

/// Runs the memory mode in a child process (`shoal perf --topics N --rss --json`), so that
/// the figures are those of a process that does nothing else.
pub(crate) fn measure_in_child(topics: usize) -> anyhow::Result<RssReport> {
    let exe = std::env::current_exe().context("cannot find this executable to spawn the memory probe")?;
    let out = Command::new(exe)
        .args(["perf", "--topics", &topics.to_string(), "--rss", "--json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running the memory probe process")?;
    if !out.status.success() {
        bail!("the memory probe (shoal perf --topics {topics} --rss) failed with {}; its error is above", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("");
    let v: Value = serde_json::from_str(line).with_context(|| format!("bad memory probe output {line:?}"))?;
    RssReport::from_json(&v).with_context(|| format!("incomplete memory probe output {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_json_round_trip_and_text() {
        let r = RssReport {
            topics: 100,
            received: 300,
            vm_rss_kb: 30_000,
            shm_rss_kb: 20_000,
            shm_mappings: 201,
            peak_rss_kb: 31_000,
            cpu: CpuTime { user_us: 12_000, sys_us: 34_000 },
            threads: 3,
        };
        assert!(r.within_target());
        assert_eq!(RssReport::from_json(&r.to_json()), Some(r.clone()));
        assert!(r.to_text().contains("RSS without shm") && r.to_text().contains("ok"));
        let over = RssReport { vm_rss_kb: r.shm_rss_kb + TARGET_KB, ..r };
        assert!(!over.within_target());
        assert!(over.to_text().contains("OVER TARGET"));
    }
}
