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
use shoal::config::ShmRingConfig;
use shoal::registration::codec::{
    encode_registration, process_sample, process_unreg_sample, topic_sample, topic_unreg_sample,
};
use shoal::registration::{Direction, Identity, Layer, LayerKind, LayerPar, LocalTopic, ShoalPar, pb};
use shoal::transport::shm_ring::RingWriter;
use shoal::wire::{HEADER_LEN, encode_message};

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
    let cfg = ShmRingConfig {
        enabled: true,
        slot_count: 2,
        slot_size: 64,
        huge_pages: false,
        huge_pages_path: PathBuf::from("/dev/hugepages"),
    };
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
    Ok(())
}

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
    auth_seeds(&dir)?;
    packed_seeds(&dir)?;
    ecal_tcp_seeds(&dir)?;
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
