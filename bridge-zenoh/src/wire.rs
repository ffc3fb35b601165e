//! What a bridged sample carries besides its payload: the shoal type in the Zenoh encoding, and the bridge's
//! attachment (the publishing bridge, a per-topic sequence number and the type's descriptor).
//!
//! **Encoding** (a string, as `zenoh::bytes::Encoding` prints and parses it):
//! - shoal encoding `proto`, type `pb.Chat` → `application/protobuf;pb.Chat` (Zenoh's own protobuf encoding, the
//!   schema being the message's full name);
//! - any other shoal encoding `E` with type `N` → `shoal/E;N` (a custom Zenoh encoding; `%` and `;` in `E` are
//!   written `%25` and `%3B`), `shoal/E` without a name;
//! - no type at all → Zenoh's default (`zenoh/bytes`).
//!
//! Read back the same way. A sample from a plain Zenoh publisher with another encoding, e.g. `text/plain;x`, becomes
//! the shoal type with encoding `text/plain` and name `x` (no descriptor).
//!
//! **Attachment**: `shoal-zenoh/1 <bridge id, 16 hex digits> <sequence> <descriptor length>\n` followed by the
//! descriptor's bytes. The descriptor travels in every sample rather than under a separate metadata key: a sample
//! is then understood on its own, whichever is the first one a far bridge or a late Zenoh subscriber sees (after a
//! router restart, a link cut or a late start), with no query and no ordering between a metadata key and the data.
//! The cost is the descriptor's size per sample (a few hundred bytes for a small protobuf file); the measured
//! throughput (`tests/sites.rs`, `measure`) includes it. The sequence number (1, 2, ... per topic and bridge) lets
//! the far bridge count samples lost on the way (router restart, link cut). A sample whose attachment does not start
//! with `shoal-zenoh/1 ` comes from another Zenoh publisher: it has no descriptor and no sequence.

use shoal::TypeInfo;

/// The attachment's magic.
pub const MAGIC: &str = "shoal-zenoh/1 ";

fn escape_encoding(e: &str) -> String {
    e.replace('%', "%25").replace(';', "%3B")
}

fn unescape_encoding(e: &str) -> String {
    e.replace("%3B", ";").replace("%25", "%")
}

/// The Zenoh encoding string of a shoal type (see the module documentation).
pub fn encoding_of(t: &TypeInfo) -> String {
    if t.encoding.is_empty() && t.name.is_empty() {
        "zenoh/bytes".into()
    } else if t.encoding == "proto" {
        if t.name.is_empty() { "application/protobuf".into() } else { format!("application/protobuf;{}", t.name) }
    } else if t.name.is_empty() {
        format!("shoal/{}", escape_encoding(&t.encoding))
    } else {
        format!("shoal/{};{}", escape_encoding(&t.encoding), t.name)
    }
}

/// The shoal type name and encoding of a Zenoh encoding string (the descriptor comes from the attachment).
pub fn type_of_encoding(encoding: &str) -> TypeInfo {
    let (id, schema) = encoding.split_once(';').unwrap_or((encoding, ""));
    if let Some(e) = id.strip_prefix("shoal/") {
        return TypeInfo::new(schema, unescape_encoding(e), Vec::new());
    }
    match id {
        "" | "zenoh/bytes" => TypeInfo::new(schema, "", Vec::new()),
        "application/protobuf" => TypeInfo::new(schema, "proto", Vec::new()),
        other => TypeInfo::new(schema, other, Vec::new()),
    }
}

/// What a bridge's attachment says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The publishing bridge's id.
    pub bridge: u64,
    /// The topic's sequence number at that bridge (1 for its first sample).
    pub seq: u64,
    /// The type's descriptor.
    pub descriptor: Vec<u8>,
}

/// The attachment's header line (everything before the descriptor).
pub fn header(bridge: u64, seq: u64, descriptor_len: usize) -> String {
    format!("{MAGIC}{bridge:016x} {seq} {descriptor_len}\n")
}

/// The full attachment.
pub fn attachment(bridge: u64, seq: u64, descriptor: &[u8]) -> Vec<u8> {
    let mut out = header(bridge, seq, descriptor.len()).into_bytes();
    out.extend_from_slice(descriptor);
    out
}

/// Why an attachment that starts like a bridge's could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad shoal-zenoh attachment: {0}")]
pub struct BadAttachment(pub String);

/// Reads an attachment: `Ok(None)` for none or another publisher's (no `shoal-zenoh/1 ` magic).
pub fn parse(bytes: Option<&[u8]>) -> Result<Option<Attachment>, BadAttachment> {
    let Some(bytes) = bytes else { return Ok(None) };
    let Some(rest) = bytes.strip_prefix(MAGIC.as_bytes()) else { return Ok(None) };
    let nl = rest.iter().position(|b| *b == b'\n').ok_or_else(|| BadAttachment("no end of header".into()))?;
    let head = std::str::from_utf8(&rest[..nl]).map_err(|_| BadAttachment("header is not UTF-8".into()))?;
    let mut parts = head.split(' ');
    let (Some(b), Some(s), Some(l), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(BadAttachment(format!("header {head:?}: want <bridge> <seq> <descriptor length>")));
    };
    let bridge = u64::from_str_radix(b, 16).map_err(|_| BadAttachment(format!("bridge id {b:?}")))?;
    let seq = s.parse().map_err(|_| BadAttachment(format!("sequence {s:?}")))?;
    let len: usize = l.parse().map_err(|_| BadAttachment(format!("descriptor length {l:?}")))?;
    let descriptor = &rest[nl + 1..];
    if descriptor.len() != len {
        return Err(BadAttachment(format!("descriptor of {} bytes, header says {len}", descriptor.len())));
    }
    Ok(Some(Attachment { bridge, seq, descriptor: descriptor.to_vec() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip() {
        for t in [
            TypeInfo::new("pb.Chat", "proto", Vec::new()),
            TypeInfo::new("", "proto", Vec::new()),
            TypeInfo::new("demo.T", "flatb", Vec::new()),
            TypeInfo::new("", "raw", Vec::new()),
            TypeInfo::new("x;y", "we;ird%", Vec::new()),
            TypeInfo::default(),
        ] {
            let e = encoding_of(&t);
            assert_eq!(type_of_encoding(&e), t, "{e}");
            // What Zenoh makes of the string prints back as the same string.
            assert_eq!(zenoh::bytes::Encoding::from(e.as_str()).to_string(), e);
        }
        assert_eq!(encoding_of(&TypeInfo::new("pb.Chat", "proto", Vec::new())), "application/protobuf;pb.Chat");
        assert_eq!(type_of_encoding("text/plain;x"), TypeInfo::new("x", "text/plain", Vec::new()));
    }

    #[test]
    fn attachments() {
        let a = attachment(0xab, 7, b"desc\nwith newline");
        assert!(a.starts_with(b"shoal-zenoh/1 00000000000000ab 7 17\n"));
        assert_eq!(
            parse(Some(&a)),
            Ok(Some(Attachment { bridge: 0xab, seq: 7, descriptor: b"desc\nwith newline".to_vec() }))
        );
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(b"type=pb.Chat")), Ok(None));
        for bad in [
            &b"shoal-zenoh/1 ab 7"[..],
            b"shoal-zenoh/1 zz 1 0\n",
            b"shoal-zenoh/1 ab 1 5\nabc",
            b"shoal-zenoh/1 ab 1\n",
        ] {
            assert!(parse(Some(bad)).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
