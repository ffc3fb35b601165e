//! ROS 2 message definitions read from `.msg` files, without a ROS install: the grammar real ROS 2 messages use,
//! and a registry that finds `<dir>/<pkg>/msg/<Type>.msg` in the configured directories and, after them, in the
//! definitions shipped with the bridge (`bridge-ros2/msg/`: builtin_interfaces, std_msgs, geometry_msgs and
//! sensor_msgs, the types the built-in mapping carries and their parts).
//!
//! Grammar, one declaration per line, `#` starting a comment outside quotes:
//! - a field `TYPE name` or, with a default value, `TYPE name VALUE` (the default only matters to ROS client
//!   libraries; on the wire every field is sent, so the bridge checks its syntax loosely and ignores it);
//! - a constant `TYPE NAME=VALUE` (primitive or string; constants are not part of the CDR bytes);
//! - TYPE is a primitive (`bool byte char float32 float64 int8 uint8 int16 uint16 int32 uint32 int64 uint64`),
//!   `string`, `string<=N`, `wstring`, `wstring<=N`, a nested `pkg/Type` (also `pkg/msg/Type`) or `Type` of the
//!   same package (`Header` alone is `std_msgs/Header` when the package has no `Header`), followed optionally by
//!   `[N]` (fixed array), `[]` (sequence) or `[<=N]` (bounded sequence).
//!
//! Service files (`<dir>/<pkg>/srv/<Type>.srv`, and the shipped `bridge-ros2/srv/`: std_srvs Trigger, SetBool
//! and Empty) are a request and a response in this grammar separated by a `---` line; [`MsgRegistry::resolve_srv`]
//! reads them as the two messages `pkg/Type_Request` and `pkg/Type_Response`, as rosidl does. Action files are
//! refused.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// The largest fixed array length accepted (`T[N]`): a fixed array is sent in full even when the protobuf side
/// leaves it empty, so `N` bounds the memory one message can take.
pub const MAX_FIXED_ARRAY: usize = 1 << 20;

/// A ROS 2 primitive type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Prim {
    /// `bool`: one byte, 0 or 1.
    Bool,
    /// `byte`: an octet.
    Byte,
    /// `char`: in ROS 2 an unsigned 8-bit integer.
    Char,
    /// `float32`.
    Float32,
    /// `float64`.
    Float64,
    /// `int8`.
    Int8,
    /// `uint8`.
    Uint8,
    /// `int16`.
    Int16,
    /// `uint16`.
    Uint16,
    /// `int32`.
    Int32,
    /// `uint32`.
    Uint32,
    /// `int64`.
    Int64,
    /// `uint64`.
    Uint64,
}

impl Prim {
    const ALL: [(&'static str, Prim); 13] = [
        ("bool", Prim::Bool),
        ("byte", Prim::Byte),
        ("char", Prim::Char),
        ("float32", Prim::Float32),
        ("float64", Prim::Float64),
        ("int8", Prim::Int8),
        ("uint8", Prim::Uint8),
        ("int16", Prim::Int16),
        ("uint16", Prim::Uint16),
        ("int32", Prim::Int32),
        ("uint32", Prim::Uint32),
        ("int64", Prim::Int64),
        ("uint64", Prim::Uint64),
    ];

    fn parse(s: &str) -> Option<Prim> {
        Prim::ALL.iter().find(|(n, _)| *n == s).map(|(_, p)| *p)
    }

    /// The `.msg` spelling.
    pub fn name(self) -> &'static str {
        Prim::ALL.iter().find(|(_, p)| *p == self).map_or("?", |(n, _)| n)
    }

    /// The value range of an integer type (`byte` and `char` are 8-bit unsigned); `None` for bool and floats.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            Prim::Byte | Prim::Char | Prim::Uint8 => (0, u8::MAX.into()),
            Prim::Int8 => (i8::MIN.into(), i8::MAX.into()),
            Prim::Int16 => (i16::MIN.into(), i16::MAX.into()),
            Prim::Uint16 => (0, u16::MAX.into()),
            Prim::Int32 => (i32::MIN.into(), i32::MAX.into()),
            Prim::Uint32 => (0, u32::MAX.into()),
            Prim::Int64 => (i64::MIN.into(), i64::MAX.into()),
            Prim::Uint64 => (0, u64::MAX.into()),
            Prim::Bool | Prim::Float32 | Prim::Float64 => return None,
        })
    }
}

/// A message type's name, `pkg/msg/Type`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgName {
    /// The package, e.g. `geometry_msgs`.
    pub pkg: String,
    /// The type, e.g. `Pose`.
    pub name: String,
}

impl MsgName {
    /// Parses `pkg/msg/Type` or `pkg/Type`, checking ROS 2's naming rules.
    pub fn parse(s: &str) -> Result<MsgName, String> {
        let parts: Vec<&str> = s.split('/').collect();
        let (pkg, name) = match parts.as_slice() {
            [p, n] => (*p, *n),
            [p, "msg", n] => (*p, *n),
            [_, "srv", _] => {
                return Err(format!(
                    "{s:?} is a service type: the bridge carries topics, and a route's type is a message \
                     (pkg/msg/Type); services are not bridged"
                ));
            }
            [_, "action", _] => {
                return Err(format!(
                    "{s:?} is an action type: actions are not bridged (an action is services and topics under \
                     <name>/_action/; its feedback and status topics can be bridged with their message types)"
                ));
            }
            _ => return Err(format!("{s:?}: a message type is written pkg/msg/Type or pkg/Type")),
        };
        if !valid_pkg(pkg) {
            return Err(format!(
                "{s:?}: package {pkg:?} must be lower case letters, digits and _, starting with a letter"
            ));
        }
        if !valid_type(name) {
            return Err(format!("{s:?}: type {name:?} must be CamelCase letters and digits, starting upper case"));
        }
        Ok(MsgName { pkg: pkg.into(), name: name.into() })
    }

    /// The type's name on the DDS wire, `pkg::msg::dds_::Type_`.
    pub fn dds_name(&self) -> String {
        format!("{}::msg::dds_::{}_", self.pkg, self.name)
    }
}

impl fmt::Display for MsgName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/msg/{}", self.pkg, self.name)
    }
}

/// A service type's name, `pkg/srv/Type`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrvName {
    /// The package, e.g. `std_srvs`.
    pub pkg: String,
    /// The type, e.g. `Trigger`.
    pub name: String,
}

impl SrvName {
    /// Parses `pkg/srv/Type`, checking ROS 2's naming rules.
    pub fn parse(s: &str) -> Result<SrvName, String> {
        let parts: Vec<&str> = s.split('/').collect();
        let [pkg, "srv", name] = parts.as_slice() else {
            if let [_, "action", _] = parts.as_slice() {
                return Err(format!(
                    "{s:?} is an action type: actions are not bridged (an action is services and topics under \
                     <name>/_action/; its feedback and status topics can be bridged with their message types)"
                ));
            }
            return Err(format!("{s:?}: a service type is written pkg/srv/Type"));
        };
        if !valid_pkg(pkg) {
            return Err(format!(
                "{s:?}: package {pkg:?} must be lower case letters, digits and _, starting with a letter"
            ));
        }
        if !valid_type(name) {
            return Err(format!("{s:?}: type {name:?} must be CamelCase letters and digits, starting upper case"));
        }
        Ok(SrvName { pkg: (*pkg).into(), name: (*name).into() })
    }

    /// The message of one part (`Request` or `Response`): `pkg/Type_Request`, as rosidl names it.
    pub fn part(&self, part: SrvPart) -> MsgName {
        MsgName { pkg: self.pkg.clone(), name: format!("{}_{}", self.name, part.suffix()) }
    }

    /// The DDS type name of one part, `pkg::srv::dds_::Type_Request_`.
    pub fn dds_name(&self, part: SrvPart) -> String {
        format!("{}::srv::dds_::{}_{}_", self.pkg, self.name, part.suffix())
    }
}

impl fmt::Display for SrvName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/srv/{}", self.pkg, self.name)
    }
}

/// One of a service's two messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SrvPart {
    /// What the client sends.
    Request,
    /// What the server answers.
    Response,
}

impl SrvPart {
    fn suffix(self) -> &'static str {
        match self {
            SrvPart::Request => "Request",
            SrvPart::Response => "Response",
        }
    }
}

fn valid_pkg(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn valid_type(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase()) && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn valid_field(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !s.contains("__")
        && !s.ends_with('_')
}

fn valid_constant(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The element type of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// A primitive.
    Prim(Prim),
    /// `string` or `string<=N` (the bound in bytes).
    String(Option<usize>),
    /// `wstring` or `wstring<=N`.
    WString(Option<usize>),
    /// A nested message.
    Msg(MsgName),
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Base::Prim(p) => f.write_str(p.name()),
            Base::String(None) => f.write_str("string"),
            Base::String(Some(n)) => write!(f, "string<={n}"),
            Base::WString(None) => f.write_str("wstring"),
            Base::WString(Some(n)) => write!(f, "wstring<={n}"),
            Base::Msg(m) => write!(f, "{}/{}", m.pkg, m.name),
        }
    }
}

/// Whether and how a field is an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Array {
    /// One value.
    Single,
    /// `T[N]`: exactly N values, no length on the wire.
    Fixed(usize),
    /// `T[]`: a sequence (a `uint32` length, then the values).
    Unbounded,
    /// `T[<=N]`: a sequence of at most N values.
    Bounded(usize),
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Array::Single => Ok(()),
            Array::Fixed(n) => write!(f, "[{n}]"),
            Array::Unbounded => f.write_str("[]"),
            Array::Bounded(n) => write!(f, "[<={n}]"),
        }
    }
}

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// The element type.
    pub base: Base,
    /// Array or not.
    pub array: Array,
    /// The default value's text, if given (not used on the wire).
    pub default: Option<String>,
}

impl Field {
    /// The type as the `.msg` file writes it, e.g. `float64[9]`.
    pub fn type_text(&self) -> String {
        format!("{}{}", self.base, self.array)
    }
}

/// A parsed `.msg` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MsgDef {
    /// The type's name.
    pub name: MsgName,
    /// The fields, in wire order.
    pub fields: Vec<Field>,
    /// The constants, `(name, value text)` (not on the wire).
    pub constants: Vec<(String, String)>,
    /// Where the definition came from (a path, or `built in`), for error messages.
    pub source: String,
}

/// A `.msg` file or type that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// A syntax error.
    #[error("{file}:{line}: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// No definition of a type.
    #[error("{name}: no definition found (looked for {searched}, then the built-in {builtin} types)")]
    NotFound {
        /// The type.
        name: String,
        /// The file paths tried.
        searched: String,
        /// The packages shipped with the bridge.
        builtin: &'static str,
    },
    /// The file could not be read.
    #[error("{path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A type contains itself.
    #[error("{0}: the type contains itself")]
    Recursive(String),
}

/// Removes a `#` comment, leaving `#` inside single or double quotes alone.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '#') => return &line[..i],
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            _ => {}
        }
    }
    line
}

fn parse_bound(s: &str, what: &str) -> Result<usize, String> {
    s.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| format!("{what} {s:?}: expected a positive integer"))
}

/// Parses a type token, e.g. `string<=8[<=4]`; `pkg` is the package of the file (for same-package names).
fn parse_type(tok: &str, pkg: &str) -> Result<(Base, Array), String> {
    let (base_s, array) = match tok.find('[') {
        None => (tok, Array::Single),
        Some(i) => {
            let inner = tok[i + 1..]
                .strip_suffix(']')
                .ok_or_else(|| format!("type {tok:?}: an array suffix is [N], [] or [<=N]"))?;
            let array = if inner.is_empty() {
                Array::Unbounded
            } else if let Some(n) = inner.strip_prefix("<=") {
                Array::Bounded(parse_bound(n, "array bound")?)
            } else {
                let n = parse_bound(inner, "array length")?;
                if n > MAX_FIXED_ARRAY {
                    return Err(format!("type {tok:?}: fixed arrays longer than {MAX_FIXED_ARRAY} are not supported"));
                }
                Array::Fixed(n)
            };
            (&tok[..i], array)
        }
    };
    let base = if let Some(p) = Prim::parse(base_s) {
        Base::Prim(p)
    } else if base_s == "string" {
        Base::String(None)
    } else if base_s == "wstring" {
        Base::WString(None)
    } else if let Some(n) = base_s.strip_prefix("string<=") {
        Base::String(Some(parse_bound(n, "string bound")?))
    } else if let Some(n) = base_s.strip_prefix("wstring<=") {
        Base::WString(Some(parse_bound(n, "wstring bound")?))
    } else if base_s.contains('/') {
        Base::Msg(MsgName::parse(base_s).map_err(|e| format!("type {e}"))?)
    } else if valid_type(base_s) {
        Base::Msg(MsgName { pkg: pkg.into(), name: base_s.into() })
    } else {
        return Err(format!(
            "type {base_s:?}: not a primitive (bool, byte, char, float32, float64, int8..uint64), string, \
             string<=N, wstring, or a message type (pkg/Type or Type)"
        ));
    };
    Ok((base, array))
}

/// Parses the text of `name`'s `.msg` file; `source` names it in errors.
pub fn parse_msg(name: &MsgName, text: &str, source: &str) -> Result<MsgDef, MsgError> {
    let mut def = MsgDef { name: name.clone(), fields: Vec::new(), constants: Vec::new(), source: source.into() };
    for (n, raw) in text.lines().enumerate() {
        let err = |message: String| MsgError::Syntax { file: source.into(), line: n + 1, message };
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with("---") {
            return Err(err("`---` separates a service's or action's parts; a message file has none".into()));
        }
        let (tok, rest) =
            line.split_once(char::is_whitespace).ok_or_else(|| err(format!("{line:?}: expected TYPE NAME")))?;
        let (base, array) = parse_type(tok, &name.pkg).map_err(err)?;
        let rest = rest.trim_start();
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let (fname, after) = (&rest[..end], rest[end..].trim());
        if fname.is_empty() {
            return Err(err(format!("{line:?}: expected a field name after {tok}")));
        }
        if let Some(value) = after.strip_prefix('=') {
            // A constant.
            if !valid_constant(fname) {
                return Err(err(format!("constant {fname:?}: upper case letters, digits and _")));
            }
            if array != Array::Single || matches!(base, Base::Msg(_)) {
                return Err(err(format!("constant {fname}: only primitive and string constants exist")));
            }
            let value = value.trim();
            if value.is_empty() {
                return Err(err(format!("constant {fname}: no value")));
            }
            def.constants.push((fname.into(), value.into()));
            continue;
        }
        if !valid_field(fname) {
            return Err(err(format!(
                "field {fname:?}: lower case letters, digits and _, starting with a letter, no __, not ending in _"
            )));
        }
        if def.fields.iter().any(|f| f.name == fname) {
            return Err(err(format!("field {fname}: declared twice")));
        }
        let default = (!after.is_empty()).then(|| after.to_string());
        if default.is_some() && matches!(base, Base::Msg(_)) {
            return Err(err(format!("field {fname}: a nested message has no default value")));
        }
        def.fields.push(Field { name: fname.into(), base, array, default });
    }
    Ok(def)
}

/// The definitions shipped with the bridge (`bridge-ros2/msg/`).
const BUILTIN: &[(&str, &str, &str)] = &[
    ("builtin_interfaces", "Time", include_str!("../msg/builtin_interfaces/msg/Time.msg")),
    ("builtin_interfaces", "Duration", include_str!("../msg/builtin_interfaces/msg/Duration.msg")),
    ("std_msgs", "Header", include_str!("../msg/std_msgs/msg/Header.msg")),
    ("std_msgs", "String", include_str!("../msg/std_msgs/msg/String.msg")),
    ("std_msgs", "Bool", include_str!("../msg/std_msgs/msg/Bool.msg")),
    ("std_msgs", "Empty", include_str!("../msg/std_msgs/msg/Empty.msg")),
    ("std_msgs", "MultiArrayDimension", include_str!("../msg/std_msgs/msg/MultiArrayDimension.msg")),
    ("std_msgs", "MultiArrayLayout", include_str!("../msg/std_msgs/msg/MultiArrayLayout.msg")),
    ("std_msgs", "UInt8MultiArray", include_str!("../msg/std_msgs/msg/UInt8MultiArray.msg")),
    ("geometry_msgs", "Point", include_str!("../msg/geometry_msgs/msg/Point.msg")),
    ("geometry_msgs", "Vector3", include_str!("../msg/geometry_msgs/msg/Vector3.msg")),
    ("geometry_msgs", "Quaternion", include_str!("../msg/geometry_msgs/msg/Quaternion.msg")),
    ("geometry_msgs", "Pose", include_str!("../msg/geometry_msgs/msg/Pose.msg")),
    ("geometry_msgs", "PoseStamped", include_str!("../msg/geometry_msgs/msg/PoseStamped.msg")),
    ("geometry_msgs", "Twist", include_str!("../msg/geometry_msgs/msg/Twist.msg")),
    ("geometry_msgs", "Transform", include_str!("../msg/geometry_msgs/msg/Transform.msg")),
    ("geometry_msgs", "TransformStamped", include_str!("../msg/geometry_msgs/msg/TransformStamped.msg")),
    ("sensor_msgs", "Imu", include_str!("../msg/sensor_msgs/msg/Imu.msg")),
    ("sensor_msgs", "Image", include_str!("../msg/sensor_msgs/msg/Image.msg")),
    ("sensor_msgs", "PointField", include_str!("../msg/sensor_msgs/msg/PointField.msg")),
    ("sensor_msgs", "PointCloud2", include_str!("../msg/sensor_msgs/msg/PointCloud2.msg")),
    ("sensor_msgs", "NavSatStatus", include_str!("../msg/sensor_msgs/msg/NavSatStatus.msg")),
    ("sensor_msgs", "NavSatFix", include_str!("../msg/sensor_msgs/msg/NavSatFix.msg")),
];

/// The service definitions shipped with the bridge (`bridge-ros2/srv/`).
const BUILTIN_SRV: &[(&str, &str, &str)] = &[
    ("std_srvs", "Trigger", include_str!("../srv/std_srvs/srv/Trigger.srv")),
    ("std_srvs", "SetBool", include_str!("../srv/std_srvs/srv/SetBool.srv")),
    ("std_srvs", "Empty", include_str!("../srv/std_srvs/srv/Empty.srv")),
];

const BUILTIN_PKGS: &str = "builtin_interfaces, std_msgs, geometry_msgs, sensor_msgs";
const BUILTIN_SRV_NAMES: &str = "std_srvs/srv/Trigger, SetBool, Empty";

/// Finds and parses message definitions: first `<dir>/<pkg>/msg/<Type>.msg` in each directory, in order, then the
/// built-in ones. Every definition is parsed once.
#[derive(Debug, Default)]
pub struct MsgRegistry {
    dirs: Vec<PathBuf>,
    /// Definitions given as text ([`MsgRegistry::add_text`]), searched first.
    texts: Vec<(MsgName, String)>,
    /// A definition already parsed ([`MsgRegistry::resolve_srv`]'s parts), found first while it is resolved.
    pending: HashMap<MsgName, MsgDef>,
    loaded: HashMap<MsgName, Arc<MsgDef>>,
}

impl MsgRegistry {
    /// A registry searching `dirs`, then the built-in definitions.
    pub fn new(dirs: impl IntoIterator<Item = PathBuf>) -> MsgRegistry {
        MsgRegistry {
            dirs: dirs.into_iter().collect(),
            texts: Vec::new(),
            pending: HashMap::new(),
            loaded: HashMap::new(),
        }
    }

    /// Adds the definition of `name` as `.msg` text, found before any directory's (parsed when resolved).
    pub fn add_text(&mut self, name: MsgName, text: impl Into<String>) {
        self.texts.push((name, text.into()));
    }

    fn find(&self, name: &MsgName) -> Result<Option<MsgDef>, MsgError> {
        if let Some(d) = self.pending.get(name) {
            return Ok(Some(d.clone()));
        }
        if let Some((_, text)) = self.texts.iter().find(|(n, _)| n == name) {
            return parse_msg(name, text, &format!("given {name}")).map(Some);
        }
        for d in &self.dirs {
            let path = d.join(&name.pkg).join("msg").join(format!("{}.msg", name.name));
            if path.is_file() {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| MsgError::Read { path: path.display().to_string(), reason: e.to_string() })?;
                return parse_msg(name, &text, &path.display().to_string()).map(Some);
            }
        }
        match BUILTIN.iter().find(|(p, n, _)| *p == name.pkg && *n == name.name) {
            Some((_, _, text)) => parse_msg(name, text, &format!("built-in {name}")).map(Some),
            None => Ok(None),
        }
    }

    fn searched(&self, name: &MsgName) -> String {
        let paths: Vec<String> = self
            .dirs
            .iter()
            .map(|d| d.join(&name.pkg).join("msg").join(format!("{}.msg", name.name)).display().to_string())
            .collect();
        if paths.is_empty() { "no msg_path directories".into() } else { paths.join(", ") }
    }

    /// The definition of `name` with every nested type resolved (and loaded) too. A same-package `Header` that
    /// the package does not define is `std_msgs/Header`.
    pub fn resolve(&mut self, name: &MsgName) -> Result<Arc<MsgDef>, MsgError> {
        self.resolve_in(name, &mut Vec::new())
    }

    /// The request and response of service `name`, from `<dir>/<pkg>/srv/<Type>.srv` in each directory, in order,
    /// then the shipped definitions, each with every nested type resolved (a nested `Type` alone is
    /// `pkg/msg/Type`, as in a `.msg` of the package). They are registered as `pkg/Type_Request` and
    /// `pkg/Type_Response` ([`SrvName::part`]).
    pub fn resolve_srv(&mut self, name: &SrvName) -> Result<(Arc<MsgDef>, Arc<MsgDef>), MsgError> {
        let (req, resp) = (name.part(SrvPart::Request), name.part(SrvPart::Response));
        if let (Some(a), Some(b)) = (self.loaded.get(&req), self.loaded.get(&resp)) {
            return Ok((a.clone(), b.clone()));
        }
        let mut found = None;
        for d in &self.dirs {
            let path = d.join(&name.pkg).join("srv").join(format!("{}.srv", name.name));
            if path.is_file() {
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| MsgError::Read { path: path.display().to_string(), reason: e.to_string() })?;
                found = Some((text, path.display().to_string()));
                break;
            }
        }
        if found.is_none() {
            found = BUILTIN_SRV
                .iter()
                .find(|(p, n, _)| *p == name.pkg && *n == name.name)
                .map(|(_, _, text)| ((*text).to_string(), format!("built-in {name}")));
        }
        let Some((text, source)) = found else {
            let searched: Vec<String> = self
                .dirs
                .iter()
                .map(|d| d.join(&name.pkg).join("srv").join(format!("{}.srv", name.name)).display().to_string())
                .collect();
            return Err(MsgError::NotFound {
                name: name.to_string(),
                searched: if searched.is_empty() { "no msg_path directories".into() } else { searched.join(", ") },
                builtin: BUILTIN_SRV_NAMES,
            });
        };
        let mut parts = text.lines().enumerate().filter(|(_, l)| strip_comment(l).trim().starts_with("---"));
        let Some((sep, _)) = parts.next() else {
            return Err(MsgError::Syntax {
                file: source,
                line: 1,
                message: "a service file has a request and a response separated by a `---` line; there is none".into(),
            });
        };
        if let Some((extra, _)) = parts.next() {
            return Err(MsgError::Syntax {
                file: source,
                line: extra + 1,
                message: "a second `---`: that is an action (goal, result, feedback); actions are not bridged".into(),
            });
        }
        let lines: Vec<&str> = text.lines().collect();
        // The response part keeps its line numbers in errors: blank lines stand for the request part.
        let request = lines[..sep].join("\n");
        let response = "\n".repeat(sep + 1) + &lines[sep + 1..].join("\n");
        for (part, body) in [(&req, request), (&resp, response)] {
            let def = parse_msg(part, &body, &source)?;
            self.resolve_parsed(def)?;
        }
        Ok((self.loaded[&req].clone(), self.loaded[&resp].clone()))
    }

    /// Resolves the nested types of a definition read outside the search (a service's part) and keeps it.
    fn resolve_parsed(&mut self, def: MsgDef) -> Result<Arc<MsgDef>, MsgError> {
        let name = def.name.clone();
        self.texts.retain(|(n, _)| n != &name);
        self.loaded.remove(&name);
        self.pending.insert(name.clone(), def);
        let r = self.resolve(&name);
        self.pending.remove(&name);
        r
    }

    /// The already resolved definition of `name` (after [`MsgRegistry::resolve`] of a type that contains it).
    pub fn get(&self, name: &MsgName) -> Option<Arc<MsgDef>> {
        self.loaded.get(name).cloned()
    }

    fn resolve_in(&mut self, name: &MsgName, stack: &mut Vec<MsgName>) -> Result<Arc<MsgDef>, MsgError> {
        if let Some(d) = self.loaded.get(name) {
            return Ok(d.clone());
        }
        if stack.contains(name) {
            return Err(MsgError::Recursive(name.to_string()));
        }
        let mut def = self.find(name)?.ok_or_else(|| MsgError::NotFound {
            name: name.to_string(),
            searched: self.searched(name),
            builtin: BUILTIN_PKGS,
        })?;
        stack.push(name.clone());
        for f in &mut def.fields {
            if let Base::Msg(inner) = &mut f.base {
                if inner.pkg == name.pkg && inner.name == "Header" && self.find(inner)?.is_none() {
                    *inner = MsgName { pkg: "std_msgs".into(), name: "Header".into() };
                }
                let inner = inner.clone();
                self.resolve_in(&inner, stack)?;
            }
        }
        stack.pop();
        let def = Arc::new(def);
        self.loaded.insert(name.clone(), def.clone());
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> MsgName {
        MsgName::parse(s).unwrap()
    }

    #[test]
    fn services_are_two_messages() {
        let mut reg = MsgRegistry::new(Vec::new());
        let srv = SrvName::parse("std_srvs/srv/SetBool").unwrap();
        let (req, resp) = reg.resolve_srv(&srv).unwrap();
        assert_eq!(req.name.to_string(), "std_srvs/msg/SetBool_Request");
        assert_eq!(req.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["data"]);
        assert_eq!(resp.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["success", "message"]);
        let (req, resp) = reg.resolve_srv(&SrvName::parse("std_srvs/srv/Empty").unwrap()).unwrap();
        assert!(req.fields.is_empty() && resp.fields.is_empty());
        assert_eq!(srv.dds_name(SrvPart::Response), "std_srvs::srv::dds_::SetBool_Response_");

        // From a directory, with a same-package nested message, errors on the line of the file.
        let dir = std::env::temp_dir().join(format!("msgdef_srv_{}", std::process::id()));
        std::fs::create_dir_all(dir.join("demo_msgs/srv")).unwrap();
        std::fs::create_dir_all(dir.join("demo_msgs/msg")).unwrap();
        std::fs::write(dir.join("demo_msgs/msg/Wheel.msg"), "float64 speed\n").unwrap();
        std::fs::write(dir.join("demo_msgs/srv/Spin.srv"), "Wheel wheel\n---\n# comment\nbool ok\n").unwrap();
        std::fs::write(dir.join("demo_msgs/srv/Bad.srv"), "int32 a\n---\nint32 b\nfloat99 c\n").unwrap();
        std::fs::write(dir.join("demo_msgs/srv/Act.srv"), "int32 a\n---\nint32 b\n---\nint32 c\n").unwrap();
        std::fs::write(dir.join("demo_msgs/srv/None.srv"), "int32 a\n").unwrap();
        let mut reg = MsgRegistry::new([dir.clone()]);
        let (req, resp) = reg.resolve_srv(&SrvName::parse("demo_msgs/srv/Spin").unwrap()).unwrap();
        assert_eq!(req.fields[0].type_text(), "demo_msgs/Wheel wheel".split(' ').next().unwrap());
        assert_eq!(resp.fields[0].name, "ok");
        let e = reg.resolve_srv(&SrvName::parse("demo_msgs/srv/Bad").unwrap()).unwrap_err().to_string();
        assert!(e.contains("Bad.srv:4:") && e.contains("float99"), "{e}");
        let e = reg.resolve_srv(&SrvName::parse("demo_msgs/srv/Act").unwrap()).unwrap_err().to_string();
        assert!(e.contains("Act.srv:4:") && e.contains("actions are not bridged"), "{e}");
        let e = reg.resolve_srv(&SrvName::parse("demo_msgs/srv/None").unwrap()).unwrap_err().to_string();
        assert!(e.contains("there is none"), "{e}");
        let e = reg.resolve_srv(&SrvName::parse("demo_msgs/srv/Gone").unwrap()).unwrap_err().to_string();
        assert!(e.contains("demo_msgs/srv/Gone.srv") && e.contains("std_srvs/srv/Trigger"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn grammar_of_real_messages() {
        let text = "# A comment line\n\
                    int32 MODE_IDLE=0   # constant\n\
                    int8 MODE_BACK = -1\n\
                    string GREETING=\"hi # not a comment\"\n\
                    \n\
                    std_msgs/Header header\n\
                    geometry_msgs/msg/Pose pose\n\
                    Wheel[4] wheels\n\
                    Wheel[] spare\n\
                    float32[] temps\n\
                    int16[<=8] errors\n\
                    string<=32 name \"unnamed\"\n\
                    string<=5[<=3] tags\n\
                    wstring w\n\
                    uint8 mode 1   # default\n\
                    bool ok true\n\
                    char c\n\
                    byte b\n";
        let d = parse_msg(&name("demo_msgs/Telemetry"), text, "t.msg").unwrap();
        let types: Vec<String> = d.fields.iter().map(|f| format!("{} {}", f.type_text(), f.name)).collect();
        assert_eq!(
            types,
            [
                "std_msgs/Header header",
                "geometry_msgs/Pose pose",
                "demo_msgs/Wheel[4] wheels",
                "demo_msgs/Wheel[] spare",
                "float32[] temps",
                "int16[<=8] errors",
                "string<=32 name",
                "string<=5[<=3] tags",
                "wstring w",
                "uint8 mode",
                "bool ok",
                "char c",
                "byte b",
            ]
        );
        assert_eq!(d.constants.len(), 3);
        assert_eq!(d.constants[2], ("GREETING".into(), "\"hi # not a comment\"".into()));
        assert_eq!(d.fields[6].default.as_deref(), Some("\"unnamed\""));
        assert_eq!(d.fields[9].default.as_deref(), Some("1"));
    }

    /// A service or action type given for a route says what it is and that it is not bridged.
    #[test]
    fn service_and_action_types_are_named_as_not_bridged() {
        let e = MsgName::parse("std_srvs/srv/Trigger").unwrap_err();
        assert!(e.contains("is a service type") && e.contains("services are not bridged"), "{e}");
        let e = MsgName::parse("example_interfaces/action/Fibonacci").unwrap_err();
        assert!(e.contains("is an action type: actions are not bridged"), "{e}");
        assert!(MsgName::parse("std_msgs/msg/String").is_ok());
        assert!(MsgName::parse("a/b/c/D").unwrap_err().contains("written pkg/msg/Type"));
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = |t: &str| parse_msg(&name("p/T"), t, "x.msg").unwrap_err().to_string();
        assert!(e("int32 a\nfloat128 b\n").starts_with("x.msg:2: type \"float128\""), "{}", e("int32 a\nfloat128 b\n"));
        assert!(e("int32 Bad\n").contains("field \"Bad\""));
        assert!(e("int32[0] a\n").contains("array length"));
        assert!(e("int32[ a\n").contains("array suffix"));
        assert!(e("int32 a\nint32 a\n").starts_with("x.msg:2: field a: declared twice"));
        assert!(e("int32 a\n---\nint32 b\n").contains("service"));
        assert!(e("int32[2] K=1\n").contains("constant"));
        assert!(e("int32\n").contains("expected TYPE NAME"));
        assert!(e("string<=x s\n").contains("string bound"));
    }

    #[test]
    fn registry_resolves_nested_types() {
        let dir = std::env::temp_dir().join(format!("msgdef_{}", std::process::id()));
        let m = dir.join("demo_msgs/msg");
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(m.join("A.msg"), "Header header\nB b\ngeometry_msgs/Point p\n").unwrap();
        std::fs::write(m.join("B.msg"), "int32 x\n").unwrap();
        std::fs::write(m.join("Loop.msg"), "Loop[] again\n").unwrap();
        let mut r = MsgRegistry::new([dir.clone()]);
        let a = r.resolve(&name("demo_msgs/msg/A")).unwrap();
        assert_eq!(a.fields[0].base, Base::Msg(name("std_msgs/Header")));
        assert!(r.get(&name("demo_msgs/B")).is_some());
        assert!(r.get(&name("builtin_interfaces/Time")).is_some());
        let e = r.resolve(&name("demo_msgs/Nope")).unwrap_err().to_string();
        assert!(e.contains("demo_msgs/msg/Nope.msg") && e.contains("built-in"), "{e}");
        assert_eq!(r.resolve(&name("demo_msgs/Loop")).unwrap_err(), MsgError::Recursive("demo_msgs/msg/Loop".into()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn builtin_definitions_parse() {
        let mut r = MsgRegistry::new([]);
        for (p, n, _) in BUILTIN {
            r.resolve(&MsgName { pkg: (*p).into(), name: (*n).into() }).unwrap();
        }
        let imu = r.get(&name("sensor_msgs/Imu")).unwrap();
        assert_eq!(imu.fields[2].array, Array::Fixed(9));
        assert_eq!(r.get(&name("std_msgs/Empty")).unwrap().fields.len(), 0);
    }
}
