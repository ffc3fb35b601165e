//! Connection events of a publisher or subscriber, delivered to a callback on a thread of their own.
//!
//! A publisher or subscriber built with `.on_event(callback)` (raw, typed and callback subscribers alike) gets an
//! [`Event`] when a peer connects or disconnects (with the layers that carry the connection, named as the monitor's
//! connections are: [`Via`]), when its peer announces a type that disagrees with its own (the rule of
//! [`TypeInfo::mismatches`], the one the monitor and `shoal list` use) and, for subscribers, when messages were lost
//! (how many and why, from the drop counters that registration announces and the monitor shows).
//!
//! Where they come from: connects, disconnects and type mismatches from the same matching that wires the
//! transports (registration for other processes, the runtime's table for the same process); drops from the
//! counters the I/O thread reads for every registration refresh, so a loss is reported within one refresh period
//! (`[shoal_registration] refresh_ms`, 1 s).
//!
//! Delivery: every event goes into the entity's bounded queue ([`QUEUE_LIMIT`] events; beyond it events are counted
//! and reported as one [`Event::EventsLost`]) and one events thread per process, started with the first such
//! entity, calls the callbacks in order, one entity at a time. Callbacks never run on the I/O thread, and a slow
//! callback delays only other events, never messages.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::registration::{EntityKey, LayerKind, RemoteTopic};
use crate::stats::Via;
use crate::sync::lock;
use crate::types::TypeInfo;

/// Events an entity's queue holds before it counts the next ones as lost.
pub const QUEUE_LIMIT: usize = 1024;

/// The publisher or subscriber at the other end of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    /// Its host name.
    pub host_name: String,
    /// Its process id.
    pub pid: u32,
    /// Its process's executable path (empty for a peer of the same process).
    pub process_name: String,
    /// Its process's unit name (empty for a peer of the same process).
    pub unit_name: String,
    /// Its entity id (eCAL's topic id).
    pub entity_id: u64,
}

impl Peer {
    pub(crate) fn remote(t: &RemoteTopic) -> Peer {
        Peer {
            host_name: t.key.host_name.clone(),
            pid: t.key.pid,
            process_name: t.process_name.clone(),
            unit_name: t.unit_name.clone(),
            entity_id: t.key.entity_id,
        }
    }

    pub(crate) fn key(k: &EntityKey) -> Peer {
        Peer {
            host_name: k.host_name.clone(),
            pid: k.pid,
            process_name: String::new(),
            unit_name: String::new(),
            entity_id: k.entity_id,
        }
    }

    pub(crate) fn same_process(host_name: &str, entity_id: u64) -> Peer {
        Peer {
            host_name: host_name.to_owned(),
            pid: std::process::id(),
            process_name: String::new(),
            unit_name: String::new(),
            entity_id,
        }
    }
}

/// Why messages were lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DropCause {
    /// The publisher's native ring overwrote messages this subscriber had not read yet (it fell a ring behind).
    Overrun,
    /// Lost on the way: UDP fragments or datagrams that never came, a TCP stream that broke, an eCAL memfile
    /// replaced before it was read.
    Transport,
    /// This subscriber's own queue was full (see `SubscriberBuilder::queue`), or the application counted them
    /// (`count_dropped`, a typed message that did not decode).
    Queue,
}

/// Something that happened to a publisher's or subscriber's connections.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// A peer on the topic connected: `via` are the layers that carry the connection (a subscriber may hear a
    /// publisher on several eCAL layers; a publisher names the one it chose for the subscriber).
    Connected {
        /// Who.
        peer: Peer,
        /// Through which layers.
        via: Vec<Via>,
    },
    /// A connected peer went away (it unregistered, its registration expired, or it left the topic).
    Disconnected {
        /// Who.
        peer: Peer,
    },
    /// Messages were lost since the last such event (subscribers only).
    Dropped {
        /// How many.
        count: u64,
        /// Why.
        cause: DropCause,
    },
    /// A peer announces a type that disagrees with this entity's ([`TypeInfo::mismatches`]). The connection is made
    /// all the same (eCAL matches on names); typed subscribers reject its messages, counted.
    TypeMismatch {
        /// Who.
        peer: Peer,
        /// The type it announces.
        theirs: TypeInfo,
        /// The type this entity announces.
        ours: TypeInfo,
    },
    /// The entity's event queue was full ([`QUEUE_LIMIT`]): this many events were not kept.
    EventsLost {
        /// How many.
        count: u64,
    },
}

/// The way samples of a registration layer arrive; `None` for a layer shoal does not know.
pub(crate) fn via_of_layer(kind: LayerKind) -> Option<Via> {
    match kind {
        LayerKind::Udp => Some(Via::Udp),
        LayerKind::Shm => Some(Via::EcalShm),
        LayerKind::Tcp => Some(Via::Tcp),
        LayerKind::ShoalRing => Some(Via::ShoalRing),
        LayerKind::Other(_) => None,
    }
}

type Callback = Box<dyn FnMut(&Event) + Send>;

/// One entity's queue of events and its callback.
pub(crate) struct EventSink {
    queue: Mutex<VecDeque<Event>>,
    lost: AtomicU64,
    scheduled: AtomicBool,
    callback: Mutex<Callback>,
    thread: Arc<EventThread>,
    /// Drops already reported, per cause (overrun, transport, queue).
    reported: Mutex<[u64; 3]>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").field("queued", &lock(&self.queue).len()).finish_non_exhaustive()
    }
}

impl EventSink {
    pub(crate) fn new(thread: Arc<EventThread>, callback: Callback) -> Arc<EventSink> {
        Arc::new(EventSink {
            queue: Mutex::new(VecDeque::new()),
            lost: AtomicU64::new(0),
            scheduled: AtomicBool::new(false),
            callback: Mutex::new(callback),
            thread,
            reported: Mutex::new([0; 3]),
        })
    }

    /// Queues `event` (or counts it when the queue is full) and has the events thread deliver it. Never blocks for
    /// longer than a queue lock.
    pub(crate) fn push(self: &Arc<Self>, event: Event) {
        {
            let mut q = lock(&self.queue);
            if q.len() >= QUEUE_LIMIT {
                self.lost.fetch_add(1, Ordering::Relaxed);
            } else {
                q.push_back(event);
            }
        }
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            self.thread.schedule(Arc::clone(self));
        }
    }

    /// Reports drops: the counters per cause (overrun, transport, queue) as they are now; an event for each that
    /// grew since the last call.
    pub(crate) fn report_drops(self: &Arc<Self>, now: [u64; 3]) {
        let mut grown = Vec::new();
        {
            let mut r = lock(&self.reported);
            for (i, cause) in [DropCause::Overrun, DropCause::Transport, DropCause::Queue].into_iter().enumerate() {
                if now[i] > r[i] {
                    grown.push(Event::Dropped { count: now[i] - r[i], cause });
                }
                r[i] = r[i].max(now[i]);
            }
        }
        for e in grown {
            self.push(e);
        }
    }

    /// A peer connected: the event, and a type mismatch when its type disagrees with `ours`.
    pub(crate) fn connected(self: &Arc<Self>, peer: Peer, via: Vec<Via>, theirs: &TypeInfo, ours: &TypeInfo) {
        let mismatch = theirs.mismatches(ours).then(|| Event::TypeMismatch {
            peer: peer.clone(),
            theirs: theirs.clone(),
            ours: ours.clone(),
        });
        self.push(Event::Connected { peer, via });
        if let Some(m) = mismatch {
            self.push(m);
        }
    }

    /// Runs the callback on everything queued (on the events thread).
    fn deliver(&self) {
        self.scheduled.store(false, Ordering::Release);
        let mut callback = lock(&self.callback);
        loop {
            let lost = self.lost.swap(0, Ordering::Relaxed);
            if lost > 0 {
                callback(&Event::EventsLost { count: lost });
            }
            let Some(event) = lock(&self.queue).pop_front() else { break };
            callback(&event);
        }
    }
}

/// The events thread of a runtime: delivers queued events of every entity with a callback.
#[derive(Debug, Default)]
pub(crate) struct EventThread {
    state: Mutex<ThreadState>,
    cond: Condvar,
}

#[derive(Debug, Default)]
struct ThreadState {
    ready: VecDeque<Arc<EventSink>>,
    stop: bool,
    handle: Option<JoinHandle<()>>,
}

impl EventThread {
    /// Schedules `sink` for delivery, starting the thread on first use.
    fn schedule(self: &Arc<Self>, sink: Arc<EventSink>) {
        let mut s = lock(&self.state);
        if s.stop {
            return;
        }
        s.ready.push_back(sink);
        if s.handle.is_none() {
            let me = Arc::clone(self);
            match std::thread::Builder::new().name("shoal-events".into()).spawn(move || me.run()) {
                Ok(h) => s.handle = Some(h),
                Err(e) => tracing::warn!("cannot start the events thread, connection events are not delivered: {e}"),
            }
        }
        self.cond.notify_one();
    }

    fn run(&self) {
        loop {
            let sink = {
                let mut s = lock(&self.state);
                loop {
                    if s.stop {
                        return;
                    }
                    if let Some(sink) = s.ready.pop_front() {
                        break sink;
                    }
                    s = self.cond.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            sink.deliver();
        }
    }

    /// Stops the thread (events still queued are not delivered) and waits for it unless called from it.
    pub(crate) fn shutdown(&self) {
        let handle = {
            let mut s = lock(&self.state);
            s.stop = true;
            s.ready.clear();
            s.handle.take()
        };
        self.cond.notify_all();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}
