use std::net::SocketAddr;
use std::time::{Duration, Instant};

use prost::Message;
use rand::{Rng, SeedableRng, rngs::StdRng};

use super::codec;
use super::*;
use crate::config::RegistrationConfig;
use crate::types::TypeInfo;
use crate::wire::pb::{self, parse_topic_id};
use crate::wire::{self, DatagramHeader, DatagramKind, ReassemblyConfig};

// ------------------------------------------------------------------------------------------
// helpers

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// The python path elided in the doc: 43 bytes ending in "bin/python3.11" as printed.
const PY_PATH: &str = "/root/.local/share/venv-ecal/bin/python3.11";

/// Capture A (reg_process from an eCAL 6.1.1 python publisher), elided path filled in.
fn capture_a() -> Vec<u8> {
    assert_eq!(PY_PATH.len(), 0x2b);
    let mut d = hex("45 43 41 4c 05 00 00 00 03 00 00 00 ff ff ff ff
         01 00 00 00 a6 00 00 00 0b 00 72 65 67 5f 73 61
         6d 70 6c 65 00 08 04 1a 94 01 18 81 7d 12 02 76
         6d 22 2b");
    d.extend_from_slice(PY_PATH.as_bytes());
    d.extend(hex("92 01 02 76 6d 2a 06 70 79 5f 70 75 62 32 10 70 79 74
         68 6f 6e 20 70 75 62 2e 70 79 20 31 34 78 37 82
         01 10 70 75 62 7c 73 75 62 7c 6c 6f 67 7c 74 69
         6d 65 8a 01 06 76 36 2e 31 2e 31 9a 01 00 72 12
         65 63 61 6c 74 69 6d 65 2d 6c 6f 63 61 6c 74 69
         6d 65 08 00 62 06 08 00 18 01 12 00 68 00"));
    assert_eq!(d.len(), 190, "capture A is 190 bytes");
    d
}

/// Capture B (reg_publisher after an SHM subscriber connected); elided path and latency
/// bytes filled in as the doc describes them (count 0, latest 0, min +inf, max -inf, 0, 0).
fn capture_b() -> Vec<u8> {
    let mut d = hex("45 43 41 4c 05 00 00 00 03 00 00 00 ff ff ff ff
         01 00 00 00 f2 00 00 00 0b 00 72 65 67 5f 73 61
         6d 70 6c 65 00 08 02 2a e0 01 32 11 32 31 35 39
         30 37 39 35 34 39 37 36 33 35 38 34 30 12 02 76
         6d 18 b4 99 01 22 2b");
    d.extend_from_slice(PY_PATH.as_bytes());
    d.extend(hex("3a 08 73 68 6d 74 6f 70 69 63 42 00 e2 01
         02 76 6d f2 01 16 0a 09 64 65 6d 6f 2e 54 79 70
         65 12 03 72 61 77 1a 04 44 45 53 43 2a 06 70 79
         5f 70 75 62 62 1b 08 04 10 02 30 01 18 00 2a 11
         12 0f 0a 0d 65 63 61 6c 5f 65 35 35 64 62 62 32
         62 08 00 68 00 80 01 01 88 01 00 90 01 00 98 01
         00 a0 01 0d a8 01 83 27 fa 01 2f 08 00 11 00 00
         00 00 00 00 00 00
         19 00 00 00 00 00 00 f0 7f
         21 00 00 00 00 00 00 f0 ff
         29 00 00 00 00 00 00 00 00
         31 00 00 00 00 00 00 00 00"));
    assert_eq!(d.len(), 266, "capture B is 266 bytes");
    d
}

fn cfg() -> RegistrationConfig {
    RegistrationConfig {
        refresh: Duration::from_millis(1000),
        timeout: Duration::from_millis(10_000),
        port: 14000,
        loopback: true,
        shm_transport_domain: String::new(),
    }
}

fn ident(host: &str, pid: u32) -> Identity {
    Identity {
        host_name: host.into(),
        pid,
        process_name: format!("/usr/bin/proc{pid}"),
        unit_name: format!("unit{pid}"),
        process_parameter: format!("proc{pid} --flag"),
        shm_transport_domain: String::new(),
        network_mode: false,
    }
}

fn local(id: u64, name: &str, layers: Vec<Layer>) -> LocalTopic {
    LocalTopic {
        id,
        topic_name: name.into(),
        type_info: TypeInfo::new("demo.Msg", "proto", b"desc".to_vec()),
        layers,
        stats: TopicStats::default(),
    }
}

fn shoal_layer(generation: u32) -> Layer {
    Layer::new(
        LayerKind::ShoalRing,
        true,
        true,
        LayerPar::Shoal(ShoalPar {
            segment: format!("shoal_ring_g{generation}"),
            slot_count: 16,
            slot_size: 65_536 * u64::from(generation),
            generation,
            doorbell: "shoal_bell".into(),
            page_kb: 2048,
            history_depth: 10,
            history_bytes: 4096,
        }),
    )
}

fn udp_layer() -> Layer {
    Layer::new(LayerKind::Udp, true, false, LayerPar::None)
}

fn decode_datagram(d: &[u8]) -> Option<pb::Sample> {
    let (h, payload) = DatagramHeader::parse(d).ok()?;
    (h.kind == DatagramKind::Whole).then(|| decode_registration(payload).ok()).flatten()
}

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 40_000 + i as u16))
}

struct Peer {
    reg: Registrar,
    alive: bool,
    sent: Vec<pb::Sample>,
}

/// In-memory broadcast network on a virtual clock: every datagram reaches every live peer,
/// the sender included (as a broadcast on loopback does).
struct Net {
    now: Instant,
    peers: Vec<Peer>,
}

impl Net {
    fn new(now: Instant) -> Self {
        Net { now, peers: Vec::new() }
    }

    fn add(&mut self, reg: Registrar) -> usize {
        self.peers.push(Peer { reg, alive: true, sent: Vec::new() });
        self.peers.len() - 1
    }

    fn reg(&mut self, i: usize) -> &mut Registrar {
        &mut self.peers[i].reg
    }

    /// Moves datagrams until nobody has anything to send; returns the number of rounds.
    fn exchange(&mut self) -> usize {
        for round in 0..50 {
            let mut batch = Vec::new();
            for (i, p) in self.peers.iter_mut().enumerate().filter(|(_, p)| p.alive) {
                while let Some(d) = p.reg.poll_transmit() {
                    if let Some(s) = decode_datagram(&d) {
                        p.sent.push(s);
                    }
                    batch.push((i, d));
                }
            }
            if batch.is_empty() {
                return round;
            }
            for (i, d) in batch {
                for p in self.peers.iter_mut().filter(|p| p.alive) {
                    p.reg.handle_datagram(self.now, addr(i), &d);
                }
            }
        }
        panic!("registration traffic did not settle (ping-pong)");
    }

    /// Advances the clock, running every timer that falls due and exchanging traffic.
    fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        loop {
            self.exchange();
            let next = self.peers.iter().filter(|p| p.alive).filter_map(|p| p.reg.poll_timeout()).min();
            match next {
                Some(t) if t <= target => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    for p in self.peers.iter_mut().filter(|p| p.alive) {
                        if p.reg.poll_timeout().is_some_and(|t| t <= now) {
                            p.reg.handle_timeout(now);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = target;
    }

    fn events(&mut self, i: usize) -> Vec<Event> {
        std::iter::from_fn(|| self.peers[i].reg.poll_event()).collect()
    }

    fn sent_count(&self, i: usize, cmd: i32) -> usize {
        self.peers[i].sent.iter().filter(|s| s.cmd_type == cmd).count()
    }
}

fn matched_ids(events: &[Event]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Matched { local_id, remote } => Some((*local_id, remote.key.entity_id)),
            _ => None,
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// eCAL 6.1.1 captures

#[test]
fn decodes_capture_a_process_sample() {
    let d = capture_a();
    let (h, framed) = DatagramHeader::parse(&d).unwrap();
    assert_eq!(h, DatagramHeader { kind: DatagramKind::Whole, id: -1, num: 1, len: 166 });
    assert_eq!(wire::split_name(framed).unwrap().0, "reg_sample");
    let s = decode_registration(framed).unwrap();
    assert_eq!(s.cmd_type, pb::CMD_REG_PROCESS);
    let p = s.process.unwrap();
    assert_eq!(p.process_id, 16001);
    assert_eq!(p.host_name, "vm");
    assert_eq!(p.process_name, PY_PATH);
    assert_eq!(p.shm_transport_domain, "vm");
    assert_eq!(p.unit_name, "py_pub");
    assert_eq!(p.process_parameter, "python pub.py 14");
    assert_eq!(p.component_init_state, 55);
    assert_eq!(p.component_init_info, "pub|sub|log|time");
    assert_eq!(p.ecal_runtime_version, "v6.1.1");
    assert_eq!(p.config_file_path, "");
    assert_eq!(p.time_sync_module_name, "ecaltime-localtime");
    assert_eq!(p.registration_clock, 0);
    assert_eq!(p.state, Some(pb::ProcessState { severity: 0, info: String::new(), severity_level: 1 }));
    assert_eq!(p.time_sync_state, 0);

    let now = Instant::now();
    let mut r = Registrar::new(ident("vm", 1), &cfg(), now);
    r.handle_datagram(now, addr(0), &d);
    let procs: Vec<_> = r.processes().collect();
    assert_eq!(procs.len(), 1);
    assert_eq!((procs[0].pid, procs[0].unit_name.as_str()), (16001, "py_pub"));
    assert_eq!(procs[0].ecal_runtime_version, "v6.1.1");
}

#[test]
fn decodes_capture_b_publisher_sample_and_matches_it() {
    let d = capture_b();
    let (h, framed) = DatagramHeader::parse(&d).unwrap();
    assert_eq!(h.len, 0xf2);
    let s = decode_registration(framed).unwrap();
    assert_eq!(s.cmd_type, pb::CMD_REG_PUBLISHER);
    let t = s.topic.clone().unwrap();
    assert_eq!(t.topic_id, "21590795497635840");
    assert_eq!(parse_topic_id(&t.topic_id).unwrap() >> 40, 19636, "pid in the id's top bits");
    assert_eq!((t.host_name.as_str(), t.process_id, t.topic_name.as_str()), ("vm", 19636, "shmtopic"));
    assert_eq!(t.direction, "");
    assert_eq!(t.shm_transport_domain, "vm");
    assert_eq!(t.unit_name, "py_pub");
    assert_eq!((t.connections_local, t.data_clock, t.data_frequency), (1, 13, 4995));
    let lat = t.data_latency_us.unwrap();
    assert_eq!((lat.count, lat.min, lat.max), (0, Some(f64::INFINITY), Some(f64::NEG_INFINITY)));

    let remote = codec::remote_topic(Direction::Publisher, &t).unwrap();
    assert_eq!(remote.type_info, TypeInfo::new("demo.Type", "raw", b"DESC".to_vec()));
    assert_eq!(
        remote.layers,
        vec![Layer {
            kind: LayerKind::Shm,
            version: 2,
            enabled: true,
            active: false,
            par: LayerPar::Shm { memory_files: vec!["ecal_e55dbb2b".into()] },
        }]
    );
    assert_eq!(remote.stats.data_frequency_mhz, 4995);

    // A shoal subscriber on the same host matches the eCAL publisher.
    let now = Instant::now();
    let mut r = Registrar::new(ident("vm", 1), &cfg(), now);
    r.add_subscriber(now, local(7, "shmtopic", vec![udp_layer()]));
    r.handle_datagram(now, addr(0), &d);
    let ev = std::iter::from_fn(|| r.poll_event()).collect::<Vec<_>>();
    assert_eq!(matched_ids(&ev), vec![(7, 21_590_795_497_635_840)]);
    assert_eq!(r.matches_of(7).count(), 1);
}

#[test]
fn our_samples_carry_the_fields_ecal_reads() {
    let me = Identity { shm_transport_domain: "vm".into(), ..ident("vm", 4242) };
    let mut t = local((4242u64 << 40) | 5, "shmtopic", vec![udp_layer(), shoal_layer(3)]);
    t.stats.data_clock = 9;
    t.stats.latency.max_us = 12.5;
    let s = codec::topic_sample(&me, Direction::Publisher, &t, 7);
    let bytes = codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap();
    assert_eq!(bytes.len(), 1);
    let back = decode_datagram(&bytes[0]).unwrap();
    assert_eq!(back, s);
    let topic = back.topic.unwrap();
    assert_eq!(topic.topic_id, t.id.to_string());
    assert_eq!((topic.process_id, topic.registration_clock), (4242, 7));
    assert_eq!(topic.transport_layer[0].r#type, 1);
    assert!(topic.transport_layer[0].par_layer.is_none(), "udp par omitted like eCAL");
    let remote = codec::remote_topic(Direction::Publisher, &topic).unwrap();
    assert_eq!(remote.layers, t.layers);
    assert_eq!(remote.stats, t.stats);
    assert_eq!(remote.type_info, t.type_info);

    let p = codec::process_sample(&me, 3).process.unwrap();
    assert_eq!((p.process_id, p.registration_clock, p.host_name.as_str()), (4242, 3, "vm"));
    assert!(p.ecal_runtime_version.contains("6.1.1"));
    assert!(p.shoal_stats.is_none());
    assert_eq!(codec::remote_process(&p, Instant::now()).shoal, None, "eCAL's processes carry no shoal statistics");
    // shoal's process statistics travel in field 100 and come back as they were sent.
    let stats = crate::stats::ShoalProcessStats {
        udp_kernel_drops: 12_345,
        registration_kernel_drops: 6,
        memory_rss_bytes: Some(7 << 20),
        cpu_load_permille: Some(1_500),
    };
    // The state set with `Node::set_state` travels in eCAL's ProcessState and comes back as it was set.
    let state = crate::process::ProcessState::new(
        crate::process::Severity::Critical,
        crate::process::SeverityLevel::Level4,
        "no camera",
    );
    let wire_bytes = codec::process_sample_with(&me, 4, &state, &stats).encode_to_vec();
    let back = pb::Sample::decode(&wire_bytes[..]).unwrap().process.unwrap();
    assert_eq!(back.state, Some(pb::ProcessState { severity: 3, info: "no camera".into(), severity_level: 4 }));
    let remote = codec::remote_process(&back, Instant::now());
    assert_eq!(remote.shoal, Some(stats));
    assert_eq!(remote.state, state);
    let u = codec::process_unreg_sample(&me);
    assert_eq!(u.cmd_type, pb::CMD_UNREG_PROCESS);
    assert_eq!(u.process.unwrap().ecal_runtime_version, "", "unreg carries identity only");
    let tu = codec::topic_unreg_sample(&me, Direction::Subscriber, &t);
    assert_eq!(tu.cmd_type, pb::CMD_UNREG_SUBSCRIBER);
    let tt = tu.topic.unwrap();
    assert!(tt.transport_layer.is_empty() && tt.datatype_information.is_none());
    assert_eq!(tt.topic_name, "shmtopic");
}

/// A ConnectionPar as eCAL knows it (no field 100).
#[derive(Clone, PartialEq, prost::Message)]
struct EcalConnectionPar {
    #[prost(message, optional, tag = "2")]
    layer_par_shm: Option<pb::LayerParShm>,
    #[prost(message, optional, tag = "4")]
    layer_par_tcp: Option<pb::LayerParTcp>,
}

#[test]
fn shoal_layer_extension_is_skippable() {
    let par = codec::layer_to_pb(&shoal_layer(2)).par_layer.unwrap();
    let bytes = par.encode_to_vec();
    let ecal_view = EcalConnectionPar::decode(&bytes[..]).unwrap();
    assert_eq!(ecal_view, EcalConnectionPar::default());
    let back = pb::ConnectionPar::decode(&bytes[..]).unwrap();
    let shoal = back.layer_par_shoal.unwrap();
    assert_eq!((shoal.generation, shoal.page_kb), (2, 2048));
    // And back into the model: the page size the ring got reaches the peers (and the tools).
    let layer = codec::layer_from_pb(&codec::layer_to_pb(&shoal_layer(2)));
    assert!(matches!(layer.par, LayerPar::Shoal(ShoalPar { page_kb: 2048, .. })), "{layer:?}");
    // The history a publisher keeps (or a subscriber asks for) too.
    assert!(matches!(layer.par, LayerPar::Shoal(ShoalPar { history_depth: 10, history_bytes: 4096, .. })), "{layer:?}");
}

fn key(tag: u32, wire_type: u8) -> Vec<u8> {
    let mut v = Vec::new();
    prost::encoding::encode_varint(u64::from(tag << 3 | u32::from(wire_type)), &mut v);
    v
}
fn f_varint(tag: u32, x: u64) -> Vec<u8> {
    let mut v = key(tag, 0);
    prost::encoding::encode_varint(x, &mut v);
    v
}
fn f_bytes(tag: u32, b: &[u8]) -> Vec<u8> {
    let mut v = key(tag, 2);
    prost::encoding::encode_varint(b.len() as u64, &mut v);
    v.extend_from_slice(b);
    v
}

#[test]
fn tolerates_any_order_unknown_and_deprecated_5x_fields() {
    // A 5.x-style TLayer: type shm, version 1, deprecated par_shm (4) string, confirmed.
    let tlayer = [f_bytes(4, b"old_memfile"), f_varint(3, 1), f_varint(2, 1), f_varint(1, 4)].concat();
    let topic = [
        f_varint(21, 1000),
        f_bytes(27, &[f_bytes(1, b"k"), f_bytes(2, b"v")].concat()), // attr map entry
        f_bytes(10, b"old tdesc"),
        f_bytes(9, b"proto:old.Type"),
        f_bytes(12, &tlayer),
        f_bytes(7, b"legacy"),
        f_varint(3, 77),
        f_bytes(2, b"h1"),
        f_bytes(6, b"1234567"),
        f_varint(26, 5), // deprecated hid
        f_varint(999, 1),
    ]
    .concat();
    let sample = [f_bytes(5, &topic), f_bytes(2, &f_bytes(1, b"h1")), f_varint(1, 2)].concat();
    let s = pb::Sample::decode(&sample[..]).unwrap();
    assert_eq!(s.cmd_type, 2);
    let r = codec::remote_topic(Direction::Publisher, s.topic.as_ref().unwrap()).unwrap();
    assert_eq!(r.key, EntityKey { host_name: "h1".into(), pid: 77, entity_id: 1_234_567 });
    assert_eq!(r.topic_name, "legacy");
    assert_eq!(r.layers.len(), 1);
    assert!(r.layers[0].is_enabled(), "version < 2 counts as enabled");
    assert!(r.layers[0].active);
    assert_eq!(r.stats.data_frequency_mhz, 1000);
}

#[test]
fn topic_ids_parse_like_stoull() {
    assert_eq!(parse_topic_id("21590795497635840"), Ok(21_590_795_497_635_840));
    assert_eq!(parse_topic_id("  +42"), Ok(42));
    assert_eq!(parse_topic_id("123abc"), Ok(123));
    assert_eq!(parse_topic_id("18446744073709551615"), Ok(u64::MAX));
    for bad in ["", "abc", "-1", "18446744073709551616", " ", "0x10"] {
        if bad == "0x10" {
            assert_eq!(parse_topic_id(bad), Ok(0), "stoull stops at 'x'");
        } else {
            assert!(parse_topic_id(bad).is_err(), "{bad:?} must be rejected");
        }
    }
}

#[test]
fn non_numeric_topic_id_discards_the_sample() {
    let now = Instant::now();
    let mut r = Registrar::new(ident("h1", 1), &cfg(), now);
    r.add_subscriber(now, local(1, "t", vec![]));
    let mut s = codec::topic_sample(&ident("h1", 2), Direction::Publisher, &local(5, "t", vec![]), 1);
    s.topic.as_mut().unwrap().topic_id = "publisher-five".into();
    for d in codec::encode_registration(&s, 65_483, &mut || 0).unwrap() {
        r.handle_datagram(now, addr(2), &d);
    }
    assert_eq!(r.counters().rejected_ids, 1);
    assert_eq!(r.topics().count(), 0);
    assert!(r.poll_event().is_none());
}

// ------------------------------------------------------------------------------------------
// Registrar on a virtual clock

#[test]
fn new_entities_register_at_once_and_match_within_one_round_trip() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(10, "chatter", vec![shoal_layer(1)]));
    net.exchange();
    assert_eq!(net.sent_count(a, pb::CMD_REG_PROCESS), 1, "process registered at construction");
    assert_eq!(net.sent_count(a, pb::CMD_REG_PUBLISHER), 1, "publisher registered at once");

    // B starts later (at the same virtual instant): it has never heard of A's publisher.
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    net.reg(b).add_subscriber(t0, local(20, "chatter", vec![udp_layer()]));
    assert_eq!(net.reg(b).topics().count(), 0);
    let rounds = net.exchange();
    // Round 1: B's subscriber reaches A (A matches, re-registers its publisher);
    // round 2: A's publisher reaches B. No clock advance was needed.
    assert!(rounds <= 3, "settled in {rounds} rounds");
    assert_eq!(net.now, t0);
    assert_eq!(matched_ids(&net.events(a)), vec![(10, 20)]);
    let eb = net.events(b);
    assert_eq!(matched_ids(&eb), vec![(20, 10)]);
    let Event::Matched { remote, .. } = &eb[0] else { unreachable!() };
    assert_eq!(remote.layers, vec![shoal_layer(1)], "B learnt A's ring parameters");
    assert_eq!(remote.key, EntityKey { host_name: "h1".into(), pid: 100, entity_id: 10 });
    assert_eq!(remote.process_name, "/usr/bin/proc100");
    assert_eq!(net.sent_count(a, pb::CMD_REG_PUBLISHER), 2, "exactly one extra registration for the new match");

    // Nothing more is sent until the next refresh, and a refresh does not re-trigger matching.
    assert_eq!(net.exchange(), 0);
    net.advance(Duration::from_millis(1000));
    assert!(net.events(a).is_empty() && net.events(b).is_empty());
}

#[test]
fn periodic_refresh_sends_process_and_every_entity() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(1, "x", vec![]));
    net.reg(a).add_subscriber(t0, local(2, "y", vec![]));
    net.reg(b).add_subscriber(t0, local(3, "x", vec![]));
    net.exchange();
    assert_eq!(net.reg(a).poll_timeout(), Some(t0 + Duration::from_secs(1)));
    let before = net.peers[a].sent.len();
    let before_b = net.peers[b].sent.len();
    net.advance(Duration::from_millis(999));
    assert_eq!(net.peers[a].sent.len(), before, "nothing before the period");
    net.advance(Duration::from_millis(1));
    assert_eq!(net.peers[a].sent.len() - before, 3, "process + publisher + subscriber");
    assert_eq!(net.peers[b].sent.len() - before_b, 2);
    net.advance(Duration::from_secs(5));
    assert_eq!(net.peers[a].sent.len() - before, 3 * 6);

    // Registration clocks increment per refresh, and set_stats goes out with the next one only.
    let clock_of = |r: &Registrar| r.processes().find(|p| p.pid == 100).unwrap().registration_clock;
    let c1 = clock_of(net.reg(b));
    net.reg(a).set_stats(1, TopicStats { data_clock: 42, ..Default::default() });
    assert_eq!(net.exchange(), 0, "set_stats sends nothing by itself");
    net.advance(Duration::from_secs(2));
    assert_eq!(clock_of(net.reg(b)), c1 + 2);
    let stats = net.reg(b).topics().find(|t| t.key.entity_id == 1).unwrap().stats.clone();
    assert_eq!(stats.data_clock, 42);
}

#[test]
fn a_state_change_is_sent_at_once_and_seen_by_peers() {
    use crate::process::{ProcessState, Severity, SeverityLevel};
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    net.exchange();
    let state_of = |r: &Registrar| r.processes().find(|p| p.pid == 100).unwrap().state.clone();
    assert_eq!(state_of(net.reg(b)), ProcessState::default(), "unknown until set, as eCAL");
    let warn = ProcessState::new(Severity::Warning, SeverityLevel::Level2, "camera at 5 Hz");
    net.reg(a).set_process_state(warn.clone());
    assert_eq!(net.exchange(), 1, "a change goes out at once, before the refresh");
    assert_eq!(state_of(net.reg(b)), warn);
    net.reg(a).set_process_state(warn.clone());
    assert_eq!(net.exchange(), 0, "the same state again sends nothing");
    net.advance(Duration::from_secs(1));
    assert_eq!(state_of(net.reg(b)), warn, "and every refresh carries it");
}

#[test]
fn expiry_after_timeout_without_unregistration() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    net.reg(a).add_subscriber(t0, local(1, "x", vec![]));
    net.reg(b).add_publisher(t0, local(2, "x", vec![]));
    net.advance(Duration::from_secs(3)); // B refreshed exactly at t0 + 3 s
    assert_eq!(matched_ids(&net.events(a)), vec![(1, 2)]);
    net.peers[b].alive = false; // crash: no unregistration
    net.advance(Duration::from_millis(9_999));
    assert!(net.events(a).is_empty(), "still matched before the timeout");
    assert!(net.reg(a).processes().any(|p| p.pid == 200));
    net.advance(Duration::from_millis(1));
    let ev = net.events(a);
    assert_eq!(
        ev,
        vec![Event::Unmatched { local_id: 1, remote: EntityKey { host_name: "h1".into(), pid: 200, entity_id: 2 } }]
    );
    assert!(!net.reg(a).processes().any(|p| p.pid == 200));
    assert!(net.reg(a).topics().all(|t| t.key.pid != 200));
    assert_eq!(net.reg(a).counters().expired_topics, 1);
    assert_eq!(net.reg(a).counters().expired_processes, 1);
}

#[test]
fn unregistration_removes_at_once() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    let c = net.add(Registrar::new(ident("h1", 300), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(1, "x", vec![]));
    net.reg(b).add_subscriber(t0, local(2, "x", vec![]));
    net.reg(c).add_subscriber(t0, local(3, "x", vec![]));
    net.exchange();
    let mut m = matched_ids(&net.events(a));
    m.sort();
    assert_eq!(m, vec![(1, 2), (1, 3)]);

    net.reg(b).remove_local(t0, 2);
    net.exchange();
    assert_eq!(
        net.events(a),
        vec![Event::Unmatched { local_id: 1, remote: EntityKey { host_name: "h1".into(), pid: 200, entity_id: 2 } }]
    );
    assert_eq!(net.sent_count(b, pb::CMD_UNREG_SUBSCRIBER), 1);
    assert!(net.reg(a).topics().all(|t| t.key.entity_id != 2));
    let eb = net.events(b);
    assert!(matches!(eb.last(), Some(Event::Unmatched { local_id: 2, .. })), "B's side sees its match end: {eb:?}");
    assert_eq!(matched_ids(&eb), vec![(2, 1)]);

    // Shutdown: unreg entities + process; A forgets C entirely, C stops ticking.
    net.reg(c).shutdown(t0);
    assert_eq!(net.reg(c).poll_timeout(), None);
    net.exchange();
    assert_eq!(net.sent_count(c, pb::CMD_UNREG_SUBSCRIBER), 1);
    assert_eq!(net.sent_count(c, pb::CMD_UNREG_PROCESS), 1);
    assert_eq!(
        net.events(a),
        vec![Event::Unmatched { local_id: 1, remote: EntityKey { host_name: "h1".into(), pid: 300, entity_id: 3 } }]
    );
    assert!(!net.reg(a).processes().any(|p| p.pid == 300));
    assert!(matches!(net.events(c)[..], [Event::Matched { local_id: 3, .. }, Event::Unmatched { local_id: 3, .. }]));
    assert!(net.reg(a).counters().unregistrations >= 3);
}

#[test]
fn process_unregistration_also_drops_its_entities() {
    let t0 = Instant::now();
    let mut a = Registrar::new(ident("h1", 100), &cfg(), t0);
    a.add_subscriber(t0, local(1, "x", vec![]));
    let me = ident("h1", 200);
    let reg = codec::topic_sample(&me, Direction::Publisher, &local(2, "x", vec![]), 1);
    let unreg = codec::process_unreg_sample(&me);
    for s in [reg, unreg] {
        for d in codec::encode_registration(&s, 65_483, &mut || 0).unwrap() {
            a.handle_datagram(t0, addr(1), &d);
        }
    }
    let ev: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
    assert_eq!(ev.len(), 2);
    assert!(matches!(ev[1], Event::Unmatched { local_id: 1, .. }));
    assert_eq!(a.topics().count(), 0);
}

#[test]
fn layer_change_produces_updated_and_immediate_reregistration() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(1, "x", vec![shoal_layer(1)]));
    net.reg(b).add_subscriber(t0, local(2, "x", vec![]));
    net.exchange();
    net.events(a);
    net.events(b);
    net.reg(a).update_local(t0, local(1, "x", vec![shoal_layer(2)]));
    net.exchange();
    assert_eq!(net.now, t0);
    let ev = net.events(b);
    assert_eq!(ev.len(), 1);
    let Event::Updated { local_id: 2, remote } = &ev[0] else { panic!("expected Updated, got {ev:?}") };
    assert_eq!(remote.layers, vec![shoal_layer(2)]);
    assert!(net.events(a).is_empty());
    // Statistics alone are no Updated.
    net.reg(a).set_stats(1, TopicStats { message_drops: 3, ..Default::default() });
    net.advance(Duration::from_secs(1));
    assert!(net.events(b).is_empty());
}

#[test]
fn own_process_entities_are_listed_but_never_matched() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(1, "loop", vec![]));
    net.reg(a).add_subscriber(t0, local(2, "loop", vec![]));
    net.advance(Duration::from_secs(2));
    assert_eq!(net.reg(a).topics().count(), 2, "own entities kept for monitoring");
    assert!(net.reg(a).processes().any(|p| p.pid == 100));
    assert!(net.events(a).is_empty());
    // Another process on the same topic is matched by both local entities.
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), net.now));
    let now = net.now;
    net.reg(b).add_subscriber(now, local(3, "loop", vec![]));
    net.exchange();
    assert_eq!(matched_ids(&net.events(a)), vec![(1, 3)]);

    // With loopback off our own samples are not even stored.
    let mut c2 = cfg();
    c2.loopback = false;
    let c = net.add(Registrar::new(ident("h1", 300), &c2, now));
    net.reg(c).add_publisher(now, local(4, "other", vec![]));
    net.exchange();
    assert!(net.reg(c).topics().all(|t| t.key.pid != 300));
    assert!(net.reg(c).counters().own_ignored > 0);
}

#[test]
fn foreign_hosts_need_network_mode_or_the_same_domain() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let local_mode = net.add(Registrar::new(ident("h1", 100), &cfg(), t0));
    let net_mode = net.add(Registrar::new(Identity { network_mode: true, ..ident("h1", 101) }, &cfg(), t0));
    let foreign = net.add(Registrar::new(ident("h2", 300), &cfg(), t0));
    let same_domain =
        net.add(Registrar::new(Identity { shm_transport_domain: "h1".into(), ..ident("h3", 400) }, &cfg(), t0));
    net.reg(local_mode).add_subscriber(t0, local(1, "net", vec![]));
    net.reg(net_mode).add_subscriber(t0, local(2, "net", vec![]));
    net.reg(foreign).add_publisher(t0, local(3, "net", vec![]));
    net.reg(same_domain).add_publisher(t0, local(4, "net", vec![]));
    net.advance(Duration::from_secs(1));

    assert_eq!(net.reg(same_domain).identity().shm_transport_domain, "h1");
    assert_eq!(net.reg(foreign).identity().shm_transport_domain, "h2", "domain defaults to the host");
    assert_eq!(matched_ids(&net.events(local_mode)), vec![(1, 4)], "only the same-domain host");
    assert!(net.reg(local_mode).counters().foreign_rejected > 0);
    assert!(!net.reg(local_mode).processes().any(|p| p.host_name == "h2"));
    let mut m = matched_ids(&net.events(net_mode));
    m.sort();
    assert_eq!(m, vec![(2, 3), (2, 4)]);
    assert!(net.reg(net_mode).processes().any(|p| p.host_name == "h2"));
}

#[test]
fn large_registrations_fragment_and_reassemble() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h1", 100), &cfg(), t0).with_limits(300, ReassemblyConfig::default()));
    let b = net.add(Registrar::new(ident("h1", 200), &cfg(), t0));
    let mut t = local(1, "big", vec![]);
    t.type_info.descriptor = (0..5000u32).map(|i| (i % 251) as u8).collect();
    net.reg(a).add_publisher(t0, t.clone());
    net.reg(b).add_subscriber(t0, local(2, "big", vec![]));
    net.exchange();
    let ev = net.events(b);
    let Some(Event::Matched { remote, .. }) = ev.first() else { panic!("no match: {ev:?}") };
    assert_eq!(remote.type_info, t.type_info);
    assert!(net.reg(b).counters().reassembly.reassembled_messages >= 1);
}

#[test]
fn garbage_is_counted_and_never_panics() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 1), &cfg(), t0);
    r.add_subscriber(t0, local(1, "x", vec![]));
    let mut rng = StdRng::seed_from_u64(42);
    for i in 0..5_000u64 {
        let len = rng.random_range(0..200);
        let mut body: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let now = t0 + Duration::from_millis(i);
        if i % 2 == 0 {
            // Well-framed datagram around a random (mostly invalid) protobuf.
            if i % 4 == 0 {
                body.insert(0, 0x08);
                body.insert(1, rng.random_range(0..20));
            }
            for d in wire::encode_message("reg_sample", &body, 65_483, &mut || 0).unwrap() {
                r.handle_datagram(now, addr(1), &d);
            }
        } else {
            r.handle_datagram(now, addr(1), &body);
        }
    }
    // A truncated name prefix.
    let mut d = DatagramHeader::whole(3).to_bytes().to_vec();
    d.extend_from_slice(&[0x09, 0x00, b'r']);
    r.handle_datagram(t0, addr(1), &d);
    let c = *r.counters();
    assert_eq!(c.datagrams_received, 5_001);
    assert!(c.wire_errors > 0, "{c:?}");
    assert!(c.decode_errors > 0, "{c:?}");
    assert_eq!(c.framing_errors, 1);
    assert!(c.ignored_commands + c.missing_body > 0, "{c:?}");
    r.handle_timeout(t0 + Duration::from_secs(60));
}

/// A publisher registration of entity `id` of process `pid` on host `h1`, as one datagram.
fn remote_pub_datagram(pid: u32, id: u64, name: &str) -> Vec<u8> {
    let me = ident("h1", pid);
    let s = codec::topic_sample(&me, Direction::Publisher, &local(id, name, vec![]), 1);
    codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0)
}

#[test]
fn the_registry_is_bounded_in_all_and_per_process() {
    let t0 = Instant::now();
    let bounds = crate::config::LimitsConfig {
        remote_topics: 50,
        topics_per_process: 20,
        remote_processes: 3,
        ..Default::default()
    };
    let mut r = Registrar::new(ident("h1", 1), &cfg(), t0).with_bounds(&bounds);
    // One process announcing 1000 topics keeps 20; five processes keep 50 in all.
    for id in 0..1000 {
        r.handle_datagram(t0, addr(1), &remote_pub_datagram(10, id, "flood"));
    }
    assert_eq!(r.topics().count(), 20);
    for pid in 11..15 {
        for id in 0..20 {
            r.handle_datagram(t0, addr(1), &remote_pub_datagram(pid, id, "flood"));
        }
    }
    assert_eq!(r.topics().count(), 50);
    assert_eq!(r.counters().registry_full, 980 + 50);
    // Known entities are still refreshed when the registry is full.
    r.handle_datagram(t0 + Duration::from_secs(5), addr(1), &remote_pub_datagram(10, 0, "flood"));
    assert_eq!(r.counters().registry_full, 1030);
    // A full registry makes room for another sending address, at the expense of the one holding the most.
    r.handle_datagram(t0, addr(2), &remote_pub_datagram(50, 7, "legit"));
    assert!(r.topics().any(|t| t.key.pid == 50), "a process of another address is not locked out");
    assert_eq!((r.topics().count(), r.counters().evicted), (50, 1));
    // Processes: three kept.
    for pid in 100..110 {
        let s = codec::process_sample(&ident("h1", pid), 1);
        for d in codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap() {
            r.handle_datagram(t0, addr(1), &d);
        }
    }
    assert_eq!(r.processes().count(), 3);
    // Another address still gets its process in: one of the flooding address's goes.
    let evicted_before = r.counters().evicted;
    let s = codec::process_sample(&ident("h1", 500), 1);
    for d in codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap() {
        r.handle_datagram(t0, addr(2), &d);
    }
    assert_eq!(r.processes().count(), 3);
    assert!(r.processes().any(|p| p.pid == 500), "a process of another address is not locked out");
    assert_eq!(r.counters().evicted, evicted_before + 1);
    // Expiry makes room again.
    r.handle_timeout(t0 + Duration::from_secs(11));
    r.handle_datagram(t0 + Duration::from_secs(11), addr(1), &remote_pub_datagram(99, 1, "after"));
    assert!(r.topics().any(|t| t.key.pid == 99));
}

#[test]
fn local_mode_takes_registration_from_loopback_only_and_oversized_samples_are_refused() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 1), &cfg(), t0);
    let from_lan = SocketAddr::from(([192, 0, 2, 7], 14000));
    r.handle_datagram(t0, from_lan, &remote_pub_datagram(10, 1, "lan"));
    assert_eq!((r.topics().count(), r.counters().non_local_source), (0, 1));
    // In network mode the same datagram is accepted.
    let mut n = Registrar::new(Identity { network_mode: true, ..ident("h1", 2) }, &cfg(), t0);
    n.handle_datagram(t0, from_lan, &remote_pub_datagram(10, 1, "lan"));
    assert_eq!(n.topics().count(), 1);
    // A sample with 17 layers is dropped before decoding, counted.
    let me = ident("h1", 10);
    let s = codec::topic_sample(&me, Direction::Publisher, &local(5, "layers", vec![udp_layer(); 17]), 1);
    let d = codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0);
    r.handle_datagram(t0, addr(1), &d);
    assert_eq!((r.topics().count(), r.counters().over_limits), (0, 1));
}

/// A publisher registration of entity `id` of process `pid` on host `h1` with a `descriptor_len`-byte descriptor.
fn remote_pub_with_descriptor(pid: u32, id: u64, descriptor_len: usize) -> Vec<Vec<u8>> {
    let me = ident("h1", pid);
    let mut topic = local(id, &format!("t{id}"), vec![]);
    topic.type_info.descriptor = vec![id as u8; descriptor_len];
    let s = codec::topic_sample(&me, Direction::Publisher, &topic, 1);
    codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap()
}

#[test]
fn the_registry_is_bounded_in_bytes() {
    let t0 = Instant::now();
    let bounds = crate::config::LimitsConfig { registry_bytes: 4 << 20, ..Default::default() };
    let mut r = Registrar::new(ident("h1", 1), &cfg(), t0).with_bounds(&bounds);
    // 200 topics with distinct 50 KB descriptors (10 MB) from one address: about 80 keep theirs, the next are
    // kept without (they still match) until the budget is spent, the rest refused.
    for id in 0..200 {
        for d in remote_pub_with_descriptor(10, id, 50_000) {
            r.handle_datagram(t0, addr(1), &d);
        }
    }
    let kept = r.topics().count();
    assert!(kept >= 80, "{kept} kept");
    assert_eq!(r.counters().registry_full, 200 - kept as u64);
    let with: usize = r.topics().filter(|t| !t.type_info.descriptor.is_empty()).count();
    let bytes: usize = r.topics().map(|t| t.type_info.descriptor.len()).sum();
    assert!((60..=83).contains(&with), "{with} kept their descriptor");
    assert!(kept > with, "some are kept without their descriptor: {kept} kept, {with} with");
    assert!(bytes <= 4 << 20, "{bytes} descriptor bytes held");
    assert_eq!(r.counters().descriptors_dropped, (kept - with) as u64);
    // Another address's topic keeps its descriptor: the flooding address gives up entities for it.
    let evicted = r.counters().evicted;
    for d in remote_pub_with_descriptor(20, 1000, 50_000) {
        r.handle_datagram(t0, addr(2), &d);
    }
    let legit = r.topics().find(|t| t.key.pid == 20).expect("another address's topic is not locked out");
    assert_eq!(legit.type_info.descriptor.len(), 50_000);
    assert!(r.counters().evicted > evicted);
    // Removal gives the bytes back: after expiry, a new topic keeps its descriptor again.
    r.handle_timeout(t0 + Duration::from_secs(11));
    assert_eq!(r.topics().count(), 0);
    for d in remote_pub_with_descriptor(30, 5, 50_000) {
        r.handle_datagram(t0 + Duration::from_secs(11), addr(1), &d);
    }
    assert_eq!(r.topics().next().map(|t| t.type_info.descriptor.len()), Some(50_000));
}

// ------------------------------------------------------------------------------------------
// [shoal_auth]

fn auth_cfg(key_byte: Option<u8>, protected: &str) -> crate::config::AuthConfig {
    crate::config::AuthConfig {
        key: key_byte.map(|b| crate::config::AuthKey::new(vec![b; 32]).expect("32 bytes")).map(std::sync::Arc::new),
        protected_topics: protected.to_owned(),
        ..Default::default()
    }
}

fn keyed(host: &str, pid: u32, key_byte: Option<u8>, protected: &str, t0: Instant) -> Registrar {
    let stats = std::sync::Arc::new(crate::wire::auth::AuthStats::new(key_byte.is_some()));
    Registrar::new(ident(host, pid), &cfg(), t0).with_auth(&auth_cfg(key_byte, protected), stats).expect("pattern")
}

#[test]
fn peers_with_the_same_key_match_on_protected_topics_and_others_do_not() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(keyed("h1", 100, Some(1), ".*", t0));
    let b = net.add(keyed("h1", 200, Some(1), ".*", t0));
    let wrong = net.add(keyed("h1", 300, Some(2), ".*", t0));
    let none = net.add(Registrar::new(ident("h1", 400), &cfg(), t0));
    net.reg(a).add_publisher(t0, local(10, "secret", vec![shoal_layer(1)]));
    for (i, id) in [(b, 20), (wrong, 30), (none, 40)] {
        net.reg(i).add_subscriber(t0, local(id, "secret", vec![udp_layer()]));
    }
    net.exchange();
    assert_eq!(matched_ids(&net.events(a)), vec![(10, 20)], "only the peer with the key");
    assert_eq!(matched_ids(&net.events(b)), vec![(20, 10)]);
    assert!(matched_ids(&net.events(wrong)).is_empty());
    assert!(matched_ids(&net.events(none)).is_empty());
    // Nothing of A reached the others' registries, and their counters say why.
    assert!(net.reg(wrong).topics().all(|t| t.key.pid == 300));
    assert!(net.reg(none).topics().all(|t| t.key.pid == 400));
    assert!(net.reg(none).processes().all(|p| p.pid == 400));
    let w = net.reg(wrong).auth_stats().summary();
    assert!(w.registration.bad_tag >= 3, "{w:?}");
    let n = net.reg(none).auth_stats().summary();
    assert!(n.registration.no_key >= 3, "{n:?}");
    assert_eq!(n.registration.bad_tag, 0);
    // The peer with the key saw no drop from A or B, only the others' envelopes with the other key.
    let s = net.reg(b).auth_stats().summary();
    assert!(s.verified.0 >= 4, "{s:?}");
    assert!(s.registration.bad_tag >= 2, "{s:?}");
}

#[test]
fn unsigned_registration_cannot_create_change_or_remove_protected_entries() {
    let t0 = Instant::now();
    let mut reg = keyed("h1", 100, Some(1), "secret|cmd/.*", t0);
    reg.add_subscriber(t0, local(10, "secret", vec![udp_layer()]));
    reg.add_subscriber(t0, local(11, "open", vec![udp_layer()]));
    while reg.poll_transmit().is_some() {}
    // A spoofed (unsigned) publisher of a protected topic: refused, counted on its topic, no match.
    reg.handle_datagram(t0, addr(1), &remote_pub_datagram(500, 1, "secret"));
    reg.handle_datagram(t0, addr(1), &remote_pub_datagram(500, 2, "cmd/go"));
    assert!(reg.topics().all(|t| t.key.pid != 500));
    // An unprotected topic works as with eCAL.
    reg.handle_datagram(t0, addr(1), &remote_pub_datagram(500, 3, "open"));
    assert!(reg.topics().any(|t| t.key.pid == 500 && t.topic_name == "open"));
    let events: Vec<Event> = std::iter::from_fn(|| reg.poll_event()).collect();
    assert_eq!(matched_ids(&events), vec![(11, 3)]);
    assert!(matches!(&events[..], [Event::Matched { remote, .. }] if !remote.authenticated), "{events:?}");
    let s = reg.auth_stats().summary();
    assert_eq!(s.registration.unsigned, 2);
    let per_topic: Vec<&str> = s.topics.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(per_topic, vec!["cmd/go", "secret"]);

    // A genuine sealed registration of pid 600, then unsigned samples about the same entity and process.
    let key = crate::config::AuthKey::new(vec![1; 32]).expect("key");
    let mut sealer = crate::wire::auth::Sealer::new(&key, crate::wire::auth::Channel::Registration);
    let now_ns = crate::wire::auth::unix_ns();
    let genuine = remote_pub_datagram(600, 7, "secret");
    reg.handle_datagram(t0, addr(2), &sealer.seal(&genuine, now_ns));
    assert!(reg.topics().any(|t| t.key.pid == 600 && t.key.entity_id == 7));
    let events: Vec<Event> = std::iter::from_fn(|| reg.poll_event()).collect();
    assert_eq!(matched_ids(&events), vec![(10, 7)]);
    // Marked authenticated: eCAL's TCP layer admits only such subscribers of a protected topic.
    assert!(matches!(&events[..], [Event::Matched { remote, .. }] if remote.authenticated), "{events:?}");
    // The same entity renamed to an unprotected topic, unsigned: refused (the entry was authenticated).
    reg.handle_datagram(t0, addr(1), &remote_pub_datagram(600, 7, "open"));
    assert!(reg.topics().any(|t| t.key.pid == 600 && t.topic_name == "secret"));
    // Unsigned unregistrations of the entity and of its process leave it in place.
    let me = ident("h1", 600);
    let unreg = codec::topic_unreg_sample(&me, Direction::Publisher, &local(7, "open", vec![]));
    let d = codec::encode_registration(&unreg, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0);
    reg.handle_datagram(t0, addr(1), &d);
    let unreg = codec::process_unreg_sample(&me);
    let d = codec::encode_registration(&unreg, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0);
    reg.handle_datagram(t0, addr(1), &d);
    assert!(reg.topics().any(|t| t.key.pid == 600 && t.key.entity_id == 7), "still there");
    assert!(std::iter::from_fn(|| reg.poll_event()).next().is_none(), "no unmatch");
    // Replaying the genuine datagram is refused; a new sealed unregistration works.
    reg.handle_datagram(t0, addr(2), &sealer.seal(&genuine, now_ns)[..]);
    let replay = {
        let mut s2 = crate::wire::auth::Sealer::with_sender_id(&key, crate::wire::auth::Channel::Registration, 42);
        s2.seal(&genuine, now_ns)
    };
    reg.handle_datagram(t0, addr(2), &replay);
    reg.handle_datagram(t0, addr(2), &replay);
    assert_eq!(reg.auth_stats().summary().registration.replayed, 1);
    reg.handle_datagram(t0, addr(2), &sealer.seal(&d, now_ns));
    assert!(reg.topics().all(|t| t.key.pid != 600), "sealed process unregistration removes its entities");
}

#[test]
fn keyed_registrar_seals_protected_and_process_samples_only() {
    let t0 = Instant::now();
    let mut reg = keyed("h1", 100, Some(1), "secret", t0);
    reg.add_publisher(t0, local(10, "secret", vec![]));
    reg.add_publisher(t0, local(11, "open", vec![]));
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| reg.poll_transmit()).collect();
    let (sealed, plain): (Vec<_>, Vec<_>) = sent.iter().partition(|d| crate::wire::auth::is_envelope(d));
    // Plain: the open topic's sample, which an eCAL peer decodes as usual.
    assert_eq!(plain.len(), 1);
    let s = decode_datagram(plain[0]).expect("eCAL datagram");
    assert_eq!(s.topic.expect("topic").topic_name, "open");
    // Sealed: the process sample and the protected publisher; the inside is the eCAL datagram.
    let inner: Vec<pb::Sample> = sealed
        .iter()
        .map(|d| decode_datagram(crate::wire::auth::parse_envelope(d).expect("envelope").inner).expect("inner"))
        .collect();
    let mut cmds: Vec<i32> = inner.iter().map(|s| s.cmd_type).collect();
    cmds.sort();
    assert_eq!(cmds, vec![pb::CMD_REG_PUBLISHER, pb::CMD_REG_PROCESS]);
    // eCAL's receiver checks the magic first: ours is not "ECAL".
    assert!(sealed.iter().all(|d| DatagramHeader::parse(d) == Err(wire::WireError::BadMagic)));
}

/// A remote topic carries the address its registration came from (where its TCP layer is reached); a
/// re-registration from another address updates the match, one from the same address changes nothing.
#[test]
fn a_remote_topic_carries_its_registration_source() {
    let d = capture_b();
    let now = Instant::now();
    let mut r = Registrar::new(ident("vm", 1), &cfg(), now);
    r.add_subscriber(now, local(7, "shmtopic", vec![udp_layer()]));
    r.handle_datagram(now, addr(0), &d);
    let ev = std::iter::from_fn(|| r.poll_event()).collect::<Vec<_>>();
    let Some(Event::Matched { remote, .. }) = ev.iter().find(|e| matches!(e, Event::Matched { .. })) else {
        panic!("no match: {ev:?}")
    };
    assert_eq!(remote.source, Some(addr(0).ip()));
    r.handle_datagram(now, addr(0), &d);
    let ev = std::iter::from_fn(|| r.poll_event()).collect::<Vec<_>>();
    assert!(!ev.iter().any(|e| matches!(e, Event::Updated { .. })), "{ev:?}");
    let elsewhere = SocketAddr::from(([127, 0, 0, 5], 40_000));
    r.handle_datagram(now, elsewhere, &d);
    let ev = std::iter::from_fn(|| r.poll_event()).collect::<Vec<_>>();
    let Some(Event::Updated { remote, .. }) = ev.iter().find(|e| matches!(e, Event::Updated { .. })) else {
        panic!("no update: {ev:?}")
    };
    assert_eq!(remote.source, Some(elsewhere.ip()));
}

// ----- services ------------------------------------------------------------------------------------------

fn server(id: u64, name: &str, port: u16, methods: &[&str]) -> LocalService {
    LocalService {
        id,
        role: ServiceRole::Server,
        service_name: name.into(),
        methods: methods
            .iter()
            .map(|m| MethodInfo {
                name: (*m).into(),
                request: TypeInfo::new("Req", "proto", b"rd".to_vec()),
                response: TypeInfo::new("Resp", "proto", b"pd".to_vec()),
                call_count: 0,
            })
            .collect(),
        tcp_port: port,
    }
}

#[test]
fn servers_and_clients_are_announced_learnt_and_withdrawn() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h", 1), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h", 2), &cfg(), t0));
    net.reg(a).add_service(server(7, "math", 40_001, &["add", "mul"]));
    net.reg(b).add_service(LocalService {
        id: 9,
        role: ServiceRole::Client,
        service_name: "math".into(),
        methods: Vec::new(),
        tcp_port: 0,
    });
    net.exchange();

    // The sample as eCAL reads it: cmd 5, the id as a decimal string, version 1, the v1 port, the old type fields too.
    let sent = net.peers[a].sent.iter().find(|s| s.cmd_type == pb::CMD_REG_SERVICE).expect("cmd 5 sent");
    let svc = sent.service.as_ref().expect("service body");
    assert_eq!((svc.service_id.as_str(), svc.version, svc.tcp_port_v1, svc.tcp_port_v0), ("7", 1, 40_001, 0));
    assert_eq!((svc.methods[0].req_type.as_str(), svc.methods[0].resp_desc.as_slice()), ("Req", &b"pd"[..]));

    let seen: Vec<_> = net.reg(b).services().filter(|s| s.key.pid == 1).cloned().collect();
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].role, seen[0].tcp_port, seen[0].methods.len()), (ServiceRole::Server, 40_001, 2));
    assert_eq!(seen[0].methods[1].response.descriptor, b"pd");
    assert!(net.reg(a).services().any(|s| s.role == ServiceRole::Client && s.key.pid == 2));
    let generation = net.reg(b).services_generation();

    // A refresh that changes nothing a caller uses does not move the generation; a new method does.
    net.advance(Duration::from_millis(1100));
    assert_eq!(net.reg(b).services_generation(), generation);
    net.reg(a).add_service(server(7, "math", 40_001, &["add", "mul", "div"]));
    net.exchange();
    assert!(net.reg(b).services_generation() > generation);

    net.reg(a).remove_service(7);
    net.exchange();
    assert!(net.peers[a].sent.iter().any(|s| s.cmd_type == pb::CMD_UNREG_SERVICE));
    assert!(!net.reg(b).services().any(|s| s.key.pid == 1), "withdrawn at once");
}

#[test]
fn remote_services_expire_and_bad_ones_are_counted() {
    let t0 = Instant::now();
    let mut net = Net::new(t0);
    let a = net.add(Registrar::new(ident("h", 1), &cfg(), t0));
    let b = net.add(Registrar::new(ident("h", 2), &cfg(), t0));
    net.reg(a).add_service(server(7, "s", 40_001, &["m"]));
    net.exchange();
    assert_eq!(net.reg(b).services().filter(|s| s.key.pid == 1).count(), 1);
    net.peers[a].alive = false;
    net.advance(cfg().timeout + Duration::from_secs(1));
    assert_eq!(net.reg(b).services().filter(|s| s.key.pid == 1).count(), 0);
    assert!(net.reg(b).counters().expired_services >= 1);

    // A service id eCAL's std::stoull would refuse, and more methods than shoal keeps.
    let mut reg = Registrar::new(ident("h", 2), &cfg(), t0);
    let bad_id = pb::Sample {
        cmd_type: pb::CMD_REG_SERVICE,
        service: Some(pb::Service { service_id: "x".into(), host_name: "h".into(), ..Default::default() }),
        ..Default::default()
    };
    let many = pb::Sample {
        cmd_type: pb::CMD_REG_CLIENT,
        client: Some(pb::Client {
            service_id: "5".into(),
            host_name: "h".into(),
            methods: vec![pb::Method::default(); limits::MAX_METHODS + 1],
            ..Default::default()
        }),
        ..Default::default()
    };
    for s in [bad_id, many] {
        for d in codec::encode_registration(&s, 60_000, &mut || 1).unwrap() {
            reg.handle_datagram(t0, addr(9), &d);
        }
    }
    assert_eq!(reg.services().count(), 0);
    assert_eq!((reg.counters().rejected_ids, reg.counters().over_limits), (1, 1));
}

// ------------------------------------------------------------------------------------------
// repeats recognised before decoding

/// A publisher registration of entity `id` of process `pid` on host `h1` with registration clock `clock`.
fn pub_datagram(pid: u32, id: u64, name: &str, clock: i32, layers: Vec<Layer>) -> Vec<u8> {
    let s = codec::topic_sample(&ident("h1", pid), Direction::Publisher, &local(id, name, layers), clock);
    codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0)
}

fn remote_key(pid: u32, id: u64) -> EntityKey {
    EntityKey { host_name: "h1".into(), pid, entity_id: id }
}

#[test]
fn a_repeat_only_refreshes_its_entry_and_a_change_is_decoded_and_applied() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0);
    r.add_subscriber(t0, local(1, "x", vec![]));
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 5, "x", 1, vec![udp_layer()]));
    let ev: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert_eq!(matched_ids(&ev), vec![(1, 5)]);
    assert_eq!((r.counters().samples_applied, r.counters().repeats), (1, 0));
    // The same sample a refresh later, but for its clock: only the expiry and the clock move, nothing else happens.
    let t1 = t0 + Duration::from_secs(5);
    r.handle_datagram(t1, addr(2), &pub_datagram(200, 5, "x", 2, vec![udp_layer()]));
    assert_eq!((r.counters().samples_applied, r.counters().repeats), (2, 1));
    assert!(r.poll_event().is_none());
    let (t, seen) = r.topics_seen().find(|(t, _)| t.key == remote_key(200, 5)).unwrap();
    assert_eq!((t.registration_clock, seen), (2, t1));
    // The refreshed expiry holds: not gone at the first sample's timeout, gone at the repeat's.
    r.handle_timeout(t0 + Duration::from_secs(11));
    assert!(r.topics().any(|t| t.key == remote_key(200, 5)));
    // A changed sample is decoded and applied: the new layers reach the match as an update.
    let t2 = t1 + Duration::from_secs(1);
    r.handle_datagram(t2, addr(2), &pub_datagram(200, 5, "x", 3, vec![udp_layer(), shoal_layer(1)]));
    assert_eq!((r.counters().samples_applied, r.counters().repeats), (3, 1));
    let ev: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    assert!(matches!(&ev[..], [Event::Updated { local_id: 1, remote }] if remote.layers.len() == 2), "{ev:?}");
    // The changed sample is the one repeats are now recognised against; the old one is not a repeat any more.
    r.handle_datagram(t2, addr(2), &pub_datagram(200, 5, "x", 4, vec![udp_layer(), shoal_layer(1)]));
    assert_eq!(r.counters().repeats, 2);
    r.handle_datagram(t2, addr(2), &pub_datagram(200, 5, "x", 5, vec![udp_layer()]));
    assert_eq!(r.counters().repeats, 2);
    assert_eq!(r.topics().find(|t| t.key == remote_key(200, 5)).unwrap().layers.len(), 1);
    // Expiry still ends it at its timeout.
    r.handle_timeout(t2 + Duration::from_secs(10));
    assert!(r.topics().all(|t| t.key != remote_key(200, 5)));
    assert_eq!(r.counters().expired_topics, 1);
    assert_eq!(r.repeat_index_len(), 0);
}

#[test]
fn the_same_bytes_from_another_sender_are_not_taken_for_a_repeat() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0);
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 5, "x", 1, vec![]));
    // Another sending address with the very same sample: decoded, and the entry now comes from there.
    r.handle_datagram(t0, addr(3), &pub_datagram(200, 5, "x", 2, vec![]));
    assert_eq!((r.counters().samples_applied, r.counters().repeats), (2, 0));
    assert_eq!(r.topics().next().unwrap().source, Some(addr(3).ip()));
    // From the first address again: not a repeat either (the entry was last made from the other one).
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 5, "x", 3, vec![]));
    assert_eq!(r.counters().repeats, 0);
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 5, "x", 4, vec![]));
    assert_eq!(r.counters().repeats, 1);
    // Two entities with the same name from one sender are two entries, never each other's repeat.
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 6, "x", 1, vec![]));
    r.handle_datagram(t0, addr(2), &pub_datagram(200, 6, "x", 2, vec![]));
    assert_eq!(r.counters().repeats, 2);
    assert_eq!(r.topics().find(|t| t.key == remote_key(200, 5)).unwrap().registration_clock, 4);
    assert_eq!(r.topics().find(|t| t.key == remote_key(200, 6)).unwrap().registration_clock, 2);
}

#[test]
fn process_samples_repeat_too_and_refresh_their_expiry() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0);
    let process = |clock| {
        let s = codec::process_sample(&ident("h1", 200), clock);
        codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0)
    };
    r.handle_datagram(t0, addr(2), &process(1));
    let t1 = t0 + Duration::from_secs(8);
    r.handle_datagram(t1, addr(2), &process(2));
    assert_eq!(r.counters().repeats, 1);
    let p = r.processes().find(|p| p.pid == 200).unwrap();
    assert_eq!((p.registration_clock, p.last_seen), (2, t1));
    r.handle_timeout(t0 + Duration::from_secs(12));
    assert!(r.processes().any(|p| p.pid == 200), "refreshed by the repeat");
    r.handle_timeout(t1 + Duration::from_secs(10));
    assert!(!r.processes().any(|p| p.pid == 200));
    assert_eq!(r.repeat_index_len(), 0);
}

#[test]
fn the_repeat_index_is_bounded_by_the_registry() {
    let t0 = Instant::now();
    let bounds = crate::config::LimitsConfig { remote_topics: 4, ..crate::config::LimitsConfig::default() };
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0).with_bounds(&bounds);
    for round in 0..3 {
        for pid in 0..20u32 {
            // Every sender its own address (else the registry would refuse the flood from one).
            r.handle_datagram(t0, addr(pid as usize), &pub_datagram(1000 + pid, 1, "x", round, vec![]));
        }
    }
    assert_eq!(r.topics().count(), 4);
    assert!(r.repeat_index_len() <= 4, "{} repeat keys for 4 topics", r.repeat_index_len());
    // Unregistered entities leave the index with their entries.
    for t in r.topics().map(|t| t.key.clone()).collect::<Vec<_>>() {
        let me = ident("h1", t.pid);
        let s = codec::topic_unreg_sample(&me, Direction::Publisher, &local(t.entity_id, "x", vec![]));
        let d = codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0);
        r.handle_datagram(t0, addr((t.pid - 1000) as usize), &d);
    }
    assert_eq!((r.topics().count(), r.repeat_index_len()), (0, 0));
}

#[test]
fn a_repeat_still_refreshes_its_entry_after_a_removal_moved_it() {
    // The repeat index remembers where each entry sits; removing another entry moves one (the registry's last) into
    // the freed place, and that one's repeats must still be recognised and refresh it, not another entry.
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0);
    for id in 1..=3 {
        r.handle_datagram(t0, addr(2), &pub_datagram(200, id, "x", 1, vec![]));
    }
    let unreg = |id| {
        let s = codec::topic_unreg_sample(&ident("h1", 200), Direction::Publisher, &local(id, "x", vec![]));
        codec::encode_registration(&s, wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || 0).unwrap().remove(0)
    };
    r.handle_datagram(t0, addr(2), &unreg(1));
    let t1 = t0 + Duration::from_secs(5);
    for (id, clock) in [(3, 2), (2, 2), (3, 3)] {
        r.handle_datagram(t1, addr(2), &pub_datagram(200, id, "x", clock, vec![]));
    }
    assert_eq!((r.counters().samples_applied, r.counters().repeats), (7, 3));
    let seen: Vec<(u64, i32, Instant)> =
        r.topics_seen().map(|(t, seen)| (t.key.entity_id, t.registration_clock, seen)).collect();
    assert_eq!(seen, [(2, 2, t1), (3, 3, t1)]);
    assert!(r.poll_event().is_none());
    // Both keep living on their repeats.
    r.handle_timeout(t0 + Duration::from_secs(12));
    assert_eq!(r.topics().count(), 2);
    assert_eq!(r.repeat_index_len(), 2);
}

#[test]
fn refresh_due_only_at_the_refresh_not_at_an_expiry_tick() {
    let t0 = Instant::now();
    let mut r = Registrar::new(ident("h1", 100), &cfg(), t0);
    assert!(!r.refresh_due(t0));
    // A remote entry seen half a period in expires half a period after a refresh: that timer tick is no refresh.
    r.handle_datagram(t0 + Duration::from_millis(500), addr(2), &pub_datagram(200, 5, "x", 1, vec![]));
    let mut ticks = Vec::new();
    let mut now = t0;
    while now < t0 + Duration::from_millis(11_000) {
        now = r.poll_timeout().unwrap();
        ticks.push((now.duration_since(t0).as_millis(), r.refresh_due(now)));
        r.handle_timeout(now);
        assert!(!r.refresh_due(now), "the refresh made");
    }
    assert!(ticks.contains(&(10_500, false)), "{ticks:?}");
    assert_eq!(ticks.iter().filter(|(_, refresh)| *refresh).count(), 11, "{ticks:?}");
    assert!(ticks.iter().all(|&(ms, refresh)| refresh == (ms % 1000 == 0)), "{ticks:?}");
    r.shutdown(now);
    assert!(!r.refresh_due(now + Duration::from_secs(5)));
}
