//! The per-process runtime shared by every node: identity, the I/O thread, the doorbell thread, and the table of
//! local publishers and subscribers (used for same-process delivery). It is the I/O thread's [`EventHandler`]:
//! it applies registration's match events to the local publishers and subscribers (connecting them, opening
//! subscriber processes' doorbells, starting the waker thread, removing dead processes' segments).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crate::config::Config;
use crate::io::{Command, EventHandler, IoHandle};
use crate::pubsub::dispatch::Dispatcher;
use crate::pubsub::publisher::PubShared;
use crate::pubsub::subscriber::SubShared;
use crate::pubsub::waker::Waker;
use crate::registration::{Event, Identity, LayerKind, LayerPar, LocalTopic, RemoteTopic, ShoalPar, TopicStats};
use crate::sync::lock;
use crate::transport::shm_ring::{Doorbell, DoorbellRemote};
use crate::transport::{LayerReaderFactory, LayerWriterFactory};

/// A local entity, as a match event names it.
enum Local {
    Pub(Arc<PubShared>),
    Sub(Arc<SubShared>),
}

#[derive(Default)]
struct Table {
    pubs: HashMap<u64, Weak<PubShared>>,
    subs: HashMap<u64, Weak<SubShared>>,
}

/// Everything one process shares between its nodes.
pub(crate) struct Runtime {
    pub(crate) config: Config,
    pub(crate) identity: Identity,
    /// This process's doorbell: every publisher that serves one of our subscribers rings it.
    pub(crate) doorbell: Arc<Doorbell>,
    /// A ringer on our own doorbell, for same-process publishers.
    pub(crate) self_ringer: DoorbellRemote,
    table: Mutex<Table>,
    /// Doorbells of remote subscriber processes, shared by all local publishers that serve them.
    doorbells: Mutex<HashMap<String, Weak<DoorbellRemote>>>,
    /// The I/O thread (taken at shutdown).
    io: Mutex<Option<IoHandle>>,
    pub(crate) dispatcher: Dispatcher,
    /// Rings subscriber processes' doorbells for publishers that find several asleep.
    pub(crate) waker: Waker,
    /// Delivers connection events to the callbacks of `.on_event` (started with the first event).
    pub(crate) events: Arc<crate::pubsub::events::EventThread>,
    /// eCAL-facing layers for publishers, in priority order (eCAL local order: shm, udp, tcp).
    pub(crate) writer_factories: Vec<Box<dyn LayerWriterFactory>>,
    /// eCAL-facing layers for subscribers.
    pub(crate) reader_factories: Vec<Box<dyn LayerReaderFactory>>,
    next_entity: AtomicU64,
    entity_prefix: u64,
    /// The UDP data layer, for its counters in `Node::snapshot`.
    udp: crate::transport::udp::UdpLayer,
    /// The eCAL TCP layer, for its counters.
    tcp: crate::transport::ecal_tcp::TcpLayer,
    /// Service servers and clients.
    pub(crate) services: Arc<crate::service::Services>,
    /// Stale-file cleanup: due after a process of this host departed, run at most once per registration period.
    cleanup: Mutex<StaleCleanup>,
}

/// When the stale-file cleanup runs (see [`Runtime::stale_cleanup`]).
#[derive(Debug, Default)]
struct StaleCleanup {
    /// An entity of this host went away since the last scan.
    due: bool,
    /// The last scan.
    last: Option<std::time::Instant>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("identity", &self.identity).finish_non_exhaustive()
    }
}

/// The shoal ring parameters in a remote topic's registration, if it advertises the native ring.
pub(crate) fn shoal_par(remote: &RemoteTopic) -> Option<&ShoalPar> {
    remote.layers.iter().find_map(|l| match (&l.kind, &l.par) {
        // shoal's own layer: the flag itself (eCAL's "version < 2 means enabled" rule is for eCAL 5 layers).
        (LayerKind::ShoalRing, LayerPar::Shoal(p)) if l.enabled => Some(p),
        _ => None,
    })
}

/// What a [`Runtime`] is made of: the process's identity and doorbell, its eCAL-facing layers and the I/O thread.
pub(crate) struct RuntimeParts {
    pub(crate) config: Config,
    pub(crate) identity: Identity,
    pub(crate) doorbell: Doorbell,
    pub(crate) self_ringer: DoorbellRemote,
    /// eCAL-facing layers for publishers, in priority order.
    pub(crate) writer_factories: Vec<Box<dyn LayerWriterFactory>>,
    /// eCAL-facing layers for subscribers.
    pub(crate) reader_factories: Vec<Box<dyn LayerReaderFactory>>,
    /// The UDP data layer (its factories are among the above).
    pub(crate) udp: crate::transport::udp::UdpLayer,
    /// The eCAL TCP layer (its factories are among the above).
    pub(crate) tcp: crate::transport::ecal_tcp::TcpLayer,
    /// The I/O thread, waiting for its handler: the runtime made of these parts.
    pub(crate) io: IoHandle,
    /// Service servers and clients (their I/O source is among the I/O thread's).
    pub(crate) services: Arc<crate::service::Services>,
}

impl Runtime {
    pub(crate) fn new(parts: RuntimeParts) -> Runtime {
        let RuntimeParts {
            config,
            identity,
            doorbell,
            self_ringer,
            writer_factories,
            reader_factories,
            udp,
            tcp,
            io,
            services,
        } = parts;
        // Starts the send-time clock's calibration (`sys::wall_clock`: sends read the wall clock itself for its first
        // millisecond), so that it is over before a publisher of this process is matched.
        let _ = crate::sample::now_ns();
        let pid = u64::from(identity.pid);
        let random: u64 = rand::random::<u64>() & 0xFF_FFFF;
        Runtime {
            config,
            identity,
            doorbell: Arc::new(doorbell),
            self_ringer,
            table: Mutex::new(Table::default()),
            doorbells: Mutex::default(),
            io: Mutex::new(Some(io)),
            dispatcher: Dispatcher::default(),
            waker: Waker::default(),
            events: Arc::default(),
            writer_factories,
            reader_factories,
            next_entity: AtomicU64::new(1),
            entity_prefix: ((pid & 0xFF_FFFF) << 40) | (random << 16),
            udp,
            tcp,
            services,
            cleanup: Mutex::default(),
        }
    }

    /// The UDP data layer's counters.
    pub(crate) fn udp_counts(&self) -> crate::stats::UdpCounts {
        self.udp.counts()
    }

    /// The eCAL TCP layer's counters.
    pub(crate) fn tcp_counts(&self) -> crate::stats::TcpCounts {
        self.tcp.counts()
    }

    /// A fresh entity id, eCAL style: `(pid & 0xFFFFFF) << 40 | random24 << 16 | counter`.
    pub(crate) fn new_entity_id(&self) -> u64 {
        // The counter may run into the random bits after 65535 entities; ids stay unique within the process.
        self.entity_prefix.wrapping_add(self.next_entity.fetch_add(1, Ordering::Relaxed))
    }

    pub(crate) fn io_send(&self, cmd: Command) {
        if let Some(io) = lock(&self.io).as_ref() {
            io.send(cmd);
        }
    }

    /// Where this process's ring segments may live besides /dev/shm (for stale-segment cleanup): the huge-page
    /// mount, when huge pages are wanted and it exists.
    pub(crate) fn ring_dir(&self) -> PathBuf {
        let huge = &self.config.shm_ring.huge_pages_path;
        if self.config.shm_ring.huge_pages == crate::config::HugePages::On
            || (self.config.shm_ring.huge_pages.wanted() && huge.is_dir())
        {
            huge.clone()
        } else {
            PathBuf::from(crate::transport::shm_ring::SHM_DIR)
        }
    }

    fn local(&self, id: u64) -> Option<Local> {
        let t = lock(&self.table);
        if let Some(p) = t.pubs.get(&id).and_then(Weak::upgrade) {
            return Some(Local::Pub(p));
        }
        t.subs.get(&id).and_then(Weak::upgrade).map(Local::Sub)
    }

    /// Registers a new local publisher and connects it with the same-process subscribers of its topic.
    pub(crate) fn add_publisher(&self, p: &Arc<PubShared>) {
        let mut t = lock(&self.table);
        t.pubs.insert(p.id, Arc::downgrade(p));
        for s in t.subs.values().filter_map(Weak::upgrade) {
            if *s.topic == *p.topic {
                p.connect_intra(&s);
                s.intra_publisher_added(p.id, &self.identity.host_name, &p.type_info);
            }
        }
    }

    /// Registers a new local subscriber and connects it with the same-process publishers of its topic.
    pub(crate) fn add_subscriber(&self, s: &Arc<SubShared>) {
        let mut t = lock(&self.table);
        t.subs.insert(s.id, Arc::downgrade(s));
        for p in t.pubs.values().filter_map(Weak::upgrade) {
            if *p.topic == *s.topic {
                p.connect_intra(s);
                s.intra_publisher_added(p.id, &self.identity.host_name, &p.type_info);
            }
        }
    }

    pub(crate) fn remove_publisher(&self, id: u64) {
        let mut t = lock(&self.table);
        if let Some(p) = t.pubs.remove(&id).and_then(|w| w.upgrade()) {
            for s in t.subs.values().filter_map(Weak::upgrade) {
                if *s.topic == *p.topic {
                    s.intra_publisher_removed(p.id, &self.identity.host_name);
                }
            }
        }
    }

    pub(crate) fn remove_subscriber(&self, id: u64) {
        let mut t = lock(&self.table);
        if let Some(s) = t.subs.remove(&id).and_then(|w| w.upgrade()) {
            for p in t.pubs.values().filter_map(Weak::upgrade) {
                p.disconnect_intra(s.id);
            }
        }
    }

    /// Statistics of every local entity, for the next registration refresh.
    pub(crate) fn collect_stats(&self) -> Vec<(u64, TopicStats)> {
        let t = lock(&self.table);
        let now = Instant::now();
        let mut out = Vec::with_capacity(t.pubs.len() + t.subs.len());
        out.extend(t.pubs.values().filter_map(Weak::upgrade).map(|p| (p.id, p.stats(now))));
        out.extend(t.subs.values().filter_map(Weak::upgrade).map(|s| {
            s.report_drops();
            s.expire_history_waits();
            (s.id, s.stats(now, &self.identity.host_name))
        }));
        out
    }

    /// Whether [`shutdown`](Self::shutdown) ran (the I/O thread is stopped).
    #[cfg(test)]
    pub(crate) fn is_shut_down(&self) -> bool {
        lock(&self.io).is_none()
    }

    /// Stops the threads; the I/O thread sends the unregistration samples first.
    pub(crate) fn shutdown(&self) {
        self.dispatcher.shutdown(self);
        self.waker.shutdown();
        self.events.shutdown();
        let io = lock(&self.io).take();
        if let Some(mut io) = io {
            io.shutdown();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A user's share of the runtime: what nodes, publishers, subscribers and service servers and clients hold
/// (`Arc<RuntimeShare>`). The runtime's own threads hold it only weakly and upgrade for a moment; so when the last
/// share is dropped, the runtime shuts down right there, on the user's thread: the I/O thread has sent the
/// unregistration when the drop returns (for `main`, before the process exits). Were the runtime's own `Drop` the
/// trigger, a thread of the runtime holding a moment's upgrade when `main` dropped its node would run the shutdown,
/// and the process would exit under it without unregistering (peers then see it go only at the registration
/// timeout).
#[derive(Debug)]
pub(crate) struct RuntimeShare(Arc<Runtime>);

impl RuntimeShare {
    pub(crate) fn new(rt: Arc<Runtime>) -> Arc<RuntimeShare> {
        Arc::new(RuntimeShare(rt))
    }

    /// The runtime itself, to hand its threads a `Weak` of.
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.0
    }
}

impl std::ops::Deref for RuntimeShare {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.0
    }
}

impl Drop for RuntimeShare {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

impl EventHandler for Runtime {
    fn on_event(&self, event: Event) -> Option<LocalTopic> {
        match event {
            Event::Matched { local_id, remote } | Event::Updated { local_id, remote } => match self.local(local_id)? {
                Local::Pub(p) => {
                    let db = self.doorbell_for(&remote);
                    // Several subscriber processes: their wake-ups go through the waker thread (started here, on
                    // the I/O thread, off the send path, with its affinity). The publisher tells it of its doorbells
                    // when it takes the new connections, before it can hand them over.
                    if let Some(db) = &db {
                        // Another subscriber process's doorbell besides this one: two or more.
                        if p.ring_doorbells().iter().any(|b| !Arc::ptr_eq(b, db)) {
                            self.waker.start();
                        }
                    }
                    p.connect_remote(remote, db).then(|| p.local_topic())
                }
                Local::Sub(s) => {
                    s.connect_remote(self, &remote);
                    None
                }
            },
            Event::Unmatched { local_id, remote } => {
                let changed = match self.local(local_id) {
                    Some(Local::Pub(p)) => p.disconnect_remote(&remote).then(|| p.local_topic()),
                    Some(Local::Sub(s)) => {
                        s.disconnect_remote(&remote);
                        None
                    }
                    None => None,
                };
                if remote.host_name == self.identity.host_name {
                    lock(&self.cleanup).due = true;
                    self.stale_cleanup(std::time::Instant::now());
                }
                lock(&self.doorbells).retain(|_, w| w.strong_count() > 0);
                changed
            }
        }
    }

    fn collect_stats(&self) -> Vec<(u64, TopicStats)> {
        // Called once per registration period: a cleanup postponed by the rate limit runs here.
        self.stale_cleanup(std::time::Instant::now());
        Runtime::collect_stats(self)
    }

    fn collect_service_calls(&self) -> Vec<(u64, Vec<(String, i64)>)> {
        self.services.call_counts()
    }
}

impl Runtime {
    /// Removes the files of dead owners from the ring directory (`shm_ring::remove_stale_segments`: files nobody
    /// holds an owner lock on) when an entity of this host went away since the last scan, at most once per
    /// `registration_refresh`, so a churn of departures does not rescan the directory each time.
    fn stale_cleanup(&self, now: std::time::Instant) {
        {
            let mut c = lock(&self.cleanup);
            if !c.due || c.last.is_some_and(|l| now.saturating_duration_since(l) < self.config.registration.refresh) {
                return;
            }
            c.due = false;
            c.last = Some(now);
        }
        let shm = PathBuf::from(crate::transport::shm_ring::SHM_DIR);
        let ring = self.ring_dir();
        // Doorbells and eCAL memfiles are always in /dev/shm; rings also on the huge-page mount.
        for dir in std::iter::once(&shm).chain((ring != shm).then_some(&ring)) {
            match crate::transport::shm_ring::remove_stale_segments(dir) {
                Ok(removed) if !removed.is_empty() => {
                    tracing::debug!("removed {} stale shared-memory files from {}", removed.len(), dir.display())
                }
                Ok(_) => {}
                Err(e) => tracing::debug!("stale segment cleanup in {}: {e}", dir.display()),
            }
        }
    }
}

impl Runtime {
    /// The doorbell of a matched subscriber's process, when it reads our native ring (same host, shoal), opened
    /// once per process and shared by every local publisher that serves it.
    fn doorbell_for(&self, remote: &RemoteTopic) -> Option<Arc<DoorbellRemote>> {
        // Without a ring of our own (switched off) a subscriber cannot read us through it: other layers serve it.
        if remote.key.host_name != self.identity.host_name || !self.config.shm_ring.enabled {
            return None;
        }
        let name = shoal_par(remote)?.doorbell.clone();
        if name.is_empty() {
            return None;
        }
        let mut doorbells = lock(&self.doorbells);
        if let Some(db) = doorbells.get(&name).and_then(Weak::upgrade) {
            return Some(db);
        }
        match DoorbellRemote::open(&name) {
            // The doorbell must be the announcing subscriber process's own (its owner pid is in name and header).
            Ok(db) if db.owner_pid() != remote.key.pid => {
                tracing::warn!(
                    "subscriber process {} announced the doorbell {name} of process {}: not rung",
                    remote.key.pid,
                    db.owner_pid()
                );
                None
            }
            Ok(db) => {
                let db = Arc::new(db);
                doorbells.insert(name, Arc::downgrade(&db));
                Some(db)
            }
            Err(e) => {
                let hint = match &e {
                    crate::transport::shm_ring::DoorbellOpenError::Io { source, .. }
                        if source.raw_os_error() == Some(libc::EACCES) =>
                    {
                        " (the subscriber's process belongs to another user; to connect users, set [shoal_security] \
                         shm_access = group or all in the ecal.ini of both processes)"
                    }
                    _ => "",
                };
                tracing::warn!("cannot open the doorbell {name} of subscriber process {}: {e}{hint}", remote.key.pid);
                None
            }
        }
    }
}
