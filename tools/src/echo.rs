//! `shoal topic echo TOPIC`: prints the messages of a topic, decoded through the type information their publisher
//! announced. Protobuf payloads are decoded with the descriptor from registration (JSON with `--json`, an indented
//! `field: value` form otherwise); FlatBuffers payloads, which come without a schema, are shown as their root
//! table's structure ([`crate::flatbuf`]); everything else as text or hex. A payload that does not decode with its
//! descriptor is shown in hex with a note saying why; `--raw` skips decoding.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use prost_reflect::{DynamicMessage, Kind, MapKey, ReflectMessage, Value as PValue};
use serde_json::json;
use shoal::dynamic::{DynamicDecoder, DynamicValue};
use shoal::monitor::{Snapshot, TopicDirection, printable};
use shoal::{Node, RecvError, Sample, TypeInfo};

use crate::common::start_node;
use crate::{exit, flatbuf};

/// Arguments of `shoal topic echo`.
#[derive(Debug, Args)]
pub(crate) struct EchoArgs {
    /// The topic name.
    topic: String,
    /// Exit after this many messages (default: run until interrupted).
    #[arg(long, short = 'n')]
    count: Option<u64>,
    /// One JSON object per line and message: topic, size, clock, host, pid, type_name, encoding, send_time_us,
    /// publisher_id, and the content: `message` (decoded protobuf), `flatbuffers` (the root table's structure,
    /// with payload_hex), payload_utf8 or payload_hex; `decode_error` says why a payload was not decoded.
    #[arg(long)]
    json: bool,
    /// Do not decode: the payload in hex.
    #[arg(long)]
    raw: bool,
    /// Readable form: cut strings, byte fields, lists and hex to this many characters, bytes or items (0: no
    /// limit). JSON output is never cut.
    #[arg(long, default_value_t = 128)]
    truncate: usize,
    /// Give up after this many seconds without a message (exit code 3; default: wait forever).
    #[arg(long)]
    timeout: Option<f64>,
}

/// The (host, pid) of a publisher id, looked up in registration (cached; refreshed at most every 200 ms on a miss).
struct Publishers {
    snap: Snapshot,
    taken: Option<Instant>,
    known: HashMap<u64, (String, u32)>,
}

impl Publishers {
    fn lookup(&mut self, node: &Node, id: u64) -> (String, u32) {
        if let Some(v) = self.known.get(&id) {
            return v.clone();
        }
        if self.taken.is_none_or(|t| t.elapsed() > Duration::from_millis(200)) {
            self.snap = node.snapshot();
            self.taken = Some(Instant::now());
        }
        let v = self
            .snap
            .topics
            .iter()
            .find(|t| t.entity_id == id && t.direction == TopicDirection::Publisher)
            .map(|t| (t.host_name.clone(), t.pid))
            .unwrap_or_default();
        if v.1 != 0 {
            if self.known.len() >= MAX_PUBLISHERS {
                self.known.clear();
            }
            self.known.insert(id, v.clone());
        }
        v
    }
}

/// Publishers whose decoder and host are cached (more: the caches start over).
const MAX_PUBLISHERS: usize = 1024;

/// A publisher's decoder, built from the type information it announced (rebuilt when that changes).
struct Decoder {
    type_info: TypeInfo,
    decoder: Result<DynamicDecoder, String>,
    noted: bool,
}

/// What a payload is shown as.
enum Content {
    Proto(DynamicMessage),
    Flat(flatbuf::View),
    Text(String),
    Hex { note: Option<String> },
}

fn as_text(bytes: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(bytes).ok()?;
    s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t' || c == '\r').then_some(s)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn classify(dec: &mut Decoder, payload: &[u8], raw: bool) -> Content {
    if raw {
        return Content::Hex { note: None };
    }
    match dec.type_info.encoding.as_str() {
        "proto" => match &dec.decoder {
            Err(e) => Content::Hex { note: Some(e.clone()) },
            Ok(d) => match d.decode(payload) {
                Ok(DynamicValue::Proto(m)) => Content::Proto(m),
                Ok(DynamicValue::Raw(_)) => Content::Hex { note: None },
                Err(e) => Content::Hex { note: Some(e.to_string()) },
            },
        },
        "flatb" => match flatbuf::view(payload) {
            Ok(v) => Content::Flat(v),
            Err(e) => Content::Hex { note: Some(format!("not a FlatBuffer: {e}")) },
        },
        _ => match as_text(payload) {
            Some(t) => Content::Text(t.to_owned()),
            None => Content::Hex { note: None },
        },
    }
}

/// Runs `shoal topic echo`.
pub(crate) fn run(a: &EchoArgs) -> Result<()> {
    let timeout = a
        .timeout
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|_| exit::usage("--timeout must be a number of seconds ≥ 0"))?;
    let node = start_node("shoal_topic")?;
    let sub = node.subscriber(&a.topic).create()?;
    let mut pubs = Publishers { snap: Snapshot::default(), taken: None, known: HashMap::new() };
    let mut decoders: HashMap<u64, Decoder> = HashMap::new();
    let mut n = 0u64;
    let mut out = std::io::stdout().lock();
    while a.count.is_none_or(|c| n < c) {
        let s = match timeout {
            Some(t) => match sub.recv_timeout(t) {
                Ok(s) => s,
                Err(RecvError::Timeout) => {
                    return Err(exit::not_found(format!(
                        "no message on `{}` for {t:?} ({n} received; {} publisher(s) matched: `shoal topic info {}` \
                         shows who is there)",
                        a.topic,
                        sub.publisher_count(),
                        a.topic
                    )));
                }
                Err(e) => return Err(e.into()),
            },
            None => sub.recv()?,
        };
        n += 1;
        let (host, pid) = pubs.lookup(&node, s.publisher_id());
        if decoders.len() >= MAX_PUBLISHERS && !decoders.contains_key(&s.publisher_id()) {
            decoders.clear();
        }
        let dec = decoders.entry(s.publisher_id()).or_insert_with(|| new_decoder(s.type_info()));
        if dec.type_info != *s.type_info() {
            *dec = new_decoder(s.type_info());
        }
        let content = classify(dec, s.payload(), a.raw);
        if a.json {
            json_line(&mut out, &a.topic, &s, &host, pid, &content)?;
        } else {
            if let Content::Hex { note: Some(note) } = &content
                && !dec.noted
            {
                eprintln!(
                    "note: {}; `{}` from pid {pid} is shown in hex",
                    printable(note),
                    printable(&dec.type_info.name)
                );
                dec.noted = true;
            }
            readable(&mut out, &s, &host, pid, &content, a.truncate)?;
        }
        out.flush().context("writing to stdout")?;
    }
    Ok(())
}

fn new_decoder(ti: &TypeInfo) -> Decoder {
    Decoder { type_info: ti.clone(), decoder: DynamicDecoder::new(ti).map_err(|e| e.to_string()), noted: false }
}

fn json_line(out: &mut impl Write, topic: &str, s: &Sample, host: &str, pid: u32, c: &Content) -> Result<()> {
    let p = s.payload();
    let mut v = json!({"topic": topic, "size": p.len(), "clock": s.clock(), "host": host, "pid": pid,
                       "type_name": s.type_info().name, "encoding": s.type_info().encoding,
                       "send_time_us": s.send_time_us(), "publisher_id": s.publisher_id().to_string()});
    match c {
        Content::Proto(m) => {
            let opts = prost_reflect::SerializeOptions::new()
                .use_proto_field_name(true)
                .skip_default_fields(false)
                .stringify_64_bit_integers(false);
            match m.serialize_with_options(serde_json::value::Serializer, &opts) {
                Ok(j) => v["message"] = j,
                Err(e) => {
                    v["decode_error"] = json!(format!("cannot convert to JSON: {e}"));
                    v["payload_hex"] = json!(hex(p));
                }
            }
        }
        Content::Flat(f) => {
            v["flatbuffers"] = f.to_json();
            v["payload_hex"] = json!(hex(p));
        }
        Content::Text(t) => v["payload_utf8"] = json!(t),
        Content::Hex { note } => {
            v["payload_hex"] = json!(hex(p));
            if let Some(n) = note {
                v["decode_error"] = json!(n);
            }
        }
    }
    crate::common::json_line(out, &v)
}

fn cut_hex(p: &[u8], limit: usize) -> String {
    if limit == 0 || p.len() <= limit {
        format!("0x{}", hex(p))
    } else {
        format!("0x{}… ({} B)", hex(&p[..limit]), p.len())
    }
}

fn readable(out: &mut impl Write, s: &Sample, host: &str, pid: u32, c: &Content, limit: usize) -> Result<()> {
    let p = s.payload();
    let ti = s.type_info();
    let ty = if ti.name.is_empty() { String::new() } else { format!(", {}", printable(&ti.name)) };
    let head = format!("[{} B, clock {}, from {} pid {pid}{ty}]", p.len(), s.clock(), printable(host));
    match c {
        Content::Text(t) => {
            let shown: String = if limit > 0 && t.chars().count() > limit {
                format!("{:?}…", t.chars().take(limit).collect::<String>())
            } else {
                format!("{t:?}")
            };
            writeln!(out, "{head} {shown}")?;
        }
        Content::Hex { note } => {
            let tag = if note.is_some() { " (not decoded)" } else { "" };
            writeln!(out, "{head}{tag} {}", cut_hex(p, limit))?;
        }
        Content::Proto(m) => {
            writeln!(out, "{head}")?;
            let mut lines = Vec::new();
            render_message(m, "", limit, &mut lines);
            for l in lines {
                writeln!(out, "{l}")?;
            }
            writeln!(out, "---")?;
        }
        Content::Flat(f) => {
            writeln!(out, "{head}")?;
            for l in f.lines() {
                writeln!(out, "{l}")?;
            }
            writeln!(out, "  bytes: {}", cut_hex(p, limit))?;
            writeln!(out, "---")?;
        }
    }
    Ok(())
}

/// Writes the fields of `m`, one `name: value` per line (nested messages indented), into `out`.
fn render_message(m: &DynamicMessage, indent: &str, limit: usize, out: &mut Vec<String>) {
    let desc = m.descriptor();
    let mut any = false;
    for field in desc.fields() {
        let set = m.has_field(&field);
        if field.containing_oneof().is_some() && !set {
            continue;
        }
        any = true;
        // Field, enum and map key names come from the publisher's descriptor and payload: escaped like other names.
        let name = printable(field.name());
        if field.supports_presence() && !set {
            out.push(format!("{indent}{name}: <unset>"));
            continue;
        }
        let value = m.get_field(&field);
        let kind = field.kind();
        render_field(&name, &value, &kind, indent, limit, out);
    }
    if !any {
        out.push(format!("{indent}{{}}"));
    }
}

fn render_field(name: &str, value: &PValue, kind: &Kind, indent: &str, limit: usize, out: &mut Vec<String>) {
    let deeper = format!("{indent}  ");
    match value {
        PValue::Message(inner) if !is_well_known(inner) => {
            out.push(format!("{indent}{name}:"));
            render_message(inner, &deeper, limit, out);
        }
        PValue::List(items) => {
            let shown = if limit > 0 { items.len().min(limit) } else { items.len() };
            let more = items.len() - shown;
            let tail = if more > 0 { format!(" … ({} items)", items.len()) } else { String::new() };
            if items.iter().any(|v| matches!(v, PValue::Message(m) if !is_well_known(m))) {
                out.push(format!("{indent}{name}:{tail}"));
                for item in &items[..shown] {
                    if let PValue::Message(m) = item {
                        let inner = format!("{indent}    ");
                        let mut sub = Vec::new();
                        render_message(m, &inner, limit, &mut sub);
                        if let Some(first) = sub.first_mut() {
                            *first = format!("{indent}  - {}", first.strip_prefix(inner.as_str()).unwrap_or(first));
                        }
                        out.extend(sub);
                    }
                }
            } else {
                let cells: Vec<String> = items[..shown].iter().map(|v| scalar(v, kind, limit)).collect();
                out.push(format!("{indent}{name}: [{}]{tail}", cells.join(", ")));
            }
        }
        PValue::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                other => other.clone(),
            };
            if entries.is_empty() {
                out.push(format!("{indent}{name}: {{}}"));
                return;
            }
            out.push(format!("{indent}{name}:"));
            let mut keys: Vec<(&MapKey, &PValue)> = entries.iter().collect();
            keys.sort_by_key(|(k, _)| map_key(k));
            for (k, v) in keys {
                render_field(&printable(&map_key(k)), v, &value_kind, &deeper, limit, out);
            }
        }
        other => out.push(format!("{indent}{name}: {}", scalar(other, kind, limit))),
    }
}

fn is_well_known(m: &DynamicMessage) -> bool {
    m.descriptor().full_name().starts_with("google.protobuf.")
}

fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(v) => v.to_string(),
        MapKey::I64(v) => v.to_string(),
        MapKey::U32(v) => v.to_string(),
        MapKey::U64(v) => v.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

fn scalar(v: &PValue, kind: &Kind, limit: usize) -> String {
    match v {
        PValue::Bool(b) => b.to_string(),
        PValue::I32(x) => x.to_string(),
        PValue::I64(x) => x.to_string(),
        PValue::U32(x) => x.to_string(),
        PValue::U64(x) => x.to_string(),
        PValue::F32(x) => format!("{x:?}"),
        PValue::F64(x) => format!("{x:?}"),
        PValue::String(s) => {
            if limit > 0 && s.chars().count() > limit {
                format!("{:?}… ({} chars)", s.chars().take(limit).collect::<String>(), s.chars().count())
            } else {
                format!("{s:?}")
            }
        }
        PValue::Bytes(b) => cut_hex(b, limit),
        PValue::EnumNumber(n) => match kind {
            Kind::Enum(e) => {
                e.get_value(*n).map_or_else(|| n.to_string(), |ev| format!("{} ({n})", printable(ev.name())))
            }
            _ => n.to_string(),
        },
        // Well-known types (Timestamp, Duration, wrappers, ...) in their JSON form.
        PValue::Message(m) => serde_json::to_value(m).map_or_else(|e| format!("<{e}>"), |j| j.to_string()),
        PValue::List(_) | PValue::Map(_) => "…".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptors;

    #[test]
    fn imu_renders_readably() {
        let proto = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/proto/imu.proto");
        let t = descriptors::from_proto_file(&proto, &[], "pb.Imu").unwrap();
        let bytes = descriptors::encode_json(
            &t.message,
            r#"{"header": {"seq": 3, "frame_id": "imu_link", "stamp": "2026-12-01T12:00:00Z"},
                "linear_acceleration": {"x": 0.3, "z": 9.81}, "status": "STATUS_DEGRADED",
                "covariance": [0.01, 0.02], "attributes": {"unit": "m/s2", "b": "x"}, "temperature_c": 23.0}"#,
        )
        .unwrap();
        let mut dec = new_decoder(&t.type_info);
        let Content::Proto(m) = classify(&mut dec, &bytes, false) else { panic!("not decoded") };
        let mut lines = Vec::new();
        render_message(&m, "", 128, &mut lines);
        let text = lines.join("\n");
        for want in [
            "header:\n  stamp: \"2026-12-01T12:00:00Z\"\n  frame_id: \"imu_link\"\n  seq: 3",
            "linear_acceleration:\n  x: 0.3\n  y: 0.0\n  z: 9.81",
            "angular_velocity: <unset>",
            "status: STATUS_DEGRADED (2)",
            "covariance: [0.01, 0.02]",
            "attributes:\n  b: \"x\"\n  unit: \"m/s2\"",
            "temperature_c: 23.0",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert!(!text.contains("calibration_file"), "{text}");
        // Truncation of lists.
        let mut short = Vec::new();
        render_message(&m, "", 1, &mut short);
        assert!(short.iter().any(|l| l == "covariance: [0.01] … (2 items)"), "{short:?}");
        // A payload that is not an Imu falls back to hex with a note; so does a broken descriptor.
        assert!(matches!(classify(&mut dec, &[0xff, 0xff, 0xff], false), Content::Hex { note: Some(_) }));
        let mut broken = new_decoder(&TypeInfo::new("pb.Imu", "proto", vec![1, 2, 3]));
        assert!(matches!(classify(&mut broken, &bytes, false), Content::Hex { note: Some(_) }));
        assert!(matches!(classify(&mut dec, &bytes, true), Content::Hex { note: None }));
    }
}
