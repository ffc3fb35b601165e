//! `shoal-zenoh-peer`: the shoal side of the Zenoh bridge's tests and measurement. Publishes or checks probes
//! (`shoal_zenoh_bridge::probe`) on a shoal topic; JSON lines on stdout.
//!
//! ```text
//! shoal-zenoh-peer pub --topic T --count N [--size B] [--rate HZ] [--descriptor FILE] [--wait-subscribers K]
//!                      [--reliable]
//! shoal-zenoh-peer sub --topic T --count N [--size B] [--timeout-ms MS] [--idle-ms MS] [--after-last-ms MS]
//!                      [--reliable]
//! shoal-zenoh-peer monitor --topic T --unit U [--duration-ms MS]
//! shoal-zenoh-peer zpub --connect E --key K --count N [--size B] [--rate HZ]
//! shoal-zenoh-peer zsub --connect E --key K --count N [--size B] [--timeout-ms MS] [--idle-ms MS]
//!                       [--after-last-ms MS]
//! ```
//!
//! `monitor` reads shoal registration (the node's snapshot, as shoal-monitor does) for `--duration-ms` and prints
//! the largest `message_drops` announced by the publishers and subscribers of topic T in processes of unit U.
//!
//! `pub` announces the probe type (`shoal_zenoh.test.Probe`, encoding proto, the descriptor from FILE), waits until
//! K subscribers are connected, then sends probes 1..=N at HZ (0: as fast as it can). `sub` receives until N probes
//! arrived, or `--idle-ms` passed without one after the first, or `--after-last-ms` without one after probe N (the
//! stream is over: what has not come was lost), or the timeout; its summary counts received, intact
//! (right size and pattern) and duplicate probes, names the type the publisher announced, and gives the one-way
//! latency (send time in the probe to arrival, same host) percentiles and the receive rate. `pub --reliable` makes
//! a reliable publisher (it waits up to 5 s for reliable subscribers, such as the bridge's, instead of overwriting
//! what they have not taken); `sub --reliable` a reliable subscriber (a reliable publisher, such as a bridge's with
//! `policy = "block"`, waits for it).
//!
//! `zpub` and `zsub` do the same with Zenoh's own Rust API and nothing of shoal (a Zenoh client of the router at
//! E, the probes as plain payloads on key K, `put` with congestion control `Block`): the reference the bridges'
//! measurement compares with, the same Zenoh version as the bridge, in the same run.

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
        #[command(flatten)]
        stream: Stream,
        /// The announced descriptor (a serialized FileDescriptorSet of probe.proto).
        #[arg(long)]
        descriptor: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        wait_subscribers: usize,
        /// A reliable publisher (waits up to 5 s for reliable subscribers).
        #[arg(long)]
        reliable: bool,
    },
    /// Publish probes 1..=count with Zenoh's own API (the reference).
    Zpub {
        #[arg(long)]
        connect: String,
        #[arg(long)]
        key: String,
        #[command(flatten)]
        stream: Stream,
    },
    /// Receive probes with Zenoh's own API (the reference).
    Zsub {
        #[arg(long)]
        connect: String,
        #[arg(long)]
        key: String,
        #[command(flatten)]
        until: Until,
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
        #[command(flatten)]
        until: Until,
        /// A reliable subscriber (reliable publishers wait for it).
        #[arg(long)]
        reliable: bool,
    },
}

/// What a publisher sends (`pub`, `zpub`).
#[derive(clap::Args, Debug)]
struct Stream {
    /// Probes 1..=count.
    #[arg(long)]
    count: u64,
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Messages per second; 0: as fast as possible.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
}

/// What a receiver expects and when it stops (`sub`, `zsub`).
#[derive(clap::Args, Debug)]
struct Until {
    /// Probes 1..=count.
    #[arg(long)]
    count: u64,
    /// Their size (an intact probe has it).
    #[arg(long, default_value_t = 64)]
    size: usize,
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
    /// After the first probe, stop when none came for this long.
    #[arg(long, default_value_t = 0)]
    idle_ms: u64,
    /// After the last probe (number `count`), stop when none came for this long: the stream is over, and what has
    /// not come was lost (a stream with a gap longer than `idle_ms` need not wait that out at its end).
    #[arg(long, default_value_t = 0)]
    after_last_ms: u64,
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
    // Zenoh's own commands (the reference) run no shoal node.
    let node = || shoal::Node::init("shoal_zenoh_peer");
    match args.cmd {
        Cmd::Pub { topic, stream: Stream { count, size, rate }, descriptor, wait_subscribers, reliable } => {
            let desc = match descriptor {
                Some(p) => std::fs::read(p)?,
                None => Vec::new(),
            };
            let node = node()?;
            let mut builder = node.publisher(&topic).type_info(TypeInfo::new(probe::TYPE, "proto", desc));
            if reliable {
                builder = builder.reliable(Duration::from_secs(5));
            }
            let mut publ = builder.create()?;
            emit(&json!({"event": "ready", "id": publ.id()}));
            let deadline = Instant::now() + Duration::from_secs(30);
            while publ.subscriber_count() < wait_subscribers {
                anyhow::ensure!(Instant::now() < deadline, "no {wait_subscribers} subscriber(s) within 30 s");
                std::thread::sleep(Duration::from_millis(10));
            }
            let secs = send_paced(count, rate, |seq| Ok(publ.send(&probe::encode(seq, probe::now_ns(), size))?))?;
            emit(&json!({"event": "done", "sent": count, "seconds": secs}));
            // Stay a moment so subscribers behind a bridge finish reading the last messages from this process.
            std::thread::sleep(Duration::from_millis(500));
        }
        Cmd::Zpub { connect, key, stream: Stream { count, size, rate } } => {
            use zenoh::Wait;
            let session = zenoh::open(zenoh_client(&connect)?).wait().map_err(|e| anyhow::anyhow!("zenoh: {e}"))?;
            let publisher = session
                .declare_publisher(key)
                .congestion_control(zenoh::qos::CongestionControl::Block)
                .wait()
                .map_err(|e| anyhow::anyhow!("zenoh publisher: {e}"))?;
            // Until a subscriber is matched (the router knows of it).
            let deadline = Instant::now() + Duration::from_secs(30);
            while !publisher.matching_status().wait().map_err(|e| anyhow::anyhow!("{e}"))?.matching() {
                anyhow::ensure!(Instant::now() < deadline, "no Zenoh subscriber matched within 30 s");
                std::thread::sleep(Duration::from_millis(10));
            }
            emit(&json!({"event": "ready"}));
            let secs = send_paced(count, rate, |seq| {
                publisher.put(probe::encode(seq, probe::now_ns(), size)).wait().map_err(|e| anyhow::anyhow!("put: {e}"))
            })?;
            emit(&json!({"event": "done", "sent": count, "seconds": secs}));
            std::thread::sleep(Duration::from_millis(500));
        }
        Cmd::Zsub { connect, key, until } => {
            use zenoh::Wait;
            let session = zenoh::open(zenoh_client(&connect)?).wait().map_err(|e| anyhow::anyhow!("zenoh: {e}"))?;
            let tally = std::sync::Arc::new(std::sync::Mutex::new(Tally::new(until.size)));
            let t = std::sync::Arc::clone(&tally);
            let _sub = session
                .declare_subscriber(key)
                .callback(move |s: zenoh::sample::Sample| {
                    let arrived = probe::now_ns();
                    t.lock().unwrap_or_else(|e| e.into_inner()).add(&s.payload().to_bytes(), arrived);
                })
                .wait()
                .map_err(|e| anyhow::anyhow!("zenoh subscriber: {e}"))?;
            emit(&json!({"event": "ready"}));
            let deadline = Instant::now() + Duration::from_millis(until.timeout_ms);
            loop {
                std::thread::sleep(Duration::from_millis(10));
                let t = tally.lock().unwrap_or_else(|e| e.into_inner());
                if t.done(&until, deadline) {
                    emit(&t.summary(None));
                    break;
                }
            }
        }
        Cmd::Monitor { topic, unit, duration_ms } => {
            let node = node()?;
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
        Cmd::Sub { topic, until, reliable } => {
            let node = node()?;
            let sub =
                node.subscriber(&topic).queue(shoal::QueuePolicy::new(1 << 20, 4 << 30)).reliable(reliable).create()?;
            emit(&json!({"event": "ready"}));
            let deadline = Instant::now() + Duration::from_millis(until.timeout_ms);
            let mut tally = Tally::new(until.size);
            let mut type_info: Option<TypeInfo> = None;
            while !tally.done(&until, deadline) {
                let Ok(s) = sub.recv_timeout(Duration::from_millis(50)) else { continue };
                type_info.get_or_insert_with(|| s.type_info().clone());
                tally.add(s.payload(), probe::now_ns());
            }
            emit(&tally.summary(Some(&type_info.unwrap_or_default())));
        }
    }
    Ok(())
}

/// Calls `send` with 1..=count at `rate` per second (0: as fast as it returns); the seconds it took.
fn send_paced(count: u64, rate: f64, mut send: impl FnMut(u64) -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let start = Instant::now();
    for seq in 1..=count {
        if rate > 0.0 {
            let due = start + Duration::from_secs_f64((seq - 1) as f64 / rate);
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        send(seq)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// A Zenoh client configuration for the router at `endpoint` (no scouting).
fn zenoh_client(endpoint: &str) -> anyhow::Result<zenoh::Config> {
    let mut c = zenoh::Config::default();
    for (k, v) in [
        ("mode", json!("client")),
        ("connect/endpoints", json!([endpoint])),
        ("scouting/multicast/enabled", json!(false)),
    ] {
        c.insert_json5(k, &v.to_string()).map_err(|e| anyhow::anyhow!("zenoh configuration {k}: {e}"))?;
    }
    Ok(c)
}

/// What a receiver counted: probes, duplicates, intact ones, latencies, and when the first and last arrived.
struct Tally {
    size: usize,
    received: u64,
    intact: u64,
    duplicates: u64,
    seen: BTreeSet<u64>,
    lat_us: Vec<u64>,
    /// The earliest send time of a probe that arrived, and the latest arrival ([`probe::now_ns`]).
    first_sent_ns: u64,
    last_arrival_ns: u64,
    first_at: Option<Instant>,
    last_at: Instant,
}

impl Tally {
    fn new(size: usize) -> Tally {
        Tally {
            size,
            received: 0,
            intact: 0,
            duplicates: 0,
            seen: BTreeSet::new(),
            lat_us: Vec::new(),
            first_sent_ns: u64::MAX,
            last_arrival_ns: 0,
            first_at: None,
            last_at: Instant::now(),
        }
    }

    /// Counts one arrival (`arrived`: [`probe::now_ns`] when it came).
    fn add(&mut self, payload: &[u8], arrived: u64) {
        self.last_at = Instant::now();
        self.first_at.get_or_insert(self.last_at);
        self.received += 1;
        if let Some((seq, sent)) = probe::decode(payload) {
            if !self.seen.insert(seq) {
                self.duplicates += 1;
            } else if payload.len() == self.size || (self.size == 148 && payload.len() == 147) {
                self.intact += 1;
            }
            self.lat_us.push(arrived.saturating_sub(sent) / 1000);
            self.first_sent_ns = self.first_sent_ns.min(sent);
            self.last_arrival_ns = self.last_arrival_ns.max(arrived);
        }
    }

    /// All `until.count` arrived, or the deadline passed, or `until.idle_ms` (when not 0) passed since the last
    /// arrival, or `until.after_last_ms` (when not 0) since the last arrival and probe `count` is among them.
    fn done(&self, until: &Until, deadline: Instant) -> bool {
        let now = Instant::now();
        let quiet_for = |ms: u64| ms > 0 && self.first_at.is_some() && now - self.last_at > Duration::from_millis(ms);
        self.seen.len() as u64 >= until.count
            || now >= deadline
            || quiet_for(until.idle_ms)
            || (self.seen.contains(&until.count) && quiet_for(until.after_last_ms))
    }

    fn summary(&self, t: Option<&TypeInfo>) -> serde_json::Value {
        let mut lat = self.lat_us.clone();
        lat.sort_unstable();
        let secs = self.first_at.map_or(0.0, |f: Instant| (self.last_at - f).as_secs_f64());
        let t = t.cloned().unwrap_or_default();
        json!({
            "event": "summary",
            "received": self.received,
            "intact": self.intact,
            "duplicates": self.duplicates,
            "distinct": self.seen.len(),
            "first": self.seen.first(),
            "last": self.seen.last(),
            "type": {"name": t.name, "encoding": t.encoding, "descriptor_hex": hex(&t.descriptor)},
            "latency_us": {"p50": percentile(&lat, 0.5), "p99": percentile(&lat, 0.99), "max": lat.last()},
            "seconds": secs,
            "msgs_per_s": if secs > 0.0 { self.received as f64 / secs } else { 0.0 },
            // From the first probe's send to the last arrival: what the whole path carried per second (a queue on
            // the way that fills and then drains in a burst does not raise it).
            "e2e_msgs_per_s": if self.last_arrival_ns > self.first_sent_ns {
                self.seen.len() as f64 * 1e9 / (self.last_arrival_ns - self.first_sent_ns) as f64
            } else {
                0.0
            },
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
