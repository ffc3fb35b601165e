//! `shoal perf --topics N --rss`: N publishers and N subscribers in one process exchange a few
//! messages; then the private memory (VmRSS minus the shared-memory mappings), the peak RSS, the
//! CPU time and the thread count are printed.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use shoal::Node;

use super::args::{PerfArgs, WaitMode};
use super::link::{Receiver, Sender};
use super::shoal_link;
use super::sys::{CpuTime, peak_rss_kb, shm_rss, status_kb, thread_count};

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

    /// The JSON line of the memory mode.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "mode": "rss", "system": "shoal", "topics": self.topics, "publishers": self.topics,
            "subscribers": self.topics, "messages_received": self.received, "vm_rss_kb": self.vm_rss_kb,
            "shm_rss_kb": self.shm_rss_kb, "shm_mappings": self.shm_mappings, "rss_without_shm_kb": self.private_kb(),
            "peak_rss_kb": self.peak_rss_kb, "cpu_user_ms": self.cpu.user_us as f64 / 1000.0,
            "cpu_sys_ms": self.cpu.sys_us as f64 / 1000.0, "threads": self.threads,
        })
    }

    /// The human-readable form.
    pub(crate) fn to_text(&self) -> String {
        let mb = |kb: u64| kb as f64 / 1024.0;
        format!(
            "{t} publishers + {t} subscribers in one process, {r} messages received\n\
             VmRSS                {:>8.1} MB  (peak {:.1} MB)\n\
             shared-memory Rss    {:>8.1} MB  ({} mappings under /dev/shm, memfd, hugetlbfs)\n\
             RSS without shm      {:>8.1} MB\n\
             cpu user/sys         {:>8.0} / {:.0} ms\n\
             threads              {:>8}",
            mb(self.vm_rss_kb),
            mb(self.peak_rss_kb),
            mb(self.shm_rss_kb),
            self.shm_mappings,
            mb(self.private_kb()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_json_and_text() {
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
        let v = r.to_json();
        assert_eq!((v["mode"].as_str(), v["topics"].as_u64()), (Some("rss"), Some(100)));
        assert_eq!(v["rss_without_shm_kb"], 10_000);
        assert_eq!((v["cpu_user_ms"].as_f64(), v["threads"].as_u64()), (Some(12.0), Some(3)));
        let text = r.to_text();
        assert!(text.contains("RSS without shm") && text.contains("9.8 MB"), "{text}");
    }
}
