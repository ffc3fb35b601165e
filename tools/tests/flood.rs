//! Floods of well-formed registration traffic on loopback, against a subscriber process receiving from real
//! publishers: the `[shoal_limits]` bounds keep its memory flat (growth < 64 MB) and its messaging working (a
//! publisher started during the flood is matched and delivered). Each flood is bounded in time.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use shoal::registration::{Direction, Identity, LocalTopic, codec, pb};
use support::{Proc, check_summary, shoal_peer, topic};

const T: Duration = Duration::from_secs(30);
/// eCAL's local-mode registration address: the loopback broadcast, registration port.
const REGISTRATION: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), 14000);

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
