//! The running bridge: one shoal node and one Zenoh session.
//!
//! - **Export** (shoal → Zenoh): the main thread scans shoal registration every `scan_interval_ms`; a publisher of
//!   a selected topic that is not a bridge's starts the topic's export: a shoal callback subscriber that queues each
//!   sample (bounded, `[queue]`, with the drop policy) for the topic's worker thread, which puts it on the Zenoh
//!   publisher of key `<prefix>/<escaped topic>` with the type in the encoding and the bridge's attachment
//!   (`crate::wire`). The Zenoh publisher blocks while the link is congested; the queue takes the difference, so a
//!   slow link never stalls shoal's delivery thread. An export stays once started.
//! - **Import** (Zenoh → shoal): one Zenoh subscriber on `<prefix>/**`; a sample of a selected topic is sent on
//!   the bridge's shoal publisher of the topic, created on the topic's first sample with the type the sample
//!   carries (and created again when a sample carries another type). A new publisher waits up to
//!   [`MATCH_WAIT`] for the topic's shoal subscribers registration lists, so the first samples reach them.
//!
//! Loop prevention: the export subscriber ignores samples of the bridge's own shoal publishers and of publishers of
//! processes with the bridge's unit name (other bridges); a topic whose only publishers are bridges is not exported;
//! the bridge's Zenoh publishers deliver to remote subscribers only (`Locality::Remote`: its own subscriber on
//! `<prefix>/**` does not get its own puts), and the import ignores samples whose attachment carries the bridge's
//! own id (its samples coming back from the Zenoh side, e.g. republished by another Zenoh client).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;
use shoal::monitor::TopicDirection;
use shoal::{Sample, TypeInfo};
use zenoh::Wait;
use zenoh::bytes::Encoding;
use zenoh::qos::CongestionControl;
use zenoh::sample::Locality;

use crate::config::{Config, DropPolicy};
use crate::keyexpr::{topic_key, topic_of_key};
use crate::stats::{Cause, TopicStats};
use crate::wire;

/// How long a new import publisher waits for the topic's known shoal subscribers to connect.
pub const MATCH_WAIT: Duration = Duration::from_secs(1);

/// The shoal topic the statistics lines are also published on.
pub const STATS_TOPIC: &str = "shoal_zenoh_bridge/stats";

/// Errors that stop the bridge from starting.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// shoal could not start.
    #[error("shoal: {0}")]
    Shoal(#[from] shoal::InitError),
    /// A shoal publisher or subscriber could not be created.
    #[error("shoal topic {topic}: {source}")]
    ShoalTopic {
        /// The topic.
        topic: String,
        /// Why.
        source: shoal::CreateError,
    },
    /// The Zenoh session, publisher or subscriber could not be created.
    #[error("zenoh: {what}: {message}")]
    Zenoh {
        /// What was being created.
        what: String,
        /// Zenoh's error.
        message: String,
    },
}

fn zerr(what: impl Into<String>, e: impl std::fmt::Display) -> BridgeError {
    BridgeError::Zenoh { what: what.into(), message: e.to_string() }
}

/// Prints one JSON line on stdout (the bridge's machine-readable events: ready, export, import, stats).
pub fn emit(v: &serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The Zenoh configuration of `config`: mode, endpoints, no multicast scouting. At start the bridge waits for one of
/// its `connect` endpoints, retrying every 250 ms to 1 s, without end; once connected, a client reconnects after a
/// router restart or a link cut on its own.
pub fn zenoh_config(config: &Config) -> Result<zenoh::Config, BridgeError> {
    let mut z = zenoh::Config::default();
    let mut set = |key: &str, value: serde_json::Value| {
        z.insert_json5(key, &value.to_string()).map_err(|e| zerr(format!("configuration {key} = {value}"), e))
    };
    set("mode", json!(config.mode.as_str()))?;
    set("connect/endpoints", json!(config.connect))?;
    set("listen/endpoints", json!(config.listen))?;
    set("scouting/multicast/enabled", json!(false))?;
    set("connect/exit_on_failure", json!({"router": false, "peer": false, "client": false}))?;
    set("connect/timeout_ms", json!({"router": -1, "peer": -1, "client": -1}))?;
    set("connect/retry", json!({"period_init_ms": 250, "period_max_ms": 1000, "period_increase_factor": 2}))?;
    Ok(z)
}

/// State shared by the threads.
struct Shared {
    config: Config,
    bridge_id: u64,
    /// This bridge's shoal publishers.
    own_pubs: RwLock<HashSet<u64>>,
    /// Shoal publishers of other bridges (processes with the bridge's unit name).
    bridge_pubs: RwLock<HashSet<u64>>,
    stats: Mutex<BTreeMap<String, Arc<TopicStats>>>,
    /// Zenoh samples under the prefix whose key does not unescape to a topic.
    bad_keys: AtomicU64,
}

impl Shared {
    fn stats_for(&self, topic: &str) -> Arc<TopicStats> {
        let mut m = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(m.entry(topic.to_string()).or_insert_with(|| Arc::new(TopicStats::new(topic))))
    }

    fn is_bridge_pub(&self, id: u64) -> bool {
        self.own_pubs.read().unwrap_or_else(|e| e.into_inner()).contains(&id)
            || self.bridge_pubs.read().unwrap_or_else(|e| e.into_inner()).contains(&id)
    }
}

/// A topic's export limits at work: two token buckets (messages, bytes), each holding at most one second's budget.
#[derive(Debug)]
pub struct Limiter {
    limits: crate::config::Limits,
    messages: f64,
    bytes: f64,
    last: Option<std::time::Instant>,
}

impl Limiter {
    /// A limiter of `limits`, its buckets full.
    pub fn new(limits: crate::config::Limits) -> Limiter {
        Limiter { limits, messages: limits.messages_per_s as f64, bytes: limits.bytes_per_s as f64, last: None }
    }

    /// Whether a message of `len` bytes arriving at `now` is within the limits (and takes its share).
    pub fn admit(&mut self, len: usize, now: std::time::Instant) -> bool {
        let (m, b) = (self.limits.messages_per_s as f64, self.limits.bytes_per_s as f64);
        if let Some(last) = self.last {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.messages = (self.messages + dt * m).min(m);
            self.bytes = (self.bytes + dt * b).min(b);
        }
        self.last = Some(now);
        let len = len as f64;
        let ok_m = m == 0.0 || self.messages >= 1.0;
        // A message larger than a second's budget passes on a full bucket, so that a limit never stops one for good.
        let ok_b = b == 0.0 || self.bytes >= len.min(b);
        if !(ok_m && ok_b) {
            return false;
        }
        if m > 0.0 {
            self.messages -= 1.0;
        }
        if b > 0.0 {
            self.bytes -= len.min(b);
        }
        true
    }
}

/// A message waiting for the Zenoh publisher.
struct Item {
    payload: Vec<u8>,
    type_info: Arc<TypeInfo>,
}

#[derive(Default)]
struct QueueState {
    items: VecDeque<Item>,
    bytes: usize,
    closed: bool,
}

/// An export's bounded queue.
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
    max_messages: usize,
    max_bytes: usize,
    policy: DropPolicy,
    /// Drops not yet counted on the shoal subscriber.
    unflushed: AtomicU64,
}

impl Queue {
    /// Queues `item`; returns how many messages the drop policy dropped (0 or 1, or more when one large message
    /// evicts several).
    fn push(&self, item: Item) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let full = |s: &QueueState, bytes: usize| {
            s.items.len() >= self.max_messages || (!s.items.is_empty() && s.bytes + bytes > self.max_bytes)
        };
        let mut dropped = 0;
        match self.policy {
            DropPolicy::DropNewest => {
                if full(&s, item.payload.len()) {
                    return 1;
                }
            }
            DropPolicy::DropOldest => {
                while full(&s, item.payload.len()) {
                    let Some(old) = s.items.pop_front() else { break };
                    s.bytes -= old.payload.len();
                    dropped += 1;
                }
            }
        }
        s.bytes += item.payload.len();
        s.items.push_back(item);
        drop(s);
        self.ready.notify_one();
        dropped
    }

    /// The next item; `None` once closed.
    fn pop(&self) -> Option<Item> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(item) = s.items.pop_front() {
                s.bytes -= item.payload.len();
                return Some(item);
            }
            if s.closed {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn close(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        self.ready.notify_all();
    }
}

/// A running export.
struct Export {
    sub: shoal::CallbackSubscriber,
    queue: Arc<Queue>,
    worker: Option<JoinHandle<()>>,
}

/// A topic's import: its shoal publisher and what it last saw from each far bridge.
struct Import {
    publ: Option<shoal::Publisher>,
    last_seq: HashMap<u64, u64>,
    stats: Arc<TopicStats>,
}

fn start_export(
    shared: &Arc<Shared>,
    node: &shoal::Node,
    session: &zenoh::Session,
    topic: &str,
) -> Result<Export, BridgeError> {
    let c = &shared.config;
    let key = topic_key(&c.prefix, topic);
    let publisher = session
        .declare_publisher(key.clone())
        .congestion_control(CongestionControl::Block)
        .allowed_destination(Locality::Remote)
        .wait()
        .map_err(|e| zerr(format!("publisher {key}"), e))?;
    let queue = Arc::new(Queue {
        state: Mutex::new(QueueState::default()),
        ready: Condvar::new(),
        max_messages: c.queue_messages,
        max_bytes: c.queue_bytes,
        policy: c.drop_policy,
        unflushed: AtomicU64::new(0),
    });
    let stats = shared.stats_for(topic);
    let (cb_shared, cb_queue, cb_stats) = (Arc::clone(shared), Arc::clone(&queue), Arc::clone(&stats));
    let mut last_type: Option<Arc<TypeInfo>> = None;
    let (max_m, max_b) = (c.queue_messages, c.queue_bytes);
    let limits = c.limits_of(topic);
    let mut limiter = (limits != crate::config::Limits::default()).then(|| Limiter::new(limits));
    // shoal's own queue in front of the callback holds as much as the export queue: the callback only copies.
    let sub = node
        .subscriber(topic)
        .queue(shoal::QueuePolicy::new(c.queue_messages, c.queue_bytes))
        .reliable(c.reliable)
        .callback(move |s: &Sample| {
            if cb_shared.is_bridge_pub(s.publisher_id()) {
                cb_stats.own_ignored.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if let Some(l) = limiter.as_mut()
                && !l.admit(s.payload().len(), std::time::Instant::now())
            {
                cb_stats.dropped(
                    Cause::RateLimit,
                    1,
                    &format!(
                        "beyond {} messages/s or {} bytes/s (0: no limit)",
                        limits.messages_per_s, limits.bytes_per_s
                    ),
                );
                cb_queue.unflushed.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let type_info = match &last_type {
                Some(t) if **t == *s.type_info() => Arc::clone(t),
                _ => {
                    let t = Arc::new(s.type_info().clone());
                    last_type = Some(Arc::clone(&t));
                    t
                }
            };
            let dropped = cb_queue.push(Item { payload: s.payload().to_vec(), type_info });
            if dropped > 0 {
                cb_stats.dropped(
                    Cause::QueueFull,
                    dropped,
                    &format!("{max_m} messages or {max_b} bytes wait for the Zenoh link"),
                );
                cb_queue.unflushed.fetch_add(dropped, Ordering::Relaxed);
            }
        })
        .create()
        .map_err(|source| BridgeError::ShoalTopic { topic: topic.to_string(), source })?;
    let (w_queue, w_stats, bridge_id) = (Arc::clone(&queue), Arc::clone(&stats), shared.bridge_id);
    let worker = std::thread::Builder::new()
        .name(format!("export {topic}"))
        .spawn(move || {
            let mut seq = 0u64;
            let mut encoding: Option<(Arc<TypeInfo>, Encoding)> = None;
            while let Some(item) = w_queue.pop() {
                seq += 1;
                let enc = match &encoding {
                    Some((t, e)) if Arc::ptr_eq(t, &item.type_info) || **t == *item.type_info => e.clone(),
                    _ => {
                        let e = Encoding::from(wire::encoding_of(&item.type_info));
                        encoding = Some((Arc::clone(&item.type_info), e.clone()));
                        e
                    }
                };
                let att = wire::attachment(bridge_id, seq, &item.type_info.descriptor);
                match publisher.put(item.payload).encoding(enc).attachment(att).wait() {
                    Ok(()) => {
                        w_stats.to_zenoh.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        w_stats.dropped(Cause::ZenohPut, 1, &e);
                        w_queue.unflushed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let _ = publisher.undeclare().wait();
        })
        .map_err(|e| zerr(format!("thread of topic {topic}"), e))?;
    tracing::info!(topic, key, "exporting");
    emit(&json!({"event": "export", "topic": topic, "key": key}));
    Ok(Export { sub, queue, worker: Some(worker) })
}

/// The number of shoal subscribers of `topic` registration lists (in any process).
fn known_subscribers(node: &shoal::Node, topic: &str) -> usize {
    node.snapshot().topics.iter().filter(|t| t.topic_name == topic && t.direction == TopicDirection::Subscriber).count()
}

/// Handles one Zenoh sample under the prefix.
fn import(
    shared: &Shared,
    node: &shoal::Node,
    imports: &Mutex<HashMap<String, Import>>,
    sample: &zenoh::sample::Sample,
) {
    let c = &shared.config;
    let Some(topic) = topic_of_key(&c.prefix, sample.key_expr().as_str()) else {
        if !sample.key_expr().as_str().starts_with(&format!("{}/@", c.prefix)) {
            shared.bad_keys.fetch_add(1, Ordering::Relaxed);
        }
        return;
    };
    if !c.direction_of(&topic).is_some_and(|d| d.imports()) {
        return;
    }
    let mut imports = imports.lock().unwrap_or_else(|e| e.into_inner());
    let imp = imports.entry(topic.clone()).or_insert_with(|| Import {
        publ: None,
        last_seq: HashMap::new(),
        stats: shared.stats_for(&topic),
    });
    let attachment = sample.attachment().map(|a| a.to_bytes());
    let att = match wire::parse(attachment.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            imp.stats.dropped(Cause::BadAttachment, 1, &e);
            if let Some(p) = &imp.publ {
                p.count_dropped(1);
            }
            return;
        }
    };
    if att.as_ref().is_some_and(|a| a.bridge == shared.bridge_id) {
        imp.stats.own_ignored.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut lost = 0;
    let mut type_info = wire::type_of_encoding(&sample.encoding().to_string());
    if let Some(a) = att {
        if let Some(prev) = imp.last_seq.insert(a.bridge, a.seq)
            && a.seq > prev + 1
        {
            lost = a.seq - prev - 1;
        }
        type_info.descriptor = a.descriptor;
    }
    if imp.publ.as_ref().is_none_or(|p| *p.type_info() != type_info) {
        let changed = imp.publ.is_some();
        imp.publ = None;
        let p = match node.publisher(&topic).type_info(type_info.clone()).create() {
            Ok(p) => p,
            Err(e) => {
                imp.stats.dropped(Cause::ShoalSend, 1, &format!("creating the shoal publisher: {e}"));
                return;
            }
        };
        shared.own_pubs.write().unwrap_or_else(|e| e.into_inner()).insert(p.id());
        if changed {
            imp.stats.type_changes.fetch_add(1, Ordering::Relaxed);
        }
        let want = known_subscribers(node, &topic);
        let started = Instant::now();
        while p.subscriber_count() < want && started.elapsed() < MATCH_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
        let waited_ms = started.elapsed().as_millis();
        tracing::info!(topic, r#type = %type_info.name, encoding = %type_info.encoding, "importing");
        emit(&json!({"event": "import", "topic": topic, "key": sample.key_expr().as_str(), "type": type_info.name,
                     "encoding": type_info.encoding, "descriptor_bytes": type_info.descriptor.len(),
                     "subscribers": p.subscriber_count(), "known_subscribers": want, "waited_ms": waited_ms}));
        imp.publ = Some(p);
    }
    let Some(publ) = imp.publ.as_mut() else { return };
    if lost > 0 {
        imp.stats.dropped(Cause::Lost, lost, &"gaps in the far bridge's sequence numbers");
        publ.count_dropped(lost);
    }
    let payload = sample.payload();
    let sent = if payload.slices().nth(1).is_none() {
        publ.send(payload.slices().next().unwrap_or_default()).map_err(|e| e.to_string())
    } else {
        // A large message comes in fragments: written into the shoal slot where they are, not joined first.
        publ.loan(payload.len()).map_err(|e| e.to_string()).map(|loan| {
            loan.write(|buf| {
                let mut at = 0;
                for part in payload.slices() {
                    buf[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
            })
            .send();
        })
    };
    match sent {
        Ok(()) => {
            imp.stats.to_shoal.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            imp.stats.dropped(Cause::ShoalSend, 1, &e);
            publ.count_dropped(1);
        }
    }
}

fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// Runs the bridge until `stop` becomes true.
pub fn run(config: &Config, stop: Arc<AtomicBool>) -> Result<(), BridgeError> {
    let node = Arc::new(shoal::Node::init(&config.unit_name)?);
    let session = zenoh::open(zenoh_config(config)?).wait().map_err(|e| zerr("session", e))?;
    let shared = Arc::new(Shared {
        config: config.clone(),
        bridge_id: random_id(),
        own_pubs: RwLock::new(HashSet::new()),
        bridge_pubs: RwLock::new(HashSet::new()),
        stats: Mutex::new(BTreeMap::new()),
        bad_keys: AtomicU64::new(0),
    });
    let imports: Arc<Mutex<HashMap<String, Import>>> = Arc::new(Mutex::new(HashMap::new()));
    let all = format!("{}/**", config.prefix);
    let (i_shared, i_node, i_imports) = (Arc::clone(&shared), Arc::clone(&node), Arc::clone(&imports));
    let zsub = session
        .declare_subscriber(all.clone())
        .callback(move |sample| import(&i_shared, &i_node, &i_imports, &sample))
        .wait()
        .map_err(|e| zerr(format!("subscriber {all}"), e))?;
    let mut stats_pub = node
        .publisher(STATS_TOPIC)
        .type_info(TypeInfo::raw("json"))
        .create()
        .map_err(|source| BridgeError::ShoalTopic { topic: STATS_TOPIC.into(), source })?;
    shared.own_pubs.write().unwrap_or_else(|e| e.into_inner()).insert(stats_pub.id());
    emit(&json!({
        "event": "ready",
        "bridge_id": format!("{:016x}", shared.bridge_id),
        "zid": session.zid().to_string(),
        "mode": config.mode.as_str(),
        "connect": config.connect,
        "listen": config.listen,
        "prefix": config.prefix,
    }));

    let mut exports: BTreeMap<String, Export> = BTreeMap::new();
    let stats_every = Duration::from_millis(config.stats_interval_ms);
    let scan_every = Duration::from_millis(config.scan_interval_ms);
    let (mut next_stats, mut next_scan) = (Instant::now() + stats_every, Instant::now());
    let stats_line = |exports: &BTreeMap<String, Export>, last: bool| {
        let imports = imports.lock().unwrap_or_else(|e| e.into_inner());
        let stats = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
        let topics: Vec<_> = stats
            .iter()
            .map(|(t, s)| s.to_json(exports.contains_key(t), imports.get(t).is_some_and(|i| i.publ.is_some())))
            .collect();
        let mut v = json!({"event": "stats", "topics": topics, "bad_keys": shared.bad_keys.load(Ordering::Relaxed)});
        if last {
            v["final"] = json!(true);
        }
        v
    };
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if now >= next_scan {
            next_scan = now + scan_every;
            let snap = node.snapshot();
            let bridges: HashSet<u64> = snap
                .topics
                .iter()
                .filter(|t| t.direction == TopicDirection::Publisher && t.unit_name == config.unit_name)
                .map(|t| t.entity_id)
                .collect();
            *shared.bridge_pubs.write().unwrap_or_else(|e| e.into_inner()) = bridges;
            let mut wanted: Vec<String> = snap
                .topics
                .iter()
                .filter(|t| {
                    t.direction == TopicDirection::Publisher
                        && !exports.contains_key(&t.topic_name)
                        && !shared.is_bridge_pub(t.entity_id)
                        && t.unit_name != config.unit_name
                        && config.direction_of(&t.topic_name).is_some_and(|d| d.exports())
                })
                .map(|t| t.topic_name.clone())
                .collect();
            wanted.sort();
            wanted.dedup();
            for topic in wanted {
                match start_export(&shared, &node, &session, &topic) {
                    Ok(e) => {
                        exports.insert(topic, e);
                    }
                    Err(e) => tracing::error!("{e}"),
                }
            }
        }
        for e in exports.values() {
            let n = e.queue.unflushed.swap(0, Ordering::Relaxed);
            if n > 0 {
                e.sub.count_dropped(n);
            }
        }
        if !stats_every.is_zero() && now >= next_stats {
            next_stats = now + stats_every;
            let line = stats_line(&exports, false);
            emit(&line);
            let _ = stats_pub.send(line.to_string().as_bytes());
        }
    }
    let _ = zsub.undeclare().wait();
    for e in exports.values_mut() {
        e.queue.close();
        if let Some(w) = e.worker.take() {
            let _ = w.join();
        }
    }
    emit(&stats_line(&exports, true));
    drop(exports);
    let _ = session.close().wait();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limiter_passes_a_second_s_budget_then_the_rate() {
        use crate::config::Limits;
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let mut l = Limiter::new(Limits { messages_per_s: 100, bytes_per_s: 0 });
        let burst = (0..150).filter(|_| l.admit(10, t0)).count();
        assert_eq!(burst, 100, "a full bucket: one second's worth at once");
        // Then 100 a second: 10 ms brings one more.
        assert!(!l.admit(10, t0 + Duration::from_millis(5)));
        assert!(l.admit(10, t0 + Duration::from_millis(11)));
        let later = t0 + Duration::from_secs(10);
        let n = (0..1000).filter(|i| l.admit(10, later + Duration::from_micros(i * 1000))).count();
        assert!((199..=201).contains(&n), "{n}: a full bucket, then one per 10 ms over the second");

        let mut l = Limiter::new(Limits { messages_per_s: 0, bytes_per_s: 1000 });
        assert!(l.admit(600, t0));
        assert!(!l.admit(600, t0), "400 bytes left");
        assert!(l.admit(400, t0));
        // A message larger than the budget passes on a full bucket, not before.
        assert!(!l.admit(5000, t0 + Duration::from_millis(500)));
        assert!(l.admit(5000, t0 + Duration::from_secs(2)));
        let mut none = Limiter::new(Limits::default());
        assert!((0..10_000).all(|_| none.admit(1 << 20, t0)));
    }

    #[test]
    fn zenoh_accepts_the_configuration() {
        let mut c = Config::default();
        c.connect.push("tcp/127.0.0.1:7447".into());
        zenoh_config(&c).expect("every key known to zenoh");
        c.mode = crate::config::Mode::Peer;
        zenoh_config(&c).expect("peer");
    }

    fn queue(policy: DropPolicy) -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            ready: Condvar::new(),
            max_messages: 3,
            max_bytes: 100,
            policy,
            unflushed: AtomicU64::new(0),
        }
    }

    fn item(n: u8, len: usize) -> Item {
        Item { payload: vec![n; len], type_info: Arc::new(TypeInfo::default()) }
    }

    fn drain(q: &Queue) -> Vec<u8> {
        q.close();
        std::iter::from_fn(|| q.pop()).map(|i| i.payload[0]).collect()
    }

    #[test]
    fn drop_newest_keeps_the_first() {
        let q = queue(DropPolicy::DropNewest);
        let dropped: u64 = (1..=5).map(|n| q.push(item(n, 1))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(drain(&q), [1, 2, 3]);
    }

    #[test]
    fn drop_oldest_keeps_the_last() {
        let q = queue(DropPolicy::DropOldest);
        let dropped: u64 = (1..=5).map(|n| q.push(item(n, 1))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(drain(&q), [3, 4, 5]);
    }

    #[test]
    fn bytes_bound_and_one_large_message_passes() {
        let q = queue(DropPolicy::DropOldest);
        assert_eq!(q.push(item(1, 60)), 0);
        assert_eq!(q.push(item(2, 60)), 1, "120 bytes > 100: the oldest goes");
        assert_eq!(q.push(item(3, 500)), 1, "alone, a message larger than the bound passes");
        assert_eq!(drain(&q), [3]);
        let q = queue(DropPolicy::DropNewest);
        assert_eq!(q.push(item(1, 60)), 0);
        assert_eq!(q.push(item(2, 60)), 1);
        assert_eq!(drain(&q), [1]);
    }
}
