//! Generic mapping: any protobuf message ⇄ any ROS 2 message type read from a `.msg` file ([`crate::msgdef`]),
//! matched by field name and checked once, when the bridge starts, and again for each other protobuf type a shoal
//! publisher of the route announces later ([`Remapper`]: a publisher restarted with a changed message). The CDR bytes (XCDR1, as ROS 2 over DDS uses
//! it) are written and read by walking the parsed `.msg` through `cdr-encoding`'s serde serializer, the same
//! code RustDDS uses for the built-in types, so alignment follows the same rules.
//!
//! # Rules
//!
//! Every ROS field needs a protobuf field of the same name and every protobuf field a ROS field, recursively;
//! the first field (in `.msg` order, then the protobuf fields the ROS type lacks) that does not fit is named in
//! the error, as a path like `pose.position.w`.
//!
//! | ROS 2 field | protobuf field |
//! |---|---|
//! | `bool` | `bool` |
//! | integer (`int8`…`uint64`, `byte`, `char` = 8-bit unsigned) | an integer type (or enum, as int32) able to hold every value of the ROS type: e.g. `uint8` ← `uint32`, `int64`, `fixed32`…; `int64` ← `int64`, `sint64`, `sfixed64` only; `uint64` ← `uint64`, `fixed64` only |
//! | `float32` | `float` |
//! | `float64` | `double` |
//! | `string`, `string<=N` | `string` |
//! | a nested message | a message field, mapped by the same rules |
//! | `T[N]`, `T[]`, `T[<=N]` | `repeated` of a type allowed for `T` |
//! | `uint8`/`byte`/`char` arrays | also `bytes` |
//! | `T[<=1]` | also a single field with presence (proto3 `optional`, a message field, a `oneof` member) of a type allowed for `T`: present is one element, absent none |
//!
//! Not mapped: `wstring`, protobuf `map<>` fields, and anything else (integers to floats, `float` to `float64`,
//! a repeated field to a single ROS value, …). ROS 2 messages have no optional fields and no unions; their idiom for
//! "maybe one" is `T[<=1]`, which carries protobuf presence both ways. A proto3 `optional` field mapped to a plain
//! `T` loses its presence (an unset field is sent as its default). A `oneof` maps member by member, each to its own
//! ROS field: to `T[<=1]` the one set is the one present; a ROS message that gives more than one member of a
//! `oneof` keeps the last in the `.msg` order (a protobuf `oneof` holds one).
//!
//! ROS → protobuf never loses a value (the protobuf type holds every value of the ROS type). protobuf → ROS checks
//! each message: an integer outside the ROS type's range, a string longer than its bound, a bounded sequence
//! with too many elements, or a fixed array with another number of elements than `N` (an empty one is sent as
//! `N` default values) makes the message bad input, dropped and counted with the field's path.

use std::fmt;
use std::sync::Arc;

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, Value};
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::{self, SerializeTuple};
use serde::{Serialize, Serializer};
use shoal::TypeInfo;

use crate::msgdef::{Array, Base, MsgDef, MsgError, MsgName, MsgRegistry, Prim};

/// Why a protobuf message and a ROS 2 type cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenericError {
    /// The ROS type's definition is missing or malformed.
    #[error(transparent)]
    Msg(#[from] MsgError),
    /// The protobuf descriptor is unusable or lacks the message.
    #[error("protobuf descriptor: {0}")]
    Descriptor(String),
    /// A field does not match.
    #[error("{path}: {message}")]
    Field {
        /// The field's path from the top message, e.g. `pose.position.w`.
        path: String,
        /// What is wrong and what was expected.
        message: String,
    },
}

/// How a protobuf integer field's values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PInt {
    I32,
    I64,
    U32,
    U64,
    Enum,
}

impl PInt {
    fn of(kind: &Kind) -> Option<PInt> {
        Some(match kind {
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => PInt::I32,
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => PInt::I64,
            Kind::Uint32 | Kind::Fixed32 => PInt::U32,
            Kind::Uint64 | Kind::Fixed64 => PInt::U64,
            Kind::Enum(_) => PInt::Enum,
            _ => return None,
        })
    }

    fn range(self) -> (i128, i128) {
        match self {
            PInt::I32 | PInt::Enum => (i32::MIN.into(), i32::MAX.into()),
            PInt::I64 => (i64::MIN.into(), i64::MAX.into()),
            PInt::U32 => (0, u32::MAX.into()),
            PInt::U64 => (0, u64::MAX.into()),
        }
    }

    fn value(self, x: i128) -> Option<Value> {
        Some(match self {
            PInt::I32 => Value::I32(i32::try_from(x).ok()?),
            PInt::Enum => Value::EnumNumber(i32::try_from(x).ok()?),
            PInt::I64 => Value::I64(i64::try_from(x).ok()?),
            PInt::U32 => Value::U32(u32::try_from(x).ok()?),
            PInt::U64 => Value::U64(u64::try_from(x).ok()?),
        })
    }
}

fn int_of(v: &Value) -> Option<i128> {
    Some(match v {
        Value::I32(x) | Value::EnumNumber(x) => (*x).into(),
        Value::I64(x) => (*x).into(),
        Value::U32(x) => (*x).into(),
        Value::U64(x) => (*x).into(),
        _ => return None,
    })
}

/// The element of a mapped field.
#[derive(Debug)]
enum Elem {
    Bool,
    Int(Prim, PInt),
    F32,
    F64,
    Str(Option<usize>),
    /// protobuf `bytes` ⇄ a ROS array of 8-bit values.
    Bytes,
    Msg(Arc<Plan>),
}

impl Elem {
    /// The fewest CDR bytes one element takes (alignment aside): a sequence length is checked against it before
    /// anything is allocated.
    fn min_wire_size(&self) -> usize {
        match self {
            Elem::Bool => 1,
            Elem::F32 => 4,
            Elem::F64 => 8,
            Elem::Int(p, _) => match p {
                Prim::Int16 | Prim::Uint16 => 2,
                Prim::Int32 | Prim::Uint32 | Prim::Float32 => 4,
                Prim::Int64 | Prim::Uint64 | Prim::Float64 => 8,
                Prim::Bool | Prim::Byte | Prim::Char | Prim::Int8 | Prim::Uint8 => 1,
            },
            // A length (the text's bytes are checked by the CDR reader against what is there).
            Elem::Str(_) | Elem::Bytes => 4,
            Elem::Msg(plan) => plan.min_wire_size,
        }
    }
}

#[derive(Debug)]
struct FieldPlan {
    name: String,
    fd: FieldDescriptor,
    elem: Elem,
    array: Array,
    /// A protobuf field with presence (proto3 `optional`, a message, a `oneof` member) as a ROS `T[<=1]`: present
    /// is one element, absent none.
    optional: bool,
}

/// One message's mapping: the ROS fields in wire order, each with its protobuf field.
#[derive(Debug)]
struct Plan {
    ros: MsgName,
    proto: MessageDescriptor,
    fields: Vec<FieldPlan>,
    /// The fewest CDR bytes a message of this plan takes.
    min_wire_size: usize,
}

impl Plan {
    fn new(ros: MsgName, proto: MessageDescriptor, fields: Vec<FieldPlan>) -> Plan {
        let size = fields.iter().fold(0usize, |sum, f| {
            let one = match (f.array, &f.elem) {
                (Array::Single, e) => e.min_wire_size(),
                (Array::Fixed(n), Elem::Bytes) => n,
                (Array::Fixed(n), e) => n.saturating_mul(e.min_wire_size()),
                (Array::Bounded(_) | Array::Unbounded, _) => 4,
            };
            sum.saturating_add(one)
        });
        // A message without fields is one uint8 on the wire.
        Plan { ros, proto, fields, min_wire_size: size.max(1) }
    }
}

fn proto_kind_name(fd: &FieldDescriptor) -> String {
    let k = match fd.kind() {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 => "int32".into(),
        Kind::Int64 => "int64".into(),
        Kind::Uint32 => "uint32".into(),
        Kind::Uint64 => "uint64".into(),
        Kind::Sint32 => "sint32".into(),
        Kind::Sint64 => "sint64".into(),
        Kind::Fixed32 => "fixed32".into(),
        Kind::Fixed64 => "fixed64".into(),
        Kind::Sfixed32 => "sfixed32".into(),
        Kind::Sfixed64 => "sfixed64".into(),
        Kind::Bool => "bool".into(),
        Kind::String => "string".into(),
        Kind::Bytes => "bytes".into(),
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => format!("enum {}", e.full_name()),
    };
    if fd.is_map() {
        "map".into()
    } else if fd.is_list() {
        format!("repeated {k}")
    } else {
        k
    }
}

/// The protobuf types allowed for a ROS integer type.
fn ints_for(p: Prim) -> String {
    let (lo, hi) = p.int_range().unwrap_or((0, 0));
    let fits = |(a, b): (i128, i128)| a <= lo && b >= hi;
    let mut v = Vec::new();
    for (names, r) in [
        ("int32, sint32, sfixed32, enum", PInt::I32.range()),
        ("uint32, fixed32", PInt::U32.range()),
        ("int64, sint64, sfixed64", PInt::I64.range()),
        ("uint64, fixed64", PInt::U64.range()),
    ] {
        if fits(r) {
            v.push(names);
        }
    }
    v.join(", ")
}

struct Ctx<'a> {
    reg: &'a MsgRegistry,
}

impl Ctx<'_> {
    fn plan(&self, def: &MsgDef, proto: &MessageDescriptor, prefix: &str) -> Result<Plan, GenericError> {
        let path = |n: &str| if prefix.is_empty() { n.to_string() } else { format!("{prefix}.{n}") };
        let mut fields = Vec::new();
        for f in &def.fields {
            let p = path(&f.name);
            let err = |message: String| GenericError::Field { path: p.clone(), message };
            let Some(fd) = proto.get_field_by_name(&f.name) else {
                return Err(err(format!(
                    "the ROS field ({} in {}) has no protobuf field of that name in {}",
                    f.type_text(),
                    def.name,
                    proto.full_name()
                )));
            };
            let got = proto_kind_name(&fd);
            let mismatch = |expected: String| {
                err(format!("protobuf {got} cannot carry ROS {} ({}); expected {expected}", f.type_text(), def.name))
            };
            if fd.is_map() {
                return Err(mismatch("no map: ROS 2 has no map type".into()));
            }
            let kind = fd.kind();
            let is_8bit = matches!(f.base, Base::Prim(Prim::Uint8 | Prim::Byte | Prim::Char));
            if f.array != Array::Single && is_8bit && kind == Kind::Bytes && !fd.is_list() {
                fields.push(FieldPlan { name: f.name.clone(), fd, elem: Elem::Bytes, array: f.array, optional: false });
                continue;
            }
            // ROS has no optional field; its idiom is a sequence of at most one element.
            let optional = f.array == Array::Bounded(1) && !fd.is_list() && fd.supports_presence();
            let rep = if f.array == Array::Single || optional { "" } else { "repeated " };
            if !optional && fd.is_list() != (f.array != Array::Single) {
                let expected = match &f.base {
                    Base::Prim(p) if p.int_range().is_some() => format!("{rep}one of {}", ints_for(*p)),
                    _ => format!("{rep}{}", expected_single(&f.base)),
                };
                let expected =
                    if is_8bit && f.array != Array::Single { format!("bytes or {expected}") } else { expected };
                let expected = if f.array == Array::Bounded(1) {
                    format!("{expected}, or the same with presence (proto3 optional, a message, a oneof member)")
                } else {
                    expected
                };
                return Err(mismatch(expected));
            }
            let elem = match (&f.base, &kind) {
                (Base::Prim(Prim::Bool), Kind::Bool) => Elem::Bool,
                (Base::Prim(Prim::Float32), Kind::Float) => Elem::F32,
                (Base::Prim(Prim::Float64), Kind::Double) => Elem::F64,
                (Base::Prim(p), k) if p.int_range().is_some() => {
                    let (lo, hi) = p.int_range().unwrap_or((0, 0));
                    match PInt::of(k) {
                        Some(pi) if pi.range().0 <= lo && pi.range().1 >= hi => Elem::Int(*p, pi),
                        _ => {
                            let also = if is_8bit && f.array != Array::Single { "bytes or " } else { "" };
                            return Err(mismatch(format!(
                                "{also}{rep}one of {} (a protobuf type that holds every {} value)",
                                ints_for(*p),
                                p.name()
                            )));
                        }
                    }
                }
                (Base::String(bound), Kind::String) => Elem::Str(*bound),
                (Base::WString(_), _) => {
                    return Err(err(format!(
                        "ROS {} ({}): wstring is not supported by the bridge",
                        f.type_text(),
                        def.name
                    )));
                }
                (Base::Msg(inner), Kind::Message(pm)) => {
                    let inner_def = self.reg.get(inner).ok_or_else(|| err(format!("{inner}: not resolved")))?;
                    Elem::Msg(Arc::new(self.plan(&inner_def, pm, &p)?))
                }
                (base, _) => return Err(mismatch(format!("{rep}{}", expected_single(base)))),
            };
            fields.push(FieldPlan { name: f.name.clone(), fd, elem, array: f.array, optional });
        }
        for fd in proto.fields() {
            if !def.fields.iter().any(|f| f.name == fd.name()) {
                return Err(GenericError::Field {
                    path: path(fd.name()),
                    message: format!(
                        "no such field in {} (protobuf {} {} has it, as {})",
                        def.name,
                        proto.full_name(),
                        fd.name(),
                        proto_kind_name(&fd)
                    ),
                });
            }
        }
        Ok(Plan::new(def.name.clone(), proto.clone(), fields))
    }
}

fn expected_single(base: &Base) -> String {
    match base {
        Base::Prim(Prim::Bool) => "bool".into(),
        Base::Prim(Prim::Float32) => "float".into(),
        Base::Prim(Prim::Float64) => "double".into(),
        Base::Prim(p) => format!("one of {}", ints_for(*p)),
        Base::String(_) => "string".into(),
        Base::WString(_) => "nothing (wstring is not supported)".into(),
        Base::Msg(m) => format!("a message mapped to {m}"),
    }
}

/// A checked mapping between protobuf message `proto_name` and ROS 2 type `ros`.
pub struct Mapping {
    ros: MsgName,
    type_info: TypeInfo,
    plan: Arc<Plan>,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapping({} <-> {})", self.type_info.name, self.ros)
    }
}

impl PartialEq for Mapping {
    fn eq(&self, other: &Self) -> bool {
        self.ros == other.ros && self.type_info == other.type_info
    }
}
impl Eq for Mapping {}

impl Mapping {
    /// Checks that protobuf message `proto_name` of the serialized `FileDescriptorSet` `descriptor` maps to ROS
    /// type `ros` (found with `reg`); the error names the first field that does not.
    pub fn new(
        reg: &mut MsgRegistry,
        ros: &MsgName,
        proto_name: &str,
        descriptor: Vec<u8>,
    ) -> Result<Mapping, GenericError> {
        // Descriptors come from other processes (a shoal publisher's announcement): read them as shoal's tools do,
        // with the checks that keep prost-reflect from panicking on sets protoc would not make.
        let type_info = TypeInfo::new(proto_name, "proto", descriptor);
        let proto = match shoal::dynamic::DynamicDecoder::new(&type_info) {
            Ok(d) => d.message_descriptor().cloned(),
            Err(shoal::dynamic::DynamicError::UnknownType(_)) => None,
            Err(e) => return Err(GenericError::Descriptor(e.to_string())),
        }
        .ok_or_else(|| GenericError::Descriptor(format!("it defines no message {proto_name}")))?;
        let def = reg.resolve(ros)?;
        let plan = Ctx { reg }.plan(&def, &proto, "")?;
        Ok(Mapping { ros: ros.clone(), type_info, plan: Arc::new(plan) })
    }

    /// The ROS 2 type.
    pub fn ros_name(&self) -> &MsgName {
        &self.ros
    }

    /// What the shoal side announces: the protobuf message, encoding `proto`, the descriptor.
    pub fn type_info(&self) -> &TypeInfo {
        &self.type_info
    }

    /// Decodes a protobuf payload and checks that it fits the ROS type (ranges, bounds, fixed lengths).
    pub fn from_proto(&self, payload: &[u8]) -> Result<DynRos, ProtoError> {
        let msg = DynamicMessage::decode(self.plan.proto.clone(), payload).map_err(|e| {
            ProtoError::Decode(format!("{} bytes are not a {}: {e}", payload.len(), self.type_info.name))
        })?;
        check(&self.plan, &msg, "").map_err(ProtoError::Range)?;
        Ok(DynRos { plan: self.plan.clone(), msg })
    }

    /// The protobuf message `msg` as a ROS message of this mapping (checked as [`Mapping::from_proto`] does).
    pub fn from_message(&self, msg: DynamicMessage) -> Result<DynRos, ProtoError> {
        if prost_reflect::ReflectMessage::descriptor(&msg) != self.plan.proto {
            return Err(ProtoError::Decode(format!("not a {}", self.type_info.name)));
        }
        check(&self.plan, &msg, "").map_err(ProtoError::Range)?;
        Ok(DynRos { plan: self.plan.clone(), msg })
    }

    /// Reads a sample's bytes (the 4-byte encapsulation header `00 01 00 00`, CDR little-endian, then the
    /// message), as the bridge's DDS reader does.
    pub fn decode_cdr(&self, bytes: &[u8]) -> Result<DynRos, String> {
        let body = bytes.strip_prefix(&[0, 1, 0, 0]).ok_or("not CDR little-endian (encapsulation 00 01)")?;
        self.decode_cdr_body(body)
    }

    /// Reads a message's CDR little-endian bytes without the encapsulation header (a service message after its
    /// request header, `crate::services`).
    pub fn decode_cdr_body(&self, body: &[u8]) -> Result<DynRos, String> {
        let mut d = cdr_encoding::CdrDeserializer::<byteorder::LittleEndian>::new(body);
        DynSeed { plan: self.plan.clone(), max_bytes: body.len() }.deserialize(&mut d).map_err(|e| e.to_string())
    }

    /// The deserializer of this mapping's CDR samples, of any size. Where a deserializer announces a sequence's
    /// length, it is checked against the sample's size if known ([`Mapping::decode_cdr`]) and the elements
    /// reserved ahead of their arrival are bounded ([`MAX_RESERVE`]); cdr-encoding 0.11 (RustDDS's) announces
    /// none, so elements are read one by one and a length beyond the sample ends at its last byte.
    pub fn seed(&self) -> DynSeed {
        DynSeed { plan: self.plan.clone(), max_bytes: usize::MAX }
    }
}

/// Protobuf types a route keeps mappings of besides its own ([`Remapper`]); an older one is forgotten for a newer.
pub const MAX_ANNOUNCED_TYPES: usize = 16;

/// The mappings of the protobuf types a route's shoal publishers announce, to the route's ROS type: a publisher
/// that restarts with a changed message (fields renumbered, renamed, or another message that still maps) is read
/// through the descriptor it announces now, checked once, instead of through the one the route started with.
pub struct Remapper {
    ros: MsgName,
    reg: std::sync::Mutex<MsgRegistry>,
    /// Types seen (name, encoding, descriptor) and their mapping, or why they do not map; newest last.
    known: std::sync::Mutex<std::collections::VecDeque<(TypeInfo, Announced)>>,
    /// When the mappings of the last minute were made (at most [`MAX_NEW_TYPES_PER_MINUTE`]).
    made: std::sync::Mutex<std::collections::VecDeque<std::time::Instant>>,
}

/// New announced types a route checks per minute at most: a publisher cycling through more types than a route
/// keeps ([`MAX_ANNOUNCED_TYPES`]) would otherwise make every sample compile a descriptor. Beyond it a sample of a
/// type not kept is refused (counted as `type_changed`) until the minute has passed.
pub const MAX_NEW_TYPES_PER_MINUTE: usize = 32;

/// An announced type's mapping, or why it does not map.
type Announced = Result<Arc<Mapping>, String>;

/// What [`Remapper::mapping_for`] found for a sample's announced type.
#[derive(Debug)]
pub enum Remapped {
    /// The route's own mapping reads it.
    Route,
    /// A mapping of the announced type; `first` the first time this type was seen (log it).
    Other {
        /// The mapping.
        mapping: Arc<Mapping>,
        /// Seen for the first time.
        first: bool,
    },
    /// The announced type does not map to the route's ROS type (the error names the field); `first` as above.
    Refused {
        /// Why.
        reason: String,
        /// Seen for the first time.
        first: bool,
    },
}

impl fmt::Debug for Remapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Remapper(to {})", self.ros)
    }
}

impl Remapper {
    /// Mappings to ROS type `ros`, its definition found with `reg`.
    pub fn new(ros: MsgName, reg: MsgRegistry) -> Remapper {
        Remapper {
            ros,
            reg: std::sync::Mutex::new(reg),
            known: std::sync::Mutex::new(std::collections::VecDeque::new()),
            made: std::sync::Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// How a sample announced as `announced` is read on a route whose own mapping is `route`: through the route's
    /// mapping when the announcement is the route's type or carries no protobuf descriptor (a raw eCAL publisher
    /// states nothing); otherwise through a mapping of the announced descriptor, made and checked the first time
    /// it is seen.
    pub fn mapping_for(&self, route: &Mapping, announced: &TypeInfo) -> Remapped {
        if announced == route.type_info() || announced.encoding != "proto" || announced.descriptor.is_empty() {
            return Remapped::Route;
        }
        let mut known = self.known.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, r)) = known.iter().find(|(t, _)| t == announced) {
            return match r {
                Ok(m) => Remapped::Other { mapping: Arc::clone(m), first: false },
                Err(e) => Remapped::Refused { reason: e.clone(), first: false },
            };
        }
        {
            let now = std::time::Instant::now();
            let mut made = self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while made.front().is_some_and(|t| now.duration_since(*t) >= std::time::Duration::from_secs(60)) {
                made.pop_front();
            }
            if made.len() >= MAX_NEW_TYPES_PER_MINUTE {
                return Remapped::Refused {
                    reason: format!(
                        "{} announced: more than {MAX_NEW_TYPES_PER_MINUTE} new types within a minute on this \
                         route, not checked",
                        announced.name
                    ),
                    first: false,
                };
            }
            made.push_back(now);
        }
        let made = {
            let mut reg = self.reg.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            Mapping::new(&mut reg, &self.ros, &announced.name, announced.descriptor.clone())
        };
        let made = made.map(Arc::new).map_err(|e| e.to_string());
        if known.len() == MAX_ANNOUNCED_TYPES {
            known.pop_front();
        }
        known.push_back((announced.clone(), made.clone()));
        match made {
            Ok(mapping) => Remapped::Other { mapping, first: true },
            Err(reason) => Remapped::Refused { reason, first: true },
        }
    }
}

/// A protobuf payload the ROS type cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// Not a protobuf message of the mapped type.
    #[error("{0}")]
    Decode(String),
    /// A value does not fit the ROS field.
    #[error("{0}")]
    Range(String),
}

fn check(plan: &Plan, msg: &DynamicMessage, prefix: &str) -> Result<(), String> {
    for f in &plan.fields {
        let path = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}.{}", f.name) };
        let v = msg.get_field(&f.fd);
        let len = match (&*v, &f.elem) {
            (Value::Bytes(b), Elem::Bytes) => Some(b.len()),
            (Value::List(l), _) => Some(l.len()),
            _ => None,
        };
        match (f.array, len) {
            (Array::Fixed(n), Some(l)) if l != n && l != 0 => {
                return Err(format!("{path}: {l} elements, the ROS type {} has exactly {n} (or give none)", plan.ros));
            }
            (Array::Bounded(n), Some(l)) if l > n => {
                return Err(format!("{path}: {l} elements, the ROS type {} allows at most {n}", plan.ros));
            }
            _ => {}
        }
        let one = |v: &Value, path: &str| -> Result<(), String> {
            match (&f.elem, v) {
                (Elem::Int(p, _), v) => {
                    let x = int_of(v).unwrap_or(0);
                    let (lo, hi) = p.int_range().unwrap_or((0, 0));
                    if x < lo || x > hi {
                        return Err(format!("{path}: {x} does not fit the ROS type {}", p.name()));
                    }
                }
                (Elem::Str(Some(n)), Value::String(s)) if s.len() > *n => {
                    return Err(format!("{path}: a string of {} bytes, the ROS type allows at most {n}", s.len()));
                }
                (Elem::Msg(inner), Value::Message(m)) => check(inner, m, path)?,
                _ => {}
            }
            Ok(())
        };
        match &*v {
            Value::List(items) => {
                for (i, item) in items.iter().enumerate() {
                    one(item, &format!("{path}[{i}]"))?;
                }
            }
            v => one(v, &path)?,
        }
    }
    Ok(())
}

/// A message of a generic mapping: the protobuf message, written and read as the ROS type's CDR.
pub struct DynRos {
    plan: Arc<Plan>,
    /// The protobuf message.
    pub msg: DynamicMessage,
}

impl fmt::Debug for DynRos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} as {}: {:?}", self.plan.proto.full_name(), self.plan.ros, self.msg)
    }
}

impl DynRos {
    /// The protobuf encoding of the message.
    pub fn encode_proto(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(&self.msg)
    }
}

impl Serialize for DynRos {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        MsgSer { plan: &self.plan, msg: &self.msg }.serialize(s)
    }
}

struct MsgSer<'a> {
    plan: &'a Plan,
    msg: &'a DynamicMessage,
}

impl Serialize for MsgSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.plan.fields.is_empty() {
            // ROS 2 gives a message without fields one uint8 member (rosidl's structure_needs_at_least_one_member).
            return s.serialize_u8(0);
        }
        let mut t = s.serialize_tuple(self.plan.fields.len())?;
        for f in &self.plan.fields {
            if f.optional {
                let v = self.msg.has_field(&f.fd).then(|| self.msg.get_field(&f.fd));
                t.serialize_element(&OptionalSer { f, v: v.as_deref() })?;
                continue;
            }
            let v = self.msg.get_field(&f.fd);
            t.serialize_element(&FieldSer { f, v: &v })?;
        }
        t.end()
    }
}

struct FieldSer<'a> {
    f: &'a FieldPlan,
    v: &'a Value,
}

impl Serialize for FieldSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let f = self.f;
        match (f.array, self.v) {
            (Array::Single, v) => ElemSer { elem: &f.elem, v }.serialize(s),
            (Array::Fixed(n), Value::Bytes(b)) => {
                let mut t = s.serialize_tuple(n)?;
                for k in 0..n {
                    t.serialize_element(&b.get(k).copied().unwrap_or(0))?;
                }
                t.end()
            }
            (_, Value::Bytes(b)) => s.serialize_bytes(b),
            (Array::Fixed(n), Value::List(items)) => {
                let mut t = s.serialize_tuple(n)?;
                if items.is_empty() {
                    let d = f.fd.kind().default_value();
                    for _ in 0..n {
                        t.serialize_element(&ElemSer { elem: &f.elem, v: &d })?;
                    }
                } else {
                    for v in items {
                        t.serialize_element(&ElemSer { elem: &f.elem, v })?;
                    }
                }
                t.end()
            }
            (_, Value::List(items)) => {
                use serde::ser::SerializeSeq;
                let mut q = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    q.serialize_element(&ElemSer { elem: &f.elem, v })?;
                }
                q.end()
            }
            (_, v) => Err(ser::Error::custom(format!("field {}: {v:?} is not a list", f.name))),
        }
    }
}

/// A field with presence as a ROS `T[<=1]`: one element when present, none when not.
struct OptionalSer<'a> {
    f: &'a FieldPlan,
    v: Option<&'a Value>,
}

impl Serialize for OptionalSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut q = s.serialize_seq(Some(usize::from(self.v.is_some())))?;
        if let Some(v) = self.v {
            q.serialize_element(&ElemSer { elem: &self.f.elem, v })?;
        }
        q.end()
    }
}

struct ElemSer<'a> {
    elem: &'a Elem,
    v: &'a Value,
}

impl Serialize for ElemSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let bad = || ser::Error::custom(format!("{:?} does not fit {:?}", self.v, self.elem));
        match (self.elem, self.v) {
            (Elem::Bool, Value::Bool(b)) => s.serialize_bool(*b),
            (Elem::F32, Value::F32(x)) => s.serialize_f32(*x),
            (Elem::F64, Value::F64(x)) => s.serialize_f64(*x),
            (Elem::Str(_), Value::String(x)) => s.serialize_str(x),
            (Elem::Msg(plan), Value::Message(m)) => MsgSer { plan, msg: m }.serialize(s),
            (Elem::Int(p, _), v) => {
                let x = int_of(v).ok_or_else(bad)?;
                match p {
                    Prim::Int8 => s.serialize_i8(i8::try_from(x).map_err(|_| bad())?),
                    Prim::Uint8 | Prim::Byte | Prim::Char => s.serialize_u8(u8::try_from(x).map_err(|_| bad())?),
                    Prim::Int16 => s.serialize_i16(i16::try_from(x).map_err(|_| bad())?),
                    Prim::Uint16 => s.serialize_u16(u16::try_from(x).map_err(|_| bad())?),
                    Prim::Int32 => s.serialize_i32(i32::try_from(x).map_err(|_| bad())?),
                    Prim::Uint32 => s.serialize_u32(u32::try_from(x).map_err(|_| bad())?),
                    Prim::Int64 => s.serialize_i64(i64::try_from(x).map_err(|_| bad())?),
                    Prim::Uint64 => s.serialize_u64(u64::try_from(x).map_err(|_| bad())?),
                    Prim::Bool | Prim::Float32 | Prim::Float64 => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }
}

/// Reads a generic mapping's CDR sample into its protobuf message (the `DeserializeSeed` ros2-client's
/// subscription takes).
#[derive(Clone)]
pub struct DynSeed {
    plan: Arc<Plan>,
    /// The sample's size, bytes, where known (else `usize::MAX`): no sequence may claim more elements than fit.
    max_bytes: usize,
}

impl fmt::Debug for DynSeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DynSeed({})", self.plan.ros)
    }
}

impl<'de> DeserializeSeed<'de> for DynSeed {
    type Value = DynRos;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<DynRos, D::Error> {
        let msg = MsgSeed(&self.plan, self.max_bytes).deserialize(d)?;
        Ok(DynRos { plan: self.plan, msg })
    }
}

struct MsgSeed<'a>(&'a Plan, usize);

impl<'de> DeserializeSeed<'de> for MsgSeed<'_> {
    type Value = DynamicMessage;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<DynamicMessage, D::Error> {
        if self.0.fields.is_empty() {
            d.deserialize_u8(NumV)?;
            return Ok(DynamicMessage::new(self.0.proto.clone()));
        }
        d.deserialize_tuple(self.0.fields.len(), MsgV(self.0, self.1))
    }
}

struct MsgV<'a>(&'a Plan, usize);

impl<'de> Visitor<'de> for MsgV<'_> {
    type Value = DynamicMessage;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {}", self.0.ros)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DynamicMessage, A::Error> {
        let mut m = DynamicMessage::new(self.0.proto.clone());
        for (i, f) in self.0.fields.iter().enumerate() {
            let v = seq.next_element_seed(FieldSeed(f, self.1))?.ok_or_else(|| de::Error::invalid_length(i, &self))?;
            match (f.optional, v) {
                // Present: its one element; absent: left unset.
                (true, Value::List(mut one)) => {
                    if let Some(x) = one.pop() {
                        m.set_field(&f.fd, x);
                    }
                }
                (_, v) => m.set_field(&f.fd, v),
            }
        }
        Ok(m)
    }
}

struct FieldSeed<'a>(&'a FieldPlan, usize);

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let (f, max_bytes) = (self.0, self.1);
        if f.optional {
            return d.deserialize_seq(ListV { elem: &f.elem, bound: Some(1), max_bytes });
        }
        match (f.array, &f.elem) {
            (Array::Single, e) => ElemSeed(e, max_bytes).deserialize(d),
            (Array::Fixed(n), Elem::Bytes) => d.deserialize_tuple(n, BytesV { bound: None }),
            (Array::Bounded(n), Elem::Bytes) => d.deserialize_byte_buf(BytesV { bound: Some(n) }),
            (_, Elem::Bytes) => d.deserialize_byte_buf(BytesV { bound: None }),
            (Array::Fixed(n), e) => d.deserialize_tuple(n, ListV { elem: e, bound: None, max_bytes }),
            (Array::Bounded(n), e) => d.deserialize_seq(ListV { elem: e, bound: Some(n), max_bytes }),
            (Array::Unbounded, e) => d.deserialize_seq(ListV { elem: e, bound: None, max_bytes }),
        }
    }
}

/// Sequence elements reserved up front at most (a sample's length field cannot make the bridge allocate more
/// than this before the elements are actually there).
const MAX_RESERVE: usize = 4096;

struct BytesV {
    bound: Option<usize>,
}

impl<'de> Visitor<'de> for BytesV {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("8-bit values")
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Value, E> {
        if let Some(n) = self.bound
            && v.len() > n
        {
            return Err(E::custom(format!("{} elements in a sequence bounded to {n}", v.len())));
        }
        Ok(Value::Bytes(v.into()))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Value, E> {
        self.visit_byte_buf(v.to_vec())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_RESERVE));
        while let Some(b) = seq.next_element::<u8>()? {
            v.push(b);
        }
        Ok(Value::Bytes(v.into()))
    }
}

struct ListV<'a> {
    elem: &'a Elem,
    bound: Option<usize>,
    max_bytes: usize,
}

impl<'de> Visitor<'de> for ListV<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        if let (Some(n), Some(len)) = (self.bound, seq.size_hint())
            && len > n
        {
            return Err(de::Error::custom(format!("{len} elements in a sequence bounded to {n}")));
        }
        let len = seq.size_hint().unwrap_or(0);
        let need = len.saturating_mul(self.elem.min_wire_size());
        if need > self.max_bytes {
            return Err(de::Error::custom(format!(
                "a sequence of {len} elements (at least {need} bytes) in a sample of {} bytes",
                self.max_bytes
            )));
        }
        let mut v = Vec::with_capacity(len.min(MAX_RESERVE));
        while let Some(x) = seq.next_element_seed(ElemSeed(self.elem, self.max_bytes))? {
            // A reader that announces no length (cdr-encoding's) is held to the bound here, element by element.
            if let Some(n) = self.bound
                && v.len() >= n
            {
                return Err(de::Error::custom(format!("more than {n} elements in a sequence bounded to {n}")));
            }
            v.push(x);
        }
        Ok(Value::List(v))
    }
}

struct ElemSeed<'a>(&'a Elem, usize);

#[derive(Debug)]
enum Num {
    I(i128),
    F(f64),
    B(bool),
}

struct NumV;

impl Visitor<'_> for NumV {
    type Value = Num;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Num, E> {
        Ok(Num::B(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        Ok(Num::I(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num::I(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        Ok(Num::F(v))
    }
}

struct StrV(Option<usize>);

impl Visitor<'_> for StrV {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.visit_string(v.to_string())
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        if let Some(n) = self.0
            && v.len() > n
        {
            return Err(E::custom(format!("a string of {} bytes, bounded to {n}", v.len())));
        }
        Ok(Value::String(v))
    }
}

impl<'de> DeserializeSeed<'de> for ElemSeed<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let wrong = |n: Num| de::Error::custom(format!("unexpected {n:?}"));
        match self.0 {
            Elem::Bool => match d.deserialize_bool(NumV)? {
                Num::B(b) => Ok(Value::Bool(b)),
                n => Err(wrong(n)),
            },
            Elem::F32 => match d.deserialize_f32(NumV)? {
                Num::F(x) => Ok(Value::F32(x as f32)),
                n => Err(wrong(n)),
            },
            Elem::F64 => match d.deserialize_f64(NumV)? {
                Num::F(x) => Ok(Value::F64(x)),
                n => Err(wrong(n)),
            },
            Elem::Int(p, pi) => {
                let n = match p {
                    Prim::Int8 => d.deserialize_i8(NumV)?,
                    Prim::Uint8 | Prim::Byte | Prim::Char => d.deserialize_u8(NumV)?,
                    Prim::Int16 => d.deserialize_i16(NumV)?,
                    Prim::Uint16 => d.deserialize_u16(NumV)?,
                    Prim::Int32 => d.deserialize_i32(NumV)?,
                    Prim::Uint32 => d.deserialize_u32(NumV)?,
                    Prim::Int64 => d.deserialize_i64(NumV)?,
                    Prim::Uint64 => d.deserialize_u64(NumV)?,
                    Prim::Bool | Prim::Float32 | Prim::Float64 => return Err(de::Error::custom("not an integer")),
                };
                match n {
                    Num::I(x) => pi.value(x).ok_or_else(|| de::Error::custom(format!("{x} out of range"))),
                    n => Err(wrong(n)),
                }
            }
            Elem::Str(bound) => d.deserialize_string(StrV(*bound)),
            Elem::Bytes => d.deserialize_byte_buf(BytesV { bound: None }),
            Elem::Msg(plan) => MsgSeed(plan, self.1).deserialize(d).map(Value::Message),
        }
    }
}

/// Parses `.proto` file `path` (with its imports, found next to it and in `includes`) into a serialized
/// `FileDescriptorSet` (with the imported files), as a shoal publisher announces it.
pub fn compile_proto(path: &std::path::Path, includes: &[std::path::PathBuf]) -> Result<Vec<u8>, String> {
    let dir = path.parent().unwrap_or(std::path::Path::new(".")).to_path_buf();
    let mut dirs = vec![dir];
    dirs.extend(includes.iter().cloned());
    let mut c = protox::Compiler::new(dirs).map_err(|e| e.to_string())?;
    c.include_imports(true);
    let file = path.file_name().ok_or_else(|| format!("{}: not a file", path.display()))?;
    c.open_file(file).map_err(|e| e.to_string())?;
    Ok(c.encode_file_descriptor_set())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::demo;
    use crate::testdata::telemetry;
    use prost::Message as _;
    use std::path::PathBuf;

    fn demo_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/demo")
    }

    fn mapping(ros: &str, proto_name: &str, proto_text: Option<&str>) -> Result<Mapping, GenericError> {
        let desc = match proto_text {
            None => compile_proto(&demo_dir().join("demo.proto"), &[]).unwrap(),
            Some(text) => {
                let dir = std::env::temp_dir().join(format!("generic_{}_{proto_name}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("t.proto"), text).unwrap();
                let d = compile_proto(&dir.join("t.proto"), &[]).unwrap();
                let _ = std::fs::remove_dir_all(&dir);
                d
            }
        };
        let mut reg = MsgRegistry::new([demo_dir().join("msg")]);
        Mapping::new(&mut reg, &MsgName::parse(ros).unwrap(), proto_name, desc)
    }

    fn cdr(r: &DynRos) -> Vec<u8> {
        crate::to_cdr(r).unwrap()
    }

    fn decode(m: &Mapping, bytes: &[u8]) -> Result<DynRos, String> {
        m.decode_cdr(bytes)
    }

    /// A scratch directory with `t_msgs/msg/M.msg` of `msg_text`, and the descriptors of `protos` (each the body
    /// of `message M` in package `t`, or with `package` other than `t`).
    fn scratch_types(tag: &str, msg_text: &str, protos: &[(&str, &str)]) -> (PathBuf, Vec<Vec<u8>>) {
        let dir = std::env::temp_dir().join(format!("generic_remap_{}_{tag}", std::process::id()));
        std::fs::create_dir_all(dir.join("t_msgs/msg")).unwrap();
        std::fs::write(dir.join("t_msgs/msg/M.msg"), msg_text).unwrap();
        let descs = protos
            .iter()
            .enumerate()
            .map(|(i, (package, body))| {
                let path = dir.join(format!("p{i}.proto"));
                std::fs::write(&path, format!("syntax = \"proto3\"; package {package}; message M {{ {body} }}"))
                    .unwrap();
                compile_proto(&path, &[]).unwrap()
            })
            .collect();
        (dir, descs)
    }

    fn int_field(r: &DynRos, name: &str) -> i128 {
        int_of(&r.msg.get_field_by_name(name).unwrap()).unwrap()
    }

    /// A publisher that restarts with its fields renumbered, or under another name, is read through a mapping of
    /// what it announces (values right, not swapped or refused as another type); one that no longer maps is
    /// refused, said once; the route's own type and announcements without a descriptor use the route's mapping;
    /// at most MAX_ANNOUNCED_TYPES are kept.
    #[test]
    fn a_changed_type_is_read_through_its_own_mapping_or_refused() {
        let (dir, d) = scratch_types(
            "changed",
            "int32 a\nint32 b\n",
            &[
                ("t", "int32 a = 1; int32 b = 2;"),
                ("t", "int32 b = 1; int32 a = 2;"),
                ("t2", "int32 a = 1; int32 b = 2;"),
                ("t", "int32 a = 1; int32 b = 2; int32 c = 3;"),
            ],
        );
        let ros = MsgName::parse("t_msgs/M").unwrap();
        let route = Mapping::new(&mut MsgRegistry::new([dir.clone()]), &ros, "t.M", d[0].clone()).unwrap();
        let remap = Remapper::new(ros.clone(), MsgRegistry::new([dir.clone()]));
        assert!(matches!(remap.mapping_for(&route, route.type_info()), Remapped::Route));
        assert!(matches!(remap.mapping_for(&route, &TypeInfo::raw("t.M")), Remapped::Route), "no descriptor");

        // Renumbered: b = 7 is field 1, a = 5 field 2. Through the route's mapping the values would swap.
        let payload = [0x08, 7, 0x10, 5];
        let wrong = route.from_proto(&payload).unwrap();
        assert_eq!((int_field(&wrong, "a"), int_field(&wrong, "b")), (7, 5));
        let renumbered = TypeInfo::new("t.M", "proto", d[1].clone());
        let Remapped::Other { mapping, first: true } = remap.mapping_for(&route, &renumbered) else {
            panic!("the renumbered type maps")
        };
        let right = mapping.from_proto(&payload).unwrap();
        assert_eq!((int_field(&right, "a"), int_field(&right, "b")), (5, 7));
        assert!(matches!(remap.mapping_for(&route, &renumbered), Remapped::Other { first: false, .. }));

        // Another name, the same fields: mapped, not a mismatch.
        let renamed = TypeInfo::new("t2.M", "proto", d[2].clone());
        assert!(matches!(remap.mapping_for(&route, &renamed), Remapped::Other { first: true, .. }));

        // A field the ROS type lacks: refused, the field named, once as new.
        let grown = TypeInfo::new("t.M", "proto", d[3].clone());
        let Remapped::Refused { reason, first: true } = remap.mapping_for(&route, &grown) else { panic!("refused") };
        assert!(reason.starts_with("c: "), "{reason}");
        assert!(matches!(remap.mapping_for(&route, &grown), Remapped::Refused { first: false, .. }));

        // Bounded: after MAX_ANNOUNCED_TYPES newer types the renumbered one is made again (seen as new).
        for i in 0..MAX_ANNOUNCED_TYPES {
            // Distinct by name (refused: the descriptor defines no such message; kept all the same).
            let mut other = renamed.clone();
            other.name = format!("t2.M{i}");
            let _ = remap.mapping_for(&route, &other);
        }
        assert!(matches!(remap.mapping_for(&route, &renumbered), Remapped::Other { first: true, .. }));
        assert!(remap.known.lock().unwrap().len() <= MAX_ANNOUNCED_TYPES);

        // Bounded in time: so far 3 + 16 + 1 types were checked within this minute; up to 32 are, then a type not
        // kept is refused unchecked, while the kept ones still read.
        let made = remap.made.lock().unwrap().len();
        assert_eq!(made, 3 + MAX_ANNOUNCED_TYPES + 1);
        for i in made..MAX_NEW_TYPES_PER_MINUTE {
            let mut other = renamed.clone();
            other.name = format!("t2.N{i}");
            assert!(matches!(remap.mapping_for(&route, &other), Remapped::Refused { first: true, .. }));
        }
        let mut one_more = renamed.clone();
        one_more.name = "t2.Late".into();
        let Remapped::Refused { reason, first: false } = remap.mapping_for(&route, &one_more) else {
            panic!("refused unchecked")
        };
        assert!(reason.contains("more than 32 new types within a minute"), "{reason}");
        assert!(matches!(remap.mapping_for(&route, &renumbered), Remapped::Other { first: false, .. }));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Presence crosses as ROS's `T[<=1]`: a proto3 `optional` set to its default is one element, an unset one
    /// none, both ways; a message field and `oneof` members alike (the one member set is the one present); a ROS
    /// sample with two members of one `oneof` keeps the last; without presence `T[<=1]` does not map.
    #[test]
    fn presence_maps_to_a_sequence_of_at_most_one() {
        let (dir, d) = scratch_types(
            "presence",
            "int32[<=1] a\nstring[<=1] s\nt_msgs/P[<=1] p\nint32[<=1] x\nstring[<=1] y\nint32 b\n",
            &[(
                "t",
                "optional int32 a = 1; optional string s = 2; P p = 3; oneof o { int32 x = 4; string y = 5; } \
                 int32 b = 6; } message P { int32 q = 1;",
            )],
        );
        std::fs::write(dir.join("t_msgs/msg/P.msg"), "int32 q\n").unwrap();
        let ros = MsgName::parse("t_msgs/M").unwrap();
        let m = Mapping::new(&mut MsgRegistry::new([dir.clone()]), &ros, "t.M", d[0].clone()).unwrap();
        let desc = m.plan.proto.clone();
        let round_trip = |msg: &DynamicMessage| {
            let r = m.from_message(msg.clone()).unwrap();
            (cdr(&r), m.decode_cdr(&cdr(&r)).unwrap().msg)
        };
        // a = 0 and y = "" set (present, defaults), s and p unset, b = 7.
        let mut msg = DynamicMessage::new(desc.clone());
        msg.set_field_by_name("a", Value::I32(0));
        msg.set_field_by_name("y", Value::String(String::new()));
        msg.set_field_by_name("b", Value::I32(7));
        let (bytes, back) = round_trip(&msg);
        // CDR: a = [0], s = [], p = [], x = [], y = [""], b = 7.
        let want: Vec<u8> = [
            &[0u8, 1, 0, 0][..],
            &[1, 0, 0, 0, 0, 0, 0, 0],
            &[0, 0, 0, 0],
            &[0, 0, 0, 0],
            &[0, 0, 0, 0],
            &[1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
            &[7, 0, 0, 0],
        ]
        .concat();
        assert_eq!(bytes, want);
        for (name, present) in [("a", true), ("s", false), ("p", false), ("x", false), ("y", true), ("b", true)] {
            let fd = desc.get_field_by_name(name).unwrap();
            assert_eq!(back.has_field(&fd), present, "{name}");
        }
        assert_eq!(back, msg);
        // A message field set, and the other oneof member.
        let mut msg2 = DynamicMessage::new(desc.clone());
        let mut p = DynamicMessage::new(desc.parent_pool().get_message_by_name("t.P").unwrap());
        p.set_field_by_name("q", Value::I32(3));
        msg2.set_field_by_name("p", Value::Message(p));
        msg2.set_field_by_name("x", Value::I32(9));
        msg2.set_field_by_name("b", Value::I32(4));
        let (_, back2) = round_trip(&msg2);
        assert_eq!(back2, msg2);
        // ROS gives both x and y: the last, y, is kept.
        let both: Vec<u8> = [
            &[0u8, 1, 0, 0][..],
            &[0, 0, 0, 0],
            &[0, 0, 0, 0],
            &[0, 0, 0, 0],
            &[1, 0, 0, 0, 5, 0, 0, 0],
            &[1, 0, 0, 0, 2, 0, 0, 0, b'k', 0, 0, 0],
            &[1, 0, 0, 0],
        ]
        .concat();
        let got = m.decode_cdr(&both).unwrap().msg;
        assert!(!got.has_field(&desc.get_field_by_name("x").unwrap()));
        assert_eq!(got.get_field_by_name("y").unwrap().as_str(), Some("k"));
        // Two elements are not "at most one".
        let two: Vec<u8> = [&[0u8, 1, 0, 0][..], &[2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0]].concat();
        assert!(m.decode_cdr(&two).is_err());
        let _ = std::fs::remove_dir_all(&dir);

        // Without presence (a plain proto3 int32) a ROS int32[<=1] does not map, and says what would.
        let (dir, d) = scratch_types("nopresence", "int32[<=1] a\n", &[("t", "int32 a = 1;")]);
        let e = Mapping::new(&mut MsgRegistry::new([dir.clone()]), &ros, "t.M", d[0].clone()).unwrap_err();
        assert!(e.to_string().contains("or the same with presence (proto3 optional"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn telemetry_round_trips_through_cdr() {
        let m = mapping("demo_msgs/msg/Telemetry", "demo.Telemetry", None).unwrap();
        for (i, size) in [(0, 0), (1, 10), (2, 3), (8, 1000), (300, 5)] {
            let t = telemetry(i, size);
            let r = m.from_proto(&t.encode_to_vec()).unwrap();
            let bytes = cdr(&r);
            let back = decode(&m, &bytes).unwrap();
            assert_eq!(demo::Telemetry::decode(back.encode_proto().as_slice()).unwrap(), t, "message {i}");
        }
        // An empty protobuf message is a valid ROS message: fixed arrays are sent as N defaults.
        let r = m.from_proto(&[]).unwrap();
        let back = demo::Telemetry::decode(decode(&m, &cdr(&r)).unwrap().encode_proto().as_slice()).unwrap();
        assert_eq!(back.wheels.len(), 4);
        assert_eq!(back.gyro, [0.0; 3]);
    }

    #[test]
    fn mismatches_name_the_first_field() {
        let e = mapping("demo_msgs/msg/Telemetry", "demo.BadTelemetry", None).unwrap_err().to_string();
        assert!(e.starts_with("pose.position.w: no such field in geometry_msgs/msg/Point"), "{e}");
        let e = mapping("demo_msgs/msg/Telemetry", "demo.Pose", None).unwrap_err().to_string();
        assert!(
            e.starts_with("header: the ROS field (std_msgs/Header in demo_msgs/msg/Telemetry) has no protobuf"),
            "{e}"
        );
        let e = mapping("demo_msgs/msg/Telemetry", "demo.Nope", None).unwrap_err().to_string();
        assert!(e.contains("defines no message demo.Nope"), "{e}");
        let e = mapping("demo_msgs/msg/Missing", "demo.Telemetry", None).unwrap_err().to_string();
        assert!(e.contains("demo_msgs/msg/Missing: no definition found"), "{e}");

        let one = |ros_field: &str, proto_field: &str| {
            let text = format!("syntax = \"proto3\"; package t; message M {{ {proto_field} = 1; }}");
            let dir = std::env::temp_dir().join(format!("generic_msg_{}_{}", std::process::id(), ros_field.len()));
            std::fs::create_dir_all(dir.join("t_msgs/msg")).unwrap();
            std::fs::write(dir.join("t_msgs/msg/M.msg"), format!("{ros_field}\n")).unwrap();
            let ptext =
                std::env::temp_dir().join(format!("generic_p_{}_{}.proto", std::process::id(), ros_field.len()));
            std::fs::write(&ptext, text).unwrap();
            let desc = compile_proto(&ptext, &[]).unwrap();
            let mut reg = MsgRegistry::new([dir.clone()]);
            let r = Mapping::new(&mut reg, &MsgName::parse("t_msgs/M").unwrap(), "t.M", desc).map(|_| ());
            let _ = std::fs::remove_dir_all(&dir);
            let _ = std::fs::remove_file(&ptext);
            r.map_err(|e| e.to_string())
        };
        // Widths: the protobuf type must hold every value of the ROS type.
        assert!(one("uint8 a", "uint32 a").is_ok());
        assert!(one("int16 a", "sint32 a").is_ok());
        assert!(one("uint32 a", "int64 a").is_ok());
        let e = one("int64 a", "int32 a").unwrap_err();
        assert!(
            e.starts_with("a: protobuf int32 cannot carry ROS int64") && e.contains("int64, sint64, sfixed64"),
            "{e}"
        );
        let e = one("uint32 a", "int32 a").unwrap_err();
        assert!(e.contains("uint32, fixed32, int64, sint64, sfixed64, uint64, fixed64"), "{e}");
        assert!(one("float64 a", "float a").unwrap_err().contains("expected double"));
        assert!(one("float32 a", "double a").unwrap_err().contains("expected float"));
        assert!(one("int32 a", "double a").is_err());
        assert!(one("uint8[] a", "bytes a").is_ok());
        assert!(one("byte[16] a", "bytes a").is_ok());
        assert!(one("int32[] a", "bytes a").is_err());
        assert!(one("float64[] a", "repeated double a").is_ok());
        assert!(one("float64 a", "repeated double a").unwrap_err().contains("expected double"));
        assert!(one("float64[3] a", "double a").unwrap_err().contains("expected repeated double"));
        assert!(one("string<=4 a", "string a").is_ok());
        assert!(one("wstring a", "string a").unwrap_err().contains("wstring is not supported"));
        assert!(one("int32 a", "map<string, int32> a").unwrap_err().contains("map"));
        assert!(one("bool a", "int32 a").unwrap_err().contains("expected bool"));
    }

    #[test]
    fn values_out_of_the_ros_range_are_bad_input() {
        let m = mapping("demo_msgs/msg/Telemetry", "demo.Telemetry", None).unwrap();
        let bad = |f: &dyn Fn(&mut demo::Telemetry)| {
            let mut t = telemetry(3, 4);
            f(&mut t);
            m.from_proto(&t.encode_to_vec()).map(|_| ()).unwrap_err().to_string()
        };
        assert_eq!(bad(&|t| t.trim = 200), "trim: 200 does not fit the ROS type int8");
        assert_eq!(bad(&|t| t.volts = 70_000), "volts: 70000 does not fit the ROS type uint16");
        assert_eq!(
            bad(&|t| t.errors = vec![1; 9]),
            "errors: 9 elements, the ROS type demo_msgs/msg/Telemetry allows at most 8"
        );
        assert_eq!(bad(&|t| t.errors = vec![1, 40_000]), "errors[1]: 40000 does not fit the ROS type int16");
        assert_eq!(
            bad(&|t| t.gyro = vec![1.0]),
            "gyro: 1 elements, the ROS type demo_msgs/msg/Telemetry has exactly 3 (or give none)"
        );
        assert_eq!(
            bad(&|t| t.wheels.truncate(3)),
            "wheels: 3 elements, the ROS type demo_msgs/msg/Telemetry has exactly 4 (or give none)"
        );
        assert_eq!(bad(&|t| t.name = "x".repeat(33)), "name: a string of 33 bytes, the ROS type allows at most 32");
        let mut ok = telemetry(3, 4);
        ok.spare = vec![demo::Wheel::default()];
        assert!(m.from_proto(&ok.encode_to_vec()).is_ok());
        assert!(m.from_proto(&[0xff, 0xff, 0xff]).unwrap_err().to_string().contains("are not a demo.Telemetry"));
    }

    #[test]
    fn bad_cdr_is_an_error_not_a_panic_or_a_huge_allocation() {
        let m = mapping("demo_msgs/msg/Telemetry", "demo.Telemetry", None).unwrap();
        let good = cdr(&m.from_proto(&telemetry(5, 100).encode_to_vec()).unwrap());
        for cut in [4, 5, 9, 40, good.len() / 2, good.len() - 1] {
            assert!(decode(&m, &good[..cut]).is_err(), "cut at {cut}");
        }
        // A sequence length of 4 billion elements in 8 bytes of input.
        let mut huge = vec![0, 1, 0, 0];
        huge.extend_from_slice(&[0, 0, 0, 0]); // header.stamp.sec
        huge.extend_from_slice(&[0xff; 64]);
        assert!(decode(&m, &huge).is_err());
    }
}
