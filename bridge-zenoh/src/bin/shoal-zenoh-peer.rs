//! `shoal-zenoh-peer`: the shoal side of the Zenoh bridge's tests and measurement. Publishes or checks probes
//! (`shoal_zenoh_bridge::probe`) on a shoal topic; JSON lines on stdout.
//!
//! ```text
//! shoal-zenoh-peer pub --topic T --count N [--size B] [--rate HZ] [--descriptor FILE] [--wait-subscribers K]
//! shoal-zenoh-peer sub --topic T --count N [--size B] [--timeout-ms MS] [--idle-ms MS]
//! shoal-zenoh-peer monitor --topic T --unit U [--duration-ms MS]
//! ```
//!
//! `monitor` reads shoal registration (the node's snapshot, as shoal-monitor does) for `--duration-ms` and prints
//! the largest `message_drops` announced by the publishers and subscribers of topic T in processes of unit U.
//!
//! `pub` announces the probe type (`shoal_zenoh.test.Probe`, encoding proto, the descriptor from FILE), waits until
//! K subscribers are connected, then sends probes 1..=N at HZ (0: as fast as it can). `sub` receives until N probes
//! arrived, or `--idle-ms` passed without one after the first, or the timeout; its summary counts received, intact
//! (right size and pattern) and duplicate probes, names the type the publisher announced, and gives the one-way
//! latency (send time in the probe to arrival, same host) percentiles and the receive rate.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::json;
use shoal::TypeInfo;
use shoal_zenoh_bridge::probe;

#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publish probes 1..=count.
    Pub {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Messages per second; 0: as fast as possible.
        #[arg(long, default_value_t = 100.0)]
        rate: f64,
        /// The announced descriptor (a serialized FileDescriptorSet of probe.proto).
        #[arg(long)]
        descriptor: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        wait_subscribers: usize,
    },
    /// The drops processes of one unit announce on a topic.
    Monitor {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        unit: String,
        #[arg(long, default_value_t = 3000)]
        duration_ms: u64,
    },
    /// Receive and check probes.
    Sub {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        count: u64,
        #[arg(long, default_value_t = 64)]
        size: usize,
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        /// After the first probe, stop when none came for this long.
        #[arg(long, default_value_t = 0)]
        idle_ms: u64,
    },
}

fn emit(v: &serde_json::Value) {
    println!("{v}");
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let node = shoal::Node::init("shoal_zenoh_peer")?;
    match args.cmd {
        Cmd::Pub { topic, count, size, rate, descriptor, wait_subscribers } => {
            let desc = match descriptor {
                Some(p) => std::fs::read(p)?,
                None => Vec::new(),
            };
            let mut publ = node.publisher(&topic).type_info(TypeInfo::new(probe::TYPE, "proto", desc)).create()?;
            emit(&json!({"event": "ready", "id": publ.id()}));
            let deadline = Instant::now() + Duration::from_secs(30);
            while publ.subscriber_count() < wait_subscribers {
                anyhow::ensure!(Instant::now() < deadline, "no {wait_subscribers} subscriber(s) within 30 s");
                std::thread::sleep(Duration::from_millis(10));
            }
            let start = Instant::now();
            for seq in 1..=count {
                if rate > 0.0 {
                    let due = start + Duration::from_secs_f64((seq - 1) as f64 / rate);
                    if let Some(d) = due.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                }
                publ.send(&probe::encode(seq, probe::now_ns(), size))?;
            }
            let secs = start.elapsed().as_secs_f64();
            emit(&json!({"event": "done", "sent": count, "seconds": secs}));
            // Stay a moment so subscribers behind a bridge finish reading the last messages from this process.
            std::thread::sleep(Duration::from_millis(500));
        }
        Cmd::Monitor { topic, unit, duration_ms } => {
            let end = Instant::now() + Duration::from_millis(duration_ms);
            let (mut pub_drops, mut sub_drops, mut seen) = (0i64, 0i64, false);
            while Instant::now() < end {
                for t in node.snapshot().topics.iter().filter(|t| t.topic_name == topic && t.unit_name == unit) {
                    seen = true;
                    let d = i64::from(t.message_drops);
                    match t.direction {
                        shoal::monitor::TopicDirection::Publisher => pub_drops = pub_drops.max(d),
                        shoal::monitor::TopicDirection::Subscriber => sub_drops = sub_drops.max(d),
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            emit(&json!({"event": "monitor", "seen": seen, "publisher_drops": pub_drops,
                         "subscriber_drops": sub_drops}));
        }
        Cmd::Sub { topic, count, size, timeout_ms, idle_ms } => {
            // A deep queue: the measurement sends as fast as it can, and what is measured is the bridges, not this queue.
            let sub = node.subscriber(&topic).queue(shoal::QueuePolicy::new(1 << 20, 4 << 30)).create()?;
            emit(&json!({"event": "ready"}));
            let deadline = Instant::now() + Duration::from_millis(timeout_ms);
            let (mut received, mut intact, mut duplicates) = (0u64, 0u64, 0u64);
            let mut seen = BTreeSet::new();
            let mut lat = Vec::new();
            let mut type_info: Option<TypeInfo> = None;
            let (mut first_at, mut last_at) = (None, Instant::now());
            while seen.len() < usize::try_from(count).unwrap_or(usize::MAX) {
                let now = Instant::now();
                if now >= deadline
                    || (idle_ms > 0 && first_at.is_some() && now - last_at > Duration::from_millis(idle_ms))
                {
                    break;
                }
                let Ok(s) = sub.recv_timeout(Duration::from_millis(50)) else { continue };
                let arrived = probe::now_ns();
                last_at = Instant::now();
                first_at.get_or_insert(last_at);
                received += 1;
                type_info.get_or_insert_with(|| s.type_info().clone());
                if let Some((seq, sent)) = probe::decode(s.payload()) {
                    if !seen.insert(seq) {
                        duplicates += 1;
                    } else if s.payload().len() == size || (size == 148 && s.payload().len() == 147) {
                        intact += 1;
                    }
                    lat.push(arrived.saturating_sub(sent) / 1000);
                }
            }
            lat.sort_unstable();
            let secs = first_at.map_or(0.0, |f: Instant| (last_at - f).as_secs_f64());
            let t = type_info.unwrap_or_default();
            emit(&json!({
                "event": "summary",
                "received": received,
                "intact": intact,
                "duplicates": duplicates,
                "distinct": seen.len(),
                "first": seen.first(),
                "last": seen.last(),
                "type": {"name": t.name, "encoding": t.encoding, "descriptor_hex": hex(&t.descriptor)},
                "latency_us": {"p50": percentile(&lat, 0.5), "p99": percentile(&lat, 0.99), "max": lat.last()},
                "seconds": secs,
                "msgs_per_s": if secs > 0.0 { received as f64 / secs } else { 0.0 },
            }));
        }
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
