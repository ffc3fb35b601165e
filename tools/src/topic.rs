//! `shoal topic list|echo|pub`: look at and talk to any topic, shoal's or eCAL's.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal::monitor::{Snapshot, TopicDirection};
use shoal::{Node, RecvError, TypeInfo};

/// `shoal topic ...`
#[derive(Debug, Subcommand)]
pub(crate) enum TopicCommand {
    /// List the publishers and subscribers registration knows (this host; the network in network mode).
    List(ListArgs),
    /// Print the messages published on a topic.
    Echo(EchoArgs),
    /// Publish a text message on a topic.
    Pub(PubArgs),
}

/// Arguments of `shoal topic list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// How long to listen to registration before printing, in ms (everyone registers at least once a second).
    #[arg(long, default_value_t = 1500)]
    wait_ms: u64,
    /// One JSON object per line and entity.
    #[arg(long)]
    json: bool,
}

/// Arguments of `shoal topic echo`.
#[derive(Debug, Args)]
pub(crate) struct EchoArgs {
    /// The topic name.
    topic: String,
    /// Exit after this many messages (default: run until interrupted).
    #[arg(long, short = 'n')]
    count: Option<u64>,
    /// One JSON object per line and message: topic, payload_utf8 or payload_hex, size, clock, host, pid,
    /// type_name, encoding, send_time_us.
    #[arg(long)]
    json: bool,
    /// Give up after this many seconds without a message (default: wait forever).
    #[arg(long)]
    timeout: Option<f64>,
}

/// Arguments of `shoal topic pub`.
#[derive(Debug, Args)]
pub(crate) struct PubArgs {
    /// The topic name.
    topic: String,
    /// The message text (sent as UTF-8 bytes, without a trailing NUL).
    text: String,
    /// How many times to send it.
    #[arg(long, short = 'n', default_value_t = 1)]
    count: u64,
    /// Messages per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Type name announced in registration.
    #[arg(long = "type", default_value = "std::string")]
    type_name: String,
    /// Encoding announced in registration.
    #[arg(long, default_value = "base")]
    encoding: String,
    /// Wait for this many matching subscribers before the first message.
    #[arg(long, default_value_t = 1)]
    wait_subs: usize,
    /// How long to wait for them, in seconds; then publish anyway (and say so).
    #[arg(long, default_value_t = 5.0)]
    wait_timeout: f64,
    /// After the subscribers matched, wait this long (ms) before the first message: an eCAL shared-memory
    /// subscriber attaches to our memfile when our registration reaches it, a few ms after the match.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
}

/// Runs a `shoal topic` command.
pub(crate) fn run(cmd: TopicCommand) -> Result<()> {
    let node = Node::init("shoal_topic").context("starting the shoal node (check ecal.ini and /dev/shm)")?;
    match cmd {
        TopicCommand::List(a) => list(&node, &a),
        TopicCommand::Echo(a) => echo(&node, &a),
        TopicCommand::Pub(a) => publish(&node, &a),
    }
}

fn list(node: &Node, a: &ListArgs) -> Result<()> {
    std::thread::sleep(Duration::from_millis(a.wait_ms));
    let snap = node.snapshot();
    let mut out = std::io::stdout().lock();
    let me = std::process::id();
    for t in snap.topics.iter().filter(|t| !(t.pid == me && t.host_name == node.host_name())) {
        let dir = match t.direction {
            TopicDirection::Publisher => "pub",
            TopicDirection::Subscriber => "sub",
        };
        if a.json {
            writeln!(
                out,
                "{}",
                json!({"topic": t.topic_name, "direction": dir, "host": t.host_name, "pid": t.pid,
                       "unit": t.unit_name, "type_name": t.type_info.name, "encoding": t.type_info.encoding,
                       "descriptor_len": t.type_info.descriptor.len(), "layers": t.layers,
                       "entity_id": t.entity_id.to_string(), "data_clock": t.data_clock,
                       "frequency_hz": f64::from(t.data_frequency_mhz) / 1000.0, "drops": t.message_drops})
            )?;
        } else {
            writeln!(
                out,
                "{dir}  {:<32} {:<24} {:>7} {:<16} {:<24} {}",
                t.topic_name,
                t.host_name,
                t.pid,
                t.unit_name,
                format!("{} ({})", t.type_info.name, t.type_info.encoding),
                t.layers.join(",")
            )?;
        }
    }
    Ok(())
}

/// The (host, pid) of a publisher id, looked up in registration (cached; refreshed on a miss).
struct Publishers {
    snap: Snapshot,
    taken: Option<Instant>,
    known: HashMap<u64, (String, u32)>,
}

impl Publishers {
    fn lookup(&mut self, node: &Node, id: u64) -> (String, u32) {
        if let Some(v) = self.known.get(&id) {
            return v.clone();
        }
        if self.taken.is_none_or(|t| t.elapsed() > Duration::from_millis(200)) {
            self.snap = node.snapshot();
            self.taken = Some(Instant::now());
        }
        let v = self
            .snap
            .topics
            .iter()
            .find(|t| t.entity_id == id && t.direction == TopicDirection::Publisher)
            .map(|t| (t.host_name.clone(), t.pid))
            .unwrap_or_default();
        if v.1 != 0 {
            self.known.insert(id, v.clone());
        }
        v
    }
}

fn printable(bytes: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(bytes).ok()?;
    s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t' || c == '\r').then_some(s)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn echo(node: &Node, a: &EchoArgs) -> Result<()> {
    let sub = node.subscriber(&a.topic).create()?;
    let mut pubs = Publishers { snap: Snapshot::default(), taken: None, known: HashMap::new() };
    let timeout = a.timeout.map(Duration::from_secs_f64);
    let mut n = 0u64;
    let mut out = std::io::stdout().lock();
    while a.count.is_none_or(|c| n < c) {
        let s = match timeout {
            Some(t) => match sub.recv_timeout(t) {
                Ok(s) => s,
                Err(RecvError::Timeout) => bail!("no message on {} for {:?} ({n} received)", a.topic, t),
                Err(e) => return Err(e.into()),
            },
            None => sub.recv()?,
        };
        n += 1;
        let (host, pid) = pubs.lookup(node, s.publisher_id());
        let p = s.payload();
        if a.json {
            let mut v = json!({"topic": a.topic, "size": p.len(), "clock": s.clock(), "host": host, "pid": pid,
                               "type_name": s.type_info().name, "encoding": s.type_info().encoding,
                               "send_time_us": s.send_time_us(), "publisher_id": s.publisher_id().to_string()});
            match printable(p) {
                Some(text) => v["payload_utf8"] = json!(text),
                None => v["payload_hex"] = json!(hex(p)),
            }
            writeln!(out, "{v}")?;
        } else {
            let body = match printable(p) {
                Some(text) => format!("{text:?}"),
                None => format!("0x{}{}", hex(&p[..p.len().min(64)]), if p.len() > 64 { "…" } else { "" }),
            };
            writeln!(out, "[{} B, clock {}, from {host} pid {pid}] {body}", p.len(), s.clock())?;
        }
        out.flush()?;
    }
    Ok(())
}

fn publish(node: &Node, a: &PubArgs) -> Result<()> {
    if !a.rate.is_finite() || a.rate <= 0.0 {
        bail!("--rate must be a positive number of messages per second");
    }
    let mut publ = node
        .publisher(&a.topic)
        .type_info(TypeInfo::new(a.type_name.clone(), a.encoding.clone(), Vec::new()))
        .create()?;
    let wait = Duration::from_secs_f64(a.wait_timeout.max(0.0));
    if a.wait_subs > 0 && !publ.wait_for_subscribers(a.wait_subs, wait) {
        eprintln!(
            "shoal topic pub: {} of {} subscribers matched within {wait:?}; publishing anyway",
            publ.subscriber_count(),
            a.wait_subs
        );
    }
    if publ.subscriber_count() > 0 {
        std::thread::sleep(Duration::from_millis(a.settle_ms));
    }
    let period = Duration::from_secs_f64(1.0 / a.rate);
    let start = Instant::now();
    for i in 0..a.count {
        publ.send(a.text.as_bytes())?;
        if i + 1 < a.count {
            let due = start + period.mul_f64((i + 1) as f64);
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
    }
    // Let the last message reach readers that are not polling right now before the ring goes away.
    std::thread::sleep(Duration::from_millis(200));
    Ok(())
}
