//! [`Publisher`] and the zero-copy [`Loan`].

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::io::Command;
use crate::pubsub::events::{Event, EventSink, Peer, via_of_layer};
use crate::pubsub::history::{History, HistoryStore, Kept};
use crate::pubsub::runtime::RuntimeShare;
use crate::pubsub::subscriber::SubShared;
use crate::pubsub::waker;
use crate::pubsub::{CreateError, LoanError, SendError};
use crate::registration::RemoteTopic;
use crate::registration::{EntityKey, Layer, LayerKind, LayerPar, LocalTopic, ShoalPar, TopicStats};
use crate::sample::now_ns;
use crate::sample::{Payload, Sample};
use crate::stats::{ShoalStats, Via};
use crate::sync::lock;
use crate::transport::shm_ring::{self, DoorbellRemote, FlowStats, RingWriter, Ringers};
use crate::transport::{HistorySource, LayerWriter, SampleMeta};
use crate::types::TypeInfo;

/// A matched subscriber in another process.
struct RemoteSub {
    topic: RemoteTopic,
    /// The doorbell of its process when it reads our native ring.
    doorbell: Option<Arc<DoorbellRemote>>,
}

/// The eCAL-facing layer writers of one publisher and which of them have subscribers.
struct LayerSet {
    writers: Vec<Box<dyn LayerWriter>>,
    active: Vec<bool>,
}

#[derive(Default)]
struct Conns {
    remote: HashMap<EntityKey, RemoteSub>,
    intra: Vec<Arc<SubShared>>,
}

impl Conns {
    /// The doorbells of the subscriber processes reading the native ring (one per process; none when nobody
    /// reads it).
    fn ring_doorbells(&self) -> Vec<Arc<DoorbellRemote>> {
        let mut doorbells: Vec<Arc<DoorbellRemote>> = Vec::new();
        for db in self.remote.values().filter_map(|r| r.doorbell.as_ref()) {
            if !doorbells.iter().any(|d| Arc::ptr_eq(d, db)) {
                doorbells.push(Arc::clone(db));
            }
        }
        doorbells
    }
}

/// A publisher's statistics window.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    clock: u64,
    bytes: u64,
    /// The last window's frequency, mHz, and bandwidth, bytes/s.
    freq_mhz: i32,
    bandwidth_bps: f64,
}

/// The part of a publisher that the runtime and the I/O thread share.
pub(crate) struct PubShared {
    pub(crate) id: u64,
    pub(crate) topic: Arc<str>,
    pub(crate) type_info: Arc<TypeInfo>,
    conns: Mutex<Conns>,
    /// Bumped on every connection change; the publisher re-reads `conns` only when it moved.
    version: AtomicU64,
    pub(crate) clock: AtomicU64,
    pub(crate) bytes: AtomicU64,
    last_size: AtomicU64,
    /// The statistics window: its start, the clock and bytes then, and the last window's frequency and bandwidth.
    freq: Mutex<Window>,
    /// Fired when a subscriber connects, for `wait_for_subscribers`.
    cond: std::sync::Condvar,
    host_name: String,
    /// Layer order for subscribers on this host and on other hosts (`[publisher] priority_local`/`_remote`).
    priority_local: Vec<LayerKind>,
    priority_remote: Vec<LayerKind>,
    /// Samples the eCAL-facing layers could not send, and those the application reported (`count_dropped`).
    layer_drops: AtomicU64,
    /// The eCAL-facing layers (UDP, eCAL shared memory), in priority order. Shared with the I/O thread so that a
    /// layer starts when a subscriber matches (eCAL's lazy start), not at the next send.
    layers: Mutex<LayerSet>,
    /// True while a layer has subscribers; checked without the lock on every send.
    layers_active: AtomicBool,
    /// True while a remote subscriber reads the native ring.
    ring_active: AtomicBool,
    /// The native ring's registration parameters (set again by the publisher when the ring grows).
    ring_par: Mutex<Option<ShoalPar>>,
    /// The ring's flow-control figures, for registration (copied by the publisher when they change).
    flow: FlowCounters,
    /// Where connection events go (`PublisherBuilder::on_event`).
    events: Option<Arc<EventSink>>,
    /// The messages kept for late joiners (`PublisherBuilder::history`); `None` without a history. A send appends
    /// and takes its connections under this lock, a late joiner gets the kept messages and is connected under it
    /// (`pubsub/history.rs`).
    pub(crate) history: Option<Arc<Mutex<HistoryStore>>>,
}

/// The registration kind of a layer named in a priority list.
fn layer_kind(l: crate::config::EcalLayer) -> LayerKind {
    match l {
        crate::config::EcalLayer::Shm => LayerKind::Shm,
        crate::config::EcalLayer::Udp => LayerKind::Udp,
        crate::config::EcalLayer::Tcp => LayerKind::Tcp,
    }
}

/// [`FlowStats`] shared with the registration.
#[derive(Debug, Default)]
struct FlowCounters {
    waits: AtomicU64,
    wait_ns: AtomicU64,
    evicted: AtomicU64,
}

impl std::fmt::Debug for PubShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubShared").field("id", &self.id).field("topic", &self.topic).finish_non_exhaustive()
    }
}

impl PubShared {
    pub(crate) fn connect_intra(&self, s: &Arc<SubShared>) {
        // A subscriber asking for history gets the kept messages before it is connected, under the store's lock:
        // a send holds it while it keeps its message and takes its connections.
        let mut store = self.history.as_ref().filter(|_| s.history() != History::Off).map(|h| lock(h));
        if let Some(store) = store.as_mut() {
            let kept: Vec<Kept> = store.resend(s.history()).cloned().collect();
            s.push_history(kept.into_iter().map(|k| self.kept_sample(k)));
        }
        let mut c = lock(&self.conns);
        if !c.intra.iter().any(|x| x.id == s.id) {
            c.intra.push(Arc::clone(s));
            if let Some(ev) = &self.events {
                let peer = Peer::same_process(&self.host_name, s.id);
                ev.connected(peer, vec![Via::SameProcess], &s.type_info, &self.type_info);
            }
        }
        self.changed();
    }

    /// A kept message as a same-process sample.
    fn kept_sample(&self, k: Kept) -> Sample {
        Sample {
            payload: Payload::Shared(k.payload),
            send_time_ns: k.send_time_ns,
            via: Via::SameProcess,
            clock: k.clock,
            publisher_id: self.id,
            type_info: Arc::clone(&self.type_info),
            topic: Arc::clone(&self.topic),
        }
    }

    pub(crate) fn disconnect_intra(&self, sub_id: u64) {
        let mut c = lock(&self.conns);
        let before = c.intra.len();
        c.intra.retain(|x| x.id != sub_id);
        if c.intra.len() != before
            && let Some(ev) = &self.events
        {
            ev.push(Event::Disconnected { peer: Peer::same_process(&self.host_name, sub_id) });
        }
        self.changed();
    }

    /// A matched (or updated) remote subscriber; true when our registration changed (a layer started, the ring
    /// became active) and must be sent again.
    pub(crate) fn connect_remote(&self, topic: RemoteTopic, doorbell: Option<Arc<DoorbellRemote>>) -> bool {
        let new_event = self.events.as_ref().map(|_| (Peer::remote(&topic), topic.type_info.clone()));
        let key = topic.key.clone();
        let before = lock(&self.conns).remote.insert(key.clone(), RemoteSub { topic, doorbell });
        // Layers first, then wake `wait_for_subscribers`: a send right after the match must find them started.
        let changed = self.assign_layers();
        if let (Some(ev), Some((peer, theirs))) = (&self.events, new_event) {
            match before {
                None => {
                    let via = self.via_of(&key).into_iter().collect();
                    ev.connected(peer, via, &theirs, &self.type_info);
                }
                // An updated registration: a type that now disagrees is reported once.
                Some(old) if theirs.mismatches(&self.type_info) && old.topic.type_info != theirs => {
                    ev.push(Event::TypeMismatch { peer, theirs, ours: (*self.type_info).clone() })
                }
                Some(_) => {}
            }
        }
        self.changed();
        changed
    }

    /// The layer that serves the remote subscriber `key`: the native ring when it reads it, else the eCAL-facing
    /// layer [`Self::assign_layers`] chose.
    fn via_of(&self, key: &EntityKey) -> Option<Via> {
        let c = lock(&self.conns);
        let r = c.remote.get(key)?;
        if r.doorbell.is_some() {
            return Some(Via::ShoalRing);
        }
        let set = lock(&self.layers);
        let chosen = self.choose_layer(&set.writers, &r.topic)?;
        via_of_layer(set.writers[chosen].kind())
    }

    /// The layer that carries our messages to `remote` (not reading our ring): the first of the priority list for
    /// its host (`[publisher] priority_local` / `priority_remote`) that one of `writers` has and that accepts it;
    /// an index into `writers`.
    fn choose_layer(&self, writers: &[Box<dyn LayerWriter>], remote: &RemoteTopic) -> Option<usize> {
        let same_host = remote.key.host_name == self.host_name;
        let order = if same_host { &self.priority_local } else { &self.priority_remote };
        order.iter().find_map(|kind| writers.iter().position(|l| l.kind() == *kind && l.accepts(remote, same_host)))
    }

    /// The doorbells of the subscriber processes that read our native ring, one per process.
    pub(crate) fn ring_doorbells(&self) -> Vec<Arc<DoorbellRemote>> {
        lock(&self.conns).ring_doorbells()
    }

    /// A remote subscriber went away; true when our registration changed.
    pub(crate) fn disconnect_remote(&self, key: &EntityKey) -> bool {
        let removed = lock(&self.conns).remote.remove(key);
        if let (Some(ev), Some(r)) = (&self.events, removed) {
            ev.push(Event::Disconnected { peer: Peer::remote(&r.topic) });
        }
        let changed = self.assign_layers();
        self.changed();
        changed
    }

    /// Chooses the layer of every remote subscriber: the native ring when it reads it (same host, shoal), else the
    /// first eCAL-facing layer of the priority list for its host (local or remote) that accepts it; starts layers that get their first subscriber. True when the
    /// registration (layer adverts, ring activity) changed.
    fn assign_layers(&self) -> bool {
        let c = lock(&self.conns);
        let mut set = lock(&self.layers);
        let LayerSet { writers, active } = &mut *set;
        let mut assigned: Vec<Vec<&RemoteTopic>> = vec![Vec::new(); writers.len()];
        for r in c.remote.values().filter(|r| r.doorbell.is_none()) {
            if let Some(i) = self.choose_layer(writers, &r.topic) {
                assigned[i].push(&r.topic);
            }
        }
        let before: Vec<_> = writers.iter().map(|l| l.advert()).collect();
        // Subscribers that ask for our history and do not read it in our ring fetch it from a layer that serves it
        // apart from their live data (`pubsub/history.rs`).
        let askers: Vec<&RemoteTopic> = if self.history.is_some() {
            c.remote
                .values()
                .filter(|r| r.doorbell.is_none() && r.topic.announced_history().is_some_and(|p| p.history_depth > 0))
                .map(|r| &r.topic)
                .collect()
        } else {
            Vec::new()
        };
        for ((layer, targets), is_active) in writers.iter_mut().zip(&assigned).zip(active.iter_mut()) {
            if self.history.is_some() {
                layer.set_history_askers(&askers);
            }
            // Subscribers reading the native ring connect no other layer.
            let peers: Vec<&RemoteTopic> = c
                .remote
                .values()
                .filter(|r| r.doorbell.is_none() && layer.accepts(&r.topic, r.topic.key.host_name == self.host_name))
                .map(|r| &r.topic)
                .collect();
            layer.set_peers(&peers);
            layer.set_targets(targets);
            *is_active = !targets.is_empty();
        }
        self.layers_active.store(active.iter().any(|a| *a), Ordering::Release);
        let adverts_changed = writers.iter().map(|l| l.advert()).collect::<Vec<_>>() != before;
        let ring_active = c.remote.values().any(|r| r.doorbell.is_some());
        let ring_changed = self.ring_active.swap(ring_active, Ordering::Relaxed) != ring_active;
        adverts_changed || ring_changed
    }

    /// Our registration: the native ring (if any) and every started eCAL-facing layer.
    pub(crate) fn local_topic(&self) -> LocalTopic {
        let mut layers = Vec::new();
        if let Some(par) = lock(&self.ring_par).clone() {
            let active = self.ring_active.load(Ordering::Relaxed);
            layers.push(Layer::new(LayerKind::ShoalRing, true, active, LayerPar::Shoal(par)));
        } else if let Some(h) = &self.history {
            // No ring (switched off): the entry still says what the publisher keeps, for subscribers that fetch it
            // over another layer.
            let h = lock(h);
            let par = ShoalPar { history_depth: h.depth(), history_bytes: h.max_bytes() as u64, ..ShoalPar::default() };
            layers.push(Layer::new(LayerKind::ShoalRing, false, false, LayerPar::Shoal(par)));
        }
        layers.extend(lock(&self.layers).writers.iter().filter_map(|l| l.advert()));
        LocalTopic {
            id: self.id,
            topic_name: self.topic.to_string(),
            type_info: (*self.type_info).clone(),
            layers,
            stats: self.current_stats(),
        }
    }

    fn changed(&self) {
        self.version.fetch_add(1, Ordering::Release);
        self.cond.notify_all();
    }

    /// Matched subscribers: (same process, other processes).
    pub(crate) fn connection_counts(&self) -> (usize, usize) {
        let c = lock(&self.conns);
        (c.intra.len(), c.remote.len())
    }

    /// Matched subscribers: (on this host, on other hosts).
    fn host_counts(&self, host: &str) -> (usize, usize) {
        let c = lock(&self.conns);
        let local = c.remote.keys().filter(|k| k.host_name == host).count();
        (c.intra.len() + local, c.remote.len() - local)
    }

    /// The statistics of the periodic registration: ends the current window at `now` and starts the next.
    pub(crate) fn stats(&self, now: Instant) -> TopicStats {
        let clock = self.clock.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let mut w = lock(&self.freq);
        let dt = now.saturating_duration_since(w.start).as_secs_f64();
        if dt > 0.0 {
            w.freq_mhz = ((clock - w.clock.min(clock)) as f64 / dt * 1000.0) as i32;
            w.bandwidth_bps = (bytes - w.bytes.min(bytes)) as f64 / dt;
        }
        (w.start, w.clock, w.bytes) = (now, clock, bytes);
        let window = *w;
        drop(w);
        // Messages a layer lost after it took them (sent from the I/O thread) count even if no send follows.
        let late: u64 = lock(&self.layers).writers.iter_mut().map(|l| l.take_late_drops()).sum();
        if late > 0 {
            self.layer_drops.fetch_add(late, Ordering::Relaxed);
        }
        self.stats_with(clock, bytes, &window)
    }

    /// The statistics for an immediate re-registration (a match, a layer change): the last window's figures, the
    /// window itself left to the periodic registration.
    fn current_stats(&self) -> TopicStats {
        let window = *lock(&self.freq);
        self.stats_with(self.clock.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed), &window)
    }

    fn stats_with(&self, clock: u64, bytes: u64, w: &Window) -> TopicStats {
        let (local, external) = self.host_counts(&self.host_name);
        let (kept, kept_bytes, resent, resent_bytes) =
            self.history.as_ref().map_or((0, 0, 0, 0), |h| lock(h).counters());
        TopicStats {
            topic_size: self.last_size.load(Ordering::Relaxed) as i32,
            connections_local: local as i32,
            connections_external: external as i32,
            message_drops: self.layer_drops.load(Ordering::Relaxed).min(i32::MAX as u64) as i32,
            data_clock: clock as i64,
            data_frequency_mhz: w.freq_mhz,
            shoal: Some(ShoalStats {
                bytes,
                bandwidth_bps: w.bandwidth_bps,
                connections: Vec::new(),
                reliable_waits: self.flow.waits.load(Ordering::Relaxed),
                reliable_wait_ns: self.flow.wait_ns.load(Ordering::Relaxed),
                reliable_evicted: self.flow.evicted.load(Ordering::Relaxed),
                history_kept: kept,
                history_kept_bytes: kept_bytes,
                history_resent: resent,
                history_resent_bytes: resent_bytes,
                ..ShoalStats::default()
            }),
            ..TopicStats::default()
        }
    }
}

/// Cached copy of the connections, refreshed when `PubShared::version` moves.
#[derive(Default)]
struct ConnCache {
    version: u64,
    /// Doorbells of the subscriber processes reading the native ring (empty: nobody reads it); shared with the waker
    /// thread when there are several.
    doorbells: Arc<waker::WakeSet>,
    intra: Vec<Arc<SubShared>>,
}

/// Sends messages on one topic. Dropping it unregisters it.
///
/// `send` and `loan` take `&mut self`: a publisher is one writer. Move it to another thread freely (`Send`).
pub struct Publisher {
    shared: Arc<PubShared>,
    rt: Arc<RuntimeShare>,
    ring: Option<RingWriter>,
    cache: ConnCache,
    clock: u64,
    scratch: Vec<u8>,
    /// The flow-control figures last copied to `shared.flow` (reliable publishers only).
    flow_seen: Option<FlowStats>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("id", &self.shared.id)
            .field("topic", &self.shared.topic)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    pub(crate) fn create(
        rt: &Arc<RuntimeShare>,
        topic: &str,
        type_info: TypeInfo,
        reliable: Option<Duration>,
        history: u32,
        events: Option<Arc<EventSink>>,
    ) -> Result<Publisher, CreateError> {
        if topic.is_empty() {
            return Err(CreateError::EmptyTopic);
        }
        let id = rt.new_entity_id();
        let history = history.min(rt.config.history.max_depth);
        let ring = if rt.config.shm_ring.enabled {
            // A ring holds a history of n in n + 1 slots (the next one may be being written): a publisher with a
            // history gets a ring that deep, and so does every ring it grows into.
            let history_slots = history.saturating_add(1).next_power_of_two();
            let mut cfg = rt.config.shm_ring.clone();
            cfg.slot_count = cfg.slot_count.max(history_slots);
            let mut ring = RingWriter::create(&cfg, id)?;
            // A grown ring keeps at least a subscriber queue's depth of large messages.
            let queue_depth = u32::try_from(rt.config.receive.queue.depth).unwrap_or(u32::MAX);
            ring.set_grown_min_slots(queue_depth.max(history_slots));
            ring.set_flow_control(reliable);
            // Subscriber processes tell our doorbell when they stop being spin-only (`Ringers`).
            ring.announce_doorbell(rt.doorbell.name());
            Some(ring)
        } else {
            None
        };
        let shared = Arc::new(PubShared {
            id,
            topic: Arc::from(topic),
            type_info: Arc::new(type_info),
            conns: Mutex::new(Conns::default()),
            version: AtomicU64::new(1),
            clock: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            last_size: AtomicU64::new(0),
            freq: Mutex::new(Window { start: Instant::now(), clock: 0, bytes: 0, freq_mhz: 0, bandwidth_bps: 0.0 }),
            cond: std::sync::Condvar::new(),
            host_name: rt.identity.host_name.clone(),
            priority_local: rt.config.layers.priority_local.iter().map(|l| layer_kind(*l)).collect(),
            priority_remote: rt.config.layers.priority_remote.iter().map(|l| layer_kind(*l)).collect(),
            layer_drops: AtomicU64::new(0),
            layers: Mutex::new(LayerSet { writers: Vec::new(), active: Vec::new() }),
            layers_active: AtomicBool::new(false),
            ring_active: AtomicBool::new(false),
            ring_par: Mutex::new(None),
            flow: FlowCounters::default(),
            events,
            history: (history > 0)
                .then(|| Arc::new(Mutex::new(HistoryStore::new(history, rt.config.history.max_bytes)))),
        });
        let mut writers: Vec<Box<dyn LayerWriter>> =
            rt.writer_factories.iter().filter_map(|f| f.create(id, topic, &shared.type_info)).collect();
        if let Some(h) = &shared.history {
            for w in &mut writers {
                w.set_history(Arc::clone(h) as Arc<dyn HistorySource>);
            }
        }
        *lock(&shared.layers) = LayerSet { active: vec![false; writers.len()], writers };
        let p = Publisher {
            shared: Arc::clone(&shared),
            rt: Arc::clone(rt),
            ring,
            cache: ConnCache::default(),
            clock: 0,
            scratch: Vec::new(),
            flow_seen: reliable.map(|_| FlowStats::default()),
        };
        p.update_ring_par();
        rt.add_publisher(&shared);
        rt.io_send(Command::AddPublisher(p.local_topic()));
        Ok(p)
    }

    fn local_topic(&self) -> LocalTopic {
        self.shared.local_topic()
    }

    /// Publishes the ring's current geometry to the shared state (at creation and after growth).
    fn update_ring_par(&self) {
        let (history_depth, history_bytes) = self.shared.history.as_ref().map_or((0, 0), |h| {
            let h = lock(h);
            (h.depth(), h.max_bytes() as u64)
        });
        *lock(&self.shared.ring_par) = self.ring.as_ref().map(|ring| ShoalPar {
            segment: ring.segment_name().to_string(),
            slot_count: ring.slot_count(),
            slot_size: ring.slot_size() as u64,
            generation: ring.generation() as u32,
            doorbell: String::new(),
            page_kb: u32::try_from(ring.page_size() / 1024).unwrap_or(u32::MAX),
            history_depth,
            history_bytes,
        });
    }

    /// The ring moved to a bigger segment: announce it at once.
    fn ring_grew(&self) {
        self.update_ring_par();
        self.rt.io_send(Command::Update(self.local_topic()));
    }

    /// Whether this publisher waits for reliable subscribers (see
    /// [`PublisherBuilder::reliable`](crate::builder::PublisherBuilder::reliable)).
    pub fn is_reliable(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.flow_stats_enabled())
    }

    /// What the reliable flow control did so far: waits, time waited, subscribers taken out of it (process gone,
    /// or a full ring behind for the whole timeout). All zero for a best-effort publisher.
    pub fn flow_stats(&self) -> FlowStats {
        self.ring.as_ref().map(|r| r.flow_stats()).unwrap_or_default()
    }

    /// The entity id announced in registration (eCAL `topic_id`).
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.shared.topic
    }

    /// The type information announced for this topic.
    pub fn type_info(&self) -> &TypeInfo {
        &self.shared.type_info
    }

    /// Number of matched subscribers, in this process and in others.
    pub fn subscriber_count(&self) -> usize {
        let (a, b) = self.shared.connection_counts();
        a + b
    }

    /// Counts `n` messages the application dropped instead of sending (for example input that did not convert):
    /// registration announces them with the layers' send failures as this publisher's `message_drops`, which
    /// monitors show.
    pub fn count_dropped(&self, n: u64) {
        self.shared.layer_drops.fetch_add(n, Ordering::Relaxed);
    }

    /// Messages this publisher's registration announces as dropped (`message_drops`): those an eCAL-facing layer
    /// could not send to at least one of its subscribers (e.g. a TCP connection's full send queue), plus those
    /// reported with [`count_dropped`](Self::count_dropped).
    pub fn drops(&self) -> u64 {
        self.shared.layer_drops.load(Ordering::Relaxed)
    }

    /// Waits until at least `n` subscribers (in this process and in others) are matched, at most `timeout`; gives
    /// how many are, or [`MatchTimeout`](crate::pubsub::MatchTimeout) with how many were when the time was up. The
    /// counterpart of [`Subscriber::wait_for_publishers`](crate::Subscriber::wait_for_publishers).
    pub fn wait_for_subscribers(&self, n: usize, timeout: Duration) -> Result<usize, crate::pubsub::MatchTimeout> {
        let deadline = Instant::now() + timeout;
        let mut c = lock(&self.shared.conns);
        loop {
            let matched = c.intra.len() + c.remote.len();
            if matched >= n {
                return Ok(matched);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(crate::pubsub::MatchTimeout { wanted: n, matched, timeout });
            }
            c = self.shared.cond.wait_timeout(c, deadline - now).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// The doorbells to ring after a publish, from the connections `c`; several are also given to the waker thread,
    /// which rings them when a send hands them over.
    fn ringers(&self, c: &Conns) -> Arc<waker::WakeSet> {
        let own = self.ring.as_ref().filter(|r| r.doorbell_announced()).map(|_| Arc::clone(&self.rt.doorbell));
        self.rt.waker.watch(Ringers::new(c.ring_doorbells(), own))
    }

    /// Takes the connections anew when they changed since the last send (inline: every send asks, before it publishes).
    #[inline]
    fn refresh(&mut self) {
        let v = self.shared.version.load(Ordering::Acquire);
        if v != self.cache.version {
            self.reconnect(v);
        }
    }

    /// [`refresh`](Self::refresh) once the connections changed (version `v`): out of line.
    #[inline(never)]
    fn reconnect(&mut self, v: u64) {
        let c = lock(&self.shared.conns);
        self.cache = ConnCache { version: v, doorbells: self.ringers(&c), intra: c.intra.clone() };
        if let Some(ring) = &mut self.ring
            && self.shared.history.is_none()
        {
            // Warm reuse of the ring's payload areas waits until every subscriber reading it publishes its cursor.
            // (Never with a history: the ring keeps it for late joiners, so areas are reused only a ring later.)
            ring.set_expected_readers(c.remote.values().filter(|r| r.doorbell.is_some()).count());
        }
    }

    /// Sends a copy of `data`, stamped with the current time.
    pub fn send(&mut self, data: &[u8]) -> Result<(), SendError> {
        self.send_at(data, now_ns())
    }

    /// Sends a copy of `data` with an explicit send time (µs since the UNIX epoch, eCAL's unit).
    pub fn send_with_time(&mut self, data: &[u8], send_time_us: i64) -> Result<(), SendError> {
        self.send_at(data, send_time_us.saturating_mul(1000))
    }

    fn send_at(&mut self, data: &[u8], send_time_ns: i64) -> Result<(), SendError> {
        self.refresh();
        let clock = self.clock + 1;
        // With a history the ring is written for readers yet to come too.
        if (!self.cache.doorbells.is_empty() || self.shared.history.is_some())
            && let Some(ring) = &mut self.ring
        {
            let published = if data.len() >= waker::EARLY_WAKE_BYTES {
                let (w, bells) = (&self.rt.waker, &self.cache.doorbells);
                ring.write_announced(data, send_time_ns, clock, || {
                    waker::ring_before_copy(w, bells);
                })?
            } else {
                ring.write(data, send_time_ns, clock)?
            };
            if published.segment_changed {
                self.ring_grew();
            }
            waker::ring_after_publish(&self.rt.waker, &self.cache.doorbells);
        }
        if self.shared.history.is_some() {
            let payload: Arc<[u8]> = Arc::from(data);
            self.keep(&payload, send_time_ns, clock);
            self.write_layers(data, send_time_ns, clock);
            self.deliver_intra_shared(payload, send_time_ns, clock);
        } else {
            self.write_layers(data, send_time_ns, clock);
            self.deliver_intra(data, send_time_ns, clock);
        }
        self.finish(clock, data.len());
        Ok(())
    }

    /// Keeps a message in the history and takes the connections under the store's lock: a same-process subscriber
    /// connected before gets it live, one connected after got it with the history (`pubsub/history.rs`).
    fn keep(&mut self, payload: &Arc<[u8]>, send_time_ns: i64, clock: u64) {
        let Some(h) = &self.shared.history else { return };
        let mut store = lock(h);
        store.push(Kept { clock, send_time_ns, payload: Arc::clone(payload) });
        let v = self.shared.version.load(Ordering::Acquire);
        if v != self.cache.version {
            let c = lock(&self.shared.conns);
            self.cache = ConnCache { version: v, doorbells: self.ringers(&c), intra: c.intra.clone() };
        }
        drop(store);
    }

    /// Sends through every eCAL-facing layer that has subscribers; a failing layer drops (counted), the others
    /// still get the sample.
    #[inline]
    fn write_layers(&self, data: &[u8], send_time_ns: i64, clock: u64) {
        if self.shared.layers_active.load(Ordering::Acquire) {
            self.write_active_layers(data, send_time_ns, clock);
        }
    }

    /// [`write_layers`](Self::write_layers) once a layer has subscribers: out of line, so that a send through the ring
    /// alone does not pay for this one's frame.
    #[inline(never)]
    fn write_active_layers(&self, data: &[u8], send_time_ns: i64, clock: u64) {
        // A layer that had to change its advert to take this payload (eCAL shm: memfile re-created under a new
        // name) is re-registered before the write, and readers get 5 ms to follow, as eCAL does.
        let mut set = lock(&self.shared.layers);
        let mut readvertise = false;
        {
            let LayerSet { writers, active } = &mut *set;
            for (layer, _) in writers.iter_mut().zip(active.iter()).filter(|(_, a)| **a) {
                readvertise |= layer.prepare(data.len());
            }
        }
        if readvertise {
            // `local_topic` reads the layer set.
            drop(set);
            self.rt.io_send(Command::Update(self.local_topic()));
            std::thread::sleep(Duration::from_millis(5));
            set = lock(&self.shared.layers);
        }
        let meta = SampleMeta { publisher_id: self.shared.id, clock, send_time_us: send_time_ns.div_euclid(1000) };
        let LayerSet { writers, active } = &mut *set;
        for (layer, _) in writers.iter_mut().zip(active.iter()).filter(|(_, a)| **a) {
            if let Err(e) = layer.write(data, &meta) {
                self.shared.layer_drops.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("topic {}: {}", self.shared.topic, e.chain());
            }
            let late = layer.take_late_drops();
            if late > 0 {
                self.shared.layer_drops.fetch_add(late, Ordering::Relaxed);
            }
        }
    }

    fn deliver_intra(&self, data: &[u8], send_time_ns: i64, clock: u64) {
        if !self.cache.intra.is_empty() {
            self.deliver_intra_shared(Arc::from(data), send_time_ns, clock);
        }
    }

    /// Gives every same-process subscriber a reference to `payload`.
    fn deliver_intra_shared(&self, payload: Arc<[u8]>, send_time_ns: i64, clock: u64) {
        if self.cache.intra.is_empty() {
            return;
        }
        for s in &self.cache.intra {
            s.push_inbox(Sample {
                payload: Payload::Shared(Arc::clone(&payload)),
                send_time_ns,
                via: Via::SameProcess,
                clock,
                publisher_id: self.shared.id,
                type_info: Arc::clone(&self.shared.type_info),
                topic: Arc::clone(&self.shared.topic),
            });
        }
        self.rt.self_ringer.ring();
    }

    fn finish(&mut self, clock: u64, len: usize) {
        shm_ring::note_publish(len);
        if let (Some(seen), Some(ring)) = (&mut self.flow_seen, &self.ring) {
            let now = ring.flow_stats();
            if now != *seen {
                *seen = now;
                self.shared.flow.waits.store(now.waits, Ordering::Relaxed);
                self.shared.flow.wait_ns.store(now.wait_ns, Ordering::Relaxed);
                self.shared.flow.evicted.store(now.evicted(), Ordering::Relaxed);
            }
        }
        self.clock = clock;
        self.shared.clock.store(clock, Ordering::Relaxed);
        // This publisher is the counter's only writer: a load and a store, not a locked add, which would make every
        // send wait until its ring stores reached the reader's core.
        self.shared.bytes.store(self.shared.bytes.load(Ordering::Relaxed).wrapping_add(len as u64), Ordering::Relaxed);
        self.shared.last_size.store(len as u64, Ordering::Relaxed);
    }

    /// Loans `len` bytes of a shared-memory slot to write a message in place (zero-copy).
    ///
    /// The returned [`Loan`] must be written ([`Loan::write`] or [`Loan::copy_from_slice`]) before it can be sent.
    pub fn loan(&mut self, len: usize) -> Result<Loan<'_, Unwritten>, LoanError> {
        self.refresh();
        match &mut self.ring {
            Some(ring) => {
                ring.loan(len)?;
                if len >= waker::EARLY_WAKE_BYTES {
                    // The loan is marked as being written: sleeping subscribers wake while it is filled.
                    waker::ring_before_copy(&self.rt.waker, &self.cache.doorbells);
                }
            }
            None => {
                self.scratch.clear();
                self.scratch.resize(len, 0);
            }
        }
        Ok(Loan { publ: self, len, _state: PhantomData })
    }

    fn loan_buf(&mut self, len: usize) -> &mut [u8] {
        match &mut self.ring {
            // Re-lending the same length returns the same slot and cannot grow again, so it cannot fail; the
            // scratch buffer is only a defensive fallback.
            Some(ring) => match ring.loan(len) {
                Ok(buf) => buf,
                Err(_) => {
                    self.scratch.resize(len, 0);
                    &mut self.scratch[..len]
                }
            },
            None => {
                if self.scratch.len() < len {
                    self.scratch.resize(len, 0);
                }
                &mut self.scratch[..len]
            }
        }
    }

    fn commit_loan(&mut self, len: usize) {
        let t = now_ns();
        let clock = self.clock + 1;
        match &mut self.ring {
            Some(ring) => {
                // Same-process subscribers and the eCAL layers get their copy before the slot is published (and may
                // be overwritten).
                let need_copy = !self.cache.intra.is_empty()
                    || self.shared.layers_active.load(Ordering::Acquire)
                    || self.shared.history.is_some();
                let copy: Option<Arc<[u8]>> =
                    if need_copy { ring.loan(len).ok().map(|b| Arc::from(&*b)) } else { None };
                // `Publisher::loan` loaned the slot and only the `Loan` it returned, which borrows the publisher,
                // commits it: the loan is there, of this length (the typestate's invariant).
                let published = match ring.commit(len, t, clock) {
                    Ok(p) => p,
                    Err(e) => unreachable!("a written Loan holds the ring's loan of its length: {e}"),
                };
                waker::ring_after_publish(&self.rt.waker, &self.cache.doorbells);
                if published.segment_changed {
                    self.ring_grew();
                }
                if let Some(data) = copy {
                    self.keep(&data, t, clock);
                    self.write_layers(&data, t, clock);
                    self.deliver_intra_shared(data, t, clock);
                }
            }
            None => {
                let data = std::mem::take(&mut self.scratch);
                if self.shared.history.is_some() {
                    let payload: Arc<[u8]> = Arc::from(&data[..len]);
                    self.keep(&payload, t, clock);
                    self.write_layers(&data[..len], t, clock);
                    self.deliver_intra_shared(payload, t, clock);
                } else {
                    self.write_layers(&data[..len], t, clock);
                    self.deliver_intra(&data[..len], t, clock);
                }
                self.scratch = data;
            }
        }
        self.finish(clock, len);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.rt.remove_publisher(self.shared.id);
        self.rt.io_send(Command::Remove(self.shared.id));
    }
}

/// Typestate of a [`Loan`] whose bytes were not written yet.
#[derive(Debug)]
pub struct Unwritten;
/// Typestate of a [`Loan`] ready to send.
#[derive(Debug)]
pub struct Written;

/// A shared-memory slot loaned by [`Publisher::loan`]; only a written loan (`Loan<Written>`) can be sent.
///
/// Dropping a loan without sending it sends nothing.
#[must_use = "a loan sends nothing until `send()` is called"]
pub struct Loan<'a, S> {
    publ: &'a mut Publisher,
    len: usize,
    _state: PhantomData<S>,
}

impl<S> std::fmt::Debug for Loan<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan").field("topic", &self.publ.shared.topic).field("len", &self.len).finish()
    }
}

impl<'a> Loan<'a, Unwritten> {
    /// Writes the message in place through `f`, which gets the whole loaned slice.
    pub fn write(self, f: impl FnOnce(&mut [u8])) -> Loan<'a, Written> {
        let len = self.len;
        f(self.publ.loan_buf(len));
        Loan { publ: self.publ, len, _state: PhantomData }
    }

    /// Copies `src` (exactly the loaned length) into the slot.
    ///
    /// # Panics
    /// When `src.len()` differs from the loaned length, like [`slice::copy_from_slice`].
    pub fn copy_from_slice(self, src: &[u8]) -> Loan<'a, Written> {
        self.write(|buf| buf.copy_from_slice(src))
    }
}

impl Loan<'_, Written> {
    /// The written bytes, to change them further before sending.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.publ.loan_buf(self.len)
    }

    /// Publishes the slot to every subscriber. It cannot fail: the slot was secured by
    /// [`Publisher::loan`](crate::Publisher::loan).
    pub fn send(self) {
        self.publ.commit_loan(self.len);
    }
}

impl<S> Loan<'_, S> {
    /// The loaned length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length loan.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
