//! The sans-IO registration state machine (in the style of `quinn-proto`'s `Connection`).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::LimitsConfig;
use crate::config::{AuthConfig, RegistrationConfig};
use crate::process::ProcessState;
use crate::stats::ShoalProcessStats;
use crate::wire::auth::{self as wauth, AuthReceiver, AuthReject, AuthStats, Channel, Sealer};
use crate::wire::{self, DEFAULT_MAX_FRAGMENT_PAYLOAD, Reassembler, ReassemblyConfig, ReassemblyCounters};

use super::codec::{self, DecodeError};
use super::model::{
    Direction, EntityKey, Event, Identity, Layer, LayerPar, LocalService, LocalTopic, RegistrationCounters,
    RemoteProcess, RemoteService, RemoteTopic, TopicStats,
};
use super::repeat::{self, Body, Fingerprint, RepeatKey};
use super::services::ServiceRegistry;
use super::slots::SlotMap;
use crate::wire::pb;

#[derive(Debug)]
struct LocalEntry {
    direction: Direction,
    topic: LocalTopic,
    clock: i32,
}

#[derive(Debug)]
struct RemoteEntry {
    topic: RemoteTopic,
    last_seen: Instant,
    /// The address its registration came from.
    source: SocketAddr,
    /// Its share of `registry_bytes` ([`topic_charge`]).
    charge: usize,
    /// Its registration came with a verified envelope (`[shoal_auth]`): only such registration may change it.
    authenticated: bool,
    /// What recognises a repeat of the sample it was made from (in [`Registrar::repeats`]); `None`: every sample
    /// is decoded (its descriptor was dropped for lack of room, so a repeat may fit it in later).
    repeat: Option<RepeatKey>,
}

/// A remote process as kept: the sample it was made from, the address it came from and what recognises a repeat.
#[derive(Debug)]
struct ProcessEntry {
    process: RemoteProcess,
    source: SocketAddr,
    repeat: Option<RepeatKey>,
}

/// The registry entry a [`RepeatKey`] refreshes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Repeated {
    Topic(EntityKey),
    Process((String, u32)),
}

/// What the repeat index holds for a [`RepeatKey`]: its entry, and the slot where that entry was last found in its
/// [`SlotMap`] (a hint: a removal may have moved it; checked against the entry's own repeat key before use).
#[derive(Debug)]
struct RepeatTarget {
    entry: Repeated,
    slot: usize,
}

/// Bytes charged per registry entry on top of its strings: the structs, map nodes, key copies and the allocator's
/// share. Measured: 20,000 topics with short names grew a process by 23 MB, about 1.2 KB each.
const ENTRY_OVERHEAD: usize = 1024;

/// What a remote topic costs the registry: its strings, descriptor and layer parameters, the host name twice
/// (the entry's key and the sender's share), plus [`ENTRY_OVERHEAD`].
fn topic_charge(t: &RemoteTopic) -> usize {
    let layers: usize = t
        .layers
        .iter()
        .map(|l| {
            std::mem::size_of::<Layer>()
                + match &l.par {
                    LayerPar::Shm { memory_files } => {
                        memory_files.iter().map(|f| f.len() + std::mem::size_of::<String>()).sum()
                    }
                    LayerPar::Shoal(p) => p.segment.len() + p.doorbell.len(),
                    LayerPar::None | LayerPar::Tcp { .. } | LayerPar::ShoalUdp { .. } => 0,
                }
        })
        .sum();
    ENTRY_OVERHEAD
        + 2 * t.key.host_name.len()
        + t.topic_name.len()
        + t.type_info.name.len()
        + t.type_info.encoding.len()
        + t.type_info.descriptor.len()
        + t.process_name.len()
        + t.unit_name.len()
        + t.shm_transport_domain.len()
        + layers
}

/// What a remote process costs the registry (the host name in its key, its share and its body).
fn process_charge(p: &RemoteProcess) -> usize {
    ENTRY_OVERHEAD
        + 3 * p.host_name.len()
        + p.process_name.len()
        + p.unit_name.len()
        + p.process_parameter.len()
        + p.shm_transport_domain.len()
        + p.component_init_info.len()
        + p.ecal_runtime_version.len()
        + p.config_file_path.len()
        + p.time_sync_module_name.len()
        + p.state.info.len()
}

/// Which topics need authentication (`[shoal_auth] protected_topics`, anchored to the whole name).
#[derive(Debug, Clone)]
pub struct ProtectedTopics(regex::Regex);

impl ProtectedTopics {
    /// The topics matching `pattern` as a whole.
    pub fn new(pattern: &str) -> Result<ProtectedTopics, regex::Error> {
        regex::Regex::new(&format!("^(?:{pattern})$")).map(ProtectedTopics)
    }

    /// Whether `topic` is protected.
    pub fn contains(&self, topic: &str) -> bool {
        self.0.is_match(topic)
    }
}

/// The registrar's side of `[shoal_auth]` when a key is set.
#[derive(Debug)]
struct RegAuth {
    sealer: Sealer,
    protected: ProtectedTopics,
    /// Tag check, replay guard and the reassembly of authenticated messages.
    rx: AuthReceiver,
}

/// Which sending address registered which remote entities, so that a full registry makes room by evicting an
/// entity of the address holding the most, never of a smaller one: a flood from one socket (or a few) cannot lock
/// out the other processes, whatever pids and names it claims.
#[derive(Debug)]
struct SourceShares<K> {
    keys: HashMap<SocketAddr, BTreeSet<K>>,
    /// (entities held, address), largest last.
    sizes: BTreeSet<(usize, SocketAddr)>,
}

impl<K> Default for SourceShares<K> {
    fn default() -> Self {
        SourceShares { keys: HashMap::new(), sizes: BTreeSet::new() }
    }
}

impl<K: Ord + Clone> SourceShares<K> {
    fn resize(&mut self, source: SocketAddr, from: usize, to: usize) {
        self.sizes.remove(&(from, source));
        if to > 0 {
            self.sizes.insert((to, source));
        }
    }

    fn insert(&mut self, source: SocketAddr, key: K) {
        let set = self.keys.entry(source).or_default();
        let before = set.len();
        set.insert(key);
        let after = set.len();
        self.resize(source, before, after);
    }

    fn remove(&mut self, source: SocketAddr, key: &K) {
        let Some(set) = self.keys.get_mut(&source) else { return };
        let before = set.len();
        set.remove(key);
        let after = set.len();
        if after == 0 {
            self.keys.remove(&source);
        }
        self.resize(source, before, after);
    }

    /// The entity to evict so that a new one from `source` fits, or `None` when `source` itself holds (about)
    /// the most: then the newcomer is refused instead.
    fn victim(&self, source: SocketAddr) -> Option<K> {
        let &(largest, big) = self.sizes.last()?;
        let mine = self.keys.get(&source).map_or(0, BTreeSet::len);
        if big == source || mine + 1 >= largest {
            return None;
        }
        self.keys.get(&big)?.first().cloned()
    }
}

/// eCAL-compatible registration of one process, without I/O.
///
/// The driver (the I/O thread) feeds it received datagrams ([`handle_datagram`](Self::handle_datagram))
/// and timer expiries ([`handle_timeout`](Self::handle_timeout) at [`poll_timeout`](Self::poll_timeout)),
/// then drains [`poll_transmit`](Self::poll_transmit) (whole UDP datagrams for the registration
/// address) and [`poll_event`](Self::poll_event). It never reads a clock: every call that
/// depends on time takes `now`.
///
/// Behaviour:
/// - Every `refresh` it sends the process sample (cmd 4) and one sample per local publisher
///   (cmd 2) and subscriber (cmd 3), each with an incrementing registration clock. A new or
///   changed local entity is sent at once, and so is the process sample after construction.
/// - Received samples are accepted like eCAL's `AcceptRegistrationSample`: same host name, or
///   same SHM transport domain, or network mode. Samples from our own process are kept (for
///   monitoring) unless `loopback` is off, but never produce [`Event::Matched`].
/// - A local publisher matches remote subscribers of the same topic name and vice versa.
///   On a new match the local entity is registered again at once, so the peer learns our
///   layer parameters within one round trip.
/// - Remote entries not refreshed within `timeout` expire; unregistration samples (12/13/14)
///   remove them at once. Both end matches with [`Event::Unmatched`].
#[derive(Debug)]
pub struct Registrar {
    me: Identity,
    refresh: Duration,
    timeout: Duration,
    loopback: bool,
    max_fragment_payload: usize,
    reassembler: Reassembler,
    bounds: LimitsConfig,
    rng: StdRng,
    next_refresh: Instant,
    process_clock: i32,
    /// Sent with the process registration ([`Registrar::set_process_stats`]).
    process_stats: ShoalProcessStats,
    /// Sent with the process registration ([`Registrar::set_process_state`]).
    process_state: ProcessState,
    process_dirty: bool,
    locals: BTreeMap<u64, LocalEntry>,
    dirty: BTreeSet<u64>,
    processes: SlotMap<(String, u32), ProcessEntry>,
    topics: SlotMap<EntityKey, RemoteEntry>,
    /// The repeat keys of the entries of `topics` and `processes` (at most one each: bounded as they are).
    repeats: HashMap<RepeatKey, RepeatTarget>,
    /// Keys the fingerprints' hash ([`repeat::fingerprint`]).
    repeat_keys: RandomState,
    /// No entry of `topics` or `processes` expires before this (a lower bound, made exact by `handle_timeout`), so
    /// that `poll_timeout` need not look at every entry.
    expiry_floor: Option<Instant>,
    shares: SourceShares<EntityKey>,
    /// The same for remote processes: which address announced which.
    process_shares: SourceShares<(String, u32)>,
    matches: BTreeSet<(u64, EntityKey)>,
    /// Bytes held by `topics` and `processes` ([`topic_charge`], [`process_charge`]), under `registry_bytes`.
    registry_bytes: usize,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    counters: RegistrationCounters,
    shut_down: bool,
    auth: Option<RegAuth>,
    auth_stats: Arc<AuthStats>,
    /// Remote processes whose registration was authenticated.
    authenticated_processes: BTreeSet<(String, u32)>,
    /// Local and remote service servers and clients.
    services: ServiceRegistry,
}

impl Registrar {
    /// A registrar for `identity`. An empty `identity.shm_transport_domain` is replaced by
    /// `cfg.shm_transport_domain`, or by the host name if that is empty too (as eCAL does).
    /// The process sample is queued at once.
    pub fn new(identity: Identity, cfg: &RegistrationConfig, now: Instant) -> Self {
        let mut me = identity;
        if me.shm_transport_domain.is_empty() {
            me.shm_transport_domain = if cfg.shm_transport_domain.is_empty() {
                me.host_name.clone()
            } else {
                cfg.shm_transport_domain.clone()
            };
        }
        // A zero period would make the driver spin; one millisecond is the floor.
        let refresh = cfg.refresh.max(Duration::from_millis(1));
        Registrar {
            me,
            refresh,
            timeout: cfg.timeout,
            loopback: cfg.loopback,
            max_fragment_payload: DEFAULT_MAX_FRAGMENT_PAYLOAD,
            reassembler: Reassembler::new(reassembly_of(&LimitsConfig::default())),
            bounds: LimitsConfig::default(),
            rng: StdRng::from_os_rng(),
            next_refresh: now + refresh,
            process_clock: 0,
            process_stats: ShoalProcessStats::default(),
            process_state: ProcessState::default(),
            process_dirty: true,
            locals: BTreeMap::new(),
            dirty: BTreeSet::new(),
            processes: SlotMap::default(),
            topics: SlotMap::default(),
            repeats: HashMap::new(),
            repeat_keys: RandomState::new(),
            expiry_floor: None,
            shares: SourceShares::default(),
            process_shares: SourceShares::default(),
            matches: BTreeSet::new(),
            registry_bytes: 0,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            counters: RegistrationCounters::default(),
            shut_down: false,
            auth: None,
            auth_stats: Arc::new(AuthStats::new(false)),
            authenticated_processes: BTreeSet::new(),
            services: ServiceRegistry::default(),
        }
    }

    /// Turns on `[shoal_auth]` when `cfg` has a key (call after [`with_bounds`](Self::with_bounds)): registration of
    /// the process and of protected topics is sent sealed, and received registration is checked (see
    /// [`ProtectedTopics`]); drops are counted in `stats`. Without a key only a received envelope is counted (as
    /// [`AuthReject::NoKey`]).
    pub fn with_auth(mut self, cfg: &AuthConfig, stats: Arc<AuthStats>) -> Result<Self, regex::Error> {
        self.auth_stats = stats;
        if let Some(key) = &cfg.key {
            let protected = ProtectedTopics::new(&cfg.protected_topics)?;
            self.auth = Some(RegAuth {
                sealer: Sealer::new(key, Channel::Registration),
                protected,
                rx: AuthReceiver::new(
                    key,
                    Channel::Registration,
                    self.bounds.auth_senders,
                    cfg.max_age,
                    reassembly_of(&self.bounds),
                ),
            });
            // The process sample goes out again, sealed.
            self.process_dirty = true;
        }
        Ok(self)
    }

    /// The authentication counters this registrar adds to.
    pub fn auth_stats(&self) -> &Arc<AuthStats> {
        &self.auth_stats
    }

    /// Replaces the fragment size used for sending (default 65483) and the reassembly limits.
    pub fn with_limits(mut self, max_fragment_payload: usize, reassembly: ReassemblyConfig) -> Self {
        self.max_fragment_payload = max_fragment_payload.max(1);
        self.reassembler = Reassembler::new(reassembly);
        self
    }

    /// Replaces the bounds on what received registration may cost (`[shoal_limits]`), including the
    /// reassembly limits they imply.
    pub fn with_bounds(mut self, bounds: &LimitsConfig) -> Self {
        self.reassembler = Reassembler::new(reassembly_of(bounds));
        if let Some(a) = &mut self.auth {
            a.rx.reassembler = Reassembler::new(reassembly_of(bounds));
        }
        self.bounds = bounds.clone();
        self
    }

    /// Our identity as sent (with the SHM transport domain resolved).
    pub fn identity(&self) -> &Identity {
        &self.me
    }

    /// Adds a local publisher and registers it at once.
    pub fn add_publisher(&mut self, now: Instant, t: LocalTopic) {
        self.add_local(now, Direction::Publisher, t);
    }

    /// Adds a local subscriber and registers it at once.
    pub fn add_subscriber(&mut self, now: Instant, t: LocalTopic) {
        self.add_local(now, Direction::Subscriber, t);
    }

    fn add_local(&mut self, _now: Instant, direction: Direction, t: LocalTopic) {
        if self.shut_down {
            tracing::warn!(id = t.id, "registrar shut down; local entity not added");
            return;
        }
        let id = t.id;
        if let Some(old) = self.locals.get(&id)
            && old.direction != direction
        {
            // Same id reused with the other direction: treat as removal + new entity.
            self.drop_local_matches(id);
        }
        let clock = self.locals.get(&id).map_or(0, |e| e.clock);
        self.locals.insert(id, LocalEntry { direction, topic: t, clock });
        self.dirty.insert(id);
        self.rematch_local(id);
    }

    /// Replaces a local entity's description (layers, type, stats) and re-registers it at once.
    /// Unknown ids are ignored.
    pub fn update_local(&mut self, _now: Instant, t: LocalTopic) {
        let id = t.id;
        let Some(entry) = self.locals.get_mut(&id) else {
            tracing::warn!(id, "update_local: unknown local entity");
            return;
        };
        entry.topic = t;
        self.dirty.insert(id);
        self.rematch_local(id);
    }

    /// Sets the process statistics sent with the next process registration (no send now).
    pub fn set_process_stats(&mut self, stats: ShoalProcessStats) {
        self.process_stats = stats;
    }

    /// Sets the state the process announces; a change is sent at once (with the next [`Registrar::poll_transmit`]),
    /// as eCAL's `SetState` is seen by monitors within a registration round.
    pub fn set_process_state(&mut self, state: ProcessState) {
        if state != self.process_state {
            self.process_state = state;
            self.process_dirty = true;
        }
    }

    /// The state the process announces.
    pub fn process_state(&self) -> &ProcessState {
        &self.process_state
    }

    /// Sets the statistics sent with the entity's next periodic registration (no send now).
    pub fn set_stats(&mut self, id: u64, stats: TopicStats) {
        if let Some(entry) = self.locals.get_mut(&id) {
            entry.topic.stats = stats;
        }
    }

    /// Removes a local entity: queues its unregistration (cmd 12/13) at once and ends its matches.
    pub fn remove_local(&mut self, _now: Instant, id: u64) {
        let Some(entry) = self.locals.remove(&id) else { return };
        self.dirty.remove(&id);
        let sample = codec::topic_unreg_sample(&self.me, entry.direction, &entry.topic);
        let sign = self.protects(&entry.topic.topic_name);
        self.queue_sample(&sample, sign);
        self.drop_local_matches(id);
    }

    /// Adds (or replaces) a local service server or client and registers it at once (cmd 5 / 6).
    pub fn add_service(&mut self, s: LocalService) {
        if self.shut_down {
            tracing::warn!(id = s.id, "registrar shut down; local service not added");
            return;
        }
        self.services.add_local(s);
    }

    /// Removes a local service server or client: queues its unregistration (cmd 15 / 16) at once.
    pub fn remove_service(&mut self, id: u64) {
        if let Some(s) = self.services.remove_local(id) {
            let sample = codec::service_sample(&self.me, &s, 0, true);
            let sign = self.protects(&s.service_name);
            self.queue_sample(&sample, sign);
        }
    }

    /// Sets the call counts sent with a local server's or client's next periodic registration (no send now).
    pub fn set_service_calls(&mut self, id: u64, calls: &[(String, i64)]) {
        self.services.set_calls(id, calls);
    }

    /// Known service servers and clients of other processes (and ours when loopback is on).
    pub fn services(&self) -> impl Iterator<Item = &RemoteService> {
        self.services.remote()
    }

    /// This process's service servers and clients, as announced.
    pub fn local_services(&self) -> impl Iterator<Item = &LocalService> {
        self.services.locals()
    }

    /// Changes whenever the known remote servers or clients change in a way that matters to a caller (see
    /// [`services`](Self::services)); compare with the value last seen.
    pub fn services_generation(&self) -> u64 {
        self.services.generation()
    }

    /// Feeds one datagram received on the registration port from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.counters.datagrams_received += 1;
        // Local mode sends to the loopback broadcast address only: anything else is not from this host.
        if !self.me.network_mode && !from.ip().is_loopback() {
            self.counters.non_local_source += 1;
            return;
        }
        let opened = wauth::open_datagram(
            self.auth.as_mut().map(|a| &mut a.rx),
            &mut self.reassembler,
            &self.auth_stats,
            Channel::Registration,
            now,
            datagram,
        );
        let (pushed, authenticated) = match opened {
            Ok(o) => (o.reassembler.push(now, from, o.datagram), o.authenticated),
            Err(cause) => {
                self.auth_stats.count(Channel::Registration, cause, None, &from);
                return;
            }
        };
        self.counters.reassembly = self.reassembly_counters();
        let message = match pushed {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => {
                self.counters.wire_errors += 1;
                tracing::debug!(%from, error = %e, "registration datagram dropped");
                return;
            }
        };
        // A repeat of the sample an entry was made from only refreshes the entry (see `repeat`).
        let fingerprint = wire::split_name(&message).ok().and_then(|(_, p)| repeat::fingerprint(p, &self.repeat_keys));
        let repeat = fingerprint.map(|f| RepeatKey { source: from, hash: f.hash, authenticated });
        if let (Some(f), Some(key)) = (fingerprint, repeat)
            && self.refresh_repeat(now, f, key)
        {
            return;
        }
        // Bounds before decoding: decoding allocates per entry. (Framing and malformed protobuf are left to the
        // decoder below, which counts them as such.)
        if let Ok((_, payload)) = wire::split_name(&message)
            && let Err(e) = super::limits::check_sample(payload, &self.bounds)
            && e != super::limits::LimitError::Malformed
        {
            self.counters.over_limits += 1;
            tracing::debug!(%from, error = %e, "registration sample over the limits dropped");
            return;
        }
        let sample = match codec::decode_registration(&message) {
            Ok(s) => s,
            Err(e) => {
                match e {
                    DecodeError::Framing(_) => self.counters.framing_errors += 1,
                    DecodeError::Protobuf(_) => self.counters.decode_errors += 1,
                }
                tracing::debug!(%from, error = %e, "registration sample dropped");
                return;
            }
        };
        self.apply_sample(now, sample, from, authenticated, repeat);
        self.note_seen(now);
    }

    /// When `key` is the repeat key of an entry (the same sample but for its clock, from the same address, sealed
    /// alike): refreshes the entry's expiry and clock, counts the sample as applied and as a repeat, true.
    /// The entry is found at the slot the index remembers (no search by key), or, when a removal moved it, by its
    /// key (and the slot remembered again).
    fn refresh_repeat(&mut self, now: Instant, f: Fingerprint, key: RepeatKey) -> bool {
        let Some(target) = self.repeats.get_mut(&key) else { return false };
        let refreshed = match &target.entry {
            Repeated::Topic(k) if f.body == Body::Topic => {
                let hinted = self.topics.at_mut(target.slot).is_some_and(|e| e.repeat == Some(key));
                if !hinted && let Some(slot) = self.topics.slot(k) {
                    target.slot = slot;
                }
                match self.topics.at_mut(target.slot) {
                    Some(e) if e.repeat == Some(key) => {
                        e.last_seen = now;
                        e.topic.registration_clock = f.clock;
                        true
                    }
                    _ => false,
                }
            }
            Repeated::Process(k) if f.body == Body::Process => {
                let hinted = self.processes.at_mut(target.slot).is_some_and(|e| e.repeat == Some(key));
                if !hinted && let Some(slot) = self.processes.slot(k) {
                    target.slot = slot;
                }
                match self.processes.at_mut(target.slot) {
                    Some(e) if e.repeat == Some(key) => {
                        e.process.last_seen = now;
                        e.process.registration_clock = f.clock;
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if refreshed {
            self.counters.samples_applied += 1;
            self.counters.repeats += 1;
            self.note_seen(now);
        }
        refreshed
    }

    /// An entry was made or refreshed at `now`: it expires no earlier than `now + timeout`.
    fn note_seen(&mut self, now: Instant) {
        let at = now + self.timeout;
        self.expiry_floor = Some(self.expiry_floor.map_or(at, |f| f.min(at)));
    }

    /// Makes `repeat` (or nothing) the repeat key of `entry` (now at `slot` of its map), replacing the one it had.
    fn set_repeat(&mut self, old: Option<RepeatKey>, repeat: Option<RepeatKey>, entry: Repeated, slot: usize) {
        if old == repeat {
            return;
        }
        if let Some(old) = old {
            self.forget_repeat(old, &entry);
        }
        if let Some(new) = repeat {
            self.repeats.insert(new, RepeatTarget { entry, slot });
        }
    }

    /// Removes `key` from the repeat index if it is `entry`'s.
    fn forget_repeat(&mut self, key: RepeatKey, entry: &Repeated) {
        if self.repeats.get(&key).is_some_and(|t| t.entry == *entry) {
            self.repeats.remove(&key);
        }
    }

    /// Both reassemblers' counters together.
    fn reassembly_counters(&self) -> ReassemblyCounters {
        let mut c = *self.reassembler.counters();
        if let Some(a) = &self.auth {
            c.add(a.rx.reassembler.counters());
        }
        c
    }

    /// Whether an unauthenticated sample may change a registry entry: always without a key; with one, not for a
    /// protected topic and not for an entry that was authenticated. Counts (per topic) what it refuses.
    fn unsigned_allowed(&self, topic: Option<&str>, entry_authenticated: bool, from: SocketAddr) -> bool {
        let Some(auth) = &self.auth else { return true };
        if entry_authenticated || topic.is_some_and(|t| auth.protected.contains(t)) {
            self.auth_stats.count(Channel::Registration, AuthReject::Unsigned, topic, &from);
            return false;
        }
        true
    }

    /// Runs what is due at `now`: the periodic refresh, expiry of remote entries and of
    /// incomplete fragmented messages.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.shut_down {
            return;
        }
        self.reassembler.expire(now);
        if let Some(a) = &mut self.auth {
            a.rx.reassembler.expire(now);
        }
        self.counters.reassembly = self.reassembly_counters();
        if now >= self.next_refresh {
            self.process_dirty = true;
            self.dirty.extend(self.locals.keys().copied());
            self.services.refresh_all();
            self.next_refresh += self.refresh;
            if self.next_refresh <= now {
                self.next_refresh = now + self.refresh;
            }
        }
        let timeout = self.timeout;
        // One pass over the entries as they lie (every one is looked at); what expired goes in key order.
        let mut stale: Vec<EntityKey> = self
            .topics
            .iter_unordered()
            .filter(|(_, e)| now.saturating_duration_since(e.last_seen) >= timeout)
            .map(|(k, _)| k.clone())
            .collect();
        stale.sort_unstable();
        for key in stale {
            self.counters.expired_topics += 1;
            tracing::debug!(?key, "remote topic expired");
            self.remove_remote(&key);
        }
        let mut expired: Vec<((String, u32), SocketAddr)> = self
            .processes
            .iter_unordered()
            .filter(|(_, e)| now.saturating_duration_since(e.process.last_seen) >= timeout)
            .map(|(k, e)| (k.clone(), e.source))
            .collect();
        expired.sort_unstable();
        for (key, source) in expired {
            self.counters.expired_processes += 1;
            self.remove_process(&key, source);
        }
        self.counters.expired_services += self.services.expire(now, timeout);
        let topics = self.topics.iter_unordered().map(|(_, e)| e.last_seen);
        let processes = self.processes.iter_unordered().map(|(_, e)| e.process.last_seen);
        self.expiry_floor = topics.chain(processes).min().map(|t| t + timeout);
    }

    /// Whether [`handle_timeout`](Self::handle_timeout) at `now` makes the periodic refresh (the registration of the
    /// process and every local entity), not only expiry: the driver updates the statistics sent with it then.
    pub fn refresh_due(&self, now: Instant) -> bool {
        !self.shut_down && now >= self.next_refresh
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next (`None` after shutdown).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.shut_down {
            return None;
        }
        let mut next = self.next_refresh;
        if let Some(floor) = self.expiry_floor {
            next = next.min(floor);
        }
        if let Some(t) = self.services.next_expiry(self.timeout) {
            next = next.min(t);
        }
        if let Some(r) = self.reassembler.next_expiry() {
            next = next.min(r);
        }
        if let Some(r) = self.auth.as_ref().and_then(|a| a.rx.reassembler.next_expiry()) {
            next = next.min(r);
        }
        Some(next)
    }

    /// The next UDP datagram to send to the registration address, if any.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.flush_dirty();
        let d = self.transmit.pop_front()?;
        self.counters.datagrams_sent += 1;
        Some(d)
    }

    /// The next match event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Unregisters every local entity (cmd 12/13, with [`Event::Unmatched`] for their matches)
    /// and the process (cmd 14). Afterwards nothing periodic is sent and
    /// [`poll_timeout`](Self::poll_timeout) returns `None`; drain [`poll_transmit`](Self::poll_transmit).
    pub fn shutdown(&mut self, now: Instant) {
        if self.shut_down {
            return;
        }
        let ids: Vec<u64> = self.locals.keys().copied().collect();
        for id in ids {
            self.remove_local(now, id);
        }
        for id in self.services.local_ids() {
            self.remove_service(id);
        }
        self.dirty.clear();
        self.process_dirty = false;
        let sample = codec::process_unreg_sample(&self.me);
        self.queue_sample(&sample, true);
        self.shut_down = true;
    }

    /// Known processes (including our own when loopback is on).
    pub fn processes(&self) -> impl Iterator<Item = &RemoteProcess> {
        self.processes.values().map(|e| &e.process)
    }

    /// Known publishers and subscribers (including our own when loopback is on).
    pub fn topics(&self) -> impl Iterator<Item = &RemoteTopic> {
        self.topics.values().map(|e| &e.topic)
    }

    /// Known publishers and subscribers with the time their last registration arrived.
    pub fn topics_seen(&self) -> impl Iterator<Item = (&RemoteTopic, Instant)> {
        self.topics.values().map(|e| (&e.topic, e.last_seen))
    }

    /// The remote entities currently matched with local entity `local_id`.
    pub fn matches_of(&self, local_id: u64) -> impl Iterator<Item = &EntityKey> {
        self.matches.iter().filter(move |(id, _)| *id == local_id).map(|(_, k)| k)
    }

    /// Counters of everything received, applied, dropped and sent.
    pub fn counters(&self) -> &RegistrationCounters {
        &self.counters
    }

    /// Entries of the repeat index (at most one per remote topic and process).
    #[cfg(test)]
    pub(crate) fn repeat_index_len(&self) -> usize {
        self.repeats.len()
    }

    // ---------------------------------------------------------------------------------------

    /// Queues a sample's datagrams; sealed when `[shoal_auth]` has a key and `sign` (the process, protected topics).
    fn queue_sample(&mut self, sample: &pb::Sample, sign: bool) {
        let rng = &mut self.rng;
        let sealer = self.auth.as_mut().filter(|_| sign).map(|a| &mut a.sealer);
        let max_payload = match sealer {
            Some(_) => self.max_fragment_payload.saturating_sub(wauth::ENVELOPE_OVERHEAD).max(1),
            None => self.max_fragment_payload,
        };
        match codec::encode_registration(sample, max_payload, &mut || rng.random()) {
            Ok(datagrams) => {
                self.counters.samples_sent += 1;
                match sealer {
                    Some(sealer) => {
                        let now_ns = wauth::unix_ns();
                        self.transmit.extend(datagrams.iter().map(|d| sealer.seal(d, now_ns)));
                    }
                    None => self.transmit.extend(datagrams),
                }
            }
            Err(e) => {
                self.counters.encode_errors += 1;
                tracing::warn!(error = %e, cmd = sample.cmd_type, "registration sample not sent");
            }
        }
    }

    fn flush_dirty(&mut self) {
        if self.process_dirty {
            self.process_dirty = false;
            self.process_clock = self.process_clock.wrapping_add(1);
            let sample =
                codec::process_sample_with(&self.me, self.process_clock, &self.process_state, &self.process_stats);
            self.queue_sample(&sample, true);
        }
        for id in std::mem::take(&mut self.dirty) {
            let Some(entry) = self.locals.get_mut(&id) else { continue };
            entry.clock = entry.clock.wrapping_add(1);
            let sample = codec::topic_sample(&self.me, entry.direction, &entry.topic, entry.clock);
            let sign = self.auth.as_ref().is_some_and(|a| a.protected.contains(&entry.topic.topic_name));
            self.queue_sample(&sample, sign);
        }
        for (service, clock) in self.services.take_dirty() {
            let sample = codec::service_sample(&self.me, &service, clock, false);
            let sign = self.protects(&service.service_name);
            self.queue_sample(&sample, sign);
        }
    }

    /// Whether `[shoal_auth]` has a key and protects `topic`.
    pub fn protects(&self, topic: &str) -> bool {
        self.auth.as_ref().is_some_and(|a| a.protected.contains(topic))
    }

    /// Whether a new remote topic from `source` fits: under its process's bound, and in the registry, evicting an
    /// entity of the sending address that holds the most when it is full (see [`SourceShares`]).
    fn make_room(&mut self, key: &EntityKey, source: SocketAddr) -> bool {
        if !self.room_in_process(key) {
            return false;
        }
        if self.topics.len() < self.bounds.remote_topics {
            return true;
        }
        match self.shares.victim(source) {
            Some(victim) => {
                self.counters.evicted += 1;
                self.remove_remote(&victim);
                true
            }
            None => false,
        }
    }

    fn room_in_process(&self, key: &EntityKey) -> bool {
        let first = EntityKey { host_name: key.host_name.clone(), pid: key.pid, entity_id: 0 };
        let last = EntityKey { entity_id: u64::MAX, ..first.clone() };
        self.topics.range(first..=last).take(self.bounds.topics_per_process).count() < self.bounds.topics_per_process
    }

    fn accepts(&self, host_name: &str, domain: &str) -> bool {
        host_name == self.me.host_name
            || (!domain.is_empty() && domain == self.me.shm_transport_domain)
            || self.me.network_mode
    }

    fn is_own(&self, host_name: &str, pid: u32) -> bool {
        pid == self.me.pid && host_name == self.me.host_name
    }

    /// Applies a decoded sample; `repeat` is what recognises its repeats (`None`: it is not fingerprinted).
    fn apply_sample(
        &mut self,
        now: Instant,
        sample: pb::Sample,
        from: SocketAddr,
        authenticated: bool,
        repeat: Option<RepeatKey>,
    ) {
        match sample.cmd_type {
            pb::CMD_REG_PUBLISHER => {
                self.apply_topic(now, Direction::Publisher, sample.topic, from, authenticated, repeat)
            }
            pb::CMD_REG_SUBSCRIBER => {
                self.apply_topic(now, Direction::Subscriber, sample.topic, from, authenticated, repeat)
            }
            pb::CMD_UNREG_PUBLISHER | pb::CMD_UNREG_SUBSCRIBER => {
                self.apply_topic_unreg(sample.topic, from, authenticated)
            }
            pb::CMD_REG_PROCESS => self.apply_process(now, sample.process, from, authenticated, repeat),
            pb::CMD_UNREG_PROCESS => self.apply_process_unreg(sample.process, from, authenticated),
            pb::CMD_REG_SERVICE | pb::CMD_UNREG_SERVICE => {
                let remote = sample.service.as_ref().map(|s| codec::remote_server(s, now));
                self.apply_service(remote, sample.cmd_type == pb::CMD_UNREG_SERVICE, from, authenticated);
            }
            pb::CMD_REG_CLIENT | pb::CMD_UNREG_CLIENT => {
                let remote = sample.client.as_ref().map(|c| codec::remote_client(c, now));
                self.apply_service(remote, sample.cmd_type == pb::CMD_UNREG_CLIENT, from, authenticated);
            }
            other => {
                self.counters.ignored_commands += 1;
                tracing::trace!(cmd = other, "registration command ignored");
            }
        }
    }

    /// A server or client registration (cmd 5 / 6) or unregistration (15 / 16), decoded.
    fn apply_service(
        &mut self,
        remote: Option<Result<RemoteService, pb::TopicIdError>>,
        unregister: bool,
        from: SocketAddr,
        authenticated: bool,
    ) {
        let mut remote = match remote {
            None => {
                self.counters.missing_body += 1;
                return;
            }
            Some(Err(e)) => {
                self.counters.rejected_ids += 1;
                tracing::debug!(error = %e, "service registration discarded");
                return;
            }
            Some(Ok(r)) => r,
        };
        // eCAL sends no SHM transport domain with services: the host name decides in local mode.
        if !self.gate(&remote.key.host_name, "", remote.key.pid) {
            return;
        }
        if !authenticated {
            let entry_auth = self.services.entry_authenticated(remote.role, &remote.key);
            if !self.unsigned_allowed(Some(&remote.service_name), entry_auth, from) {
                return;
            }
        }
        if unregister {
            if self.services.remove_remote(remote.role, &remote.key) {
                self.counters.unregistrations += 1;
            }
            return;
        }
        remote.source = Some(from.ip().to_canonical());
        remote.authenticated = authenticated;
        self.services.apply(remote, &self.bounds, &mut self.counters);
    }

    /// Shared gate: acceptance filter and loopback. Returns false (and counts) to drop.
    fn gate(&mut self, host_name: &str, domain: &str, pid: u32) -> bool {
        if !self.accepts(host_name, domain) {
            self.counters.foreign_rejected += 1;
            return false;
        }
        if !self.loopback && self.is_own(host_name, pid) {
            self.counters.own_ignored += 1;
            return false;
        }
        true
    }

    fn apply_topic(
        &mut self,
        now: Instant,
        direction: Direction,
        topic: Option<pb::Topic>,
        from: SocketAddr,
        authenticated: bool,
        repeat: Option<RepeatKey>,
    ) {
        let Some(topic) = topic else {
            self.counters.missing_body += 1;
            return;
        };
        let remote = match codec::remote_topic(direction, &topic) {
            Ok(r) => r,
            Err(e) => {
                self.counters.rejected_ids += 1;
                tracing::debug!(error = %e, "topic registration discarded");
                return;
            }
        };
        if !self.gate(&remote.key.host_name, &remote.shm_transport_domain, remote.key.pid) {
            return;
        }
        if !authenticated {
            let entry_auth = self.topics.get(&remote.key).is_some_and(|e| e.authenticated);
            if !self.unsigned_allowed(Some(&remote.topic_name), entry_auth, from) {
                return;
            }
        }
        self.counters.samples_applied += 1;
        let mut remote = remote;
        // An IPv4-mapped IPv6 source is the IPv4 address it maps.
        remote.source = Some(from.ip().to_canonical());
        remote.authenticated = authenticated || self.topics.get(&remote.key).is_some_and(|e| e.authenticated);
        let key = remote.key.clone();
        if !self.topics.contains_key(&key) && !self.make_room(&key, from) {
            self.counters.registry_full += 1;
            return;
        }
        let held = self.topics.get(&key).map_or(0, |e| e.charge);
        let mut charge = topic_charge(&remote);
        let mut repeat = repeat;
        if !self.make_byte_room(held, charge, from, Some(&key)) {
            // Spent, and this sender holds the most: keep the topic without its descriptor if that fits.
            let without = charge - remote.type_info.descriptor.len();
            if remote.type_info.descriptor.is_empty() || !self.make_byte_room(held, without, from, Some(&key)) {
                self.counters.registry_full += 1;
                // An update that does not fit leaves the entry as it was, still alive.
                if let Some(entry) = self.topics.get_mut(&key) {
                    entry.last_seen = now;
                }
                return;
            }
            self.counters.descriptors_dropped += 1;
            remote.type_info.descriptor = Vec::new();
            charge = without;
            // Not a repeat then: a later copy is decoded, so that it gets its descriptor when there is room.
            repeat = None;
        }
        self.registry_bytes = self.registry_bytes - held + charge;
        let mut old_repeat = None;
        let changed = match self.topics.get_mut(&key) {
            Some(entry) => {
                entry.charge = charge;
                old_repeat = std::mem::replace(&mut entry.repeat, repeat);
                let old = &entry.topic;
                let changed = old.layers != remote.layers
                    || old.type_info != remote.type_info
                    || old.direction != remote.direction
                    || old.topic_name != remote.topic_name
                    || old.source != remote.source
                    || old.authenticated != remote.authenticated;
                entry.topic = remote;
                entry.last_seen = now;
                entry.authenticated |= authenticated;
                if entry.source != from {
                    let old = std::mem::replace(&mut entry.source, from);
                    self.shares.remove(old, &key);
                    self.shares.insert(from, key.clone());
                }
                changed
            }
            None => {
                self.topics.insert(
                    key.clone(),
                    RemoteEntry { topic: remote, last_seen: now, source: from, charge, authenticated, repeat },
                );
                self.shares.insert(from, key.clone());
                false
            }
        };
        let slot = self.topics.slot(&key).unwrap_or_default();
        self.set_repeat(old_repeat, repeat, Repeated::Topic(key.clone()), slot);
        self.rematch_remote(&key, changed);
    }

    fn apply_topic_unreg(&mut self, topic: Option<pb::Topic>, from: SocketAddr, authenticated: bool) {
        let Some(topic) = topic else {
            self.counters.missing_body += 1;
            return;
        };
        let key = match codec::entity_key(&topic) {
            Ok(k) => k,
            Err(e) => {
                self.counters.rejected_ids += 1;
                tracing::debug!(error = %e, "topic unregistration discarded");
                return;
            }
        };
        if !self.gate(&key.host_name, &topic.shm_transport_domain, key.pid) {
            return;
        }
        if !authenticated {
            let entry_auth = self.topics.get(&key).is_some_and(|e| e.authenticated);
            if !self.unsigned_allowed(Some(&topic.topic_name), entry_auth, from) {
                return;
            }
        }
        self.counters.samples_applied += 1;
        self.counters.unregistrations += 1;
        self.remove_remote(&key);
    }

    /// A process body that passes the acceptance gate, with its pid; counts what it rejects.
    fn accepted_process(&mut self, process: Option<pb::Process>) -> Option<(pb::Process, u32)> {
        let Some(process) = process else {
            self.counters.missing_body += 1;
            return None;
        };
        let pid = codec::pid_u32(process.process_id);
        if !self.gate(&process.host_name, &process.shm_transport_domain, pid) {
            return None;
        }
        self.counters.samples_applied += 1;
        Some((process, pid))
    }

    /// A process sample: kept under `remote_processes`; when full, a process of the address that announced the
    /// most makes room (as for topics, see [`SourceShares`]), or the newcomer is refused.
    fn apply_process(
        &mut self,
        now: Instant,
        process: Option<pb::Process>,
        from: SocketAddr,
        authenticated: bool,
        repeat: Option<RepeatKey>,
    ) {
        let Some((process, _)) = self.accepted_process(process) else { return };
        let p = codec::remote_process(&process, now);
        let key = (p.host_name.clone(), p.pid);
        if !authenticated && !self.unsigned_allowed(None, self.authenticated_processes.contains(&key), from) {
            return;
        }
        let held = self.processes.get(&key).map_or(0, |e| process_charge(&e.process));
        let charge = process_charge(&p);
        if let Some(e) = self.processes.get(&key) {
            let old = e.source;
            if !self.make_byte_room(held, charge, from, None) {
                self.counters.registry_full += 1;
                return;
            }
            if old != from {
                self.process_shares.remove(old, &key);
                self.process_shares.insert(from, key.clone());
            }
        } else {
            if self.processes.len() >= self.bounds.remote_processes {
                let Some(victim) = self.process_shares.victim(from) else {
                    self.counters.registry_full += 1;
                    return;
                };
                let source = self.processes.get(&victim).map(|e| e.source);
                if let Some(source) = source {
                    self.counters.evicted += 1;
                    self.remove_process(&victim, source);
                }
            }
            if !self.make_byte_room(0, charge, from, None) {
                self.counters.registry_full += 1;
                return;
            }
            self.process_shares.insert(from, key.clone());
        }
        self.registry_bytes = self.registry_bytes - held + charge;
        if authenticated {
            self.authenticated_processes.insert(key.clone());
        }
        let old = self.processes.insert(key.clone(), ProcessEntry { process: p, source: from, repeat });
        let slot = self.processes.slot(&key).unwrap_or_default();
        self.set_repeat(old.and_then(|e| e.repeat), repeat, Repeated::Process(key), slot);
    }

    fn remove_process(&mut self, key: &(String, u32), source: SocketAddr) {
        if let Some(e) = self.processes.remove(key) {
            self.registry_bytes -= process_charge(&e.process);
            if let Some(r) = e.repeat {
                self.forget_repeat(r, &Repeated::Process(key.clone()));
            }
        }
        self.process_shares.remove(source, key);
        self.authenticated_processes.remove(key);
    }

    /// Whether an entity charged `charge` bytes (replacing one of `held`) from `source` fits in `registry_bytes`,
    /// after evicting topics of the sending address that holds the most (never `keep`, never `source`'s own: see
    /// [`SourceShares`]). False when it does not fit and nobody else holds more.
    fn make_byte_room(&mut self, held: usize, charge: usize, source: SocketAddr, keep: Option<&EntityKey>) -> bool {
        while self.registry_bytes - held + charge > self.bounds.registry_bytes {
            let victim = self.shares.victim(source).filter(|v| Some(v) != keep);
            match victim {
                Some(victim) => {
                    self.counters.evicted += 1;
                    self.remove_remote(&victim);
                }
                None => return false,
            }
        }
        true
    }

    fn apply_process_unreg(&mut self, process: Option<pb::Process>, from: SocketAddr, authenticated: bool) {
        let Some((process, pid)) = self.accepted_process(process) else { return };
        let key = (process.host_name.clone(), pid);
        if !authenticated && !self.unsigned_allowed(None, self.authenticated_processes.contains(&key), from) {
            return;
        }
        self.counters.unregistrations += 1;
        if let Some(source) = self.processes.get(&key).map(|e| e.source) {
            self.remove_process(&key, source);
        }
        // The process is gone: so are its entities (their own unregistrations may be lost).
        // An unauthenticated one leaves the entities that were authenticated (they expire or unregister themselves).
        let keys: Vec<EntityKey> = self
            .topics
            .iter()
            .filter(|(k, e)| k.pid == pid && k.host_name == process.host_name && (authenticated || !e.authenticated))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.remove_remote(&key);
        }
    }

    fn remove_remote(&mut self, key: &EntityKey) {
        if let Some(e) = self.topics.remove(key) {
            self.shares.remove(e.source, key);
            self.registry_bytes -= e.charge;
            if let Some(r) = e.repeat {
                self.forget_repeat(r, &Repeated::Topic(key.clone()));
            }
        }
        let ended: Vec<u64> = self.matches.iter().filter(|(_, k)| k == key).map(|(id, _)| *id).collect();
        for local_id in ended {
            self.matches.remove(&(local_id, key.clone()));
            self.events.push_back(Event::Unmatched { local_id, remote: key.clone() });
        }
    }

    fn drop_local_matches(&mut self, local_id: u64) {
        let ended: Vec<EntityKey> =
            self.matches.iter().filter(|(id, _)| *id == local_id).map(|(_, k)| k.clone()).collect();
        for remote in ended {
            self.matches.remove(&(local_id, remote.clone()));
            self.events.push_back(Event::Unmatched { local_id, remote });
        }
    }

    /// Brings the matches of remote `key` in line with the registry.
    fn rematch_remote(&mut self, key: &EntityKey, changed: bool) {
        let Some(entry) = self.topics.get(key) else { return };
        let remote = &entry.topic;
        let desired: BTreeSet<u64> = if self.is_own(&key.host_name, key.pid) {
            BTreeSet::new()
        } else {
            self.locals
                .iter()
                .filter(|(_, l)| l.direction == remote.direction.opposite() && l.topic.topic_name == remote.topic_name)
                .map(|(id, _)| *id)
                .collect()
        };
        let current: BTreeSet<u64> = self.matches.iter().filter(|(_, k)| k == key).map(|(id, _)| *id).collect();
        for &local_id in desired.difference(&current) {
            self.matches.insert((local_id, key.clone()));
            self.events.push_back(Event::Matched { local_id, remote: remote.clone() });
            // Tell the new peer about us now rather than at the next refresh.
            self.dirty.insert(local_id);
        }
        for &local_id in current.difference(&desired) {
            self.matches.remove(&(local_id, key.clone()));
            self.events.push_back(Event::Unmatched { local_id, remote: key.clone() });
        }
        if changed {
            for &local_id in current.intersection(&desired) {
                self.events.push_back(Event::Updated { local_id, remote: remote.clone() });
            }
        }
    }

    /// Brings the matches of local entity `local_id` in line with the registry.
    fn rematch_local(&mut self, local_id: u64) {
        let Some(local) = self.locals.get(&local_id) else { return };
        let want = local.direction.opposite();
        let desired: BTreeSet<EntityKey> = self
            .topics
            .iter()
            .filter(|(k, e)| {
                e.topic.direction == want
                    && e.topic.topic_name == local.topic.topic_name
                    && !self.is_own(&k.host_name, k.pid)
            })
            .map(|(k, _)| k.clone())
            .collect();
        let current: BTreeSet<EntityKey> =
            self.matches.iter().filter(|(id, _)| *id == local_id).map(|(_, k)| k.clone()).collect();
        for key in desired.difference(&current) {
            let Some(entry) = self.topics.get(key) else { continue };
            self.matches.insert((local_id, key.clone()));
            self.events.push_back(Event::Matched { local_id, remote: entry.topic.clone() });
            self.dirty.insert(local_id);
        }
        for key in current.difference(&desired) {
            self.matches.remove(&(local_id, key.clone()));
            self.events.push_back(Event::Unmatched { local_id, remote: key.clone() });
        }
    }
}

/// Reassembly of registration messages under `bounds`: one message of at most `registration_message_bytes` in
/// flight (all incomplete ones together share that budget), `fragmented_per_source` per sender.
fn reassembly_of(bounds: &LimitsConfig) -> ReassemblyConfig {
    ReassemblyConfig {
        max_bytes: bounds.registration_message_bytes,
        max_per_source: bounds.fragmented_per_source,
        ..ReassemblyConfig::default()
    }
}
