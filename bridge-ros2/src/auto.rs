//! Automatic routes (`[auto]`): topics that appear on either side while the bridge runs, and whose ROS 2 name
//! matches `allow` and not `deny`, are bridged without being listed; a route goes when its last peer has been
//! gone for `grace_ms`.
//!
//! - ROS 2 → shoal: a remote DDS writer on `rt/<name>` (RustDDS discovery) is bridged to shoal topic `<name>`
//!   (the ROS name without its leading `/`). A built-in type ([`RosType`], including `std_msgs/msg/UInt8MultiArray`
//!   as the raw fallback) is carried as a listed route of that type would be; another type whose `.msg` is found
//!   is a generic mapping of a protobuf message made from it ([`derive_proto`]); any other is refused (said
//!   once): the bridge decodes a sample only through a known type. The route's reader takes the writers' QoS:
//!   reliable only when every writer on the topic is, transient_local only when every writer is (so it matches
//!   them all), keep-last 10.
//! - shoal → ROS 2: a shoal publisher on `<topic>` (shoal registration, [`shoal::Node::snapshot`]) is bridged to
//!   ROS topic [`default_ros_topic`]`(<topic>)`, with the type a listed route would get: the shipped protobuf
//!   message's built-in type when every publisher announces the same one of them (encoding `proto`, e.g.
//!   `sensor_msgs.Imu`), raw otherwise; the ROS 2 default QoS (reliable, volatile, keep-last 10).
//! - The name matched is the ROS 2 topic name in both directions (`/chatter`), as a whole: `allow = "/chat.*"`.
//!
//! Loops: a route is never made for (1) the bridge's own endpoints — DDS writers of its own participant, shoal
//! publishers of its own process; (2) another shoal-ros2-bridge's — DDS writers of a participant whose
//! `ros_discovery_info` lists a node named [`MARKER_NODE`] (every bridge creates that hidden node), shoal
//! publishers whose process executable is named [`BRIDGE_EXECUTABLE`]; (3) a topic that has a route already:
//! one automatic route per ROS topic and per shoal topic, one way, so a topic bridged one way is not bridged back;
//! (4) a topic of a listed route (`[[topic]]`, `--topic`), which also means an automatic route never duplicates a
//! listed one. An automatic route also drops the samples of (2) (`Foreign`, counted as `own_ignored`), so two
//! bridges whose routes on one topic were each started by a genuine peer do not pass each other's messages round;
//! and a DDS writer starts a route only once it has been known for [`SETTLE`], by when its participant's
//! `ros_discovery_info` has arrived. At most `max_routes` automatic routes exist at once; one more is refused,
//! counted and said once.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use regex::Regex;
use ros2_client::dds::rustdds;
use serde::Deserialize;
use serde_json::{Value, json};
use shoal::TypeInfo;
use toml::Spanned;

use crate::bridge::{Running, StartEnv, emit, route_name};
use crate::config::{ConfigError, Direction, Durability, FileCtx, Qos, Reliability, Route, default_ros_topic};
use crate::generic::Mapping;
use crate::msgdef::{Array, Base, MsgName, MsgRegistry, Prim};
use crate::types::{RosType, RouteType};

/// The file name of the bridge's executable: shoal publishers of a process of this name are another bridge's
/// (or this one's), and are not bridged automatically.
pub const BRIDGE_EXECUTABLE: &str = "shoal-ros2-bridge";

/// The hidden ROS 2 node (a leading `_`: `ros2 node list` shows it only with `--all`) every bridge creates in its
/// DDS participant: DDS writers of a participant whose `ros_discovery_info` lists it are a bridge's, and are not
/// bridged automatically.
pub const MARKER_NODE: &str = "_shoal_ros2_bridge";

/// A regular expression that must match a whole name.
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    re: Regex,
}

impl Pattern {
    /// Compiles `source`, anchored at both ends.
    pub fn new(source: &str) -> Result<Pattern, String> {
        let re = Regex::new(&format!("^(?:{source})$")).map_err(|e| e.to_string())?;
        Ok(Pattern { source: source.to_string(), re })
    }

    /// Whether the whole of `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        self.re.is_match(name)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

/// The `[auto]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoConfig {
    /// ROS 2 topic names bridged automatically.
    pub allow: Pattern,
    /// ROS 2 topic names never bridged automatically, even when `allow` matches.
    pub deny: Option<Pattern>,
    /// Which ways automatic routes go (default both: each route still goes one way).
    pub direction: Direction,
    /// Automatic routes at most at once (default 64).
    pub max_routes: usize,
    /// How long a route stays after its last peer went, milliseconds (default 1000).
    pub grace_ms: u64,
}

impl AutoConfig {
    /// Allowed `max_routes`.
    pub const MAX_ROUTES_RANGE: (i64, i64) = (1, 10_000);
    /// Allowed `grace_ms`.
    pub const GRACE_RANGE: (i64, i64) = (0, 600_000);

    /// `allow` with the defaults: both ways, no `deny`, 64 routes, 1000 ms.
    pub fn new(allow: &str) -> Result<AutoConfig, String> {
        Ok(AutoConfig {
            allow: Pattern::new(allow)?,
            deny: None,
            direction: Direction::Both,
            max_routes: 64,
            grace_ms: 1000,
        })
    }

    /// Whether ROS 2 topic `ros_topic` may be bridged automatically: `allow` matches it and `deny` does not.
    pub fn matches(&self, ros_topic: &str) -> bool {
        self.allow.matches(ros_topic) && !self.deny.as_ref().is_some_and(|d| d.matches(ros_topic))
    }

    pub(crate) fn from_file(cx: &FileCtx<'_>, f: &FileAuto) -> Result<AutoConfig, ConfigError> {
        let pattern = |v: &Spanned<String>, key: &str| {
            Pattern::new(v.get_ref()).map_err(|e| {
                cx.err(
                    v.span(),
                    format!("{key} = {:?}: not a regular expression (Rust regex syntax): {e}", v.get_ref()),
                )
            })
        };
        let mut a = AutoConfig::new("").map_err(|e| cx.err(f.allow.span(), e))?;
        a.allow = pattern(&f.allow, "allow")?;
        if let Some(v) = &f.deny {
            a.deny = Some(pattern(v, "deny")?);
        }
        if let Some(v) = &f.direction {
            a.direction = Direction::parse(v.get_ref()).ok_or_else(|| {
                cx.err(v.span(), format!("direction = {:?}: allowed {}", v.get_ref(), Direction::ALLOWED))
            })?;
        }
        if let Some(v) = &f.max_routes {
            a.max_routes = cx.int(v, "max_routes", AutoConfig::MAX_ROUTES_RANGE)?;
        }
        if let Some(v) = &f.grace_ms {
            a.grace_ms = cx.int(v, "grace_ms", AutoConfig::GRACE_RANGE)?;
        }
        Ok(a)
    }
}

/// The `[auto]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileAuto {
    allow: Spanned<String>,
    deny: Option<Spanned<String>>,
    direction: Option<Spanned<String>>,
    max_routes: Option<Spanned<i64>>,
    grace_ms: Option<Spanned<i64>>,
}

/// A remote DDS writer that is neither the bridge's own nor another bridge's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenWriter {
    /// The DDS topic, `rt/<name>` for ROS 2 topics.
    pub dds_topic: String,
    /// The DDS type name, `pkg::msg::dds_::Type_`.
    pub dds_type: String,
    /// Whether it offers reliable.
    pub reliable: bool,
    /// Whether it offers transient_local.
    pub transient_local: bool,
    /// Whether it has been known for [`SETTLE`]: only such writers start a route (any keeps one).
    pub settled: bool,
}

/// A shoal publisher that is neither in the bridge's process nor another bridge's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenPublisher {
    /// The shoal topic.
    pub topic: String,
    /// What it announces.
    pub type_info: TypeInfo,
}

/// What discovery asks of the running automatic routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Start this route.
    Add(Route),
    /// Stop the route of this ROS topic; why.
    Remove(Route, String),
}

#[derive(Debug)]
struct Active {
    route: Route,
    missing_since: Option<Instant>,
}

/// The automatic routes: which exist, and which discovery adds and removes ([`AutoRoutes::plan`]).
#[derive(Debug)]
pub struct AutoRoutes {
    cfg: AutoConfig,
    /// Topics of the listed routes.
    listed_ros: HashSet<String>,
    listed_shoal: HashSet<String>,
    /// By ROS topic.
    active: HashMap<String, Active>,
    /// Refusals said, by (ROS topic, reason); forgotten when the topic's peers are gone.
    said: HashSet<(String, &'static str)>,
    added: u64,
    removed: u64,
    refused: u64,
    /// Finds the `.msg` files of types that are not built in.
    reg: MsgRegistry,
}

/// `/name` of DDS topic `rt/name`, if it is a valid ROS 2 topic.
pub fn ros_topic_of(dds_topic: &str) -> Option<String> {
    let name = format!("/{}", dds_topic.strip_prefix("rt/")?);
    crate::config::check_ros_topic(&name).is_ok().then_some(name)
}

/// The built-in type of DDS type name `pkg::msg::dds_::Type_`, if it is one.
pub fn builtin_of_dds(dds_type: &str) -> Option<RosType> {
    let (pkg, rest) = dds_type.split_once("::msg::dds_::")?;
    let name = rest.strip_suffix('_')?;
    RosType::parse(&format!("{pkg}/msg/{name}"))
}

/// A protobuf message for ROS 2 type `ros` (its `.msg` found by `reg`), for a ROS 2 → shoal route of a type that
/// is not built in: `(full name, serialized FileDescriptorSet)`. The message is `<pkg>.<Type>` (proto3), its fields
/// the `.msg` fields in order, numbered from 1, with the types the generic mapping pairs with them: bool → bool;
/// uint8, byte, char, uint16, uint32 → uint32; int8, int16, int32 → int32; int64 → int64; uint64 → uint64;
/// float32 → float; float64 → double; string → string; a nested type → a message (`<Type>.<pkg>_<Name>`, nested in the top one);
/// arrays → repeated, and arrays of uint8, byte or char → bytes. `wstring` has no counterpart and is refused.
pub fn derive_proto(reg: &mut MsgRegistry, ros: &MsgName) -> Result<(String, Vec<u8>), String> {
    use prost::Message as _;
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
    reg.resolve(ros).map_err(|e| e.to_string())?;
    let top = format!(".{}.{}", ros.pkg, ros.name);
    let nested_name = |m: &MsgName| format!("{}_{}", m.pkg, m.name);
    // Every type reachable from `ros`, once each.
    let mut todo = vec![ros.clone()];
    let mut seen: Vec<MsgName> = Vec::new();
    while let Some(n) = todo.pop() {
        if seen.contains(&n) {
            continue;
        }
        let def = reg.get(&n).ok_or_else(|| format!("{n}: not resolved"))?;
        todo.extend(def.fields.iter().filter_map(|f| if let Base::Msg(m) = &f.base { Some(m.clone()) } else { None }));
        seen.push(n);
    }
    let message = |n: &MsgName, name: String| -> Result<DescriptorProto, String> {
        let def = reg.get(n).ok_or_else(|| format!("{n}: not resolved"))?;
        let mut fields = Vec::new();
        for (i, f) in def.fields.iter().enumerate() {
            let bytes = f.array != Array::Single && matches!(f.base, Base::Prim(Prim::Uint8 | Prim::Byte | Prim::Char));
            let (ty, type_name) = match &f.base {
                _ if bytes => (Type::Bytes, None),
                Base::Prim(p) => (
                    match p {
                        Prim::Bool => Type::Bool,
                        Prim::Byte | Prim::Char | Prim::Uint8 | Prim::Uint16 | Prim::Uint32 => Type::Uint32,
                        Prim::Int8 | Prim::Int16 | Prim::Int32 => Type::Int32,
                        Prim::Int64 => Type::Int64,
                        Prim::Uint64 => Type::Uint64,
                        Prim::Float32 => Type::Float,
                        Prim::Float64 => Type::Double,
                    },
                    None,
                ),
                Base::String(_) => (Type::String, None),
                Base::WString(_) => {
                    return Err(format!("{n}.{}: wstring has no protobuf counterpart", f.name));
                }
                Base::Msg(m) => (Type::Message, Some(format!("{top}.{}", nested_name(m)))),
            };
            let repeated = f.array != Array::Single && !bytes;
            fields.push(FieldDescriptorProto {
                name: Some(f.name.clone()),
                number: Some(i32::try_from(i + 1).map_err(|_| format!("{n}: too many fields"))?),
                label: Some(if repeated { Label::Repeated } else { Label::Optional } as i32),
                r#type: Some(ty as i32),
                type_name,
                json_name: Some(f.name.clone()),
                ..FieldDescriptorProto::default()
            });
        }
        Ok(DescriptorProto { name: Some(name), field: fields, ..DescriptorProto::default() })
    };
    let mut main = message(ros, ros.name.clone())?;
    for n in seen.iter().filter(|n| *n != ros) {
        main.nested_type.push(message(n, nested_name(n))?);
    }
    let file = FileDescriptorProto {
        name: Some(format!("{}/{}.proto", ros.pkg, ros.name)),
        package: Some(ros.pkg.clone()),
        message_type: vec![main],
        syntax: Some("proto3".into()),
        ..FileDescriptorProto::default()
    };
    Ok((format!("{}.{}", ros.pkg, ros.name), FileDescriptorSet { file: vec![file] }.encode_to_vec()))
}

/// The route type of a ROS 2 → shoal route for DDS type `dds_type`: built in, or a generic mapping of a protobuf
/// message derived from its `.msg` ([`derive_proto`]); or why there is none.
pub fn ros_route_type(reg: &mut MsgRegistry, dds_type: &str) -> Result<RouteType, String> {
    if let Some(t) = builtin_of_dds(dds_type) {
        return Ok(RouteType::Builtin(t));
    }
    let parsed = dds_type
        .split_once("::msg::dds_::")
        .and_then(|(pkg, rest)| Some((pkg, rest.strip_suffix('_')?)))
        .and_then(|(pkg, name)| MsgName::parse(&format!("{pkg}/msg/{name}")).ok());
    let Some(ros) = parsed else {
        return Err(format!("its type {dds_type} is not a ROS 2 message type (pkg::msg::dds_::Type_)"));
    };
    let (name, descriptor) = derive_proto(reg, &ros).map_err(|e| {
        format!(
            "its type {ros} is not built in (allowed: {}) and has no generic mapping: {e}; give its .msg under              msg_path, or list it as a [[topic]]",
            RosType::allowed()
        )
    })?;
    let m = Mapping::new(reg, &ros, &name, descriptor)
        .map_err(|e| format!("its type {ros}: the protobuf message made from its .msg does not map: {e}"))?;
    Ok(RouteType::Generic(Arc::new(m)))
}

/// The built-in type whose shipped protobuf message a shoal publisher announces, if it does.
pub fn builtin_of_proto(t: &TypeInfo) -> Option<RosType> {
    if t.encoding != "proto" {
        return None;
    }
    RosType::ALL.into_iter().find(|r| r.proto_name().as_deref() == Some(t.name.as_str()))
}

impl AutoRoutes {
    /// No automatic routes yet, beside the `listed` ones.
    pub fn new(cfg: AutoConfig, listed: &[Route]) -> AutoRoutes {
        AutoRoutes {
            cfg,
            listed_ros: listed.iter().map(|r| r.ros_topic.clone()).collect(),
            listed_shoal: listed.iter().map(|r| r.shoal_topic.clone()).collect(),
            active: HashMap::new(),
            said: HashSet::new(),
            added: 0,
            removed: 0,
            refused: 0,
            reg: MsgRegistry::new(Vec::new()),
        }
    }

    /// Types that are not built in are found under `msg_path` (then among the shipped definitions).
    pub fn with_msg_path(mut self, msg_path: Vec<std::path::PathBuf>) -> AutoRoutes {
        self.reg = MsgRegistry::new(msg_path);
        self
    }

    /// The automatic routes running.
    pub fn len(&self) -> usize {
        self.active.len()
    }

    /// Whether none run.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// Refusals so far (each topic and reason once).
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The counters, for the statistics line.
    pub fn to_json(&self) -> Value {
        json!({"routes": self.active.len(), "max_routes": self.cfg.max_routes, "added": self.added,
               "removed": self.removed, "refused": self.refused})
    }

    fn refuse(&mut self, ros_topic: &str, reason: &'static str, message: String) {
        if self.said.insert((ros_topic.to_string(), reason)) {
            self.refused += 1;
            tracing::warn!("automatic route for {ros_topic} refused: {message}");
            emit(&json!({"event": "route_refused", "ros": ros_topic, "reason": reason, "message": message}));
        }
    }

    /// Whether the topic has a route, or had one that could not start (tried again when its peers have gone and
    /// come back).
    fn taken(&self, ros_topic: &str, shoal_topic: &str) -> bool {
        self.said.contains(&(ros_topic.to_string(), "start"))
            || self.listed_ros.contains(ros_topic)
            || self.listed_shoal.contains(shoal_topic)
            || self.active.contains_key(ros_topic)
            || self.active.values().any(|a| a.route.shoal_topic == shoal_topic)
    }

    fn admit(&mut self, route: Route) -> Option<Change> {
        if self.active.len() >= self.cfg.max_routes {
            let message = format!(
                "{} automatic routes run already (max_routes); {} {} is not bridged",
                self.active.len(),
                if route.direction.to_shoal() { "ROS 2 topic" } else { "shoal topic" },
                if route.direction.to_shoal() { &route.ros_topic } else { &route.shoal_topic },
            );
            self.refuse(&route.ros_topic, "max_routes", message);
            return None;
        }
        self.added += 1;
        self.active.insert(route.ros_topic.clone(), Active { route: route.clone(), missing_since: None });
        Some(Change::Add(route))
    }

    /// The routes to start and stop, given the remote DDS `writers` and shoal `publishers` seen at `now` (neither
    /// the bridge's own nor another bridge's).
    pub fn plan(&mut self, now: Instant, writers: &[SeenWriter], publishers: &[SeenPublisher]) -> Vec<Change> {
        // ROS topic → (types, all reliable, all transient_local), of the settled writers; and the topics of all.
        let mut ros: BTreeMap<String, (Vec<&str>, bool, bool)> = BTreeMap::new();
        let ros_all: HashSet<String> = writers.iter().filter_map(|w| ros_topic_of(&w.dds_topic)).collect();
        for w in writers.iter().filter(|w| w.settled) {
            let Some(name) = ros_topic_of(&w.dds_topic) else { continue };
            let e = ros.entry(name).or_insert((Vec::new(), true, true));
            if !e.0.contains(&w.dds_type.as_str()) {
                e.0.push(&w.dds_type);
            }
            e.1 &= w.reliable;
            e.2 &= w.transient_local;
        }
        let mut shoal: BTreeMap<&str, Vec<&TypeInfo>> = BTreeMap::new();
        for p in publishers.iter().filter(|p| !p.topic.is_empty()) {
            shoal.entry(p.topic.as_str()).or_default().push(&p.type_info);
        }
        let mut changes = Vec::new();

        // Routes whose peers are gone.
        let grace = Duration::from_millis(self.cfg.grace_ms);
        let mut gone = Vec::new();
        for (topic, a) in &mut self.active {
            let present = if a.route.direction.to_shoal() {
                ros_all.contains(topic)
            } else {
                shoal.contains_key(a.route.shoal_topic.as_str())
            };
            if present {
                a.missing_since = None;
                continue;
            }
            let since = *a.missing_since.get_or_insert(now);
            if now.duration_since(since) >= grace {
                gone.push(topic.clone());
            }
        }
        gone.sort();
        for topic in gone {
            if let Some(a) = self.active.remove(&topic) {
                self.removed += 1;
                let why = if a.route.direction.to_shoal() {
                    format!("no remote DDS writer on {} for {} ms", a.route.ros_topic, self.cfg.grace_ms)
                } else {
                    format!("no shoal publisher on {} for {} ms", a.route.shoal_topic, self.cfg.grace_ms)
                };
                changes.push(Change::Remove(a.route, why));
            }
        }
        // Refusals are said again when their topic comes back.
        let shoal_as_ros: HashSet<String> = shoal.keys().map(|t| default_ros_topic(t)).collect();
        self.said.retain(|(t, _)| ros_all.contains(t) || shoal_as_ros.contains(t));

        if self.cfg.direction.to_shoal() {
            for (name, (types, reliable, tl)) in &ros {
                let shoal_topic = name.trim_start_matches('/').to_string();
                if !self.cfg.matches(name) || self.taken(name, &shoal_topic) {
                    continue;
                }
                let ty = match types.as_slice() {
                    [one] => ros_route_type(&mut self.reg, one),
                    _ => Err(format!("its writers have different types: {}", types.join(", "))),
                };
                let ty = match ty {
                    Ok(t) => t,
                    Err(m) => {
                        self.refuse(name, "type", m);
                        continue;
                    }
                };
                let qos = Qos {
                    reliability: if *reliable { Reliability::Reliable } else { Reliability::BestEffort },
                    durability: if *tl { Durability::TransientLocal } else { Durability::Volatile },
                    history_depth: Qos::default().history_depth,
                };
                let route = Route {
                    shoal_topic,
                    ros_topic: name.clone(),
                    ros_type: ty,
                    direction: Direction::RosToShoal,
                    qos,
                    shoal_type: None,
                    shoal_descriptor: None,
                };
                changes.extend(self.admit(route));
            }
        }
        if self.cfg.direction.to_ros() {
            for (topic, types) in &shoal {
                let name = default_ros_topic(topic);
                if !self.cfg.matches(&name) || self.taken(&name, topic) {
                    continue;
                }
                let builtin = builtin_of_proto(types[0]).filter(|_| types.iter().all(|t| t.name == types[0].name));
                let route = Route {
                    shoal_topic: topic.to_string(),
                    ros_topic: name,
                    ros_type: RouteType::Builtin(builtin.unwrap_or(RosType::Raw)),
                    direction: Direction::ShoalToRos,
                    qos: Qos::default(),
                    shoal_type: None,
                    shoal_descriptor: None,
                };
                changes.extend(self.admit(route));
            }
        }
        changes
    }

    /// A planned route that could not start: forgotten, and said.
    pub fn failed(&mut self, route: &Route, why: &str) {
        if self.active.remove(&route.ros_topic).is_some() {
            self.added -= 1;
        }
        self.refuse(&route.ros_topic, "start", format!("{}: {why}", route_name(route)));
    }
}

/// The DDS participants that are other bridges', from `ros_discovery_info` (filled by a task on the executor).
pub(crate) type Bridges = Rc<RefCell<HashSet<[u8; 12]>>>;

/// Other bridges' endpoints, whose samples an automatic route drops (counted as `own_ignored`): when two bridges
/// have routes on the same topic, each started for a genuine peer, neither forwards what the other forwarded.
#[derive(Clone, Default)]
pub(crate) struct Foreign {
    /// shoal publisher ids of processes named [`BRIDGE_EXECUTABLE`] (read on shoal's doorbell thread).
    shoal: Arc<RwLock<HashSet<u64>>>,
    /// DDS participants listing a [`MARKER_NODE`].
    dds: Bridges,
}

/// [`Foreign`]'s shoal publisher ids.
pub(crate) struct ForeignPublishers(Arc<RwLock<HashSet<u64>>>);

impl ForeignPublishers {
    /// Whether shoal publisher `id` is a bridge's.
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).contains(&id)
    }
}

impl Foreign {
    /// The shoal publisher ids that are a bridge's, for shoal's doorbell thread.
    pub(crate) fn shoal_publishers(&self) -> ForeignPublishers {
        ForeignPublishers(Arc::clone(&self.shoal))
    }

    /// Whether the DDS writer `gid` is another bridge's.
    pub(crate) fn dds_writer(&self, gid: ros2_client::Gid) -> bool {
        self.dds.borrow().contains(&participant(rustdds::GUID::from(gid)))
    }
}

/// The participant part (GUID prefix) of a DDS GUID.
fn participant(guid: rustdds::GUID) -> [u8; 12] {
    let b = guid.to_bytes();
    std::array::from_fn(|i| b[i])
}

/// Fills `bridges` from the ROS 2 node's discovery events: the participants that list a [`MARKER_NODE`] node.
pub(crate) async fn watch_bridges(events: impl futures::Stream<Item = ros2_client::NodeEvent>, bridges: Bridges) {
    use futures::StreamExt as _;
    futures::pin_mut!(events);
    while let Some(ev) = events.next().await {
        if let ros2_client::NodeEvent::ParticipantEntities(info) = ev
            && info.nodes().iter().any(|n| n.name() == MARKER_NODE)
        {
            bridges.borrow_mut().insert(participant(rustdds::GUID::from(info.gid())));
        }
    }
}

/// How long a remote DDS writer must have been known before it is bridged: its participant's
/// `ros_discovery_info` (which says whether it is a bridge's) arrives through discovery beside the writer.
pub const SETTLE: Duration = Duration::from_secs(1);

/// The automatic routes of a running bridge.
pub(crate) struct AutoRun {
    routes: AutoRoutes,
    foreign: Foreign,
    msg_path: Vec<std::path::PathBuf>,
    /// When each remote DDS writer was first seen.
    first_seen: HashMap<rustdds::GUID, Instant>,
}

impl AutoRun {
    pub(crate) fn new(cfg: AutoConfig, listed: &[Route], bridges: Bridges, msg_path: Vec<std::path::PathBuf>) -> Self {
        let foreign = Foreign { shoal: Arc::default(), dds: bridges };
        let routes = AutoRoutes::new(cfg, listed).with_msg_path(msg_path.clone());
        AutoRun { routes, foreign, msg_path, first_seen: HashMap::new() }
    }

    /// Other bridges' endpoints, for the automatic routes' samples.
    pub(crate) fn foreign(&self) -> Foreign {
        self.foreign.clone()
    }

    /// The counters, for the statistics line.
    pub(crate) fn to_json(&self) -> Value {
        self.routes.to_json()
    }

    /// Starts and stops automatic routes as discovery says (every 250 ms, from the main loop).
    pub(crate) fn poll(
        &mut self,
        dp: &rustdds::DomainParticipant,
        env: &mut StartEnv<'_, '_>,
        running: &mut Vec<Running>,
    ) {
        use rustdds::RTPSEntity as _;
        let own = participant(dp.guid());
        let bridges = self.foreign.dds.borrow().clone();
        let now = Instant::now();
        let discovered: Vec<_> = dp.discovered_writers().into_iter().map(|w| w.publication_topic_data).collect();
        self.first_seen.retain(|g, _| discovered.iter().any(|t| t.key == *g));
        for t in &discovered {
            self.first_seen.entry(t.key).or_insert(now);
        }
        let settled = |g: &rustdds::GUID| self.first_seen.get(g).is_some_and(|t| now.duration_since(*t) >= SETTLE);
        let writers: Vec<SeenWriter> = discovered
            .into_iter()
            .filter(|t| participant(t.key) != own && !bridges.contains(&participant(t.key)))
            .map(|t| SeenWriter {
                dds_topic: t.topic_name,
                dds_type: t.type_name,
                reliable: matches!(t.reliability, Some(rustdds::policy::Reliability::Reliable { .. })),
                transient_local: !matches!(t.durability, None | Some(rustdds::policy::Durability::Volatile)),
                settled: settled(&t.key),
            })
            .collect();
        // This process, as shoal's registration names it (pid and executable path).
        let pid = std::process::id();
        let exe_path = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
        let (bridge_pubs, publishers): (Vec<_>, Vec<_>) = env
            .shoal_node
            .snapshot()
            .topics
            .into_iter()
            .filter(|t| t.direction == shoal::monitor::TopicDirection::Publisher)
            .partition(|t| {
                let exe = std::path::Path::new(&t.process_name).file_name().and_then(|n| n.to_str());
                (t.pid == pid && t.process_name == exe_path) || exe == Some(BRIDGE_EXECUTABLE)
            });
        *self.foreign.shoal.write().unwrap_or_else(|e| e.into_inner()) =
            bridge_pubs.iter().map(|t| t.entity_id).collect();
        let publishers: Vec<SeenPublisher> =
            publishers.into_iter().map(|t| SeenPublisher { topic: t.topic_name, type_info: t.type_info }).collect();
        for change in self.routes.plan(now, &writers, &publishers) {
            match change {
                Change::Add(route) => match crate::bridge::start_route(env, &route, &self.msg_path) {
                    Ok(r) => {
                        tracing::info!(route = %route_name(&route), qos = ?route.qos, "bridging (automatic)");
                        emit(&json!({"event": "route_added", "route": route_name(&route), "shoal": route.shoal_topic,
                                     "ros": route.ros_topic, "type": route.ros_type.to_string(),
                                     "direction": direction_key(route.direction), "qos": qos_json(&route.qos)}));
                        running.push(r);
                    }
                    Err(e) => self.routes.failed(&route, &e.to_string()),
                },
                Change::Remove(route, why) => {
                    // Dropping the Running stops its tasks, which own its subscriber, publisher, reader and writer.
                    running.retain(|r| !r.is_auto_route(&route));
                    tracing::info!(route = %route_name(&route), "automatic route removed: {why}");
                    emit(&json!({"event": "route_removed", "route": route_name(&route), "shoal": route.shoal_topic,
                                 "ros": route.ros_topic, "reason": why}));
                }
            }
        }
    }
}

fn direction_key(d: Direction) -> &'static str {
    match d {
        Direction::ShoalToRos => "shoal_to_ros",
        Direction::RosToShoal => "ros_to_shoal",
        Direction::Both => "both",
    }
}

fn qos_json(q: &Qos) -> Value {
    json!({
        "reliability": if q.reliability == Reliability::Reliable { "reliable" } else { "best_effort" },
        "durability": if q.durability == Durability::TransientLocal { "transient_local" } else { "volatile" },
        "history_depth": q.history_depth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn writer(topic: &str, ty: &str, reliable: bool, tl: bool) -> SeenWriter {
        SeenWriter {
            dds_topic: format!("rt{topic}"),
            dds_type: ty.into(),
            reliable,
            transient_local: tl,
            settled: true,
        }
    }

    fn publisher(topic: &str, t: TypeInfo) -> SeenPublisher {
        SeenPublisher { topic: topic.into(), type_info: t }
    }

    const STRING: &str = "std_msgs::msg::dds_::String_";

    fn added(c: &[Change]) -> Vec<(String, Direction, String)> {
        c.iter()
            .filter_map(|c| match c {
                Change::Add(r) => Some((r.ros_topic.clone(), r.direction, r.ros_type.to_string())),
                Change::Remove(..) => None,
            })
            .collect()
    }

    #[test]
    fn patterns_match_whole_ros_names_allow_then_deny() {
        let mut a = AutoConfig::new("/chat.*|/imu").unwrap();
        assert!(a.matches("/chatter") && a.matches("/imu"));
        assert!(!a.matches("/imu2") && !a.matches("/x/chatter"), "the whole name must match");
        a.deny = Some(Pattern::new(".*secret.*").unwrap());
        assert!(!a.matches("/chat_secret") && a.matches("/chat_open"));
        assert!(Pattern::new("(").is_err());
    }

    #[test]
    fn auto_table_keys_are_checked() {
        let c = Config::from_toml(
            "b.toml",
            "[auto]\nallow = \"/a.*\"\ndeny = \"/ab\"\ndirection = \"ros_to_shoal\"\nmax_routes = 3\ngrace_ms = 0\n",
        )
        .unwrap();
        let a = c.auto.unwrap();
        assert!(a.matches("/ac") && !a.matches("/ab"));
        assert_eq!((a.direction, a.max_routes, a.grace_ms), (Direction::RosToShoal, 3, 0));
        let e = |t: &str| Config::from_toml("b.toml", t).unwrap_err().to_string();
        let x = e("[auto]\nallow = \"(\"\n");
        assert!(x.starts_with("b.toml:2:9: allow = \"(\": not a regular expression"), "{x}");
        let x = e("[auto]\nallow = \".*\"\ndeny = \"[\"\n");
        assert!(x.starts_with("b.toml:3:8: deny = \"[\": not a regular expression"), "{x}");
        let x = e("[auto]\nallow = \".*\"\nmax_routes = 0\n");
        assert!(x.starts_with("b.toml:3:14: max_routes = 0: allowed 1..=10000"), "{x}");
        let x = e("[auto]\nallow = \".*\"\ngrace_ms = -1\n");
        assert!(x.starts_with("b.toml:3:12: grace_ms = -1: allowed 0..=600000"), "{x}");
        let x = e("[auto]\nallow = \".*\"\ndirection = \"up\"\n");
        assert!(x.starts_with("b.toml:3:13: direction = \"up\": allowed shoal_to_ros, ros_to_shoal, both"), "{x}");
        let x = e("[auto]\ndeny = \"x\"\n");
        assert!(x.starts_with("b.toml:1:1:") && x.contains("missing field `allow`"), "{x}");
        let x = e("[auto]\nallow = \".*\"\nmax = 3\n");
        assert!(x.starts_with("b.toml:3:1:") && x.contains("max_routes"), "{x}");
        assert_eq!(Config::from_toml("b.toml", "").unwrap().auto, None);
    }

    #[test]
    fn types_and_qos_follow_the_peers() {
        let mut r = AutoRoutes::new(AutoConfig::new(".*").unwrap(), &[]);
        let now = Instant::now();
        let ws = [
            writer("/chat", STRING, true, true),
            writer("/chat", STRING, false, true),
            writer("/img", "sensor_msgs::msg::dds_::Image_", true, false),
            writer("/blob", "std_msgs::msg::dds_::UInt8MultiArray_", true, false),
            writer("/odd", "foo_msgs::msg::dds_::Odd_", true, false),
            writer("/mixed", STRING, true, false),
            writer("/mixed", "sensor_msgs::msg::dds_::Imu_", true, false),
            SeenWriter {
                dds_topic: "rq/x/_getRequest".into(),
                dds_type: STRING.into(),
                reliable: true,
                transient_local: false,
                settled: true,
            },
        ];
        let ps = [
            publisher("pose", crate::pb::geometry_msgs::Pose::type_info().clone()),
            publisher("bytes", TypeInfo::raw("my.Blob")),
            publisher("other_proto", TypeInfo::new("my.Thing", "proto", vec![1])),
        ];
        use shoal::Message as _;
        let c = r.plan(now, &ws, &ps);
        assert_eq!(
            added(&c),
            vec![
                ("/blob".into(), Direction::RosToShoal, "std_msgs/msg/UInt8MultiArray".into()),
                ("/chat".into(), Direction::RosToShoal, "std_msgs/msg/String".into()),
                ("/img".into(), Direction::RosToShoal, "sensor_msgs/msg/Image".into()),
                ("/bytes".into(), Direction::ShoalToRos, "std_msgs/msg/UInt8MultiArray".into()),
                ("/other_proto".into(), Direction::ShoalToRos, "std_msgs/msg/UInt8MultiArray".into()),
                ("/pose".into(), Direction::ShoalToRos, "geometry_msgs/msg/Pose".into()),
            ]
        );
        let Change::Add(chat) = &c[1] else { panic!() };
        assert_eq!(chat.shoal_topic, "chat");
        // One best_effort writer: the reader is best_effort (it matches both); both transient_local: so is it.
        assert_eq!(chat.qos.reliability, Reliability::BestEffort);
        assert_eq!(chat.qos.durability, Durability::TransientLocal);
        let Change::Add(img) = &c[2] else { panic!() };
        assert_eq!((img.qos.reliability, img.qos.durability), (Reliability::Reliable, Durability::Volatile));
        // /odd (unknown type) and /mixed (two types) refused, once.
        assert_eq!(r.refused(), 2);
        assert!(added(&r.plan(now, &ws, &ps)).is_empty(), "nothing twice");
        assert_eq!(r.refused(), 2, "each refusal said once");
        assert_eq!(r.len(), 6);
    }

    #[test]
    fn the_bound_refuses_counted_once() {
        let mut cfg = AutoConfig::new(".*").unwrap();
        cfg.max_routes = 2;
        let mut r = AutoRoutes::new(cfg, &[]);
        let ws: Vec<SeenWriter> = ["/a", "/b", "/c", "/d"].iter().map(|t| writer(t, STRING, true, false)).collect();
        let now = Instant::now();
        assert_eq!(added(&r.plan(now, &ws, &[])).len(), 2);
        assert_eq!((r.len(), r.refused()), (2, 2), "/c and /d refused");
        assert!(added(&r.plan(now, &ws, &[])).is_empty());
        assert_eq!(r.refused(), 2, "said once");
        assert_eq!(r.to_json()["refused"], 2);
    }

    #[test]
    fn routes_go_after_the_grace_period_and_come_back() {
        let mut cfg = AutoConfig::new(".*").unwrap();
        cfg.grace_ms = 1000;
        let mut r = AutoRoutes::new(cfg, &[]);
        let t0 = Instant::now();
        let ws = [writer("/a", STRING, true, false)];
        let ps = [publisher("b", TypeInfo::raw("x"))];
        assert_eq!(added(&r.plan(t0, &ws, &ps)).len(), 2);
        // /a's writer is gone, b's publisher stays.
        assert!(r.plan(t0 + Duration::from_millis(100), &[], &ps).is_empty(), "within the grace period");
        // Back within the grace period: the clock restarts.
        assert!(r.plan(t0 + Duration::from_millis(900), &ws, &ps).is_empty());
        // /a missing from 1000 on, b from 2000 on: each goes 1000 ms later.
        assert!(r.plan(t0 + Duration::from_millis(1000), &[], &ps).is_empty());
        let gone = |c: Vec<Change>| -> Vec<String> {
            c.into_iter().filter_map(|c| if let Change::Remove(r, _) = c { Some(r.ros_topic) } else { None }).collect()
        };
        assert_eq!(gone(r.plan(t0 + Duration::from_millis(1999), &[], &ps)), Vec::<String>::new());
        assert_eq!(gone(r.plan(t0 + Duration::from_millis(2000), &[], &[])), ["/a"]);
        assert_eq!(gone(r.plan(t0 + Duration::from_millis(2999), &[], &[])), Vec::<String>::new());
        assert_eq!(gone(r.plan(t0 + Duration::from_millis(3000), &[], &[])), ["/b"]);
        assert!(r.is_empty());
        assert_eq!(added(&r.plan(t0 + Duration::from_millis(3100), &ws, &[])).len(), 1, "a new writer: a new route");
        assert_eq!(r.to_json()["removed"], 2);
    }

    #[test]
    fn no_loops_no_duplicates_of_listed_routes() {
        let mut cfg = AutoConfig::new(".*").unwrap();
        cfg.deny = Some(Pattern::new("/denied").unwrap());
        let listed = Config::parse_topic_flag("listed=std_msgs/msg/String,ros=/listed_ros", &[]).unwrap();
        let mut r = AutoRoutes::new(cfg, std::slice::from_ref(&listed));
        let now = Instant::now();
        let ws = [
            writer("/t", STRING, true, false),
            writer("/listed_ros", STRING, true, false),
            writer("/listed", STRING, true, false),
            writer("/denied", STRING, true, false),
        ];
        // A shoal publisher on t (as the route's own would be if it were not filtered, or another program's).
        let ps = [publisher("t", TypeInfo::raw("x")), publisher("listed", TypeInfo::raw("x"))];
        let c = r.plan(now, &ws, &ps);
        assert_eq!(added(&c), vec![("/t".into(), Direction::RosToShoal, "std_msgs/msg/String".into())]);
        // The ROS writer goes, the shoal publisher stays: t is not bridged back while the route lasts.
        let c = r.plan(now + Duration::from_millis(10), &[], &ps);
        assert!(added(&c).is_empty());
        // After the route went, the shoal publisher is bridged the other way.
        let c = r.plan(now + Duration::from_secs(5), &[], &ps);
        assert!(matches!(&c[0], Change::Remove(r, _) if r.ros_topic == "/t"));
        assert_eq!(added(&c), vec![("/t".into(), Direction::ShoalToRos, "std_msgs/msg/UInt8MultiArray".into())]);
    }

    #[test]
    fn only_settled_writers_start_routes_any_keeps_one() {
        let mut r = AutoRoutes::new(AutoConfig::new(".*").unwrap(), &[]);
        let t0 = Instant::now();
        let fresh = SeenWriter { settled: false, ..writer("/a", STRING, true, false) };
        assert!(r.plan(t0, std::slice::from_ref(&fresh), &[]).is_empty(), "not settled yet");
        assert_eq!(added(&r.plan(t0, &[writer("/a", STRING, true, false)], &[])).len(), 1);
        // The writer restarts: the new one, not settled yet, keeps the route past the grace period.
        assert!(r.plan(t0 + Duration::from_secs(5), std::slice::from_ref(&fresh), &[]).is_empty());
        assert!(r.plan(t0 + Duration::from_secs(10), std::slice::from_ref(&fresh), &[]).is_empty());
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_route_that_cannot_start_is_not_tried_again_until_its_peers_come_back() {
        let mut r = AutoRoutes::new(AutoConfig::new(".*").unwrap(), &[]);
        let t0 = Instant::now();
        let ws = [writer("/a", STRING, true, false)];
        let c = r.plan(t0, &ws, &[]);
        let Change::Add(route) = &c[0] else { panic!() };
        r.failed(route, "DDS said no");
        assert_eq!((r.len(), r.refused(), r.to_json()["added"].as_u64()), (0, 1, Some(0)));
        assert!(r.plan(t0, &ws, &[]).is_empty(), "not tried again while the writer stays");
        assert!(r.plan(t0, &[], &[]).is_empty());
        assert_eq!(added(&r.plan(t0, &ws, &[])).len(), 1, "tried again when it comes back");
    }

    #[test]
    fn direction_limits_the_ways() {
        let mut cfg = AutoConfig::new(".*").unwrap();
        cfg.direction = Direction::ShoalToRos;
        let mut r = AutoRoutes::new(cfg, &[]);
        let c = r.plan(Instant::now(), &[writer("/a", STRING, true, false)], &[publisher("b", TypeInfo::raw("x"))]);
        assert_eq!(added(&c), vec![("/b".into(), Direction::ShoalToRos, "std_msgs/msg/UInt8MultiArray".into())]);
    }

    #[test]
    fn a_type_with_a_msg_gets_a_derived_protobuf_and_carries_the_same_cdr() {
        use shoal::Message as _;
        let demo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/demo/msg");
        let mut r = AutoRoutes::new(AutoConfig::new(".*").unwrap(), &[]).with_msg_path(vec![demo.clone()]);
        let ws = [
            writer("/tele", "demo_msgs::msg::dds_::Telemetry_", true, false),
            writer("/nomsg", "demo_msgs::msg::dds_::Missing_", true, false),
        ];
        let c = r.plan(Instant::now(), &ws, &[]);
        assert_eq!(
            added(&c),
            vec![("/tele".into(), Direction::RosToShoal, "demo_msgs/msg/Telemetry as demo_msgs.Telemetry".into())]
        );
        assert_eq!(r.refused(), 1, "no .msg for Missing: refused");
        let Change::Add(route) = &c[0] else { panic!() };
        let RouteType::Generic(derived) = &route.ros_type else { panic!("a generic mapping") };
        assert_eq!(route.ros_type.dds_name(), "demo_msgs::msg::dds_::Telemetry_");
        assert_eq!(
            (derived.type_info().name.as_str(), derived.type_info().encoding.as_str()),
            ("demo_msgs.Telemetry", "proto")
        );
        // A Telemetry sample's CDR, made through the hand-written demo.proto mapping, reads through the derived one
        // and is written back byte for byte; the shoal payload decodes with the announced descriptor.
        let mut reg = MsgRegistry::new(vec![demo]);
        let ros = MsgName::parse("demo_msgs/msg/Telemetry").unwrap();
        let ti = crate::pb::demo::Telemetry::type_info();
        let by_hand = Mapping::new(&mut reg, &ros, &ti.name, ti.descriptor.clone()).unwrap();
        let payload = prost::Message::encode_to_vec(&crate::testdata::telemetry(7, 100));
        let cdr = crate::to_cdr(&by_hand.from_proto(&payload).unwrap()).unwrap();
        let msg = derived.decode_cdr(&cdr).unwrap();
        let shoal_payload = msg.encode_proto();
        assert_eq!(crate::to_cdr(&derived.from_proto(&shoal_payload).unwrap()).unwrap(), cdr);
        let json = shoal::dynamic::decode_to_json(derived.type_info(), &shoal_payload).unwrap();
        assert_eq!(json["header"]["frame_id"], "base_link", "{json}");
        assert_eq!(json["name"], "rover 7", "{json}");
        // wstring has no protobuf counterpart.
        let mut reg = MsgRegistry::new(Vec::new());
        let w = MsgName::parse("x_msgs/msg/W").unwrap();
        reg.add_text(w.clone(), "wstring name\n");
        assert!(derive_proto(&mut reg, &w).unwrap_err().contains("wstring"));
    }

    #[test]
    fn name_helpers() {
        assert_eq!(ros_topic_of("rt/a/b").as_deref(), Some("/a/b"));
        assert_eq!(ros_topic_of("rq/a/bRequest"), None);
        assert_eq!(ros_topic_of("ros_discovery_info"), None);
        assert_eq!(builtin_of_dds("sensor_msgs::msg::dds_::Imu_"), Some(RosType::Imu));
        assert_eq!(builtin_of_dds("foo::msg::dds_::Bar_"), None);
        assert_eq!(builtin_of_proto(&TypeInfo::new("sensor_msgs.Imu", "proto", vec![])), Some(RosType::Imu));
        assert_eq!(builtin_of_proto(&TypeInfo::raw("sensor_msgs.Imu")), None);
    }
}
