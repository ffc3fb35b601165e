//! Services across the bridge, both ways: a shoal (eCAL) service offered to ROS 2 clients, and a ROS 2 service
//! offered to shoal clients.
//!
//! On DDS a service is what rmw makes of it: requests on topic `rq<name>Request` of type
//! `pkg::srv::dds_::Type_Request_`, replies on `rr<name>Reply` of type `pkg::srv::dds_::Type_Response_`, reliable,
//! volatile, keep-last 10. The request id travels as rmw_cyclonedds puts it: a 16-byte header before the message in
//! the sample (8 bytes naming the client, then the sequence number as a little-endian i64), which the server
//! returns unchanged in its reply ([`RequestHeader`]). rmw_fastrtps (the `related_sample_identity` inline QoS) is
//! not spoken. The messages are mapped to protobuf as topics' generic mappings are, field by field
//! ([`Mapping`]); `std_srvs/srv/Trigger`, `SetBool` and `Empty` come with their protobuf forms (`proto/std_srvs.proto`),
//! any other `.srv` under `msg_path` needs its protobuf messages given.
//!
//! - `server = "shoal"`: the bridge reads requests from ROS 2 clients, calls the shoal service's method of one
//!   shoal server with the protobuf request (on a blocking-pool thread, so a slow server holds up no other call)
//!   and writes its response back as the reply. The server is the first announced that is not in a
//!   shoal-ros2-bridge process: a bridge's shoal server stands for a ROS 2 service, which the ROS 2 client reaches
//!   directly, and calling it would send the request round between two bridges. A call that times out, fails or finds no shoal server gets no reply:
//!   ROS 2 has no error reply, so the ROS client's own timeout ends it, as it would for a ROS server that never
//!   answers.
//! - `server = "ros"`: the bridge runs a shoal service server whose method's handler writes the request to DDS and
//!   waits up to `timeout_ms` for the reply with its sequence number; with no ROS 2 server matched it fails at
//!   once, and with no reply in time it fails saying so. A shoal client whose own timeout is shorter than
//!   `timeout_ms` sees its call time out, as with any slow shoal server. A reply that comes after its call gave up
//!   is dropped and counted.
//!
//! The DDS endpoints are made on the bridge's participant directly, not through ros2-client's node, so they are
//! not listed in the node's `ros_discovery_info` (`ros2 node info` of the bridge does not show the services);
//! DDS discovery, from which `ros2 service list` reads, has them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ros2_client::dds::rustdds;
use rustdds::{
    QosPolicies, QosPolicyBuilder, RTPSEntity, RepresentationIdentifier, TopicKind,
    no_key::{DataWriter, SimpleDataReader},
    policy,
};
use serde_json::{Value, json};
use shoal::TypeInfo;

use crate::config::default_ros_topic;
use crate::generic::{DynRos, Mapping, compile_proto};
use crate::msgdef::{MsgRegistry, SrvName, SrvPart};

/// Which side runs the server of a bridged service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerSide {
    /// A shoal (eCAL) service server, offered to ROS 2 clients.
    Shoal,
    /// A ROS 2 service server, offered to shoal clients.
    Ros,
}

impl ServerSide {
    /// The allowed values of `server`.
    pub const ALLOWED: &'static str = "shoal, ros";

    /// Parses `shoal` or `ros`.
    pub fn parse(s: &str) -> Option<ServerSide> {
        match s {
            "shoal" => Some(ServerSide::Shoal),
            "ros" => Some(ServerSide::Ros),
            _ => None,
        }
    }
}

/// The default wait for an answer, milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;
/// Allowed `timeout_ms`.
pub const TIMEOUT_RANGE: (i64, i64) = (1, 600_000);
/// Calls a service carries at once; a request beyond it is dropped and counted as `busy`.
pub const MAX_IN_FLIGHT: usize = 256;

/// One bridged service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRoute {
    /// The shoal (eCAL) service name.
    pub shoal_name: String,
    /// The method of the shoal service that stands for the ROS 2 service (a ROS service has one operation).
    pub method: String,
    /// The ROS 2 service name (absolute, e.g. `/arm/reset`; on DDS `rq/arm/resetRequest` and `rr/arm/resetReply`).
    pub ros_name: String,
    /// The ROS 2 service type.
    pub srv: SrvName,
    /// Which side runs the server.
    pub server: ServerSide,
    /// How long a call waits for its answer, milliseconds.
    pub timeout_ms: u64,
    /// The request: protobuf message ⇄ `pkg/Type_Request`.
    pub request: Arc<Mapping>,
    /// The response: protobuf message ⇄ `pkg/Type_Response`.
    pub response: Arc<Mapping>,
}

impl ServiceRoute {
    /// How the route is named in events and statistics: `shoal -> /ros (pkg/srv/Type)` for a shoal server,
    /// `shoal <- /ros (...)` for a ROS one.
    pub fn name(&self) -> String {
        let arrow = match self.server {
            ServerSide::Shoal => "->",
            ServerSide::Ros => "<-",
        };
        format!("{} {arrow} {} ({})", self.shoal_name, self.ros_name, self.srv)
    }

    /// The DDS request and reply topic names.
    pub fn dds_topics(&self) -> (String, String) {
        (format!("rq{}Request", self.ros_name), format!("rr{}Reply", self.ros_name))
    }
}

/// The protobuf forms shipped for the built-in services (`proto/std_srvs.proto`): request and response.
pub fn builtin_types(srv: &SrvName) -> Option<(TypeInfo, TypeInfo)> {
    use crate::pb::std_srvs as s;
    use shoal::Message as _;
    if srv.pkg != "std_srvs" {
        return None;
    }
    let pair = |a: &TypeInfo, b: &TypeInfo| Some((a.clone(), b.clone()));
    match srv.name.as_str() {
        "Trigger" => pair(s::TriggerRequest::type_info(), s::TriggerResponse::type_info()),
        "SetBool" => pair(s::SetBoolRequest::type_info(), s::SetBoolResponse::type_info()),
        "Empty" => pair(s::EmptyRequest::type_info(), s::EmptyResponse::type_info()),
        _ => None,
    }
}

/// Which key of a service an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `type`.
    Type,
    /// `shoal_request` / `shoal_response`.
    ShoalTypes,
    /// `shoal_descriptor`.
    Descriptor,
    /// `shoal_proto`.
    Proto,
}

/// A service's type keys.
#[derive(Debug, Default)]
pub struct TypeSpec<'a> {
    /// `type`, `pkg/srv/Type`.
    pub ty: &'a str,
    /// `shoal_request`.
    pub shoal_request: Option<&'a str>,
    /// `shoal_response`.
    pub shoal_response: Option<&'a str>,
    /// `shoal_descriptor`, resolved to a path.
    pub descriptor: Option<PathBuf>,
    /// `shoal_proto`, resolved to a path.
    pub proto: Option<PathBuf>,
}

/// The service type and its two checked mappings; or the key at fault and what is wrong.
pub type ServiceTypes = (SrvName, Arc<Mapping>, Arc<Mapping>);

/// Reads and checks a service's types: the `.srv` (from `reg`'s directories, then the shipped ones), and its
/// protobuf request and response (shipped for the built-in services, else given), mapped by field names.
pub fn service_types(spec: &TypeSpec<'_>, reg: &mut MsgRegistry) -> Result<ServiceTypes, (Key, String)> {
    let srv = SrvName::parse(spec.ty).map_err(|m| (Key::Type, format!("type = {m}")))?;
    reg.resolve_srv(&srv).map_err(|e| (Key::Type, e.to_string()))?;
    let given = spec.shoal_request.is_some() || spec.shoal_response.is_some();
    let (req, resp) = match (given, builtin_types(&srv)) {
        (false, Some(pair)) => {
            if spec.descriptor.is_some() || spec.proto.is_some() {
                return Err((
                    Key::ShoalTypes,
                    "shoal_request and shoal_response: needed with shoal_proto or shoal_descriptor, the messages \
                     they define"
                        .into(),
                ));
            }
            pair
        }
        (false, None) => {
            return Err((
                Key::Type,
                format!(
                    "type = {srv:?}: not built in (built in: std_srvs/srv/Trigger, std_srvs/srv/SetBool, \
                     std_srvs/srv/Empty); any other service needs shoal_request and shoal_response with \
                     shoal_proto or shoal_descriptor",
                    srv = srv.to_string()
                ),
            ));
        }
        (true, _) => {
            let (Some(rq), Some(rs)) = (spec.shoal_request, spec.shoal_response) else {
                return Err((Key::ShoalTypes, "shoal_request and shoal_response: give both".into()));
            };
            let bytes = match (&spec.descriptor, &spec.proto) {
                (Some(_), Some(_)) => {
                    return Err((Key::Proto, "shoal_proto: give shoal_proto or shoal_descriptor, not both".into()));
                }
                (Some(d), None) => std::fs::read(d)
                    .map_err(|e| (Key::Descriptor, format!("shoal_descriptor: {}: {e}", d.display())))?,
                (None, Some(p)) => compile_proto(p, &[]).map_err(|m| (Key::Proto, format!("shoal_proto: {m}")))?,
                (None, None) => {
                    return Err((
                        Key::ShoalTypes,
                        "shoal_request and shoal_response: need shoal_proto or shoal_descriptor, which defines them"
                            .into(),
                    ));
                }
            };
            (TypeInfo::new(rq, "proto", bytes.clone()), TypeInfo::new(rs, "proto", bytes))
        }
    };
    let mut map = |part: SrvPart, ti: TypeInfo| {
        let ros = srv.part(part);
        Mapping::new(reg, &ros, &ti.name, ti.descriptor.clone())
            .map(Arc::new)
            .map_err(|e| (Key::ShoalTypes, format!("protobuf {} does not map to {srv} ({part:?}): {e}", ti.name)))
    };
    let request = map(SrvPart::Request, req)?;
    let response = map(SrvPart::Response, resp)?;
    Ok((srv, request, response))
}

/// The `--service` flag: `SHOAL_SERVICE=TYPE,server=shoal|ros[,ros=/name][,method=M][,timeout_ms=N]
/// [,shoal_request=T,shoal_response=T,shoal_proto=FILE|shoal_descriptor=FILE]`.
pub fn parse_service_flag(spec: &str, msg_dirs: &[PathBuf]) -> Result<ServiceRoute, String> {
    let mut parts = spec.split(',');
    let head = parts.next().unwrap_or_default();
    let (shoal, ty) =
        head.split_once('=').ok_or("expected SHOAL_SERVICE=pkg/srv/Type,server=shoal|ros[,ros=/name][,...]")?;
    if shoal.is_empty() {
        return Err("the shoal service name is empty".into());
    }
    let (mut ros, mut method, mut server, mut timeout_ms) = (None, None, None, DEFAULT_TIMEOUT_MS);
    let mut spec_t = TypeSpec { ty, ..TypeSpec::default() };
    for kv in parts {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("{kv:?}: expected key=value"))?;
        match k {
            "ros" => {
                crate::config::check_ros_topic(v).map_err(|m| format!("ros = {m}"))?;
                ros = Some(v.to_string());
            }
            "method" if !v.is_empty() => method = Some(v.to_string()),
            "server" => {
                server =
                    Some(ServerSide::parse(v).ok_or_else(|| format!("server {v:?}: allowed {}", ServerSide::ALLOWED))?);
            }
            "timeout_ms" => {
                timeout_ms = v
                    .parse()
                    .ok()
                    .filter(|t| (TIMEOUT_RANGE.0..=TIMEOUT_RANGE.1).contains(&i64::try_from(*t).unwrap_or(-1)))
                    .ok_or_else(|| format!("timeout_ms {v:?}: allowed {}..={}", TIMEOUT_RANGE.0, TIMEOUT_RANGE.1))?;
            }
            "shoal_request" => spec_t.shoal_request = Some(v),
            "shoal_response" => spec_t.shoal_response = Some(v),
            "shoal_proto" => spec_t.proto = Some(PathBuf::from(v)),
            "shoal_descriptor" => spec_t.descriptor = Some(PathBuf::from(v)),
            _ => {
                return Err(format!(
                    "unknown key {k:?}; allowed ros, server, method, timeout_ms, shoal_request, shoal_response, \
                     shoal_proto, shoal_descriptor"
                ));
            }
        }
    }
    let server = server.ok_or("server: say where the server runs, server=shoal or server=ros")?;
    let mut reg = MsgRegistry::new(msg_dirs.iter().cloned());
    let (srv, request, response) = service_types(&spec_t, &mut reg).map_err(|(_, m)| m)?;
    Ok(ServiceRoute {
        shoal_name: shoal.into(),
        method: method.unwrap_or_else(|| DEFAULT_METHOD.into()),
        ros_name: ros.unwrap_or_else(|| default_ros_topic(shoal)),
        srv,
        server,
        timeout_ms,
        request,
        response,
    })
}

/// The shoal method a ROS 2 service stands for when `method` is not given.
pub const DEFAULT_METHOD: &str = "call";

/// The request id rmw_cyclonedds puts before a service message: the client's 8 bytes and the sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Names the client (rmw_cyclonedds: an id of its request writer); a reply carries it back.
    pub client: [u8; 8],
    /// The request's sequence number.
    pub seq: i64,
}

impl RequestHeader {
    /// Its size in the sample; a multiple of 8, so the message after it is aligned as if it began the sample.
    pub const LEN: usize = 16;

    /// Splits a sample's bytes (after the 4-byte encapsulation header) into header and message.
    pub fn split(bytes: &[u8]) -> Option<(RequestHeader, &[u8])> {
        let (head, body) = bytes.split_at_checked(Self::LEN)?;
        let client = head[..8].try_into().ok()?;
        let seq = i64::from_le_bytes(head[8..].try_into().ok()?);
        Some((RequestHeader { client, seq }, body))
    }

    /// The header followed by the CDR bytes of `msg` (little-endian).
    pub fn join(self, msg: &DynRos) -> Result<Vec<u8>, String> {
        let body = cdr_encoding::to_vec::<DynRos, byteorder::LittleEndian>(msg).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(Self::LEN + body.len());
        out.extend_from_slice(&self.client);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }
}

/// A service sample as DDS carries it: the bytes after the encapsulation header, and whether they are
/// little-endian CDR (the only form read; others are counted as bad).
#[derive(Debug, Clone)]
pub struct RawSample {
    /// CDR little-endian (`00 01`).
    pub little_endian: bool,
    /// Header and message.
    pub bytes: Vec<u8>,
}

/// Hands RustDDS's readers and writers a service sample's bytes as they are.
#[derive(Debug, Clone, Copy)]
pub struct RawAdapter;

/// Never returned: any bytes are a [`RawSample`].
#[derive(Debug, thiserror::Error)]
#[error("unreachable")]
pub struct NoError;

impl rustdds::no_key::DeserializerAdapter<RawSample> for RawAdapter {
    type Error = NoError;
    type Decoded = RawSample;
    fn supported_encodings() -> &'static [RepresentationIdentifier] {
        &[RepresentationIdentifier::CDR_LE, RepresentationIdentifier::CDR_BE]
    }
    fn transform_decoded(decoded: RawSample) -> RawSample {
        decoded
    }
}

impl rustdds::no_key::DefaultDecoder<RawSample> for RawAdapter {
    type Decoder = RawAdapter;
    const DECODER: RawAdapter = RawAdapter;
}

impl<'de> rustdds::no_key::Decode<'de, RawSample> for RawAdapter {
    type Error = NoError;
    fn decode_bytes(self, input: &'de [u8], encoding: RepresentationIdentifier) -> Result<RawSample, NoError> {
        Ok(RawSample { little_endian: encoding == RepresentationIdentifier::CDR_LE, bytes: input.to_vec() })
    }
}

impl rustdds::no_key::SerializerAdapter<RawSample> for RawAdapter {
    type Error = NoError;
    fn output_encoding() -> RepresentationIdentifier {
        RepresentationIdentifier::CDR_LE
    }
    fn to_bytes(value: &RawSample) -> Result<bytes::Bytes, NoError> {
        Ok(bytes::Bytes::copy_from_slice(&value.bytes))
    }
}

/// Why a call through the bridge got no answer, or a sample was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered: the reply (or the shoal response) was sent.
    Answered,
    /// The server side had no server.
    NoServer,
    /// No answer within `timeout_ms` (or the shoal client's own timeout).
    TimedOut,
    /// The server answered that the call failed (shoal servers only; ROS has no failed reply).
    Failed,
    /// A request or reply did not decode, or did not fit the other side's type.
    Bad,
    /// More than [`MAX_IN_FLIGHT`] calls were waiting.
    Busy,
    /// A reply for no waiting call (late, after its call gave up, or another client's).
    Late,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::Answered,
        Outcome::NoServer,
        Outcome::TimedOut,
        Outcome::Failed,
        Outcome::Bad,
        Outcome::Busy,
        Outcome::Late,
    ];

    /// The key in the statistics line.
    pub fn key(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::NoServer => "no_server",
            Outcome::TimedOut => "timed_out",
            Outcome::Failed => "failed",
            Outcome::Bad => "bad",
            Outcome::Busy => "busy",
            Outcome::Late => "late_reply",
        }
    }
}

/// The counters of one bridged service.
#[derive(Debug)]
pub struct ServiceStats {
    name: String,
    /// Calls the bridge received from the client side.
    pub calls: AtomicU64,
    outcomes: [AtomicU64; 7],
    logged: Mutex<Vec<Outcome>>,
}

impl ServiceStats {
    /// Counters at zero for the service named `name`.
    pub fn new(name: String) -> ServiceStats {
        ServiceStats { name, calls: AtomicU64::new(0), outcomes: Default::default(), logged: Mutex::new(Vec::new()) }
    }

    /// Counts an outcome; the first of each kind other than `answered` is logged with its detail.
    pub fn count(&self, o: Outcome, detail: &dyn std::fmt::Display) {
        let i = Outcome::ALL.iter().position(|x| *x == o).unwrap_or(0);
        self.outcomes[i].fetch_add(1, Ordering::Relaxed);
        if o != Outcome::Answered {
            let mut logged = self.logged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !logged.contains(&o) {
                logged.push(o);
                tracing::warn!(service = %self.name, outcome = o.key(), "{detail} (further ones only counted)");
            }
        }
    }

    /// How many calls ended so.
    pub fn outcome(&self, o: Outcome) -> u64 {
        let i = Outcome::ALL.iter().position(|x| *x == o).unwrap_or(0);
        self.outcomes[i].load(Ordering::Relaxed)
    }

    /// The statistics line's entry.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"service": self.name, "calls": self.calls.load(Ordering::Relaxed)});
        if let Some(m) = v.as_object_mut() {
            for o in Outcome::ALL {
                m.insert(o.key().into(), json!(self.outcome(o)));
            }
        }
        v
    }
}

/// Errors that stop a service from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A DDS entity could not be made.
    #[error("service {service}: {what}: {reason}")]
    Dds {
        /// The service.
        service: String,
        /// Which entity.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The shoal service server could not be made.
    #[error("service {service}: shoal server: {source}")]
    Shoal {
        /// The service.
        service: String,
        /// Why.
        source: shoal::service::BuildError,
    },
}

/// The rmw default QoS of services: reliable, volatile, keep-last 10.
fn service_qos() -> QosPolicies {
    QosPolicyBuilder::new()
        .reliability(policy::Reliability::Reliable { max_blocking_time: rustdds::Duration::from_millis(100) })
        .durability(policy::Durability::Volatile)
        .history(policy::History::KeepLast { depth: 10 })
        .build()
}

/// A running bridged service: what keeps it alive and its counters.
#[derive(Debug)]
pub struct RunningService {
    /// The service.
    pub route: ServiceRoute,
    /// Its counters.
    pub stats: Arc<ServiceStats>,
    /// The shoal server of a ROS-side service (dropping it unregisters it).
    _server: Option<shoal::ServiceServer>,
}

/// The DDS endpoints of one service: a reader of what the other side writes and a writer of what the bridge
/// answers or asks.
struct Endpoints {
    reader: SimpleDataReader<RawSample, RawAdapter>,
    writer: DataWriter<RawSample, RawAdapter>,
}

fn endpoints(dp: &rustdds::DomainParticipant, route: &ServiceRoute) -> Result<Endpoints, ServiceError> {
    let err = |what: &'static str| {
        let service = route.name();
        move |e: rustdds::dds::CreateError| ServiceError::Dds { service, what, reason: format!("{e:?}") }
    };
    let qos = service_qos();
    let (rq, rr) = route.dds_topics();
    let (rq_type, rr_type) = (route.srv.dds_name(SrvPart::Request), route.srv.dds_name(SrvPart::Response));
    let rq_topic = dp.create_topic(rq, rq_type, &qos, TopicKind::NoKey).map_err(err("request topic"))?;
    let rr_topic = dp.create_topic(rr, rr_type, &qos, TopicKind::NoKey).map_err(err("reply topic"))?;
    let publisher = dp.create_publisher(&qos).map_err(err("DDS publisher"))?;
    let subscriber = dp.create_subscriber(&qos).map_err(err("DDS subscriber"))?;
    // A shoal-side server reads requests and writes replies; a ROS-side one writes requests and reads replies.
    let (read, write) = match route.server {
        ServerSide::Shoal => (&rq_topic, &rr_topic),
        ServerSide::Ros => (&rr_topic, &rq_topic),
    };
    let reader = subscriber
        .create_simple_datareader_no_key::<RawSample, RawAdapter>(read, Some(qos.clone()))
        .map_err(err("DDS reader"))?;
    let writer =
        publisher.create_datawriter_no_key::<RawSample, RawAdapter>(write, Some(qos)).map_err(err("DDS writer"))?;
    Ok(Endpoints { reader, writer })
}

/// Starts a bridged service: its DDS endpoints, its shoal client or server, and its tasks on `ex`.
pub fn start(
    route: &ServiceRoute,
    dp: &rustdds::DomainParticipant,
    shoal_node: &shoal::Node,
    ex: &smol::LocalExecutor<'_>,
) -> Result<RunningService, ServiceError> {
    let stats = Arc::new(ServiceStats::new(route.name()));
    let ep = endpoints(dp, route)?;
    let server = match route.server {
        ServerSide::Shoal => {
            start_shoal_side(route, ep, shoal_node, ex, Arc::clone(&stats));
            None
        }
        ServerSide::Ros => Some(start_ros_side(route, dp, ep, shoal_node, ex, Arc::clone(&stats))?),
    };
    Ok(RunningService { route: route.clone(), stats, _server: server })
}

/// A shoal server offered to ROS 2 clients: requests from DDS become shoal calls, their responses replies.
fn start_shoal_side(
    route: &ServiceRoute,
    ep: Endpoints,
    shoal_node: &shoal::Node,
    ex: &smol::LocalExecutor<'_>,
    stats: Arc<ServiceStats>,
) {
    let client = Arc::new(
        shoal_node
            .service_client(&route.shoal_name)
            .method(&route.method, route.request.type_info().clone(), route.response.type_info().clone())
            .build(),
    );
    let writer = Arc::new(ep.writer);
    let reader = ep.reader;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let route = route.clone();
    let timeout = Duration::from_millis(route.timeout_ms);
    ex.spawn(async move {
        let stream = reader.as_async_stream();
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let sample = match item {
                Ok(s) => s.into_value(),
                Err(e) => {
                    stats.count(Outcome::Bad, &format!("a request did not read: {e:?}"));
                    continue;
                }
            };
            stats.calls.fetch_add(1, Ordering::Relaxed);
            let (header, proto) = match decode_request(&route, &sample) {
                Ok(r) => r,
                Err(m) => {
                    stats.count(Outcome::Bad, &m);
                    continue;
                }
            };
            if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::AcqRel);
                stats.count(Outcome::Busy, &format!("{MAX_IN_FLIGHT} calls wait already; request dropped"));
                continue;
            }
            let (client, route, stats, writer, in_flight) =
                (Arc::clone(&client), route.clone(), Arc::clone(&stats), Arc::clone(&writer), Arc::clone(&in_flight));
            // The call blocks until the shoal server answers or the timeout: on the blocking pool, so a slow server
            // holds up no other call, and the reply is written from there.
            smol::unblock(move || {
                let result = call_one(&client, &route, &proto, timeout);
                in_flight.fetch_sub(1, Ordering::AcqRel);
                match reply_of(&route, header, result) {
                    Ok(bytes) => match writer.write(RawSample { little_endian: true, bytes }, None) {
                        Ok(()) => stats.count(Outcome::Answered, &""),
                        Err(e) => stats.count(Outcome::Failed, &format!("the DDS reply write failed: {e:?}")),
                    },
                    Err((o, m)) => stats.count(o, &m),
                }
            })
            .detach();
        }
    })
    .detach();
}

/// Whether a shoal server belongs to a shoal-ros2-bridge process (this one or another): such a server stands for a
/// ROS 2 service, and calling it for a ROS 2 client would send the call round between the bridges.
fn is_bridge(s: &shoal::service::ServerId) -> bool {
    let exe = std::path::Path::new(&s.process_name).file_name().and_then(|n| n.to_str());
    exe == Some(crate::auto::BRIDGE_EXECUTABLE)
}

/// Calls one shoal server of the route's service: the first announced that is not a bridge's ([`is_bridge`]).
fn call_one(
    client: &shoal::ServiceClient,
    route: &ServiceRoute,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<shoal::service::ServiceResponse>, shoal::service::CallError> {
    let Some(server) = client.servers().into_iter().find(|s| !is_bridge(s)) else {
        return Err(shoal::service::CallError::NoServer { service: route.shoal_name.clone() });
    };
    client.call_server(&server, &route.method, request, timeout).map(|r| vec![r])
}

/// A ROS 2 request sample's header and its message as protobuf bytes.
fn decode_request(route: &ServiceRoute, sample: &RawSample) -> Result<(RequestHeader, Vec<u8>), String> {
    if !sample.little_endian {
        return Err("a big-endian CDR request (only little-endian is read); dropped".into());
    }
    let (header, body) = RequestHeader::split(&sample.bytes)
        .ok_or_else(|| format!("a request of {} bytes is shorter than its 16-byte header", sample.bytes.len()))?;
    let msg = route.request.decode_cdr_body(body).map_err(|e| format!("a request did not decode: {e}"))?;
    Ok((header, msg.encode_proto()))
}

/// The DDS reply to a shoal call's result, or why there is none.
fn reply_of(
    route: &ServiceRoute,
    header: RequestHeader,
    result: Result<Vec<shoal::service::ServiceResponse>, shoal::service::CallError>,
) -> Result<Vec<u8>, (Outcome, String)> {
    use shoal::service::{CallError, CallStatus};
    let responses = match result {
        Ok(r) => r,
        Err(CallError::NoServer { .. }) => {
            return Err((Outcome::NoServer, format!("no shoal server of {}: no reply sent", route.shoal_name)));
        }
        Err(e) => return Err((Outcome::Failed, format!("the shoal call failed: {e}; no reply sent"))),
    };
    let Some(ok) = responses.iter().find(|r| r.is_ok()) else {
        let (o, m) = match responses.first().map(|r| &r.status) {
            Some(CallStatus::TimedOut) => (Outcome::TimedOut, format!("no answer within {} ms", route.timeout_ms)),
            Some(CallStatus::Failed(m)) => (Outcome::Failed, format!("the shoal server failed the call: {m}")),
            Some(CallStatus::Broken(m)) => (Outcome::Failed, format!("the call broke: {m}")),
            _ => (Outcome::NoServer, "no shoal server answered".to_string()),
        };
        return Err((o, format!("{}: {m}; no reply sent (the ROS 2 client's timeout ends the call)", route.name())));
    };
    let msg = route
        .response
        .from_proto(&ok.payload)
        .map_err(|e| (Outcome::Bad, format!("the shoal response does not fit {}: {e}", route.srv)))?;
    header.join(&msg).map_err(|e| (Outcome::Bad, format!("the reply did not encode: {e}")))
}

/// Whether DDS discovery knows a reader of the request topic other than the bridge's own: a ROS 2 server.
fn ros_server_seen(dp: &rustdds::DomainParticipant, rq_topic: &str, own: rustdds::GUID) -> bool {
    dp.discovered_readers().iter().any(|r| {
        let t = &r.subscription_topic_data;
        t.topic_name() == rq_topic && t.key().prefix != own.prefix
    })
}

/// Calls waiting for their ROS 2 reply, by sequence number.
type Pending = Arc<Mutex<HashMap<i64, std::sync::mpsc::SyncSender<Vec<u8>>>>>;

/// A ROS 2 server offered to shoal clients: the shoal server's handler writes the request to DDS and waits for
/// the reply; a task hands each reply to its call.
fn start_ros_side(
    route: &ServiceRoute,
    dp: &rustdds::DomainParticipant,
    ep: Endpoints,
    shoal_node: &shoal::Node,
    ex: &smol::LocalExecutor<'_>,
    stats: Arc<ServiceStats>,
) -> Result<shoal::ServiceServer, ServiceError> {
    let writer = Arc::new(ep.writer);
    let mut client = [0u8; 8];
    client.copy_from_slice(&writer.guid().to_bytes()[8..16]);
    let pending: Pending = Arc::default();
    let (h_dp, rq_topic) = (dp.clone(), route.dds_topics().0);
    let next_seq = Arc::new(AtomicI64::new(1));
    let timeout = Duration::from_millis(route.timeout_ms);

    let (h_route, h_stats, h_pending) = (route.clone(), Arc::clone(&stats), Arc::clone(&pending));
    let handler = move |payload: &[u8]| -> shoal::service::HandlerResult {
        h_stats.calls.fetch_add(1, Ordering::Relaxed);
        let fail = |o: Outcome, m: String| -> shoal::service::HandlerResult {
            h_stats.count(o, &m);
            Err(m.into())
        };
        let msg = match h_route.request.from_proto(payload) {
            Ok(m) => m,
            Err(e) => return fail(Outcome::Bad, format!("the request does not fit {}: {e}", h_route.srv)),
        };
        if !ros_server_seen(&h_dp, &rq_topic, writer.guid()) {
            return fail(Outcome::NoServer, format!("no ROS 2 server of {} is matched", h_route.ros_name));
        }
        let seq = next_seq.fetch_add(1, Ordering::Relaxed);
        let bytes = match (RequestHeader { client, seq }).join(&msg) {
            Ok(b) => b,
            Err(e) => return fail(Outcome::Bad, format!("the request did not encode: {e}")),
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        {
            let mut p = h_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if p.len() >= MAX_IN_FLIGHT {
                drop(p);
                return fail(Outcome::Busy, format!("{MAX_IN_FLIGHT} calls wait already"));
            }
            p.insert(seq, tx);
        }
        let started = Instant::now();
        if let Err(e) = writer.write(RawSample { little_endian: true, bytes }, None) {
            h_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&seq);
            return fail(Outcome::Failed, format!("the DDS request write failed: {e:?}"));
        }
        let reply = rx.recv_timeout(timeout.saturating_sub(started.elapsed()));
        h_pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&seq);
        let Ok(body) = reply else {
            return fail(
                Outcome::TimedOut,
                format!("the ROS 2 server of {} did not answer within {} ms", h_route.ros_name, h_route.timeout_ms),
            );
        };
        match h_route.response.decode_cdr_body(&body) {
            Ok(m) => {
                h_stats.count(Outcome::Answered, &"");
                Ok(m.encode_proto())
            }
            Err(e) => fail(Outcome::Bad, format!("the ROS 2 reply did not decode as {}: {e}", h_route.srv)),
        }
    };
    let server = shoal_node
        .service_server(&route.shoal_name)
        .method(&route.method, route.request.type_info().clone(), route.response.type_info().clone(), handler)
        .build()
        .map_err(|source| ServiceError::Shoal { service: route.name(), source })?;

    let reader = ep.reader;
    ex.spawn(async move {
        let stream = reader.as_async_stream();
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            let Ok(sample) = item.map(|s| s.into_value()) else {
                stats.count(Outcome::Bad, &"a reply did not read");
                continue;
            };
            let Some((header, body)) = RequestHeader::split(&sample.bytes).filter(|_| sample.little_endian) else {
                stats.count(Outcome::Bad, &"a reply without its header, or big-endian");
                continue;
            };
            if header.client != client {
                // Another client's reply (every client of the service reads every reply).
                continue;
            }
            let waiting = pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&header.seq);
            match waiting {
                Some(tx) => {
                    let _ = tx.try_send(body.to_vec());
                }
                None => {
                    stats.count(Outcome::Late, &format!("a reply to request {} that no call waits for", header.seq))
                }
            }
        }
    })
    .detach();
    Ok(server)
}

/// The ROS 2 actions DDS discovery shows (`<prefix><name>/_action/<part>` topics of remote endpoints): the
/// action's name and, when a goal topic shows it, its type (`pkg/action/Type`).
pub fn discovered_actions(topics: &[(String, String)]) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for (topic, type_name) in topics {
        let Some(rest) = ["rt/", "rq/", "rr/"].iter().find_map(|p| topic.strip_prefix(p)) else { continue };
        let Some((name, _part)) = rest.split_once("/_action/") else { continue };
        // `pkg::action::dds_::Type_SendGoal_Request_` and the like name the action's type.
        let ty = type_name.split_once("::action::dds_::").and_then(|(pkg, t)| {
            let t = t.split('_').next().filter(|t| !t.is_empty())?;
            Some(format!("{pkg}/action/{t}"))
        });
        let name = format!("/{name}");
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => {
                if e.1.is_none() {
                    e.1 = ty;
                }
            }
            None => out.push((name, ty)),
        }
    }
    out
}

/// The line that lists a discovered action as not bridged.
pub fn action_not_bridged(name: &str, ty: Option<&str>) -> Value {
    let ty_text = ty.map(|t| format!(" ({t})")).unwrap_or_default();
    json!({
        "event": "not_bridged", "kind": "action", "name": name, "type": ty,
        "message": format!(
            "ROS 2 action {name}{ty_text} is not bridged: an action is services and topics under \
             {name}/_action/; its feedback and status topics can be bridged as topics"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_keeps_the_message_aligned() {
        let (srv, req, _) = service_types(
            &TypeSpec { ty: "std_srvs/srv/SetBool", ..TypeSpec::default() },
            &mut MsgRegistry::new(Vec::new()),
        )
        .unwrap();
        assert_eq!(srv.dds_name(SrvPart::Request), "std_srvs::srv::dds_::SetBool_Request_");
        let msg = req.from_proto(&[8, 1]).unwrap();
        let h = RequestHeader { client: [1, 2, 3, 4, 5, 6, 7, 8], seq: 0x0102_0304_0506 };
        let bytes = h.join(&msg).unwrap();
        assert_eq!(bytes, [1, 2, 3, 4, 5, 6, 7, 8, 6, 5, 4, 3, 2, 1, 0, 0, 1]);
        let (h2, body) = RequestHeader::split(&bytes).unwrap();
        assert_eq!(h2, h);
        assert_eq!(req.decode_cdr_body(body).unwrap().encode_proto(), vec![8, 1]);
        assert!(RequestHeader::split(&bytes[..15]).is_none());
    }

    #[test]
    fn bad_requests_are_errors() {
        let route = crate::config::Config::parse_service_flag("s=std_srvs/srv/SetBool,server=shoal", &[]).unwrap();
        let ok = RawSample { little_endian: true, bytes: vec![0; 17] };
        assert_eq!(decode_request(&route, &ok).unwrap().1, Vec::<u8>::new(), "data = false: an empty protobuf");
        let short = RawSample { little_endian: true, bytes: vec![0; 15] };
        assert!(decode_request(&route, &short).unwrap_err().contains("shorter than its 16-byte header"));
        let no_body = RawSample { little_endian: true, bytes: vec![0; 16] };
        assert!(decode_request(&route, &no_body).unwrap_err().contains("did not decode"));
        let be = RawSample { little_endian: false, bytes: vec![0; 17] };
        assert!(decode_request(&route, &be).unwrap_err().contains("big-endian"));
        // Every prefix and a few corruptions of a generic request: errors or messages, never a panic.
        let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/demo");
        let flag = format!(
            "s=demo_msgs/srv/Scale,server=shoal,shoal_request=demo.Scale_Request,\
             shoal_response=demo.Scale_Response,shoal_proto={}",
            demo.join("demo.proto").display()
        );
        let route = crate::config::Config::parse_service_flag(&flag, &[demo.join("msg")]).unwrap();
        let (_, _, proto) = crate::testdata::service_request("scale", 7).unwrap();
        let full = (RequestHeader { client: [9; 8], seq: 7 }).join(&route.request.from_proto(&proto).unwrap()).unwrap();
        let (_, back) = decode_request(&route, &RawSample { little_endian: true, bytes: full.clone() }).unwrap();
        assert_eq!(
            route.request.from_proto(&back).unwrap().encode_proto(),
            route.request.from_proto(&proto).unwrap().encode_proto()
        );
        for n in 0..full.len() {
            let _ = decode_request(&route, &RawSample { little_endian: true, bytes: full[..n].to_vec() });
            let mut bad = full.clone();
            bad[n] ^= 0xff;
            let _ = decode_request(&route, &RawSample { little_endian: true, bytes: bad });
        }
    }

    #[test]
    fn actions_are_found_in_discovery() {
        let t = |a: &str, b: &str| (a.to_string(), b.to_string());
        let found = discovered_actions(&[
            t("rt/chatter", "std_msgs::msg::dds_::String_"),
            t("rt/arm/move/_action/status", "action_msgs::msg::dds_::GoalStatusArray_"),
            t("rq/arm/move/_action/send_goalRequest", "control_msgs::action::dds_::Move_SendGoal_Request_"),
            t(
                "rr/fibonacci/_action/get_resultReply",
                "example_interfaces::action::dds_::Fibonacci_GetResult_Response_",
            ),
            t("rq/reset/Request", "std_srvs::srv::dds_::Trigger_Request_"),
        ]);
        assert_eq!(
            found,
            [
                ("/arm/move".to_string(), Some("control_msgs/action/Move".to_string())),
                ("/fibonacci".to_string(), Some("example_interfaces/action/Fibonacci".to_string())),
            ]
        );
        let line = action_not_bridged("/arm/move", Some("control_msgs/action/Move"));
        assert_eq!(line["event"], "not_bridged");
        assert!(line["message"].as_str().unwrap().contains("/arm/move (control_msgs/action/Move) is not bridged"));
    }
}
