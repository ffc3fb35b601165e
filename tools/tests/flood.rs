//! Floods of well-formed registration traffic on loopback, against a subscriber process receiving from real
//! publishers: the `[shoal_limits]` bounds keep its memory flat (growth < 64 MB) and its messaging working (a
//! publisher started during the flood is matched and delivered). Each flood is bounded in time.
//!
//! The UDP data floods (`udp_*`) do the same against a subscriber whose only layer is eCAL's UDP data layer: never
//! completed fragmented messages from 64 loopback addresses (`[shoal_limits] udp_reassembly_bytes`,
//! `udp_fragmented_per_source`), and whole samples of 100,000 topics nobody subscribes to. Good traffic shares the
//! socket with the flood there, so datagrams the kernel drops during it are lost (and counted); everything sent
//! after it arrives.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use serde_json::Value;
use shoal::registration::{Direction, Identity, LocalTopic, codec};
use shoal::wire::data_sample::{DataSampleRef, encode_data_sample};
use shoal::wire::pb;
use shoal::wire::{DEFAULT_MAX_FRAGMENT_PAYLOAD, DatagramHeader, DatagramKind, HEADER_LEN, encode_message};
use support::{Proc, check_summary, shoal_peer, topic, write_ini};

const T: Duration = Duration::from_secs(30);
/// eCAL's local-mode registration address: the loopback broadcast, registration port.
const REGISTRATION: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), 14000);
/// Every flood reaches every process on the port it floods (they are broadcasts), so the tests of this file run
/// one at a time: each victim sees its own flood only, and the figures it prints are its own.
static ONE_FLOOD_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// eCAL's local-mode UDP data address.
const DATA: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), 14002);

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name").trim().to_string()
}

/// Resident memory of `pid` in KiB, outside shared memory (the rings a subscriber maps are not its growth).
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field("VmRSS:").saturating_sub(field("RssShmem:"))
}

fn identity(host: &str, pid: u32) -> Identity {
    Identity {
        host_name: host.to_string(),
        pid,
        process_name: "/flood".into(),
        unit_name: "flood".into(),
        process_parameter: String::new(),
        shm_transport_domain: host.to_string(),
        network_mode: false,
    }
}

fn local_topic(id: u64, name: &str) -> LocalTopic {
    LocalTopic {
        id,
        topic_name: name.into(),
        type_info: shoal::TypeInfo::default(),
        layers: Vec::new(),
        stats: Default::default(),
    }
}

fn datagrams(sample: &pb::Sample) -> Vec<Vec<u8>> {
    let mut id = 0;
    codec::encode_registration(sample, 65_000, &mut || {
        id += 1;
        id
    })
    .expect("encode")
}

/// Sends `kind` flood traffic claiming `host` for `duration`; returns the datagrams sent.
fn flood(kind: &str, host: &str, duration: Duration) -> u64 {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_broadcast(true).expect("broadcast");
    let start = Instant::now();
    let mut sent = 0u64;
    let mut n = 0u64;
    while start.elapsed() < duration {
        n += 1;
        let pid = 1_000_000 + (n % 5000) as u32;
        let batch: Vec<Vec<u8>> = match kind {
            // ~60 KB samples of 30,000 empty transport-layer entries (each a different entity).
            "empty_layers" => {
                let mut s =
                    codec::topic_sample(&identity(host, pid), Direction::Publisher, &local_topic(n, "flood"), 1);
                s.topic.as_mut().expect("topic").transport_layer = vec![pb::TransportLayer::default(); 30_000];
                datagrams(&s)
            }
            // A new entity of a new topic every time, from 5000 processes.
            "many_topics" => datagrams(&codec::topic_sample(
                &identity(host, pid),
                Direction::Publisher,
                &local_topic(n, &format!("flood_{n}")),
                1,
            )),
            // 16 MB samples (a huge descriptor), fragmented: 4 at a time, as in the audit.
            "huge_fragmented" => {
                let mut s =
                    codec::topic_sample(&identity(host, pid), Direction::Publisher, &local_topic(n, "flood"), 1);
                s.topic.as_mut().expect("topic").datatype_information =
                    Some(pb::DataTypeInformation { descriptor_information: vec![7; 16 << 20], ..Default::default() });
                datagrams(&s)
            }
            // A new topic every time, all from one process (`topics_per_process`).
            "one_process_topics" => datagrams(&codec::topic_sample(
                &identity(host, 999_999),
                Direction::Publisher,
                &local_topic(n, &format!("flood_{n}")),
                1,
            )),
            // Fields over their bounds (`string_bytes`, `descriptor_bytes`) in samples under the message bound:
            // an 8 KB type name and a 2 MB descriptor, fragmented, a new topic every time.
            "oversized_fields" => {
                let mut s = codec::topic_sample(
                    &identity(host, pid),
                    Direction::Publisher,
                    &local_topic(n, &format!("flood_{n}")),
                    1,
                );
                s.topic.as_mut().expect("topic").datatype_information = Some(pb::DataTypeInformation {
                    name: "T".repeat(8192),
                    descriptor_information: vec![7; 2 << 20],
                    ..Default::default()
                });
                datagrams(&s)
            }
            // A new topic every time with its own 60 KB descriptor (one datagram each), from 5000 processes: the
            // registry's byte budget, not its entry counts, bounds this one.
            "descriptor_topics" => {
                let mut s = codec::topic_sample(
                    &identity(host, pid),
                    Direction::Publisher,
                    &local_topic(n, &format!("flood_{n}")),
                    1,
                );
                let mut descriptor = vec![7u8; 60_000];
                descriptor[..8].copy_from_slice(&n.to_le_bytes());
                s.topic.as_mut().expect("topic").datatype_information = Some(pb::DataTypeInformation {
                    name: format!("T{n}"),
                    descriptor_information: descriptor,
                    ..Default::default()
                });
                datagrams(&s)
            }
            other => panic!("unknown flood {other}"),
        };
        for d in &batch {
            if sock.send_to(d, REGISTRATION).is_ok() {
                sent += 1;
            }
        }
    }
    sent
}

/// Runs one flood against a subscriber process fed by one publisher; a second publisher starts during the flood.
fn survives(kind: &str) {
    let _one_at_a_time = ONE_FLOOD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t = topic(kind);
    let host = host_name();
    let sub = shoal_peer("victim sub", &["sub", "--topic", &t, "--count", "800", "--idle-ms", "20000"], None);
    sub.expect("ready", T);
    let pub_a = shoal_peer("pub a", &["pub", "--topic", &t, "--count", "400", "--rate", "100"], None);
    std::thread::sleep(Duration::from_millis(1500));
    let before = rss_kb(sub.pid());
    let victim = sub.pid();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            peak = peak.max(rss_kb(victim));
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    });
    let flooder = {
        let host = host.clone();
        let kind = kind.to_string();
        std::thread::spawn(move || flood(&kind, &host, Duration::from_secs(3)))
    };
    // Matching still works under the flood.
    std::thread::sleep(Duration::from_millis(500));
    let pub_b = shoal_peer("pub b", &["pub", "--topic", &t, "--count", "400", "--rate", "100"], None);
    let sent = flooder.join().expect("flood");
    // After the flood (the victim still receives from pub b for another second).
    std::thread::sleep(Duration::from_millis(300));
    let after = rss_kb(victim);
    let peak = sampler.join().expect("sampler");
    let summary = sub.expect("summary", T);
    eprintln!("{kind}: {sent} datagrams; victim RSS outside shm before {before} KB, peak {peak} KB, after {after} KB");
    check_summary(&summary, 800, 2);
    assert!(sent > 100, "the flood sent only {sent} datagrams");
    assert!(peak.saturating_sub(before) < 64 * 1024, "{kind}: RSS grew from {before} KB to {peak} KB");
    for mut p in [pub_a, pub_b] {
        p.wait_success(T);
    }
    drop::<Proc>(sub);
}

#[test]
fn a_flood_of_empty_layer_entries_is_bounded() {
    survives("empty_layers");
}

#[test]
fn a_flood_of_new_topics_is_bounded() {
    survives("many_topics");
}

#[test]
fn a_flood_of_huge_fragmented_samples_is_bounded() {
    survives("huge_fragmented");
}

#[test]
fn a_flood_of_topics_with_big_descriptors_is_bounded() {
    survives("descriptor_topics");
}

#[test]
fn a_flood_of_topics_of_one_process_is_bounded() {
    survives("one_process_topics");
}

#[test]
fn a_flood_of_oversized_names_and_descriptors_is_bounded() {
    survives("oversized_fields");
}

/// An `ecal.ini` that leaves eCAL's UDP data layer as the only transport.
fn udp_only_ini() -> String {
    write_ini(
        "flood_udp_only",
        "[shoal_shm_ring]\nenabled = false\n[publisher]\nuse_shm = false\n[subscriber]\nshm_rec_enabled = false\n",
    )
}

/// Sends `kind` UDP data flood traffic for `duration`; returns the datagrams sent.
fn data_flood(kind: &str, host: &str, duration: Duration) -> u64 {
    // 64 senders: loopback answers on all of 127.0.0.0/8.
    let socks: Vec<UdpSocket> = (2..66u8)
        .map(|i| {
            let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, i), 0)).expect("bind");
            s.set_broadcast(true).expect("broadcast");
            s
        })
        .collect();
    let fragment = vec![0x5au8; DEFAULT_MAX_FRAGMENT_PAYLOAD];
    let start = Instant::now();
    let (mut sent, mut n) = (0u64, 0u64);
    let mut framed = Vec::new();
    while start.elapsed() < duration {
        n += 1;
        let sock = &socks[(n % socks.len() as u64) as usize];
        let mut send = |d: &[u8]| {
            if sock.send_to(d, DATA).is_ok() {
                sent += 1;
            }
        };
        match kind {
            // The info datagram of a ~64 MiB message and its first 8 fragments (~512 KB held), never completed.
            "udp_fragments" => {
                let count = 1024u32;
                let id = n as i32;
                let total = count * DEFAULT_MAX_FRAGMENT_PAYLOAD as u32;
                send(&DatagramHeader { kind: DatagramKind::FragmentInfo, id, num: count, len: total }.to_bytes());
                for index in 0..8u32 {
                    let h = DatagramHeader { kind: DatagramKind::Fragment, id, num: index, len: fragment.len() as u32 };
                    let mut d = Vec::with_capacity(HEADER_LEN + fragment.len());
                    d.extend_from_slice(&h.to_bytes());
                    d.extend_from_slice(&fragment);
                    send(&d);
                }
            }
            // A whole 1 KB sample of a new topic every time.
            "udp_unknown_topics" => {
                framed.clear();
                let name = format!("flood_{n}");
                encode_data_sample(
                    &mut framed,
                    &DataSampleRef {
                        topic_name: &name,
                        topic_id: "77",
                        publisher_id: 77,
                        host_name: host,
                        clock: n,
                        time_us: 0,
                        payload: &[1u8; 1024],
                    },
                );
                let mut id = 0;
                for d in encode_message(&name, &framed, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || {
                    id += 1;
                    id
                })
                .expect("encode")
                {
                    send(&d);
                }
            }
            other => panic!("unknown flood {other}"),
        }
    }
    sent
}

/// Runs one UDP data flood against a UDP-only subscriber process: publisher a (100 KB messages, two fragments
/// each, 100 Hz, 7 s) sends 1 s before, during and 3 s after the 3 s flood (so that its losses are followed by
/// samples that reveal them), publisher b after it.
fn survives_udp(kind: &str) {
    let _one_at_a_time = ONE_FLOOD_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ini = udp_only_ini();
    let t = topic(kind);
    let host = host_name();
    // It ends once a's 700 and b's 400 are received or counted lost (or after 6 s without a message).
    let sub_args = ["sub", "--topic", &t, "--count", "1100", "--until-accounted", "--idle-ms", "6000"];
    let sub = shoal_peer("victim sub", &sub_args, Some(&ini));
    sub.expect("ready", T);
    let pub_args = |n| ["pub", "--topic", &t, "--count", n, "--size", "100000", "--rate", "100", "--wait-subs", "1"];
    let mut pub_a = shoal_peer("pub a", &pub_args("700"), Some(&ini));
    std::thread::sleep(Duration::from_millis(1000));
    let victim = sub.pid();
    let before = rss_kb(victim);
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        let end = Instant::now() + Duration::from_secs(4);
        while Instant::now() < end {
            peak = peak.max(rss_kb(victim));
            std::thread::sleep(Duration::from_millis(20));
        }
        peak
    });
    let sent = data_flood(kind, &host, Duration::from_secs(3));
    let peak = sampler.join().expect("sampler");
    pub_a.wait_success(T);
    // Everything sent after the flood arrives.
    let mut pub_b = shoal_peer("pub b", &pub_args("400"), Some(&ini));
    pub_b.wait_success(T);
    let summary: Value = sub.expect("summary", T);
    let after = rss_kb(victim);
    // The victim's own socket (SO_RXQ_OVFL), not every socket on the port: other processes' come and go.
    let kernel_drops = &summary["udp"]["kernel_drops"];
    eprintln!(
        "{kind}: {sent} datagrams ({kernel_drops} dropped by the kernel: receive buffers full); victim RSS outside \
         shm before {before} KB, peak {peak} KB, after {after} KB; {summary}"
    );
    let received = summary["received"].as_u64().expect("received");
    assert_eq!(summary["torn"], 0, "intact: {summary}");
    assert_eq!(summary["out_of_order"], 0, "in order, no duplicates: {summary}");
    assert_eq!(summary["publishers"], 2, "{summary}");
    assert!(sent > 1000, "the flood sent only {sent} datagrams");
    // b's 400 all arrive, and a's first and last 100 (sent before and after the flood).
    let per = summary["per_publisher"].as_array().expect("per_publisher");
    assert!(per.iter().any(|p| p["received"] == 400 && p["last_clock"] == 400), "b: all 400 arrive: {summary}");
    assert!(per.iter().any(|p| p["last_clock"] == 700), "a's last messages, sent after the flood, arrive: {summary}");
    assert!(received >= 400 + 200, "received {received} of 1100: {summary}");
    assert_eq!(summary["drops"].as_u64().expect("drops"), 1100 - received, "every loss counted: {summary}");
    assert!(peak.saturating_sub(before) < 64 * 1024, "{kind}: RSS grew from {before} KB to {peak} KB");
}

#[test]
fn a_udp_flood_of_incomplete_fragmented_messages_is_bounded() {
    survives_udp("udp_fragments");
}

#[test]
fn a_udp_flood_of_samples_for_unknown_topics_is_bounded() {
    survives_udp("udp_unknown_topics");
}
