//! `shoal perf --topics N --rss`: N publishers and N subscribers in one process exchange a few
//! messages; then the private memory (VmRSS minus the shared-memory mappings) and the thread
//! count are printed. Target: < 20 MB.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use shoal::Node;

use super::args::{PerfArgs, WaitMode};
use super::link::{Receiver, Sender};
use super::shoal_link;
use super::sys::{shm_rss, status_kb, thread_count};

/// The private-memory target of the memory mode.
pub(crate) const TARGET_KB: u64 = 20 * 1024;

const MESSAGES_PER_TOPIC: u64 = 3;

/// Runs the memory mode.
pub(crate) fn run(args: &PerfArgs, topics: usize) -> anyhow::Result<()> {
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
    let vm_rss = status_kb("VmRSS")?;
    let shm = shm_rss()?;
    let threads = thread_count()?;
    let private = vm_rss.saturating_sub(shm.rss_kb);
    let ok = private < TARGET_KB;
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = json!({
            "mode": "rss", "system": "shoal", "topics": topics, "publishers": pubs.len(), "subscribers": subs.len(),
            "messages_received": received, "vm_rss_kb": vm_rss, "shm_rss_kb": shm.rss_kb, "shm_mappings": shm.mappings,
            "rss_without_shm_kb": private, "threads": threads, "target_kb": TARGET_KB, "within_target": ok,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out, "{topics} publishers + {topics} subscribers in one process, {received} messages received")?;
        writeln!(out, "VmRSS                {:>8.1} MB", vm_rss as f64 / 1024.0)?;
        writeln!(
            out,
            "shared-memory Rss    {:>8.1} MB  ({} mappings under /dev/shm, memfd, hugetlbfs)",
            shm.rss_kb as f64 / 1024.0,
            shm.mappings
        )?;
        writeln!(
            out,
            "RSS without shm      {:>8.1} MB  (target < {} MB: {})",
            private as f64 / 1024.0,
            TARGET_KB / 1024,
            if ok { "ok" } else { "OVER TARGET" }
        )?;
        writeln!(out, "threads              {threads:>8}")?;
    }
    Ok(())
}
