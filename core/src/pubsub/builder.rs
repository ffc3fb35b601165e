//! Builders for publishers and subscribers: one entry point per role ([`Node::publisher`](crate::Node::publisher),
//! [`Node::subscriber`](crate::Node::subscriber)), options as methods, and `create()` at the end.
//!
//! ```no_run
//! # fn demo<Imu: shoal::Message + Default>() -> Result<(), Box<dyn std::error::Error>> {
//! use shoal::{TypeInfo, WaitStrategy};
//! let node = shoal::Node::init("builders")?;
//! let raw = node.publisher("camera").type_info(TypeInfo::raw("demo.Image")).create()?; // shoal::Publisher
//! let imu = node.publisher("imu").typed::<Imu>().create()?;                            // TypedPublisher<Imu>
//! let sub = node.subscriber("imu").typed::<Imu>().wait(WaitStrategy::BusySpin).create()?; // TypedSubscriber<Imu>
//! let cb = node.subscriber("camera").callback(|s| println!("{} B", s.payload().len())).create()?; // CallbackSubscriber
//! # Ok(()) }
//! ```
//!
//! The type parameter of a builder says what `create()` returns: [`Raw`] (bytes, [`Publisher`] or
//! [`Subscriber`]) or [`Typed<M>`] (messages of a generated type `M`). A callback subscriber is a type of its own,
//! [`CallbackSubscriber`], without `recv` methods.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::config::{QueuePolicy, WaitStrategy};
use crate::pubsub::CreateError;
use crate::pubsub::events::{Event, EventSink};
use crate::pubsub::history::History;
use crate::pubsub::publisher::Publisher;
use crate::pubsub::runtime::{Runtime, RuntimeShare};
use crate::pubsub::subscriber::{CallbackSubscriber, Subscriber};
use crate::pubsub::typed::{MessageMeta, TypedPublisher, TypedSubscriber, typed_callback_subscriber};
use crate::sample::Sample;
use crate::types::{Message, TypeInfo};

/// Builder kind: raw bytes, with the type information given by [`type_info`](PublisherBuilder::type_info) (none by
/// default).
#[derive(Debug, Default)]
pub struct Raw {
    type_info: TypeInfo,
}

/// Builder kind: messages of the generated type `M`, announcing `M::type_info()`.
pub struct Typed<M>(PhantomData<fn(M) -> M>);

impl<M> std::fmt::Debug for Typed<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Typed")
    }
}

/// Options of a new publisher; from [`Node::publisher`](crate::Node::publisher).
#[must_use = "a builder creates nothing until `create()` is called"]
#[derive(Debug)]
pub struct PublisherBuilder<K = Raw> {
    rt: Arc<RuntimeShare>,
    topic: String,
    /// `Some(Some(t))` reliable with timeout `t`, `Some(None)` best effort, `None` the configuration's choice.
    reliable: Option<Option<Duration>>,
    /// Where connection events go (`on_event`).
    events: Option<Arc<EventSink>>,
    /// Messages kept for late joiners (0: none).
    history: u32,
    kind: K,
}

impl<K> PublisherBuilder<K> {
    /// Keeps the last `n` messages (at most `[shoal_history] max_depth`, and within `max_bytes` of payload) for
    /// subscribers that match later and ask for them ([`SubscriberBuilder::history`]): they get them, in order and
    /// once, before live data — same process, over the native ring (made at least `n + 1` slots deep, and written
    /// even while no subscriber reads it) and over TCP, which shoal subscribers whose live data comes over UDP or
    /// eCAL shared memory fetch them from (the TCP listener opens at creation, with `[publisher] use_tcp`). eCAL
    /// subscribers get live data only. Default: 0.
    pub fn history(mut self, n: u32) -> Self {
        self.history = n;
        self
    }

    /// Reliable delivery to reliable subscribers of other processes over the native ring: before it overwrites a
    /// message such a subscriber has not taken yet, `send`/`loan` wait (spin, then sleep on a futex) for at most
    /// `timeout` per subscriber; one that stays a full ring behind for the whole timeout, or whose process is gone,
    /// is taken out of the flow control for good and counted ([`Publisher::flow_stats`]). Default:
    /// `[shoal_reliable] publishers` and `timeout_ms` of the configuration (best effort).
    pub fn reliable(mut self, timeout: Duration) -> Self {
        self.reliable = Some(Some(timeout));
        self
    }

    /// Never wait for subscribers (a subscriber that falls a whole ring behind loses messages, counted).
    pub fn best_effort(mut self) -> Self {
        self.reliable = Some(None);
        self
    }

    /// Calls `callback` with this publisher's connection events: subscribers that connect and disconnect (with the
    /// layer chosen for them) and subscribers whose announced type disagrees. It runs on this process's events
    /// thread, never the I/O thread; see [`crate::events`].
    pub fn on_event(mut self, callback: impl FnMut(&Event) + Send + 'static) -> Self {
        self.events = Some(EventSink::new(Arc::clone(&self.rt.events), Box::new(callback)));
        self
    }

    fn reliability(&self) -> Option<Duration> {
        let cfg = &self.rt.config.reliable;
        self.reliable.unwrap_or(cfg.publishers.then_some(cfg.timeout))
    }
}

impl PublisherBuilder<Raw> {
    pub(crate) fn new(rt: &Arc<RuntimeShare>, topic: &str) -> Self {
        PublisherBuilder {
            rt: Arc::clone(rt),
            topic: topic.to_string(),
            reliable: None,
            events: None,
            history: 0,
            kind: Raw::default(),
        }
    }

    /// The type information announced in registration (name, encoding, descriptor), so that subscribers and tools
    /// know what the bytes are. Default: none.
    pub fn type_info(mut self, type_info: TypeInfo) -> Self {
        self.kind.type_info = type_info;
        self
    }

    /// Publishes messages of the generated type `M` (a [`TypedPublisher<M>`]), announcing `M::type_info()`.
    pub fn typed<M: Message>(self) -> PublisherBuilder<Typed<M>> {
        PublisherBuilder {
            rt: self.rt,
            topic: self.topic,
            reliable: self.reliable,
            events: self.events,
            history: self.history,
            kind: Typed(PhantomData),
        }
    }

    /// Creates the publisher and announces it.
    pub fn create(self) -> Result<Publisher, CreateError> {
        let reliable = self.reliability();
        Publisher::create(&self.rt, &self.topic, self.kind.type_info, reliable, self.history, self.events)
    }
}

impl<M: Message> PublisherBuilder<Typed<M>> {
    /// Creates the typed publisher and announces it.
    pub fn create(self) -> Result<TypedPublisher<M>, CreateError> {
        let reliable = self.reliability();
        let type_info = M::type_info().clone();
        Ok(TypedPublisher::new(Publisher::create(
            &self.rt,
            &self.topic,
            type_info,
            reliable,
            self.history,
            self.events,
        )?))
    }
}

/// Options of a new subscriber; from [`Node::subscriber`](crate::Node::subscriber).
#[must_use = "a builder creates nothing until `create()` is called"]
#[derive(Debug)]
pub struct SubscriberBuilder<K = Raw> {
    rt: Arc<RuntimeShare>,
    topic: String,
    opts: SubOptions,
    kind: K,
}

/// The options every kind of subscriber takes; `None`: the configuration's value.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubOptions {
    pub(crate) wait: Option<WaitStrategy>,
    pub(crate) queue: Option<QueuePolicy>,
    pub(crate) reliable: Option<bool>,
    /// Where connection events go (`on_event`).
    pub(crate) events: Option<Arc<EventSink>>,
    pub(crate) history: History,
}

impl SubOptions {
    /// `on_event` of either subscriber builder.
    fn set_events(&mut self, rt: &Runtime, callback: impl FnMut(&Event) + Send + 'static) {
        self.events = Some(EventSink::new(Arc::clone(&rt.events), Box::new(callback)));
    }
}

impl<K> SubscriberBuilder<K> {
    /// How `recv*` waits for a message: [`WaitStrategy::Block`] (sleep on the futex doorbell),
    /// [`WaitStrategy::SpinThenBlock`] or [`WaitStrategy::BusySpin`]. Default: `[shoal_receive] wait` of the
    /// configuration.
    pub fn wait(mut self, wait: WaitStrategy) -> Self {
        self.opts.wait = Some(wait);
        self
    }

    /// What this subscriber keeps of messages it has not taken yet (see [`QueuePolicy`]). Default:
    /// `[shoal_receive] queue_depth` and `queue_bytes` of the configuration (16 messages, and 1 MiB beyond them).
    /// A policy set here also applies to native rings: when it keeps fewer messages than a ring holds (counted in
    /// the ring's slots), this subscriber reads only the newest of them.
    pub fn queue(mut self, queue: QueuePolicy) -> Self {
        self.opts.queue = Some(queue);
        self
    }

    /// Reliable (`true`): a reliable publisher in another process waits, up to its timeout, instead of
    /// overwriting in its native ring a message this subscriber has not taken yet (see
    /// [`PublisherBuilder::reliable`]); best effort (`false`) otherwise. Default: `[shoal_reliable] subscribers`.
    pub fn reliable(mut self, reliable: bool) -> Self {
        self.opts.reliable = Some(reliable);
        self
    }

    /// Calls `callback` with this subscriber's connection events: publishers that connect and disconnect (with
    /// their layers), messages lost (how many, why) and publishers whose type disagrees. It runs on this process's
    /// events thread, never the I/O thread; see [`crate::events`].
    pub fn on_event(mut self, callback: impl FnMut(&Event) + Send + 'static) -> Self {
        self.opts.set_events(&self.rt, callback);
        self
    }

    /// Asks every publisher this subscriber matches for the messages it keeps for late joiners
    /// ([`PublisherBuilder::history`]): `true` all of them, a number at most that many of the newest, `false` or 0
    /// none. They come in order, once, before live data, whenever a shoal publisher matches (same process, native
    /// ring, TCP; over UDP and eCAL shared memory they are fetched over TCP and the live data that came first waits
    /// for them). The subscriber's queue is made deep enough to hold them. Default: none.
    pub fn history(mut self, history: impl Into<History>) -> Self {
        self.opts.history = history.into();
        self
    }
}

impl SubscriberBuilder<Raw> {
    pub(crate) fn new(rt: &Arc<RuntimeShare>, topic: &str) -> Self {
        SubscriberBuilder {
            rt: Arc::clone(rt),
            topic: topic.to_string(),
            opts: SubOptions::default(),
            kind: Raw::default(),
        }
    }

    /// The type information this subscriber announces as the one it expects (shown by monitors; eCAL matches on
    /// topic names only). Default: none.
    pub fn type_info(mut self, type_info: TypeInfo) -> Self {
        self.kind.type_info = type_info;
        self
    }

    /// Receives messages of the generated type `M` (a [`TypedSubscriber<M>`]), announcing `M::type_info()`.
    pub fn typed<M: Message>(self) -> SubscriberBuilder<Typed<M>> {
        SubscriberBuilder { rt: self.rt, topic: self.topic, opts: self.opts, kind: Typed(PhantomData) }
    }

    /// Delivers every sample to `callback` on this process's doorbell thread instead of `recv*`.
    pub fn callback<F>(self, callback: F) -> CallbackSubscriberBuilder<Raw, F>
    where
        F: FnMut(&Sample) + Send + 'static,
    {
        CallbackSubscriberBuilder { rt: self.rt, topic: self.topic, opts: self.opts, kind: self.kind, callback }
    }

    /// Creates the subscriber and announces it.
    pub fn create(self) -> Result<Subscriber, CreateError> {
        Subscriber::create(&self.rt, &self.topic, self.kind.type_info, self.opts)
    }
}

impl<M: Message> SubscriberBuilder<Typed<M>> {
    /// Delivers every message, decoded, to `callback` on this process's doorbell thread instead of `recv*`.
    pub fn callback<F>(self, callback: F) -> CallbackSubscriberBuilder<Typed<M>, F>
    where
        F: FnMut(M, &MessageMeta) + Send + 'static,
    {
        CallbackSubscriberBuilder { rt: self.rt, topic: self.topic, opts: self.opts, kind: self.kind, callback }
    }

    /// Creates the typed subscriber and announces it.
    pub fn create(self) -> Result<TypedSubscriber<M>, CreateError> {
        TypedSubscriber::create(&self.rt, &self.topic, self.opts)
    }
}

/// A subscriber builder with a callback; from [`SubscriberBuilder::callback`].
#[must_use = "a builder creates nothing until `create()` is called"]
pub struct CallbackSubscriberBuilder<K, F> {
    rt: Arc<RuntimeShare>,
    topic: String,
    opts: SubOptions,
    kind: K,
    callback: F,
}

impl<K, F> CallbackSubscriberBuilder<K, F> {
    /// What this subscriber keeps of messages its callback has not been given yet (see [`QueuePolicy`]);
    /// as [`SubscriberBuilder::queue`].
    pub fn queue(mut self, queue: QueuePolicy) -> Self {
        self.opts.queue = Some(queue);
        self
    }

    /// Connection events, as [`SubscriberBuilder::on_event`] (on the events thread, not the callback's thread).
    pub fn on_event(mut self, callback: impl FnMut(&Event) + Send + 'static) -> Self {
        self.opts.set_events(&self.rt, callback);
        self
    }

    /// The messages publishers kept for late joiners, before live data; as [`SubscriberBuilder::history`].
    pub fn history(mut self, history: impl Into<History>) -> Self {
        self.opts.history = history.into();
        self
    }
}

impl<K: std::fmt::Debug, F> std::fmt::Debug for CallbackSubscriberBuilder<K, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSubscriberBuilder").field("topic", &self.topic).field("kind", &self.kind).finish()
    }
}

impl<F: FnMut(&Sample) + Send + 'static> CallbackSubscriberBuilder<Raw, F> {
    /// Creates the callback subscriber and announces it; the doorbell thread starts with the first one.
    pub fn create(self) -> Result<CallbackSubscriber, CreateError> {
        let none = Arc::new(AtomicU64::new(0));
        CallbackSubscriber::create(&self.rt, &self.topic, self.kind.type_info, Box::new(self.callback), none, self.opts)
    }
}

impl<M: Message, F: FnMut(M, &MessageMeta) + Send + 'static> CallbackSubscriberBuilder<Typed<M>, F> {
    /// Creates the typed callback subscriber and announces it; the doorbell thread starts with the first one.
    pub fn create(self) -> Result<CallbackSubscriber, CreateError> {
        typed_callback_subscriber::<M>(&self.rt, &self.topic, self.callback, self.opts)
    }
}
