//! Protobuf descriptors for the tools, shared by every subcommand that needs a message type: finding the
//! descriptor a running publisher or subscriber announced in registration, compiling a `.proto` file (protox, no
//! protoc) into the descriptor eCAL would announce, summarising a descriptor, and building a message from JSON.
//!
//! API: [`find_in_system`], [`from_proto_file`], [`summary`], [`encode_json`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor};
use prost_types::FileDescriptorProto;
use shoal::{Node, TypeInfo};

/// A protobuf message type ready to publish: its descriptor and the type information to announce.
#[derive(Debug, Clone)]
pub(crate) struct ProtoType {
    /// The message descriptor (for JSON → protobuf).
    pub(crate) message: MessageDescriptor,
    /// Name, `proto` and the `FileDescriptorSet` bytes to announce.
    pub(crate) type_info: TypeInfo,
    /// Where it came from, for messages (`registration of pid 123 on host`, `imu.proto`).
    pub(crate) origin: String,
}

/// Why a type could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DescriptorError {
    /// Nobody in registration announces the type with a usable descriptor.
    #[error(
        "no running publisher or subscriber announces protobuf type `{name}` with a descriptor (listened {waited:?}); \
         give its schema with --proto FILE.proto{seen}"
    )]
    NotInSystem { name: String, waited: Duration, seen: String },
    /// The `.proto` file does not compile.
    #[error("cannot compile {}: {reason}", path.display())]
    Compile { path: PathBuf, reason: String },
    /// The `.proto` file (and its imports) do not define the type.
    #[error("{} does not define message `{name}`; it defines: {defined}", path.display())]
    NotInFile { path: PathBuf, name: String, defined: String },
    /// The JSON is not a message of the type.
    #[error("the data is not a valid `{name}` in protobuf JSON: {reason}")]
    Json { name: String, reason: String },
}

/// The message descriptor of `type_info` if it is a protobuf type with a descriptor defining it (decoded by
/// [`shoal::dynamic`], like every descriptor another process announced).
fn message_of(type_info: &TypeInfo) -> Option<MessageDescriptor> {
    if type_info.encoding != "proto" {
        return None;
    }
    shoal::dynamic::DynamicDecoder::new(type_info).ok()?.message_descriptor().cloned()
}

/// Looks for `name` in registration for up to `wait`: the type information of a publisher or subscriber that
/// announces it with a descriptor that defines it (one on `topic` first, when given).
pub(crate) fn find_in_system(
    node: &Node,
    name: &str,
    topic: Option<&str>,
    wait: Duration,
) -> Result<ProtoType, DescriptorError> {
    let start = Instant::now();
    let last = loop {
        let snap = node.snapshot();
        let mut candidates: Vec<_> = snap.topics.iter().filter(|t| t.type_info.name == name).collect();
        candidates.sort_by_key(|t| topic.is_none_or(|want| t.topic_name != want));
        for t in candidates {
            if let Some(message) = message_of(&t.type_info) {
                return Ok(ProtoType {
                    message,
                    type_info: t.type_info.clone(),
                    origin: format!(
                        "registration of `{}` ({}, pid {} on {})",
                        t.topic_name, t.unit_name, t.pid, t.host_name
                    ),
                });
            }
        }
        if start.elapsed() >= wait {
            break snap;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut types: Vec<&str> =
        last.topics.iter().filter(|t| t.type_info.encoding == "proto").map(|t| t.type_info.name.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let seen =
        if types.is_empty() { String::new() } else { format!(" (protobuf types announced now: {})", types.join(", ")) };
    Err(DescriptorError::NotInSystem { name: name.to_owned(), waited: wait, seen })
}

/// Compiles `path` (imports resolved in `includes`, else in the file's directory) and takes message `name` from
/// it. The descriptor is the one eCAL announces for the type: the message's file and its imports
/// ([`shoal_codegen::ecal_descriptor_set`], as shoal's generated types carry).
pub(crate) fn from_proto_file(path: &Path, includes: &[PathBuf], name: &str) -> Result<ProtoType, DescriptorError> {
    let compile_err = |reason: String| DescriptorError::Compile { path: path.to_path_buf(), reason };
    let includes: Vec<PathBuf> = if includes.is_empty() {
        vec![path.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf)]
    } else {
        includes.to_vec()
    };
    let mut compiler = protox::Compiler::new(&includes).map_err(|e| compile_err(e.to_string()))?;
    compiler.include_imports(true).include_source_info(false);
    compiler.open_file(path).map_err(|e| compile_err(e.to_string()))?;
    let fds = compiler.file_descriptor_set();
    let pool = DescriptorPool::from_file_descriptor_set(fds.clone()).map_err(|e| compile_err(e.to_string()))?;
    let Some(message) = pool.get_message_by_name(name) else {
        let mut defined: Vec<String> = pool
            .all_messages()
            .filter(|m| !m.full_name().starts_with("google.protobuf."))
            .map(|m| m.full_name().to_owned())
            .collect();
        defined.sort();
        defined.truncate(50);
        return Err(DescriptorError::NotInFile {
            path: path.to_path_buf(),
            name: name.to_owned(),
            defined: if defined.is_empty() { "no messages".into() } else { defined.join(", ") },
        });
    };
    let by_name: HashMap<&str, &FileDescriptorProto> = fds.file.iter().map(|f| (f.name(), f)).collect();
    let descriptor = shoal_codegen::ecal_descriptor_set(message.parent_file().name(), &by_name).encode_to_vec();
    Ok(ProtoType { message, type_info: TypeInfo::new(name, "proto", descriptor), origin: path.display().to_string() })
}

/// Builds the protobuf bytes of a message of type `message` from its JSON form (the proto3 JSON mapping: field
/// names as in the `.proto` or in lowerCamelCase, enums by name or number, 64-bit integers as numbers or
/// strings). Unknown fields are an error.
pub(crate) fn encode_json(message: &MessageDescriptor, json: &str) -> Result<Vec<u8>, DescriptorError> {
    let err = |reason: String| DescriptorError::Json { name: message.full_name().to_owned(), reason };
    let mut de = serde_json::Deserializer::from_str(json);
    let msg = DynamicMessage::deserialize(message.clone(), &mut de).map_err(|e| err(e.to_string()))?;
    de.end().map_err(|e| err(e.to_string()))?;
    Ok(msg.encode_to_vec())
}

/// What a topic's type information says about its schema, in a few words and as JSON.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    /// One line for people.
    pub(crate) text: String,
    /// The same as JSON: `{"bytes", "kind", ...}`.
    pub(crate) json: serde_json::Value,
}

/// Summarises the descriptor of `type_info`: for protobuf the files of the set and the message's fields, for
/// other encodings the size (shoal does not interpret their schemas).
pub(crate) fn summary(type_info: &TypeInfo) -> Summary {
    let len = type_info.descriptor.len();
    if len == 0 {
        return Summary { text: "no descriptor".into(), json: serde_json::json!({"bytes": 0, "kind": "none"}) };
    }
    if type_info.encoding != "proto" {
        return Summary {
            text: format!("{len} B ({} schema, not interpreted)", type_info.encoding),
            json: serde_json::json!({"bytes": len, "kind": "opaque"}),
        };
    }
    let described = match shoal::dynamic::describe(type_info) {
        Ok(d) => d,
        Err(e) => {
            let reason = match e {
                shoal::dynamic::DynamicError::Descriptor { reason, .. } => reason,
                other => other.to_string(),
            };
            return Summary {
                text: format!("{len} B, not a valid FileDescriptorSet: {reason}"),
                json: serde_json::json!({"bytes": len, "kind": "invalid", "error": reason}),
            };
        }
    };
    let files = described.files;
    match described.message {
        Some((name, fields)) => {
            let shown = if fields.len() > 8 {
                format!("{}, … ({} more)", fields[..8].join(", "), fields.len() - 8)
            } else {
                fields.join(", ")
            };
            Summary {
                text: format!(
                    "{len} B FileDescriptorSet, {} file(s) ({}); {name} has {} field(s): {shown}",
                    files.len(),
                    files.join(", "),
                    fields.len()
                ),
                json: serde_json::json!({"bytes": len, "kind": "file_descriptor_set", "files": files,
                                         "message": name, "fields": fields}),
            }
        }
        None => Summary {
            text: format!("{len} B FileDescriptorSet ({}) that does not define `{}`", files.join(", "), type_info.name),
            json: serde_json::json!({"bytes": len, "kind": "file_descriptor_set", "files": files,
                                     "error": format!("does not define {}", type_info.name)}),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imu_proto() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/proto/imu.proto")
    }

    #[test]
    fn proto_file_json_round_trip() {
        let t = from_proto_file(&imu_proto(), &[], "pb.Imu").unwrap();
        assert_eq!((t.type_info.name.as_str(), t.type_info.encoding.as_str()), ("pb.Imu", "proto"));
        let bytes =
            encode_json(&t.message, r#"{"header": {"seq": 7, "frame_id": "f"}, "status": "STATUS_OK"}"#).unwrap();
        let back = shoal::dynamic::decode_to_json(&t.type_info, &bytes).unwrap();
        assert_eq!(back["header"]["seq"], 7);
        assert_eq!(back["status"], "STATUS_OK");
        let s = summary(&t.type_info);
        assert!(s.text.contains("pb.Imu has 8 field(s)"), "{}", s.text);
        assert_eq!(s.json["files"][0], "google/protobuf/timestamp.proto");
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let t = from_proto_file(&imu_proto(), &[], "pb.Imu").unwrap();
        for bad in [r#"{"nope": 1}"#, r#"{"status": "NOT_A_STATUS"}"#, "{", r#"{"header": {"seq": -1}}"#, "{} x"] {
            let e = encode_json(&t.message, bad).unwrap_err();
            assert!(matches!(e, DescriptorError::Json { .. }), "{bad}: {e}");
        }
        let e = from_proto_file(&imu_proto(), &[], "pb.Nope").unwrap_err();
        assert!(e.to_string().contains("pb.Imu"), "{e}");
        let e = from_proto_file(Path::new("/nonexistent/x.proto"), &[], "a.B").unwrap_err();
        assert!(matches!(e, DescriptorError::Compile { .. }), "{e}");
        assert_eq!(summary(&TypeInfo::new("pb.Imu", "proto", vec![0x0a, 0xff])).json["kind"], "invalid");
        assert_eq!(summary(&TypeInfo::raw("x")).json["kind"], "none");
    }
}
