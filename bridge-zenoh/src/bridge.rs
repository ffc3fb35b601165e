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
//!   [`MATCH_WAIT`] for the topic's shoal subscribers registration lists, so the first samples reach them. The
//!   main thread declares each key the subscriber received to Zenoh (`declare_import_keys`), so its samples are
//!   routed by a cached route. At most `[select] max_imports` keys are imported; a sample of a further key takes
//!   the slot of the import idle longest if that one has had no sample for `[select] import_idle_ms` (it ends: its
//!   shoal publisher goes, its key is undeclared, `imports_ended`), otherwise it is dropped and counted
//!   (`imports_refused`). With `policy = "block"` and `[shoal] reliable` the import publishers are reliable (a
//!   reliable local subscriber holds Zenoh's receive thread, at most 1 s, instead of being overwritten).
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
    /// Samples of a new key dropped because `max_imports` keys are imported already.
    imports_refused: AtomicU64,
    /// Keys of new imports, for the main loop to declare to Zenoh (`declare_import_keys`).
    new_import_keys: Mutex<Vec<String>>,
    /// Keys of imports that gave their slot to a new key, for the main loop to undeclare.
    ended_import_keys: Mutex<Vec<String>>,
    /// Imports that gave their slot to a new key (`[select] import_idle_ms`).
    imports_ended: AtomicU64,
    /// Milliseconds since the bridge started, as the main loop last saw them (every 20 ms): a sample's time without
    /// a clock read on Zenoh's receive thread.
    clock_ms: AtomicU64,
    /// With `max_imports` keys imported, no import can be idle long enough before this time (`clock_ms`): until
    /// then, a new key is refused without a scan of the imports. Read and written under the imports' lock.
    idle_scan_after_ms: AtomicU64,
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
    /// The worker waits for an item (a push wakes it only then: a futex wake costs a system call).
    worker_waits: bool,
    /// The receive thread waits for room (`block`).
    pusher_waits: bool,
}

/// An export's bounded queue.
struct Queue {
    state: Mutex<QueueState>,
    /// An item came (for the worker).
    ready: Condvar,
    /// Room was made (for a `block` push).
    room: Condvar,
    max_messages: usize,
    max_bytes: usize,
    policy: DropPolicy,
    /// Drops not yet counted on the shoal subscriber.
    unflushed: AtomicU64,
}

impl Queue {
    fn new(max_messages: usize, max_bytes: usize, policy: DropPolicy) -> Queue {
        Queue {
            state: Mutex::new(QueueState::default()),
            ready: Condvar::new(),
            room: Condvar::new(),
            max_messages,
            max_bytes,
            policy,
            unflushed: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item`; returns how many messages the drop policy dropped (0 or 1, or more when one large message
    /// evicts several).
    fn push(&self, item: Item) -> u64 {
        let mut s = self.lock();
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
            DropPolicy::Block => {
                let deadline = Instant::now() + crate::config::BLOCK_MAX;
                while full(&s, item.payload.len()) && !s.closed {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return 1;
                    }
                    s.pusher_waits = true;
                    s = self.room.wait_timeout(s, left).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
        s.bytes += item.payload.len();
        s.items.push_back(item);
        let wake = std::mem::take(&mut s.worker_waits);
        drop(s);
        if wake {
            self.ready.notify_one();
        }
        dropped
    }

    /// Moves every queued item (at least one) into `out`; false once closed and empty.
    fn pop_all(&self, out: &mut VecDeque<Item>) -> bool {
        let mut s = self.lock();
        loop {
            if !s.items.is_empty() {
                std::mem::swap(&mut s.items, out);
                s.bytes = 0;
                let wake = std::mem::take(&mut s.pusher_waits);
                drop(s);
                if wake {
                    self.room.notify_one();
                }
                return true;
            }
            if s.closed {
                return false;
            }
            s.worker_waits = true;
            s = self.ready.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
        self.room.notify_all();
    }
}

/// A running export.
struct Export {
    sub: shoal::CallbackSubscriber,
    queue: Arc<Queue>,
    worker: Option<JoinHandle<()>>,
}

/// A sample waiting for its type's descriptor.
struct Held {
    payload: zenoh::bytes::ZBytes,
    encoding: Encoding,
    fingerprint: u64,
    since: Instant,
    /// Held before (counted once in `held`).
    counted: bool,
}

/// At most this many samples (and bytes) wait for a descriptor per topic, at most this long; beyond, the oldest are
/// dropped, counted as `no_descriptor`. A far bridge sends the descriptor at least every `wire::DESCRIPTOR_EVERY`.
const HELD_MESSAGES: usize = 4096;
const HELD_BYTES: usize = 64 << 20;
const HELD_MAX_AGE: Duration = Duration::from_secs(1);
/// Descriptors kept per topic.
const KNOWN_DESCRIPTORS: usize = 8;
/// Far bridges whose last sequence number an import keeps (a restarted bridge has a new id: the oldest are
/// forgotten, so the table stays bounded however often far bridges restart).
const FAR_BRIDGES: usize = 16;

/// Notes `seq` as far bridge `bridge`'s last sequence number in `last` (at most [`FAR_BRIDGES`] entries, the oldest
/// forgotten first); returns the one it had.
fn note_seq(last: &mut VecDeque<(u64, u64)>, bridge: u64, seq: u64) -> Option<u64> {
    if let Some(e) = last.iter_mut().find(|e| e.0 == bridge) {
        return Some(std::mem::replace(&mut e.1, seq));
    }
    if last.len() == FAR_BRIDGES {
        last.pop_front();
    }
    last.push_back((bridge, seq));
    None
}

/// A topic's import (under its Zenoh key): its shoal publisher and what it last saw from each far bridge.
struct Import {
    topic: String,
    publ: Option<shoal::Publisher>,
    /// The encoding and descriptor fingerprint of the last sample sent (with the publisher, its type).
    encoding: Option<Encoding>,
    fingerprint: u64,
    /// Descriptors received, by fingerprint (the last few).
    known: VecDeque<(u64, Vec<u8>)>,
    /// Samples waiting for their type's descriptor, oldest first, and their payload bytes.
    held: VecDeque<Held>,
    held_bytes: usize,
    /// Each far bridge's last sequence number ([`note_seq`]).
    last_seq: VecDeque<(u64, u64)>,
    stats: Arc<TopicStats>,
    /// When its last sample came (`Shared::clock_ms`).
    last_ms: u64,
}

/// The key of the import idle longest if it has had no sample for `idle_ms` at `now_ms`; otherwise the time before
/// which none can have (the oldest last sample plus `idle_ms`; `u64::MAX` without imports).
fn longest_idle<'a>(
    imports: impl Iterator<Item = (&'a String, u64)>,
    now_ms: u64,
    idle_ms: u64,
) -> Result<&'a String, u64> {
    match imports.min_by_key(|(_, last)| *last) {
        Some((key, last)) if now_ms.saturating_sub(last) >= idle_ms => Ok(key),
        Some((_, last)) => Err(last.saturating_add(idle_ms)),
        None => Err(u64::MAX),
    }
}

/// With `max_imports` keys imported: makes room for a new key by ending the import idle longest, if one has been
/// idle for `[select] import_idle_ms`. Its shoal publisher goes (its subscribers see it leave); samples it held for
/// a descriptor are counted as dropped; a later sample of its key imports it again.
fn make_room(shared: &Shared, imports: &mut HashMap<String, Import>) -> bool {
    let now = shared.clock_ms.load(Ordering::Relaxed);
    if now < shared.idle_scan_after_ms.load(Ordering::Relaxed) {
        return false;
    }
    let idle_ms = shared.config.import_idle_ms;
    let key = match longest_idle(imports.iter().map(|(k, i)| (k, i.last_ms)), now, idle_ms) {
        Ok(k) => k.clone(),
        Err(after) => {
            shared.idle_scan_after_ms.store(after, Ordering::Relaxed);
            return false;
        }
    };
    let Some(imp) = imports.remove(&key) else { return false };
    count_no_descriptor(&imp, imp.held.len() as u64);
    let idle = now.saturating_sub(imp.last_ms);
    tracing::info!(topic = imp.topic, key, idle_ms = idle, "import ended: idle, its slot taken by a new key");
    emit(&json!({"event": "import_end", "topic": imp.topic, "key": key, "idle_ms": idle}));
    shared.imports_ended.fetch_add(1, Ordering::Relaxed);
    shared.ended_import_keys.lock().unwrap_or_else(|e| e.into_inner()).push(key);
    true
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
    let queue = Arc::new(Queue::new(c.queue_messages, c.queue_bytes, c.drop_policy));
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
            // The type of the last message: its Zenoh encoding and descriptor fingerprint.
            let mut current: Option<(Arc<TypeInfo>, Encoding, u64)> = None;
            // When a sample last carried the descriptor (see `wire`).
            let mut descriptor_sent: Option<Instant> = None;
            let mut batch = VecDeque::new();
            while w_queue.pop_all(&mut batch) {
                for item in batch.drain(..) {
                    seq += 1;
                    let (enc, fp) = match &current {
                        Some((t, e, fp)) if Arc::ptr_eq(t, &item.type_info) || **t == *item.type_info => {
                            (e.clone(), *fp)
                        }
                        _ => {
                            let e = Encoding::from(wire::encoding_of(&item.type_info));
                            let fp = wire::fingerprint(&item.type_info.descriptor);
                            current = Some((Arc::clone(&item.type_info), e.clone(), fp));
                            descriptor_sent = None;
                            (e, fp)
                        }
                    };
                    let now = Instant::now();
                    let with = descriptor_sent.is_none_or(|t| now.duration_since(t) >= wire::DESCRIPTOR_EVERY);
                    if with {
                        descriptor_sent = Some(now);
                    }
                    let att = wire::attachment(bridge_id, seq, &item.type_info.descriptor, fp, with);
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
    let key = sample.key_expr().as_str();
    let mut imports = imports.lock().unwrap_or_else(|e| e.into_inner());
    // A key seen before is not unescaped and matched against the patterns again.
    if !imports.contains_key(key) {
        let Some(topic) = topic_of_key(&c.prefix, key) else {
            if !key.starts_with(&format!("{}/@", c.prefix)) {
                shared.bad_keys.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        if !c.direction_of(&topic).is_some_and(|d| d.imports()) {
            return;
        }
        if imports.len() >= c.max_imports && !make_room(shared, &mut imports) {
            if shared.imports_refused.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(key, max_imports = c.max_imports, "import refused: max_imports keys are imported");
            }
            return;
        }
        let stats = shared.stats_for(&topic);
        imports.insert(
            key.to_owned(),
            Import {
                topic,
                publ: None,
                encoding: None,
                fingerprint: wire::EMPTY_FINGERPRINT,
                known: VecDeque::new(),
                held: VecDeque::new(),
                held_bytes: 0,
                last_seq: VecDeque::new(),
                stats,
                last_ms: 0,
            },
        );
        shared.new_import_keys.lock().unwrap_or_else(|e| e.into_inner()).push(key.to_owned());
    }
    let Some(imp) = imports.get_mut(key) else { return };
    imp.last_ms = shared.clock_ms.load(Ordering::Relaxed);
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
    if let Some(a) = &att
        && let Some(prev) = note_seq(&mut imp.last_seq, a.bridge, a.seq)
        && a.seq > prev + 1
    {
        lost = a.seq - prev - 1;
    }
    if lost > 0 {
        imp.stats.dropped(Cause::Lost, lost, &"gaps in the far bridge's sequence numbers");
        if let Some(p) = &imp.publ {
            p.count_dropped(lost);
        }
    }
    // A plain Zenoh publisher's sample has no descriptor (the fingerprint of none).
    let fp = att.as_ref().map_or(wire::EMPTY_FINGERPRINT, |a| a.fingerprint);
    if let Some(d) = att.as_ref().and_then(|a| a.descriptor)
        && !imp.known.iter().any(|(f, _)| *f == fp)
    {
        if imp.known.len() == KNOWN_DESCRIPTORS {
            imp.known.pop_front();
        }
        imp.known.push_back((fp, d.to_vec()));
        // What waited for it goes first, in order.
        for h in std::mem::take(&mut imp.held) {
            imp.held_bytes -= h.payload.len();
            deliver_or_hold(shared, node, imp, key, h);
        }
    }
    // The type as the last sample had it (the same encoding and descriptor): sent at once, nothing built.
    if imp.held.is_empty()
        && imp.publ.is_some()
        && imp.fingerprint == fp
        && imp.encoding.as_ref() == Some(sample.encoding())
    {
        send_import(imp, sample.payload());
        return;
    }
    let now = Instant::now();
    let h = Held {
        payload: sample.payload().clone(),
        encoding: sample.encoding().clone(),
        fingerprint: fp,
        since: now,
        counted: false,
    };
    deliver_or_hold(shared, node, imp, key, h);
    // What waited too long (its descriptor never came) is dropped.
    let mut old = 0;
    while imp.held.front().is_some_and(|h| now.duration_since(h.since) > HELD_MAX_AGE) {
        if let Some(h) = imp.held.pop_front() {
            imp.held_bytes -= h.payload.len();
            old += 1;
        }
    }
    count_no_descriptor(imp, old);
}

fn count_no_descriptor(imp: &Import, n: u64) {
    if n > 0 {
        imp.stats.dropped(Cause::NoDescriptor, n, &"its type's descriptor did not come from the far bridge");
        if let Some(p) = &imp.publ {
            p.count_dropped(n);
        }
    }
}

/// Sends a sample on the import's shoal publisher (made, or made again, for its type), or holds it while its
/// descriptor is unknown.
fn deliver_or_hold(shared: &Shared, node: &shoal::Node, imp: &mut Import, key: &str, h: Held) {
    // The type as the last sample had it (the same encoding and descriptor): nothing to build or compare.
    let same = imp.publ.is_some() && imp.fingerprint == h.fingerprint && imp.encoding.as_ref() == Some(&h.encoding);
    if !same {
        let descriptor = if h.fingerprint == wire::EMPTY_FINGERPRINT {
            Vec::new()
        } else if let Some((_, d)) = imp.known.iter().find(|(f, _)| *f == h.fingerprint) {
            d.clone()
        } else {
            if !h.counted {
                imp.stats.held.fetch_add(1, Ordering::Relaxed);
            }
            imp.held_bytes += h.payload.len();
            imp.held.push_back(Held { counted: true, ..h });
            let mut over = 0;
            while imp.held.len() > HELD_MESSAGES || (imp.held.len() > 1 && imp.held_bytes > HELD_BYTES) {
                if let Some(old) = imp.held.pop_front() {
                    imp.held_bytes -= old.payload.len();
                    over += 1;
                }
            }
            count_no_descriptor(imp, over);
            return;
        };
        let mut type_info = wire::type_of_encoding(&h.encoding.to_string());
        type_info.descriptor = descriptor;
        imp.encoding = Some(h.encoding.clone());
        imp.fingerprint = h.fingerprint;
        if imp.publ.as_ref().is_none_or(|p| *p.type_info() != type_info) {
            let topic = imp.topic.clone();
            start_import(shared, node, imp, &topic, type_info, key);
        }
    }
    send_import(imp, &h.payload);
}

/// Makes the shoal publisher of an import for `type_info` (its first sample, or a new type).
fn start_import(shared: &Shared, node: &shoal::Node, imp: &mut Import, topic: &str, type_info: TypeInfo, key: &str) {
    let changed = imp.publ.is_some();
    imp.publ = None;
    let mut builder = node.publisher(topic).type_info(type_info.clone());
    // With `policy = "block"` and `[shoal] reliable` nothing may be lost on the way in either: the publisher waits
    // (at most the queue's 1 s) for reliable local subscribers, which holds Zenoh's receive thread, so the link's
    // own flow control slows the far side down instead of an overwrite here.
    if shared.config.drop_policy == DropPolicy::Block && shared.config.reliable {
        builder = builder.reliable(crate::config::BLOCK_MAX);
    }
    let p = match builder.create() {
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
    let want = known_subscribers(node, topic);
    let started = Instant::now();
    while p.subscriber_count() < want && started.elapsed() < MATCH_WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    let waited_ms = started.elapsed().as_millis();
    tracing::info!(topic, r#type = %type_info.name, encoding = %type_info.encoding, "importing");
    emit(&json!({"event": "import", "topic": topic, "key": key, "type": type_info.name,
                 "encoding": type_info.encoding, "descriptor_bytes": type_info.descriptor.len(),
                 "subscribers": p.subscriber_count(), "known_subscribers": want, "waited_ms": waited_ms}));
    imp.publ = Some(p);
}

/// Sends a Zenoh sample's payload on the import's shoal publisher.
fn send_import(imp: &mut Import, payload: &zenoh::bytes::ZBytes) {
    let Some(publ) = imp.publ.as_mut() else { return };
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

/// Declares to Zenoh each key of an import made since the last call (the import subscriber, on `<prefix>/**`,
/// received it).
///
/// A sample whose key the session has not declared is routed from scratch (the key rebuilt as a string and matched
/// against every subscription, then delivered by name and matched again) on Zenoh's receive thread, for every
/// sample: a third of the CPU of a 64 B stream through the bridges. A declared key has a cached route and arrives by
/// its number. Declared here, not in the subscriber's callback (a declaration takes Zenoh's routing tables for
/// writing). A key that fails to declare (logged) is not tried again: its samples still arrive, by name.
fn declare_import_keys(
    session: &zenoh::Session,
    shared: &Shared,
    declared: &mut Vec<zenoh::key_expr::KeyExpr<'static>>,
) {
    let new = std::mem::take(&mut *shared.new_import_keys.lock().unwrap_or_else(|e| e.into_inner()));
    for key in new {
        match session.declare_keyexpr(key.clone()).wait() {
            Ok(k) => declared.push(k),
            Err(e) => tracing::warn!("declaring Zenoh key {key}: {e} (its samples arrive by name, more slowly)"),
        }
    }
    // Ended imports (after the declarations: a key that ended and came back since the last call is declared twice,
    // then undeclared once).
    let ended = std::mem::take(&mut *shared.ended_import_keys.lock().unwrap_or_else(|e| e.into_inner()));
    for key in ended {
        if let Some(i) = declared.iter().position(|k| k.as_str() == key) {
            let _ = session.undeclare(declared.swap_remove(i)).wait();
        }
    }
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
        imports_refused: AtomicU64::new(0),
        new_import_keys: Mutex::new(Vec::new()),
        ended_import_keys: Mutex::new(Vec::new()),
        imports_ended: AtomicU64::new(0),
        clock_ms: AtomicU64::new(0),
        idle_scan_after_ms: AtomicU64::new(0),
    });
    let started = Instant::now();
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
    let mut declared_keys = Vec::new();
    let stats_every = Duration::from_millis(config.stats_interval_ms);
    let scan_every = Duration::from_millis(config.scan_interval_ms);
    let (mut next_stats, mut next_scan) = (Instant::now() + stats_every, Instant::now());
    let stats_line = |exports: &BTreeMap<String, Export>, last: bool| {
        let imports = imports.lock().unwrap_or_else(|e| e.into_inner());
        let stats = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
        let topics: Vec<_> = stats
            .iter()
            .map(|(t, s)| {
                s.to_json(exports.contains_key(t), imports.values().any(|i| i.topic == *t && i.publ.is_some()))
            })
            .collect();
        let mut v = json!({"event": "stats", "topics": topics, "bad_keys": shared.bad_keys.load(Ordering::Relaxed),
                           "imports_refused": shared.imports_refused.load(Ordering::Relaxed),
                           "imports_ended": shared.imports_ended.load(Ordering::Relaxed)});
        if last {
            v["final"] = json!(true);
        }
        v
    };
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        shared
            .clock_ms
            .store(u64::try_from(now.duration_since(started).as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
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
        declare_import_keys(&session, &shared, &mut declared_keys);
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
    for k in declared_keys {
        let _ = session.undeclare(k).wait();
    }
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
    fn the_import_idle_longest_gives_its_slot_once_idle_long_enough() {
        let keys: Vec<String> = ["a", "b", "c"].iter().map(|k| (*k).to_string()).collect();
        let imports = |last: [u64; 3]| keys.iter().zip(last).collect::<Vec<_>>().into_iter();
        assert_eq!(longest_idle(imports([500, 100, 300]), 1100, 1000), Ok(&keys[1]), "b idle 1000 ms");
        assert_eq!(longest_idle(imports([500, 100, 300]), 1099, 1000), Err(1100), "none yet: not before 1100");
        assert_eq!(longest_idle(imports([0, 0, 0]), 5, 100), Err(100));
        assert_eq!(longest_idle(std::iter::empty(), 5, 100), Err(u64::MAX));
    }

    #[test]
    fn far_bridges_sequence_numbers_are_kept_for_the_newest_sixteen() {
        let mut last = VecDeque::new();
        assert_eq!(note_seq(&mut last, 1, 10), None);
        assert_eq!(note_seq(&mut last, 1, 11), Some(10));
        // Far bridges restarting again and again (each time a new id): the table stays at 16.
        for id in 100..1100 {
            assert_eq!(note_seq(&mut last, id, 1), None);
        }
        assert_eq!(last.len(), FAR_BRIDGES);
        assert_eq!(note_seq(&mut last, 1, 12), None, "the oldest was forgotten");
        assert_eq!(note_seq(&mut last, 1099, 2), Some(1), "the newest kept");
    }

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
        Queue::new(3, 100, policy)
    }

    fn item(n: u8, len: usize) -> Item {
        Item { payload: vec![n; len], type_info: Arc::new(TypeInfo::default()) }
    }

    fn drain(q: &Queue) -> Vec<u8> {
        q.close();
        let mut out = VecDeque::new();
        let mut all = Vec::new();
        while q.pop_all(&mut out) {
            all.extend(out.drain(..).map(|i| i.payload[0]));
        }
        all
    }

    #[test]
    fn block_waits_for_room_and_loses_nothing() {
        let q = Arc::new(queue(DropPolicy::Block));
        let worker = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let (mut out, mut all) = (VecDeque::new(), Vec::new());
                while q.pop_all(&mut out) {
                    std::thread::sleep(Duration::from_millis(1));
                    all.extend(out.drain(..).map(|i| i.payload[0]));
                }
                all
            })
        };
        let dropped: u64 = (1..=50).map(|n| q.push(item(n, 1))).sum();
        q.close();
        assert_eq!(dropped, 0);
        assert_eq!(worker.join().unwrap(), (1..=50).collect::<Vec<u8>>());
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
