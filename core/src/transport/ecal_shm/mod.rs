//! eCAL's shared-memory layer (`transport_layer.type = 4`), for talking to eCAL 5.11+/6.x processes on this host.
//!
//! Two shoal processes never use it (they use the native ring); it serves eCAL peers:
//! - **Publisher side** (`EcalShmWriter`): memfiles `shoal_<pid>_ecal<hex>` (one, or several in multi-buffer mode)
//!   written under their flag lock `<memfile>_mtx`, then the event `<memfile>_<subscriber pid>_evt` of every subscribing
//!   process is set. The writer owns (creates or opens, and removes) those events, its memfiles and their `_mtx`.
//!   A payload that does not fit makes the writer re-create the memfile under a new name, 50 % larger than needed,
//!   and the publisher re-registers at once (`LayerWriter::prepare`).
//! - **Subscriber side** (`EcalShmReaderFactory`): one observer thread per memfile per process (at most 256; shared
//!   by every subscriber of this process reading it) waits on `<memfile>_<our pid>_evt`, copies the message under the flag
//!   lock, acknowledges when the header asks for it (`ack_timout_ms != 0`), and hands it to each subscriber, which
//!   drops duplicates and out-of-order clocks per publisher. Readers remove nothing a live writer owns. A subscriber
//!   that detaches waits for the observer threads it stops at most [`OBSERVER_STOP_WAIT`] in all (100 ms).
//!
//! Synchronisation is glibc's process-shared pthread objects in `/dev/shm` (`sync`); the byte layouts are in
//! `memfile`. A send waits at most 200 ms for the memfile's flag lock (eCAL's readers hold it while they copy),
//! `acknowledge_timeout_ms` for acknowledges if configured, and 20 ms in all for the inner pthread mutexes of the
//! flag lock and the events (`sync::SEND_INNER_WAIT`: anyone who can open those files can hold them); once that is
//! spent it only tries them. A flag lock whose inner mutex stays held makes the writer re-create the memfile; an
//! unlock it finds held leaves the flag lock to the next send; an event it finds held is not set, and the message
//! counts as a drop of the publisher (`shoal::shm_inner_lock_skips` counts every skip). A memfile is untrusted input: every size is checked against the mapping before a byte is copied.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::registration::{Layer, LayerKind, LayerPar, RemoteTopic};
use crate::sample::{Payload, Sample};
use crate::stats::Via;
use crate::transport::{
    Inbox, LayerReader, LayerReaderFactory, LayerWriteError, LayerWriter, LayerWriterFactory, SampleMeta,
};
use crate::types::TypeInfo;

pub(crate) mod memfile;
pub(crate) mod sync;

#[cfg(test)]
mod tests;

use memfile::{MemFileHeader, MemfileOpenError, MemfileReader, MemfileWriter, ReadError};
#[doc(hidden)]
pub use memfile::{MemfileProbe, ProbeMessage};
use sync::{InnerBudget, NamedSync, SyncOpenError};

/// Publisher-side settings (eCAL's `publisher.layer.shm` defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShmWriterOptions {
    /// Smallest payload capacity of a memfile (`memfile_min_size_bytes`, 4096).
    pub(crate) min_size: u64,
    /// Extra capacity when a memfile is re-created for a larger payload, in % (`memfile_reserve_percent`, 50).
    pub(crate) reserve_percent: u64,
    /// Memfiles written round-robin (`memfile_buffer_count`, 1).
    pub(crate) buffer_count: usize,
    /// Wait this long for every subscriber process to acknowledge a message (`acknowledge_timeout_ms`, 0 = never).
    pub(crate) ack_timeout_ms: i64,
}

impl Default for ShmWriterOptions {
    fn default() -> Self {
        ShmWriterOptions { min_size: 4096, reserve_percent: 50, buffer_count: 1, ack_timeout_ms: 0 }
    }
}

/// Most memfile names accepted from one publisher registration (multi-buffer mode; a registration is untrusted).
const MAX_MEMFILES: usize = 16;
/// Memfiles one process observes at once (each with a thread of its own, as in eCAL); observer threads still
/// stopping count too, so threads stay bounded whatever a local user holds.
const MAX_OBSERVERS: usize = 256;
/// Subscriber processes one memfile serves (each has two event files).
const MAX_TARGET_PROCESSES: usize = 256;
/// Longest a subscriber detaching from eCAL memfiles (its drop, a node's shutdown, a publisher going away or
/// changing its memfiles: on the I/O thread or the caller's) waits for the observer threads it stops, all of one
/// connection together; plus [`sync::SEND_INNER_WAIT`] per observer to wake it. A thread still running then (a
/// peer holds its event's or memfile's inner mutex: it sleeps re-acquiring it) is left to end by itself, and still
/// counts against [`MAX_OBSERVERS`]. Far below the registration timeout (10 s by default).
pub(crate) const OBSERVER_STOP_WAIT: Duration = Duration::from_millis(100);
/// After this much of [`OBSERVER_STOP_WAIT`], a detaching subscriber releases an event mutex whose owner thread
/// is gone (`NamedSync::recover_dead_owner`) and wakes the observer again.
const OBSERVER_RECOVER_AFTER: Duration = Duration::from_millis(50);
/// How long an observer sleeps on its event before it checks whether it must stop.
const OBSERVER_WAIT: Duration = Duration::from_millis(500);
/// How long a subscriber process whose event files stayed locked is not tried again on the same memfile.
const LOCKED_EVENT_RETRY: Duration = Duration::from_secs(10);
/// Failed attempts (of [`memfile::READER_LOCK_TIMEOUT`]) after which an observer gives one event up.
const MAX_LOCK_ATTEMPTS: u32 = 200;

/// The memfile names a publisher advertises in its shm layer entries (deduplicated, at most [`MAX_MEMFILES`]).
fn advertised_memfiles(remote: &RemoteTopic) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in remote.layers.iter().filter(|l| l.kind == LayerKind::Shm) {
        if let LayerPar::Shm { memory_files } = &l.par {
            for f in memory_files {
                if !f.is_empty() && !out.contains(f) && out.len() < MAX_MEMFILES {
                    out.push(f.clone());
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------------------------------------------
// Publisher side
// ------------------------------------------------------------------------------------------------------------------

/// The two events of one subscribing process on one memfile (owned by the writer).
#[derive(Debug)]
struct TargetEvents {
    snd: NamedSync,
    ack: NamedSync,
    /// The process is a current target (departed live ones keep their events until the memfile goes, as in eCAL;
    /// those of a process that exited are removed when it departs).
    active: bool,
    /// Missed an acknowledge: not waited for again until it is targeted anew.
    ack_invalid: bool,
}

/// One memfile and the events of the processes it serves.
#[derive(Debug)]
struct Buffer {
    file: MemfileWriter,
    events: BTreeMap<u32, TargetEvents>,
    /// Processes whose event files could not be opened because someone held their creation lock
    /// ([`sync::FLOCK_TIMEOUT`]), with when: not tried again (each try costs the caller that long) before
    /// [`LOCKED_EVENT_RETRY`] has passed.
    refused: BTreeMap<u32, Instant>,
}

impl Buffer {
    fn create(max_data_size: u64, pids: &BTreeSet<u32>) -> Result<Buffer, MemfileOpenError> {
        let mut b =
            Buffer { file: MemfileWriter::create(max_data_size)?, events: BTreeMap::new(), refused: BTreeMap::new() };
        let (budget, flock_until) = (InnerBudget::start(), Instant::now() + sync::FLOCK_TIMEOUT);
        for &pid in pids {
            b.connect(pid, budget, flock_until);
        }
        Ok(b)
    }

    /// Opens (owns) `<memfile>_<pid>_evt` and `_ack_evt` if needed, and re-validates the acknowledge. Waits for
    /// their creation `flock`s only until `flock_until` (shared by every process one target change connects).
    fn connect(&mut self, pid: u32, budget: InnerBudget, flock_until: Instant) {
        if let Some(e) = self.events.get_mut(&pid) {
            e.active = true;
            e.ack_invalid = false;
            return;
        }
        if let Some(at) = self.refused.get(&pid) {
            if at.elapsed() < LOCKED_EVENT_RETRY {
                return;
            }
            self.refused.remove(&pid);
        }
        if self.events.len() >= MAX_TARGET_PROCESSES {
            // Full (registration is untrusted: any number of subscriber pids can be claimed): a departed process
            // makes room, else the newcomer is not served over this layer.
            match self.events.iter().find(|(_, e)| !e.active).map(|(p, _)| *p) {
                Some(departed) => self.remove_events(departed, budget),
                None => {
                    tracing::warn!(
                        "eCAL shm: memfile {} already serves {MAX_TARGET_PROCESSES} processes; subscriber process \
                         {pid} is not served over shared memory",
                        self.file.name()
                    );
                    return;
                }
            }
        }
        let base = format!("{}_{pid}", self.file.name());
        let open = || -> Result<TargetEvents, SyncOpenError> {
            Ok(TargetEvents {
                snd: NamedSync::open_or_create_until(&format!("{base}_evt"), flock_until)?,
                ack: NamedSync::open_or_create_until(&format!("{base}_ack_evt"), flock_until)?,
                active: true,
                ack_invalid: false,
            })
        };
        match open() {
            Ok(e) => {
                self.events.insert(pid, e);
            }
            Err(e) => {
                tracing::warn!("eCAL shm: cannot open the events of subscriber process {pid}: {e}");
                if matches!(e, SyncOpenError::LockTimeout { .. }) && self.refused.len() < MAX_TARGET_PROCESSES {
                    self.refused.insert(pid, Instant::now());
                }
            }
        }
    }

    /// The process is no longer a target: release a writer waiting for its acknowledge, stop signalling it.
    fn disconnect(&mut self, pid: u32, budget: InnerBudget) {
        self.refused.remove(&pid);
        if let Some(e) = self.events.get_mut(&pid) {
            e.ack.set_within(budget);
            e.active = false;
            e.ack_invalid = true;
        }
        // A process that is gone will not come back: its event files go now, not with the memfile. Its liveness is
        // its pid (`kill(pid, 0)`), not a lock: the target is usually an eCAL process, which holds no owner lock,
        // and the pid is the one its registration announced (and names the files). Across pid namespaces sharing
        // /dev/shm that pid may look dead here while the process lives: only a process that stopped being a target
        // loses its files early then, and they are created again if it becomes one anew.
        if !crate::sys::pid_alive(pid) {
            self.remove_events(pid, budget);
        }
    }

    fn remove_events(&mut self, pid: u32, budget: InnerBudget) {
        if let Some(e) = self.events.remove(&pid) {
            e.ack.set_within(budget);
            e.snd.unlink();
            e.ack.unlink();
        }
    }

    /// Sets every target's event, with eCAL's acknowledge handshake when `ack_timeout_ms != 0`, waiting for inner
    /// mutexes within `budget`. Returns the target processes not signalled (their event's inner mutex stayed held).
    fn signal(&mut self, ack_timeout_ms: i64, budget: InnerBudget) -> Vec<u32> {
        if ack_timeout_ms > 0 {
            // Stale acknowledges of earlier messages must not count for this one.
            let now = Instant::now();
            for e in self.events.values().filter(|e| e.active) {
                while e.ack.wait_within(now, budget) == Some(true) {}
            }
        }
        let mut skipped = Vec::new();
        for (pid, e) in self.events.iter_mut().filter(|(_, e)| e.active) {
            if !e.snd.set_within(budget) {
                skipped.push(*pid);
                // Not waited for: it was not told about this message.
                e.ack_invalid = true;
            }
        }
        if ack_timeout_ms > 0 {
            let deadline = Instant::now() + Duration::from_millis(ack_timeout_ms as u64);
            for (pid, e) in self.events.iter_mut().filter(|(_, e)| e.active && !e.ack_invalid) {
                if e.ack.wait_within(deadline, budget) != Some(true) {
                    tracing::debug!("eCAL shm: subscriber process {pid} did not acknowledge in time");
                    e.ack_invalid = true;
                }
            }
        }
        skipped
    }

    /// Releases anyone waiting on an acknowledge of this memfile and removes the event files (the writer owns
    /// them), waiting for inner mutexes within `budget`.
    fn release_events(&mut self, budget: InnerBudget) {
        for (_, e) in std::mem::take(&mut self.events) {
            e.ack.set_within(budget);
            e.snd.unlink();
            e.ack.unlink();
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // The writer owns the events (a re-creation released them already, within its send's budget). The memfile
        // and its `_mtx` are removed by `MemfileWriter`'s drop afterwards.
        self.release_events(InnerBudget::start());
    }
}

/// Publisher side of eCAL's shm layer, owned by one publisher.
#[derive(Debug)]
pub(crate) struct EcalShmWriter {
    topic: String,
    opts: ShmWriterOptions,
    /// Empty until the first target arrives (lazy start).
    buffers: Vec<Buffer>,
    targets: BTreeSet<u32>,
    next: usize,
    /// A memfile was re-created outside `prepare` (lock timeout): re-register on the next `prepare`.
    advert_dirty: bool,
    /// Our own process id (a target in our own process would be a bug upstream; ignored).
    own_pid: u32,
}

impl EcalShmWriter {
    /// A writer (not started) for a publisher on `topic`.
    pub(crate) fn new(topic: &str, opts: ShmWriterOptions) -> EcalShmWriter {
        EcalShmWriter {
            topic: topic.to_string(),
            opts: ShmWriterOptions { buffer_count: opts.buffer_count.clamp(1, MAX_MEMFILES), ..opts },
            buffers: Vec::new(),
            targets: BTreeSet::new(),
            next: 0,
            advert_dirty: false,
            own_pid: std::process::id(),
        }
    }

    /// The current memfile names.
    pub(crate) fn memfile_names(&self) -> Vec<String> {
        self.buffers.iter().map(|b| b.file.name().to_string()).collect()
    }

    fn initial_capacity(&self) -> u64 {
        memfile::MSG_HDR_SIZE as u64 + self.opts.min_size
    }

    fn start(&mut self) {
        let cap = self.initial_capacity();
        while self.buffers.len() < self.opts.buffer_count {
            match Buffer::create(cap, &self.targets) {
                Ok(b) => self.buffers.push(b),
                Err(e) => {
                    tracing::warn!("topic {}: cannot create an eCAL memfile: {e}", self.topic);
                    break;
                }
            }
        }
    }

    /// Re-creates buffer `i` under a new name with room for `max_data_size`; false if that failed (the old one
    /// stays).
    fn recreate(&mut self, i: usize, max_data_size: u64, budget: InnerBudget) -> bool {
        match Buffer::create(max_data_size, &self.targets) {
            Ok(b) => {
                let mut old = std::mem::replace(&mut self.buffers[i], b);
                old.release_events(budget);
                tracing::debug!(
                    "topic {}: memfile {} re-created as {} ({} bytes)",
                    self.topic,
                    old.file.name(),
                    self.buffers[i].file.name(),
                    max_data_size
                );
                true
            }
            Err(e) => {
                tracing::warn!("topic {}: cannot re-create an eCAL memfile: {e}", self.topic);
                false
            }
        }
    }

    fn grown_capacity(&self, len: usize) -> u64 {
        let len = len as u64;
        let reserve = len.saturating_mul(self.opts.reserve_percent) / 100;
        (memfile::MSG_HDR_SIZE as u64).saturating_add(len).saturating_add(reserve).max(self.initial_capacity())
    }
}

impl LayerWriter for EcalShmWriter {
    fn kind(&self) -> LayerKind {
        LayerKind::Shm
    }

    fn accepts(&self, remote: &RemoteTopic, same_host: bool) -> bool {
        same_host
            && remote.key.pid != 0
            && remote.key.pid != self.own_pid
            && remote.layers.iter().any(|l| l.kind == LayerKind::Shm && l.is_enabled())
    }

    fn set_targets(&mut self, targets: &[&RemoteTopic]) {
        let pids: BTreeSet<u32> = targets.iter().map(|t| t.key.pid).collect();
        if !pids.is_empty() && self.buffers.is_empty() {
            self.targets = pids.clone();
            self.start();
        }
        // One inner-mutex budget and one flock wait for the whole change, however many processes it connects.
        let (budget, flock_until) = (InnerBudget::start(), Instant::now() + sync::FLOCK_TIMEOUT);
        for b in &mut self.buffers {
            for &pid in &pids {
                b.connect(pid, budget, flock_until);
            }
            for &pid in self.targets.difference(&pids) {
                b.disconnect(pid, budget);
            }
        }
        self.targets = pids;
    }

    fn advert(&self) -> Option<Layer> {
        if self.buffers.is_empty() {
            return None;
        }
        Some(Layer::new(LayerKind::Shm, true, true, LayerPar::Shm { memory_files: self.memfile_names() }))
    }

    fn prepare(&mut self, len: usize) -> bool {
        if self.buffers.is_empty() {
            return false;
        }
        self.next %= self.buffers.len();
        let i = self.next;
        let need = (memfile::MSG_HDR_SIZE as u64).saturating_add(len as u64);
        let grew = need > self.buffers[i].file.max_data_size()
            && self.recreate(i, self.grown_capacity(len), InnerBudget::start());
        grew | std::mem::take(&mut self.advert_dirty)
    }

    fn write(&mut self, payload: &[u8], meta: &SampleMeta) -> Result<(), LayerWriteError> {
        if self.buffers.is_empty() {
            return Ok(());
        }
        // Every wait for an inner mutex in this send shares one budget (`sync::SEND_INNER_WAIT`).
        let budget = InnerBudget::start();
        self.next %= self.buffers.len();
        let i = self.next;
        self.next += 1;
        let need = (memfile::MSG_HDR_SIZE as u64).saturating_add(payload.len() as u64);
        if need > self.buffers[i].file.max_data_size() {
            // `prepare` was not called (or failed): grow now; the new name is announced on the next `prepare`.
            if !self.recreate(i, self.grown_capacity(payload.len()), budget) {
                return Err(LayerWriteError::Shm(ShmWriteError::NoMemfile(payload.len())));
            }
            self.advert_dirty = true;
        }
        let hdr = MemFileHeader {
            hdr_size: memfile::MSG_HDR_SIZE as u16,
            data_size: payload.len() as u64,
            id: 0,
            clock: meta.clock,
            time: meta.send_time_us,
            hash: crate::wire::data_sample::content_hash(meta.publisher_id, meta.clock),
            options: 0,
            ack_timeout_ms: self.opts.ack_timeout_ms,
        };
        if !self.buffers[i].file.write(&hdr, payload, budget) {
            // Locked by a crashed or stuck process: give this memfile up, as eCAL does, and use a fresh one.
            let cap = self.buffers[i].file.max_data_size();
            tracing::warn!(
                "topic {}: memfile {} stayed locked; re-creating it",
                self.topic,
                self.buffers[i].file.name()
            );
            if !self.recreate(i, cap, budget) || !self.buffers[i].file.write(&hdr, payload, budget) {
                return Err(LayerWriteError::Shm(ShmWriteError::Locked));
            }
            self.advert_dirty = true;
        }
        let skipped = self.buffers[i].signal(self.opts.ack_timeout_ms, budget);
        if !skipped.is_empty() {
            return Err(LayerWriteError::Shm(ShmWriteError::NotSignalled { clock: meta.clock, processes: skipped }));
        }
        Ok(())
    }
}

/// Why the eCAL shared-memory layer did not deliver a message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShmWriteError {
    /// No memfile could be created for a message of this size.
    #[error("no memfile for {0} bytes")]
    NoMemfile(usize),
    /// The memfile stayed locked (by a crashed or stuck process), and so did a fresh one.
    #[error("memfile locked")]
    Locked,
    /// Written, but these subscriber processes were not signalled: their event's inner mutex stayed held past the
    /// send's budget.
    #[error(
        "message {clock} not signalled to subscriber processes {processes:?}: their event's inner mutex stayed held \
         past the send's budget"
    )]
    NotSignalled {
        /// The message's clock.
        clock: u64,
        /// Their pids.
        processes: Vec<u32>,
    },
}

/// Creates the eCAL shm writer of every new publisher.
#[derive(Debug)]
pub(crate) struct EcalShmWriterFactory {
    opts: ShmWriterOptions,
}

impl EcalShmWriterFactory {
    /// Writers with the `[publisher] memfile_*` settings of `layers`.
    pub(crate) fn new(layers: &crate::config::LayersConfig) -> EcalShmWriterFactory {
        EcalShmWriterFactory {
            opts: ShmWriterOptions {
                min_size: layers.memfile_min_size,
                reserve_percent: layers.memfile_reserve_percent,
                buffer_count: layers.memfile_buffer_count as usize,
                ack_timeout_ms: i64::from(layers.memfile_ack_timeout_ms),
            },
        }
    }
}

impl LayerWriterFactory for EcalShmWriterFactory {
    fn create(&self, _publisher_id: u64, topic: &str, _type_info: &TypeInfo) -> Option<Box<dyn LayerWriter>> {
        Some(Box::new(EcalShmWriter::new(topic, self.opts)))
    }
}

// ------------------------------------------------------------------------------------------------------------------
// Subscriber side
// ------------------------------------------------------------------------------------------------------------------

/// Per (local subscriber, remote publisher): where samples go and the clock filter.
struct Sink {
    inbox: Arc<dyn Inbox>,
    publisher_id: u64,
    type_info: Arc<TypeInfo>,
    topic: Arc<str>,
    /// Last delivered clock (None before the first); held while pushing so that observers of several memfiles of
    /// the same publisher deliver in clock order.
    last_clock: Mutex<Option<u64>>,
    /// Messages lost: clock gaps after the first delivery plus out-of-order arrivals (dropped).
    drops: AtomicU64,
    /// Exact repeats of the last clock (dropped, not lost).
    duplicates: AtomicU64,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink").field("publisher_id", &self.publisher_id).field("topic", &self.topic).finish()
    }
}

impl Sink {
    fn offer(&self, clock: u64, send_time_us: i64, payload: Payload) {
        let mut last = crate::sync::lock(&self.last_clock);
        if let Some(l) = *last {
            if clock == l {
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if clock < l {
                self.drops.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.drops.fetch_add(clock - l - 1, Ordering::Relaxed);
        }
        *last = Some(clock);
        // No `Inbox::reads_ring_of` check here: subscribers connect this layer only to publishers whose ring they
        // do not read, and that call would take the subscriber's reader lock from this thread while the subscriber
        // may hold its connection lock waiting for this thread to stop (lock-order inversion).
        self.inbox.push(Sample {
            payload,
            send_time_ns: send_time_us.saturating_mul(1000),
            via: Via::EcalShm,
            clock,
            publisher_id: self.publisher_id,
            type_info: Arc::clone(&self.type_info),
            topic: Arc::clone(&self.topic),
        });
    }
}

/// One observed memfile of another process (one per memfile per process, shared by our subscribers).
struct Observer {
    name: String,
    /// Our subscribers' sinks; replaced as a whole on attach and detach, so a message only clones the `Arc`.
    sinks: Mutex<Arc<[Arc<Sink>]>>,
    stop: AtomicBool,
    /// `<memfile>_<our pid>_evt`, shared with the thread (to wake it when stopping).
    event: Arc<NamedSync>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Messages rejected because the memfile's headers were invalid.
    bad: AtomicU64,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Observers of this process, by memfile name (event names carry the process id, so there is one per process).
static OBSERVERS: Mutex<BTreeMap<String, Arc<Observer>>> = Mutex::new(BTreeMap::new());
/// Observer threads running, those left behind while stopping included.
static OBSERVER_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Errors starting to observe a memfile.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObserveError {
    /// The memfile (or its `_mtx`) could not be opened.
    #[error(transparent)]
    Memfile(#[from] MemfileOpenError),
    /// An event could not be opened.
    #[error(transparent)]
    Event(#[from] SyncOpenError),
    /// The thread could not be started.
    #[error("cannot start the observer thread: {0}")]
    Thread(std::io::Error),
    /// This process already observes [`MAX_OBSERVERS`] memfiles (one thread each, as in eCAL).
    #[error("already observing {MAX_OBSERVERS} eCAL memfiles")]
    TooMany,
}

impl Observer {
    /// Joins the observer of `name` (starting it if needed) with `sink`, waiting for the creation `flock`s of its
    /// sync files only until `flock_until`.
    fn attach(name: &str, pid: u32, sink: &Arc<Sink>, flock_until: Instant) -> Result<ObserverRef, ObserveError> {
        let mut pool = crate::sync::lock(&OBSERVERS);
        if let Some(o) = pool.get(name) {
            let mut sinks = crate::sync::lock(&o.sinks);
            *sinks = sinks.iter().cloned().chain([Arc::clone(sink)]).collect();
            return Ok(ObserverRef { obs: Arc::clone(o), sink: Arc::clone(sink), detached: false });
        }
        // One thread per memfile (eCAL's design): bounded, since registration can announce any number of them.
        if pool.len() >= MAX_OBSERVERS || OBSERVER_THREADS.load(Ordering::Relaxed) >= MAX_OBSERVERS {
            return Err(ObserveError::TooMany);
        }
        // Open the memfile first: no event files are created for a memfile that is already gone.
        let reader = MemfileReader::open_until(name, flock_until)?;
        let event = Arc::new(NamedSync::open_or_create_until(&format!("{name}_{pid}_evt"), flock_until)?);
        let ack = NamedSync::open_or_create_until(&format!("{name}_{pid}_ack_evt"), flock_until)?;
        let obs = Arc::new(Observer {
            name: name.to_string(),
            sinks: Mutex::new(Arc::from([Arc::clone(sink)])),
            stop: AtomicBool::new(false),
            event: Arc::clone(&event),
            thread: Mutex::new(None),
            bad: AtomicU64::new(0),
        });
        let o2 = Arc::clone(&obs);
        OBSERVER_THREADS.fetch_add(1, Ordering::Relaxed);
        let handle = std::thread::Builder::new()
            .name("shoal-ecalshm".into())
            .spawn(move || {
                o2.run(reader, &event, &ack);
                OBSERVER_THREADS.fetch_sub(1, Ordering::Relaxed);
            })
            .map_err(|e| {
                OBSERVER_THREADS.fetch_sub(1, Ordering::Relaxed);
                ObserveError::Thread(e)
            })?;
        *crate::sync::lock(&obs.thread) = Some(handle);
        pool.insert(name.to_string(), Arc::clone(&obs));
        Ok(ObserverRef { obs, sink: Arc::clone(sink), detached: false })
    }

    fn run(&self, mut reader: MemfileReader, event: &NamedSync, ack: &NamedSync) {
        let mut last_clock = 0u64;
        let mut pending = false;
        let mut attempts = 0u32;
        while !self.stop.load(Ordering::Acquire) {
            if !pending {
                pending = event.wait(OBSERVER_WAIT, Some(&self.stop));
                attempts = 0;
                continue;
            }
            match reader.read(memfile::READER_LOCK_TIMEOUT, last_clock) {
                Ok(Some(msg)) => {
                    pending = false;
                    last_clock = msg.header.clock;
                    let sinks = Arc::clone(&crate::sync::lock(&self.sinks));
                    let (clock, time) = (msg.header.clock, msg.header.time);
                    if let [one] = &sinks[..] {
                        // One subscriber (the usual case): it takes the bytes read, no second copy.
                        one.offer(clock, time, Payload::Owned(msg.payload));
                    } else {
                        let shared: Arc<[u8]> = Arc::from(msg.payload);
                        for s in sinks.iter() {
                            s.offer(clock, time, Payload::Shared(Arc::clone(&shared)));
                        }
                    }
                    if msg.header.ack_timeout_ms != 0 {
                        ack.set();
                    }
                }
                Ok(None) => pending = false,
                Err(ReadError::Locked) => {
                    attempts += 1;
                    if attempts >= MAX_LOCK_ATTEMPTS {
                        tracing::warn!("eCAL memfile {} stayed locked; skipping this update", self.name);
                        pending = false;
                    }
                }
                Err(ReadError::Truncated) => {
                    // The message being read is lost to every subscriber of this memfile (counted as a drop); the
                    // reader mapped the file again at its new size and reads on from the next update.
                    pending = false;
                    for s in crate::sync::lock(&self.sinks).iter() {
                        s.drops.fetch_add(1, Ordering::Relaxed);
                    }
                    if reader.truncations() == 1 {
                        tracing::warn!(
                            "eCAL memfile {} was truncated by another process while it was read; the message is \
                             dropped and the file mapped again",
                            self.name
                        );
                    }
                }
                Err(e) => {
                    pending = false;
                    if self.bad.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!("eCAL memfile {}: {e}", self.name);
                    }
                }
            }
        }
        // Leftovers: a memfile that is gone has no writer any more, so event files that still exist were created
        // by us after the writer removed its own; the creator of `_mtx` removes it (eCAL's rule).
        let gone = !std::path::Path::new(sync::SHM_DIR).join(&self.name).exists();
        if gone {
            event.unlink();
            ack.unlink();
        }
        if reader.lock_object().created() {
            reader.lock_object().unlink();
        }
    }
}

/// A subscriber's attachment to an observer; dropping it detaches, and stops the observer when it was the last.
struct ObserverRef {
    obs: Arc<Observer>,
    sink: Arc<Sink>,
    /// [`ObserverRef::detach`] ran.
    detached: bool,
}

impl std::fmt::Debug for ObserverRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObserverRef").field("memfile", &self.obs.name).finish()
    }
}

/// An observer asked to stop, whose thread [`await_stopped`] waits for.
struct Stopping {
    obs: Arc<Observer>,
    thread: JoinHandle<()>,
}

impl ObserverRef {
    /// Takes this subscriber's sink off the observer; when it was the last, asks the thread to stop (waking it,
    /// within [`sync::SEND_INNER_WAIT`]) and returns it for [`await_stopped`]. Runs once.
    fn detach(&mut self) -> Option<Stopping> {
        if std::mem::replace(&mut self.detached, true) {
            return None;
        }
        let last = {
            let mut pool = crate::sync::lock(&OBSERVERS);
            let mut sinks = crate::sync::lock(&self.obs.sinks);
            *sinks = sinks.iter().filter(|s| !Arc::ptr_eq(s, &self.sink)).cloned().collect();
            let last = sinks.is_empty();
            if last && pool.get(&self.obs.name).is_some_and(|o| Arc::ptr_eq(o, &self.obs)) {
                pool.remove(&self.obs.name);
            }
            last
        };
        if !last {
            return None;
        }
        self.obs.stop.store(true, Ordering::Release);
        if !self.obs.event.wake_within(InnerBudget::start()) {
            tracing::debug!("eCAL memfile observer {}: its event's inner mutex is held; not woken", self.obs.name);
        }
        let thread = crate::sync::lock(&self.obs.thread).take()?;
        Some(Stopping { obs: Arc::clone(&self.obs), thread })
    }
}

/// Waits for stopping observers, all together at most [`OBSERVER_STOP_WAIT`]. An observer stops within a wait
/// turn once woken, unless a peer holds (or died holding) its event's inner mutex: the thread then sleeps
/// re-acquiring it inside `pthread_cond_timedwait`. One whose holder died is released and woken again; one still
/// running at the deadline is left behind (it ends by itself once it gets the mutex, delivering to nobody).
fn await_stopped(stopping: Vec<Stopping>) {
    if stopping.is_empty() {
        return;
    }
    let started = Instant::now();
    let deadline = started + OBSERVER_STOP_WAIT;
    let mut recovered = false;
    loop {
        if stopping.iter().all(|s| s.thread.is_finished()) || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        if !recovered && started.elapsed() >= OBSERVER_RECOVER_AFTER {
            recovered = true;
            for s in stopping.iter().filter(|s| !s.thread.is_finished()) {
                if s.obs.event.recover_dead_owner() {
                    let _ = s.obs.event.wake_within(InnerBudget::start());
                }
            }
        }
    }
    for s in stopping {
        if !s.thread.is_finished() {
            tracing::warn!(
                "eCAL memfile observer {} did not stop within {OBSERVER_STOP_WAIT:?} (a peer holds its inner mutex); \
                 left behind",
                s.obs.name
            );
        } else if s.thread.join().is_err() {
            tracing::warn!("eCAL memfile observer {} panicked", s.obs.name);
        }
    }
}

impl Drop for ObserverRef {
    fn drop(&mut self) {
        if let Some(s) = self.detach() {
            await_stopped(vec![s]);
        }
    }
}

/// A subscriber's connection to one eCAL publisher over shm: observes every memfile it advertises.
#[derive(Debug)]
pub(crate) struct EcalShmReader {
    sink: Arc<Sink>,
    pid: u32,
    observed: Vec<(String, ObserverRef)>,
}

impl Drop for EcalShmReader {
    fn drop(&mut self) {
        // Every observer asked to stop first, then waited for together.
        await_stopped(self.observed.iter_mut().filter_map(|(_, r)| r.detach()).collect());
    }
}

impl EcalShmReader {
    fn follow(&mut self, names: &[String]) {
        let mut stopping = Vec::new();
        self.observed.retain_mut(|(n, r)| {
            let keep = names.contains(n);
            if !keep {
                stopping.extend(r.detach());
            }
            keep
        });
        await_stopped(stopping);
        // One flock wait for every memfile this registration announces (up to MAX_MEMFILES, three files each).
        let flock_until = Instant::now() + sync::FLOCK_TIMEOUT;
        for n in names {
            if self.observed.iter().any(|(o, _)| o == n) {
                continue;
            }
            match Observer::attach(n, self.pid, &self.sink, flock_until) {
                Ok(r) => self.observed.push((n.clone(), r)),
                Err(e) => tracing::warn!("topic {}: cannot observe eCAL memfile {n}: {e}", self.sink.topic),
            }
        }
    }

    /// The memfiles observed now.
    #[cfg(test)]
    pub(crate) fn observed(&self) -> Vec<String> {
        self.observed.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Repeated clocks dropped so far.
    #[cfg(test)]
    pub(crate) fn duplicates(&self) -> u64 {
        self.sink.duplicates.load(Ordering::Relaxed)
    }

    /// Messages rejected because of invalid memfile headers, over the memfiles observed now.
    #[cfg(test)]
    pub(crate) fn bad_headers(&self) -> u64 {
        self.observed.iter().map(|(_, r)| r.obs.bad.load(Ordering::Relaxed)).sum()
    }
}

impl LayerReader for EcalShmReader {
    fn update(&mut self, remote: &RemoteTopic) {
        self.follow(&advertised_memfiles(remote));
    }

    fn drops(&self) -> u64 {
        self.sink.drops.load(Ordering::Relaxed)
    }
}

/// Subscriber side of eCAL's shm layer.
#[derive(Debug)]
pub(crate) struct EcalShmReaderFactory {
    pid: u32,
}

impl EcalShmReaderFactory {
    /// A factory for this process.
    pub(crate) fn new() -> Self {
        EcalShmReaderFactory { pid: std::process::id() }
    }

    /// Connects a subscriber to `remote`'s memfiles (the [`LayerReaderFactory::connect`] body, typed).
    pub(crate) fn connect_shm(
        &self,
        topic: &str,
        inbox: Arc<dyn Inbox>,
        remote: &RemoteTopic,
        same_host: bool,
    ) -> Option<EcalShmReader> {
        let names = advertised_memfiles(remote);
        if !same_host || names.is_empty() {
            return None;
        }
        let sink = Arc::new(Sink {
            inbox,
            publisher_id: remote.key.entity_id,
            type_info: Arc::new(remote.type_info.clone()),
            topic: Arc::from(topic),
            last_clock: Mutex::new(None),
            drops: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
        });
        let mut r = EcalShmReader { sink, pid: self.pid, observed: Vec::new() };
        r.follow(&names);
        Some(r)
    }
}

impl LayerReaderFactory for EcalShmReaderFactory {
    fn subscriber_advert(&self) -> Option<Layer> {
        Some(Layer::new(LayerKind::Shm, true, false, LayerPar::None))
    }

    fn connect(
        &self,
        topic: &str,
        inbox: Arc<dyn Inbox>,
        remote: &RemoteTopic,
        same_host: bool,
    ) -> Option<Box<dyn LayerReader>> {
        self.connect_shm(topic, inbox, remote, same_host).map(|r| Box::new(r) as Box<dyn LayerReader>)
    }
}
