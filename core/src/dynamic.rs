//! Decoding any topic from the type information it carries, without generated code (for tools: the monitor's
//! inspector and `shoal topic echo` decode with it).
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

fn proto_descriptor(type_info: &TypeInfo) -> Result<MessageDescriptor, DynamicError> {
    if type_info.descriptor.is_empty() {
        return Err(DynamicError::NoDescriptor(type_info.name.clone()));
    }
    let pool = DescriptorPool::decode(type_info.descriptor.as_slice())
        .map_err(|e| DynamicError::Descriptor { name: type_info.name.clone(), reason: e.to_string() })?;
    pool.get_message_by_name(&type_info.name).ok_or_else(|| DynamicError::UnknownType(type_info.name.clone()))
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
}
