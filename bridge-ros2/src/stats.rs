//! Per-route counters: what was forwarded, and every drop by cause. The first drop of each cause on a route is
//! logged (with its detail); later ones are only counted and appear in the statistics line. Every drop is also
//! counted on the shoal entity it concerns (`count_dropped` of the bridge's shoal subscriber for shoal → ROS 2,
//! of its shoal publisher for ROS 2 → shoal), so registration carries it as that entity's `message_drops` and
//! shoal's and eCAL's monitors show it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Why a message was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A shoal payload did not decode as the route's protobuf type.
    ProtoDecode,
    /// A shoal sample announced another type than the route's, or (raw routes with `shoal_type`) a ROS 2 sample
    /// is labelled with another type.
    TypeMismatch,
    /// A protobuf value did not fit the ROS type (range, array length).
    Map,
    /// A ROS 2 sample's CDR did not decode as the route's type.
    CdrDecode,
    /// The DDS write failed (e.g. the reliable window stayed full).
    RosWrite,
    /// The shoal send failed.
    ShoalSend,
    /// A shoal publisher announces a protobuf type other than the route's (a changed message) that does not map to
    /// the route's ROS type (generic routes; one that maps is read through its own mapping).
    TypeChanged,
    /// shoal → ROS 2: the route's queue to its DDS writer was full (more than [`QUEUE_MESSAGES`] messages or
    /// [`QUEUE_BYTES`] bytes waiting: the writer cannot keep up).
    QueueFull,
}

/// shoal → ROS 2 messages a route holds at most while its DDS writer is busy.
pub const QUEUE_MESSAGES: usize = 1024;
/// shoal → ROS 2 payload bytes a route holds at most while its DDS writer is busy.
pub const QUEUE_BYTES: usize = 64 << 20;

impl Cause {
    const ALL: [Cause; 8] = [
        Cause::ProtoDecode,
        Cause::TypeMismatch,
        Cause::Map,
        Cause::CdrDecode,
        Cause::RosWrite,
        Cause::ShoalSend,
        Cause::QueueFull,
        Cause::TypeChanged,
    ];

    /// The key in the statistics line.
    pub fn key(self) -> &'static str {
        match self {
            Cause::ProtoDecode => "proto_decode",
            Cause::TypeMismatch => "type_mismatch",
            Cause::Map => "map",
            Cause::CdrDecode => "cdr_decode",
            Cause::RosWrite => "ros_write",
            Cause::ShoalSend => "shoal_send",
            Cause::QueueFull => "queue_full",
            Cause::TypeChanged => "type_changed",
        }
    }
}

/// The counters of one route.
#[derive(Debug)]
pub struct RouteStats {
    name: String,
    /// shoal → ROS 2 messages written.
    pub to_ros: AtomicU64,
    /// ROS 2 → shoal messages sent.
    pub to_shoal: AtomicU64,
    /// The bridge's own publications seen and ignored (no echo); on automatic routes also other bridges' (no
    /// loop, see `crate::auto`).
    pub own_ignored: AtomicU64,
    drops: [AtomicU64; 8],
    logged: Mutex<Vec<String>>,
}

impl RouteStats {
    /// Counters for the route called `name` in logs.
    pub fn new(name: String) -> RouteStats {
        RouteStats {
            name,
            to_ros: AtomicU64::new(0),
            to_shoal: AtomicU64::new(0),
            own_ignored: AtomicU64::new(0),
            drops: Default::default(),
            logged: Mutex::new(Vec::new()),
        }
    }

    /// Counts a drop; logs it when it is the first of this cause and detail kind on the route.
    pub fn dropped(&self, cause: Cause, detail: &dyn std::fmt::Display) {
        let i = Cause::ALL.iter().position(|c| *c == cause).unwrap_or(0);
        let n = self.drops[i].fetch_add(1, Ordering::Relaxed) + 1;
        let key = cause.key().to_string();
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        if !logged.contains(&key) {
            logged.push(key);
            tracing::warn!(
                route = %self.name,
                cause = cause.key(),
                "dropped a message ({detail}); this cause is logged once per route, later ones are counted \
                 (drop #{n})"
            );
        }
    }

    /// Drops of `cause` so far.
    pub fn drops(&self, cause: Cause) -> u64 {
        let i = Cause::ALL.iter().position(|c| *c == cause).unwrap_or(0);
        self.drops[i].load(Ordering::Relaxed)
    }

    /// The counters as JSON.
    pub fn to_json(&self) -> Value {
        let drops: serde_json::Map<String, Value> =
            Cause::ALL.iter().map(|c| (c.key().to_string(), json!(self.drops(*c)))).collect();
        json!({
            "route": self.name,
            "to_ros": self.to_ros.load(Ordering::Relaxed),
            "to_shoal": self.to_shoal.load(Ordering::Relaxed),
            "own_ignored": self.own_ignored.load(Ordering::Relaxed),
            "dropped": drops,
        })
    }
}
