//! `shoal-snapshot`: prints what a shoal node learns through registration, as JSON lines.
//!
//! Used by the eCAL interop tests (`tools/tests/ecal_interop.rs`) and handy by hand. It starts a node, optionally
//! creates a publisher and/or a subscriber with the given type information (a publisher only registers, it sends
//! nothing), waits `--wait-ms`, then prints one `{"event":"snapshot",...}` line every `--interval-ms` until
//! `--duration-ms` has passed (at least one line), and exits cleanly (sending its unregistration). SIGTERM and SIGINT
//! end it early, also cleanly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use serde_json::{Value, json};
use shoal::monitor::{Snapshot, TopicDirection};
use shoal_tools::{emit, fnv1a64};

#[derive(Parser, Debug)]
#[command(name = "shoal-snapshot", about = "Print shoal's registration snapshot as JSON lines")]
struct Cli {
    /// Wait this long before the first snapshot, in ms.
    #[arg(long, default_value_t = 1500)]
    wait_ms: u64,
    /// Keep printing snapshots for this long after the first one, in ms (0: print one).
    #[arg(long, default_value_t = 0)]
    duration_ms: u64,
    /// Time between snapshots, in ms.
    #[arg(long, default_value_t = 250)]
    interval_ms: u64,
    /// List only topics whose name contains this.
    #[arg(long, default_value = "")]
    topic_contains: String,
    /// Create a publisher on this topic (registers only).
    #[arg(long)]
    publish: Option<String>,
    /// Create a subscriber on this topic.
    #[arg(long)]
    subscribe: Option<String>,
    /// Type name announced by the publisher/subscriber.
    #[arg(long, default_value = "")]
    type_name: String,
    /// Encoding announced by the publisher/subscriber.
    #[arg(long, default_value = "")]
    encoding: String,
    /// Type descriptor bytes announced by the publisher/subscriber, hex.
    #[arg(long, default_value = "", conflicts_with = "descriptor_file")]
    descriptor_hex: String,
    /// Type descriptor bytes announced by the publisher/subscriber, read from this file.
    #[arg(long)]
    descriptor_file: Option<std::path::PathBuf>,
    /// Node (eCAL unit) name.
    #[arg(long, default_value = "shoal-snapshot")]
    unit: String,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to an atomic, which is
        // async-signal-safe; `signal` has no other preconditions.
        unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Descriptors longer than this are printed as length and digest only.
const DESCRIPTOR_HEX_MAX: usize = 1024;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    anyhow::ensure!(s.len().is_multiple_of(2), "hex string of odd length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).context("hex string is not ASCII")?, 16).context("not hex"))
        .collect()
}

fn datatype_json(t: &shoal::TypeInfo) -> Value {
    let mut v = json!({
        "name": t.name,
        "encoding": t.encoding,
        "descriptor_len": t.descriptor.len(),
        "descriptor_digest": format!("{:016x}", fnv1a64(&t.descriptor)),
    });
    if t.descriptor.len() <= DESCRIPTOR_HEX_MAX {
        v["descriptor_hex"] = Value::String(hex(&t.descriptor));
    }
    v
}

fn snapshot_json(s: &Snapshot, filter: &str, t: f64, host: &str) -> Value {
    let processes: Vec<Value> = s
        .processes
        .iter()
        .map(|p| {
            json!({
                "pid": p.pid, "host_name": p.host_name, "unit_name": p.unit_name,
                "process_name": p.process_name, "runtime_version": p.runtime_version, "is_self": p.is_self,
                "state": p.state.to_string(), "state_severity": p.state.severity.to_wire(),
                "state_severity_level": p.state.level.to_wire(), "state_info": p.state.info,
            })
        })
        .collect();
    let topics: Vec<Value> = s
        .topics
        .iter()
        .filter(|t| t.topic_name.contains(filter))
        .map(|t| {
            json!({
                "topic_name": t.topic_name,
                "direction": match t.direction {
                    TopicDirection::Publisher => "publisher",
                    TopicDirection::Subscriber => "subscriber",
                },
                "entity_id": t.entity_id,
                "pid": t.pid,
                "host_name": t.host_name,
                "unit_name": t.unit_name,
                "process_name": t.process_name,
                "datatype": datatype_json(&t.type_info),
                "layers": t.layers,
                "data_clock": t.data_clock,
                "data_frequency_mhz": t.data_frequency_mhz,
                "message_drops": t.message_drops,
                "connections_local": t.connections_local,
                "connections_external": t.connections_external,
                "topic_size": t.topic_size,
                "latency_count": t.latency.count,
                "latency_mean_us": t.latency.mean_us,
                "connections": t.shoal.as_ref().map(|s| s.connections.iter().map(|c| json!({
                    "publisher_id": c.publisher_id.to_string(), "via": c.via.name(), "same_host": c.same_host,
                    "messages": c.messages, "drops": c.drops, "rate_hz": c.rate_hz(),
                    "latency_count": c.latency.count(), "latency_p50_ns": c.latency.percentile(0.5),
                })).collect::<Vec<_>>()),
            })
        })
        .collect();
    json!({
        "event": "snapshot", "t": t, "self_pid": std::process::id(), "host_name": host,
        "processes": processes, "topics": topics,
    })
}

/// Sleeps up to `d`; false when a stop signal arrived.
fn sleep_unless_stopped(d: Duration) -> bool {
    let end = Instant::now() + d;
    while !STOP.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
    false
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    install_signal_handlers();
    let descriptor = match &cli.descriptor_file {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        None => unhex(&cli.descriptor_hex).context("--descriptor-hex")?,
    };
    let type_info = shoal::TypeInfo::new(cli.type_name.clone(), cli.encoding.clone(), descriptor);
    let node = shoal::Node::init(&cli.unit).context("starting the shoal node")?;
    let publisher = match &cli.publish {
        Some(t) => Some(node.publisher(t).type_info(type_info.clone()).create().context("creating the publisher")?),
        None => None,
    };
    let subscriber = match &cli.subscribe {
        Some(t) => Some(node.subscriber(t).type_info(type_info.clone()).create().context("creating the subscriber")?),
        None => None,
    };
    emit(&json!({
        "event": "ready", "pid": std::process::id(), "host_name": node.host_name(),
        "publisher_id": publisher.as_ref().map(|p| p.id()),
    }));
    let start = Instant::now();
    if sleep_unless_stopped(Duration::from_millis(cli.wait_ms)) {
        let first = Instant::now();
        loop {
            let snap = node.snapshot();
            emit(&snapshot_json(&snap, &cli.topic_contains, start.elapsed().as_secs_f64(), node.host_name()));
            if first.elapsed() >= Duration::from_millis(cli.duration_ms)
                || !sleep_unless_stopped(Duration::from_millis(cli.interval_ms.max(1)))
            {
                break;
            }
        }
    }
    drop(subscriber);
    drop(publisher);
    drop(node);
    emit(&json!({"event": "done"}));
    Ok(())
}
