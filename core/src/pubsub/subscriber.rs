//! [`Subscriber`]: pull (`recv*`) and callback delivery from every matched publisher.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::{QueuePolicy, WaitStrategy};
use crate::io::Command;
use crate::pubsub::builder::SubOptions;
use crate::pubsub::events::{Event, EventSink, Peer, via_of_layer};
use crate::pubsub::history::{GATE_MIN_WAIT, History, HistoryGate, Offer};
use crate::pubsub::meter::{ConnMeter, MeterTable};
use crate::pubsub::runtime::{Runtime, RuntimeShare, shoal_par};
use crate::pubsub::{CreateError, RecvError};
use crate::registration::{EntityKey, Layer, LayerKind, LayerPar, LocalTopic, RemoteTopic, ShoalPar, TopicStats};
use crate::sample::{Sample, SampleRef, now_ns};
use crate::stats::{ConnectionStats, LatencySummary, ShoalStats, Via};
use crate::sync::lock;
use crate::transport::clock::{ClockCheck, PublisherClocks};
use crate::transport::shm_ring::{PollState, ReadOutcome, RingReader};
use crate::transport::{Inbox, LayerReader};
use crate::types::TypeInfo;

thread_local! {
    /// The doorbell poll state of this thread's blocking `recv` calls (the doorbell is the process's, the state is
    /// the thread's: see [`PollState`]).
    static RECV_POLL: std::cell::Cell<PollState> = const { std::cell::Cell::new(PollState::new()) };
}

/// A connection of an eCAL-facing layer: (publisher, index of its factory in `Runtime::reader_factories`, reader).
type LayerConn = (EntityKey, usize, Box<dyn LayerReader>);

/// The user callback of a callback subscriber.
pub(crate) type Callback = Box<dyn FnMut(&Sample) + Send>;

struct ReaderEntry {
    key: EntityKey,
    reader: RingReader,
    type_info: Arc<TypeInfo>,
    /// The reader's segment was superseded and the successor could not be opened: re-open on the next update.
    ended: bool,
    /// The publisher went away: the reader is drained of what is left in the ring, then removed.
    closing: bool,
    /// Statistics of this connection.
    meter: ConnMeter,
    /// (generation, messages the queue policy keeps of this generation's slot size when that is fewer than the
    /// ring's slots): the reader then skips to the newest ones.
    keep: (u64, Option<u64>),
}

impl ReaderEntry {
    fn new(key: EntityKey, reader: RingReader, type_info: Arc<TypeInfo>, queue: Option<&QueuePolicy>) -> ReaderEntry {
        let meter = ConnMeter::new(key.entity_id, Via::ShoalRing);
        let mut e = ReaderEntry { key, reader, type_info, ended: false, closing: false, meter, keep: (0, None) };
        e.keep = e.keep_for(queue);
        e
    }

    fn keep_for(&self, queue: Option<&QueuePolicy>) -> (u64, Option<u64>) {
        let cap = queue.map(|q| q.capacity_for(self.reader.slot_size()) as u64);
        (self.reader.generation(), cap.filter(|c| *c < u64::from(self.reader.slot_count())))
    }

    /// Applies the subscriber's own queue policy before a read (nothing to do without one, or when it keeps at
    /// least as many messages as the ring).
    #[inline]
    fn apply_queue(&mut self, queue: Option<&QueuePolicy>) {
        if self.keep.0 != self.reader.generation() {
            self.keep = self.keep_for(queue);
        }
        if let Some(n) = self.keep.1 {
            self.reader.keep_newest(n);
        }
    }
}

/// Messages and bytes delivered through one path, counted by one writer at a time (the caller holds the lock that
/// serialises that path's deliveries) and read by anyone.
#[derive(Debug, Default)]
struct Delivered {
    messages: AtomicU64,
    bytes: AtomicU64,
}

impl Delivered {
    /// One more message of `len` bytes. Callers of one counter hold the same lock.
    #[inline]
    fn add(&self, len: usize) {
        self.messages.store(self.messages.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.bytes.store(self.bytes.load(Ordering::Relaxed).wrapping_add(len as u64), Ordering::Relaxed);
    }

    fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The part of a subscriber that publishers, the runtime and the I/O thread share.
pub(crate) struct SubShared {
    pub(crate) id: u64,
    pub(crate) topic: Arc<str>,
    pub(crate) type_info: Arc<TypeInfo>,
    /// Creation time (ns since the epoch): samples sent from then on are delivered if still in a ring.
    created_ns: i64,
    readers: Mutex<Vec<ReaderEntry>>,
    /// Connections of the eCAL-facing layers (UDP, eCAL shared memory) to remote publishers.
    /// (publisher, index of the factory in `Runtime::reader_factories`, connection).
    layer_conns: Mutex<Vec<LayerConn>>,
    /// Last clock delivered through the eCAL-facing layers per publisher id: the same publisher can reach us
    /// through two layers (eCAL shm, and udp started for another subscriber); the second copy is a repeat, not a
    /// loss. Bounded, as publisher ids of UDP samples come from the wire.
    layer_clocks: Mutex<PublisherClocks>,
    /// Round-robin start index over `readers`, so one busy publisher cannot starve the others.
    next_reader: AtomicUsize,
    /// Bumped (under the `readers` lock) whenever a ring reader is added, replaced or removed: a spinning receive's
    /// [`RingWatch`] is then stale.
    readers_version: AtomicU64,
    intra: Mutex<VecDeque<Sample>>,
    intra_len: AtomicUsize,
    /// What the queue of same-process and eCAL-layer samples keeps (the oldest beyond it are dropped, counted).
    queue: QueuePolicy,
    /// The policy set for this subscriber with `SubscriberBuilder::queue`: ring readers then skip to the newest
    /// messages it keeps (measured in the ring's slot size) when that is fewer than the ring holds. Without one the
    /// publisher's ring is the queue.
    ring_queue: Option<QueuePolicy>,
    /// Join reliable publishers' flow control on their rings.
    reliable: bool,
    /// The kept messages it asks of each publisher it matches (`SubscriberBuilder::history`).
    history: History,
    /// With a history asked for: the live data of eCAL-facing layers waits here for each publisher's history
    /// (`pubsub/history.rs`). Lock order: the gate, then `layer_clocks`, then `intra`.
    gate: Option<Mutex<HistoryGate<Sample>>>,
    /// Bytes the queued samples are charged ([`QueuePolicy::charge`]).
    intra_bytes: AtomicUsize,
    intra_pubs: AtomicUsize,
    remote_pubs: AtomicUsize,
    callback: Option<Mutex<Callback>>,
    /// Messages and bytes delivered from the rings (written with `readers` held) and from the queue (written with
    /// `intra` held): one writer at a time each, so a load and a store count, not a locked add, which a spinning
    /// receiver would pay on every message before it can answer.
    ring_delivered: Delivered,
    queue_delivered: Delivered,
    /// Drops of the queue (same-process and eCAL-layer samples) and those the application counted.
    drops: AtomicU64,
    /// Drops of ring readers that went away (overruns).
    overrun_drops: AtomicU64,
    /// Drops of eCAL-layer connections that went away, and samples older than one already delivered.
    transport_drops: AtomicU64,
    /// Where connection events go (`.on_event`).
    pub(crate) events: Option<Arc<EventSink>>,
    /// With events: the type each publisher heard on eCAL layers announced last (for type changes).
    layer_types: Mutex<HashMap<EntityKey, TypeInfo>>,
    last_clock: AtomicU64,
    /// Start of the current statistics window and the received count then.
    freq: Mutex<(Instant, u64)>,
    /// Measure latency (`[shoal_receive] latency_statistics`).
    latency_on: bool,
    /// Statistics of the connections whose samples come through the inbox.
    inbox_meters: Mutex<MeterTable>,
    /// Latency of every window so far (eCAL's `data_latency_us`), and bytes received.
    latency_total: Mutex<LatencySummary>,
    conn_lock: Mutex<()>,
    conn_cond: Condvar,
    /// For layer readers that push from their own threads: ring our process's doorbell after a push.
    runtime: std::sync::Weak<Runtime>,
}

impl std::fmt::Debug for SubShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubShared").field("id", &self.id).field("topic", &self.topic).finish_non_exhaustive()
    }
}

impl SubShared {
    pub(crate) fn is_callback(&self) -> bool {
        self.callback.is_some()
    }

    /// The kept messages this subscriber asks of each publisher.
    pub(crate) fn history(&self) -> History {
        self.history
    }

    /// Queues a same-process publisher's kept messages (oldest first) before its live data (the subscriber's
    /// queue was made deep enough for them).
    pub(crate) fn push_history(&self, samples: impl Iterator<Item = Sample>) {
        let mut any = false;
        for s in samples {
            self.push_inbox(s);
            any = true;
        }
        if any {
            self.wake();
        }
    }

    /// Rewinds a newly opened ring reader over the publisher's kept messages this subscriber asks for: at most the
    /// smaller of both depths, the newest that fit the publisher's byte budget; or, without a history, over what
    /// was sent since this subscriber was created.
    fn rewind_ring(&self, reader: &mut RingReader, par: &ShoalPar) {
        let depth = u64::from(self.history.depth().min(par.history_depth));
        if depth == 0 {
            reader.rewind_to_time(self.created_ns);
            return;
        }
        // Both are runs of the newest slots: the longer one is taken.
        let (mut n, mut bytes, mut kept) = (0u64, 0u64, true);
        let created_ns = self.created_ns;
        reader.rewind_while(|t, len| {
            kept = kept && n < depth && bytes.saturating_add(len) <= par.history_bytes;
            if kept {
                n += 1;
                bytes += len;
            }
            kept || t >= created_ns
        });
    }

    /// A layer's clock check resynchronised on `s`'s publisher (its clock had jumped far ahead before).
    #[cold]
    fn warn_resync(&self, s: &Sample) {
        tracing::warn!(
            "topic {}: publisher {} resumed at clock {} after samples far behind its last clock; a far-ahead clock \
             (spoofed or corrupt) had been accepted",
            self.topic,
            s.publisher_id,
            s.clock
        );
    }

    /// Delivers what the history gate released (under its lock, so that no later live message overtakes them).
    fn release(&self, mut out: Vec<Sample>) {
        if !out.is_empty() {
            self.push_batch_checked(&mut out);
            self.wake();
        }
    }

    /// A publisher's registration is known: the history gate learns whether that publisher's history will come
    /// to this subscriber apart from its live data (it keeps one, and we read no ring of it).
    fn gate_matched(&self, remote: &RemoteTopic) {
        if let Some(gate) = &self.gate {
            let keeps = remote.announced_history().is_some_and(|p| p.history_depth > 0);
            let offer = match (keeps, remote.announced_tcp_port().is_some()) {
                (false, _) => Offer::None,
                (true, true) => Offer::Fetch,
                (true, false) => Offer::Unreachable,
            };
            let mut g = lock(gate);
            let out = g.matched(remote.key.entity_id, offer, Instant::now());
            self.release(out);
        }
    }

    /// Ends the history waits that are past their deadline (called once per registration period; a wait also
    /// ends when the publisher's next live message comes).
    pub(crate) fn expire_history_waits(&self) {
        if let Some(gate) = &self.gate {
            let mut g = lock(gate);
            let out = g.expire(Instant::now());
            self.release(out);
        }
    }

    /// Publishers whose history did not come before the wait for it ended, and history messages dropped because
    /// they came after that.
    pub(crate) fn history_missed(&self) -> (u64, u64) {
        self.gate.as_ref().map_or((0, 0), |g| lock(g).missed())
    }

    /// Queues a sample from an eCAL-facing layer, unless that publisher's sample already came through another
    /// layer (a repeat is dropped; an older one is dropped and counted). Gaps are counted by the layer that saw
    /// them. With a history asked for, it first passes the history gate.
    fn push_from_layer(&self, s: Sample) {
        if let Some(gate) = &self.gate {
            let mut g = lock(gate);
            let mut out = g.live(s.publisher_id, s, Instant::now());
            self.push_batch_checked(&mut out);
            return;
        }
        match lock(&self.layer_clocks).check(s.publisher_id, s.clock, Instant::now()) {
            ClockCheck::Accept { .. } => {}
            ClockCheck::Resync => self.warn_resync(&s),
            ClockCheck::Duplicate => return,
            ClockCheck::OutOfOrder => {
                self.transport_drops.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.push_inbox(s);
    }

    /// [`Self::push_from_layer`] for several samples (`samples` is left empty): the clock table and the queue are
    /// locked once for all of them, and the clock entry looked up once for each run of one publisher's samples.
    fn push_batch_from_layer(&self, samples: &mut Vec<Sample>) {
        if let Some(gate) = &self.gate {
            let mut g = lock(gate);
            let now = Instant::now();
            let mut out = Vec::with_capacity(samples.len());
            for s in samples.drain(..) {
                out.extend(g.live(s.publisher_id, s, now));
            }
            self.push_batch_checked(&mut out);
            return;
        }
        self.push_batch_checked(samples);
    }

    /// [`Self::push_batch_from_layer`] past the history gate.
    fn push_batch_checked(&self, samples: &mut Vec<Sample>) {
        if samples.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut clocks = lock(&self.layer_clocks);
        let mut q = lock(&self.intra);
        let mut bytes = self.intra_bytes.load(Ordering::Relaxed);
        let (mut late, mut overflow) = (0u64, 0u64);
        let mut current: Option<(u64, crate::transport::clock::PublisherClock<'_>)> = None;
        for s in samples.drain(..) {
            if current.as_ref().is_none_or(|(id, _)| *id != s.publisher_id) {
                current = Some((s.publisher_id, clocks.publisher(s.publisher_id, now)));
            }
            let Some((_, clock)) = current.as_mut() else { continue };
            match clock.check(s.clock, now) {
                ClockCheck::Accept { .. } => {}
                ClockCheck::Resync => self.warn_resync(&s),
                ClockCheck::Duplicate => continue,
                ClockCheck::OutOfOrder => {
                    late += 1;
                    continue;
                }
            }
            bytes += QueuePolicy::charge(s.payload.held());
            q.push_back(s);
            while self.queue.over(q.len(), bytes) {
                if let Some(old) = q.pop_front() {
                    bytes -= QueuePolicy::charge(old.payload.held());
                    overflow += 1;
                }
            }
        }
        self.intra_bytes.store(bytes, Ordering::Relaxed);
        self.intra_len.store(q.len(), Ordering::Release);
        drop(q);
        drop(clocks);
        if late > 0 {
            self.transport_drops.fetch_add(late, Ordering::Relaxed);
        }
        if overflow > 0 {
            self.drops.fetch_add(overflow, Ordering::Relaxed);
        }
    }

    /// Queues a sample from a same-process publisher or an eCAL-facing layer; the oldest is dropped (and counted)
    /// while the queue is over its policy (more than `depth` samples and more than `bytes` charged).
    pub(crate) fn push_inbox(&self, s: Sample) {
        let mut q = lock(&self.intra);
        let mut bytes = self.intra_bytes.load(Ordering::Relaxed) + QueuePolicy::charge(s.payload.held());
        q.push_back(s);
        while self.queue.over(q.len(), bytes) {
            if let Some(old) = q.pop_front() {
                bytes -= QueuePolicy::charge(old.payload.held());
                self.drops.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.intra_bytes.store(bytes, Ordering::Relaxed);
        self.intra_len.store(q.len(), Ordering::Release);
    }

    pub(crate) fn intra_publisher_added(&self, pub_id: u64, host_name: &str, type_info: &TypeInfo) {
        self.intra_pubs.fetch_add(1, Ordering::Relaxed);
        if let Some(ev) = &self.events {
            ev.connected(Peer::same_process(host_name, pub_id), vec![Via::SameProcess], type_info, &self.type_info);
        }
        self.notify_conn();
    }

    pub(crate) fn intra_publisher_removed(&self, pub_id: u64, host_name: &str) {
        let _ = self.intra_pubs.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Some(ev) = &self.events {
            ev.push(Event::Disconnected { peer: Peer::same_process(host_name, pub_id) });
        }
        self.notify_conn();
    }

    fn notify_conn(&self) {
        let _g = lock(&self.conn_lock);
        self.conn_cond.notify_all();
    }

    /// A matched remote publisher: opens its ring segment (same host, native ring advertised), or else connects
    /// the eCAL-facing layers that serve it.
    pub(crate) fn connect_remote(self: &Arc<Self>, rt: &Runtime, remote: &RemoteTopic) {
        let same_host = remote.key.host_name == rt.identity.host_name;
        let par = if same_host && rt.config.shm_ring.enabled { shoal_par(remote) } else { None };
        if par.is_none() {
            self.connect_layers(rt, remote, same_host);
            return;
        }
        let mut readers = lock(&self.readers);
        self.readers_version.fetch_add(1, Ordering::Relaxed);
        let known = readers.iter().position(|e| e.key == remote.key);
        match (known, par) {
            (Some(i), Some(par)) => {
                // Same publisher: a new segment name means it grew; the reader follows by itself, but re-open if it
                // is on an older generation that was already removed.
                let e = &mut readers[i];
                self.report_type_change(&e.type_info, remote);
                e.type_info = Arc::new(remote.type_info.clone());
                e.closing = false;
                // A reader follows a growing ring by itself; re-open only one that lost the chain.
                if e.ended
                    && e.reader.segment_name() != par.segment
                    && let Ok(r) = open_announced_ring(&par.segment, remote, self.reliable)
                {
                    if let Some(bell) = r.writer_doorbell() {
                        rt.doorbell.note_ringer(&bell);
                    }
                    self.overrun_drops.fetch_add(e.reader.drops(), Ordering::Relaxed);
                    e.reader = r;
                    e.ended = false;
                }
            }
            (Some(i), None) => {
                self.report_type_change(&readers[i].type_info, remote);
                readers[i].type_info = Arc::new(remote.type_info.clone());
                readers[i].closing = false;
            }
            (None, Some(par)) => match open_announced_ring(&par.segment, remote, self.reliable) {
                Ok(mut reader) => {
                    // Before we may wait for its samples: its process must learn when ours stops being spin-only.
                    if let Some(bell) = reader.writer_doorbell() {
                        rt.doorbell.note_ringer(&bell);
                    }
                    // The ring holds the history and the live data: what waited of its copies on other layers is
                    // dropped (copies that come later are dropped as the ring's).
                    if let Some(gate) = &self.gate {
                        lock(gate).read_in_ring(remote.key.entity_id);
                    }
                    // Messages the publisher sent after we subscribed but before we opened its ring are ours too,
                    // and so are the ones it kept for late joiners when we ask for them.
                    self.rewind_ring(&mut reader, par);
                    let type_info = Arc::new(remote.type_info.clone());
                    readers.push(ReaderEntry::new(remote.key.clone(), reader, type_info, self.ring_queue.as_ref()));
                    self.remote_pubs.store(self.remote_count(&readers), Ordering::Relaxed);
                    drop(readers);
                    if let Some(ev) = &self.events {
                        ev.connected(Peer::remote(remote), vec![Via::ShoalRing], &remote.type_info, &self.type_info);
                    }
                    self.notify_conn();
                }
                Err(e) => tracing::warn!(
                    "topic {}: cannot open the ring {} of publisher {} (pid {}): {e}",
                    self.topic,
                    par.segment,
                    remote.key.entity_id,
                    remote.key.pid
                ),
            },
            (None, None) => {}
        }
    }

    /// A known publisher's registration changed: a type that now disagrees with ours is reported once.
    fn report_type_change(&self, before: &TypeInfo, remote: &RemoteTopic) {
        if let Some(ev) = &self.events
            && *before != remote.type_info
            && remote.type_info.mismatches(&self.type_info)
        {
            ev.push(Event::TypeMismatch {
                peer: Peer::remote(remote),
                theirs: remote.type_info.clone(),
                ours: (*self.type_info).clone(),
            });
        }
    }

    /// [`Self::report_type_change`] for a publisher heard on eCAL layers (whose type the subscriber keeps in the
    /// last registration it saw).
    fn type_updated(&self, remote: &RemoteTopic) {
        if self.events.is_none() {
            return;
        }
        let mut seen = lock(&self.layer_types);
        let before = seen.insert(remote.key.clone(), remote.type_info.clone());
        drop(seen);
        if let Some(before) = before {
            self.report_type_change(&before, remote);
        }
    }

    fn connect_layers(self: &Arc<Self>, rt: &Runtime, remote: &RemoteTopic, same_host: bool) {
        self.gate_matched(remote);
        let mut conns = lock(&self.layer_conns);
        let was_known = conns.iter().any(|(k, _, _)| *k == remote.key);
        // Update the layers already connected to this publisher; connect the ones that were not (a publisher may
        // start another layer later, e.g. its shm memfile after udp).
        let inbox: Arc<dyn Inbox> = Arc::clone(self) as Arc<dyn Inbox>;
        for (i, f) in rt.reader_factories.iter().enumerate() {
            match conns.iter_mut().find(|(k, fi, _)| *k == remote.key && *fi == i) {
                Some((_, _, c)) => c.update(remote),
                None => {
                    if let Some(c) = f.connect(&self.topic, Arc::clone(&inbox), remote, same_host) {
                        conns.push((remote.key.clone(), i, c));
                    }
                }
            }
        }
        if !was_known && conns.iter().any(|(k, _, _)| *k == remote.key) {
            self.remote_pubs.fetch_add(1, Ordering::Relaxed);
            let via: Vec<Via> = conns
                .iter()
                .filter(|(k, _, _)| *k == remote.key)
                .filter_map(|(_, i, _)| rt.reader_factories[*i].subscriber_advert().and_then(|l| via_of_layer(l.kind)))
                .collect();
            drop(conns);
            if let Some(ev) = &self.events {
                lock(&self.layer_types).insert(remote.key.clone(), remote.type_info.clone());
                ev.connected(Peer::remote(remote), via, &remote.type_info, &self.type_info);
            }
            self.notify_conn();
        } else if was_known {
            drop(conns);
            self.type_updated(remote);
        }
    }

    pub(crate) fn disconnect_remote(&self, key: &EntityKey) {
        if let Some(gate) = &self.gate {
            let mut g = lock(gate);
            let out = g.forget(key.entity_id);
            self.release(out);
        }
        lock(&self.layer_types).remove(key);
        lock(&self.layer_clocks).forget(key.entity_id);
        lock(&self.inbox_meters).forget(key.entity_id);
        {
            let mut conns = lock(&self.layer_conns);
            let before = conns.len();
            conns.retain(|(k, _, c)| {
                if k == key {
                    self.transport_drops.fetch_add(c.drops(), Ordering::Relaxed);
                }
                k != key
            });
            if conns.len() != before {
                let _ = self.remote_pubs.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
                drop(conns);
                if let Some(ev) = &self.events {
                    ev.push(Event::Disconnected { peer: Peer::key(key) });
                }
                self.notify_conn();
                return;
            }
        }
        let mut readers = lock(&self.readers);
        self.readers_version.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = readers.iter().position(|e| &e.key == key) {
            if let Some(ev) = self.events.as_ref().filter(|_| !readers[i].closing) {
                ev.push(Event::Disconnected { peer: Peer::key(key) });
            }
            if readers[i].reader.has_data() {
                // Samples still in the ring were sent to us: deliver them before letting the reader go.
                readers[i].closing = true;
            } else {
                let e = readers.swap_remove(i);
                self.overrun_drops.fetch_add(e.reader.drops(), Ordering::Relaxed);
            }
        }
        self.remote_pubs.store(self.remote_count(&readers), Ordering::Relaxed);
        drop(readers);
        self.notify_conn();
    }

    /// Remote publishers: ring readers that are not closing plus eCAL-layer connections (one per publisher).
    fn remote_count(&self, readers: &[ReaderEntry]) -> usize {
        let mut keys: Vec<&EntityKey> = Vec::new();
        let conns = lock(&self.layer_conns);
        for (k, _, _) in conns.iter() {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        readers.iter().filter(|e| !e.closing).count() + keys.len()
    }

    pub(crate) fn publisher_count(&self) -> usize {
        self.intra_pubs.load(Ordering::Relaxed) + self.remote_pubs.load(Ordering::Relaxed)
    }

    /// Total drops: queue overflows plus overruns and torn reads of every ring reader and the eCAL layers' losses.
    pub(crate) fn drops(&self) -> u64 {
        self.drop_causes().iter().sum()
    }

    /// Drops by cause: (overrun, transport, queue), as [`crate::events::DropCause`] names them.
    pub(crate) fn drop_causes(&self) -> [u64; 3] {
        let ring: u64 = lock(&self.readers).iter().map(|e| e.reader.drops()).sum();
        let layers: u64 = lock(&self.layer_conns).iter().map(|(_, _, c)| c.drops()).sum();
        [
            self.overrun_drops.load(Ordering::Relaxed) + ring,
            self.transport_drops.load(Ordering::Relaxed) + layers,
            self.drops.load(Ordering::Relaxed),
        ]
    }

    /// Reports drops that grew since the last report as events (called with every registration refresh).
    pub(crate) fn report_drops(&self) {
        if let Some(ev) = &self.events {
            ev.report_drops(self.drop_causes());
        }
    }

    /// Whether a receive waiting on the doorbell stops waiting: a sample is there (queued, or in a ring, or being
    /// written into a ring in parts it can read as they come, `RingReader::streaming`), or, with
    /// `poll_writes`, a publisher is writing the next message of one of the rings (`RingReader::writing`). A write
    /// seen sets `saw_write` either way. One lock of the reader table.
    pub(crate) fn ready(&self, poll_writes: bool, saw_write: &std::cell::Cell<bool>) -> bool {
        if self.intra_len.load(Ordering::Acquire) > 0 {
            return true;
        }
        let mut writing = false;
        for e in lock(&self.readers).iter().filter(|e| !e.ended) {
            if e.reader.has_data() || e.reader.streaming() {
                return true;
            }
            writing |= e.reader.writing();
        }
        if writing {
            saw_write.set(true);
        }
        writing && poll_writes
    }

    /// One attempt to take the next sample and run `f` on it.
    fn try_once<R>(&self, f: &mut impl FnMut(SampleRef<'_>) -> R) -> Option<R> {
        self.try_once_watching(f, None)
    }

    /// [`try_once`](Self::try_once); when it finds nothing, a subscriber with one ring reader and no queued sample
    /// leaves in `watch` a [`RingWatch`] of that reader, which a spinning receive polls instead of calling this
    /// again (no lock per poll: its atomic read-modify-writes were most of a spinning poll, 43 % of a 64 B ping-pong
    /// subscriber's samples).
    fn try_once_watching<R>(
        &self,
        f: &mut impl FnMut(SampleRef<'_>) -> R,
        watch: Option<&mut Option<RingWatch>>,
    ) -> Option<R> {
        if self.intra_len.load(Ordering::Acquire) > 0 {
            let s = {
                let mut q = lock(&self.intra);
                let s = q.pop_front();
                if let Some(s) = &s {
                    self.intra_bytes.fetch_sub(QueuePolicy::charge(s.payload.held()), Ordering::Relaxed);
                    self.queue_delivered.add(s.payload().len());
                }
                self.intra_len.store(q.len(), Ordering::Release);
                s
            };
            if let Some(s) = s {
                if let Some(m) = lock(&self.inbox_meters).get(s.publisher_id, s.via) {
                    let times = (self.latency_on && m.latency_due()).then(|| (s.send_time_ns, now_ns()));
                    m.record(s.payload().len(), times);
                }
                let r = f(s.view());
                self.last_clock.store(s.clock, Ordering::Relaxed);
                return Some(r);
            }
        }
        let mut readers = lock(&self.readers);
        // Drained readers of departed publishers are removed; their drops stay counted. (Only looked for when a
        // reader is closing: this runs on every poll of a spinning receive.)
        if readers.iter().any(|e| e.closing) {
            self.readers_version.fetch_add(1, Ordering::Relaxed);
            readers.retain(|e| {
                let keep = !(e.closing && (e.ended || !e.reader.has_data()));
                if !keep {
                    self.overrun_drops.fetch_add(e.reader.drops(), Ordering::Relaxed);
                }
                keep
            });
        }
        let n = readers.len();
        if n == 0 {
            return None;
        }
        // Round robin without a division per poll (`%` was a tenth of a spinning receiver's time).
        let mut idx = self.next_reader.load(Ordering::Relaxed);
        if idx >= n {
            idx = if idx == n { 0 } else { idx % n };
        }
        for step in 0..n {
            if step > 0 {
                idx = if idx + 1 == n { 0 } else { idx + 1 };
            }
            let e = &mut readers[idx];
            if e.ended {
                continue;
            }
            e.apply_queue(self.ring_queue.as_ref());
            let topic = &self.topic;
            let type_info = &e.type_info;
            let latency_due = self.latency_on && e.meter.latency_due();
            // A torn or overrun read is counted by the reader; try again until it is empty, but at most
            // TORN_RETRIES times in a row: a corrupt or hostile segment must not keep this loop (and the readers lock
            // the I/O thread also takes) forever. The reader is tried again on the next call.
            let mut torn = 0u32;
            loop {
                match e.reader.try_read_with(|v| {
                    // Received when it is handed over (before the user's closure runs); a sample handed over while
                    // it is written (a streamed one) once the closure has read what it takes of it.
                    let received_ns = (latency_due && !v.streamed()).then(now_ns);
                    let clock = v.clock();
                    let (len, sent_ns) = (v.payload().len(), v.send_time_ns());
                    let r = f(SampleRef {
                        payload: v.payload(),
                        send_time_ns: sent_ns,
                        via: Via::ShoalRing,
                        clock,
                        publisher_id: v.publisher_id(),
                        type_info,
                        topic,
                    });
                    let received_ns = received_ns.or_else(|| (latency_due && v.streamed()).then(now_ns));
                    (r, clock, len, received_ns.map(|t| (sent_ns, t)))
                }) {
                    ReadOutcome::Sample((r, clock, len, times)) => {
                        e.meter.record(len, times);
                        self.next_reader.store(idx + 1, Ordering::Relaxed);
                        self.ring_delivered.add(len);
                        self.last_clock.store(clock, Ordering::Relaxed);
                        drop(readers);
                        return Some(r);
                    }
                    ReadOutcome::Empty => break,
                    ReadOutcome::Torn => {
                        torn += 1;
                        if torn >= TORN_RETRIES {
                            break;
                        }
                    }
                    ReadOutcome::Ended => {
                        e.ended = true;
                        break;
                    }
                }
            }
        }
        if let Some(watch) = watch
            && let [e] = readers.as_slice()
            && !e.ended
            && self.intra_len.load(Ordering::Acquire) == 0
        {
            let version = self.readers_version.load(Ordering::Relaxed);
            *watch = e.reader.watch_next().map(|slot| RingWatch { slot, version });
        }
        None
    }

    /// One poll of a spinning receive: while `watch` holds a [`RingWatch`] that saw no change, nothing more (but
    /// every [`WATCH_FULL_POLL`]-th poll reads anyway, for what a watch does not see: a reader whose segment was
    /// truncated to zeros, a sample only the queue of a reader that ended holds); else a read, which leaves a new
    /// watch when it finds nothing.
    #[inline]
    fn spin_poll<R>(
        &self,
        f: &mut impl FnMut(SampleRef<'_>) -> R,
        watch: &mut Option<RingWatch>,
        polls: &mut u32,
    ) -> Option<R> {
        if let Some(w) = watch {
            *polls = polls.wrapping_add(1);
            if !w.changed(self) && !polls.is_multiple_of(WATCH_FULL_POLL) {
                return None;
            }
            *watch = None;
        }
        self.try_once_watching(f, Some(watch))
    }

    /// Messages delivered so far.
    pub(crate) fn received(&self) -> u64 {
        self.ring_delivered.messages() + self.queue_delivered.messages()
    }

    /// Runs the callback for every sample available now; true when it delivered at least one.
    pub(crate) fn dispatch(&self) -> bool {
        let Some(cb) = &self.callback else { return false };
        let mut any = false;
        // Copy out first (validated), then call the user without holding any of our locks but the callback's.
        while let Some(sample) = self.try_once(&mut |s: SampleRef<'_>| s.to_owned_sample()) {
            any = true;
            (lock(cb))(&sample);
        }
        any
    }

    /// The statistics of the periodic registration: ends the current window at `now` (frequency, bandwidth, every
    /// connection's window) and starts the next.
    pub(crate) fn stats(&self, now: Instant, host_name: &str) -> TopicStats {
        let received = self.received();
        let bytes = self.ring_delivered.bytes() + self.queue_delivered.bytes();
        let mut f = lock(&self.freq);
        let dt = now.saturating_duration_since(f.0);
        let secs = dt.as_secs_f64();
        let freq_mhz = if secs > 0.0 { ((received - f.1.min(received)) as f64 / secs * 1000.0) as i32 } else { 0 };
        *f = (now, received);
        drop(f);
        let window_ms = u32::try_from(dt.as_millis()).unwrap_or(u32::MAX);
        let (connections, window_latency) = self.take_windows(window_ms, host_name);
        let window_bytes: u64 = connections.iter().map(|c| c.window_bytes).sum();
        let mut latency = lock(&self.latency_total);
        latency.merge(&window_latency);
        let (history_missed, history_late) = self.history_missed();
        TopicStats {
            connections_local: self.publisher_count() as i32,
            message_drops: self.drops().min(i32::MAX as u64) as i32,
            data_clock: received as i64,
            data_frequency_mhz: freq_mhz,
            latency: *latency,
            shoal: Some(ShoalStats {
                bytes,
                bandwidth_bps: if secs > 0.0 { window_bytes as f64 / secs } else { 0.0 },
                connections,
                history_missed,
                history_late,
                ..ShoalStats::default()
            }),
            ..TopicStats::default()
        }
    }

    /// Ends the window of every connection: their statistics and the window's latency over all of them.
    fn take_windows(&self, window_ms: u32, host_name: &str) -> (Vec<ConnectionStats>, LatencySummary) {
        let mut out = Vec::new();
        let mut latency = LatencySummary::default();
        for e in lock(&self.readers).iter_mut() {
            let (c, l) = e.meter.take_window(window_ms, e.reader.drops(), true);
            latency.merge(&l);
            out.push(c);
        }
        // Drops and hosts of the eCAL layers' connections, by publisher id.
        let layer_info: Vec<(u64, bool, u64)> = lock(&self.layer_conns)
            .iter()
            .map(|(k, _, c)| (k.entity_id, k.host_name == host_name, c.drops()))
            .collect();
        let mut meters = lock(&self.inbox_meters);
        for m in meters.iter_mut() {
            let mine = layer_info.iter().filter(|(id, _, _)| *id == m.publisher_id);
            let (same_host, drops) = match m.via {
                // A publisher of this process, or eCAL memfiles: always this host.
                Via::SameProcess => (true, 0),
                Via::EcalShm => (true, mine.map(|(_, _, d)| d).sum()),
                Via::ShoalRing | Via::Udp | Via::Tcp => {
                    mine.fold((false, 0), |(h, d), (_, same, drops)| (h || *same, d + drops))
                }
            };
            let (c, l) = m.take_window(window_ms, drops, same_host);
            latency.merge(&l);
            out.push(c);
        }
        meters.prune();
        out.truncate(crate::registration::codec::MAX_CONNECTIONS);
        (out, latency)
    }
}

/// What every kind of subscriber holds: its shared state and the runtime. Dropping it unregisters the subscriber.
pub(crate) struct SubHandle {
    pub(crate) shared: Arc<SubShared>,
    rt: Arc<RuntimeShare>,
}

impl SubHandle {
    /// Creates the subscriber, connects it with same-process publishers and announces it.
    pub(crate) fn create(
        rt: &Arc<RuntimeShare>,
        topic: &str,
        type_info: TypeInfo,
        callback: Option<Callback>,
        opts: SubOptions,
    ) -> Result<SubHandle, CreateError> {
        if topic.is_empty() {
            return Err(CreateError::EmptyTopic);
        }
        // A subscriber asking for history keeps at least as much as a publisher keeps for it.
        let room = |q: QueuePolicy| match opts.history {
            History::Off => q,
            h => {
                let cfg = &rt.config.history;
                let depth = h.depth().min(cfg.max_depth) as usize;
                QueuePolicy::new(q.depth.max(depth), q.bytes.max(cfg.max_bytes))
            }
        };
        let shared = Arc::new(SubShared {
            id: rt.new_entity_id(),
            topic: Arc::from(topic),
            type_info: Arc::new(type_info),
            created_ns: now_ns(),
            readers: Mutex::new(Vec::new()),
            layer_conns: Mutex::new(Vec::new()),
            layer_clocks: Mutex::default(),
            next_reader: AtomicUsize::new(0),
            readers_version: AtomicU64::new(0),
            intra: Mutex::new(VecDeque::new()),
            intra_len: AtomicUsize::new(0),
            queue: room(opts.queue.unwrap_or(rt.config.receive.queue)),
            ring_queue: opts.queue.map(room),
            reliable: opts.reliable.unwrap_or(rt.config.reliable.subscribers),
            history: opts.history,
            gate: (opts.history != History::Off).then(|| {
                // A publisher's registration comes at least once a refresh period, and its history right after
                // ours reached it (a lost datagram costs a period).
                let wait = (rt.config.registration.refresh * 3).max(GATE_MIN_WAIT);
                Mutex::new(HistoryGate::new(wait, wait, rt.config.history.max_bytes.saturating_mul(4)))
            }),
            intra_bytes: AtomicUsize::new(0),
            intra_pubs: AtomicUsize::new(0),
            remote_pubs: AtomicUsize::new(0),
            callback: callback.map(Mutex::new),
            ring_delivered: Delivered::default(),
            queue_delivered: Delivered::default(),
            drops: AtomicU64::new(0),
            overrun_drops: AtomicU64::new(0),
            transport_drops: AtomicU64::new(0),
            events: opts.events.clone(),
            layer_types: Mutex::default(),
            last_clock: AtomicU64::new(0),
            freq: Mutex::new((Instant::now(), 0)),
            latency_on: rt.config.receive.latency_statistics,
            inbox_meters: Mutex::default(),
            latency_total: Mutex::default(),
            conn_lock: Mutex::new(()),
            conn_cond: Condvar::new(),
            runtime: Arc::downgrade(rt.runtime()),
        });
        let h = SubHandle { shared: Arc::clone(&shared), rt: Arc::clone(rt) };
        rt.add_subscriber(&shared);
        if shared.is_callback() {
            rt.dispatcher.add(rt, &shared);
        }
        // Layers that receive from publishers not registered yet (eCAL UDP) listen from now on.
        let inbox: Arc<dyn Inbox> = Arc::clone(&shared) as Arc<dyn Inbox>;
        for f in &rt.reader_factories {
            f.subscriber_created(shared.id, &shared.topic, &inbox);
        }
        rt.io_send(Command::AddSubscriber(h.local_topic()));
        Ok(h)
    }

    fn local_topic(&self) -> LocalTopic {
        let par = ShoalPar {
            doorbell: self.rt.doorbell.name().to_string(),
            history_depth: self.shared.history.depth(),
            ..ShoalPar::default()
        };
        let mut layers =
            vec![Layer::new(LayerKind::ShoalRing, self.rt.config.shm_ring.enabled, false, LayerPar::Shoal(par))];
        layers.extend(self.rt.reader_factories.iter().filter_map(|f| f.subscriber_advert()));
        LocalTopic {
            id: self.shared.id,
            topic_name: self.shared.topic.to_string(),
            type_info: (*self.shared.type_info).clone(),
            layers,
            stats: TopicStats::default(),
        }
    }

    pub(crate) fn wait_for_publishers(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<usize, crate::pubsub::MatchTimeout> {
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.shared.conn_lock);
        loop {
            let matched = self.shared.publisher_count();
            if matched >= n {
                return Ok(matched);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(crate::pubsub::MatchTimeout { wanted: n, matched, timeout });
            }
            g = self
                .shared
                .conn_cond
                .wait_timeout(g, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

impl Drop for SubHandle {
    fn drop(&mut self) {
        for f in &self.rt.reader_factories {
            f.subscriber_dropped(self.shared.id, &self.shared.topic);
        }
        self.rt.remove_subscriber(self.shared.id);
        self.rt.io_send(Command::Remove(self.shared.id));
    }
}

/// The status methods every kind of subscriber has, on `self.handle()`.
macro_rules! subscriber_status {
    () => {
        /// The entity id announced in registration.
        pub fn id(&self) -> u64 {
            self.handle().shared.id
        }

        /// The topic name.
        pub fn topic(&self) -> &str {
            &self.handle().shared.topic
        }

        /// Number of matched publishers, in this process and in others.
        pub fn publisher_count(&self) -> usize {
            self.handle().shared.publisher_count()
        }

        /// With a history asked for ([`SubscriberBuilder::history`](crate::builder::SubscriberBuilder::history)):
        /// publishers that keep one whose history did not come before the wait for it ended (their live data was
        /// delivered without it; over UDP or eCAL shared memory, where the history comes over TCP). Also in
        /// registration (`history_missed`).
        pub fn history_missed(&self) -> u64 {
            self.handle().shared.history_missed().0
        }

        /// Waits until at least `n` publishers (in this process and in others) are matched, at most `timeout`;
        /// gives how many are, or [`MatchTimeout`](crate::pubsub::MatchTimeout) with how many were when the time was up.
        /// The counterpart of [`Publisher::wait_for_subscribers`](crate::Publisher::wait_for_subscribers).
        ///
        /// ```no_run
        /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// use std::time::Duration;
        /// let node = shoal::Node::init("doc_wait_for_publishers")?;
        /// let sub = node.subscriber("camera").create()?;
        /// match sub.wait_for_publishers(1, Duration::from_secs(5)) {
        ///     Ok(n) => println!("{n} publisher(s) matched"),
        ///     Err(e) => println!("still waiting: {e}"), // "0 of 1 matched within 5s"
        /// }
        /// # Ok(())
        /// # }
        /// ```
        pub fn wait_for_publishers(
            &self,
            n: usize,
            timeout: std::time::Duration,
        ) -> Result<usize, crate::pubsub::MatchTimeout> {
            self.handle().wait_for_publishers(n, timeout)
        }

        /// Messages lost on the way to this subscriber (overruns, torn reads, queue overflow, late samples).
        pub fn drops(&self) -> u64 {
            self.handle().shared.drops()
        }

        /// Messages delivered to this subscriber so far.
        pub fn received(&self) -> u64 {
            self.handle().shared.received()
        }

        /// Counts `n` received messages the application dropped (for example payloads that do not decode):
        /// they are added to [`drops`](Self::drops), which registration announces (eCAL's `message_drops`) and
        /// monitors show.
        pub fn count_dropped(&self, n: u64) {
            crate::transport::Inbox::count_drops(&*self.handle().shared, n);
        }
    };
}
pub(crate) use subscriber_status;

/// Receives messages on one topic from every matched publisher, pulled with `recv*`. Dropping it unregisters it.
///
/// Created by [`SubscriberBuilder::create`](crate::builder::SubscriberBuilder::create).
pub struct Subscriber {
    handle: SubHandle,
    wait: WaitStrategy,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("id", &self.handle.shared.id)
            .field("topic", &self.handle.shared.topic)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl Inbox for SubShared {
    fn push(&self, sample: Sample) {
        self.push_from_layer(sample);
        self.wake();
    }

    fn push_unwoken(&self, sample: Sample) {
        self.push_from_layer(sample);
    }

    fn push_batch_unwoken(&self, samples: &mut Vec<Sample>) {
        self.push_batch_from_layer(samples);
    }

    fn wake(&self) {
        // Wake this process's waiters (pull subscribers and the doorbell thread).
        if let Some(rt) = self.runtime.upgrade() {
            rt.self_ringer.ring();
        }
    }

    fn reads_ring_of(&self, publisher_id: u64) -> bool {
        lock(&self.readers).iter().any(|e| e.key.entity_id == publisher_id && !e.closing)
    }

    fn count_drops(&self, n: u64) {
        self.drops.fetch_add(n, Ordering::Relaxed);
    }

    fn history_depth(&self) -> u32 {
        self.history.depth()
    }

    fn push_history(&self, sample: Sample) {
        match &self.gate {
            Some(gate) => {
                let mut g = lock(gate);
                let out = g.history(sample.publisher_id, sample);
                self.release(out);
            }
            None => self.push(sample),
        }
    }

    fn history_end(&self, publisher_id: u64) {
        if let Some(gate) = &self.gate {
            let mut g = lock(gate);
            let out = g.history_end(publisher_id);
            self.release(out);
        }
    }
}

impl Subscriber {
    /// Polls a [`WaitStrategy::BusySpin`] receive makes before it reads the clock for its deadline (which counts
    /// from then, a few microseconds late at most).
    pub const BUSY_SPIN_POLLS_BEFORE_CLOCK: u32 = 64;

    pub(crate) fn create(
        rt: &Arc<RuntimeShare>,
        topic: &str,
        type_info: TypeInfo,
        opts: SubOptions,
    ) -> Result<Subscriber, CreateError> {
        let wait = opts.wait.unwrap_or(rt.config.receive.wait);
        let handle = SubHandle::create(rt, topic, type_info, None, opts)?;
        Ok(Subscriber { handle, wait })
    }

    pub(crate) fn handle(&self) -> &SubHandle {
        &self.handle
    }

    subscriber_status!();

    /// How `recv*` waits (set with [`SubscriberBuilder::wait`](crate::builder::SubscriberBuilder::wait), by default
    /// `[shoal_receive] wait` and `spin_us` of the configuration).
    pub fn wait_strategy(&self) -> WaitStrategy {
        self.wait
    }

    /// Waits for the next message.
    pub fn recv(&self) -> Result<Sample, RecvError> {
        self.recv_with(None, |s| s.to_owned_sample())
    }

    /// Waits up to `timeout` for the next message.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Sample, RecvError> {
        self.recv_with(Some(timeout), |s| s.to_owned_sample())
    }

    /// The next message if one is there, without waiting.
    pub fn try_recv(&self) -> Option<Sample> {
        self.handle.shared.try_once(&mut |s: SampleRef<'_>| s.to_owned_sample())
    }

    /// Waits (up to `timeout`, or forever with `None`) for the next message and runs `f` on a zero-copy view of it;
    /// returns what `f` returned.
    ///
    /// The view may read a shared-memory slot in place: its [`payload`](SampleRef::payload) is a
    /// [`PayloadView`](crate::PayloadView), which copies out exactly the bytes `f` asks for (a header, a range, all
    /// of it) and lends a `&[u8]` only when the bytes cannot change meanwhile. After `f` returns the slot is checked:
    /// if the publisher overwrote it meanwhile, the result is discarded, a drop is counted and `f` runs again on a
    /// later message.
    pub fn recv_with<R>(
        &self,
        timeout: Option<Duration>,
        mut f: impl FnMut(SampleRef<'_>) -> R,
    ) -> Result<R, RecvError> {
        let shared = &self.handle.shared;
        // A message that is already there costs no clock read (one per message was most of a streaming receiver's
        // clock time); the deadline starts with the first empty poll, or for a busy spin with its
        // BUSY_SPIN_POLLS_BEFORE_CLOCK-th: a reply that comes back within them (a ping-pong on one host, some hundred
        // nanoseconds) then finds this thread polling, not reading the clock (20-40 ns on a VM).
        let mut watch = None;
        let mut polls = 0u32;
        let spin = self.wait != WaitStrategy::Block;
        if let Some(r) = shared.try_once_watching(&mut f, spin.then_some(&mut watch)) {
            return Ok(r);
        }
        if self.wait == WaitStrategy::BusySpin {
            for _ in 1..Self::BUSY_SPIN_POLLS_BEFORE_CLOCK {
                std::hint::spin_loop();
                if let Some(r) = shared.spin_poll(&mut f, &mut watch, &mut polls) {
                    return Ok(r);
                }
            }
        }
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let spin_until = match self.wait {
            WaitStrategy::Block => Some(start),
            WaitStrategy::SpinThenBlock(d) => Some(start + d),
            WaitStrategy::BusySpin => None,
        };
        let mut spins: u32 = 0;
        let mut write_poll = WritePoll::default();
        loop {
            let got = if spin { shared.spin_poll(&mut f, &mut watch, &mut polls) } else { shared.try_once(&mut f) };
            if let Some(r) = got {
                return Ok(r);
            }
            spins = spins.wrapping_add(1);
            let spinning = match (self.wait, spin_until) {
                (WaitStrategy::Block, _) => false,
                (_, None) => true,
                (_, Some(t)) => spins & 63 != 0 || Instant::now() < t,
            };
            if spinning {
                if spins & 1023 == 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(RecvError::Timeout);
                }
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(RecvError::Timeout);
            }
            // Sleep on the doorbell; wake at least every 100 ms to notice new publishers.
            let cap = now + Duration::from_millis(100);
            let until = deadline.map_or(cap, |d| d.min(cap));
            let poll_writes = write_poll.polls(now);
            let saw_write = std::cell::Cell::new(false);
            let mut poll = RECV_POLL.get();
            let waited =
                self.handle.rt.doorbell.wait_until(&mut poll, || shared.ready(poll_writes, &saw_write), Some(until));
            RECV_POLL.set(poll);
            watch = None;
            write_poll.waited(saw_write.get(), poll_writes);
            if let Err(e) = waited {
                tracing::warn!("doorbell wait failed, polling instead: {e}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A spinning receive that watches a ring reader ([`RingWatch`]) still reads once every this many polls.
const WATCH_FULL_POLL: u32 = 64;

/// What a spinning receive polls between reads of a subscriber with one ring reader ([`SubShared::try_once_watching`]):
/// the slot that reader reads next, and the state of the subscriber the watch was taken in.
#[derive(Debug)]
struct RingWatch {
    slot: crate::transport::shm_ring::NextSlotWatch,
    /// `SubShared::readers_version` when the watch was taken.
    version: u64,
}

impl RingWatch {
    /// Whether a read may find a sample now: the slot changed, a sample was queued (same process, eCAL layers) or a
    /// ring reader was added or removed.
    #[inline]
    fn changed(&self, shared: &SubShared) -> bool {
        self.slot.changed()
            || shared.intra_len.load(Ordering::Relaxed) > 0
            || shared.readers_version.load(Ordering::Relaxed) != self.version
    }
}

/// Receives messages on one topic and hands each to its callback, on this process's doorbell thread. It has no
/// `recv`: messages go to the callback only. Dropping it unregisters it (a callback that is running finishes).
///
/// Created by [`CallbackSubscriberBuilder::create`](crate::builder::CallbackSubscriberBuilder::create), for raw
/// samples or, after [`typed`](crate::builder::SubscriberBuilder::typed), for decoded messages.
///
/// ```compile_fail
/// # let node = shoal::Node::init("doc")?;
/// let sub = node.subscriber("t").callback(|_s| {}).create()?;
/// sub.recv(); // a callback subscriber has no pull API
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CallbackSubscriber {
    handle: SubHandle,
    /// Messages a typed callback could not be given (type mismatch, decode error); none for raw callbacks.
    decode_errors: Arc<AtomicU64>,
}

impl std::fmt::Debug for CallbackSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSubscriber")
            .field("id", &self.handle.shared.id)
            .field("topic", &self.handle.shared.topic)
            .finish_non_exhaustive()
    }
}

impl CallbackSubscriber {
    pub(crate) fn create(
        rt: &Arc<RuntimeShare>,
        topic: &str,
        type_info: TypeInfo,
        callback: Callback,
        decode_errors: Arc<AtomicU64>,
        opts: SubOptions,
    ) -> Result<CallbackSubscriber, CreateError> {
        let handle = SubHandle::create(rt, topic, type_info, Some(callback), opts)?;
        Ok(CallbackSubscriber { handle, decode_errors })
    }

    fn handle(&self) -> &SubHandle {
        &self.handle
    }

    subscriber_status!();

    /// Messages a typed callback was not given because they did not decode or came from a publisher announcing
    /// another type (each cause is also logged); always 0 for a raw callback.
    pub fn decode_errors(&self) -> u64 {
        self.decode_errors.load(Ordering::Relaxed)
    }
}

/// Torn reads of one ring retried in a row within one receive call (each already skips up to the reader's own
/// bound of overrun slots) before the subscriber moves on to its other publishers.
const TORN_RETRIES: u32 = 16;
/// How long a blocking receive polls, instead of sleeping, while a publisher writes the next message (longer than
/// the copy of the largest messages: 8 MiB take about 0.4 ms).
pub(crate) const WRITE_POLL: Duration = Duration::from_millis(1);

/// A waiting thread's poll through a publisher's write in progress (a `recv` call, or the callback thread until it
/// delivers). A publisher that writes a large message wakes the sleeping subscriber processes when the write starts
/// (`ring_before_copy`): the woken thread then polls until the message is published instead of sleeping again (its
/// next wake-up would come after the copy, which the early one was to overlap). A write that does not end within
/// [`WRITE_POLL`] of the first one seen (a loan held long, a publisher that died mid-write) is waited for asleep. The
/// poll is paced ([`Pacer`](crate::transport::shm_ring::Pacer)): the woken thread may have preempted the very writer
/// it waits for, on the one CPU both may use.
#[derive(Debug, Default)]
pub(crate) struct WritePoll {
    /// From the first write seen: when the poll ends, and its pacing (a wait that sees the first write polls).
    seen: Option<(Instant, crate::transport::shm_ring::Pacer)>,
}

impl WritePoll {
    /// Whether a wait beginning at `now` returns for a write in progress (`SubShared::ready`'s `poll_writes`).
    pub(crate) fn polls(&self, now: Instant) -> bool {
        self.seen.is_none_or(|(end, _)| now < end)
    }

    /// After a wait that saw a write in progress or not (`saw_write`), and returned for one or not (`polled`, what
    /// [`polls`](Self::polls) said): starts the WRITE_POLL window at the first write seen, and paces the poll.
    pub(crate) fn waited(&mut self, saw_write: bool, polled: bool) {
        if !saw_write {
            return;
        }
        let now = Instant::now();
        let (_, pacer) =
            self.seen.get_or_insert_with(|| (now + WRITE_POLL, crate::transport::shm_ring::Pacer::new(now)));
        if polled {
            pacer.pause(now);
        }
    }
}

/// Opens the ring a remote publisher announced and checks that it is that publisher's: the segment's writer pid
/// and publisher id must be the announcer's (a registration sample naming another process's segment is refused).
fn open_announced_ring(segment: &str, remote: &RemoteTopic, reliable: bool) -> Result<RingReader, String> {
    let denied = |e: &crate::transport::shm_ring::RingOpenError| {
        matches!(e, crate::transport::shm_ring::RingOpenError::Io { source, .. }
            if source.raw_os_error() == Some(libc::EACCES))
    };
    let opened = match RingReader::open_with_flow_control(segment, reliable) {
        // Joining flow control writes the segment: a ring another user lets us only read is read best effort.
        Err(e) if reliable && denied(&e) => {
            tracing::warn!(
                "topic {}: the ring {segment} of another user is not writable for this process, so this reliable \
                 subscriber reads it best effort",
                remote.topic_name
            );
            RingReader::open(segment)
        }
        other => other,
    };
    let reader = opened.map_err(|e| match &e {
        crate::transport::shm_ring::RingOpenError::Io { source, .. } if source.raw_os_error() == Some(libc::EACCES) => {
            format!(
                "{e}: the publisher's process belongs to another user and keeps its files to itself; to connect \
                 users, set [shoal_security] shm_access = group or all in the ecal.ini of both processes"
            )
        }
        _ => e.to_string(),
    })?;
    if reader.writer_pid() != remote.key.pid || reader.publisher_id() != remote.key.entity_id {
        return Err(format!(
            "the segment belongs to publisher {} of pid {}, not to the announcer",
            reader.publisher_id(),
            reader.writer_pid()
        ));
    }
    if reliable && !reader.in_flow_control() {
        tracing::warn!(
            "topic {}: reliable subscriber, but the publisher of {segment} is best effort (or has no room for another \
             reliable reader): messages it overwrites before they are read are lost (counted)",
            remote.topic_name
        );
    }
    Ok(reader)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Sample;
    use crate::sample::Payload;
    use crate::transport::Inbox;
    use crate::types::TypeInfo;

    fn sample(publisher_id: u64, clock: u64) -> Sample {
        sized(publisher_id, clock, 1)
    }

    fn sized(publisher_id: u64, clock: u64, len: usize) -> Sample {
        Sample {
            payload: Payload::Owned(vec![clock as u8; len]),
            send_time_ns: 0,
            via: crate::stats::Via::Udp,
            clock,
            publisher_id,
            type_info: Arc::new(TypeInfo::default()),
            topic: "t".into(),
        }
    }

    #[test]
    fn a_publisher_reached_through_two_layers_is_delivered_once() {
        let node = crate::Node::init_with_config("sub_layer_clocks", crate::Config::default()).expect("init");
        let sub = node.subscriber("sub_layer_clocks_topic").create().expect("subscriber");
        let inbox: &dyn Inbox = &*sub.handle.shared;
        // Clock 1 and 2 through one layer, 2 again through another (a repeat, not a loss), then 1 late.
        for (publisher, clock) in [(5, 1), (5, 2), (5, 2), (6, 1), (5, 1), (5, 3)] {
            inbox.push(sample(publisher, clock));
        }
        let got: Vec<(u64, u64)> = std::iter::from_fn(|| sub.try_recv()).map(|s| (s.publisher_id, s.clock)).collect();
        assert_eq!(got, [(5, 1), (5, 2), (6, 1), (5, 3)]);
        assert_eq!(sub.drops(), 1, "the late sample is dropped and counted, the repeat is not a loss");
    }

    #[test]
    fn a_ring_is_attached_only_for_the_publisher_that_owns_it() {
        use crate::registration::{Direction, RemoteTopic};
        let ring =
            crate::transport::shm_ring::RingWriter::create(&crate::Config::default().shm_ring, 77).expect("ring");
        let me = std::process::id();
        let open = |pid, id| {
            super::open_announced_ring(
                ring.segment_name(),
                &RemoteTopic::for_test(pid, id, vec![], Direction::Publisher),
                false,
            )
        };
        assert!(open(me, 77).is_ok(), "the announcer's own segment");
        let err = open(me, 78).unwrap_err();
        assert!(err.contains("not to the announcer"), "{err}");
        assert!(open(me + 1, 77).is_err(), "another process claiming this segment");
    }

    /// A runtime of its own (no other test's subscribers on its doorbell thread): a configuration no other test uses.
    fn private_node(name: &str) -> crate::Node {
        let mut config = crate::Config::default();
        config.receive.latency_statistics = false;
        config.shm_ring.slot_count = 8;
        crate::Node::init_with_config(name, config).expect("init")
    }

    /// The ring `ring` of this process announced as publisher `id` of this host, as registration gives it.
    fn ring_remote(
        node: &crate::Node,
        ring: &crate::transport::shm_ring::RingWriter,
        id: u64,
    ) -> crate::registration::RemoteTopic {
        use crate::registration::{Direction, Layer, LayerKind, LayerPar, RemoteTopic, ShoalPar};
        let par = ShoalPar { segment: ring.segment_name().to_owned(), ..ShoalPar::default() };
        let layers = vec![Layer::new(LayerKind::ShoalRing, true, true, LayerPar::Shoal(par))];
        let mut remote = RemoteTopic::for_test(std::process::id(), id, layers, Direction::Publisher);
        remote.key.host_name = node.host_name().to_owned();
        remote
    }

    /// What a broken or hostile writer can leave behind: its segment marked superseded (with no successor) after
    /// counting `unpublished` more samples than it published. Every slot the reader looks at then reads "not
    /// published yet" while the header says the samples were written and the segment has data.
    fn supersede_with_unpublished(segment: &str, unpublished: u64) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(segment).expect("open segment");
        let mut w = [0u8; 8];
        f.read_exact_at(&mut w, 128).expect("read write_seq");
        let w = u64::from_le_bytes(w) + unpublished;
        f.write_all_at(&w.to_le_bytes(), 128).expect("write write_seq");
        f.write_all_at(&1u32.to_le_bytes(), 192).expect("write superseded");
    }

    /// A busy spin reads the clock only after its first polls; its deadline still holds, a zero one included.
    #[test]
    fn a_busy_spin_receive_keeps_its_deadline() {
        use std::time::{Duration, Instant};
        let node = private_node("sub_busy_spin_deadline");
        let sub = node
            .subscriber("sub_busy_spin_deadline_topic")
            .wait(crate::WaitStrategy::BusySpin)
            .create()
            .expect("subscriber");
        let mut ring = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 92).expect("ring");
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &ring, 92));
        for ms in [0, 30] {
            let t = Instant::now();
            assert!(matches!(sub.recv_timeout(Duration::from_millis(ms)), Err(crate::RecvError::Timeout)));
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(ms) && took < Duration::from_millis(ms + 250), "{ms} ms: {took:?}");
        }
        let _ = ring.write(b"spun", crate::sample::now_ns(), 1).expect("write");
        assert_eq!(sub.recv_timeout(Duration::from_secs(5)).expect("the sample").payload(), b"spun");
    }

    /// A spinning receive with one ring reader polls a watch of that ring's next slot, not the reader: what comes
    /// meanwhile from a second ring, from a publisher of this process, and again from the first ring is delivered.
    #[test]
    fn a_spinning_receive_watching_one_ring_gets_what_comes_from_a_new_ring_and_this_process() {
        use std::time::Duration;
        let node = private_node("sub_watch");
        let sub = node.subscriber("sub_watch_topic").wait(crate::WaitStrategy::BusySpin).create().expect("sub");
        let mut a = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 95).expect("ring a");
        let (shared, rt) = (Arc::clone(&sub.handle.shared), Arc::clone(&sub.handle.rt));
        shared.connect_remote(&rt, &ring_remote(&node, &a, 95));
        let receiver = std::thread::spawn(move || {
            let got: Vec<Vec<u8>> = (0..3)
                .map_while(|_| sub.recv_timeout(Duration::from_secs(5)).ok())
                .map(|s| s.payload().to_vec())
                .collect();
            (got, sub)
        });
        // The receiver spins on ring a's next slot meanwhile.
        std::thread::sleep(Duration::from_millis(50));
        let mut b = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 96).expect("ring b");
        shared.connect_remote(&rt, &ring_remote(&node, &b, 96));
        let _ = b.write(b"from b", crate::sample::now_ns(), 1).expect("write b");
        let mut publ = node.publisher("sub_watch_topic").create().expect("publisher");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while shared.intra_pubs.load(std::sync::atomic::Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        publ.send(b"same process").expect("send");
        std::thread::sleep(Duration::from_millis(50));
        let _ = a.write(b"from a", crate::sample::now_ns(), 1).expect("write a");
        let (got, sub) = receiver.join().expect("receiver");
        assert_eq!(got, [&b"from b"[..], b"same process", b"from a"]);
        assert_eq!(sub.drops(), 0);
    }

    #[test]
    fn recv_waits_instead_of_spinning_on_a_superseded_ring_whose_slots_were_never_published() {
        let node = private_node("sub_dead_slots_recv");
        let sub = node.subscriber("sub_dead_slots_recv_topic").create().expect("subscriber");
        let mut ring = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 91).expect("ring");
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &ring, 91));
        let _ = ring.write(b"first", crate::sample::now_ns(), 1).expect("write");
        let first = sub.recv_timeout(std::time::Duration::from_secs(5)).expect("the published sample");
        assert_eq!(first.payload(), b"first");

        supersede_with_unpublished(ring.segment_name(), 2);
        let window = std::time::Duration::from_millis(600);
        let cpu = crate::sys::thread_cpu_time();
        let got = sub.recv_timeout(window);
        let cpu = crate::sys::thread_cpu_time() - cpu;
        assert!(matches!(got, Err(crate::pubsub::RecvError::Timeout)), "{got:?}");
        // Spinning, the thread runs the whole window (or its share of a busy machine's cores); waiting, it wakes a
        // few times.
        assert!(cpu < window / 10, "recv_timeout used {cpu:?} of CPU in a {window:?} window: it spun");
        assert_eq!(sub.drops(), 2, "the two samples counted but never published are lost, and counted");
        assert_eq!(sub.received(), 1);
    }

    #[test]
    fn a_blocking_recv_polls_through_a_write_for_a_bounded_time_only() {
        use std::time::Duration;
        let node = private_node("sub_held_loan");
        let sub = node.subscriber("sub_held_loan_topic").wait(crate::WaitStrategy::Block).create().expect("sub");
        let mut ring = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 92).expect("ring");
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &ring, 92));
        // A write that never ends (a loan held, or a publisher that died mid-write): the receive polls through it
        // for WRITE_POLL, then sleeps for the rest of its timeout.
        ring.loan(1000).expect("loan").fill(3);
        let window = Duration::from_millis(600);
        let cpu = crate::sys::thread_cpu_time();
        let got = sub.recv_timeout(window);
        let cpu = crate::sys::thread_cpu_time() - cpu;
        assert!(matches!(got, Err(crate::pubsub::RecvError::Timeout)), "{got:?}");
        assert!(cpu < window / 10, "recv_timeout used {cpu:?} of CPU in a {window:?} window: it kept polling");
        // A write that ends while a receive waits is delivered, whether the receive polled or slept meanwhile.
        let receiver =
            std::thread::spawn(move || sub.recv_timeout(Duration::from_secs(5)).map(|s| s.payload().to_vec()));
        std::thread::sleep(Duration::from_millis(20));
        let _ = ring.commit(1000, crate::sample::now_ns(), 1).expect("commit");
        assert_eq!(receiver.join().expect("receiver").expect("the message"), vec![3u8; 1000]);
    }

    /// The (clock, CPU time of its thread so far) each callback of a callback subscriber noted.
    type Noted = Arc<std::sync::Mutex<Vec<(u64, std::time::Duration)>>>;

    /// A callback subscriber of `topic` whose callbacks (on the doorbell thread) note the sample's clock and the CPU
    /// time their thread has used so far.
    fn cpu_noting_subscriber(node: &crate::Node, topic: &str) -> (crate::CallbackSubscriber, Noted) {
        let seen: Noted = Arc::default();
        let sink = Arc::clone(&seen);
        let sub = node
            .subscriber(topic)
            .callback(move |s| sink.lock().unwrap().push((s.clock, crate::sys::thread_cpu_time())))
            .create()
            .expect("subscriber");
        (sub, seen)
    }

    /// Waits up to 5 s until `n` callbacks noted theirs.
    fn wait_for_callbacks(seen: &Noted, n: usize) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while seen.lock().unwrap().len() < n {
            assert!(std::time::Instant::now() < until, "callback {n} did not run");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn the_doorbell_thread_polls_through_a_write_for_a_bounded_time_only() {
        use std::time::Duration;
        let node = private_node("sub_held_loan_dispatch");
        let (sub, seen) = cpu_noting_subscriber(&node, "sub_held_loan_dispatch_topic");
        let wait_for = |n| wait_for_callbacks(&seen, n);
        let mut ring = crate::transport::shm_ring::RingWriter::create(&node.config().shm_ring, 95).expect("ring");
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &ring, 95));
        let _ = ring.write(b"first", crate::sample::now_ns(), 1).expect("write");
        wait_for(1);
        // A write that does not end for a while (a loan held): polled through for WRITE_POLL, then slept through.
        ring.loan(1000).expect("loan").fill(5);
        let window = Duration::from_millis(600);
        std::thread::sleep(window);
        let _ = ring.commit(1000, crate::sample::now_ns(), 2).expect("commit");
        wait_for(2);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.iter().map(|(clock, _)| *clock).collect::<Vec<_>>(), [1, 2]);
        let cpu = seen[1].1 - seen[0].1;
        assert!(cpu < window / 10, "the doorbell thread used {cpu:?} of CPU in a {window:?} window: it kept polling");
    }

    #[test]
    fn the_doorbell_thread_waits_instead_of_spinning_on_a_superseded_ring_whose_slots_were_never_published() {
        let node = private_node("sub_dead_slots_dispatch");
        let (sub, seen) = cpu_noting_subscriber(&node, "sub_dead_slots_dispatch_topic");
        let wait_for = |n| wait_for_callbacks(&seen, n);
        let cfg = &node.config().shm_ring;
        let mut bad = crate::transport::shm_ring::RingWriter::create(cfg, 93).expect("ring");
        let mut good = crate::transport::shm_ring::RingWriter::create(cfg, 94).expect("ring");
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &bad, 93));
        sub.handle.shared.connect_remote(&sub.handle.rt, &ring_remote(&node, &good, 94));
        let _ = bad.write(b"bad", crate::sample::now_ns(), 1).expect("write");
        wait_for(1);
        let _ = good.write(b"good", crate::sample::now_ns(), 2).expect("write");
        wait_for(2);

        supersede_with_unpublished(bad.segment_name(), 2);
        let window = std::time::Duration::from_millis(600);
        std::thread::sleep(window);
        let _ = good.write(b"good", crate::sample::now_ns(), 3).expect("write");
        wait_for(3);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.iter().map(|(clock, _)| *clock).collect::<Vec<_>>(), [1, 2, 3]);
        let cpu = seen[2].1 - seen[1].1;
        assert!(cpu < window / 10, "the doorbell thread used {cpu:?} of CPU in a {window:?} window: it spun");
        assert_eq!(sub.drops(), 2, "the two samples counted but never published are lost, and counted");
    }

    #[test]
    fn the_queue_keeps_depth_messages_of_any_size_and_small_ones_within_the_byte_budget() {
        use crate::config::QueuePolicy;
        let node = crate::Node::init_with_config("sub_queue_policy", crate::Config::default()).expect("init");
        let policy = QueuePolicy::new(4, 1000);
        let sub = node.subscriber("sub_queue_policy_topic").queue(policy).create().expect("subscriber");
        let inbox: &dyn Inbox = &*sub.handle.shared;
        let take = || std::iter::from_fn(|| sub.try_recv()).map(|s| s.clock).collect::<Vec<u64>>();
        // Large messages: the newest `depth` are kept, whatever the byte budget says.
        for clock in 1..=10 {
            inbox.push(sized(1, clock, 100_000));
        }
        assert_eq!(take(), [7, 8, 9, 10]);
        assert_eq!(sub.drops(), 6);
        // Small messages (each charged 64 bytes): as many as fit 1000 bytes, 15.
        for clock in 11..=40 {
            inbox.push(sized(1, clock, 3));
        }
        assert_eq!(take(), (26..=40).collect::<Vec<u64>>());
        assert_eq!(sub.drops(), 6 + 15);
        // A small message then a large one: both kept (the README's case).
        inbox.push(sized(1, 41, 5));
        inbox.push(sized(1, 42, 1 << 20));
        assert_eq!(take(), [41, 42]);
        // The configured default: 16 messages of 8 MB.
        let sub = node.subscriber("sub_queue_policy_default").create().expect("subscriber");
        assert_eq!(sub.handle.shared.queue, QueuePolicy::default());
        let inbox: &dyn Inbox = &*sub.handle.shared;
        for clock in 1..=16 {
            inbox.push(sized(2, clock, 8_000_000));
        }
        assert_eq!(std::iter::from_fn(|| sub.try_recv()).count(), 16);
        assert_eq!(sub.drops(), 0);
    }
}
