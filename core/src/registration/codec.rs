//! Conversions between the registration model and eCAL's protobuf, and the
//! `"reg_sample"` framing of registration datagrams.

use std::time::Instant;

use prost::Message;

use crate::process::ProcessState;
use crate::types::TypeInfo;
use crate::wire::{self, EncodeError, WireError};

use super::model::{
    Direction, EntityKey, Identity, Layer, LayerKind, LayerPar, LocalService, LocalTopic, MethodInfo, RemoteProcess,
    RemoteService, RemoteTopic, SERVICE_PROTOCOL_VERSION, ServiceRole, ShoalPar, TopicStats,
};
use crate::stats::{ConnectionStats, LatencyHistogram, LatencySummary, ShoalProcessStats, ShoalStats, Via};
use crate::wire::pb::{self, TopicIdError, parse_topic_id};

/// Sample name of registration datagrams (the receiver ignores it).
pub const REGISTRATION_SAMPLE_NAME: &str = "reg_sample";

/// `ecal_runtime_version` shoal advertises.
pub const RUNTIME_VERSION: &str = concat!("shoal ", env!("CARGO_PKG_VERSION"), " (eCAL v6.1.1 compatible)");

/// eCAL component bits shoal advertises: publisher (0x01) | subscriber (0x02).
pub const COMPONENT_INIT_STATE: i32 = 0x03;
/// Text form of [`COMPONENT_INIT_STATE`].
pub const COMPONENT_INIT_INFO: &str = "pub|sub";

/// Why a received registration message could not be decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The name prefix is malformed.
    #[error("registration framing: {0}")]
    Framing(#[from] WireError),
    /// The protobuf is malformed.
    #[error("registration protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

/// Encodes a registration sample into the datagrams to send (name `"reg_sample"`),
/// fragmenting above `max_fragment_payload` bytes.
pub fn encode_registration(
    sample: &pb::Sample,
    max_fragment_payload: usize,
    id_source: &mut impl FnMut() -> i32,
) -> Result<Vec<Vec<u8>>, EncodeError> {
    wire::encode_message(REGISTRATION_SAMPLE_NAME, &sample.encode_to_vec(), max_fragment_payload, id_source)
}

/// Decodes a complete framed registration message (as returned by the
/// [`Reassembler`](crate::wire::Reassembler)). The name is not checked, as in eCAL.
pub fn decode_registration(framed: &[u8]) -> Result<pb::Sample, DecodeError> {
    let (_name, payload) = wire::split_name(framed)?;
    Ok(pb::Sample::decode(payload)?)
}

/// Converts a model layer to its protobuf entry.
pub fn layer_to_pb(layer: &Layer) -> pb::TransportLayer {
    let par_layer = match &layer.par {
        LayerPar::None => None,
        LayerPar::Shm { memory_files } => Some(pb::ConnectionPar {
            layer_par_shm: Some(pb::LayerParShm { memory_file_list: memory_files.clone() }),
            ..Default::default()
        }),
        LayerPar::Tcp { port } => {
            Some(pb::ConnectionPar { layer_par_tcp: Some(pb::LayerParTcp { port: *port }), ..Default::default() })
        }
        LayerPar::ShoalUdp { packed_version } => Some(pb::ConnectionPar {
            layer_par_shoal_udp: Some(pb::LayerParShoalUdp { packed_version: *packed_version }),
            ..Default::default()
        }),
        LayerPar::Shoal(p) => Some(pb::ConnectionPar {
            layer_par_shoal: Some(pb::LayerParShoal {
                segment: p.segment.clone(),
                slot_count: p.slot_count,
                slot_size: p.slot_size,
                generation: p.generation,
                doorbell: p.doorbell.clone(),
                page_kb: p.page_kb,
                history_depth: p.history_depth,
                history_bytes: p.history_bytes,
            }),
            ..Default::default()
        }),
    };
    pb::TransportLayer {
        r#type: layer.kind.to_i32(),
        version: layer.version,
        active: layer.active,
        par_layer,
        enabled: layer.enabled,
    }
}

/// Converts a protobuf layer entry to the model; the parameters are taken from the
/// sub-message that belongs to the layer's type (others are ignored).
pub fn layer_from_pb(layer: &pb::TransportLayer) -> Layer {
    let kind = LayerKind::from_i32(layer.r#type);
    let par = layer.par_layer.as_ref().map_or(LayerPar::None, |par| match kind {
        LayerKind::Shm => par
            .layer_par_shm
            .as_ref()
            .map_or(LayerPar::None, |p| LayerPar::Shm { memory_files: p.memory_file_list.clone() }),
        LayerKind::Tcp => par.layer_par_tcp.as_ref().map_or(LayerPar::None, |p| LayerPar::Tcp { port: p.port }),
        LayerKind::ShoalRing => par.layer_par_shoal.as_ref().map_or(LayerPar::None, |p| {
            LayerPar::Shoal(ShoalPar {
                segment: p.segment.clone(),
                slot_count: p.slot_count,
                slot_size: p.slot_size,
                generation: p.generation,
                doorbell: p.doorbell.clone(),
                page_kb: p.page_kb,
                history_depth: p.history_depth,
                history_bytes: p.history_bytes,
            })
        }),
        LayerKind::Udp => par
            .layer_par_shoal_udp
            .as_ref()
            .map_or(LayerPar::None, |p| LayerPar::ShoalUdp { packed_version: p.packed_version }),
        LayerKind::Other(_) => LayerPar::None,
    });
    Layer { kind, version: layer.version, enabled: layer.enabled, active: layer.active, par }
}

fn type_info_to_pb(t: &TypeInfo) -> pb::DataTypeInformation {
    pb::DataTypeInformation {
        name: t.name.clone(),
        encoding: t.encoding.clone(),
        descriptor_information: t.descriptor.clone(),
    }
}

fn type_info_from_pb(t: Option<&pb::DataTypeInformation>) -> TypeInfo {
    t.map_or_else(TypeInfo::default, |t| TypeInfo {
        name: t.name.clone(),
        encoding: t.encoding.clone(),
        descriptor: t.descriptor_information.clone(),
    })
}

/// Latency statistics as eCAL 6.1.1 writes them. Its `Statistics` struct defaults `min` to +∞ and `max` to −∞
/// (`ecal_struct_sample_registration.h`), so both are always written (prost would elide a 0.0, which eCAL would
/// then read as ±∞); nothing measured is the model's default, eCAL's ±∞.
fn latency_to_pb(l: &LatencySummary) -> pb::Statistics {
    pb::Statistics {
        count: l.count,
        latest: l.latest_us,
        min: Some(l.min_us),
        max: Some(l.max_us),
        mean: l.mean_us,
        variance: l.variance_us2,
    }
}

/// Connections of one entity sent or kept from a received registration; further entries are ignored (a subscriber
/// has one per publisher and way of delivery, so real ones stay far below).
pub const MAX_CONNECTIONS: usize = 256;

fn connection_to_pb(c: &ConnectionStats) -> pb::ConnectionStats {
    let (latency_bucket, latency_count) = c.latency.sparse().map(|(i, n)| (i as u32, n)).unzip();
    pb::ConnectionStats {
        publisher_id: c.publisher_id,
        via: c.via.code(),
        same_host: c.same_host,
        messages: c.messages,
        bytes: c.bytes,
        drops: c.drops,
        window_ms: c.window_ms,
        window_messages: c.window_messages,
        window_bytes: c.window_bytes,
        last_size: c.last_size,
        latency_bucket,
        latency_count,
        latency_min_ns: c.latency.min_ns().unwrap_or(0),
        latency_max_ns: c.latency.max_ns().unwrap_or(0),
    }
}

/// A received connection entry; `None` for a way of delivery shoal does not know.
fn connection_from_pb(c: &pb::ConnectionStats) -> Option<ConnectionStats> {
    let pairs = c.latency_bucket.iter().zip(&c.latency_count).map(|(&i, &n)| (i as usize, n));
    let (latency, _ignored) = LatencyHistogram::from_sparse(pairs, c.latency_min_ns, c.latency_max_ns);
    Some(ConnectionStats {
        publisher_id: c.publisher_id,
        via: Via::from_code(c.via)?,
        same_host: c.same_host,
        messages: c.messages,
        bytes: c.bytes,
        drops: c.drops,
        window_ms: c.window_ms,
        window_messages: c.window_messages,
        window_bytes: c.window_bytes,
        last_size: c.last_size,
        latency,
    })
}

fn shoal_stats_to_pb(s: &ShoalStats) -> pb::TopicStatsShoal {
    pb::TopicStatsShoal {
        bytes: s.bytes,
        bandwidth_bps: s.bandwidth_bps,
        connections: s.connections.iter().take(MAX_CONNECTIONS).map(connection_to_pb).collect(),
        reliable_waits: s.reliable_waits,
        reliable_wait_ns: s.reliable_wait_ns,
        reliable_evicted: s.reliable_evicted,
        history_kept: s.history_kept,
        history_kept_bytes: s.history_kept_bytes,
        history_resent: s.history_resent,
        history_resent_bytes: s.history_resent_bytes,
        history_missed: s.history_missed,
        history_late: s.history_late,
    }
}

fn shoal_stats_from_pb(s: &pb::TopicStatsShoal) -> ShoalStats {
    ShoalStats {
        bytes: s.bytes,
        bandwidth_bps: if s.bandwidth_bps.is_finite() { s.bandwidth_bps.max(0.0) } else { 0.0 },
        connections: s.connections.iter().take(MAX_CONNECTIONS).filter_map(connection_from_pb).collect(),
        reliable_waits: s.reliable_waits,
        reliable_wait_ns: s.reliable_wait_ns,
        reliable_evicted: s.reliable_evicted,
        history_kept: s.history_kept,
        history_kept_bytes: s.history_kept_bytes,
        history_resent: s.history_resent,
        history_resent_bytes: s.history_resent_bytes,
        history_missed: s.history_missed,
        history_late: s.history_late,
    }
}

fn stats_from_pb(t: &pb::Topic) -> TopicStats {
    let l = t.data_latency_us.unwrap_or_default();
    TopicStats {
        topic_size: t.topic_size,
        connections_local: t.connections_local,
        connections_external: t.connections_external,
        message_drops: t.message_drops,
        data_id: t.data_id,
        data_clock: t.data_clock,
        data_frequency_mhz: t.data_frequency,
        latency: LatencySummary {
            count: l.count,
            latest_us: l.latest,
            // Missing: eCAL's defaults.
            min_us: l.min.unwrap_or(f64::INFINITY),
            max_us: l.max.unwrap_or(f64::NEG_INFINITY),
            mean_us: l.mean,
            variance_us2: l.variance,
        },
        shoal: t.shoal_stats.as_ref().map(shoal_stats_from_pb),
    }
}

/// Our process id as eCAL's `int32` field.
fn pid_i32(pid: u32) -> i32 {
    i32::from_ne_bytes(pid.to_ne_bytes())
}

/// A received `int32` process id as the u32 shoal uses.
pub(crate) fn pid_u32(pid: i32) -> u32 {
    u32::from_ne_bytes(pid.to_ne_bytes())
}

/// The process registration (cmd 4), with shoal's process statistics.
pub fn process_sample_with(
    me: &Identity,
    registration_clock: i32,
    state: &ProcessState,
    stats: &ShoalProcessStats,
) -> pb::Sample {
    let mut sample = process_sample(me, registration_clock);
    if let Some(p) = &mut sample.process {
        p.state = Some(pb::ProcessState {
            severity: state.severity.to_wire(),
            info: state.info.clone(),
            severity_level: state.level.to_wire(),
        });
        p.shoal_stats = Some(pb::ProcessStatsShoal {
            udp_kernel_drops: stats.udp_kernel_drops,
            registration_kernel_drops: stats.registration_kernel_drops,
            memory_rss_bytes: stats.memory_rss_bytes,
            cpu_load_permille: stats.cpu_load_permille,
        });
    }
    sample
}

/// The process registration (cmd 4), without shoal's statistics, in the state a process announces until it sets
/// one (eCAL's default: unknown, level 1).
pub fn process_sample(me: &Identity, registration_clock: i32) -> pb::Sample {
    pb::Sample {
        cmd_type: pb::CMD_REG_PROCESS,
        process: Some(pb::Process {
            registration_clock,
            host_name: me.host_name.clone(),
            process_id: pid_i32(me.pid),
            process_name: me.process_name.clone(),
            unit_name: me.unit_name.clone(),
            process_parameter: me.process_parameter.clone(),
            state: Some(pb::ProcessState { severity: 0, info: String::new(), severity_level: 1 }),
            time_sync_state: 0,
            time_sync_module_name: String::new(),
            component_init_state: COMPONENT_INIT_STATE,
            component_init_info: COMPONENT_INIT_INFO.to_owned(),
            ecal_runtime_version: RUNTIME_VERSION.to_owned(),
            shm_transport_domain: me.shm_transport_domain.clone(),
            config_file_path: String::new(),
            shoal_stats: None,
        }),
        ..Default::default()
    }
}

/// The process unregistration (cmd 14): Process {pid, host, name, unit}.
pub fn process_unreg_sample(me: &Identity) -> pb::Sample {
    pb::Sample {
        cmd_type: pb::CMD_UNREG_PROCESS,
        process: Some(pb::Process {
            host_name: me.host_name.clone(),
            process_id: pid_i32(me.pid),
            process_name: me.process_name.clone(),
            unit_name: me.unit_name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn topic_identity(me: &Identity, t: &LocalTopic) -> pb::Topic {
    pb::Topic {
        topic_id: t.id.to_string(),
        host_name: me.host_name.clone(),
        process_id: pid_i32(me.pid),
        process_name: me.process_name.clone(),
        topic_name: t.topic_name.clone(),
        shm_transport_domain: me.shm_transport_domain.clone(),
        unit_name: me.unit_name.clone(),
        ..Default::default()
    }
}

/// A publisher (cmd 2) or subscriber (cmd 3) registration.
pub fn topic_sample(me: &Identity, dir: Direction, t: &LocalTopic, registration_clock: i32) -> pb::Sample {
    let s = &t.stats;
    let topic = pb::Topic {
        registration_clock,
        datatype_information: Some(type_info_to_pb(&t.type_info)),
        transport_layer: t.layers.iter().map(layer_to_pb).collect(),
        topic_size: s.topic_size,
        connections_local: s.connections_local,
        connections_external: s.connections_external,
        message_drops: s.message_drops,
        data_id: s.data_id,
        data_clock: s.data_clock,
        data_frequency: s.data_frequency_mhz,
        data_latency_us: Some(latency_to_pb(&s.latency)),
        shoal_stats: s.shoal.as_ref().map(shoal_stats_to_pb),
        ..topic_identity(me, t)
    };
    let cmd_type = match dir {
        Direction::Publisher => pb::CMD_REG_PUBLISHER,
        Direction::Subscriber => pb::CMD_REG_SUBSCRIBER,
    };
    pb::Sample { cmd_type, topic: Some(topic), ..Default::default() }
}

/// A publisher (cmd 12) or subscriber (cmd 13) unregistration: identity fields only.
pub fn topic_unreg_sample(me: &Identity, dir: Direction, t: &LocalTopic) -> pb::Sample {
    let cmd_type = match dir {
        Direction::Publisher => pb::CMD_UNREG_PUBLISHER,
        Direction::Subscriber => pb::CMD_UNREG_SUBSCRIBER,
    };
    pb::Sample { cmd_type, topic: Some(topic_identity(me, t)), ..Default::default() }
}

/// The key of a received topic (fails on a non-numeric id).
pub fn entity_key(t: &pb::Topic) -> Result<EntityKey, TopicIdError> {
    Ok(EntityKey {
        host_name: t.host_name.clone(),
        pid: pid_u32(t.process_id),
        entity_id: parse_topic_id(&t.topic_id)?,
    })
}

/// A received topic registration as a model entry (its [`RemoteTopic::source`] and
/// [`RemoteTopic::authenticated`] are for the caller, who received the datagram, to fill in).
pub fn remote_topic(dir: Direction, t: &pb::Topic) -> Result<RemoteTopic, TopicIdError> {
    Ok(RemoteTopic {
        key: entity_key(t)?,
        direction: dir,
        topic_name: t.topic_name.clone(),
        type_info: type_info_from_pb(t.datatype_information.as_ref()),
        process_name: t.process_name.clone(),
        unit_name: t.unit_name.clone(),
        shm_transport_domain: t.shm_transport_domain.clone(),
        layers: t.transport_layer.iter().map(layer_from_pb).collect(),
        stats: stats_from_pb(t),
        registration_clock: t.registration_clock,
        source: None,
        authenticated: false,
    })
}

/// A received process registration as a model entry.
pub fn remote_process(p: &pb::Process, now: Instant) -> RemoteProcess {
    let state = p.state.clone().unwrap_or_default();
    RemoteProcess {
        host_name: p.host_name.clone(),
        pid: pid_u32(p.process_id),
        process_name: p.process_name.clone(),
        unit_name: p.unit_name.clone(),
        process_parameter: p.process_parameter.clone(),
        shm_transport_domain: p.shm_transport_domain.clone(),
        component_init_state: p.component_init_state,
        component_init_info: p.component_init_info.clone(),
        ecal_runtime_version: p.ecal_runtime_version.clone(),
        config_file_path: p.config_file_path.clone(),
        time_sync_module_name: p.time_sync_module_name.clone(),
        time_sync_state: p.time_sync_state,
        state: ProcessState::from_wire(state.severity, state.severity_level, &state.info),
        registration_clock: p.registration_clock,
        shoal: p.shoal_stats.as_ref().map(|s| ShoalProcessStats {
            udp_kernel_drops: s.udp_kernel_drops,
            registration_kernel_drops: s.registration_kernel_drops,
            memory_rss_bytes: s.memory_rss_bytes,
            cpu_load_permille: s.cpu_load_permille,
        }),
        last_seen: now,
    }
}

fn method_to_pb(m: &MethodInfo) -> pb::Method {
    pb::Method {
        method_name: m.name.clone(),
        // The deprecated fields, as eCAL 6.1.1 still writes them (eCAL 5.x reads only these).
        req_type: m.request.name.clone(),
        req_desc: m.request.descriptor.clone(),
        resp_type: m.response.name.clone(),
        resp_desc: m.response.descriptor.clone(),
        request_datatype_information: Some(type_info_to_pb(&m.request)),
        response_datatype_information: Some(type_info_to_pb(&m.response)),
        call_count: m.call_count,
    }
}

/// A method as announced; without the eCAL 6 type information (an eCAL 5.x peer), from the deprecated fields.
fn method_from_pb(m: &pb::Method) -> MethodInfo {
    let legacy = |name: &str, desc: &[u8]| TypeInfo {
        name: name.to_owned(),
        encoding: String::new(),
        descriptor: desc.to_vec(),
    };
    MethodInfo {
        name: m.method_name.clone(),
        request: m
            .request_datatype_information
            .as_ref()
            .map_or_else(|| legacy(&m.req_type, &m.req_desc), |t| type_info_from_pb(Some(t))),
        response: m
            .response_datatype_information
            .as_ref()
            .map_or_else(|| legacy(&m.resp_type, &m.resp_desc), |t| type_info_from_pb(Some(t))),
        call_count: m.call_count,
    }
}

/// A server (cmd 5) or client (cmd 6) registration; with `unregister`, its unregistration (cmd 15 / 16: identity
/// and names only, as eCAL sends it).
pub fn service_sample(me: &Identity, s: &LocalService, registration_clock: i32, unregister: bool) -> pb::Sample {
    let methods = if unregister { Vec::new() } else { s.methods.iter().map(method_to_pb).collect() };
    let registration_clock = if unregister { 0 } else { registration_clock };
    match s.role {
        ServiceRole::Server => pb::Sample {
            cmd_type: if unregister { pb::CMD_UNREG_SERVICE } else { pb::CMD_REG_SERVICE },
            service: Some(pb::Service {
                registration_clock,
                host_name: me.host_name.clone(),
                process_name: me.process_name.clone(),
                unit_name: me.unit_name.clone(),
                process_id: pid_i32(me.pid),
                service_name: s.service_name.clone(),
                tcp_port_v0: 0,
                methods,
                service_id: s.id.to_string(),
                version: SERVICE_PROTOCOL_VERSION,
                tcp_port_v1: if unregister { 0 } else { u32::from(s.tcp_port) },
            }),
            ..Default::default()
        },
        ServiceRole::Client => pb::Sample {
            cmd_type: if unregister { pb::CMD_UNREG_CLIENT } else { pb::CMD_REG_CLIENT },
            client: Some(pb::Client {
                registration_clock,
                host_name: me.host_name.clone(),
                process_name: me.process_name.clone(),
                unit_name: me.unit_name.clone(),
                process_id: pid_i32(me.pid),
                service_name: s.service_name.clone(),
                service_id: s.id.to_string(),
                version: SERVICE_PROTOCOL_VERSION,
                methods,
            }),
            ..Default::default()
        },
    }
}

/// A received server registration as a model entry (`source` and `authenticated` are the caller's to fill in).
pub fn remote_server(s: &pb::Service, now: Instant) -> Result<RemoteService, TopicIdError> {
    Ok(RemoteService {
        key: EntityKey {
            host_name: s.host_name.clone(),
            pid: pid_u32(s.process_id),
            entity_id: parse_topic_id(&s.service_id)?,
        },
        role: ServiceRole::Server,
        service_name: s.service_name.clone(),
        process_name: s.process_name.clone(),
        unit_name: s.unit_name.clone(),
        methods: s.methods.iter().map(method_from_pb).collect(),
        version: s.version,
        // A port beyond 16 bits is no port.
        tcp_port: u16::try_from(s.tcp_port_v1).unwrap_or(0),
        registration_clock: s.registration_clock,
        source: None,
        authenticated: false,
        last_seen: now,
    })
}

/// A received client registration as a model entry.
pub fn remote_client(c: &pb::Client, now: Instant) -> Result<RemoteService, TopicIdError> {
    Ok(RemoteService {
        key: EntityKey {
            host_name: c.host_name.clone(),
            pid: pid_u32(c.process_id),
            entity_id: parse_topic_id(&c.service_id)?,
        },
        role: ServiceRole::Client,
        service_name: c.service_name.clone(),
        process_name: c.process_name.clone(),
        unit_name: c.unit_name.clone(),
        methods: c.methods.iter().map(method_from_pb).collect(),
        version: c.version,
        tcp_port: 0,
        registration_clock: c.registration_clock,
        source: None,
        authenticated: false,
        last_seen: now,
    })
}

#[cfg(test)]
mod latency_tests {
    use prost::Message;

    use super::*;

    /// Field numbers present in an encoded `Statistics`.
    fn present(stats: &pb::Statistics) -> Vec<u32> {
        let bytes = stats.encode_to_vec();
        let mut fields = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let key = bytes[i];
            fields.push(u32::from(key >> 3));
            // Tags here are one byte; varint count (one byte for small values) or fixed64 doubles.
            i += if key & 7 == 1 { 9 } else { 2 };
        }
        fields
    }

    #[test]
    fn zero_min_and_max_are_written_because_ecal_defaults_them_to_infinity() {
        let l = LatencySummary { count: 3, latest_us: 1.0, min_us: 0.0, max_us: 0.0, mean_us: 0.5, variance_us2: 0.0 };
        let pb = latency_to_pb(&l);
        assert_eq!((pb.min, pb.max), (Some(0.0), Some(0.0)));
        let fields = present(&pb);
        assert!(fields.contains(&3) && fields.contains(&4), "min and max on the wire: {fields:?}");
        let back = pb::Statistics::decode(pb.encode_to_vec().as_slice()).unwrap();
        assert_eq!((back.min, back.max), (Some(0.0), Some(0.0)));
    }

    #[test]
    fn nothing_measured_is_sent_as_ecals_no_data_values() {
        let pb = latency_to_pb(&LatencySummary::default());
        assert_eq!((pb.count, pb.min, pb.max), (0, Some(f64::INFINITY), Some(f64::NEG_INFINITY)));
    }

    #[test]
    fn missing_min_and_max_decode_as_ecal_defaults() {
        let topic = pb::Topic { data_latency_us: Some(pb::Statistics::default()), ..Default::default() };
        let stats = stats_from_pb(&topic);
        assert_eq!((stats.latency.min_us, stats.latency.max_us), (f64::INFINITY, f64::NEG_INFINITY));
        assert_eq!(stats.shoal, None, "no extension from an eCAL peer");
    }

    #[test]
    fn shoal_statistics_round_trip_through_the_extension_and_are_bounded() {
        let mut latency = LatencyHistogram::default();
        for ns in [300, 450, 450, 90_000] {
            latency.record(ns);
        }
        let conn = ConnectionStats {
            publisher_id: 7,
            via: Via::Udp,
            same_host: true,
            messages: 10,
            bytes: 640,
            drops: 1,
            window_ms: 1000,
            window_messages: 4,
            window_bytes: 256,
            last_size: 64,
            latency,
        };
        let stats = ShoalStats {
            bytes: 640,
            bandwidth_bps: 256.0,
            connections: vec![conn.clone(); MAX_CONNECTIONS + 5],
            ..ShoalStats::default()
        };
        let pb = shoal_stats_to_pb(&stats);
        assert_eq!(pb.connections.len(), MAX_CONNECTIONS);
        let mut wire = pb::TopicStatsShoal::decode(pb.encode_to_vec().as_slice()).unwrap();
        // An unknown way of delivery and a NaN bandwidth from a peer are dropped, not trusted.
        wire.connections.push(pb::ConnectionStats { via: 99, ..Default::default() });
        wire.bandwidth_bps = f64::NAN;
        let back = shoal_stats_from_pb(&wire);
        assert_eq!(back.connections.len(), MAX_CONNECTIONS);
        assert_eq!(back.connections[0], conn);
        assert_eq!(back.bandwidth_bps, 0.0);
    }
}
