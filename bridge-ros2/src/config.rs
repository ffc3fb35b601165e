//! The bridge's configuration: a TOML file (every key checked; an error names `file:line:column`, the key and the
//! allowed values) and command-line overrides. `etc/bridge.toml` in this crate documents every key.
//!
//! QoS: the ROS 2 (rclcpp) defaults are written out here — reliable, volatile, keep-last 10 — because
//! ros2-client's own `QosProfile::default()` is best-effort with depth 1.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use shoal_bridge_common::read_file;
pub use shoal_bridge_common::{ConfigError, FileCtx};

use shoal::TypeInfo;

use crate::generic::{Mapping, compile_proto};
use crate::msgdef::{MsgName, MsgRegistry};
use crate::services::{ServerSide, ServiceRoute};
use crate::types::{RosType, RouteType};

/// Which way a topic is bridged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// shoal (and eCAL) publishers → ROS 2 subscribers.
    ShoalToRos,
    /// ROS 2 publishers → shoal (and eCAL) subscribers.
    RosToShoal,
    /// Both ways; the bridge ignores its own publications on either side, so nothing echoes.
    Both,
}

impl Direction {
    /// Whether shoal samples go to ROS 2.
    pub fn to_ros(self) -> bool {
        matches!(self, Direction::ShoalToRos | Direction::Both)
    }
    /// Whether ROS 2 samples go to shoal.
    pub fn to_shoal(self) -> bool {
        matches!(self, Direction::RosToShoal | Direction::Both)
    }
    pub(crate) const ALLOWED: &'static str = "shoal_to_ros, ros_to_shoal, both";
    pub(crate) fn parse(s: &str) -> Option<Direction> {
        match s {
            "shoal_to_ros" => Some(Direction::ShoalToRos),
            "ros_to_shoal" => Some(Direction::RosToShoal),
            "both" => Some(Direction::Both),
            _ => None,
        }
    }
}

/// DDS reliability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reliability {
    /// Lost samples are repaired (the ROS default).
    Reliable,
    /// Lost samples stay lost (ROS's sensor-data profile).
    BestEffort,
}

/// DDS durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Only samples published while a subscriber exists (the ROS default).
    Volatile,
    /// Late joiners get the last `history_depth` samples (latched topics, `/tf_static`); on the shoal side the
    /// route's publisher keeps them (`PublisherBuilder::history`) and its subscriber asks for what shoal publishers
    /// kept (`SubscriberBuilder::history`).
    TransientLocal,
}

/// The QoS of one bridged topic, used for the bridge's DDS reader and writer alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qos {
    /// Reliability (default reliable).
    pub reliability: Reliability,
    /// Durability (default volatile).
    pub durability: Durability,
    /// Keep-last depth (default 10).
    pub history_depth: usize,
}

impl Default for Qos {
    /// The ROS 2 default profile: reliable, volatile, keep-last 10.
    fn default() -> Self {
        Qos { reliability: Reliability::Reliable, durability: Durability::Volatile, history_depth: 10 }
    }
}

/// One bridged topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The shoal (eCAL) topic name.
    pub shoal_topic: String,
    /// The ROS 2 topic name (absolute, e.g. `/camera/image`; on DDS `rt/camera/image`).
    pub ros_topic: String,
    /// The ROS 2 type: built in, or a generic mapping.
    pub ros_type: RouteType,
    /// The direction.
    pub direction: Direction,
    /// The DDS QoS.
    pub qos: Qos,
    /// Raw routes only: the shoal type of the payloads. The bridge's shoal publisher announces it (default
    /// `std_msgs/msg/UInt8MultiArray`) and its shoal subscriber expects it (default: any type); samples labelled
    /// with another type are dropped as a type mismatch.
    pub shoal_type: Option<String>,
    /// Raw routes only: the serialized `FileDescriptorSet` defining `shoal_type` as a protobuf message, checked
    /// when the configuration is read. With it the shoal side announces `shoal_type` with encoding `proto` and
    /// this descriptor (monitors decode the payloads), without it encoding `raw`.
    pub shoal_descriptor: Option<Vec<u8>>,
}

impl Route {
    /// What the route's shoal publisher announces (ROS 2 → shoal). Built-in types announce their shipped
    /// protobuf message instead (see `bridge::Codec`).
    pub fn raw_type_info(&self) -> TypeInfo {
        let name = self.shoal_type.clone().unwrap_or_else(|| RosType::Raw.to_string());
        match &self.shoal_descriptor {
            Some(d) => TypeInfo::new(name, "proto", d.clone()),
            None => TypeInfo::raw(name),
        }
    }
}

/// Reads a serialized `FileDescriptorSet` (`protoc --include_imports --descriptor_set_out=FILE`) and checks that
/// it defines protobuf message `type_name`.
pub fn load_descriptor(path: &Path, type_name: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    shoal::dynamic::DynamicDecoder::new(&TypeInfo::new(type_name, "proto", bytes.clone()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes)
}

/// Which key of a topic an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Type,
    ShoalType,
    Descriptor,
    Proto,
}

/// A topic's type keys: `type`, `shoal_type`, and the protobuf definition (`shoal_descriptor` or `shoal_proto`,
/// already resolved to paths).
struct TypeSpec<'a> {
    ty: &'a str,
    /// Whether the route publishes on shoal (and so must announce a protobuf definition of its own).
    to_shoal: bool,
    shoal_type: Option<&'a str>,
    descriptor: Option<PathBuf>,
    proto: Option<PathBuf>,
}

/// A route's type and, for raw routes, its descriptor; or the key at fault and what is wrong.
type RouteTypeResult = Result<(RouteType, Option<Vec<u8>>), (Key, String)>;

/// The route's type and, for raw routes, its descriptor. Types that are not built in, or built-in ones with a
/// `shoal_type`, are generic mappings, checked here.
fn route_type(spec: TypeSpec<'_>, reg: &mut MsgRegistry) -> RouteTypeResult {
    let descriptor = |ty: &str| -> Result<Option<Vec<u8>>, (Key, String)> {
        match (&spec.descriptor, &spec.proto) {
            (Some(_), Some(_)) => {
                Err((Key::Proto, "shoal_proto: give shoal_proto or shoal_descriptor, not both".into()))
            }
            (Some(d), None) => {
                load_descriptor(d, ty).map(Some).map_err(|m| (Key::Descriptor, format!("shoal_descriptor: {m}")))
            }
            (None, Some(p)) => {
                let bytes = compile_proto(p, &[]).map_err(|m| (Key::Proto, format!("shoal_proto: {m}")))?;
                shoal::dynamic::DynamicDecoder::new(&TypeInfo::new(ty, "proto", bytes.clone()))
                    .map_err(|e| (Key::Proto, format!("shoal_proto: {}: {e}", p.display())))?;
                Ok(Some(bytes))
            }
            (None, None) => Ok(None),
        }
    };
    let needs_type = || {
        let key = if spec.proto.is_some() { Key::Proto } else { Key::Descriptor };
        let name = if key == Key::Proto { "shoal_proto" } else { "shoal_descriptor" };
        (key, format!("{name}: needs shoal_type, the message it defines"))
    };
    let builtin = RosType::parse(spec.ty);
    match (builtin, spec.shoal_type) {
        (Some(RosType::Raw), st) => match st {
            Some(st) => Ok((RouteType::Builtin(RosType::Raw), descriptor(st)?)),
            None if spec.descriptor.is_some() || spec.proto.is_some() => Err(needs_type()),
            None => Ok((RouteType::Builtin(RosType::Raw), None)),
        },
        (Some(b), None) => {
            if spec.descriptor.is_some() || spec.proto.is_some() {
                return Err(needs_type());
            }
            Ok((RouteType::Builtin(b), None))
        }
        (None, None) => Err((
            Key::Type,
            format!(
                "type = {:?}: not built in (allowed: {}); any other ROS 2 type is a generic mapping and needs \
                 shoal_type with shoal_proto or shoal_descriptor",
                spec.ty,
                RosType::allowed()
            ),
        )),
        (_, Some(st)) => {
            let ros = MsgName::parse(spec.ty).map_err(|m| (Key::Type, format!("type = {m}")))?;
            let Some(bytes) = descriptor(st)? else {
                if spec.to_shoal {
                    return Err((
                        Key::ShoalType,
                        format!(
                            "shoal_type: a generic mapping of {st} to {ros} that publishes on shoal (direction \
                             ros_to_shoal or both) needs shoal_proto or shoal_descriptor; only a shoal_to_ros route \
                             can take the definition its shoal publisher announces"
                        ),
                    ));
                }
                reg.resolve(&ros).map_err(|e| (Key::Type, e.to_string()))?;
                return Ok((RouteType::Announced { ros, shoal_type: st.to_string() }, None));
            };
            let m = Mapping::new(reg, &ros, st, bytes)
                .map_err(|e| (Key::ShoalType, format!("protobuf {st} does not map to {ros}: {e}")))?;
            Ok((RouteType::Generic(Arc::new(m)), None))
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `ROS_DOMAIN_ID` (0–232).
    pub domain_id: u16,
    /// The ROS 2 node name (shown by `ros2 node list`).
    pub node_name: String,
    /// The ROS 2 node namespace.
    pub namespace: String,
    /// The IP addresses of the interfaces DDS may use (RustDDS `with_only_networks`); empty: all.
    pub interfaces: Vec<IpAddr>,
    /// Directories of `.msg` files laid out as ROS does (`<dir>/<pkg>/msg/<Type>.msg`), searched in order before
    /// the built-in definitions, for generic mappings.
    pub msg_path: Vec<PathBuf>,
    /// SO_RCVBUF requested for every DDS socket, bytes.
    pub socket_receive_buffer: usize,
    /// SO_SNDBUF requested for every DDS socket, bytes.
    pub socket_send_buffer: usize,
    /// The shoal (eCAL) unit name of the bridge.
    pub unit_name: String,
    /// How often a statistics line is printed and published, milliseconds (0: never).
    pub stats_interval_ms: u64,
    /// How long the bridge waits at start for the shoal publishers whose announced protobuf definitions routes
    /// take ([`RouteType::Announced`]), milliseconds.
    pub announced_type_wait_ms: u64,
    /// The supervisor's limits on the worker process that does the DDS work (`[supervisor]`).
    pub supervisor: Supervision,
    /// The bridged topics.
    pub routes: Vec<Route>,
    /// The bridged services (`[[service]]`, `--service`).
    pub services: Vec<ServiceRoute>,
    /// Automatic routes (`[auto]`, see [`crate::auto`]); `None`: only the listed routes.
    pub auto: Option<crate::auto::AutoConfig>,
}

/// What the supervisor (`crate::supervisor`) imposes on the worker process that runs the bridge, and how it
/// restarts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    /// RLIMIT_DATA of the worker, bytes: its heap and private mappings together. An allocation beyond it fails,
    /// which aborts the worker; the supervisor restarts it.
    pub memory_limit: u64,
    /// Wait before the first restart after the worker died, milliseconds; doubled for each further death within
    /// [`Supervision::STABLE`] of its start, up to 32 times this.
    pub restart_backoff_ms: u64,
}

impl Supervision {
    /// Allowed `memory_limit`: 64 MiB to 1 TiB.
    pub const MEMORY_LIMIT_RANGE: (i64, i64) = (64 << 20, 1 << 40);
    /// Allowed `restart_backoff_ms`.
    pub const BACKOFF_RANGE: (i64, i64) = (10, 60_000);
    /// A worker that ran this long before dying is restarted after the first backoff again.
    pub const STABLE: std::time::Duration = std::time::Duration::from_secs(10);
}

impl Default for Supervision {
    fn default() -> Self {
        Supervision { memory_limit: 1 << 30, restart_backoff_ms: 500 }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            domain_id: 0,
            node_name: "shoal_ros2_bridge".into(),
            namespace: "/".into(),
            interfaces: Vec::new(),
            msg_path: Vec::new(),
            socket_receive_buffer: 8 << 20,
            socket_send_buffer: 8 << 20,
            unit_name: "shoal_ros2_bridge".into(),
            stats_interval_ms: 1000,
            announced_type_wait_ms: 10_000,
            supervisor: Supervision::default(),
            routes: Vec::new(),
            services: Vec::new(),
            auto: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    ros: Option<FileRos>,
    shoal: Option<FileShoal>,
    supervisor: Option<FileSupervisor>,
    auto: Option<crate::auto::FileAuto>,
    #[serde(default)]
    topic: Vec<FileTopic>,
    #[serde(default)]
    service: Vec<FileService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRos {
    domain_id: Option<Spanned<i64>>,
    node_name: Option<Spanned<String>>,
    namespace: Option<Spanned<String>>,
    interfaces: Option<Vec<Spanned<String>>>,
    msg_path: Option<Vec<Spanned<String>>>,
    socket_receive_buffer: Option<Spanned<i64>>,
    socket_send_buffer: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShoal {
    unit_name: Option<Spanned<String>>,
    stats_interval_ms: Option<Spanned<i64>>,
    announced_type_wait_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSupervisor {
    memory_limit: Option<Spanned<i64>>,
    restart_backoff_ms: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTopic {
    shoal: Spanned<String>,
    ros: Option<Spanned<String>>,
    #[serde(rename = "type")]
    ros_type: Spanned<String>,
    direction: Option<Spanned<String>>,
    reliability: Option<Reliability>,
    durability: Option<Durability>,
    history_depth: Option<Spanned<i64>>,
    shoal_type: Option<Spanned<String>>,
    shoal_descriptor: Option<Spanned<String>>,
    shoal_proto: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileService {
    shoal: Spanned<String>,
    ros: Option<Spanned<String>>,
    method: Option<Spanned<String>>,
    #[serde(rename = "type")]
    srv_type: Spanned<String>,
    server: Spanned<String>,
    timeout_ms: Option<Spanned<i64>>,
    shoal_request: Option<Spanned<String>>,
    shoal_response: Option<Spanned<String>>,
    shoal_descriptor: Option<Spanned<String>>,
    shoal_proto: Option<Spanned<String>>,
}

/// Checks a ROS 2 topic name: absolute, `/`-separated tokens of `[A-Za-z0-9_]`, not starting with a digit, no
/// `//` or `__`, no trailing `/`.
pub fn check_ros_topic(name: &str) -> Result<(), String> {
    let rule = "a ROS 2 topic name is absolute, like /camera/image: tokens of letters, digits and _, \
                separated by single /, no token starting with a digit, no __";
    let Some(rest) = name.strip_prefix('/') else { return Err(format!("{name:?}: {rule}")) };
    let ok = !rest.is_empty()
        && rest.split('/').all(|t| {
            !t.is_empty()
                && !t.starts_with(|c: char| c.is_ascii_digit())
                && !t.contains("__")
                && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if ok { Ok(()) } else { Err(format!("{name:?}: {rule}")) }
}

fn check_node_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok { Ok(()) } else { Err(format!("{name:?}: letters, digits and _, not starting with a digit")) }
}

/// The ROS topic a shoal topic maps to by default: `/` + the shoal name, with characters ROS does not allow
/// replaced by `_`.
pub fn default_ros_topic(shoal_topic: &str) -> String {
    let cleaned: String = shoal_topic
        .trim_matches('/')
        .split('/')
        .map(|t| {
            let t: String = t.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
            if t.starts_with(|c: char| c.is_ascii_digit()) { format!("_{t}") } else { t }
        })
        .collect::<Vec<_>>()
        .join("/");
    format!("/{cleaned}")
}

impl Config {
    /// Reads and checks a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        Config::from_file_with(path, &[])
    }

    /// [`Config::from_file`], with `.msg` directories (`--msg-path`) searched before the file's `msg_path`.
    pub fn from_file_with(path: &Path, msg_dirs: &[PathBuf]) -> Result<Config, ConfigError> {
        let text = read_file(path)?;
        Config::from_toml_with(&path.display().to_string(), &text, msg_dirs)
    }

    /// Parses and checks configuration text; `path` is used in error messages, and relative paths in the file are
    /// relative to its directory.
    pub fn from_toml(path: &str, text: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with(path, text, &[])
    }

    /// [`Config::from_toml`], with `.msg` directories searched before the file's `msg_path`.
    pub fn from_toml_with(path: &str, text: &str, msg_dirs: &[PathBuf]) -> Result<Config, ConfigError> {
        let base = Path::new(path).parent().unwrap_or(Path::new("")).to_path_buf();
        let cx = FileCtx::new(path, text);
        let file: FileConfig = cx.parse()?;
        let mut c = Config::default();
        if let Some(ros) = file.ros {
            if let Some(v) = &ros.domain_id {
                c.domain_id = cx.int(v, "domain_id", (0, 232))?;
            }
            if let Some(v) = ros.node_name {
                check_node_name(v.get_ref()).map_err(|m| cx.err(v.span(), format!("node_name = {m}")))?;
                c.node_name = v.into_inner();
            }
            if let Some(v) = ros.namespace {
                if v.get_ref() != "/" {
                    check_ros_topic(v.get_ref()).map_err(|m| cx.err(v.span(), format!("namespace = {m}")))?;
                }
                c.namespace = v.into_inner();
            }
            if let Some(list) = ros.interfaces {
                for v in list {
                    let ip: IpAddr = v.get_ref().parse().map_err(|_| {
                        cx.err(
                            v.span(),
                            format!("interfaces: {:?} is not an IP address (e.g. \"127.0.0.1\")", v.get_ref()),
                        )
                    })?;
                    c.interfaces.push(ip);
                }
            }
            if let Some(list) = ros.msg_path {
                for v in list {
                    let d = base.join(v.get_ref());
                    if !d.is_dir() {
                        return Err(cx.err(
                            v.span(),
                            format!("msg_path: {} is not a directory (of <pkg>/msg/<Type>.msg files)", d.display()),
                        ));
                    }
                    c.msg_path.push(d);
                }
            }
            if let Some(v) = &ros.socket_receive_buffer {
                c.socket_receive_buffer = cx.int(v, "socket_receive_buffer", (0, 1 << 30))?;
            }
            if let Some(v) = &ros.socket_send_buffer {
                c.socket_send_buffer = cx.int(v, "socket_send_buffer", (0, 1 << 30))?;
            }
        }
        if let Some(shoal) = file.shoal {
            if let Some(v) = shoal.unit_name {
                if v.get_ref().is_empty() {
                    return Err(cx.err(v.span(), "unit_name: must not be empty"));
                }
                c.unit_name = v.into_inner();
            }
            if let Some(v) = &shoal.stats_interval_ms {
                c.stats_interval_ms = cx.int(v, "stats_interval_ms", (0, 3_600_000))?;
            }
            if let Some(v) = &shoal.announced_type_wait_ms {
                c.announced_type_wait_ms = cx.int(v, "announced_type_wait_ms", (100, 600_000))?;
            }
        }
        if let Some(sup) = file.supervisor {
            if let Some(v) = &sup.memory_limit {
                c.supervisor.memory_limit = cx.int(v, "memory_limit", Supervision::MEMORY_LIMIT_RANGE)?;
            }
            if let Some(v) = &sup.restart_backoff_ms {
                c.supervisor.restart_backoff_ms = cx.int(v, "restart_backoff_ms", Supervision::BACKOFF_RANGE)?;
            }
        }
        if let Some(a) = &file.auto {
            c.auto = Some(crate::auto::AutoConfig::from_file(&cx, a)?);
        }
        c.msg_path.splice(0..0, msg_dirs.iter().cloned());
        let mut reg = MsgRegistry::new(c.msg_path.clone());
        for t in file.topic {
            let direction = match &t.direction {
                Some(v) => Direction::parse(v.get_ref()).ok_or_else(|| {
                    cx.err(v.span(), format!("direction = {:?}: allowed {}", v.get_ref(), Direction::ALLOWED))
                })?,
                None => Direction::Both,
            };
            let spec = TypeSpec {
                ty: t.ros_type.get_ref(),
                to_shoal: direction.to_shoal(),
                shoal_type: t.shoal_type.as_ref().map(|v| v.get_ref().as_str()),
                descriptor: t.shoal_descriptor.as_ref().map(|v| base.join(v.get_ref())),
                proto: t.shoal_proto.as_ref().map(|v| base.join(v.get_ref())),
            };
            let (ros_type, shoal_descriptor) = route_type(spec, &mut reg).map_err(|(key, m)| {
                let span = match key {
                    Key::Type => Some(t.ros_type.span()),
                    Key::ShoalType => t.shoal_type.as_ref().map(Spanned::span),
                    Key::Descriptor => t.shoal_descriptor.as_ref().map(Spanned::span),
                    Key::Proto => t.shoal_proto.as_ref().map(Spanned::span),
                };
                cx.err(span.unwrap_or_else(|| t.ros_type.span()), m)
            })?;
            if t.shoal.get_ref().is_empty() {
                return Err(cx.err(t.shoal.span(), "shoal: the topic name must not be empty"));
            }
            let ros_topic = match &t.ros {
                Some(v) => {
                    check_ros_topic(v.get_ref()).map_err(|m| cx.err(v.span(), format!("ros = {m}")))?;
                    v.get_ref().clone()
                }
                None => default_ros_topic(t.shoal.get_ref()),
            };
            let mut qos = Qos::default();
            if let Some(r) = t.reliability {
                qos.reliability = r;
            }
            if let Some(d) = t.durability {
                qos.durability = d;
            }
            if let Some(v) = &t.history_depth {
                qos.history_depth = cx.int(v, "history_depth", (1, 100_000))?;
            }
            let is_raw = ros_type.is_raw();
            c.routes.push(Route {
                shoal_topic: t.shoal.into_inner(),
                ros_topic,
                ros_type,
                direction,
                qos,
                shoal_type: t.shoal_type.filter(|_| is_raw).map(Spanned::into_inner),
                shoal_descriptor,
            });
        }
        for t in file.service {
            c.services.push(service_from_file(&cx, &base, t, &mut reg)?);
        }
        Ok(c)
    }

    /// Parses a `--topic` flag: `SHOAL_TOPIC=TYPE[,key=value...]` with keys `ros`, `direction`, `reliability`,
    /// `durability`, `history_depth`, `shoal_type`, `shoal_descriptor`, `shoal_proto` (the same values as the
    /// file's `[[topic]]` keys; relative paths are relative to the working directory). Generic mappings find
    /// their `.msg` files in `msg_dirs`, then among the built-in ones.
    pub fn parse_topic_flag(spec: &str, msg_dirs: &[PathBuf]) -> Result<Route, ConfigError> {
        let flag = |m: String| ConfigError::Flag { flag: format!("--topic {spec}"), message: m };
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or_default();
        let (shoal, ty) = head
            .split_once('=')
            .ok_or_else(|| flag("expected SHOAL_TOPIC=TYPE[,ros=/name][,direction=..][,...]".into()))?;
        if shoal.is_empty() {
            return Err(flag("the shoal topic name is empty".into()));
        }
        let mut r = Route {
            shoal_topic: shoal.into(),
            ros_topic: default_ros_topic(shoal),
            ros_type: RouteType::Builtin(RosType::Raw),
            direction: Direction::Both,
            qos: Qos::default(),
            shoal_type: None,
            shoal_descriptor: None,
        };
        let (mut descriptor, mut proto) = (None, None);
        for kv in parts {
            let (k, v) = kv.split_once('=').ok_or_else(|| flag(format!("{kv:?}: expected key=value")))?;
            match k {
                "ros" => {
                    check_ros_topic(v).map_err(|m| flag(format!("ros = {m}")))?;
                    r.ros_topic = v.into();
                }
                "direction" => {
                    r.direction = Direction::parse(v)
                        .ok_or_else(|| flag(format!("direction {v:?}: allowed {}", Direction::ALLOWED)))?;
                }
                "reliability" => {
                    r.qos.reliability = match v {
                        "reliable" => Reliability::Reliable,
                        "best_effort" => Reliability::BestEffort,
                        _ => return Err(flag(format!("reliability {v:?}: allowed reliable, best_effort"))),
                    }
                }
                "durability" => {
                    r.qos.durability = match v {
                        "volatile" => Durability::Volatile,
                        "transient_local" => Durability::TransientLocal,
                        _ => return Err(flag(format!("durability {v:?}: allowed volatile, transient_local"))),
                    }
                }
                "history_depth" => {
                    r.qos.history_depth = v
                        .parse()
                        .ok()
                        .filter(|d| (1..=100_000).contains(d))
                        .ok_or_else(|| flag(format!("history_depth {v:?}: allowed 1..=100000")))?;
                }
                "shoal_type" => r.shoal_type = Some(v.into()),
                "shoal_descriptor" => descriptor = Some(PathBuf::from(v)),
                "shoal_proto" => proto = Some(PathBuf::from(v)),
                _ => {
                    return Err(flag(format!(
                        "unknown key {k:?}; allowed ros, direction, reliability, durability, history_depth, \
                         shoal_type, shoal_descriptor, shoal_proto"
                    )));
                }
            }
        }
        let mut reg = MsgRegistry::new(msg_dirs.iter().cloned());
        let shoal_type = r.shoal_type.clone();
        let spec =
            TypeSpec { ty, to_shoal: r.direction.to_shoal(), shoal_type: shoal_type.as_deref(), descriptor, proto };
        let (ros_type, desc) = route_type(spec, &mut reg).map_err(|(_, m)| flag(m))?;
        if !ros_type.is_raw() {
            r.shoal_type = None;
        }
        r.ros_type = ros_type;
        r.shoal_descriptor = desc;
        Ok(r)
    }

    /// Parses a `--service` flag: `SHOAL_SERVICE=pkg/srv/Type,server=shoal|ros` with keys `ros`, `method`,
    /// `timeout_ms`, `shoal_request`, `shoal_response`, `shoal_proto`, `shoal_descriptor` (the file's
    /// `[[service]]` keys).
    pub fn parse_service_flag(spec: &str, msg_dirs: &[PathBuf]) -> Result<ServiceRoute, ConfigError> {
        crate::services::parse_service_flag(spec, msg_dirs)
            .map_err(|m| ConfigError::Flag { flag: format!("--service {spec}"), message: m })
    }

    /// Checks what only the whole set of routes can show: two routes may not publish the same topic, and a
    /// service name is bridged once on each side.
    pub fn check_routes(&self) -> Result<(), ConfigError> {
        for (i, a) in self.services.iter().enumerate() {
            for b in &self.services[i + 1..] {
                let twice = |what: &str, name: &str| ConfigError::Flag {
                    flag: "services".into(),
                    message: format!("two services bridge {what} service {name}"),
                };
                if a.shoal_name == b.shoal_name {
                    return Err(twice("shoal", &a.shoal_name));
                }
                if a.ros_name == b.ros_name {
                    return Err(twice("ROS 2", &a.ros_name));
                }
            }
        }
        for (i, a) in self.routes.iter().enumerate() {
            for b in &self.routes[i + 1..] {
                if a.direction.to_ros() && b.direction.to_ros() && a.ros_topic == b.ros_topic {
                    return Err(ConfigError::Flag {
                        flag: "topics".into(),
                        message: format!("two routes publish ROS topic {}", a.ros_topic),
                    });
                }
                if a.direction.to_shoal() && b.direction.to_shoal() && a.shoal_topic == b.shoal_topic {
                    return Err(ConfigError::Flag {
                        flag: "topics".into(),
                        message: format!("two routes publish shoal topic {}", a.shoal_topic),
                    });
                }
            }
        }
        Ok(())
    }
}

/// One `[[service]]` table.
fn service_from_file(
    cx: &FileCtx<'_>,
    base: &Path,
    t: FileService,
    reg: &mut MsgRegistry,
) -> Result<ServiceRoute, ConfigError> {
    use crate::services::{Key as SKey, TIMEOUT_RANGE, TypeSpec as STypeSpec};
    if t.shoal.get_ref().is_empty() {
        return Err(cx.err(t.shoal.span(), "shoal: the service name must not be empty"));
    }
    let server = ServerSide::parse(t.server.get_ref()).ok_or_else(|| {
        cx.err(t.server.span(), format!("server = {:?}: allowed {}", t.server.get_ref(), ServerSide::ALLOWED))
    })?;
    let ros_name = match &t.ros {
        Some(v) => {
            check_ros_topic(v.get_ref()).map_err(|m| cx.err(v.span(), format!("ros = {m}")))?;
            v.get_ref().clone()
        }
        None => default_ros_topic(t.shoal.get_ref()),
    };
    let method = match t.method {
        Some(v) if v.get_ref().is_empty() => return Err(cx.err(v.span(), "method: must not be empty")),
        Some(v) => v.into_inner(),
        None => crate::services::DEFAULT_METHOD.into(),
    };
    let timeout_ms = match &t.timeout_ms {
        Some(v) => cx.int(v, "timeout_ms", TIMEOUT_RANGE)?,
        None => crate::services::DEFAULT_TIMEOUT_MS,
    };
    let spec = STypeSpec {
        ty: t.srv_type.get_ref(),
        shoal_request: t.shoal_request.as_ref().map(|v| v.get_ref().as_str()),
        shoal_response: t.shoal_response.as_ref().map(|v| v.get_ref().as_str()),
        descriptor: t.shoal_descriptor.as_ref().map(|v| base.join(v.get_ref())),
        proto: t.shoal_proto.as_ref().map(|v| base.join(v.get_ref())),
    };
    let (srv, request, response) = crate::services::service_types(&spec, reg).map_err(|(key, m)| {
        let span = match key {
            SKey::Type => Some(t.srv_type.span()),
            SKey::ShoalTypes => t.shoal_request.as_ref().or(t.shoal_response.as_ref()).map(Spanned::span),
            SKey::Descriptor => t.shoal_descriptor.as_ref().map(Spanned::span),
            SKey::Proto => t.shoal_proto.as_ref().map(Spanned::span),
        };
        cx.err(span.unwrap_or_else(|| t.srv_type.span()), m)
    })?;
    Ok(ServiceRoute { shoal_name: t.shoal.into_inner(), method, ros_name, srv, server, timeout_ms, request, response })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_file_parses() {
        let text = include_str!("../etc/bridge.toml");
        let c = Config::from_toml("etc/bridge.toml", text).expect("the documented file parses");
        assert!(!c.routes.is_empty());
        let a = c.auto.as_ref().expect("the documented [auto] table");
        assert!(a.matches("/auto/x") && !a.matches("/chatter"));
        c.check_routes().expect("no conflicting routes");
    }

    #[test]
    fn defaults_are_the_ros_defaults() {
        let c = Config::from_toml("t.toml", "[[topic]]\nshoal = \"chat\"\ntype = \"std_msgs/msg/String\"\n").unwrap();
        let r = &c.routes[0];
        assert_eq!(r.ros_topic, "/chat");
        assert_eq!(r.direction, Direction::Both);
        assert_eq!(
            r.qos,
            Qos { reliability: Reliability::Reliable, durability: Durability::Volatile, history_depth: 10 }
        );
        assert_eq!(c.domain_id, 0);
    }

    fn err(text: &str) -> String {
        Config::from_toml("b.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_file_line_and_allowed_values() {
        let e = err("[ros]\ndomain_id = 300\n");
        assert!(e.starts_with("b.toml:2:13: domain_id = 300: allowed 0..=232"), "{e}");
        let e = err("[ros]\ndomian_id = 3\n");
        assert!(
            e.starts_with("b.toml:2:1:") && e.contains("unknown field `domian_id`") && e.contains("domain_id"),
            "{e}"
        );
        let e = err("[[topic]]\nshoal = \"a\"\ntype = \"sensor_msgs/msg/Imu\"\ndirection = \"up\"\n");
        assert!(e.starts_with("b.toml:4:13: direction = \"up\": allowed shoal_to_ros, ros_to_shoal, both"), "{e}");
        let e = err("[[topic]]\nshoal = \"a\"\ntype = \"sensor_msgs/msg/Imu\"\nreliability = \"sometimes\"\n");
        assert!(e.starts_with("b.toml:4:") && e.contains("reliable") && e.contains("best_effort"), "{e}");
        let e = err("[[topic]]\nshoal = \"a\"\ntype = \"foo/msg/Bar\"\n");
        assert!(
            e.starts_with("b.toml:3:8: type = \"foo/msg/Bar\": not built in (allowed: std_msgs/msg/String")
                && e.contains("generic mapping and needs shoal_type with shoal_proto or shoal_descriptor"),
            "{e}"
        );
        let e = err("[[topic]]\nshoal = \"a\"\nros = \"no_slash\"\ntype = \"raw\"\n");
        assert!(e.starts_with("b.toml:3:7: ros = \"no_slash\""), "{e}");
        let e = err("[[topic]]\nshoal = \"a\"\n");
        assert!(e.contains("missing field `type`"), "{e}");
        let e = err("[supervisor]\nmemory_limit = 1000\n");
        assert!(e.starts_with("b.toml:2:16: memory_limit = 1000: allowed 67108864..=1099511627776"), "{e}");
        let e = err("[supervisor]\nrestart_backoff_ms = 0\n");
        assert!(e.starts_with("b.toml:2:22: restart_backoff_ms = 0: allowed 10..=60000"), "{e}");
        let e = err("[supervisor]\nmemory = 1\n");
        assert!(e.starts_with("b.toml:2:1:") && e.contains("memory_limit"), "{e}");
        let c =
            Config::from_toml("b.toml", "[supervisor]\nmemory_limit = 134217728\nrestart_backoff_ms = 20\n").unwrap();
        assert_eq!(c.supervisor, Supervision { memory_limit: 128 << 20, restart_backoff_ms: 20 });
        let e = err("[ros]\ninterfaces = [\"lo\"]\n");
        assert!(e.starts_with("b.toml:2:15: interfaces: \"lo\" is not an IP address"), "{e}");
    }

    #[test]
    fn service_tables_and_flags() {
        let c = Config::from_toml(
            "b.toml",
            "[[service]]\nshoal = \"arm/reset\"\ntype = \"std_srvs/srv/Trigger\"\nserver = \"shoal\"\n\
             [[service]]\nshoal = \"enable\"\nros = \"/motor/enable\"\nmethod = \"set\"\n\
             type = \"std_srvs/srv/SetBool\"\nserver = \"ros\"\ntimeout_ms = 250\n",
        )
        .unwrap();
        let (a, b) = (&c.services[0], &c.services[1]);
        assert_eq!((a.ros_name.as_str(), a.method.as_str(), a.timeout_ms), ("/arm/reset", "call", 5000));
        assert_eq!(a.server, ServerSide::Shoal);
        assert_eq!(a.request.type_info().name, "std_srvs.Trigger_Request");
        assert_eq!((b.ros_name.as_str(), b.method.as_str(), b.timeout_ms), ("/motor/enable", "set", 250));
        assert_eq!(b.response.type_info().name, "std_srvs.SetBool_Response");
        assert_eq!(b.dds_topics(), ("rq/motor/enableRequest".to_string(), "rr/motor/enableReply".to_string()));

        let e = err("[[service]]\nshoal = \"a\"\ntype = \"std_srvs/srv/Trigger\"\nserver = \"both\"\n");
        assert!(e.starts_with("b.toml:4:10: server = \"both\": allowed shoal, ros"), "{e}");
        let e = err("[[service]]\nshoal = \"a\"\ntype = \"std_srvs/srv/Trigger\"\n");
        assert!(e.contains("missing field `server`"), "{e}");
        let e = err("[[service]]\nshoal = \"a\"\ntype = \"std_srvs/srv/Trigger\"\nserver = \"ros\"\ntimeout_ms = 0\n");
        assert!(e.starts_with("b.toml:5:14: timeout_ms = 0: allowed 1..=600000"), "{e}");
        let e = err("[[service]]\nshoal = \"a\"\ntype = \"example_interfaces/srv/AddTwoInts\"\nserver = \"ros\"\n");
        assert!(e.starts_with("b.toml:3:8: example_interfaces/srv/AddTwoInts: no definition found"), "{e}");
        let e = err("[[service]]\nshoal = \"a\"\ntype = \"std_msgs/msg/String\"\nserver = \"ros\"\n");
        assert!(
            e.starts_with("b.toml:3:8: type = \"std_msgs/msg/String\": a service type is written pkg/srv/Type"),
            "{e}"
        );
        let e = err("[[service]]\nshoal = \"a\"\ntype = \"demo/action/Go\"\nserver = \"ros\"\n");
        assert!(e.contains("is an action type: actions are not bridged"), "{e}");
        let e = err(
            "[[service]]\nshoal = \"a\"\ntype = \"std_srvs/srv/Empty\"\nserver = \"ros\"\nshoal_request = \"x.Y\"\n",
        );
        assert!(e.starts_with("b.toml:5:17: shoal_request and shoal_response: give both"), "{e}");

        // A generic .srv: mapped at start, the first field that does not map named.
        let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/demo");
        let msg = vec![demo.join("msg")];
        let proto = demo.join("demo.proto");
        let flag = format!(
            "scale=demo_msgs/srv/Scale,server=ros,shoal_request=demo.Scale_Request,shoal_response=demo.Scale_Response,\
             shoal_proto={}",
            proto.display()
        );
        let s = Config::parse_service_flag(&flag, &msg).unwrap();
        assert_eq!((s.ros_name.as_str(), s.server), ("/scale", ServerSide::Ros));
        let bad = flag.replace("demo.Scale_Response", "demo.Wheel");
        let e = Config::parse_service_flag(&bad, &msg).unwrap_err().to_string();
        assert!(e.contains("protobuf demo.Wheel does not map to demo_msgs/srv/Scale (Response)"), "{e}");
        let e = Config::parse_service_flag("x=std_srvs/srv/Trigger", &[]).unwrap_err().to_string();
        assert!(e.contains("server=shoal or server=ros"), "{e}");

        let mut twice = c.clone();
        twice.services.push(c.services[0].clone());
        assert!(twice.check_routes().unwrap_err().to_string().contains("two services bridge shoal service arm/reset"));
    }

    #[test]
    fn raw_descriptor_is_checked_and_announced() {
        use shoal::Message as _;
        let dir = std::env::temp_dir().join(format!("bridge_cfg_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let imu = crate::pb::sensor_msgs::Imu::type_info();
        std::fs::write(dir.join("imu.desc"), &imu.descriptor).unwrap();
        std::fs::write(dir.join("junk.desc"), b"\xff\xff\xff").unwrap();
        let cfg = dir.join("b.toml");
        let text = |ty: &str, desc: &str| {
            format!("[[topic]]\nshoal = \"a\"\ntype = \"raw\"\nshoal_type = \"{ty}\"\nshoal_descriptor = \"{desc}\"\n")
        };
        let path = cfg.display().to_string();
        let c = Config::from_toml(&path, &text("sensor_msgs.Imu", "imu.desc")).expect("a valid descriptor");
        let ti = c.routes[0].raw_type_info();
        assert_eq!((ti.name.as_str(), ti.encoding.as_str()), ("sensor_msgs.Imu", "proto"));
        assert_eq!(ti.descriptor, imu.descriptor);
        let e = Config::from_toml(&path, &text("sensor_msgs.Nope", "imu.desc")).unwrap_err().to_string();
        assert!(e.contains(":5:20: shoal_descriptor: ") && e.contains("sensor_msgs.Nope"), "{e}");
        let e = Config::from_toml(&path, &text("x.Y", "junk.desc")).unwrap_err().to_string();
        assert!(e.contains("shoal_descriptor: ") && e.contains("junk.desc"), "{e}");
        let e = Config::from_toml(&path, &text("x.Y", "missing.desc")).unwrap_err().to_string();
        assert!(e.contains("missing.desc"), "{e}");
        let e = Config::from_toml(&path, "[[topic]]\nshoal = \"a\"\ntype = \"raw\"\nshoal_descriptor = \"imu.desc\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs shoal_type"), "{e}");
        // Without a descriptor: the name, encoding raw; without a type: UInt8MultiArray's name.
        let r = Config::parse_topic_flag("a=raw,shoal_type=demo.Blob", &[]).unwrap();
        assert_eq!(r.raw_type_info(), TypeInfo::raw("demo.Blob"));
        assert_eq!(
            Config::parse_topic_flag("a=raw", &[]).unwrap().raw_type_info(),
            TypeInfo::raw("std_msgs/msg/UInt8MultiArray")
        );
        let flag = format!("a=raw,shoal_type=sensor_msgs.Imu,shoal_descriptor={}", dir.join("imu.desc").display());
        assert_eq!(Config::parse_topic_flag(&flag, &[]).unwrap().raw_type_info().encoding, "proto");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn generic_mapping_keys() {
        let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/demo");
        // Relative paths are relative to the file's directory: tests/demo.
        let path = demo.join("generic.toml").display().to_string();
        let ok = "[ros]\nmsg_path = [\"msg\"]\n\n[[topic]]\nshoal = \"t\"\ntype = \"demo_msgs/msg/Telemetry\"\n\
                  shoal_type = \"demo.Telemetry\"\nshoal_proto = \"demo.proto\"\n";
        let c = Config::from_toml(&path, ok).expect("demo.Telemetry maps");
        let RouteType::Generic(m) = &c.routes[0].ros_type else { panic!("a generic route") };
        assert_eq!(m.type_info().name, "demo.Telemetry");
        assert_eq!(m.type_info().encoding, "proto");
        assert_eq!(c.routes[0].ros_type.dds_name(), "demo_msgs::msg::dds_::Telemetry_");
        assert_eq!(c.routes[0].shoal_type, None);
        let e = |text: &str| Config::from_toml(&path, text).unwrap_err().to_string();
        let bad = e(&ok.replace("demo.Telemetry", "demo.BadTelemetry"));
        assert!(
            bad.starts_with(&format!(
                "{path}:7:14: protobuf demo.BadTelemetry does not map to demo_msgs/msg/Telemetry: pose.position.w: \
                 no such field in geometry_msgs/msg/Point"
            )),
            "{bad}"
        );
        let x = e(&ok.replace("shoal_proto = \"demo.proto\"\n", ""));
        assert!(x.starts_with(&format!("{path}:7:14: shoal_type: a generic mapping of demo.Telemetry to")), "{x}");
        let x = e(&ok.replace("[\"msg\"]", "[\"nowhere\"]"));
        assert!(x.starts_with(&format!("{path}:2:13: msg_path: ")) && x.contains("not a directory"), "{x}");
        let x = e(&ok.replace("msg_path = [\"msg\"]", ""));
        assert!(x.starts_with(&format!("{path}:7:14: ")) && x.contains("Telemetry: no definition found"), "{x}");
        let x = e(&ok.replace("demo.proto", "missing.proto"));
        assert!(x.starts_with(&format!("{path}:8:15: shoal_proto: ")) && x.contains("missing.proto"), "{x}");
        let x = e(&ok.replace("demo_msgs/msg/Telemetry", "demo_msgs/srv/Telemetry"));
        assert!(x.starts_with(&format!("{path}:6:8: type = ")), "{x}");
        let x = e(&format!("{ok}shoal_descriptor = \"x.desc\"\n"));
        assert!(x.contains("give shoal_proto or shoal_descriptor, not both"), "{x}");
        // shoal → ROS 2 without a definition: the one the shoal publisher announces, waited for at start.
        let c =
            Config::from_toml(&path, &ok.replace("shoal_proto = \"demo.proto\"\n", "direction = \"shoal_to_ros\"\n"))
                .expect("an announced definition");
        let RouteType::Announced { ros, shoal_type } = &c.routes[0].ros_type else { panic!("announced") };
        assert_eq!((ros.to_string().as_str(), shoal_type.as_str()), ("demo_msgs/msg/Telemetry", "demo.Telemetry"));
        assert_eq!(c.announced_type_wait_ms, 10_000);
        let x = e("[shoal]\nannounced_type_wait_ms = 5\n");
        assert!(x.starts_with(&format!("{path}:2:26: announced_type_wait_ms = 5: allowed 100..=600000")), "{x}");
        // A built-in ROS type with a shoal_type: the shipped .msg, mapped to the configured protobuf message.
        let pose = "[[topic]]\nshoal = \"p\"\ntype = \"geometry_msgs/msg/Pose\"\nshoal_type = \"demo.Pose\"\n\
                    shoal_proto = \"demo.proto\"\n";
        let c = Config::from_toml(&path, pose).expect("demo.Pose maps to geometry_msgs/msg/Pose");
        assert!(matches!(c.routes[0].ros_type, RouteType::Generic(_)));
        // The same from a flag, with the .msg directory given on the command line.
        let flag = format!(
            "t=demo_msgs/Telemetry,shoal_type=demo.Telemetry,shoal_proto={}",
            demo.join("demo.proto").display()
        );
        let r = Config::parse_topic_flag(&flag, &[demo.join("msg")]).expect("maps");
        assert_eq!(r.ros_type.to_string(), "demo_msgs/msg/Telemetry as demo.Telemetry");
        let x = Config::parse_topic_flag(&flag, &[]).unwrap_err().to_string();
        assert!(x.contains("no definition found"), "{x}");
    }

    #[test]
    fn topic_flags() {
        let r = Config::parse_topic_flag("cam=sensor_msgs/msg/Image,ros=/camera/image,direction=shoal_to_ros,reliability=best_effort,history_depth=5", &[]).unwrap();
        assert_eq!(r.ros_topic, "/camera/image");
        assert_eq!(r.direction, Direction::ShoalToRos);
        assert_eq!(r.qos.reliability, Reliability::BestEffort);
        assert_eq!(r.qos.history_depth, 5);
        assert!(
            Config::parse_topic_flag("cam=sensor_msgs/msg/Image,speed=3", &[])
                .unwrap_err()
                .to_string()
                .contains("allowed ros")
        );
        assert!(Config::parse_topic_flag("cam", &[]).is_err());
        assert_eq!(default_ros_topic("a.b/1x"), "/a_b/_1x");
    }
}
