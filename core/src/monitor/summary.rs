//! One topic seen whole: every publisher and subscriber of one name summed up into the figures everything that
//! shows topics shows (`shoal list`, `shoal topic list`, the monitor's Overview, the ROS 2 bridge's routes). Each
//! figure is decided here once, so two tools looking at one system show the same numbers.

use std::time::Duration;

use super::{TopicDirection, TopicEntry};
use crate::stats::{LatencyHistogram, LatencySummary};
use crate::types::TypeInfo;

/// A publisher or subscriber whose last registration is older than this is stale: registration refreshes every
/// second (eCAL's default), so three missed refreshes mean the peer is hung, gone or cut off (eCAL forgets it after
/// its registration timeout, 10 s by default).
pub const STALE_AFTER: Duration = Duration::from_secs(3);

/// What is wrong with a topic as its endpoints' registrations show it (a moment's view: whether drops are rising
/// is for a viewer that keeps the summary before, as the monitor does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TopicProblem {
    /// Two of its endpoints announce types that disagree ([`TypeInfo::disagree`]), or a subscriber says a
    /// publisher's type is not the one it expects.
    TypeMismatch,
    /// Publishers but no subscriber.
    NoSubscribers,
    /// Subscribers but no publisher.
    NoPublishers,
    /// An endpoint's registration is older than [`STALE_AFTER`]: its figures are its last ones, not current.
    Stale,
}

impl TopicProblem {
    /// Its name in machine-readable output (`shoal list --json`, `shoal-monitor --headless --json`).
    pub fn name(self) -> &'static str {
        match self {
            TopicProblem::TypeMismatch => "type_mismatch",
            TopicProblem::NoSubscribers => "no_subscribers",
            TopicProblem::NoPublishers => "no_publishers",
            TopicProblem::Stale => "stale",
        }
    }

    /// Short text for tables.
    pub fn label(self) -> &'static str {
        match self {
            TopicProblem::TypeMismatch => "type mismatch",
            TopicProblem::NoSubscribers => "no subscriber",
            TopicProblem::NoPublishers => "no publisher",
            TopicProblem::Stale => "stale",
        }
    }
}

/// Every publisher and subscriber of one topic name, summed up.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TopicSummary {
    /// The topic name.
    pub name: String,
    /// The distinct types announced (by name and encoding; the first endpoint's descriptor), the publishers' first.
    /// Endpoints that announce no type at all (an untyped subscriber) add none.
    pub types: Vec<TypeInfo>,
    /// Publishers.
    pub publishers: usize,
    /// Subscribers.
    pub subscribers: usize,
    /// Layers any endpoint enabled, sorted, each once.
    pub layers: Vec<String>,
    /// The page sizes (KiB) of the shoal publishers' rings, as they announce them ([`TopicEntry::ring_page_kb`]),
    /// sorted, each once; empty when no publisher announces one.
    pub ring_page_kb: Vec<u32>,
    /// Messages per second: the sum of the publishers' rates; the fastest subscriber's when no publisher is known.
    pub rate_hz: f64,
    /// Size of the last message in bytes, the largest any endpoint announces.
    pub size_bytes: u64,
    /// Payload bytes per second: the shoal publishers' measured bandwidth where they announce it, else rate ×
    /// size.
    pub bandwidth_bps: f64,
    /// Messages lost, summed over the subscribers (each counts the larger of its connections' drops and the
    /// drops its registration announces). Saturating: the figures come from the network.
    pub drops: u64,
    /// The subscribers' latency as eCAL announces it (`data_latency_us`, shoal's and eCAL's alike), merged;
    /// `count` 0 when nobody measured any.
    pub latency: LatencySummary,
    /// The latency histograms of the shoal subscribers' same-host connections merged (empty when none was
    /// measured); connections across hosts are left out, their clocks are not shared.
    pub latency_histogram: LatencyHistogram,
    /// The shoal subscribers' connections from publishers on other hosts.
    pub cross_host_connections: usize,
    /// The age of the most recent registration of any endpoint (the topic's last sign of life).
    pub last_seen: Duration,
    /// The age of the most recent registration among the endpoints whose figures `rate_hz`, `bandwidth_bps` and
    /// `size_bytes` are (the publishers; the subscribers when none publishes): how old those figures are.
    pub figures_age: Duration,
    /// What is wrong, each once, in a fixed order.
    pub problems: Vec<TopicProblem>,
}

impl TopicSummary {
    /// The type shown for the topic: the first publisher's, else the first subscriber's (`None`: none announced).
    pub fn type_info(&self) -> Option<&TypeInfo> {
        self.types.first()
    }

    /// The type as tools show it: (every distinct type name its endpoints announce, joined by `" | "`, with
    /// `" (MISMATCH)"` when they disagree; their encodings), `"-"` for what none announces.
    pub fn type_label(&self) -> (String, String) {
        let dash = |s: &str| if s.is_empty() { "-".to_owned() } else { s.to_owned() };
        let names: Vec<String> = self.types.iter().map(|t| dash(&t.name)).collect();
        let mut encodings: Vec<String> = self.types.iter().map(|t| dash(&t.encoding)).collect();
        encodings.dedup();
        let mut name = if names.is_empty() { "-".to_owned() } else { names.join(" | ") };
        if self.has(TopicProblem::TypeMismatch) {
            name.push_str(" (MISMATCH)");
        }
        (name, if encodings.is_empty() { "-".into() } else { encodings.join(" | ") })
    }

    /// Whether `p` is among the problems.
    pub fn has(&self, p: TopicProblem) -> bool {
        self.problems.contains(&p)
    }

    /// Whether its figures are current: no endpoint's registration is stale.
    pub fn is_current(&self) -> bool {
        !self.has(TopicProblem::Stale)
    }
}

/// Sums up `endpoints` (publishers and subscribers of any topics, e.g. a [`Snapshot`](super::Snapshot)'s
/// `topics`) by topic name, sorted by name.
pub fn summarize<'a>(endpoints: impl IntoIterator<Item = &'a TopicEntry>) -> Vec<TopicSummary> {
    let mut by_name: std::collections::BTreeMap<&str, Vec<&TopicEntry>> = std::collections::BTreeMap::new();
    for t in endpoints {
        by_name.entry(&t.topic_name).or_default().push(t);
    }
    by_name.into_iter().map(|(name, list)| summarize_topic(name, &list)).collect()
}

/// Sums up the publishers and subscribers of topic `name` (endpoints of other names in `list` are ignored).
pub fn summarize_topic(name: &str, list: &[&TopicEntry]) -> TopicSummary {
    let list: Vec<&TopicEntry> = list.iter().copied().filter(|t| t.topic_name == name).collect();
    let pubs: Vec<&TopicEntry> = list.iter().copied().filter(|t| t.direction == TopicDirection::Publisher).collect();
    let subs: Vec<&TopicEntry> = list.iter().copied().filter(|t| t.direction == TopicDirection::Subscriber).collect();

    let mut types: Vec<TypeInfo> = Vec::new();
    for t in pubs.iter().chain(&subs) {
        let ty = &t.type_info;
        let announced = !ty.name.is_empty() || !ty.encoding.is_empty();
        if announced && !types.iter().any(|k| k.name == ty.name && k.encoding == ty.encoding) {
            types.push(ty.clone());
        }
    }
    let mut layers: Vec<String> = Vec::new();
    for t in &list {
        for l in &t.layers {
            if !layers.contains(l) {
                layers.push(l.clone());
            }
        }
    }
    layers.sort_unstable();
    let mut ring_page_kb: Vec<u32> = pubs.iter().filter_map(|t| t.ring_page_kb).collect();
    ring_page_kb.sort_unstable();
    ring_page_kb.dedup();

    let rate = |t: &&TopicEntry| f64::from(t.data_frequency_mhz.max(0)) / 1000.0;
    let rate_hz = if pubs.is_empty() { subs.iter().map(rate).fold(0.0, f64::max) } else { pubs.iter().map(rate).sum() };
    let size_bytes = list.iter().map(|t| u64::try_from(t.topic_size).unwrap_or(0)).max().unwrap_or(0);
    let measured: Option<f64> =
        pubs.iter().filter_map(|t| t.shoal.as_ref().map(|s| s.bandwidth_bps)).reduce(|a, b| a + b);
    let bandwidth_bps = measured.unwrap_or(rate_hz * size_bytes as f64);

    let mut drops = 0u64;
    let mut latency = LatencySummary::default();
    let mut latency_histogram = LatencyHistogram::default();
    let mut cross_host_connections = 0;
    for s in &subs {
        latency.merge(&s.latency);
        let conns = s.shoal.as_ref().map(|st| st.connections.as_slice()).unwrap_or(&[]);
        let conn_drops = conns.iter().fold(0u64, |n, c| n.saturating_add(c.drops));
        drops = drops.saturating_add(conn_drops.max(u64::try_from(s.message_drops).unwrap_or(0)));
        for c in conns {
            if c.same_host {
                latency_histogram.merge(&c.latency);
            } else {
                cross_host_connections += 1;
            }
        }
    }

    let mut problems = Vec::new();
    let declared: Vec<&TypeInfo> = list.iter().map(|t| &t.type_info).collect();
    if list.iter().any(|t| t.type_mismatch) || TypeInfo::disagree(declared) {
        problems.push(TopicProblem::TypeMismatch);
    }
    if !pubs.is_empty() && subs.is_empty() {
        problems.push(TopicProblem::NoSubscribers);
    }
    if pubs.is_empty() && !subs.is_empty() {
        problems.push(TopicProblem::NoPublishers);
    }
    if list.iter().any(|t| t.registration_age > STALE_AFTER) {
        problems.push(TopicProblem::Stale);
    }
    problems.sort();

    TopicSummary {
        name: name.to_owned(),
        types,
        publishers: pubs.len(),
        subscribers: subs.len(),
        layers,
        ring_page_kb,
        rate_hz,
        size_bytes,
        bandwidth_bps,
        drops,
        latency,
        latency_histogram,
        cross_host_connections,
        last_seen: list.iter().map(|t| t.registration_age).min().unwrap_or_default(),
        figures_age: if pubs.is_empty() { &subs } else { &pubs }
            .iter()
            .map(|t| t.registration_age)
            .min()
            .unwrap_or_default(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ConnectionStats, ShoalStats, Via};

    fn entry(name: &str, direction: TopicDirection, ty: &str, id: u64) -> TopicEntry {
        TopicEntry {
            host_name: "h".into(),
            pid: 1,
            process_name: "p".into(),
            unit_name: "u".into(),
            entity_id: id,
            topic_name: name.into(),
            direction,
            type_info: if ty.is_empty() { TypeInfo::default() } else { TypeInfo::new(ty, "proto", Vec::new()) },
            layers: vec!["udp".into()],
            ring_page_kb: None,
            data_clock: 0,
            data_frequency_mhz: 0,
            message_drops: 0,
            topic_size: 0,
            latency: LatencySummary::default(),
            shoal: None,
            registration_age: Duration::from_millis(500),
            connections_local: 0,
            connections_external: 0,
            type_mismatch: false,
        }
    }

    /// eCAL's priority decides an unmeasured connection's layer: shm on one host, udp across hosts, the ring
    /// between shoal endpoints on one host, nothing without a shared layer or across topics.
    #[test]
    fn announced_layer_follows_ecal_priority() {
        use crate::monitor::announced_layer;
        let with = |d, host: &str, layers: &[&str]| {
            let mut e = entry("t", d, "demo.A", 1);
            e.host_name = host.into();
            e.layers = layers.iter().map(|l| l.to_string()).collect();
            e
        };
        let p = with(TopicDirection::Publisher, "h", &["udp", "shm", "tcp"]);
        let s = with(TopicDirection::Subscriber, "h", &["shm", "udp"]);
        assert_eq!(announced_layer(&p, &s), Some(Via::EcalShm));
        assert_eq!(announced_layer(&s, &p), None, "the publisher comes first");
        let far = with(TopicDirection::Subscriber, "other", &["shm", "udp"]);
        assert_eq!(announced_layer(&p, &far), Some(Via::Udp), "no shared memory across hosts");
        let tcp_only = with(TopicDirection::Subscriber, "other", &["tcp"]);
        assert_eq!(announced_layer(&p, &tcp_only), Some(Via::Tcp));
        let ring = with(TopicDirection::Publisher, "h", &["shoal_ring", "shm", "udp"]);
        let ring_sub = with(TopicDirection::Subscriber, "h", &["shoal_ring", "shm", "udp"]);
        assert_eq!(announced_layer(&ring, &ring_sub), Some(Via::ShoalRing));
        assert_eq!(announced_layer(&ring, &s), Some(Via::EcalShm));
        let udp_pub = with(TopicDirection::Publisher, "h", &["udp"]);
        assert_eq!(announced_layer(&udp_pub, &with(TopicDirection::Subscriber, "h", &["shm"])), None);
        let mut other_topic = s.clone();
        other_topic.topic_name = "u".into();
        assert_eq!(announced_layer(&p, &other_topic), None);
    }

    /// Two publishers of different types are a mismatch even with no subscriber (the monitor missed it); an
    /// untyped subscriber is not; rates add over publishers, drops over subscribers (the larger of a subscriber's
    /// connection drops and its announced drops), stale endpoints make the topic stale.
    #[test]
    fn one_summary_of_a_topic() {
        let mut a = entry("t", TopicDirection::Publisher, "demo.A", 1);
        a.data_frequency_mhz = 50_000;
        a.topic_size = 100;
        let mut b = entry("t", TopicDirection::Publisher, "demo.B", 2);
        b.data_frequency_mhz = 20_000;
        b.topic_size = 300;
        let s = summarize([&a, &b]);
        assert_eq!(s.len(), 1);
        let s = &s[0];
        assert_eq!((s.publishers, s.subscribers), (2, 0));
        assert_eq!(s.types.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["demo.A", "demo.B"]);
        assert_eq!(s.problems, [TopicProblem::TypeMismatch, TopicProblem::NoSubscribers]);
        assert_eq!((s.rate_hz, s.size_bytes), (70.0, 300));
        assert_eq!(s.bandwidth_bps, 70.0 * 300.0);

        let mut sub = entry("t", TopicDirection::Subscriber, "", 3);
        sub.message_drops = 4;
        let conn = |drops, same_host| ConnectionStats {
            publisher_id: 1,
            via: Via::Udp,
            same_host,
            messages: 10,
            bytes: 0,
            drops,
            window_ms: 1000,
            window_messages: 0,
            window_bytes: 0,
            last_size: 0,
            latency: LatencyHistogram::default(),
        };
        sub.shoal = Some(ShoalStats { connections: vec![conn(3, true), conn(5, false)], ..ShoalStats::default() });
        let mut other = entry("t", TopicDirection::Subscriber, "", 4);
        other.message_drops = 6;
        other.registration_age = Duration::from_secs(5);
        let a2 = entry("t", TopicDirection::Publisher, "demo.A", 1);
        let s = summarize_topic("t", &[&a2, &sub, &other]);
        assert_eq!(s.drops, 8 + 6, "max(3 + 5, 4) + 6");
        assert_eq!(s.cross_host_connections, 1);
        assert_eq!(s.problems, [TopicProblem::Stale], "untyped subscribers agree with anything");
        assert!(!s.is_current());
        assert_eq!(s.last_seen, Duration::from_millis(500));
        assert!(s.figures_age >= s.last_seen);

        // Counters from the network saturate.
        let mut huge = entry("t", TopicDirection::Subscriber, "", 5);
        huge.shoal =
            Some(ShoalStats { connections: vec![conn(u64::MAX, true), conn(7, true)], ..ShoalStats::default() });
        assert_eq!(summarize_topic("t", &[&huge, &sub]).drops, u64::MAX);
    }
}
