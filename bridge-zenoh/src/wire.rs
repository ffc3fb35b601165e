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
//! **Attachment**: `shoal-zenoh/2 <bridge id, 16 hex digits> <sequence> <descriptor length> <descriptor
//! fingerprint, 16 hex digits>\n`, followed by the descriptor's bytes or by nothing. The exporting bridge sends the
//! descriptor with a topic's first sample, when it changes, and then with the first sample at least
//! [`DESCRIPTOR_EVERY`] after the last that had it; the others carry its fingerprint ([`fingerprint`], 64-bit
//! FNV-1a of its bytes) only. A far bridge keeps the descriptors it got by fingerprint; one that meets a fingerprint
//! it has no descriptor for (it joined mid-stream, after a router restart or a link cut) holds those samples until
//! the descriptor comes, at most [`DESCRIPTOR_EVERY`] later (`bridge.rs`). Sending the descriptor with every sample
//! made a 64 B message ~470 B on the link; without it the router's CPU per message fell by a third. The sequence
//! number (1, 2, ... per topic and bridge) lets the far bridge count samples lost on the way (router restart, link
//! cut). A sample whose attachment does not start with
//! `shoal-zenoh/2 ` comes from another Zenoh publisher: it has no descriptor and no sequence.

use shoal::TypeInfo;

/// The attachment's magic.
pub const MAGIC: &str = "shoal-zenoh/2 ";

/// The longest a topic's samples go without the descriptor (at its rate, one sample in this long carries it).
pub const DESCRIPTOR_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The fingerprint of no descriptor (a plain Zenoh publisher's samples, raw types).
pub const EMPTY_FINGERPRINT: u64 = 0xcbf2_9ce4_8422_2325;

/// The descriptor's fingerprint: 64-bit FNV-1a of its bytes (the same in every build, unlike `std`'s hashers).
pub fn fingerprint(descriptor: &[u8]) -> u64 {
    descriptor.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

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
pub struct Attachment<'a> {
    /// The publishing bridge's id.
    pub bridge: u64,
    /// The topic's sequence number at that bridge (1 for its first sample).
    pub seq: u64,
    /// The type descriptor's length and fingerprint.
    pub descriptor_len: usize,
    pub fingerprint: u64,
    /// The descriptor, when this sample carries it (where it is in the attachment).
    pub descriptor: Option<&'a [u8]>,
}

/// The attachment of sample `seq` of `bridge`, with the descriptor's bytes if `with_descriptor`.
///
/// Written digit by digit: `write!`'s formatting machinery was a sixth of the export thread's time in a 64 B stream.
pub fn attachment(bridge: u64, seq: u64, descriptor: &[u8], fingerprint: u64, with_descriptor: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(80 + if with_descriptor { descriptor.len() } else { 0 });
    out.extend_from_slice(MAGIC.as_bytes());
    push_hex16(&mut out, bridge);
    out.push(b' ');
    push_decimal(&mut out, seq);
    out.push(b' ');
    push_decimal(&mut out, descriptor.len() as u64);
    out.push(b' ');
    push_hex16(&mut out, fingerprint);
    out.push(b'\n');
    if with_descriptor {
        out.extend_from_slice(descriptor);
    }
    out
}

/// `v` as 16 lower-case hex digits (`{v:016x}`).
fn push_hex16(out: &mut Vec<u8>, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    for (i, d) in buf.iter_mut().enumerate() {
        *d = DIGITS[((v >> (60 - 4 * i)) & 0xf) as usize];
    }
    out.extend_from_slice(&buf);
}

/// `v` in decimal (`{v}`).
fn push_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// Why an attachment that starts like a bridge's could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad shoal-zenoh attachment: {0}")]
pub struct BadAttachment(pub String);

/// Reads an attachment: `Ok(None)` for none or another publisher's (no `shoal-zenoh/2 ` magic).
pub fn parse(bytes: Option<&[u8]>) -> Result<Option<Attachment<'_>>, BadAttachment> {
    let Some(bytes) = bytes else { return Ok(None) };
    let Some(rest) = bytes.strip_prefix(MAGIC.as_bytes()) else { return Ok(None) };
    // One pass over the header line (a 64 B stream parses one per sample on Zenoh's receive thread).
    const FIELDS: [(&str, u64); 4] =
        [("bridge id", 16), ("sequence", 10), ("descriptor length", 10), ("fingerprint", 16)];
    let mut values = [0u64; 4];
    let mut at = 0;
    for (i, (what, radix)) in FIELDS.into_iter().enumerate() {
        let (start, end) = (at, if i == FIELDS.len() - 1 { b'\n' } else { b' ' });
        let mut n = Some(0u64);
        loop {
            let Some(&c) = rest.get(at) else {
                return Err(BadAttachment("no end of header".into()));
            };
            at += 1;
            if c == end {
                break;
            }
            if c == b' ' || c == b'\n' {
                let line = rest.split(|b| *b == b'\n').next().unwrap_or_default();
                return Err(BadAttachment(format!(
                    "header {:?}: want <bridge> <seq> <descriptor length> <descriptor fingerprint>",
                    String::from_utf8_lossy(line)
                )));
            }
            n = n.and_then(|n| n.checked_mul(radix)?.checked_add(u64::from(char::from(c).to_digit(radix as u32)?)));
        }
        let text = &rest[start..at - 1];
        values[i] = n
            .filter(|_| !text.is_empty())
            .ok_or_else(|| BadAttachment(format!("{what} {:?}", String::from_utf8_lossy(text))))?;
    }
    let [bridge, seq, descriptor_len, fingerprint] = values;
    let descriptor_len = usize::try_from(descriptor_len)
        .map_err(|_| BadAttachment(format!("descriptor length {descriptor_len} too large")))?;
    let nl = at - 1;
    let body = &rest[nl + 1..];
    let descriptor = match body.len() {
        n if n == descriptor_len => Some(body),
        0 => None,
        n => return Err(BadAttachment(format!("descriptor of {n} bytes, header says {descriptor_len}"))),
    };
    if descriptor.is_some_and(|d| self::fingerprint(d) != fingerprint) {
        return Err(BadAttachment(format!("the descriptor's fingerprint is not {fingerprint:016x}")));
    }
    Ok(Some(Attachment { bridge, seq, descriptor_len, fingerprint, descriptor }))
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
        let d = b"desc\nwith newline";
        let fp = fingerprint(d);
        let a = attachment(0xab, 7, d, fp, true);
        assert!(a.starts_with(format!("shoal-zenoh/2 00000000000000ab 7 17 {fp:016x}\n").as_bytes()));
        let whole = Attachment { bridge: 0xab, seq: 7, descriptor_len: 17, fingerprint: fp, descriptor: Some(&d[..]) };
        assert_eq!(parse(Some(&a)), Ok(Some(whole.clone())));
        let short = attachment(0xab, 8, d, fp, false);
        assert!(short.ends_with(b"\n"));
        assert_eq!(parse(Some(&short)), Ok(Some(Attachment { seq: 8, descriptor: None, ..whole })));
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(b"type=pb.Chat")), Ok(None));
        assert_eq!(parse(Some(b"shoal-zenoh/1 00000000000000ab 7 0\n")), Ok(None), "another version: not ours");
        for (bad, why) in [
            (&b"shoal-zenoh/2 ab 7"[..], "no end of header"),
            (b"shoal-zenoh/2 zz 1 0 0\n", "bridge id \"zz\""),
            (b"shoal-zenoh/2 ab 1 5 0\nabc", "descriptor of 3 bytes, header says 5"),
            (b"shoal-zenoh/2 ab 1 3 0\nabc", "fingerprint is not"),
            (b"shoal-zenoh/2 ab 1 0\n", "header \"ab 1 0\": want"),
            (b"shoal-zenoh/2 ab 1 0 0 0\n", "header \"ab 1 0 0 0\": want"),
            (b"shoal-zenoh/2 ab  1 0 0\n", "sequence \"\""),
            (b"shoal-zenoh/2 ab +1 0 0\n", "sequence \"+1\""),
            (b"shoal-zenoh/2 ab 18446744073709551616 0 0\n", "sequence \"18446744073709551616\""),
            (b"shoal-zenoh/2 10000000000000000 1 0 0\n", "bridge id \"10000000000000000\""),
            (b"shoal-zenoh/2 ab 1 0 \n", "fingerprint \"\""),
        ] {
            let e = parse(Some(bad)).expect_err(&String::from_utf8_lossy(bad)).to_string();
            assert!(e.contains(why), "{:?}: {e}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            parse(Some(b"shoal-zenoh/2 FFFFFFFFFFFFFFFF 18446744073709551615 2 00000000000000ab\n")),
            Ok(Some(Attachment {
                bridge: u64::MAX,
                seq: u64::MAX,
                descriptor_len: 2,
                fingerprint: 0xab,
                descriptor: None
            }))
        );
        // Digit by digit as `format!` writes them.
        for v in [0, 1, 9, 10, 0xab, 99_999, u64::from(u32::MAX) + 1, u64::MAX - 1, u64::MAX] {
            let a = attachment(v, v, &[], v, false);
            assert_eq!(String::from_utf8(a).unwrap(), format!("shoal-zenoh/2 {v:016x} {v} 0 {v:016x}\n"));
        }
        // FNV-1a's published test values.
        assert_eq!(fingerprint(b""), EMPTY_FINGERPRINT);
        assert_eq!(fingerprint(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
