//! Writes the seed corpora of the fuzz targets, using shoal's own encoders, into the directory
//! given as the only argument (default `seeds` next to this crate's parent, i.e. `fuzz/seeds`):
//! `<dir>/<target>/<name>`. The input formats are described in each target's module docs.
//!
//! Run: `cargo run --manifest-path fuzz/Cargo.toml -p shoal-fuzz-seedgen -- fuzz/seeds`.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use shoal::Config;
use shoal::TypeInfo;
use shoal::registration::codec::{
    encode_registration, process_sample, process_unreg_sample, topic_sample, topic_unreg_sample,
};
use shoal::registration::{Direction, Identity, Layer, LayerKind, LayerPar, LocalTopic, ShoalPar};
use shoal::transport::shm_ring::RingWriter;
use shoal::wire::pb;
use shoal::wire::{HEADER_LEN, encode_message};

#[allow(dead_code)] // the bridge uses more of it than the seeds
#[path = "../../../bridge-ros2/src/generic.rs"]
mod generic;
#[allow(dead_code)]
#[path = "../../harness/ros2_cdr.rs"]
mod harness;
#[allow(dead_code)]
#[path = "../../../bridge-ros2/src/msgdef.rs"]
mod msgdef;
mod ros2;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Host and pid of the registrar in `registration_decode` (must match the target).
const FUZZ_HOST: &str = "fuzzhost";
const FUZZ_PID: u32 = 4242;

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> Result<()> {
    let d = dir.join(target);
    fs::create_dir_all(&d)?;
    fs::write(d.join(name), bytes)?;
    println!("{target}/{name}: {} bytes", bytes.len());
    Ok(())
}

fn identity(host: &str, pid: u32) -> Identity {
    Identity {
        host_name: host.to_owned(),
        pid,
        process_name: "/usr/bin/peer".to_owned(),
        unit_name: "peer".to_owned(),
        process_parameter: "peer --flag".to_owned(),
        shm_transport_domain: host.to_owned(),
        network_mode: false,
    }
}

fn topic(id: u64, name: &str) -> LocalTopic {
    LocalTopic {
        id,
        topic_name: name.to_owned(),
        type_info: TypeInfo::new("pb.Demo", "proto", vec![1, 2, 3]),
        layers: vec![
            Layer::new(LayerKind::Udp, true, false, LayerPar::None),
            Layer::new(LayerKind::Shm, true, true, LayerPar::Shm { memory_files: vec!["ecal_0123abcd".to_owned()] }),
            Layer::new(
                LayerKind::ShoalRing,
                true,
                true,
                LayerPar::Shoal(ShoalPar {
                    segment: "/dev/shm/shoal_777_abc_g0".to_owned(),
                    slot_count: 16,
                    slot_size: 65536,
                    generation: 0,
                    doorbell: "/dev/shm/shoal_db_777_abc".to_owned(),
                    page_kb: 4,
                    history_depth: 0,
                    history_bytes: 0,
                }),
            ),
        ],
        stats: Default::default(),
    }
}

/// The datagrams of a registration sample (fragments of at most `max_fragment` bytes).
fn datagrams(sample: &pb::Sample, max_fragment: usize) -> Result<Vec<Vec<u8>>> {
    let mut id = 0x1234;
    Ok(encode_registration(sample, max_fragment, &mut || {
        id += 1;
        id
    })?)
}

/// The framed message (name prefix + protobuf) of a sample: the payload of its whole datagram.
fn framed(sample: &pb::Sample) -> Result<Vec<u8>> {
    let d = datagrams(sample, usize::MAX)?;
    Ok(d[0][HEADER_LEN..].to_vec())
}

/// One `registration_decode` record.
fn record(out: &mut Vec<u8>, raw_datagram: bool, advance_100ms: u8, bytes: &[u8]) -> Result<()> {
    out.push((advance_100ms << 1) | u8::from(raw_datagram));
    out.extend_from_slice(&u16::try_from(bytes.len())?.to_le_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

fn registration_seeds(dir: &Path) -> Result<()> {
    const T: &str = "registration_decode";
    let peer = identity(FUZZ_HOST, 777);
    let publ = topic(11, "fuzz_topic");
    let sub = topic(12, "fuzz_topic");
    let pub_sample = topic_sample(&peer, Direction::Publisher, &publ, 1);
    let sub_sample = topic_sample(&peer, Direction::Subscriber, &sub, 1);

    // A plain framed message (decode_registration on the whole input).
    write(dir, T, "framed_publisher", &framed(&pub_sample)?)?;

    // A session: process, publisher and subscriber appear, refresh, change, unregister.
    let mut s = Vec::new();
    record(&mut s, false, 0, &framed(&process_sample(&peer, 1))?)?;
    record(&mut s, false, 1, &framed(&pub_sample)?)?;
    record(&mut s, false, 1, &framed(&sub_sample)?)?;
    let mut changed = sub.clone();
    changed.layers.truncate(1);
    record(&mut s, false, 10, &framed(&topic_sample(&peer, Direction::Subscriber, &changed, 2))?)?;
    record(&mut s, false, 5, &framed(&topic_unreg_sample(&peer, Direction::Publisher, &publ))?)?;
    record(&mut s, false, 5, &framed(&process_unreg_sample(&peer))?)?;
    write(dir, T, "session_framed", &s)?;

    // Raw datagrams: a fragmented registration, our own process, another host, expiry.
    let mut s = Vec::new();
    for d in datagrams(&pub_sample, 100)? {
        record(&mut s, true, 0, &d)?;
    }
    let own = identity(FUZZ_HOST, FUZZ_PID);
    for d in datagrams(&topic_sample(&own, Direction::Subscriber, &sub, 3), usize::MAX)? {
        record(&mut s, true, 1, &d)?;
    }
    let foreign = identity("otherhost", 99);
    for d in datagrams(&topic_sample(&foreign, Direction::Subscriber, &sub, 1), usize::MAX)? {
        record(&mut s, true, 1, &d)?;
    }
    for d in datagrams(&sub_sample, usize::MAX)? {
        record(&mut s, true, 127, &d)?;
    }
    write(dir, T, "session_datagrams", &s)?;
    Ok(())
}

fn limits_seeds(dir: &Path) -> Result<()> {
    const T: &str = "registration_limits";
    let peer = identity(FUZZ_HOST, 777);
    let publ = topic(11, "fuzz_topic");
    let framed = framed(&topic_sample(&peer, Direction::Publisher, &publ, 1))?;
    let (_, sample) = shoal::wire::split_name(&framed)?;
    // Limits that the sample meets (63-byte strings, 7 layers, 1020-byte descriptors), and tight ones it does not.
    write(dir, T, "publisher_within", &[&[63u8, 7, 255][..], &sample].concat())?;
    write(dir, T, "publisher_tight", &[&[4u8, 0, 0][..], &sample].concat())?;
    Ok(())
}

fn wire_header_seeds(dir: &Path) -> Result<()> {
    const T: &str = "wire_header";
    let sample = process_sample(&identity(FUZZ_HOST, 777), 5);
    let whole = datagrams(&sample, usize::MAX)?;
    write(dir, T, "whole_registration", &whole[0])?;
    write(dir, T, "framed_registration", &whole[0][HEADER_LEN..])?;
    let frags = datagrams(&sample, 64)?;
    write(dir, T, "fragment_info", &frags[0])?;
    write(dir, T, "fragment_0", &frags[1])?;
    let data = encode_message("topic", b"payload bytes", 1000, &mut || 1)?;
    write(dir, T, "whole_data", &data[0])?;
    Ok(())
}

/// `wire_reassembly` header: limits.
fn reassembly_header(max_messages: u8, max_bytes: u16, max_age_ms: u16) -> Vec<u8> {
    let mut out = vec![max_messages];
    out.extend_from_slice(&max_bytes.to_le_bytes());
    out.extend_from_slice(&max_age_ms.to_le_bytes());
    out
}

/// `wire_reassembly` raw record.
fn raw_record(out: &mut Vec<u8>, sender: u8, advance_ms: u8, datagram: &[u8]) -> Result<()> {
    out.extend_from_slice(&[sender, advance_ms, 0]);
    out.extend_from_slice(&u16::try_from(datagram.len())?.to_le_bytes());
    out.extend_from_slice(datagram);
    Ok(())
}

/// `wire_reassembly` structured record (`kind` 1 info, 2 fragment, 3 whole).
#[allow(clippy::too_many_arguments)]
fn structured_record(
    out: &mut Vec<u8>,
    sender: u8,
    advance_ms: u8,
    kind: u8,
    id: i8,
    num: u16,
    len_override: u16,
    payload: &[u8],
) -> Result<()> {
    out.extend_from_slice(&[sender, advance_ms, kind, id as u8]);
    out.extend_from_slice(&num.to_le_bytes());
    out.extend_from_slice(&len_override.to_le_bytes());
    out.extend_from_slice(&u16::try_from(payload.len())?.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

fn reassembly_seeds(dir: &Path) -> Result<()> {
    const T: &str = "wire_reassembly";
    // Real fragmented messages from two senders, interleaved, one out of order.
    let a = encode_message("topic_a", &[0xaa; 300], 64, &mut || 7)?;
    let b = encode_message("topic_b", &[0xbb; 150], 64, &mut || 7)?;
    let mut s = reassembly_header(8, 4096, 500);
    for (i, d) in a.iter().enumerate().rev() {
        raw_record(&mut s, 0, 1, d)?;
        if let Some(db) = b.get(i) {
            raw_record(&mut s, 1, 1, db)?;
        }
    }
    write(dir, T, "interleaved_raw", &s)?;

    // Structured: fragments before their info, a duplicate, a whole datagram, a lying length,
    // an expiry and a message too large for the budget.
    let mut s = reassembly_header(4, 1024, 100);
    structured_record(&mut s, 0, 0, 2, 5, 1, 0xffff, b"world")?;
    structured_record(&mut s, 0, 0, 2, 5, 1, 0xffff, b"world")?;
    structured_record(&mut s, 1, 0, 3, -1, 1, 0xffff, b"\x04\x00abc\x00whole")?;
    structured_record(&mut s, 0, 0, 1, 5, 2, 10, b"")?;
    structured_record(&mut s, 0, 1, 2, 5, 0, 0xffff, b"hello")?;
    structured_record(&mut s, 2, 0, 1, 9, 3, 30, b"")?;
    structured_record(&mut s, 2, 0, 2, 9, 0, 0xffff, b"0123456789")?;
    structured_record(&mut s, 2, 200, 2, 9, 1, 0xffff, b"0123456789")?;
    structured_record(&mut s, 3, 0, 1, 1, 2, 5000, b"")?;
    structured_record(&mut s, 3, 0, 2, 1, 0, 40, b"short")?;
    write(dir, T, "structured", &s)?;

    // A message given up after its first fragment (kind 250, as the UDP receiver does at a gap the kernel's drop
    // count explains), its other fragments after that, then a new message reusing its id.
    let a = encode_message("topic_a", &[0xaa; 300], 64, &mut || 7)?;
    let mut s = reassembly_header(8, 4096, 500);
    for d in &a[..2] {
        raw_record(&mut s, 0, 1, d)?;
    }
    s.extend_from_slice(&[0, 0, 250, 7]);
    for d in a[2..].iter().chain(&a) {
        raw_record(&mut s, 0, 1, d)?;
    }
    write(dir, T, "abandoned", &s)?;
    Ok(())
}

fn config_seeds(dir: &Path) -> Result<()> {
    const T: &str = "config_ini";
    write(dir, T, "default_ecal_ini", Config::default_ini_text().as_bytes())?;
    let mut cfg = Config::default();
    cfg.registration.shm_transport_domain = "lab ; domain".to_owned();
    cfg.network.enabled = true;
    cfg.network.multicast_ttl = 7;
    cfg.shm_ring.slot_count = 64;
    cfg.receive.wait = shoal::WaitStrategy::SpinThenBlock(std::time::Duration::from_micros(50));
    cfg.io.cpu_affinity = vec![0, 1];
    write(dir, T, "custom_ecal_ini", cfg.to_ini_text().as_bytes())?;
    let ecal5 = "; eCAL 5 style\n[network]\nnetwork_enabled = true\nmulticast_ttl = 2 ; hops\n\
                 multicast_port = 14000\n[common]\nregistration_refresh = 500\nregistration_timeout = 6000\n\
                 [monitoring]\ntimeout = 5000\n[shoal_io]\ncpu_affinity = \"0,1\"\n";
    write(dir, T, "ecal5_subset", ecal5.as_bytes())?;
    Ok(())
}

fn ring_seeds(dir: &Path) -> Result<()> {
    const T: &str = "ring_header";
    // The ring section is #[non_exhaustive]: its defaults, then the fields the seeds need.
    let mut cfg = Config::default().shm_ring;
    cfg.enabled = true;
    cfg.slot_count = 2;
    cfg.slot_size = 64;
    cfg.huge_pages = shoal::HugePages::Off;
    cfg.huge_pages_path = PathBuf::from("/dev/hugepages");
    let mut w = RingWriter::create(&cfg, 0xfeed)?;
    let gen0_path = w.segment_name().to_owned();
    let empty = fs::read(&gen0_path)?;
    for (i, msg) in [&b"first"[..], b"second", b"third"].iter().enumerate() {
        let _ = w.write(msg, 1_700_000_000_000_000 + i as i64, i as u64)?;
    }
    let filled = fs::read(&gen0_path)?;
    // Rewind, then read all seven times.
    let flags = 1 | (7 << 2) | 0x20;
    write(dir, T, "empty_ring", &[&[1 | (2 << 2)][..], &empty].concat())?;
    write(dir, T, "three_samples", &[&[flags][..], &filled].concat())?;

    // Growth: a message larger than the slots moves the writer to generation 1.
    let _ = w.write(&[0x55; 200], 1_700_000_000_000_100, 3)?;
    let superseded = fs::read(&gen0_path)?;
    let gen1 = fs::read(w.segment_name())?;
    let _ = w.write(b"after growth", 1_700_000_000_000_200, 4)?;
    let gen1_more = fs::read(w.segment_name())?;
    let mut two = vec![flags | 2];
    two.extend_from_slice(&u16::try_from(superseded.len())?.to_le_bytes());
    two.extend_from_slice(&superseded);
    two.extend_from_slice(&gen1);
    write(dir, T, "superseded_chain", &two)?;
    let mut two = vec![1 | (3 << 2) | 2];
    two.extend_from_slice(&u16::try_from(superseded.len())?.to_le_bytes());
    two.extend_from_slice(&superseded);
    two.extend_from_slice(&gen1_more);
    write(dir, T, "superseded_chain_more", &two)?;

    // Patched once the reader is open (flags bit 6; records `[offset u16][n u8][bytes]`), as a broken or hostile
    // writer can: samples counted but never published in a superseded segment without a successor (counted as
    // drops, then the reader ends); slots claiming samples beyond the write sequence (read as not published); a
    // write sequence beyond any writer (the reader detaches).
    let mut one_sample = RingWriter::create(&cfg, 0xfeed)?;
    let _ = one_sample.write(b"only", 1_700_000_000_000_000, 0)?;
    let one = fs::read(one_sample.segment_name())?;
    // Generation 0 before the growth, superseded once the reader is open: it follows to generation 1 and reads the
    // sample written there.
    let mut follow = vec![1 | 2 | 0x40 | (7 << 2)];
    follow.extend_from_slice(&u16::try_from(filled.len())?.to_le_bytes());
    let record = [&u16::try_from(SUPERSEDED_AT)?.to_le_bytes()[..], &[4], &1u32.to_le_bytes()].concat();
    follow.extend_from_slice(&u16::try_from(record.len())?.to_le_bytes());
    follow.extend_from_slice(&filled);
    follow.extend_from_slice(&gen1);
    follow.extend_from_slice(&record);
    write(dir, T, "superseded_after_open", &follow)?;

    let le_u64 = |at: usize| -> Result<u64> { Ok(u64::from_le_bytes(one.get(at..at + 8).ok_or("short")?.try_into()?)) };
    let header_size = usize::try_from(le_u64(8)? >> 32)?;
    let stride = usize::try_from(le_u64(32)?)?;
    let write_seq = le_u64(WRITE_SEQ_AT)?;
    let patched = |patches: &[(usize, Vec<u8>)]| -> Result<Vec<u8>> {
        let mut records = Vec::new();
        for (offset, bytes) in patches {
            records.extend_from_slice(&u16::try_from(*offset)?.to_le_bytes());
            records.push(u8::try_from(bytes.len())?);
            records.extend_from_slice(bytes);
        }
        let mut input = vec![1 | (7 << 2) | 0x40];
        input.extend_from_slice(&u16::try_from(records.len())?.to_le_bytes());
        input.extend_from_slice(&one);
        input.extend_from_slice(&records);
        Ok(input)
    };
    let unpublished =
        [(WRITE_SEQ_AT, (write_seq + 2).to_le_bytes().to_vec()), (SUPERSEDED_AT, 1u32.to_le_bytes().to_vec())];
    write(dir, T, "superseded_unpublished", &patched(&unpublished)?)?;
    let ahead: Vec<(usize, Vec<u8>)> =
        (0..2).map(|i| (header_size + i * stride, u64::MAX.to_le_bytes().to_vec())).collect();
    write(dir, T, "slots_ahead_of_write_seq", &patched(&ahead)?)?;
    let beyond = [(WRITE_SEQ_AT, u64::MAX.to_le_bytes().to_vec()), (SUPERSEDED_AT, 1u32.to_le_bytes().to_vec())];
    write(dir, T, "write_seq_beyond_any_writer", &patched(&beyond)?)?;
    Ok(())
}

/// Offsets of a ring segment header's write sequence and superseded flag (`shm_ring/layout.rs`).
const WRITE_SEQ_AT: usize = 128;
const SUPERSEDED_AT: usize = 192;

fn main() -> Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../seeds"), PathBuf::from);
    wire_header_seeds(&dir)?;
    reassembly_seeds(&dir)?;
    registration_seeds(&dir)?;
    limits_seeds(&dir)?;
    config_seeds(&dir)?;
    ring_seeds(&dir)?;
    memfile_seeds(&dir)?;
    flatbuf_seeds(&dir)?;
    descriptor_seeds(&dir)?;
    auth_seeds(&dir)?;
    packed_seeds(&dir)?;
    mcap_seeds(&dir)?;
    ecal_tcp_seeds(&dir)?;
    ros2::ros2_seeds(&dir)?;
    log_seeds(&dir)?;
    Ok(())
}

/// `log_decode`: eCAL log messages as `[flags u8][len u16 LE][bytes]` records (see the target's harness).
fn log_seeds(dir: &Path) -> Result<()> {
    use shoal::logging::{LOG_SAMPLE_NAME, LogLevel, LogRecord, encode_record};
    const T: &str = "log_decode";
    let rec = |flags: u8, bytes: &[u8]| {
        let mut b = vec![flags];
        b.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        b.extend_from_slice(bytes);
        b
    };
    let record = |level: LogLevel, content: &str| {
        encode_record(&LogRecord {
            time_us: 1_700_000_000_000_000,
            host_name: "fuzzhost".into(),
            process_id: 4242,
            process_name: "/usr/bin/robot".into(),
            unit_name: "robot".into(),
            level,
            content: content.into(),
        })
    };
    let warning = record(LogLevel::Warning, "wheel slip");
    // A payload, framed by the harness; the same as a raw whole datagram; from another host.
    write(dir, T, "framed_warning", &rec(0, &warning))?;
    let whole = encode_message(LOG_SAMPLE_NAME, &warning, 65_000, &mut || 1)?;
    write(dir, T, "raw_datagram", &rec(1, &whole[0]))?;
    write(dir, T, "other_host", &rec(2, &warning))?;
    // A long record the harness fragments, then one after 1 s.
    let long = record(LogLevel::Error, &"motor hot; ".repeat(400));
    write(dir, T, "fragmented_then_later", &[rec(0, &long), rec(4 * 10, &record(LogLevel::Info, "ok"))].concat())?;
    // A registration-named sample, and a log sample that is not a LogMessage.
    let other = encode_message("__ecal_reg__", b"\x08\x01", 65_000, &mut || 2)?;
    let bad = encode_message(LOG_SAMPLE_NAME, b"\x08\xff", 65_000, &mut || 3)?;
    write(dir, T, "other_sample_and_bad_message", &[rec(1, &other[0]), rec(1, &bad[0])].concat())?;
    // Text that is not UTF-8, an unknown level.
    let mut odd = record(LogLevel::Other(3), "ab");
    let last = odd.len() - 1;
    odd[last] = 0xff;
    write(dir, T, "not_utf8_unknown_level", &rec(0, &odd))?;
    Ok(())
}

/// A stream an eCAL 6.1.1 Python publisher sent (`tools/tests/ecal/pub.py --layer tcp --size 40`, topic
/// `cap_topic`; the capture of `core/src/transport/ecal_tcp/frame.rs`'s tests): its handshake answer, then message 42.
const ECAL_TCP_CAPTURE: &str = "0c0001000100000000000000000c00000070000000000000004543414c420008002a213a096361705f746f7069633210\
    373632393737343730393538373936381800120032180800102a189e99b69ee9b29803302838d480a0dad5e7c60d4201\
    002a00000000000000c0ba7fe222160000653638e9d11ded7e161718191a1b1c1d1e1f202122232425";

fn unhex(s: &str) -> Result<Vec<u8>> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(Into::into)).collect()
}

/// `ecal_tcp_frame` (whole frames: eCAL's capture, ours, handshakes as a subscriber sends them) and `ecal_tcp_client`
/// (its input format: decoder settings, chunk sizes, framed messages, raw tail).
fn ecal_tcp_seeds(dir: &Path) -> Result<()> {
    use shoal::transport::ecal_tcp::frame::{encode_message, handshake};
    const F: &str = "ecal_tcp_frame";
    let capture = unhex(ECAL_TCP_CAPTURE)?;
    let hs = handshake();
    write(dir, F, "ecal_6_1_1_message_42", &capture[hs.len()..])?;
    write(dir, F, "handshake", &hs)?;
    write(dir, F, "two_handshakes", &[&hs[..], &hs[..]].concat())?;
    for (name, topic, payload) in [
        ("empty", "t", &b""[..]),
        ("small", "fuzz.topic", &b"hello, subscriber"[..]),
        ("long_topic", &"x".repeat(300)[..], &[0x5a; 300][..]),
    ] {
        write(dir, F, name, &encode_message(topic, "123456789", 123_456_789, 42, 1_700_000_000_000_000, payload)?)?;
    }

    const C: &str = "ecal_tcp_client";
    // [max_message u16][direct_min u16][n u8][n × chunk u16][f u8][f × (clock step u8, len u16, fill u8)][tail]
    let seed = |max: u16, direct: u16, chunks: &[u16], messages: &[(u8, u16, u8)], tail: &[u8]| {
        let mut b = Vec::new();
        b.extend_from_slice(&max.to_le_bytes());
        b.extend_from_slice(&direct.to_le_bytes());
        b.push(chunks.len() as u8);
        for c in chunks {
            b.extend_from_slice(&c.to_le_bytes());
        }
        b.push(messages.len() as u8);
        for (step, len, fill) in messages {
            b.push(*step);
            b.extend_from_slice(&len.to_le_bytes());
            b.push(*fill);
        }
        b.extend_from_slice(tail);
        b
    };
    write(dir, C, "three_messages_bytewise", &seed(65000, 0, &[1], &[(1, 3, 1), (1, 0, 2), (1, 500, 3)], &[]))?;
    write(
        dir,
        C,
        "gaps_repeats_and_too_large_in_place",
        &seed(200, 16, &[7, 300, 64], &[(1, 10, 1), (3, 20, 2), (0, 5, 3), (2, 1000, 4), (1, 150, 5)], &[]),
    )?;
    write(dir, C, "large_payload_in_place", &seed(65000, 1024, &[4096], &[(5, 60000, 9), (1, 8, 1)], &[]))?;
    write(dir, C, "ecal_capture_as_tail", &seed(65000, 0, &[13, 5], &[], &capture))?;
    let mut garbage = capture.clone();
    garbage.extend_from_slice(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    write(dir, C, "capture_then_garbage", &seed(65000, 0, &[], &[], &garbage))?;
    Ok(())
}

/// `mcap_read`: files as `shoal record` writes them (chunks compressed with zstd or lz4, or not compressed; a
/// protobuf schema, a schema-less channel with metadata, messages, the `shoal.recording` metadata record, the
/// summary), one without chunks, one truncated in its second chunk; and inputs of the writer mode (byte 0 odd).
fn mcap_seeds(dir: &Path) -> Result<()> {
    const T: &str = "mcap_read";
    let file = |compression: Option<mcap::Compression>, use_chunks: bool| -> Result<Vec<u8>> {
        let mut w = mcap::WriteOptions::new()
            .compression(compression)
            .use_chunks(use_chunks)
            .chunk_size(Some(256))
            .create(std::io::Cursor::new(Vec::new()))?;
        let schema = w.add_schema("pb.Demo", "protobuf", &[0x0a, 0x03, b'a', b'b', b'c'])?;
        let proto = w.add_channel(schema, "/demo/proto", "protobuf", &Default::default())?;
        let meta = [("ecal.type_name".to_string(), "blob".to_string()), ("ecal.encoding".into(), "raw".into())];
        let raw = w.add_channel(0, "/demo/raw", "raw", &meta.into_iter().collect())?;
        for i in 0..24u32 {
            let channel_id = if i % 3 == 0 { raw } else { proto };
            let t = 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000;
            let header = mcap::records::MessageHeader { channel_id, sequence: i, log_time: t, publish_time: t };
            w.write_to_known_channel(&header, &vec![u8::try_from(i)?; 40])?;
        }
        let meta = [("recorder".to_string(), "shoal seedgen".to_string()), ("queue_drops".into(), "0".into())];
        w.write_metadata(&mcap::records::Metadata {
            name: "shoal.recording".into(),
            metadata: meta.into_iter().collect(),
        })?;
        w.finish()?;
        Ok([&[0u8][..], &w.into_inner().into_inner()].concat())
    };
    write(dir, T, "zstd_chunks", &file(Some(mcap::Compression::Zstd), true)?)?;
    write(dir, T, "lz4_chunks", &file(Some(mcap::Compression::Lz4), true)?)?;
    write(dir, T, "plain_chunks", &file(None, true)?)?;
    write(dir, T, "no_chunks", &file(None, false)?)?;
    let whole = file(Some(mcap::Compression::Zstd), true)?;
    write(dir, T, "truncated", &whole[..whole.len() / 2])?;
    // Writer mode: compression, use_chunks, chunk size, channels, ... read by `Unstructured` from these bytes.
    write(dir, T, "writer_zstd", &[1, 1, 1, 0, 64, 3, 1, 4, b'a', b'b', 0, 7, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9])?;
    write(dir, T, "writer_lz4", &[3, 2, 1, 0, 16, 1, 0, 2, b'x', 0, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])?;
    Ok(())
}

/// `udp_packed`: packed datagrams as a shoal publisher's I/O thread writes them: one sample, several of various
/// sizes (an empty one among them).
fn packed_seeds(dir: &Path) -> Result<()> {
    use shoal::wire::packed::{append_records, begin_packed, count_of, records_of};
    const T: &str = "udp_packed";
    let mut one = Vec::new();
    begin_packed(&mut one, 17_593_724_434_448_384, "fuzz.topic", 1, 1_700_000_000_000_000, b"payload")
        .ok_or("packable")?;
    write(dir, T, "one_sample", &one)?;
    let mut many = one.clone();
    for (clock, payload) in [(2u64, &b""[..]), (3, &[0xa5; 64][..]), (9, b"last")] {
        let mut rec = Vec::new();
        begin_packed(&mut rec, 17_593_724_434_448_384, "fuzz.topic", clock, -1, payload).ok_or("packable")?;
        if !append_records(&mut many, records_of(&rec), count_of(&rec)) {
            return Err("append".into());
        }
    }
    write(dir, T, "four_samples", &many)?;
    Ok(())
}

/// `auth_envelope`: byte 0 (the tamper oracle's position), then a datagram. The envelopes are sealed with a key
/// other than the target's (one sealed with its key would rightly fail its "nothing unsealed verifies" oracle):
/// well-formed headers and tags that reach the tag comparison, over a whole registration datagram, a fragment of
/// one, and a UDP data datagram; plus a plain registration datagram (no envelope).
fn auth_seeds(dir: &Path) -> Result<()> {
    use shoal::wire::auth::{Channel, Sealer};
    const T: &str = "auth_envelope";
    let other_key = shoal::config::AuthKey::new(vec![0x11; 32]).ok_or("a 32-byte key")?;
    let time_ns = 1_700_000_000_000_000_000;
    let sample = process_sample(&identity(FUZZ_HOST, 777), 5);
    let whole = datagrams(&sample, usize::MAX)?;
    let frags = datagrams(&sample, 64)?;
    let data = encode_message("fuzz.topic", b"payload bytes", 1000, &mut || 1)?;
    let mut reg = Sealer::with_sender_id(&other_key, Channel::Registration, 7);
    let mut udp = Sealer::with_sender_id(&other_key, Channel::Data, 8);
    write(dir, T, "sealed_registration", &[&[3u8][..], &reg.seal(&whole[0], time_ns)].concat())?;
    write(dir, T, "sealed_fragment", &[&[40u8][..], &reg.seal(&frags[1], time_ns)].concat())?;
    write(dir, T, "sealed_data", &[&[200u8][..], &udp.seal(&data[0], time_ns)].concat())?;
    write(dir, T, "plain_registration", &[&[0u8][..], &whole[0]].concat())?;
    Ok(())
}

/// An eCAL memfile's bytes as eCAL 6.1.1 (and shoal's `MemfileWriter`) write them: the 24-byte internal header
/// `{u16 int_hdr_size; u8[6]; u64 cur_data_size; u64 max_data_size}`, then at `int_hdr_size` the message header
/// `{u16 hdr_size; u64 data_size, id, clock; i64 time; u64 hash; u8 options; i64 ack_timeout_ms}` (natural
/// alignment, `hdr_size` bytes: 64, or 48 for eCAL 5.8's, which ends after `hash`) and the payload.
fn memfile(hdr_size: u16, clock: u64, payload: &[u8], max_data_size: u64) -> Vec<u8> {
    let mut msg = vec![0u8; usize::from(hdr_size)];
    msg[0..2].copy_from_slice(&hdr_size.to_le_bytes());
    msg[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    msg[16..24].copy_from_slice(&7u64.to_le_bytes());
    msg[24..32].copy_from_slice(&clock.to_le_bytes());
    msg[32..40].copy_from_slice(&1_700_000_000_000_000i64.to_le_bytes());
    msg[40..48].copy_from_slice(&(0x1234_5678 ^ (clock << 1)).to_le_bytes());
    msg.extend_from_slice(payload);
    let mut file = vec![0u8; 24];
    file[0..2].copy_from_slice(&24u16.to_le_bytes());
    file[8..16].copy_from_slice(&(msg.len() as u64).to_le_bytes());
    file[16..24].copy_from_slice(&max_data_size.to_le_bytes());
    file.extend_from_slice(&msg);
    file.resize(24 + usize::try_from(max_data_size).unwrap_or(0).max(msg.len()), 0);
    file
}

/// `memfile_header`: `[len u16]`, the memfile, then steps (`0` read newer, `1` read any, `2 [at u16][n u8][bytes]`
/// write, `3 [len u16]` resize; see the target's harness).
fn memfile_seeds(dir: &Path) -> Result<()> {
    const T: &str = "memfile_header";
    let input = |file: &[u8], steps: &[u8]| -> Result<Vec<u8>> {
        Ok([&u16::try_from(file.len())?.to_le_bytes()[..], file, steps].concat())
    };
    let write_step = |at: usize, bytes: &[u8]| -> Result<Vec<u8>> {
        Ok([&[2u8][..], &u16::try_from(at)?.to_le_bytes(), &[u8::try_from(bytes.len())?], bytes].concat())
    };
    let first = memfile(64, 1, b"first payload", 4096);
    // Read, then the writer's next message (clock 2, a longer payload) replaces it: read again, then nothing new.
    let next = memfile(64, 2, b"the second, longer payload", 4096);
    let steps =
        [&[0u8][..], &write_step(8, &next[8..16])?, &write_step(24, &next[24..24 + 64 + 26])?, &[0, 0]].concat();
    write(dir, T, "two_messages", &input(&first, &steps)?)?;
    // eCAL 5.8's 48-byte message header.
    write(dir, T, "ecal58_header", &input(&memfile(48, 5, b"old header", 256), &[0])?)?;
    // The writer announces a larger data area than the file has yet: the file grows and the message lands there.
    let mut small = memfile(64, 1, b"x", 64);
    small[16..24].copy_from_slice(&8192u64.to_le_bytes());
    let big = memfile(64, 3, &[0xab; 200], 8192);
    let steps = [
        &[0u8, 3][..],
        &8216u16.to_le_bytes(),
        &write_step(8, &big[8..16])?,
        &write_step(24, &big[24..88])?,
        &write_step(88, &big[88..288])?,
        &[0],
    ]
    .concat();
    write(dir, T, "grown", &input(&small, &steps)?)?;
    // A peer truncates the file under the reader within the payload (the copy faults: SIGBUS survived), then
    // extends it again (the payload's tail now zeros).
    let whole = memfile(64, 1, &[0x5a; 9000], 10_000);
    let steps =
        [&[0u8, 3][..], &4106u16.to_le_bytes(), &[1, 3], &u16::try_from(whole.len())?.to_le_bytes(), &[1]].concat();
    write(dir, T, "truncated", &input(&whole, &steps)?)?;
    Ok(())
}

/// A field of a hand-built FlatBuffers root table.
enum Fb<'a> {
    /// Inline bytes (a scalar or a struct).
    Inline(&'a [u8]),
    /// A uoffset to a string.
    Str(&'a str),
    /// A uoffset to a vector of u32.
    Vector(&'a [u32]),
}

/// A FlatBuffer laid out as flatc and planus lay one out (root uoffset, optional file identifier, the root table's
/// vtable, the table with its soffset and inline fields, then strings and vectors, 4-aligned): what the
/// `flatbuf_view` target sees from eCAL's and shoal's FlatBuffers publishers.
fn flatbuffer(ident: Option<&[u8; 4]>, slots: usize, fields: &[(usize, Fb<'_>)]) -> Vec<u8> {
    let width = |f: &Fb<'_>| match f {
        Fb::Inline(b) => b.len(),
        Fb::Str(_) | Fb::Vector(_) => 4,
    };
    let vtable = 8;
    let vt_len = 4 + 2 * slots;
    let root = (vtable + vt_len).next_multiple_of(8);
    let mut offsets = Vec::new();
    let mut table_len: usize = 4;
    for (_, f) in fields {
        let w = width(f);
        table_len = table_len.next_multiple_of(w.clamp(1, 8).next_power_of_two());
        offsets.push(table_len);
        table_len += w;
    }
    let table_len = table_len.next_multiple_of(4);
    let mut b = vec![0u8; root + table_len];
    b[0..4].copy_from_slice(&(root as u32).to_le_bytes());
    if let Some(id) = ident {
        b[4..8].copy_from_slice(id);
    }
    b[vtable..vtable + 2].copy_from_slice(&(vt_len as u16).to_le_bytes());
    b[vtable + 2..vtable + 4].copy_from_slice(&(table_len as u16).to_le_bytes());
    b[root..root + 4].copy_from_slice(&((root - vtable) as i32).to_le_bytes());
    for ((slot, f), &off) in fields.iter().zip(&offsets) {
        b[vtable + 4 + 2 * slot..vtable + 6 + 2 * slot].copy_from_slice(&(off as u16).to_le_bytes());
        let at = root + off;
        let target = b.len().next_multiple_of(4);
        match f {
            Fb::Inline(bytes) => b[at..at + bytes.len()].copy_from_slice(bytes),
            Fb::Str(text) => {
                b.resize(target, 0);
                b.extend_from_slice(&(text.len() as u32).to_le_bytes());
                b.extend_from_slice(text.as_bytes());
                b.push(0);
                b[at..at + 4].copy_from_slice(&((target - at) as u32).to_le_bytes());
            }
            Fb::Vector(items) => {
                b.resize(target, 0);
                b.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for i in *items {
                    b.extend_from_slice(&i.to_le_bytes());
                }
                b[at..at + 4].copy_from_slice(&((target - at) as u32).to_le_bytes());
            }
        }
    }
    b.resize(b.len().next_multiple_of(4), 0);
    b
}

/// `flatbuf_view`: FlatBuffers payloads (the bytes are the input).
fn flatbuf_seeds(dir: &Path) -> Result<()> {
    const T: &str = "flatbuf_view";
    // examples/fbs/pose.fbs's Pose: seq, frame_id, position (struct Vec3), heading_rad, mode, route.
    let vec3 = [1.5f64, 2.0, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let pose = flatbuffer(
        Some(b"POSE"),
        6,
        &[
            (0, Fb::Inline(&7u64.to_le_bytes())),
            (1, Fb::Str("map")),
            (2, Fb::Inline(&vec3)),
            (3, Fb::Inline(&0.25f64.to_le_bytes())),
            (4, Fb::Inline(&[1])),
            (5, Fb::Vector(&[4, 8])),
        ],
    );
    write(dir, T, "pose", &pose)?;
    // Absent slots, a 4-byte float, no file identifier.
    let sparse =
        flatbuffer(None, 5, &[(1, Fb::Inline(&3.5f32.to_le_bytes())), (4, Fb::Str("a longer string, UTF-8: ✓"))]);
    write(dir, T, "sparse", &sparse)?;
    write(dir, T, "empty_table", &flatbuffer(None, 0, &[]))?;
    Ok(())
}

/// `descriptor_decode`: `[name_len u8][name][desc_len u16][FileDescriptorSet][payload]`, the set built as eCAL
/// announces one (the message's file and its imports, google/protobuf/timestamp.proto among them).
fn descriptor_seeds(dir: &Path) -> Result<()> {
    use prost::Message as _;
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        DescriptorProto, EnumDescriptorProto, EnumValueDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
        FileDescriptorSet, MessageOptions, OneofDescriptorProto,
    };
    const T: &str = "descriptor_decode";
    let field = |name: &str, number: i32, label: Label, ty: Type, type_name: Option<&str>| FieldDescriptorProto {
        name: Some(name.into()),
        number: Some(number),
        label: Some(label as i32),
        r#type: Some(ty as i32),
        type_name: type_name.map(Into::into),
        json_name: None,
        ..FieldDescriptorProto::default()
    };
    let (opt, rep) = (Label::Optional, Label::Repeated);
    let timestamp = FileDescriptorProto {
        name: Some("google/protobuf/timestamp.proto".into()),
        package: Some("google.protobuf".into()),
        message_type: vec![DescriptorProto {
            name: Some("Timestamp".into()),
            field: vec![field("seconds", 1, opt, Type::Int64, None), field("nanos", 2, opt, Type::Int32, None)],
            ..DescriptorProto::default()
        }],
        syntax: Some("proto3".into()),
        ..FileDescriptorProto::default()
    };
    let header = DescriptorProto {
        name: Some("Header".into()),
        field: vec![field("seq", 1, opt, Type::Uint32, None), field("frame_id", 2, opt, Type::String, None)],
        ..DescriptorProto::default()
    };
    let tags_entry = DescriptorProto {
        name: Some("TagsEntry".into()),
        field: vec![field("key", 1, opt, Type::String, None), field("value", 2, opt, Type::Int32, None)],
        options: Some(MessageOptions { map_entry: Some(true), ..MessageOptions::default() }),
        ..DescriptorProto::default()
    };
    let mut text = field("text", 5, opt, Type::String, None);
    text.oneof_index = Some(0);
    let mut raw = field("raw", 6, opt, Type::Bytes, None);
    raw.oneof_index = Some(0);
    let imu = DescriptorProto {
        name: Some("Imu".into()),
        field: vec![
            field("header", 1, opt, Type::Message, Some(".pb.Header")),
            field("values", 2, rep, Type::Double, None),
            field("status", 3, opt, Type::Enum, Some(".pb.Status")),
            field("tags", 4, rep, Type::Message, Some(".pb.Imu.TagsEntry")),
            text,
            raw,
            field("stamp", 7, opt, Type::Message, Some(".google.protobuf.Timestamp")),
        ],
        nested_type: vec![tags_entry],
        oneof_decl: vec![OneofDescriptorProto { name: Some("kind".into()), options: None }],
        ..DescriptorProto::default()
    };
    let status = EnumDescriptorProto {
        name: Some("Status".into()),
        value: ["STATUS_UNKNOWN", "STATUS_OK"]
            .iter()
            .zip(0..)
            .map(|(n, i)| EnumValueDescriptorProto { name: Some((*n).into()), number: Some(i), options: None })
            .collect(),
        ..EnumDescriptorProto::default()
    };
    let file = FileDescriptorProto {
        name: Some("imu.proto".into()),
        package: Some("pb".into()),
        dependency: vec!["google/protobuf/timestamp.proto".into()],
        message_type: vec![header, imu],
        enum_type: vec![status],
        syntax: Some("proto3".into()),
        ..FileDescriptorProto::default()
    };
    let set = FileDescriptorSet { file: vec![timestamp, file] }.encode_to_vec();
    // header {seq: 7, frame_id: "f"}, values [1.5, -2], status STATUS_OK, tags {"a": 5}, text "hi",
    // stamp {seconds: 1700000000, nanos: 5}, and an unknown field 15.
    let mut payload = vec![0x0a, 5, 0x08, 7, 0x12, 1, b'f', 0x12, 16];
    payload.extend_from_slice(&1.5f64.to_le_bytes());
    payload.extend_from_slice(&(-2.0f64).to_le_bytes());
    payload.extend_from_slice(&[0x18, 1, 0x22, 5, 0x0a, 1, b'a', 0x10, 5, 0x2a, 2, b'h', b'i']);
    payload.extend_from_slice(&[0x3a, 8, 0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06, 0x10, 5, 0x78, 1]);
    let input = |name: &str, desc: &[u8], payload: &[u8]| -> Result<Vec<u8>> {
        Ok([
            &[u8::try_from(name.len())?][..],
            name.as_bytes(),
            &u16::try_from(desc.len())?.to_le_bytes(),
            desc,
            payload,
        ]
        .concat())
    };
    write(dir, T, "imu", &input("pb.Imu", &set, &payload)?)?;
    write(dir, T, "imu_empty_payload", &input("pb.Imu", &set, &[])?)?;
    write(dir, T, "nested_type", &input("pb.Header", &set, &payload[2..7])?)?;
    write(dir, T, "type_not_in_set", &input("pb.Nope", &set, &payload)?)?;
    Ok(())
}
