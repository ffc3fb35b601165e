//! `shoal record` and `shoal play` against real peers: shoal publishers recorded and read back by the Python `mcap`
//! package with `mcap-protobuf-support` (venv from `scripts/mcap-venv`), eCAL 6.1.1 publishers recorded and played
//! back to an eCAL subscriber, SIGTERM, `--rate`, and damaged files.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, Value as PValue};
use serde_json::Value;
use shoal::TypeInfo;
use support::{Proc, ecal_peer, mcap_python, shoal_peer, topic};

const SHOAL: &str = env!("CARGO_BIN_EXE_shoal");

fn shoal(args: &[&str]) -> Command {
    let mut cmd = Command::new(SHOAL);
    cmd.args(args);
    cmd
}

/// A path in the test's temp directory, unique to this process.
fn temp_file(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}_{}.mcap", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// `shoal.test.Reading { uint64 seq = 1; string label = 2; double value = 3; repeated float samples = 4; }` as eCAL
/// type information (a serialized FileDescriptorSet) and its message descriptor.
fn reading_type() -> (TypeInfo, MessageDescriptor) {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
    let field = |name: &str, number: i32, ty: Type, label: Label| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        r#type: Some(ty as i32),
        label: Some(label as i32),
        json_name: Some(name.into()),
        ..Default::default()
    };
    let fds = FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("shoal_test/reading.proto".into()),
            package: Some("shoal.test".into()),
            syntax: Some("proto3".into()),
            message_type: vec![DescriptorProto {
                name: Some("Reading".into()),
                field: vec![
                    field("seq", 1, Type::Uint64, Label::Optional),
                    field("label", 2, Type::String, Label::Optional),
                    field("value", 3, Type::Double, Label::Optional),
                    field("samples", 4, Type::Float, Label::Repeated),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let bytes = fds.encode_to_vec();
    let pool = DescriptorPool::decode(bytes.as_slice()).expect("descriptor pool");
    let md = pool.get_message_by_name("shoal.test.Reading").expect("message type");
    (TypeInfo::new("shoal.test.Reading", "proto", bytes), md)
}

fn reading(md: &MessageDescriptor, seq: u64) -> Vec<u8> {
    let mut m = DynamicMessage::new(md.clone());
    m.set_field_by_name("seq", PValue::U64(seq));
    m.set_field_by_name("label", PValue::String(format!("reading {seq}")));
    m.set_field_by_name("value", PValue::F64(seq as f64 * 0.5));
    m.set_field_by_name("samples", PValue::List(vec![PValue::F32(1.0), PValue::F32(seq as f32)]));
    m.encode_to_vec()
}

/// Raw payload `i` of the blob topic: not UTF-8, not protobuf.
fn blob(i: u64) -> Vec<u8> {
    (0..300u64).map(|k| (k.wrapping_mul(7) ^ i) as u8 | 0x80).collect()
}

fn recorder(name: &str, args: &[&str]) -> Proc {
    Proc::spawn(name, shoal(&[&["record", "--json"], args].concat()))
}

/// Runs `read_mcap.py` on `file`: its JSON lines.
fn python_read(file: &Path) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcap/read_mcap.py");
    let out = Command::new(mcap_python()).arg(script).arg(file).output().expect("run read_mcap.py");
    assert!(out.status.success(), "read_mcap.py failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect()
}

#[test]
fn a_recording_of_shoal_publishers_is_read_by_the_python_mcap_reader() {
    const N: u64 = 60;
    let file = temp_file("shoal_publishers");
    let (t_proto, t_raw) = (topic("rec_proto"), topic("rec_raw"));
    let node = shoal::Node::init("record_test").expect("node");
    let (ti, md) = reading_type();
    let mut p_proto = node.publisher(&t_proto).type_info(ti.clone()).create().expect("publisher");
    let mut p_raw = node.publisher(&t_raw).type_info(TypeInfo::raw("shoal.test.Blob")).create().expect("publisher");
    let mut rec = recorder("shoal record", &["-o", file.to_str().expect("path"), &t_proto, &t_raw]);
    rec.expect("subscribed", Duration::from_secs(20));
    rec.expect("subscribed", Duration::from_secs(20));
    p_proto.wait_for_subscribers(1, Duration::from_secs(20)).expect("the recorder did not match");
    p_raw.wait_for_subscribers(1, Duration::from_secs(20)).expect("the recorder did not match");
    for i in 1..=N {
        p_proto.send(&reading(&md, i)).expect("send");
        p_raw.send(&blob(i)).expect("send");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(500));
    rec.signal(libc::SIGINT);
    let summary = rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    eprintln!("recorder: {summary}");
    assert_eq!(summary["messages"], 2 * N, "{summary}");
    assert_eq!(summary["queue_drops"], 0, "{summary}");
    assert_eq!(summary["subscriber_drops"], 0, "{summary}");
    for t in summary["topics"].as_array().expect("topics") {
        assert_eq!(t["layers"]["shoal_ring"], N, "shoal publishers are read from their ring: {t}");
    }

    let lines = python_read(&file);
    let of = |ev: &'static str| lines.iter().filter(move |v| v["event"] == ev);
    let channel = |t: &str| of("channel").find(|c| c["topic"] == t).unwrap_or_else(|| panic!("no channel {t}"));
    let c = channel(&t_proto);
    assert_eq!(c["message_encoding"], "protobuf", "{c}");
    assert_eq!(c["schema_encoding"], "protobuf", "{c}");
    assert_eq!(c["schema_name"], "shoal.test.Reading", "{c}");
    assert_eq!(c["metadata"]["ecal.encoding"], "proto", "{c}");
    let c = channel(&t_raw);
    assert_eq!(c["schema_name"], Value::Null, "a raw topic has no schema: {c}");
    assert_eq!(c["message_encoding"], "raw", "{c}");
    assert_eq!(c["metadata"]["ecal.type_name"], "shoal.test.Blob", "{c}");

    let msgs = |t: &str| of("msg").filter(|m| m["topic"] == t).cloned().collect::<Vec<_>>();
    let proto_msgs = msgs(&t_proto);
    assert_eq!(proto_msgs.len() as u64, N, "every protobuf message is in the file");
    for (i, m) in (1..=N).zip(&proto_msgs) {
        let d = &m["decoded"];
        // The protobuf JSON mapping writes 64-bit integers as strings.
        assert_eq!(d["seq"], i.to_string(), "decoded through the recorded schema, in order: {m}");
        assert_eq!(d["label"], format!("reading {i}"), "{m}");
        assert_eq!(d["value"], i as f64 * 0.5, "{m}");
        assert_eq!(d["samples"], serde_json::json!([1.0, i as f64]), "{m}");
        assert_eq!(m["sequence"], i, "the sequence is the publisher's clock: {m}");
        let (log, publ) = (m["log_time"].as_u64().expect("log"), m["publish_time"].as_u64().expect("pub"));
        assert!(publ > 0 && publ <= log, "publish time = send time, before the receive time: {m}");
    }
    let raw_msgs = msgs(&t_raw);
    assert_eq!(raw_msgs.len() as u64, N, "every raw message is in the file");
    for (i, m) in (1..=N).zip(&raw_msgs) {
        assert_eq!(m["digest"], format!("{:016x}", shoal_tools::fnv1a64(&blob(i))), "bytes intact: {m}");
        assert_eq!(m["sequence"], i, "{m}");
    }
    let meta = of("metadata").find(|m| m["name"] == "shoal.recording").expect("the recording's metadata record");
    assert_eq!(meta["metadata"]["queue_drops"], "0", "{meta}");
    assert_eq!(meta["metadata"]["subscriber_drops"], "0", "{meta}");
    assert_eq!(meta["metadata"][format!("topic.{t_proto}.received")], N.to_string(), "{meta}");
    let end = of("summary").next().expect("summary");
    assert_eq!(end["statistics_message_count"], 2 * N, "the summary section counts every message: {end}");
    let _ = std::fs::remove_file(&file);
}

/// The shoal-peer self-check: bytes 16..24 hold the FNV-1a of bytes 24..
fn peer_payload_intact(p: &[u8]) -> bool {
    p.len() >= 24 && u64::from_le_bytes(p[16..24].try_into().expect("8 bytes")) == shoal_tools::fnv1a64(&p[24..])
}

#[test]
fn sigterm_leaves_a_valid_file_with_the_topics_that_appeared_while_recording() {
    let file = temp_file("sigterm");
    let (a, b) = (topic("sigterm_a"), topic("sigterm_b"));
    let regex = format!("^test_sigterm_[ab]_{}$", std::process::id());
    let mut rec =
        recorder("shoal record", &["-o", file.to_str().expect("path"), "--regex", &regex, "--chunk-kb", "64"]);
    let peer_args =
        |t: &str| ["pub", "--topic", t, "--count", "0", "--rate", "500", "--size", "2000"].map(String::from);
    let pa = peer_args(&a);
    let publ_a = shoal_peer("shoal-peer pub a", &pa.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let sub_a = rec.expect("subscribed", Duration::from_secs(20));
    assert_eq!(sub_a["topic"], a.as_str());
    std::thread::sleep(Duration::from_millis(800));
    let pb = peer_args(&b);
    let publ_b = shoal_peer("shoal-peer pub b", &pb.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let sub_b = rec.expect("subscribed", Duration::from_secs(20));
    assert_eq!(sub_b["topic"], b.as_str(), "a topic that appeared later is recorded too");
    std::thread::sleep(Duration::from_millis(800));
    rec.signal(libc::SIGTERM);
    let summary = rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    drop((publ_a, publ_b));
    eprintln!("recorder: {summary}");

    let bytes = std::fs::read(&file).expect("the file");
    let s = mcap::Summary::read(&bytes).expect("summary parses").expect("the file has its summary section");
    let stats = s.stats.as_ref().expect("statistics");
    assert_eq!(stats.message_count, summary["messages"].as_u64().expect("messages"), "{summary}");
    assert!(!s.chunk_indexes.is_empty(), "chunk indexes written");
    let mut per_topic = std::collections::BTreeMap::<String, u64>::new();
    for m in mcap::MessageStream::new(&bytes).expect("message stream") {
        let m = m.expect("every message reads back");
        assert!(peer_payload_intact(&m.data), "payload intact");
        *per_topic.entry(m.channel.topic.clone()).or_default() += 1;
    }
    assert_eq!(per_topic.values().sum::<u64>(), stats.message_count);
    assert!(per_topic.get(&a).copied().unwrap_or(0) > 100, "{per_topic:?}");
    assert!(per_topic.get(&b).copied().unwrap_or(0) > 100, "{per_topic:?}");
    let meta = s
        .metadata_indexes
        .iter()
        .find(|i| i.name == "shoal.recording")
        .map(|i| mcap::read::metadata(&bytes, i).expect("metadata record"))
        .expect("the recording's metadata is indexed");
    let drops = |k: &str| meta.metadata[k].parse::<u64>().expect("a count");
    let info = shoal(&["info", file.to_str().expect("path"), "--json"]).output().expect("shoal info");
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let info: Value = serde_json::from_slice(&info.stdout).expect("info json");
    assert_eq!(info["messages"], stats.message_count, "{info}");
    assert_eq!(info["channels"].as_array().expect("channels").len(), 2, "{info}");
    assert_eq!(info["metadata"][0]["name"], "shoal.recording", "{info}");
    let _ = std::fs::remove_file(&file);
    assert_eq!(drops("queue_drops"), summary["queue_drops"].as_u64().expect("n"), "{meta:?}");
    assert_eq!(drops("subscriber_drops"), summary["subscriber_drops"].as_u64().expect("n"), "{meta:?}");
}

#[test]
fn a_recording_of_ecal_publishers_plays_back_to_an_ecal_subscriber() {
    let file = temp_file("ecal");
    let t = topic("rec_ecal");
    let mut rec = recorder("shoal record", &["-o", file.to_str().expect("path"), &t]);
    rec.expect("subscribed", Duration::from_secs(20));
    // Until stopped: an eCAL publisher may send its first message before a new subscriber has attached to its
    // memfile (the subscriber counts it as a drop), so the test checks that every message is recorded or counted.
    let mut publ = ecal_peer(
        "eCAL pub.py",
        "pub.py",
        &[
            "--topic",
            &t,
            "--count",
            "0",
            "--rate",
            "100",
            "--size",
            "512",
            "--type-name",
            "shoal.test.EcalBlob",
            "--encoding",
            "raw",
            "--descriptor-hex",
            "0a0b0c",
            "--wait-subs",
            "1",
            "--wait-ms",
            "20000",
        ],
    );
    publ.expect("matched", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1000));
    publ.signal(libc::SIGTERM);
    let sent = publ.expect("done", Duration::from_secs(20))["sent"].as_u64().expect("sent");
    std::thread::sleep(Duration::from_millis(500));
    rec.signal(libc::SIGINT);
    let summary = rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    publ.wait_success(Duration::from_secs(20));
    eprintln!("recorder: {summary}, eCAL publisher sent {sent}");
    let recorded = summary["messages"].as_u64().expect("messages");
    assert!(recorded >= 50, "{summary}");
    assert_eq!(
        recorded + summary["subscriber_drops"].as_u64().expect("drops"),
        sent,
        "every message recorded or counted as lost: {summary}"
    );
    assert_eq!(
        summary["topics"][0]["layers"]["shm"], recorded,
        "a local eCAL publisher is read from its memfile: {summary}"
    );
    let bytes = std::fs::read(&file).expect("the file");
    let clocks: Vec<u64> = mcap::MessageStream::new(&bytes)
        .expect("stream")
        .map(|m| {
            let m = m.expect("message");
            assert!(peer_payload_intact(&m.data), "recorded intact");
            u64::from_le_bytes(m.data[0..8].try_into().expect("8 bytes"))
        })
        .collect();

    let mut sub =
        ecal_peer("eCAL sub.py", "sub.py", &["--topic", &t, "--count", &recorded.to_string(), "--timeout-ms", "40000"]);
    sub.expect("ready", Duration::from_secs(20));
    // eCAL's memfile layer without its acknowledge handshake lets a subscriber that is not scheduled in time miss a
    // message (a Python subscriber on a loaded machine does); with it, the publisher waits for the read.
    let ini = support::write_ini("play_ack", "[publisher]\nmemfile_ack_timeout = 1000\n");
    let play = shoal(&["play", file.to_str().expect("path"), "--json", "--wait-timeout", "20"])
        .env("ECAL_INI", ini)
        .output()
        .expect("play");
    assert!(play.status.success(), "shoal play failed: {}", String::from_utf8_lossy(&play.stderr));
    let lines = sub.until("summary", Duration::from_secs(30));
    let msgs: Vec<&Value> = lines.iter().filter(|v| v["event"] == "msg").collect();
    let played: Vec<u64> = msgs.iter().map(|m| m["pattern_clock"].as_u64().expect("clock")).collect();
    assert_eq!(played, clocks, "every recorded message once, in order");
    for m in &msgs {
        assert_eq!(m["intact"], true, "{m}");
        assert_eq!(m["type_name"], "shoal.test.EcalBlob", "the recorded type is announced: {m}");
        assert_eq!(m["encoding"], "raw", "{m}");
    }
    sub.wait_exit_reported(Duration::from_secs(10));
    let _ = std::fs::remove_file(&file);
}

/// Writes an MCAP file of `chunks` chunks of `per_chunk` messages, one every `step_ms` of log time, on one
/// protobuf channel, topic `channel` (each test its own: the tests of this file run at once, and a play of one
/// would reach another's subscriber); returns the file's bytes.
fn synthetic_file(
    channel: &str,
    chunks: u64,
    per_chunk: u64,
    step_ms: u64,
    compression: Option<mcap::Compression>,
) -> Vec<u8> {
    let (ti, md) = reading_type();
    let mut w = mcap::WriteOptions::new()
        .compression(compression)
        .chunk_size(None)
        .create(std::io::Cursor::new(Vec::new()))
        .expect("writer");
    let schema = w.add_schema("shoal.test.Reading", "protobuf", &ti.descriptor).expect("schema");
    let ch = w.add_channel(schema, channel, "protobuf", &Default::default()).expect("channel");
    let t0 = 1_700_000_000_000_000_000u64;
    for i in 0..chunks * per_chunk {
        let header = mcap::records::MessageHeader {
            channel_id: ch,
            sequence: i as u32 + 1,
            log_time: t0 + i * step_ms * 1_000_000,
            publish_time: t0 + i * step_ms * 1_000_000,
        };
        w.write_to_known_channel(&header, &reading(&md, i + 1)).expect("write");
        if (i + 1) % per_chunk == 0 {
            w.flush().expect("end the chunk");
        }
    }
    w.finish().expect("finish");
    w.into_inner().into_inner()
}

fn play_json(file: &Path, args: &[&str]) -> (std::process::Output, Value) {
    let out = shoal(&[&["play", file.to_str().expect("path"), "--json"], args].concat()).output().expect("play");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).next_back();
    let v = v.unwrap_or_else(|| panic!("no summary from shoal play: {}", String::from_utf8_lossy(&out.stderr)));
    (out, v)
}

#[test]
fn play_with_rate_2_takes_half_the_time() {
    // 21 messages 50 ms apart: 1 s of recording.
    let file = temp_file("rate");
    let channel = topic("synthetic_rate");
    std::fs::write(&file, synthetic_file(&channel, 3, 7, 50, Some(mcap::Compression::Zstd))).expect("write");
    let node = shoal::Node::init("play_rate_test").expect("node");
    let sub = node.subscriber(&channel).create().expect("subscriber");
    let mut seconds = Vec::new();
    for rate in ["1", "2"] {
        let started = Instant::now();
        let (out, v) = play_json(&file, &["--rate", rate, "--wait-timeout", "20"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(v["published"], 21, "{v}");
        let mut got = Vec::new();
        while let Ok(s) = sub.recv_timeout(Duration::from_millis(500)) {
            got.push(s.clock());
            assert_eq!(s.type_info().name, "shoal.test.Reading", "the schema's type is announced");
            assert_eq!(s.type_info().encoding, "proto");
        }
        assert_eq!(got, (1..=21).collect::<Vec<_>>(), "rate {rate}: every message once, in order");
        eprintln!("rate {rate}: {v} ({:?} in all)", started.elapsed());
        seconds.push(v["seconds"].as_f64().expect("seconds"));
    }
    let ratio = seconds[0] / seconds[1];
    assert!((1.6..2.4).contains(&ratio), "rate 2 takes half the time of rate 1: {seconds:?}");
    assert!((0.95..1.4).contains(&seconds[0]), "rate 1 keeps the recorded 1 s: {seconds:?}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_truncated_file_plays_what_is_readable_and_says_what_is_not() {
    let bytes = synthetic_file(&topic("synthetic_truncated"), 5, 10, 1, Some(mcap::Compression::Zstd));
    let s = mcap::Summary::read(&bytes).expect("summary").expect("summary");
    // Cut in the middle of the fourth chunk: the first three play, the rest is reported.
    let fourth = &s.chunk_indexes[3];
    let cut = (fourth.chunk_start_offset + fourth.chunk_length / 2) as usize;
    let file = temp_file("truncated");
    std::fs::write(&file, &bytes[..cut]).expect("write");
    let (out, v) = play_json(&file, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(1), "a damaged file is an error after playing: {v}");
    assert_eq!(v["published"], 30, "the three complete chunks are played: {v}");
    assert_eq!(v["had_summary"], false, "{v}");
    let damage = v["damage"].as_array().expect("damage");
    assert_eq!(damage.len(), 1, "{v}");
    assert!(damage[0]["what"].as_str().expect("what").contains("truncated"), "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("truncated") && !stderr.contains("panicked"), "{stderr}");
    let info = shoal(&["info", file.to_str().expect("path"), "--json"]).output().expect("shoal info");
    assert_eq!(info.status.code(), Some(1), "{}", String::from_utf8_lossy(&info.stderr));
    let info: Value = serde_json::from_slice(&info.stdout).expect("info json");
    assert_eq!(info["messages"], 30, "shoal info counts what is readable: {info}");
    assert_eq!(info["had_summary"], false, "{info}");
    assert_eq!(info["damage"].as_array().expect("damage").len(), 1, "{info}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn garbage_in_a_chunk_skips_that_chunk_only() {
    let bytes = synthetic_file(&topic("synthetic_garbage"), 5, 10, 1, Some(mcap::Compression::Zstd));
    let s = mcap::Summary::read(&bytes).expect("summary").expect("summary");
    let second = &s.chunk_indexes[1];
    let mut bad = bytes.clone();
    // The chunk record: opcode, length, then its header; overwrite bytes in the middle of its compressed data.
    let mid = (second.chunk_start_offset + second.chunk_length / 2) as usize;
    for (k, b) in bad[mid - 16..mid + 16].iter_mut().enumerate() {
        *b = 0xA5 ^ k as u8;
    }
    let file = temp_file("garbage");
    std::fs::write(&file, &bad).expect("write");
    let (out, v) = play_json(&file, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(v["published"], 40, "the four intact chunks are played: {v}");
    assert_eq!(v["had_summary"], true, "{v}");
    let damage = v["damage"].as_array().expect("damage");
    assert_eq!(damage.len(), 1, "{v}");
    assert!(damage[0]["what"].as_str().expect("what").contains("chunk"), "{v}");
    // Pure garbage is not a file at all: reported, no panic.
    let junk = temp_file("junk");
    std::fs::write(&junk, (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect::<Vec<_>>())
        .expect("write");
    let (out, v) = play_json(&junk, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!(v["published"], 0, "{v}");
    let _ = (std::fs::remove_file(&file), std::fs::remove_file(&junk));
}

#[test]
fn bad_arguments_exit_with_the_usage_code() {
    let dir = std::env::temp_dir();
    let out_file = dir.join(format!("shoal_args_{}.mcap", std::process::id()));
    let out = out_file.to_str().expect("utf-8");
    for (args, code) in [
        (vec!["record", "-o", out], 2),
        (vec!["record", "-o", out, "--regex", "("], 2),
        (vec!["record", "-o", out, "--all", "--duration", "0"], 2),
        (vec!["play", out, "--rate", "0"], 2),
        (vec!["play", "/nonexistent/shoal.mcap"], 3),
    ] {
        let o = Command::new(SHOAL).args(&args).output().expect("run shoal");
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{args:?}");
    }
    assert!(!out_file.exists(), "nothing recorded on a bad command line");
}

/// `[shoal_security] shm_access` in an `ecal.ini` for a recorder.
fn security_ini(name: &str, access: &str) -> String {
    support::write_ini(name, &format!("[shoal_security]\nshm_access = {access}\n"))
}

/// The permission bits of `path`.
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

/// `shoal record --json args` run by `sh` with `umask`, reading `ecal_ini` when given.
fn recorder_with_umask(name: &str, umask: &str, ecal_ini: Option<&str>, args: &[&str]) -> Proc {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\""), SHOAL, "record", "--json"]).args(args);
    if let Some(ini) = ecal_ini {
        cmd.env("ECAL_INI", ini);
    }
    Proc::spawn(name, cmd)
}

#[test]
fn recordings_are_created_with_the_configured_mode_whatever_the_umask() {
    // Owner only by default, even with umask 000, and an existing world-writable file is replaced, not reused.
    let file = temp_file("mode_owner");
    std::fs::write(&file, b"an older file").expect("write");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
    let t = topic("mode_owner");
    let mut rec = recorder_with_umask("shoal record (umask 000)", "000", None, &["-o", file.to_str().expect("p"), &t]);
    rec.expect("subscribed", Duration::from_secs(20));
    assert_eq!(mode_of(&file), 0o600, "while recording: created with the mode, not changed to it at the end");
    rec.signal(libc::SIGINT);
    rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    assert_eq!(mode_of(&file), 0o600);
    assert!(std::fs::read(&file).expect("read").starts_with(shoal_tools::mcap_read::MAGIC), "a new file");
    let _ = std::fs::remove_file(&file);

    // shm_access = group: 0640, with umask 077 too, for every file of a split recording.
    let base = temp_file("mode_group");
    let ini = security_ini("mode_group", "group");
    let t = topic("mode_group");
    let node = shoal::Node::init("record_mode_test").expect("node");
    let mut p = node.publisher(&t).type_info(TypeInfo::raw("shoal.test.Blob")).create().expect("publisher");
    let mut rec = recorder_with_umask(
        "shoal record (umask 077, group)",
        "077",
        Some(&ini),
        &["-o", base.to_str().expect("p"), "--max-size", "4k", "--chunk-kb", "1", "--compression", "none", &t],
    );
    rec.expect("subscribed", Duration::from_secs(20));
    p.wait_for_subscribers(1, Duration::from_secs(20)).expect("the recorder did not match");
    for i in 0..20 {
        p.send(&blob(i)).expect("send");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    rec.signal(libc::SIGINT);
    let summary = rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    let files: Vec<&str> = summary["files"].as_array().expect("files").iter().filter_map(Value::as_str).collect();
    assert!(files.len() >= 2, "a split recording: {summary}");
    for f in &files {
        assert_eq!(mode_of(Path::new(f)), 0o640, "{f}");
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn record_regex_on_a_churn_of_topic_names_keeps_recording_within_max_topics() {
    let file = temp_file("churn");
    let prefix = topic("churn");
    let regex = format!("^{prefix}_");
    let mut rec =
        recorder("shoal record", &["-o", file.to_str().expect("path"), "--regex", &regex, "--max-topics", "20"]);
    let node = shoal::Node::init("record_churn_test").expect("node");
    let publisher = |name: String| node.publisher(&name).type_info(TypeInfo::raw("shoal.test.Blob")).create();
    // Wave 1: 30 names; 20 are recorded, 10 are counted.
    let mut wave1: Vec<_> =
        (0..30).map(|i| publisher(format!("{prefix}_a{i:02}")).expect("publisher")).collect::<Vec<_>>();
    let subscribed: Vec<String> = (0..20)
        .map(|_| rec.expect("subscribed", Duration::from_secs(20))["topic"].as_str().expect("topic").to_string())
        .collect();
    let i = wave1.iter().position(|p| p.topic() == subscribed[0]).expect("a topic of wave 1");
    let kept = wave1.remove(i);
    std::thread::sleep(Duration::from_millis(1500));
    drop(wave1);
    // Wave 2: 30 new names while the recorder is full: counted, not subscribed; recording goes on.
    let wave2: Vec<_> = (0..30).map(|i| publisher(format!("{prefix}_b{i:02}")).expect("publisher")).collect();
    let mut kept = kept;
    kept.wait_for_subscribers(1, Duration::from_secs(20)).expect("the recorder did not match");
    std::thread::sleep(Duration::from_millis(3000));
    for i in 0..10 {
        kept.send(&blob(i)).expect("send");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    rec.signal(libc::SIGINT);
    let summary = rec.expect("summary", Duration::from_secs(20));
    rec.wait_success(Duration::from_secs(10));
    drop(wave2);
    eprintln!("recorder: {summary}");
    assert_eq!(summary["topics"].as_array().expect("topics").len(), 20, "{summary}");
    assert_eq!(summary["topics_not_recorded"], 40, "10 of wave 1 and the 30 of wave 2: {summary}");
    assert_eq!(summary["messages"], 10, "recording went on: {summary}");
    let info = shoal(&["info", file.to_str().expect("path"), "--json"]).output().expect("shoal info");
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    let info: Value = serde_json::from_slice(&info.stdout).expect("info json");
    let meta = &info["metadata"][0];
    assert_eq!(meta["name"], "shoal.recording", "{info}");
    assert_eq!(meta["metadata"]["topics_not_recorded"], "40", "{meta}");
    let _ = std::fs::remove_file(&file);
}
