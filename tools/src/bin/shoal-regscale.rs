//! `shoal-regscale`: the processes of `scripts/registration-scale`, which measures what registration costs many
//! processes on one host in the steady state (nothing changing) and how long a new topic takes to be matched.
//!
//! - `idle`: publishers and subscribers that never send; reports `ready`, then `matched` (with the CLOCK_MONOTONIC
//!   time) once every one of its entities is matched, and stays until SIGTERM / SIGINT.
//! - `count`: no entities; over `--seconds` reports the registration datagrams and samples this process received
//!   (the same every process receives: registration goes to every process of the host).
//! - `discover-sub` / `discover-pub`: the probe of a new topic. The subscriber process subscribes `--topics`
//!   topics `PREFIX0..` and reports when each is matched; the publisher process waits `--delay-ms` (so that the
//!   network knows it), then creates one publisher per topic, `--gap-ms` apart, and reports when it created each.
//!   The discovery time is the subscriber's match time minus the publisher's creation time (one clock for all
//!   processes: CLOCK_MONOTONIC).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use shoal_tools::{emit, mono_ns};

#[derive(Parser, Debug)]
#[command(name = "shoal-regscale", about = "The processes of scripts/registration-scale")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publishers and subscribers that never send, until SIGTERM.
    Idle(IdleArgs),
    /// Counts the registration received over a window.
    Count(CountArgs),
    /// Subscribes the probe topics and reports when each is matched.
    DiscoverSub(DiscoverArgs),
    /// Publishes the probe topics one after another and reports when each was created.
    DiscoverPub(DiscoverArgs),
}

#[derive(Args, Debug)]
struct IdleArgs {
    /// Topics to publish (repeat the flag or separate with commas).
    #[arg(long = "pub", value_delimiter = ',')]
    publish: Vec<String>,
    /// Topics to subscribe.
    #[arg(long = "sub", value_delimiter = ',')]
    subscribe: Vec<String>,
}

#[derive(Args, Debug)]
struct CountArgs {
    /// The window, in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Before the window, in seconds: this process learns the network (its first sample of each entity is new).
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
}

#[derive(Args, Debug)]
struct DiscoverArgs {
    /// Topic name prefix; the topics are PREFIX0, PREFIX1, ...
    #[arg(long, default_value = "probe_")]
    prefix: String,
    /// How many probe topics.
    #[arg(long, default_value_t = 3)]
    topics: usize,
    /// `discover-pub`: wait this long before the first publisher, in ms.
    #[arg(long, default_value_t = 3000)]
    delay_ms: u64,
    /// `discover-pub`: between two publishers, in ms.
    #[arg(long, default_value_t = 1500)]
    gap_ms: u64,
    /// Give up on a topic not matched within this long, in ms.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("installing the signal handler")?;
    }
    Ok(stop)
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let stop = stop_flag()?;
    let node = shoal::Node::init("shoal-regscale").context("starting the shoal node")?;
    match cli.cmd {
        Cmd::Idle(a) => idle(&node, &a, &stop),
        Cmd::Count(a) => count(&node, &a),
        Cmd::DiscoverSub(a) => discover_sub(&node, &a, &stop),
        Cmd::DiscoverPub(a) => discover_pub(&node, &a, &stop),
    }
}

fn idle(node: &shoal::Node, a: &IdleArgs, stop: &AtomicBool) -> Result<()> {
    let raw = shoal::TypeInfo::raw("shoal.test.Idle");
    let pubs =
        a.publish.iter().map(|t| node.publisher(t).type_info(raw.clone()).create()).collect::<Result<Vec<_>, _>>()?;
    let subs = a
        .subscribe
        .iter()
        .map(|t| node.subscriber(t).type_info(raw.clone()).create())
        .collect::<Result<Vec<_>, _>>()?;
    emit(&json!({"event": "ready", "pid": std::process::id()}));
    let mut matched = false;
    while !stop.load(Ordering::Relaxed) {
        if !matched && pubs.iter().all(|p| p.subscriber_count() > 0) && subs.iter().all(|s| s.publisher_count() > 0) {
            matched = true;
            emit(&json!({"event": "matched", "ns": mono_ns()}));
        }
        // Checked often until matched (the time is reported), then once a second for the stop flag (the
        // measurement is of registration, not of this loop).
        std::thread::sleep(Duration::from_millis(if matched { 1000 } else { 10 }));
    }
    Ok(())
}

fn count(node: &shoal::Node, a: &CountArgs) -> Result<()> {
    std::thread::sleep(Duration::from_secs_f64(a.warmup));
    let before = node.snapshot();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(a.seconds));
    let after = node.snapshot();
    let secs = start.elapsed().as_secs_f64();
    let (r0, r1) = (&before.registration, &after.registration);
    emit(&json!({
        "event": "count",
        "seconds": secs,
        "datagrams_per_s": (r1.datagrams_received - r0.datagrams_received) as f64 / secs,
        "samples_applied_per_s": (r1.samples_applied - r0.samples_applied) as f64 / secs,
        "repeats_per_s": (r1.repeats - r0.repeats) as f64 / secs,
        "sent_per_s": (r1.datagrams_sent - r0.datagrams_sent) as f64 / secs,
        "kernel_drops": after.socket_drops.registration - before.socket_drops.registration,
        "processes": after.processes.len(),
        "topics": after.topics.len(),
    }));
    Ok(())
}

fn discover_sub(node: &shoal::Node, a: &DiscoverArgs, stop: &AtomicBool) -> Result<()> {
    let subs =
        (0..a.topics).map(|i| node.subscriber(&format!("{}{i}", a.prefix)).create()).collect::<Result<Vec<_>, _>>()?;
    emit(&json!({"event": "ready", "pid": std::process::id()}));
    let mut done = vec![false; subs.len()];
    let end = Instant::now() + Duration::from_millis(a.delay_ms + a.gap_ms * a.topics as u64 + a.timeout_ms);
    while !stop.load(Ordering::Relaxed) && done.iter().any(|d| !d) && Instant::now() < end {
        for (i, s) in subs.iter().enumerate() {
            if !done[i] && s.publisher_count() > 0 {
                done[i] = true;
                emit(&json!({"event": "matched", "topic": i, "ns": mono_ns()}));
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    emit(&json!({"event": "done", "matched": done.iter().filter(|d| **d).count()}));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn discover_pub(node: &shoal::Node, a: &DiscoverArgs, stop: &AtomicBool) -> Result<()> {
    emit(&json!({"event": "ready", "pid": std::process::id()}));
    std::thread::sleep(Duration::from_millis(a.delay_ms));
    let mut pubs = Vec::new();
    for i in 0..a.topics {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let ns = mono_ns();
        pubs.push(node.publisher(&format!("{}{i}", a.prefix)).create()?);
        emit(&json!({"event": "created", "topic": i, "ns": ns}));
        std::thread::sleep(Duration::from_millis(a.gap_ms));
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}
