//! The running bridge: one shoal node and one ROS 2 node (a RustDDS participant through ros2-client), and per
//! route a shoal → ROS 2 callback subscriber feeding a DDS writer task and/or a ROS 2 → shoal task.
//!
//! Threads: the caller's thread runs a single-threaded executor with ros2-client's spinner (discovery, graph,
//! parameter services), every ROS 2 → shoal task, every shoal → ROS 2 writer task, the statistics timer, the
//! endpoint check (QoS and type mismatches of the remote DDS endpoints on the bridged topics) and the automatic
//! routes' discovery poll ([`crate::auto`]), which starts and stops routes while the bridge runs. shoal delivers the
//! shoal → ROS 2 samples to callbacks on its doorbell thread, which converts each to the ROS message and queues it
//! (bounded, [`QUEUE_MESSAGES`] and [`QUEUE_BYTES`] per route) for the route's writer task, so a DDS writer waiting
//! for its reliable window never holds up another route. Bridged services (`crate::services`) add their request
//! and reply tasks to the same executor; a call of a shoal server waits on smol's blocking pool, a call of a ROS 2
//! server on the shoal server's handler thread. RustDDS adds its own event-loop thread, shoal its I/O thread.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ros2_client::dds::rustdds;
use ros2_client::{
    Context, MessageTypeName, Name, NodeName, NodeOptions, QosProfile, Subscription,
    qos::{Durability as RosDurability, History, Reliability as RosReliability, WhenFull},
};
use serde::{Serialize, de::DeserializeOwned, de::DeserializeSeed};
use serde_json::json;
use shoal::{Sample, TypeInfo};

use crate::config::{Config, Durability, Reliability, Route};
use crate::generic::{DynRos, DynSeed, Mapping, ProtoError, Remapped, Remapper};
use crate::mapping::ToRos;
use crate::pb;
use crate::ros;
use crate::stats::{Cause, QUEUE_BYTES, QUEUE_MESSAGES, RouteStats};
use crate::types::{RosType, RouteType};

/// Errors that stop the bridge from starting.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// shoal could not start.
    #[error("shoal: {0}")]
    Shoal(#[from] shoal::InitError),
    /// A shoal publisher or subscriber could not be created.
    #[error("shoal topic {topic}: {source}")]
    ShoalTopic {
        /// The topic.
        topic: String,
        /// Why.
        source: shoal::CreateError,
    },
    /// A route's protobuf definition was to come from its shoal publisher, and no publisher announced it in time.
    #[error(
        "shoal topic {topic}: no publisher announced {shoal_type} (encoding proto, with a descriptor) within \
         {waited_ms} ms (announced_type_wait_ms); publishers seen: {}. Start the publisher first, or give \
         shoal_proto or shoal_descriptor",
        if seen.is_empty() { "none".to_string() } else { seen.join(", ") }
    )]
    NotAnnounced {
        /// The topic.
        topic: String,
        /// The protobuf type the route expects.
        shoal_type: String,
        /// How long the bridge waited.
        waited_ms: u64,
        /// What the topic's publishers announced instead (`name (encoding)`).
        seen: Vec<String>,
    },
    /// The protobuf definition a route's shoal publisher announced does not map to the route's ROS 2 type.
    #[error("shoal topic {topic}: the announced protobuf {shoal_type} does not map to {ros}")]
    AnnouncedMapping {
        /// The topic.
        topic: String,
        /// The announced protobuf type.
        shoal_type: String,
        /// The route's ROS 2 type.
        ros: String,
        /// The first field that does not map, and why.
        source: Box<crate::generic::GenericError>,
    },
    /// A bridged service could not start.
    #[error(transparent)]
    Service(#[from] crate::services::ServiceError),
    /// The routes contradict each other.
    #[error("routes")]
    Routes(#[from] crate::config::ConfigError),
    /// The DDS participant, node, topic, reader or writer could not be created.
    #[error("ROS 2 / DDS: {what}")]
    Ros {
        /// What was being created.
        what: String,
        /// ros2-client's or RustDDS's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn ros_err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> BridgeError {
    BridgeError::Ros { what: what.to_owned(), source: Box::new(e) }
}

/// How a route turns shoal payloads into ROS 2 messages and back.
pub trait Codec: Send + Sync + 'static {
    /// The ROS 2 message.
    type Ros: Serialize + std::fmt::Debug + Send + 'static;
    /// What reads a ROS 2 message from CDR.
    type Seed: for<'de> DeserializeSeed<'de, Value = Self::Ros> + Clone + Send + 'static;
    /// The reader of this route's CDR samples.
    fn seed(&self) -> Self::Seed;
    /// What the bridge's shoal publisher announces.
    fn shoal_type_info(&self) -> TypeInfo;
    /// What the bridge's shoal subscriber expects (default: what the publisher announces).
    fn shoal_sub_type_info(&self) -> TypeInfo {
        self.shoal_type_info()
    }
    /// shoal sample → ROS 2 message; a drop cause and its detail when the sample is bad input.
    fn to_ros(&self, sample: &Sample) -> Result<Self::Ros, (Cause, String)>;
    /// ROS 2 message → shoal payload; a drop cause and its detail when the message cannot be forwarded.
    fn to_shoal(&self, msg: Self::Ros) -> Result<Vec<u8>, (Cause, String)>;
}

/// Whether a shoal sample's announced type `got` is one the route can read (`want`), by shoal's one rule
/// ([`TypeInfo::disagree`]): what a publisher does not state (raw eCAL publishers announce nothing) is taken at
/// its word.
fn check_announced(got: &TypeInfo, want: &TypeInfo) -> Result<(), (Cause, String)> {
    if TypeInfo::disagree([got, want]) {
        return Err((
            Cause::TypeMismatch,
            format!(
                "publisher announces {} ({}), the route carries {} ({})",
                got.name, got.encoding, want.name, want.encoding
            ),
        ));
    }
    Ok(())
}

/// A built-in type: the shipped protobuf message `P`, mapped field by field.
#[derive(Debug)]
pub struct ProtoCodec<P>(PhantomData<fn() -> P>);

impl<P> Default for ProtoCodec<P> {
    fn default() -> Self {
        ProtoCodec(PhantomData)
    }
}

impl<P> Codec for ProtoCodec<P>
where
    P: shoal::Message + prost::Message + Default + ToRos,
    P::Ros: Serialize + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    type Ros = P::Ros;
    type Seed = PhantomData<P::Ros>;
    fn seed(&self) -> Self::Seed {
        PhantomData
    }
    fn shoal_type_info(&self) -> TypeInfo {
        P::type_info().clone()
    }
    fn to_ros(&self, sample: &Sample) -> Result<P::Ros, (Cause, String)> {
        let want = P::type_info();
        check_announced(sample.type_info(), want)?;
        let msg = <P as prost::Message>::decode(sample.payload()).map_err(|e| {
            (Cause::ProtoDecode, format!("{} bytes are not a {}: {e}", sample.payload().len(), want.name))
        })?;
        msg.to_ros().map_err(|e| (Cause::Map, e.to_string()))
    }
    fn to_shoal(&self, msg: P::Ros) -> Result<Vec<u8>, (Cause, String)> {
        Ok(prost::Message::encode_to_vec(&P::from_ros(msg)))
    }
}

/// The raw fallback: `std_msgs/msg/UInt8MultiArray` carrying the payload and its shoal type name (in
/// `layout.dim[0].label`).
#[derive(Debug)]
pub struct RawCodec {
    /// The configured shoal type, if any: samples of another type are dropped (a type change).
    shoal_type: Option<String>,
    /// What the shoal publisher announces.
    type_info: TypeInfo,
}

impl RawCodec {
    /// The raw codec of `route` (its `shoal_type` and `shoal_descriptor`).
    pub fn new(route: &Route) -> RawCodec {
        RawCodec { shoal_type: route.shoal_type.clone(), type_info: route.raw_type_info() }
    }

    fn check_type(&self, got: &str, side: &str) -> Result<(), (Cause, String)> {
        match &self.shoal_type {
            Some(want) if !got.is_empty() && got != want => {
                Err((Cause::TypeMismatch, format!("{side} carries type {got}, the route carries {want} (shoal_type)")))
            }
            _ => Ok(()),
        }
    }
}

impl Codec for RawCodec {
    type Ros = ros::UInt8MultiArray;
    type Seed = PhantomData<ros::UInt8MultiArray>;
    fn seed(&self) -> Self::Seed {
        PhantomData
    }
    fn shoal_type_info(&self) -> TypeInfo {
        self.type_info.clone()
    }
    /// Without a configured type the subscriber announces none, and so matches every publisher.
    fn shoal_sub_type_info(&self) -> TypeInfo {
        if self.shoal_type.is_some() { self.type_info.clone() } else { TypeInfo::default() }
    }
    fn to_ros(&self, sample: &Sample) -> Result<ros::UInt8MultiArray, (Cause, String)> {
        self.check_type(&sample.type_info().name, "the shoal publisher")?;
        raw_to_ros(&sample.type_info().name, sample.payload()).map_err(|e| (Cause::Map, e.to_string()))
    }
    fn to_shoal(&self, msg: ros::UInt8MultiArray) -> Result<Vec<u8>, (Cause, String)> {
        let label = msg.layout.dim.first().map_or("", |d| d.label.as_str());
        self.check_type(label, "a ROS 2 sample (layout.dim[0].label)")?;
        Ok(msg.data)
    }
}

/// A generic mapping: the configured protobuf message (announced with its descriptor), written as the ROS 2 type
/// read from its `.msg` file. shoal → ROS 2, a publisher that announces another protobuf descriptor (it restarted
/// with a changed message) is read through a mapping of that descriptor, made and checked when it is first seen
/// ([`Remapper`]); one that does not map is refused, each sample dropped as `type_changed` and the type logged once.
#[derive(Debug)]
pub struct GenericCodec {
    mapping: Arc<Mapping>,
    remap: Remapper,
    /// The route, as logs name it.
    route: String,
}

impl GenericCodec {
    /// The codec of a checked mapping on route `route`; `reg` finds the ROS type's definition for the mappings of
    /// changed types.
    pub fn new(m: Arc<Mapping>, reg: crate::msgdef::MsgRegistry, route: String) -> GenericCodec {
        GenericCodec { remap: Remapper::new(m.ros_name().clone(), reg), mapping: m, route }
    }

    /// The ROS 2 message of a shoal payload announced as `announced`.
    pub fn convert(&self, announced: &TypeInfo, payload: &[u8]) -> Result<DynRos, (Cause, String)> {
        let other;
        let mapping = match self.remap.mapping_for(&self.mapping, announced) {
            Remapped::Route => {
                check_announced(announced, self.mapping.type_info())?;
                &*self.mapping
            }
            Remapped::Other { mapping, first } => {
                if first {
                    let message = format!(
                        "route {}: a shoal publisher announces {} ({} B descriptor), not the route's {}: read through \
                         its own mapping to {}",
                        self.route,
                        announced.name,
                        announced.descriptor.len(),
                        self.mapping.type_info().name,
                        self.mapping.ros_name()
                    );
                    tracing::info!("{message}");
                    emit(&json!({"event": "type_changed", "route": self.route, "type": announced.name,
                                 "result": "remapped", "message": message}));
                }
                other = mapping;
                &*other
            }
            Remapped::Refused { reason, first } => {
                let message = format!(
                    "a shoal publisher announces {} ({} B descriptor), which does not map to {}: {reason}",
                    announced.name,
                    announced.descriptor.len(),
                    self.mapping.ros_name()
                );
                if first {
                    tracing::warn!("route {}: {message}; its samples are dropped as type_changed", self.route);
                    emit(&json!({"event": "type_changed", "route": self.route, "type": announced.name,
                                 "result": "refused", "message": message}));
                }
                return Err((Cause::TypeChanged, message));
            }
        };
        mapping.from_proto(payload).map_err(|e| match e {
            ProtoError::Decode(m) => (Cause::ProtoDecode, m),
            ProtoError::Range(m) => (Cause::Map, m),
        })
    }
}

impl Codec for GenericCodec {
    type Ros = DynRos;
    type Seed = DynSeed;
    fn seed(&self) -> DynSeed {
        self.mapping.seed()
    }
    fn shoal_type_info(&self) -> TypeInfo {
        self.mapping.type_info().clone()
    }
    fn to_ros(&self, sample: &Sample) -> Result<DynRos, (Cause, String)> {
        self.convert(sample.type_info(), sample.payload())
    }
    fn to_shoal(&self, msg: DynRos) -> Result<Vec<u8>, (Cause, String)> {
        Ok(msg.encode_proto())
    }
}

/// The raw fallback's ROS 2 message: `payload` in `data`, and one `layout.dim` whose `label` is the shoal type
/// name and whose `size` and `stride` are the payload's length. Fails only for payloads of 4 GiB or more.
pub fn raw_to_ros(type_name: &str, payload: &[u8]) -> Result<ros::UInt8MultiArray, crate::mapping::MapError> {
    let len = u32::try_from(payload.len()).map_err(|_| crate::mapping::MapError::OutOfRange {
        field: "layout.dim[0].size",
        value: i64::try_from(payload.len()).unwrap_or(i64::MAX),
        ros_type: "uint32",
    })?;
    let dim = ros::MultiArrayDimension { label: type_name.to_string(), size: len, stride: len };
    Ok(ros::UInt8MultiArray {
        layout: ros::MultiArrayLayout { dim: vec![dim], data_offset: 0 },
        data: payload.to_vec(),
    })
}

/// The ROS 2 QoS profile of a route (the same for its reader and its writer).
pub fn qos_profile(route: &Route) -> QosProfile {
    let q = &route.qos;
    let p = QosProfile::publisher_default().history(History::KeepLast { depth: q.history_depth });
    let p = match q.reliability {
        // A write waits up to 2 s for room in the reliable window (a 6 MB sample is ~95 datagrams).
        Reliability::Reliable => {
            p.reliability(RosReliability::Reliable { when_full: WhenFull::Wait(Duration::from_secs(2)) })
        }
        Reliability::BestEffort => p.reliability(RosReliability::BestEffort),
    };
    match q.durability {
        Durability::Volatile => p.durability(RosDurability::Volatile),
        Durability::TransientLocal => p.durability(RosDurability::TransientLocal),
    }
}

/// `net.core.rmem_max` (the cap on any socket's receive buffer), if readable.
pub fn rmem_max() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max").ok()?.trim().parse().ok()
}

/// Warns when the kernel will cap the requested DDS receive buffer: multi-megabyte samples then overflow it in
/// bursts, and RustDDS repairs lost fragments slowly (256-byte fragments), so they arrive late or not at all.
pub fn check_socket_limits(requested: usize) -> Option<String> {
    let max = rmem_max()?;
    (max < requested).then(|| {
        format!(
            "net.core.rmem_max is {max} bytes, below the requested DDS receive buffer of {requested} bytes: the \
             kernel caps every socket at {max}, so samples of several MB (images, point clouds) can overflow it and \
             be lost or repaired slowly. Raise the limit (sysctl -w net.core.rmem_max={requested}), or use \
             reliability = \"best_effort\" for those topics. ROS 2 peers receiving large samples need a large \
             buffer too (Cyclone DDS: <Internal><SocketReceiveBufferSize min=\"4MB\"/></Internal>)."
        )
    })
}

/// The routes with every [`RouteType::Announced`] replaced by the generic mapping of the protobuf definition its
/// shoal publisher announces: waits up to `announced_type_wait_ms` for a publisher of the topic announcing
/// `shoal_type` with encoding `proto`, then checks the mapping (the error names the first field that does not
/// match).
fn resolve_announced(config: &Config, node: &shoal::Node) -> Result<Vec<Route>, BridgeError> {
    let mut routes = config.routes.clone();
    let deadline = Instant::now() + Duration::from_millis(config.announced_type_wait_ms);
    let mut reg = crate::msgdef::MsgRegistry::new(config.msg_path.clone());
    for r in &mut routes {
        let RouteType::Announced { ros, shoal_type } = &r.ros_type else { continue };
        tracing::info!(topic = %r.shoal_topic, "waiting for a shoal publisher announcing {shoal_type}");
        let (mut seen, descriptor) = loop {
            let snap = node.snapshot();
            let pubs: Vec<&shoal::monitor::TopicEntry> = snap
                .topics
                .iter()
                .filter(|t| t.topic_name == r.shoal_topic && t.direction == shoal::monitor::TopicDirection::Publisher)
                .collect();
            let found = pubs.iter().find(|t| {
                t.type_info.name == *shoal_type && t.type_info.encoding == "proto" && !t.type_info.descriptor.is_empty()
            });
            let seen: Vec<String> =
                pubs.iter().map(|t| format!("{} ({})", t.type_info.name, t.type_info.encoding)).collect();
            if let Some(t) = found {
                break (seen, Some(t.type_info.descriptor.clone()));
            }
            if Instant::now() >= deadline {
                break (seen, None);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let Some(descriptor) = descriptor else {
            seen.dedup();
            return Err(BridgeError::NotAnnounced {
                topic: r.shoal_topic.clone(),
                shoal_type: shoal_type.clone(),
                waited_ms: config.announced_type_wait_ms,
                seen,
            });
        };
        let m =
            Mapping::new(&mut reg, ros, shoal_type, descriptor).map_err(|source| BridgeError::AnnouncedMapping {
                topic: r.shoal_topic.clone(),
                shoal_type: shoal_type.clone(),
                ros: ros.to_string(),
                source: Box::new(source),
            })?;
        tracing::info!(topic = %r.shoal_topic, "{shoal_type} (announced) maps to {ros}");
        r.ros_type = RouteType::Generic(Arc::new(m));
    }
    Ok(routes)
}

/// Parts of a running route the main loop needs. Dropping it stops the route: its tasks own its shoal subscriber
/// and publisher and its DDS reader and writer.
pub(crate) struct Running {
    route: Route,
    stats: Arc<RouteStats>,
    /// GUIDs of the bridge's own DDS endpoints of this route.
    own: Vec<rustdds::GUID>,
    /// The route's tasks on the bridge's executor; dropping a task cancels it.
    _tasks: Vec<smol::Task<()>>,
}

impl Running {
    /// Whether this runs `route`.
    pub(crate) fn is_auto_route(&self, route: &Route) -> bool {
        self.route == *route
    }
}

pub(crate) fn route_name(r: &Route) -> String {
    format!("{} <-> {} [{}]", r.shoal_topic, r.ros_topic, r.ros_type)
}

/// Prints one JSON line on stdout (the bridge's machine-readable events: ready, stats, qos_mismatch, ...).
pub fn emit(v: &serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Runs the bridge until `stop` becomes true.
pub fn run(config: &Config, stop: Arc<AtomicBool>) -> Result<(), BridgeError> {
    config.check_routes()?;
    let shoal_node = shoal::Node::init(&config.unit_name)?;
    if let Some(w) = check_socket_limits(config.socket_receive_buffer) {
        tracing::warn!("{w}");
        emit(&json!({"event": "warning", "kind": "rmem_max", "message": w}));
    }

    let mut b = rustdds::DomainParticipantBuilder::new(config.domain_id)
        .socket_receive_buffer_size(config.socket_receive_buffer)
        .socket_send_buffer_size(config.socket_send_buffer);
    if !config.interfaces.is_empty() {
        b = b.with_only_networks(config.interfaces.iter().copied());
    }
    let dp = b.build().map_err(|e| ros_err("DDS participant", e))?;
    let ctx = Context::from_domain_participant(dp.clone()).map_err(|e| ros_err("ROS 2 context", e))?;
    let node_name = NodeName::new(&config.namespace, &config.node_name).map_err(|e| ros_err("node name", e))?;
    let mut node = ctx.new_node(node_name, NodeOptions::new().enable_rosout(true)).map_err(|e| ros_err("node", e))?;

    let ex = smol::LocalExecutor::new();
    let spinner = node.spinner().map_err(|e| ros_err("spinner", e))?;
    ex.spawn(async move {
        if let Err(e) = spinner.spin().await {
            tracing::error!("ROS 2 spinner stopped: {e:?}");
        }
    })
    .detach();

    // The hidden node that tells other bridges this participant's DDS writers are a bridge's (crate::auto).
    let _marker = ctx
        .new_node(
            NodeName::new("/", crate::auto::MARKER_NODE).map_err(|e| ros_err("node name", e))?,
            NodeOptions::new().enable_rosout(false),
        )
        .map_err(|e| ros_err("node", e))?;
    let bridges = crate::auto::Bridges::default();
    if let Some(events) = node.status_receiver() {
        ex.spawn(crate::auto::watch_bridges(events, Rc::clone(&bridges))).detach();
    }
    let mut auto =
        config.auto.clone().map(|a| crate::auto::AutoRun::new(a, &config.routes, bridges, config.msg_path.clone()));

    let routes = resolve_announced(config, &shoal_node)?;
    let mut running = Vec::new();
    for route in &routes {
        let mut env = StartEnv { shoal_node: &shoal_node, node: &mut node, ex: &ex, foreign: None };
        let r = start_route(&mut env, route, &config.msg_path)?;
        tracing::info!(route = %route_name(route), direction = ?route.direction, qos = ?route.qos, "bridging");
        running.push(r);
    }

    let mut services = Vec::new();
    for sr in &config.services {
        let r = crate::services::start(sr, &dp, &shoal_node, &ex)?;
        tracing::info!(service = %sr.name(), "bridging");
        services.push(r);
    }

    let stats_pub = shoal_node
        .publisher("shoal_ros2_bridge/stats")
        .type_info(TypeInfo::raw("json"))
        .create()
        .map_err(|source| BridgeError::ShoalTopic { topic: "shoal_ros2_bridge/stats".into(), source })?;
    emit(&json!({
        "event": "ready",
        "node": node.fully_qualified_name(),
        "domain_id": config.domain_id,
        "routes": running.iter().map(|r| route_name(&r.route)).collect::<Vec<_>>(),
        "services": services.iter().map(|s| s.route.name()).collect::<Vec<_>>(),
    }));

    let foreign = auto.as_ref().map(crate::auto::AutoRun::foreign);
    let env = StartEnv { shoal_node: &shoal_node, node: &mut node, ex: &ex, foreign };
    let main = main_loop(config, &dp, (&mut running, &services), stats_pub, &stop, auto.as_mut().map(|a| (a, env)));
    smol::block_on(ex.run(main));

    stop.store(true, Ordering::Relaxed);
    let routes: Vec<_> = running.iter().map(|r| r.stats.to_json()).collect();
    let services: Vec<_> = services.iter().map(|s| s.stats.to_json()).collect();
    let mut last = json!({"event": "stats", "final": true, "routes": routes, "services": services});
    if let Some(a) = &auto {
        last["auto"] = a.to_json();
    }
    emit(&last);
    Ok(())
}

/// Starts `route` with the codec its type needs (`msg_path`: the `.msg` directories of generic mappings).
pub(crate) fn start_route(
    env: &mut StartEnv<'_, '_>,
    route: &Route,
    msg_path: &[std::path::PathBuf],
) -> Result<Running, BridgeError> {
    let builtin = match &route.ros_type {
        RouteType::Builtin(t) => *t,
        RouteType::Generic(m) => {
            let reg = crate::msgdef::MsgRegistry::new(msg_path.to_vec());
            return env.start(route, GenericCodec::new(Arc::clone(m), reg, route_name(route)));
        }
        RouteType::Announced { .. } => {
            unreachable!("resolve_announced replaced every announced route type before the routes start")
        }
    };
    match builtin {
        RosType::String => env.start(route, ProtoCodec::<pb::std_msgs::String>::default()),
        RosType::Header => env.start(route, ProtoCodec::<pb::std_msgs::Header>::default()),
        RosType::Time => env.start(route, ProtoCodec::<pb::builtin_interfaces::Time>::default()),
        RosType::Pose => env.start(route, ProtoCodec::<pb::geometry_msgs::Pose>::default()),
        RosType::PoseStamped => env.start(route, ProtoCodec::<pb::geometry_msgs::PoseStamped>::default()),
        RosType::Twist => env.start(route, ProtoCodec::<pb::geometry_msgs::Twist>::default()),
        RosType::TransformStamped => env.start(route, ProtoCodec::<pb::geometry_msgs::TransformStamped>::default()),
        RosType::Imu => env.start(route, ProtoCodec::<pb::sensor_msgs::Imu>::default()),
        RosType::Image => env.start(route, ProtoCodec::<pb::sensor_msgs::Image>::default()),
        RosType::PointCloud2 => env.start(route, ProtoCodec::<pb::sensor_msgs::PointCloud2>::default()),
        RosType::NavSatFix => env.start(route, ProtoCodec::<pb::sensor_msgs::NavSatFix>::default()),
        RosType::Raw => env.start(route, RawCodec::new(route)),
    }
}

async fn main_loop(
    config: &Config,
    dp: &rustdds::DomainParticipant,
    (running, services): (&mut Vec<Running>, &[crate::services::RunningService]),
    mut stats_pub: shoal::Publisher,
    stop: &AtomicBool,
    mut auto: Option<(&mut crate::auto::AutoRun, StartEnv<'_, '_>)>,
) {
    let mut reported: HashSet<(rustdds::GUID, &'static str)> = HashSet::new();
    let mut actions_listed: HashSet<String> = HashSet::new();
    let stats_every = Duration::from_millis(config.stats_interval_ms);
    let mut next_stats = Instant::now() + stats_every;
    let mut next_check = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        smol::Timer::after(Duration::from_millis(50)).await;
        let now = Instant::now();
        if now >= next_check {
            next_check = now + Duration::from_millis(250);
            if let Some((a, env)) = auto.as_mut() {
                a.poll(dp, env, running);
            }
            check_endpoints(dp, running, &mut reported);
            list_actions(dp, &mut actions_listed);
        }
        if !stats_every.is_zero() && now >= next_stats {
            next_stats = now + stats_every;
            let mut line = json!({"event": "stats", "routes": running.iter().map(|r| r.stats.to_json()).collect::<Vec<_>>(),
                "services": services.iter().map(|s| s.stats.to_json()).collect::<Vec<_>>()});
            if let Some((a, _)) = &auto {
                line["auto"] = a.to_json();
            }
            emit(&line);
            let _ = stats_pub.send(line.to_string().as_bytes());
        }
    }
}

/// Lists, once each, the ROS 2 actions DDS discovery shows as not bridged (an event line and a log line).
fn list_actions(dp: &rustdds::DomainParticipant, listed: &mut HashSet<String>) {
    let mut topics: Vec<(String, String)> = dp
        .discovered_writers()
        .into_iter()
        .map(|w| (w.publication_topic_data.topic_name, w.publication_topic_data.type_name))
        .collect();
    topics.extend(dp.discovered_readers().into_iter().map(|r| {
        let t = r.subscription_topic_data;
        (t.topic_name().clone(), t.type_name().clone())
    }));
    for (name, ty) in crate::services::discovered_actions(&topics) {
        if listed.len() < 1024 && listed.insert(name.clone()) {
            let line = crate::services::action_not_bridged(&name, ty.as_deref());
            tracing::info!("{}", line["message"].as_str().unwrap_or_default());
            emit(&line);
        }
    }
}

/// A remote DDS endpoint, as discovery describes it.
struct Remote {
    guid: rustdds::GUID,
    /// "writer" or "reader".
    kind: &'static str,
    topic: String,
    type_name: String,
    reliable: bool,
    transient_local: bool,
}

/// Reports (once per remote endpoint and problem) remote DDS writers and readers on bridged topics whose QoS
/// cannot match the bridge's (DDS then silently connects nothing), or whose type name differs; and, as
/// `remote_endpoint` events, the ones that match.
fn check_endpoints(
    dp: &rustdds::DomainParticipant,
    running: &[Running],
    reported: &mut HashSet<(rustdds::GUID, &'static str)>,
) {
    use rustdds::policy::{Durability as D, Reliability as R};
    let rel = |r: Option<R>| matches!(r, Some(R::Reliable { .. }));
    let tl = |d: Option<D>| !matches!(d, None | Some(D::Volatile));
    let mut remotes: Vec<Remote> = dp
        .discovered_writers()
        .into_iter()
        .map(|w| {
            let t = w.publication_topic_data;
            Remote {
                guid: t.key,
                kind: "writer",
                topic: t.topic_name,
                type_name: t.type_name,
                reliable: rel(t.reliability),
                transient_local: tl(t.durability),
            }
        })
        .collect();
    remotes.extend(dp.discovered_readers().into_iter().map(|rd| {
        let t = rd.subscription_topic_data;
        let q = t.qos();
        Remote {
            guid: t.key(),
            kind: "reader",
            topic: t.topic_name().clone(),
            type_name: t.type_name().clone(),
            reliable: rel(q.reliability()),
            transient_local: tl(q.durability()),
        }
    }));
    for r in running {
        let dds_topic = format!("rt{}", r.route.ros_topic);
        let want_type = r.route.ros_type.dds_name();
        let own_prefixes: Vec<_> = r.own.iter().map(|g| g.prefix).collect();
        let (ours_reliable, ours_tl) =
            (r.route.qos.reliability == Reliability::Reliable, r.route.qos.durability == Durability::TransientLocal);
        for e in remotes.iter().filter(|e| e.topic == dds_topic && !own_prefixes.contains(&e.guid.prefix)) {
            let is_writer = e.kind == "writer";
            if (is_writer && !r.route.direction.to_shoal()) || (!is_writer && !r.route.direction.to_ros()) {
                continue;
            }
            let base = json!({"route": route_name(&r.route), "remote": format!("{:?}", e.guid), "kind": e.kind});
            let mut report = |problem: &'static str, extra: serde_json::Value| {
                if reported.insert((e.guid, problem)) {
                    let mut line = base.clone();
                    if let (Some(l), Some(x)) = (line.as_object_mut(), extra.as_object()) {
                        l.extend(x.clone());
                    }
                    match line["message"].as_str() {
                        Some(m) => tracing::warn!("{m}"),
                        None => tracing::info!("{line}"),
                    }
                    emit(&line);
                }
            };
            // DDS connects only equal type names; said with shoal's one rule over the two announced types.
            let (theirs, ours) = (
                TypeInfo::new(e.type_name.as_str(), "cdr", Vec::new()),
                TypeInfo::new(want_type.as_str(), "cdr", Vec::new()),
            );
            if TypeInfo::disagree([&theirs, &ours]) {
                report(
                    "type",
                    json!({"event": "type_mismatch", "message": format!(
                    "a ROS 2 {} on {} has type {}, the bridge's is {want_type}: DDS will not connect them",
                    e.kind, r.route.ros_topic, e.type_name)}),
                );
                continue;
            }
            report("seen", json!({"event": "remote_endpoint"}));
            // DDS matching: a reliable reader needs a reliable writer, a transient-local reader a transient-local writer.
            let (w_rel, r_rel, w_tl, r_tl) = if is_writer {
                (e.reliable, ours_reliable, e.transient_local, ours_tl)
            } else {
                (ours_reliable, e.reliable, ours_tl, e.transient_local)
            };
            let side =
                if is_writer { "remote writer, the bridge's reader" } else { "remote reader, the bridge's writer" };
            if r_rel && !w_rel {
                report(
                    "reliability",
                    json!({"event": "qos_mismatch", "offered": "best_effort", "requested": "reliable",
                    "message": format!("QoS mismatch on {} ({side}): the writer offers best_effort, the reader requests \
                    reliable, so nothing flows; make both reliable or both best_effort", r.route.ros_topic)}),
                );
            }
            if r_tl && !w_tl {
                report(
                    "durability",
                    json!({"event": "qos_mismatch", "offered": "volatile", "requested": "transient_local",
                    "message": format!("QoS mismatch on {} ({side}): the writer is volatile, the reader requests \
                    transient_local, so nothing flows", r.route.ros_topic)}),
                );
            }
        }
    }
}

/// What starting a route needs.
pub(crate) struct StartEnv<'a, 'ex> {
    pub(crate) shoal_node: &'a shoal::Node,
    node: &'a mut ros2_client::Node,
    ex: &'a smol::LocalExecutor<'ex>,
    /// Automatic routes: other bridges' endpoints, whose samples are dropped (see `crate::auto`).
    foreign: Option<crate::auto::Foreign>,
}

impl StartEnv<'_, '_> {
    fn start<C: Codec>(&mut self, route: &Route, codec: C) -> Result<Running, BridgeError> {
        let StartEnv { shoal_node, node, ex, foreign } = self;
        let codec = Arc::new(codec);
        let stats = Arc::new(RouteStats::new(route_name(route)));
        let qos = qos_profile(route);
        let name = Name::parse(&route.ros_topic).map_err(|e| ros_err(&format!("topic name {}", route.ros_topic), e))?;
        let (pkg, ty) = route.ros_type.ros_name();
        let topic = node
            .create_topic(&name, MessageTypeName::new(pkg, ty), &qos)
            .map_err(|e| ros_err(&format!("topic {}", route.ros_topic), e))?;
        let shoal_err = |source| BridgeError::ShoalTopic { topic: route.shoal_topic.clone(), source };
        let mut own = Vec::new();
        let mut tasks = Vec::new();

        // ROS 2 → shoal: created first, so that the shoal → ROS 2 side knows the shoal publisher to ignore.
        let mut own_shoal_pub = None;
        let mut ros_sub: Option<Subscription<C::Ros>> = None;
        let mut shoal_pub = None;
        // transient_local ⇄ shoal's history for late joiners: the shoal publisher keeps the route's depth, the
        // shoal subscriber asks for what shoal publishers kept (the DDS writer keeps it for late DDS readers).
        let transient_local = route.qos.durability == Durability::TransientLocal;
        if route.direction.to_shoal() {
            let keep = if transient_local { u32::try_from(route.qos.history_depth).unwrap_or(u32::MAX) } else { 0 };
            let p = shoal_node
                .publisher(&route.shoal_topic)
                .type_info(codec.shoal_type_info())
                .history(keep)
                .create()
                .map_err(shoal_err)?;
            own_shoal_pub = Some(p.id());
            shoal_pub = Some(p);
            let s =
                node.create_subscription::<C::Ros>(&topic, Some(qos.clone())).map_err(|e| ros_err("DDS reader", e))?;
            own.push(s.guid());
            ros_sub = Some(s);
        }

        let mut own_ros_gid = None;
        if route.direction.to_ros() {
            let ros_pub = node.create_publisher::<C::Ros>(&topic, Some(qos)).map_err(|e| ros_err("DDS writer", e))?;
            own.push(ros_pub.guid());
            own_ros_gid = Some(ros_pub.gid());
            // The doorbell thread converts and queues; the writer task (on this executor) writes to DDS.
            let (tx, rx) = smol::channel::unbounded::<Queued<C::Ros>>();
            let held = Arc::new(Held::default());
            let (cb_codec, cb_stats, cb_held) = (Arc::clone(&codec), Arc::clone(&stats), Arc::clone(&held));
            let cb_foreign = foreign.as_ref().map(crate::auto::Foreign::shoal_publishers);
            let sub = shoal_node
                .subscriber(&route.shoal_topic)
                .type_info(codec.shoal_sub_type_info())
                .callback(move |sample: &Sample| {
                    if Some(sample.publisher_id()) == own_shoal_pub
                        || cb_foreign.as_ref().is_some_and(|f| f.contains(sample.publisher_id()))
                    {
                        cb_stats.own_ignored.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    let bytes = sample.payload().len();
                    if !cb_held.admit(bytes) {
                        cb_stats.dropped(
                            Cause::QueueFull,
                            &format!("{QUEUE_MESSAGES} messages or {QUEUE_BYTES} bytes wait for the DDS writer"),
                        );
                        cb_held.refused.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    let item = Queued { msg: cb_codec.to_ros(sample), bytes };
                    if tx.try_send(item).is_err() {
                        // The writer task is gone (the bridge is stopping).
                        cb_held.release(bytes);
                    }
                })
                .history(transient_local)
                .create()
                .map_err(shoal_err)?;
            let stats = Arc::clone(&stats);
            // The task owns the subscriber and the DDS writer: all end when the task is dropped (the route stops) or
            // the executor is.
            tasks.push(ex.spawn(async move {
                while let Ok(Queued { msg, bytes }) = rx.recv().await {
                    let dropped = match msg {
                        Ok(msg) => match ros_pub.async_publish(msg).await {
                            Ok(()) => {
                                stats.to_ros.fetch_add(1, Ordering::Relaxed);
                                None
                            }
                            Err(e) => Some((Cause::RosWrite, format!("{e:?}"))),
                        },
                        Err(drop) => Some(drop),
                    };
                    held.release(bytes);
                    if let Some((cause, detail)) = dropped {
                        stats.dropped(cause, &detail);
                        // Received from shoal but not forwarded: the subscriber's drops, which registration
                        // announces and the monitors show.
                        sub.count_dropped(1);
                    }
                    let refused = held.refused.swap(0, Ordering::Relaxed);
                    if refused > 0 {
                        sub.count_dropped(refused);
                    }
                }
            }));
        }

        if let (Some(sub), Some(mut publ)) = (ros_sub, shoal_pub) {
            let (codec, stats, foreign) = (Arc::clone(&codec), Arc::clone(&stats), foreign.clone());
            tasks.push(ex.spawn(async move {
                let stream = sub.async_stream_seed(codec.seed());
                futures::pin_mut!(stream);
                while let Some(item) = stream.next().await {
                    match item {
                        Ok((msg, info)) => {
                            if Some(info.publisher_gid()) == own_ros_gid
                                || foreign.as_ref().is_some_and(|f| f.dds_writer(info.publisher_gid()))
                            {
                                stats.own_ignored.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            let sent = codec
                                .to_shoal(msg)
                                .and_then(|bytes| publ.send(&bytes).map_err(|e| (Cause::ShoalSend, e.to_string())));
                            match sent {
                                Ok(()) => {
                                    stats.to_shoal.fetch_add(1, Ordering::Relaxed);
                                }
                                Err((cause, detail)) => {
                                    // Not forwarded: the shoal publisher's drops, which registration announces.
                                    publ.count_dropped(1);
                                    stats.dropped(cause, &detail);
                                }
                            }
                        }
                        Err(e) => {
                            // Not forwarded to shoal: the shoal publisher's drops, which registration announces.
                            publ.count_dropped(1);
                            stats.dropped(Cause::CdrDecode, &format!("{e:?}"));
                        }
                    }
                }
            }));
        }
        Ok(Running { route: route.clone(), stats, own, _tasks: tasks })
    }
}

/// A shoal → ROS 2 message waiting for its route's DDS writer: the ROS message, or why the sample is not
/// forwarded; and the payload size it is charged.
struct Queued<M> {
    msg: Result<M, (Cause, String)>,
    bytes: usize,
}

/// What a route's shoal → ROS 2 queue holds, and the messages it refused since the writer task last counted them.
#[derive(Debug, Default)]
struct Held {
    messages: AtomicUsize,
    bytes: AtomicUsize,
    refused: std::sync::atomic::AtomicU64,
}

impl Held {
    /// Charges one message of `bytes`, if the queue has room for it ([`QUEUE_MESSAGES`], [`QUEUE_BYTES`]).
    fn admit(&self, bytes: usize) -> bool {
        // Only the doorbell thread admits, so the check and the charge cannot race another admit.
        let (m, b) = (self.messages.load(Ordering::Acquire), self.bytes.load(Ordering::Acquire));
        if m >= QUEUE_MESSAGES || (m > 0 && b.saturating_add(bytes) > QUEUE_BYTES) {
            return false;
        }
        self.messages.fetch_add(1, Ordering::AcqRel);
        self.bytes.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    fn release(&self, bytes: usize) {
        self.messages.fetch_sub(1, Ordering::AcqRel);
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}
