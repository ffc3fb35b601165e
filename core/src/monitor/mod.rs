//! A snapshot of everything registration knows, for [`Node::snapshot`](crate::Node::snapshot) and the command-line
//! tools (`shoal topic list`; `shoal topic echo` names a sample's publisher with it). Its names (topics, processes,
//! hosts, units, types, state texts) are whatever peers announced: [`printable`] is the escaping the tools and the
//! monitor show them through.
//!
//! With the cargo feature `serde`, a [`Snapshot`] and everything in it are `Serialize` and `Deserialize` (the
//! monitor saves and opens snapshots as JSON): a [`LatencyHistogram`] as its non-empty buckets, refused when
//! recording could not have made it (a bucket out of range, a minimum above the maximum); an infinite or NaN
//! figure as the text `inf`, `-inf` or `NaN`.

use std::time::{Duration, Instant, SystemTime};

pub use crate::registration::{MethodInfo, ServiceRole};
pub use crate::stats::{
    ConnectionStats, LatencyHistogram, LatencySummary, ServiceCounts, ShoalProcessStats, ShoalStats, TcpCounts,
    UdpCounts, Via,
};
pub use crate::wire::auth::{AuthCounts, AuthSummary};
pub use summary::{STALE_AFTER, TopicProblem, TopicSummary, summarize, summarize_topic};
pub use text::printable;

mod summary;
mod text;

use crate::process::ProcessState;
use crate::registration::{Direction, LayerKind, Registrar};
use crate::types::TypeInfo;

/// A process seen through registration (eCAL or shoal).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ProcessEntry {
    /// Host name as announced.
    pub host_name: String,
    /// Process id.
    pub pid: u32,
    /// Executable path.
    pub process_name: String,
    /// eCAL unit name (shoal: the first node's name).
    pub unit_name: String,
    /// Command line as announced (eCAL's `process_parameter`: the arguments joined by spaces).
    #[cfg_attr(feature = "serde", serde(default))]
    pub command_line: String,
    /// Runtime version string (`v6.1.1` for eCAL 6.1.1, `shoal 0.1.0 (eCAL v6.1.1 compatible)` for shoal).
    pub runtime_version: String,
    /// True for a shoal process (its runtime version starts with `shoal`), false for eCAL.
    pub is_shoal: bool,
    /// True for this process.
    pub is_self: bool,
    /// Time since its last registration arrived (registration refreshes every second by default; an entry
    /// disappears after the registration timeout, 10 s by default).
    pub registration_age: Duration,
    /// The state it announces (see [`crate::process`]).
    pub state: ProcessState,
    /// shoal's process statistics from its registration (kernel drops on its sockets, memory, CPU); `None` for
    /// eCAL processes (eCAL 6 announces neither memory nor CPU). For this process, the figures of its last registration (its own are in [`Snapshot::udp`]).
    pub shoal: Option<ShoalProcessStats>,
}

/// Publisher or subscriber of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TopicDirection {
    /// Sends on the topic.
    Publisher,
    /// Receives on the topic.
    Subscriber,
}

/// One service server or client seen through registration (eCAL's and shoal's alike).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServiceEntry {
    /// Host name.
    pub host_name: String,
    /// Process id.
    pub pid: u32,
    /// Executable path.
    pub process_name: String,
    /// Unit name.
    pub unit_name: String,
    /// Entity id (eCAL's `service_id`).
    pub entity_id: u64,
    /// Service name.
    pub service_name: String,
    /// Server or client.
    pub role: ServiceRole,
    /// Its methods with their request and response types and call counts.
    pub methods: Vec<MethodInfo>,
    /// A server's TCP port (0 for a client).
    pub tcp_port: u16,
    /// Service protocol version it announced.
    pub version: u32,
    /// It belongs to this process.
    pub is_self: bool,
    /// Time since its last registration arrived.
    pub registration_age: Duration,
}

/// One publisher or subscriber seen through registration.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TopicEntry {
    /// Host of the owning process.
    pub host_name: String,
    /// Owning process id.
    pub pid: u32,
    /// Owning process executable.
    pub process_name: String,
    /// Owning unit name.
    pub unit_name: String,
    /// Entity id (eCAL `topic_id`).
    pub entity_id: u64,
    /// Topic name.
    pub topic_name: String,
    /// Publisher or subscriber.
    pub direction: TopicDirection,
    /// Announced type information.
    pub type_info: TypeInfo,
    /// Enabled transport layers, by name (`shm`, `udp`, `tcp`, `shoal_ring`).
    pub layers: Vec<String>,
    /// A shoal publisher's native ring: the page size of its mapping in KiB (2048 on huge pages, 4 on normal
    /// ones), as its registration announces it; `None` for no ring or a sender that does not say.
    pub ring_page_kb: Option<u32>,
    /// Messages sent (publisher) or received (subscriber) so far.
    pub data_clock: i64,
    /// Message rate in mHz.
    pub data_frequency_mhz: i32,
    /// Messages lost (eCAL's `message_drops`).
    pub message_drops: i32,
    /// Size of the last message in bytes (eCAL's `topic_size`).
    pub topic_size: i32,
    /// Latency figures of a subscriber in µs, as eCAL 6.1 announces them (`data_latency_us`; count 0: nothing
    /// measured).
    pub latency: LatencySummary,
    /// shoal's statistics beyond eCAL's fields (bytes, bandwidth, per-connection latency histograms); `None` for
    /// eCAL processes.
    pub shoal: Option<ShoalStats>,
    /// Time since its last registration arrived.
    pub registration_age: Duration,
    /// Connected peers on this host.
    pub connections_local: i32,
    /// Connected peers on other hosts.
    pub connections_external: i32,
    /// The type disagrees with a subscriber of this process on the same topic ([`TypeInfo::mismatches`]): set on
    /// the publisher announcing the other type and on the local subscriber expecting its own.
    pub type_mismatch: bool,
}

/// Processes and topics at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Snapshot {
    /// When it was taken (`None` for an empty snapshot after a failed request).
    pub taken_at: Option<SystemTime>,
    /// Every known process.
    pub processes: Vec<ProcessEntry>,
    /// Every known publisher and subscriber.
    pub topics: Vec<TopicEntry>,
    /// What `[shoal_auth]` refused since the start, per cause for registration and UDP data, and per topic.
    pub auth: AuthSummary,
    /// This process's UDP data layer: datagrams, losses, duplicates, late samples, reassembly evictions, and the
    /// datagrams the kernel dropped on its socket ([`UdpCounts::kernel_drops`]).
    pub udp: UdpCounts,
    /// This process's eCAL TCP layer: its publishers' subscriber connections (admitted, refused, timed out and
    /// dropped, by cause) and its subscribers' connections (attempts, failures, time-outs, what they received).
    pub tcp: TcpCounts,
    /// Datagrams the kernel dropped on this process's registration socket because its receive buffer was full,
    /// and registration datagrams the send socket refused.
    pub socket_drops: SocketDrops,
    /// What this process's registration received, applied, dropped (and why) and sent since the start.
    pub registration: crate::registration::RegistrationCounters,
    /// Every known service server and client, sorted by service name.
    pub services: Vec<ServiceEntry>,
    /// What this process's servers and clients did: connections, calls, refusals.
    pub service_counts: ServiceCounts,
}

impl Snapshot {
    /// Every topic summed up over its publishers and subscribers ([`summarize`]), sorted by name: the figures
    /// `shoal list` and the monitor show.
    pub fn topic_summaries(&self) -> Vec<TopicSummary> {
        summarize(&self.topics)
    }

    /// The summary of topic `name`, if any endpoint of it is known.
    pub fn topic_summary(&self, name: &str) -> Option<TopicSummary> {
        let list: Vec<&TopicEntry> = self.topics.iter().filter(|t| t.topic_name == name).collect();
        (!list.is_empty()).then(|| summarize_topic(name, &list))
    }
}

/// The layer `publisher` serves `subscriber` over, as their registrations imply it: for the pairs no shoal
/// subscriber measures (an eCAL subscriber announces its totals only, not its connections). shoal's native ring
/// when both announce it on one host; else the first layer of eCAL's priority list that both have enabled (same
/// host: `shm`, `udp`, `tcp`; another host: `udp`, `tcp`), the rule of eCAL 6's publisher and the default of shoal's
/// (`[publisher] priority_local`, `priority_remote`). `None` when they share no layer or are not one topic's
/// publisher and subscriber.
pub fn announced_layer(publisher: &TopicEntry, subscriber: &TopicEntry) -> Option<Via> {
    if publisher.direction != TopicDirection::Publisher
        || subscriber.direction != TopicDirection::Subscriber
        || publisher.topic_name != subscriber.topic_name
    {
        return None;
    }
    let both = |name: &str| publisher.layers.iter().any(|l| l == name) && subscriber.layers.iter().any(|l| l == name);
    let same_host = publisher.host_name == subscriber.host_name;
    let order: &[Via] =
        if same_host { &[Via::ShoalRing, Via::EcalShm, Via::Udp, Via::Tcp] } else { &[Via::Udp, Via::Tcp] };
    order.iter().copied().find(|v| both(v.name()))
}

/// Datagrams the kernel dropped on this process's registration socket for a full receive buffer (`SO_RXQ_OVFL`),
/// since it was opened (the UDP data layer's socket: [`UdpCounts::kernel_drops`]). Every such datagram is lost: a
/// subscriber counts the whole messages it loses that way as drops of its connection (a gap in the publisher's
/// clock, or an incomplete fragmented message).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SocketDrops {
    /// On the registration socket.
    pub registration: u64,
    /// Registration datagrams of this process the send socket refused (a full send buffer, no route to the
    /// registration address): each is lost, the next refresh sends the entity again.
    pub registration_send_failures: u64,
}

/// How a ring's page size is shown ([`TopicEntry::ring_page_kb`]): `2 MB pages`, `4 kB pages`.
pub fn pages_label(page_kb: u32) -> String {
    if page_kb >= 1024 && page_kb.is_multiple_of(1024) {
        format!("{} MB pages", page_kb / 1024)
    } else {
        format!("{page_kb} kB pages")
    }
}

fn layer_name(k: &LayerKind) -> String {
    match k {
        LayerKind::Udp => "udp".into(),
        LayerKind::Shm => "shm".into(),
        LayerKind::Tcp => "tcp".into(),
        LayerKind::ShoalRing => "shoal_ring".into(),
        LayerKind::Other(n) => format!("layer_{n}"),
    }
}

/// The snapshot of what `reg` knows at `now`; this process is the registrar's own identity.
pub(crate) fn build_snapshot(reg: &Registrar, now: Instant) -> Snapshot {
    let my_pid = reg.identity().pid;
    let my_host = reg.identity().host_name.clone();
    let processes = reg
        .processes()
        .map(|p| ProcessEntry {
            host_name: p.host_name.clone(),
            pid: p.pid,
            process_name: p.process_name.clone(),
            unit_name: p.unit_name.clone(),
            command_line: p.process_parameter.clone(),
            runtime_version: p.ecal_runtime_version.clone(),
            is_shoal: p.ecal_runtime_version.starts_with("shoal"),
            is_self: p.pid == my_pid && p.host_name == my_host,
            registration_age: now.saturating_duration_since(p.last_seen),
            state: p.state.clone(),
            shoal: p.shoal,
        })
        .collect();
    let mut topics: Vec<TopicEntry> = reg
        .topics_seen()
        .map(|(t, seen)| TopicEntry {
            host_name: t.key.host_name.clone(),
            pid: t.key.pid,
            process_name: t.process_name.clone(),
            unit_name: t.unit_name.clone(),
            entity_id: t.key.entity_id,
            topic_name: t.topic_name.clone(),
            direction: match t.direction {
                Direction::Publisher => TopicDirection::Publisher,
                Direction::Subscriber => TopicDirection::Subscriber,
            },
            type_info: t.type_info.clone(),
            layers: t.layers.iter().filter(|l| l.enabled).map(|l| layer_name(&l.kind)).collect(),
            ring_page_kb: t.layers.iter().find_map(|l| match &l.par {
                crate::registration::LayerPar::Shoal(p) if l.kind == LayerKind::ShoalRing && p.page_kb > 0 => {
                    Some(p.page_kb)
                }
                _ => None,
            }),
            data_clock: t.stats.data_clock,
            data_frequency_mhz: t.stats.data_frequency_mhz,
            message_drops: t.stats.message_drops,
            topic_size: t.stats.topic_size,
            latency: t.stats.latency,
            shoal: t.stats.shoal.clone(),
            registration_age: now.saturating_duration_since(seen),
            connections_local: t.stats.connections_local,
            connections_external: t.stats.connections_external,
            type_mismatch: false,
        })
        .collect();
    flag_type_mismatches(&mut topics, &my_host, my_pid);
    let mut services: Vec<ServiceEntry> = reg
        .services()
        .map(|s| ServiceEntry {
            host_name: s.key.host_name.clone(),
            pid: s.key.pid,
            process_name: s.process_name.clone(),
            unit_name: s.unit_name.clone(),
            entity_id: s.key.entity_id,
            service_name: s.service_name.clone(),
            role: s.role,
            methods: s.methods.clone(),
            tcp_port: s.tcp_port,
            version: s.version,
            is_self: s.key.pid == my_pid && s.key.host_name == my_host,
            registration_age: now.saturating_duration_since(s.last_seen),
        })
        .collect();
    services.sort_by(|a, b| {
        (&a.service_name, a.role, &a.host_name, a.pid).cmp(&(&b.service_name, b.role, &b.host_name, b.pid))
    });
    Snapshot {
        services,
        service_counts: ServiceCounts::default(),
        taken_at: Some(SystemTime::now()),
        processes,
        topics,
        auth: reg.auth_stats().summary(),
        socket_drops: SocketDrops::default(),
        registration: *reg.counters(),
        udp: UdpCounts::default(),
        tcp: TcpCounts::default(),
    }
}

/// Sets `type_mismatch` on publishers whose type disagrees with a subscriber of this process on the same topic,
/// and on those subscribers.
fn flag_type_mismatches(topics: &mut [TopicEntry], my_host: &str, my_pid: u32) {
    let local_subs: Vec<(usize, String, TypeInfo)> = topics
        .iter()
        .enumerate()
        .filter(|(_, t)| t.direction == TopicDirection::Subscriber && t.pid == my_pid && t.host_name == my_host)
        .map(|(i, t)| (i, t.topic_name.clone(), t.type_info.clone()))
        .collect();
    for (sub_index, topic, expected) in local_subs {
        for i in 0..topics.len() {
            let t = &topics[i];
            if t.direction == TopicDirection::Publisher && t.topic_name == topic && t.type_info.mismatches(&expected) {
                topics[i].type_mismatch = true;
                topics[sub_index].type_mismatch = true;
            }
        }
    }
}
