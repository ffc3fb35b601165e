//! Decoding any topic from the type information it carries, without generated code (for tools: the monitor's
//! inspector and `shoal topic echo` decode with it, and [`describe`] summarises a descriptor for `shoal topic info`).
//! Every descriptor another process announced is decoded here (the `descriptor_decode` fuzz target covers it).
//!
//! - `proto`: the descriptor is a serialized `FileDescriptorSet` (as eCAL writes it); the payload is decoded to a
//!   reflective [`prost_reflect::DynamicMessage`] and from there to JSON.
//! - everything else (`flatb`, `raw`, unknown or empty encodings): a raw view, the bytes in hex (at most
//!   [`RAW_VIEW_LIMIT`] of them) plus the text when they are UTF-8. FlatBuffers schemas are not interpreted:
//!   eCAL 6.1.1's C++ FlatBuffers publisher carries no schema, and shoal's (planus) carries none either
//!   (`shoal topic echo` shows a FlatBuffers payload's root-table structure, which needs no schema).
//!
//! ```no_run
//! # fn show(sample: &shoal::Sample) -> Result<(), shoal::dynamic::DynamicError> {
//! let json = shoal::dynamic::decode_to_json(sample.type_info(), sample.payload())?;
//! println!("{json}");
//! # Ok(()) }
//! ```

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

use crate::types::TypeInfo;

/// At most this many payload bytes are shown in a raw (hex) view.
pub const RAW_VIEW_LIMIT: usize = 4096;

/// Errors of dynamic decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DynamicError {
    /// A protobuf topic without a descriptor: nothing to decode with.
    #[error("protobuf type `{0}` carries no descriptor")]
    NoDescriptor(String),
    /// The descriptor is not a valid `FileDescriptorSet`.
    #[error("invalid protobuf descriptor of `{name}`: {reason}")]
    Descriptor {
        /// The type name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The descriptor does not define the announced type.
    #[error("the descriptor does not define message type `{0}`")]
    UnknownType(String),
    /// The payload is not a valid message of the type.
    #[error("cannot decode `{name}`: {reason}")]
    Decode {
        /// The type name.
        name: String,
        /// The decoder's message.
        reason: String,
    },
    /// The decoded message could not be turned into JSON.
    #[error("cannot convert `{name}` to JSON: {reason}")]
    Json {
        /// The type name.
        name: String,
        /// The serializer's message.
        reason: String,
    },
}

/// A decoded payload.
#[derive(Debug, Clone)]
pub enum DynamicValue {
    /// A protobuf message, fully reflective (field names, types, nested messages).
    Proto(DynamicMessage),
    /// Bytes that shoal cannot interpret (FlatBuffers, raw, unknown encodings).
    Raw(RawView),
}

/// The raw view of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawView {
    /// The announced encoding.
    pub encoding: String,
    /// The announced type name.
    pub type_name: String,
    /// The payload size.
    pub size: usize,
    /// The first [`RAW_VIEW_LIMIT`] bytes in lowercase hex.
    pub hex: String,
    /// True when the payload was longer than the hex shows.
    pub truncated: bool,
    /// The payload as text, when it is entirely valid UTF-8 and at most [`RAW_VIEW_LIMIT`] bytes.
    pub text: Option<String>,
}

impl RawView {
    /// The raw view of `payload` announced as `type_info`.
    pub fn new(type_info: &TypeInfo, payload: &[u8]) -> RawView {
        let shown = &payload[..payload.len().min(RAW_VIEW_LIMIT)];
        let mut hex = String::with_capacity(shown.len() * 2);
        for b in shown {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            hex.push(DIGITS[usize::from(b >> 4)] as char);
            hex.push(DIGITS[usize::from(b & 15)] as char);
        }
        let text =
            if payload.len() <= RAW_VIEW_LIMIT { std::str::from_utf8(payload).ok().map(str::to_owned) } else { None };
        RawView {
            encoding: type_info.encoding.clone(),
            type_name: type_info.name.clone(),
            size: payload.len(),
            hex,
            truncated: payload.len() > RAW_VIEW_LIMIT,
            text,
        }
    }

    /// As JSON: `{"encoding", "type", "size", "hex", "truncated"[, "text"]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("encoding".into(), self.encoding.clone().into());
        m.insert("type".into(), self.type_name.clone().into());
        m.insert("size".into(), self.size.into());
        m.insert("hex".into(), self.hex.clone().into());
        m.insert("truncated".into(), self.truncated.into());
        if let Some(t) = &self.text {
            m.insert("text".into(), t.clone().into());
        }
        serde_json::Value::Object(m)
    }
}

/// A decoder for one topic's type, built once from its [`TypeInfo`] (parsing the descriptor is the costly part)
/// and used for every sample.
#[derive(Debug, Clone)]
pub struct DynamicDecoder {
    type_info: TypeInfo,
    message: Option<MessageDescriptor>,
}

impl DynamicDecoder {
    /// Prepares decoding of payloads announced as `type_info`. Protobuf types need their descriptor; other
    /// encodings always succeed (they decode to a raw view).
    pub fn new(type_info: &TypeInfo) -> Result<DynamicDecoder, DynamicError> {
        let message = if type_info.encoding == "proto" { Some(proto_descriptor(type_info)?) } else { None };
        Ok(DynamicDecoder { type_info: type_info.clone(), message })
    }

    /// The protobuf message descriptor, for `proto` topics.
    pub fn message_descriptor(&self) -> Option<&MessageDescriptor> {
        self.message.as_ref()
    }

    /// Decodes one payload.
    pub fn decode(&self, payload: &[u8]) -> Result<DynamicValue, DynamicError> {
        match &self.message {
            Some(desc) => DynamicMessage::decode(desc.clone(), payload)
                .map(DynamicValue::Proto)
                .map_err(|e| DynamicError::Decode { name: self.type_info.name.clone(), reason: e.to_string() }),
            None => Ok(DynamicValue::Raw(RawView::new(&self.type_info, payload))),
        }
    }

    /// Decodes one payload to JSON. Protobuf: the proto3 JSON mapping with the `.proto` field names, every field
    /// shown (defaults included), 64-bit integers as numbers, enums by name. Others: [`RawView::to_json`].
    pub fn decode_to_json(&self, payload: &[u8]) -> Result<serde_json::Value, DynamicError> {
        match self.decode(payload)? {
            DynamicValue::Proto(msg) => {
                let opts = SerializeOptions::new()
                    .use_proto_field_name(true)
                    .skip_default_fields(false)
                    .stringify_64_bit_integers(false);
                msg.serialize_with_options(serde_json::value::Serializer, &opts)
                    .map_err(|e| DynamicError::Json { name: self.type_info.name.clone(), reason: e.to_string() })
            }
            DynamicValue::Raw(raw) => Ok(raw.to_json()),
        }
    }
}

/// The pool of the `FileDescriptorSet` a protobuf type carries (bytes from another process: decoded, never trusted).
fn descriptor_pool(type_info: &TypeInfo) -> Result<DescriptorPool, DynamicError> {
    if type_info.descriptor.is_empty() {
        return Err(DynamicError::NoDescriptor(type_info.name.clone()));
    }
    let invalid = |reason: String| DynamicError::Descriptor { name: type_info.name.clone(), reason };
    if let Some(reason) = unsupported_syntax(&type_info.descriptor) {
        return Err(invalid(reason));
    }
    if let Some(reason) = import_cycle(&type_info.descriptor) {
        return Err(invalid(reason));
    }
    let pool = DescriptorPool::decode(type_info.descriptor.as_slice()).map_err(|e| invalid(e.to_string()))?;
    check_map_entries(&pool).map_err(invalid)?;
    Ok(pool)
}

/// Refuses map entry messages other than `protoc` makes (an optional key of an integer, bool or string type as field
/// 1, an optional value as field 2, nothing else): `prost_reflect` 0.16 accepts any message flagged `map_entry` and
/// then panics decoding a map field of one without a key or value field, or with a key type no map has.
fn check_map_entries(pool: &DescriptorPool) -> Result<(), String> {
    use prost_reflect::{Cardinality, Kind};
    for m in pool.all_messages().filter(MessageDescriptor::is_map_entry) {
        let bad = |what: &str| Err(format!("map entry {} {what}", m.full_name()));
        let (Some(key), Some(value)) = (m.get_field(1), m.get_field(2)) else {
            return bad("lacks its key (1) or value (2) field");
        };
        if m.fields().len() != 2 || key.cardinality() == Cardinality::Repeated || value.is_list() {
            return bad("has other fields than one key and one value");
        }
        let key_kinds = matches!(
            key.kind(),
            Kind::Int32
                | Kind::Int64
                | Kind::Uint32
                | Kind::Uint64
                | Kind::Sint32
                | Kind::Sint64
                | Kind::Fixed32
                | Kind::Fixed64
                | Kind::Sfixed32
                | Kind::Sfixed64
                | Kind::Bool
                | Kind::String
        );
        if !key_kinds {
            return bad(&format!("has a key of type {:?}, which no map key has", key.kind()));
        }
    }
    Ok(())
}

/// A `FileDescriptorSet` seen only for its files' `syntax` (field 12 of `FileDescriptorProto`).
#[derive(Clone, PartialEq, prost::Message)]
struct SyntaxOfFiles {
    #[prost(message, repeated, tag = "1")]
    file: Vec<SyntaxOfFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct SyntaxOfFile {
    #[prost(string, optional, tag = "12")]
    syntax: Option<String>,
}

/// Why a set declares a syntax other than proto2 (absent) or proto3, if it does: `prost_reflect` 0.16 panics on any
/// other (an index out of bounds while it builds the error), so such a set never reaches it. Sets that do not decode
/// are left to its decoder, which reports them.
fn unsupported_syntax(set: &[u8]) -> Option<String> {
    use prost::Message as _;
    let files = SyntaxOfFiles::decode(set).ok()?;
    files.file.iter().enumerate().find_map(|(i, f)| match f.syntax.as_deref() {
        None | Some("proto2" | "proto3") => None,
        Some(other) => Some(format!("file {i} declares syntax {other:?}; only proto2 and proto3 are supported")),
    })
}

/// A `FileDescriptorSet` seen only for its files' names and imports (fields 1 and 3 of `FileDescriptorProto`).
#[derive(Clone, PartialEq, prost::Message)]
struct ImportsOfFiles {
    #[prost(message, repeated, tag = "1")]
    file: Vec<ImportsOfFile>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ImportsOfFile {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, repeated, tag = "3")]
    dependency: Vec<String>,
}

/// The import cycle of a set, if it has one (`protoc` never makes one): `prost_reflect` 0.16 recurses without end
/// on a cycle of public imports (`resolve_public_dependencies`, a file importing itself publicly will do) and the
/// stack overflows, so no set with a cycle reaches it. Sets that do not decode are left to its decoder.
fn import_cycle(set: &[u8]) -> Option<String> {
    use prost::Message as _;
    let files = ImportsOfFiles::decode(set).ok()?.file;
    let mut index = std::collections::HashMap::new();
    for (i, f) in files.iter().enumerate() {
        index.entry(f.name.as_deref().unwrap_or_default()).or_insert(i);
    }
    let deps = |i: usize| files[i].dependency.iter().filter_map(|d| index.get(d.as_str()).copied());
    // Depth-first, without recursion (the set's size is the peer's choice): 1 = on the path, 2 = done.
    let mut state = vec![0u8; files.len()];
    for start in 0..files.len() {
        if state[start] != 0 {
            continue;
        }
        let mut path: Vec<(usize, Vec<usize>)> = vec![(start, deps(start).collect())];
        state[start] = 1;
        while let Some((file, next)) = path.last_mut() {
            match next.pop() {
                Some(d) if state[d] == 1 => {
                    let name = |i: usize| files[i].name.clone().unwrap_or_default();
                    return Some(format!(
                        "file {:?} imports {:?}, which imports it back (an import cycle)",
                        name(*file),
                        name(d)
                    ));
                }
                Some(d) if state[d] == 0 => {
                    state[d] = 1;
                    path.push((d, deps(d).collect()));
                }
                Some(_) => {}
                None => {
                    state[*file] = 2;
                    path.pop();
                }
            }
        }
    }
    None
}

fn proto_descriptor(type_info: &TypeInfo) -> Result<MessageDescriptor, DynamicError> {
    descriptor_pool(type_info)?
        .get_message_by_name(&type_info.name)
        .ok_or_else(|| DynamicError::UnknownType(type_info.name.clone()))
}

/// What the descriptor of a protobuf type holds (what `shoal topic info` shows of an announced descriptor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorSummary {
    /// The files of the `FileDescriptorSet`, in order.
    pub files: Vec<String>,
    /// The announced type's full name and field names (declaration order), when the set defines it.
    pub message: Option<(String, Vec<String>)>,
}

/// Decodes the `FileDescriptorSet` that `type_info` carries (whatever its encoding says) and summarises it: its
/// files, and the announced message type's fields if the set defines it. Errors: no descriptor, or one that is
/// not a valid `FileDescriptorSet`.
pub fn describe(type_info: &TypeInfo) -> Result<DescriptorSummary, DynamicError> {
    let pool = descriptor_pool(type_info)?;
    let files = pool.files().map(|f| f.name().to_owned()).collect();
    let message = pool
        .get_message_by_name(&type_info.name)
        .map(|m| (m.full_name().to_owned(), m.fields().map(|f| f.name().to_owned()).collect()));
    Ok(DescriptorSummary { files, message })
}

/// Decodes `payload`, announced as `type_info`, to a reflective value (see [`DynamicDecoder::decode`]).
pub fn decode(type_info: &TypeInfo, payload: &[u8]) -> Result<DynamicValue, DynamicError> {
    DynamicDecoder::new(type_info)?.decode(payload)
}

/// Decodes `payload`, announced as `type_info`, to JSON (see [`DynamicDecoder::decode_to_json`]). To decode many
/// samples of one topic, build a [`DynamicDecoder`] once instead.
pub fn decode_to_json(type_info: &TypeInfo, payload: &[u8]) -> Result<serde_json::Value, DynamicError> {
    DynamicDecoder::new(type_info)?.decode_to_json(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_view_hex_text_and_limit() {
        let ti = TypeInfo::raw("demo.Bytes");
        let v = RawView::new(&ti, b"hi\x00");
        assert_eq!(v.hex, "686900");
        assert_eq!(v.text.as_deref(), Some("hi\u{0}"));
        let j = decode_to_json(&ti, &[0xff, 0x10]).unwrap();
        assert_eq!(j["hex"], "ff10");
        assert_eq!(j["size"], 2);
        assert!(j.get("text").is_none());
        let big = vec![7u8; RAW_VIEW_LIMIT + 10];
        let v = RawView::new(&TypeInfo::new("x.T", "flatb", Vec::new()), &big);
        assert!(v.truncated);
        assert_eq!(v.hex.len(), RAW_VIEW_LIMIT * 2);
        assert_eq!(v.size, RAW_VIEW_LIMIT + 10);
    }

    #[test]
    fn proto_errors_are_typed() {
        let no_desc = TypeInfo::new("pb.Imu", "proto", Vec::new());
        assert_eq!(decode_to_json(&no_desc, b"").unwrap_err(), DynamicError::NoDescriptor("pb.Imu".into()));
        let bad_desc = TypeInfo::new("pb.Imu", "proto", vec![0x0a, 0xff, 0xff]);
        assert!(matches!(decode_to_json(&bad_desc, b""), Err(DynamicError::Descriptor { .. })));
        // An empty FileDescriptorSet is valid but defines nothing.
        let empty_set = TypeInfo::new("pb.Imu", "proto", vec![0x0a, 0x00]);
        assert!(matches!(
            decode_to_json(&empty_set, b""),
            Err(DynamicError::UnknownType(_) | DynamicError::Descriptor { .. })
        ));
    }

    /// A set defining `pb.M { map<K, V> m = 1; }` with its map entry's fields as given (number, type).
    fn map_set(entry_fields: &[(i32, prost_reflect::prost_types::field_descriptor_proto::Type)]) -> Vec<u8> {
        use prost::Message as _;
        use prost_reflect::prost_types::field_descriptor_proto::{Label, Type};
        use prost_reflect::prost_types::{
            DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet, MessageOptions,
        };
        let field = |name: &str, number: i32, label: Label, ty: Type, type_name: Option<&str>| FieldDescriptorProto {
            name: Some(name.into()),
            number: Some(number),
            label: Some(label as i32),
            r#type: Some(ty as i32),
            type_name: type_name.map(Into::into),
            ..FieldDescriptorProto::default()
        };
        let entry = DescriptorProto {
            name: Some("MEntry".into()),
            field: entry_fields
                .iter()
                .map(|&(n, ty)| {
                    let name = match n {
                        1 => "key".to_owned(),
                        2 => "value".to_owned(),
                        n => format!("f{n}"),
                    };
                    field(&name, n, Label::Optional, ty, None)
                })
                .collect(),
            options: Some(MessageOptions { map_entry: Some(true), ..MessageOptions::default() }),
            ..DescriptorProto::default()
        };
        let m = DescriptorProto {
            name: Some("M".into()),
            field: vec![field("m", 1, Label::Repeated, Type::Message, Some(".pb.M.MEntry"))],
            nested_type: vec![entry],
            ..DescriptorProto::default()
        };
        let file = FileDescriptorProto {
            name: Some("m.proto".into()),
            package: Some("pb".into()),
            message_type: vec![m],
            syntax: Some("proto3".into()),
            ..FileDescriptorProto::default()
        };
        FileDescriptorSet { file: vec![file] }.encode_to_vec()
    }

    #[test]
    fn a_map_entry_protoc_would_not_make_is_an_error_not_a_panic() {
        use prost_reflect::prost_types::field_descriptor_proto::Type;
        // m { key: "a", value: 5 }
        let payload = [0x0a, 5, 0x0a, 1, b'a', 0x10, 5];
        let good = TypeInfo::new("pb.M", "proto", map_set(&[(1, Type::String), (2, Type::Int32)]));
        assert_eq!(decode_to_json(&good, &payload).unwrap()["m"]["a"], 5);
        // prost_reflect 0.16 accepts these sets and panics decoding the payload.
        for (entry, what) in [
            (&[(1, Type::String), (34, Type::Int32)][..], "lacks its key (1) or value (2) field"),
            (&[(2, Type::Int32)][..], "lacks its key (1) or value (2) field"),
            (&[(1, Type::Double), (2, Type::Int32)][..], "which no map key has"),
            (&[(1, Type::String), (2, Type::Int32), (3, Type::Int32)][..], "other fields"),
        ] {
            let ti = TypeInfo::new("pb.M", "proto", map_set(entry));
            let err = decode_to_json(&ti, &payload).unwrap_err();
            assert!(
                matches!(&err, DynamicError::Descriptor { reason, .. } if reason.contains(what)),
                "{entry:?}: {err}"
            );
        }
    }

    #[test]
    fn an_import_cycle_is_an_error_not_a_stack_overflow() {
        use prost::Message as _;
        use prost_reflect::prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
        // Each file imports the next (publicly), the last the first; the first defines c.M.
        let set = |names: &[&str]| {
            let file = names
                .iter()
                .enumerate()
                .map(|(i, n)| FileDescriptorProto {
                    name: Some((*n).into()),
                    package: Some("c".into()),
                    dependency: vec![names[(i + 1) % names.len()].into()],
                    public_dependency: vec![0],
                    message_type: vec![DescriptorProto { name: Some(format!("M{i}")), ..Default::default() }],
                    syntax: Some("proto3".into()),
                    ..Default::default()
                })
                .collect();
            TypeInfo::new("c.M0", "proto", FileDescriptorSet { file }.encode_to_vec())
        };
        for names in [&["a.proto"][..], &["a.proto", "b.proto"], &["a.proto", "b.proto", "c.proto"]] {
            let Err(e) = DynamicDecoder::new(&set(names)) else { panic!("{names:?}: a cycle is refused") };
            assert!(e.to_string().contains("an import cycle"), "{names:?}: {e}");
            assert!(describe(&set(names)).is_err());
        }
        // The same files without the cycle are fine.
        let mut chain = set(&["a.proto", "b.proto"]);
        let mut fds = FileDescriptorSet::decode(chain.descriptor.as_slice()).unwrap();
        fds.file[1].dependency.clear();
        fds.file[1].public_dependency.clear();
        fds.file.reverse();
        chain.descriptor = fds.encode_to_vec();
        assert!(DynamicDecoder::new(&chain).is_ok(), "{:?}", DynamicDecoder::new(&chain).err());
    }

    #[test]
    fn a_set_declaring_another_syntax_is_an_error_not_a_panic() {
        // FileDescriptorSet { file: [{ name: "a.proto", syntax: S }] }; prost_reflect 0.16 panics on these.
        for syntax in ["editions", "proto4", ""] {
            let file = [&[0x0a, 7][..], b"a.proto", &[0x62, syntax.len() as u8], syntax.as_bytes()].concat();
            let set = [&[0x0a, file.len() as u8][..], &file].concat();
            let ti = TypeInfo::new("a.M", "proto", set);
            let err = DynamicDecoder::new(&ti).unwrap_err();
            assert!(
                matches!(&err, DynamicError::Descriptor { reason, .. } if reason.contains("only proto2 and proto3")),
                "{syntax:?}: {err}"
            );
            assert!(describe(&ti).is_err());
        }
        // proto2 (absent or named) and proto3 still decode.
        for syntax in [None, Some("proto2"), Some("proto3")] {
            let tail = syntax.map(|s| [&[0x62, s.len() as u8][..], s.as_bytes()].concat()).unwrap_or_default();
            let file = [&[0x0a, 7][..], b"a.proto", &tail].concat();
            let set = [&[0x0a, file.len() as u8][..], &file].concat();
            let d = describe(&TypeInfo::new("a.M", "proto", set)).unwrap();
            assert_eq!((d.files, d.message), (vec!["a.proto".to_owned()], None));
        }
    }
}
