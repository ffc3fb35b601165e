//! The registration data model shoal works with (independent of the protobuf layout).

use std::time::Instant;

use crate::process::ProcessState;
use crate::stats::{LatencySummary, ShoalProcessStats, ShoalStats};
use crate::types::TypeInfo;
use crate::wire::ReassemblyCounters;

use crate::wire::pb;

/// Who this process is, as written into every registration sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Exactly `gethostname()` (eCAL compares host names as strings).
    pub host_name: String,
    /// Our process id.
    pub pid: u32,
    /// Executable path.
    pub process_name: String,
    /// Unit (node) name.
    pub unit_name: String,
    /// Command line.
    pub process_parameter: String,
    /// SHM transport domain; empty: the config's value, else the host name.
    pub shm_transport_domain: String,
    /// Network mode: accept samples from other hosts and other domains (eCAL
    /// `communication_mode: network`). In local mode only same-host or same-domain samples apply.
    pub network_mode: bool,
}

/// Transport layer type (`eTLayerType`, plus shoal's ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerKind {
    /// 1: eCAL UDP (multicast/broadcast).
    Udp,
    /// 4: eCAL shared-memory memfiles.
    Shm,
    /// 5: eCAL TCP.
    Tcp,
    /// 100: shoal's native shared-memory ring.
    ShoalRing,
    /// Any other value, kept as received.
    Other(i32),
}

impl LayerKind {
    /// Value on the wire.
    pub fn to_i32(self) -> i32 {
        match self {
            LayerKind::Udp => pb::LAYER_UDP_MC,
            LayerKind::Shm => pb::LAYER_SHM,
            LayerKind::Tcp => pb::LAYER_TCP,
            LayerKind::ShoalRing => pb::LAYER_SHOAL_RING,
            LayerKind::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_i32(v: i32) -> Self {
        match v {
            pb::LAYER_UDP_MC => LayerKind::Udp,
            pb::LAYER_SHM => LayerKind::Shm,
            pb::LAYER_TCP => LayerKind::Tcp,
            pb::LAYER_SHOAL_RING => LayerKind::ShoalRing,
            other => LayerKind::Other(other),
        }
    }
}

/// Parameters of shoal's shared-memory ring, as advertised by a publisher.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ShoalPar {
    /// Ring segment name.
    pub segment: String,
    /// Number of slots.
    pub slot_count: u32,
    /// Payload bytes per slot.
    pub slot_size: u64,
    /// Incremented when the segment is recreated (e.g. grown).
    pub generation: u32,
    /// Doorbell name.
    pub doorbell: String,
    /// Page size of the ring segment's mapping, KiB (2048 on huge pages, 4 on normal ones); 0 when not announced.
    pub page_kb: u32,
    /// History for late joiners: a publisher's most kept messages, a subscriber's wanted depth (0: none,
    /// `u32::MAX`: all the publisher keeps).
    pub history_depth: u32,
    /// A publisher's byte budget for its kept messages.
    pub history_bytes: u64,
}

/// Layer-specific parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum LayerPar {
    /// No parameters (UDP, or a layer that sent none).
    #[default]
    None,
    /// eCAL SHM memory file names.
    Shm {
        /// One name per buffer.
        memory_files: Vec<String>,
    },
    /// eCAL TCP port.
    Tcp {
        /// The publisher's listening port.
        port: i32,
    },
    /// Shoal ring parameters.
    Shoal(ShoalPar),
    /// A shoal subscriber's UDP layer entry: the packed datagram version it reads (`wire::packed`).
    ShoalUdp {
        /// 1 for `wire::packed`'s layout; 0 for none.
        packed_version: u32,
    },
}

/// One transport layer entry of a topic registration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layer {
    /// Layer type.
    pub kind: LayerKind,
    /// Layer version (eCAL 6: 2).
    pub version: i32,
    /// Enabled on this entity.
    pub enabled: bool,
    /// In use.
    pub active: bool,
    /// Parameters.
    pub par: LayerPar,
}

impl Layer {
    /// A version-2 layer entry.
    pub fn new(kind: LayerKind, enabled: bool, active: bool, par: LayerPar) -> Self {
        Layer { kind, version: 2, enabled, active, par }
    }

    /// Enabled as eCAL 6 reads it: the flag, or any entry from a pre-6 (version < 2) sender.
    pub fn is_enabled(&self) -> bool {
        self.enabled || self.version < 2
    }
}

/// Statistics of a topic entity, as carried in its registration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicStats {
    /// Topic (message) size in bytes.
    pub topic_size: i32,
    /// Connected entities on this host.
    pub connections_local: i32,
    /// Connected entities on other hosts.
    pub connections_external: i32,
    /// Messages dropped.
    pub message_drops: i32,
    /// Last data id.
    pub data_id: i64,
    /// Samples sent or received.
    pub data_clock: i64,
    /// Rate in mHz.
    pub data_frequency_mhz: i32,
    /// Latency in µs (`data_latency_us`, subscribers); the default is eCAL's "nothing measured".
    pub latency: LatencySummary,
    /// shoal's extension (bytes, bandwidth, per-connection statistics); `None` from eCAL peers.
    pub shoal: Option<ShoalStats>,
}

/// A publisher or subscriber of this process.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalTopic {
    /// Entity id (unique per process run; sent as a decimal string).
    pub id: u64,
    /// Topic name.
    pub topic_name: String,
    /// Message type.
    pub type_info: TypeInfo,
    /// Layers to advertise.
    pub layers: Vec<Layer>,
    /// Statistics to advertise.
    pub stats: TopicStats,
}

/// Identifies a remote entity: (host, pid, entity id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityKey {
    /// Host name.
    pub host_name: String,
    /// Process id.
    pub pid: u32,
    /// Entity id.
    pub entity_id: u64,
}

/// Publisher or subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Registered with cmd 2.
    Publisher,
    /// Registered with cmd 3.
    Subscriber,
}

impl Direction {
    /// The direction an entity must have to match one of this direction.
    pub fn opposite(self) -> Self {
        match self {
            Direction::Publisher => Direction::Subscriber,
            Direction::Subscriber => Direction::Publisher,
        }
    }
}

/// A publisher or subscriber learnt from registration.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTopic {
    /// Identity.
    pub key: EntityKey,
    /// Publisher or subscriber.
    pub direction: Direction,
    /// Topic name.
    pub topic_name: String,
    /// Message type.
    pub type_info: TypeInfo,
    /// Executable path of its process.
    pub process_name: String,
    /// Unit name.
    pub unit_name: String,
    /// SHM transport domain.
    pub shm_transport_domain: String,
    /// Advertised layers.
    pub layers: Vec<Layer>,
    /// Advertised statistics.
    pub stats: TopicStats,
    /// Its registration clock.
    pub registration_clock: i32,
    /// The address its last registration datagram came from, as this process received it (`None` for an entry
    /// not made from a datagram). eCAL's TCP layer is reached there: it is the publisher's address in this network
    /// namespace, known without asking a name resolver.
    pub source: Option<std::net::IpAddr>,
    /// Its registration arrived in a verified `[shoal_auth]` envelope (an entry that did is changed only by
    /// registration that does). Under `[shoal_auth]` a protected topic has no other entries; eCAL's TCP layer
    /// admits only such subscribers of a protected topic.
    pub authenticated: bool,
}

impl RemoteTopic {
    /// The history a shoal peer announces (a publisher's kept messages, a subscriber's wanted depth): in its
    /// native ring's entry, also when that layer is off for it; `None` for an eCAL peer.
    pub fn announced_history(&self) -> Option<&ShoalPar> {
        self.layers.iter().find_map(|l| match (&l.kind, &l.par) {
            (LayerKind::ShoalRing, LayerPar::Shoal(p)) => Some(p),
            _ => None,
        })
    }

    /// The TCP port a publisher announces (eCAL's `layer_par_tcp.port`), if any.
    pub fn announced_tcp_port(&self) -> Option<u16> {
        self.layers.iter().find_map(|l| match (&l.kind, &l.par) {
            (LayerKind::Tcp, LayerPar::Tcp { port }) => u16::try_from(*port).ok().filter(|p| *p != 0),
            _ => None,
        })
    }
}

#[cfg(test)]
impl RemoteTopic {
    /// A topic `t` on host `h` with only identity, direction and layers set, for the transports' tests.
    pub(crate) fn for_test(pid: u32, entity_id: u64, layers: Vec<Layer>, direction: Direction) -> RemoteTopic {
        RemoteTopic {
            key: EntityKey { host_name: "h".into(), pid, entity_id },
            direction,
            topic_name: "t".into(),
            type_info: TypeInfo::default(),
            process_name: String::new(),
            unit_name: String::new(),
            shm_transport_domain: String::new(),
            layers,
            stats: TopicStats::default(),
            registration_clock: 0,
            source: None,
            authenticated: false,
        }
    }
}

/// Which side of a service an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ServiceRole {
    /// Offers the methods (registered with cmd 5, eCAL's `Service`).
    Server,
    /// Calls them (cmd 6, eCAL's `Client`).
    Client,
}

/// One method of a service as registration announces it: its name, the type information of its request and
/// response (name, encoding, descriptor, as a topic's), and how often it was called.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct MethodInfo {
    /// Method name.
    pub name: String,
    /// The request's type.
    pub request: TypeInfo,
    /// The response's type.
    pub response: TypeInfo,
    /// Calls served (a server) or made (a client).
    pub call_count: i64,
}

/// The service protocol version eCAL 6.1.1 speaks and announces (`version` of `Service` and `Client`).
pub const SERVICE_PROTOCOL_VERSION: u32 = 1;

/// A service server or client of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalService {
    /// Entity id (unique per process run, shared with topics; sent as a decimal string).
    pub id: u64,
    /// Server or client.
    pub role: ServiceRole,
    /// Service name.
    pub service_name: String,
    /// Its methods.
    pub methods: Vec<MethodInfo>,
    /// A server's listening port (protocol v1); 0 for a client. eCAL announces no server without one.
    pub tcp_port: u16,
}

/// A service server or client learnt from registration (cmd 5 or 6).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteService {
    /// Identity (the entity id is eCAL's `service_id`).
    pub key: EntityKey,
    /// Server or client.
    pub role: ServiceRole,
    /// Service name.
    pub service_name: String,
    /// Executable path of its process.
    pub process_name: String,
    /// Unit name.
    pub unit_name: String,
    /// Its methods.
    pub methods: Vec<MethodInfo>,
    /// Service protocol version it speaks.
    pub version: u32,
    /// A server's protocol v1 port (0: none announced, or a client).
    pub tcp_port: u16,
    /// Its registration clock.
    pub registration_clock: i32,
    /// The address its last registration datagram came from (see [`RemoteTopic::source`]); a server is called there.
    pub source: Option<std::net::IpAddr>,
    /// Its registration arrived in a verified `[shoal_auth]` envelope.
    pub authenticated: bool,
    /// When its last registration arrived.
    pub last_seen: Instant,
}

/// A process learnt from registration (cmd 4).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteProcess {
    /// Host name.
    pub host_name: String,
    /// Process id.
    pub pid: u32,
    /// Executable path.
    pub process_name: String,
    /// Unit name.
    pub unit_name: String,
    /// Command line.
    pub process_parameter: String,
    /// SHM transport domain.
    pub shm_transport_domain: String,
    /// eCAL component bit mask.
    pub component_init_state: i32,
    /// Components as text.
    pub component_init_info: String,
    /// Runtime version string.
    pub ecal_runtime_version: String,
    /// Configuration file path.
    pub config_file_path: String,
    /// Time sync module name.
    pub time_sync_module_name: String,
    /// Time sync state.
    pub time_sync_state: i32,
    /// The state it announces.
    pub state: ProcessState,
    /// Its registration clock.
    pub registration_clock: i32,
    /// shoal's process statistics (`None` for eCAL processes).
    pub shoal: Option<ShoalProcessStats>,
    /// When its last registration arrived.
    pub last_seen: Instant,
}

/// A change in which remote entities a local entity is connected to.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A remote entity of the opposite direction on the same topic appeared.
    Matched {
        /// The local entity.
        local_id: u64,
        /// The remote entity.
        remote: RemoteTopic,
    },
    /// A matched remote entity changed its layers or type information.
    Updated {
        /// The local entity.
        local_id: u64,
        /// The remote entity, as now registered.
        remote: RemoteTopic,
    },
    /// A match ended (remote unregistered or expired, or local entity removed or renamed).
    Unmatched {
        /// The local entity.
        local_id: u64,
        /// The remote entity.
        remote: EntityKey,
    },
}

/// Counters of a [`Registrar`](super::Registrar), one per outcome or drop reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RegistrationCounters {
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Samples applied to the registry.
    pub samples_applied: u64,
    /// Of those, repeats recognised before decoding (the same sample as before but for its registration clock,
    /// from the same address): they only refreshed their entry's expiry and clock.
    pub repeats: u64,
    /// Datagram and reassembly drops (see its counters).
    pub reassembly: ReassemblyCounters,
    /// Datagrams dropped by header or reassembly (sum over `reassembly` drop reasons).
    pub wire_errors: u64,
    /// Messages whose name prefix was malformed.
    pub framing_errors: u64,
    /// Protobuf that failed to decode.
    pub decode_errors: u64,
    /// Topic samples with a non-numeric topic id (discarded, as eCAL does).
    pub rejected_ids: u64,
    /// Samples with the command's body missing (e.g. cmd 2 without topic).
    pub missing_body: u64,
    /// Samples from another host and domain while in local mode.
    pub foreign_rejected: u64,
    /// Datagrams dropped in local mode because they did not come from a loopback address.
    pub non_local_source: u64,
    /// Samples dropped before decoding because they exceeded a `[shoal_limits]` bound (layers, text, descriptor).
    pub over_limits: u64,
    /// New remote entities (or updates) ignored because the registry was full (`remote_topics`,
    /// `topics_per_process`, `remote_processes`, `registry_bytes`).
    pub registry_full: u64,
    /// Remote entities evicted from a full registry to make room for one of another sending address.
    pub evicted: u64,
    /// Remote topics kept without their type descriptor because `registry_bytes` was spent.
    pub descriptors_dropped: u64,
    /// Samples from our own process dropped because loopback is off.
    pub own_ignored: u64,
    /// Samples with commands registration does not handle (data, unknown).
    pub ignored_commands: u64,
    /// Unregistration samples applied.
    pub unregistrations: u64,
    /// Remote topics dropped for lack of refresh.
    pub expired_topics: u64,
    /// Remote service servers and clients dropped for lack of refresh.
    pub expired_services: u64,
    /// Remote processes dropped for lack of refresh.
    pub expired_processes: u64,
    /// Samples sent.
    pub samples_sent: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Samples that could not be framed for sending.
    pub encode_errors: u64,
}
