//! Per-topic counters: what was forwarded each way, what was ignored as the bridge's own, and every drop by cause.
//! The first drop of each cause on a topic is logged; later ones are only counted and appear in the statistics
//! line. Every drop is also counted on the shoal entity it concerns (`count_dropped` of the bridge's shoal
//! subscriber for shoal → Zenoh, of its shoal publisher for Zenoh → shoal; not for a sample that arrives before the
//! topic has a shoal publisher, i.e. when creating it failed or the first sample's attachment is bad), so
//! registration carries it as that entity's `message_drops` and shoal's and eCAL's monitors show it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Why a message was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// shoal → Zenoh: the topic's queue was full (`[queue]`); the drop policy chose this message.
    QueueFull,
    /// shoal → Zenoh: Zenoh refused the put.
    ZenohPut,
    /// shoal → Zenoh: beyond the topic's rate or byte limit (`max_rate_hz`, `max_bytes_per_s`).
    RateLimit,
    /// Zenoh → shoal: the shoal send failed, or the shoal publisher could not be created.
    ShoalSend,
    /// Zenoh → shoal: the attachment began like a bridge's but could not be read.
    BadAttachment,
    /// Zenoh → shoal: samples that never arrived, by the gaps in a far bridge's sequence numbers (router restart,
    /// link cut, a drop on the far side's queue).
    Lost,
    /// Zenoh → shoal: held for the type's descriptor, which did not come within a second (or the hold was full).
    NoDescriptor,
}

impl Cause {
    const ALL: [Cause; 7] = [
        Cause::QueueFull,
        Cause::ZenohPut,
        Cause::RateLimit,
        Cause::ShoalSend,
        Cause::BadAttachment,
        Cause::Lost,
        Cause::NoDescriptor,
    ];

    /// The key in the statistics line.
    pub fn key(self) -> &'static str {
        match self {
            Cause::QueueFull => "queue_full",
            Cause::ZenohPut => "zenoh_put",
            Cause::RateLimit => "rate_limit",
            Cause::ShoalSend => "shoal_send",
            Cause::BadAttachment => "bad_attachment",
            Cause::Lost => "lost",
            Cause::NoDescriptor => "no_descriptor",
        }
    }

    fn index(self) -> usize {
        Cause::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// The counters of one topic.
#[derive(Debug)]
pub struct TopicStats {
    topic: String,
    /// shoal → Zenoh messages put.
    pub to_zenoh: AtomicU64,
    /// Zenoh → shoal messages sent.
    pub to_shoal: AtomicU64,
    /// The bridge's own publications seen on either side and ignored (no echo), and samples of other bridges'
    /// shoal publishers not exported.
    pub own_ignored: AtomicU64,
    /// Zenoh → shoal: times the announced type changed (a new shoal publisher with the new type).
    pub type_changes: AtomicU64,
    /// Zenoh → shoal: samples that waited for their type's descriptor (delivered when it came, or dropped).
    pub held: AtomicU64,
    drops: [AtomicU64; 7],
    logged: Mutex<Vec<Cause>>,
}

impl TopicStats {
    /// Counters for `topic`.
    pub fn new(topic: &str) -> TopicStats {
        TopicStats {
            topic: topic.to_string(),
            to_zenoh: AtomicU64::new(0),
            to_shoal: AtomicU64::new(0),
            own_ignored: AtomicU64::new(0),
            type_changes: AtomicU64::new(0),
            held: AtomicU64::new(0),
            drops: Default::default(),
            logged: Mutex::new(Vec::new()),
        }
    }

    /// Counts `n` drops; logs the first of this cause on the topic.
    pub fn dropped(&self, cause: Cause, n: u64, detail: &dyn std::fmt::Display) {
        let total = self.drops[cause.index()].fetch_add(n, Ordering::Relaxed) + n;
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if !logged.contains(&cause) {
            logged.push(cause);
            tracing::warn!(
                topic = %self.topic,
                cause = cause.key(),
                "dropped {n} message(s) ({detail}); this cause is logged once per topic, later ones are counted \
                 ({total} so far)"
            );
        }
    }

    /// Drops of `cause` so far.
    pub fn drops(&self, cause: Cause) -> u64 {
        self.drops[cause.index()].load(Ordering::Relaxed)
    }

    /// The counters as JSON.
    pub fn to_json(&self, export: bool, import: bool) -> Value {
        let drops: serde_json::Map<String, Value> =
            Cause::ALL.iter().map(|c| (c.key().to_string(), json!(self.drops(*c)))).collect();
        json!({
            "topic": self.topic,
            "export": export,
            "import": import,
            "to_zenoh": self.to_zenoh.load(Ordering::Relaxed),
            "to_shoal": self.to_shoal.load(Ordering::Relaxed),
            "own_ignored": self.own_ignored.load(Ordering::Relaxed),
            "type_changes": self.type_changes.load(Ordering::Relaxed),
            "held": self.held.load(Ordering::Relaxed),
            "dropped": drops,
        })
    }
}
