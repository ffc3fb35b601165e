use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use super::net::{fnv1_32, topic_group};
use super::*;
use crate::wire::data_sample::{self as codec, DataSampleRef, content_hash, decode_data_sample, encode_data_sample};
use crate::wire::{HEADER_LEN, MAX_DATAGRAM_LEN, Reassembler, ReassemblyConfig, begin_framed, send_framed, split_name};

/// Capture C of the protocol notes: an eCAL 6.1.1 publisher's data datagram on topic `hello` (104 bytes).
const CAPTURE_C: [u8; 104] = [
    0x45, 0x43, 0x41, 0x4c, 0x05, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, //
    0x01, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00, 0x06, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x00, //
    0x08, 0x01, 0x2a, 0x20, 0x3a, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x32, 0x11, 0x31, 0x37, 0x35, //
    0x39, 0x33, 0x37, 0x32, 0x34, 0x34, 0x33, 0x34, 0x34, 0x34, 0x38, 0x33, 0x38, 0x34, 0x18, 0x00, //
    0x12, 0x02, 0x76, 0x6d, 0x32, 0x20, 0x08, 0x00, 0x10, 0x15, 0x18, 0xf7, 0xf7, 0xfc, 0xcb, 0xda, //
    0xae, 0x98, 0x03, 0x30, 0x00, 0x22, 0x06, 0x6d, 0x73, 0x67, 0x20, 0x32, 0x30, 0x38, 0xaa, 0x80, //
    0xc4, 0xf9, 0xe2, 0xac, 0xa0, 0x1f, 0x42, 0x00,
];

const CAPTURE_C_ID: u64 = 17_593_724_434_448_384;
const CAPTURE_C_TIME: i64 = 1_796_007_843_019_767;

/// Frames `payload` as a publisher writer does: 24 free header bytes, name prefix, data sample.
fn framed(topic: &str, id: u64, host: &str, clock: u64, time_us: i64, payload: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    begin_framed(&mut buf, topic).expect("a framable topic name");
    let id_str = id.to_string();
    encode_data_sample(
        &mut buf,
        &DataSampleRef {
            topic_name: topic,
            topic_id: &id_str,
            publisher_id: id,
            host_name: host,
            clock,
            time_us,
            payload,
        },
    );
    buf
}

/// The datagrams `send_framed` produces for `buf`, as the UDP writer sends them.
fn datagrams(buf: &mut [u8], id: i32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    send_framed(buf, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || id, |parts| {
        out.push(parts.iter().flat_map(|p| p.iter().copied()).collect());
        Ok::<(), std::io::Error>(())
    })
    .expect("send_framed");
    out
}

#[test]
fn encoder_reproduces_capture_c_byte_for_byte() {
    let mut buf = framed("hello", CAPTURE_C_ID, "vm", 21, CAPTURE_C_TIME, b"msg 20");
    let d = datagrams(&mut buf, 7);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0], CAPTURE_C.to_vec());
}

#[test]
fn decoder_reads_capture_c() {
    let (_, msg) = crate::wire::DatagramHeader::parse(&CAPTURE_C).expect("header");
    let (name, proto) = split_name(msg).expect("name");
    assert_eq!(name, "hello");
    let s = decode_data_sample(proto).expect("decode");
    assert_eq!(s.topic_name, "hello");
    assert_eq!(s.publisher_id, CAPTURE_C_ID);
    assert_eq!(s.host_name, "vm");
    assert_eq!(s.clock, 21);
    assert_eq!(s.time_us, CAPTURE_C_TIME);
    assert_eq!(&s.payload[..], b"msg 20");
    assert_eq!(content_hash(CAPTURE_C_ID, 21), 17_593_724_434_448_426);
}

#[test]
fn round_trip_with_edge_values() {
    for (clock, time, payload) in
        [(1u64, 0i64, Vec::new()), (u64::MAX >> 1, -5, vec![0u8; 300]), (300, i64::MAX, (0..=255).collect())]
    {
        let buf = framed("t/äöü", u64::MAX, "host-x", clock, time, &payload);
        let (name, proto) = split_name(&buf[HEADER_LEN..]).expect("name");
        assert_eq!(name, "t/äöü");
        let s = decode_data_sample(proto).expect("decode");
        assert_eq!((s.publisher_id, s.clock, s.time_us), (u64::MAX, clock, time));
        assert_eq!(s.payload, payload);
        assert_eq!(s.host_name, "host-x");
        // prost agrees on every field, including the ones the decoder does not return.
        let pb = <crate::wire::pb::Sample as prost::Message>::decode(proto).expect("prost");
        let content = pb.content.expect("content");
        assert_eq!(content.hash as u64, content_hash(u64::MAX, clock));
        assert_eq!((content.id, content.size), (0, 0));
        assert_eq!(pb.topic.expect("topic").process_id, 0);
    }
}

#[test]
fn decoder_rejects_bad_samples() {
    assert!(matches!(decode_data_sample(&[0x08]), Err(codec::DataDecodeError::Protobuf(_))));
    // Registration sample (cmd 2).
    assert!(matches!(decode_data_sample(&[0x08, 0x02]), Err(codec::DataDecodeError::NotData(2))));
    assert!(matches!(decode_data_sample(&[0x08, 0x01]), Err(codec::DataDecodeError::MissingTopic)));
    // Topic with a non-numeric id, and content.
    let bad_id = [0x08, 0x01, 0x2a, 0x04, 0x32, 0x02, b'x', b'1', 0x32, 0x00];
    assert!(matches!(decode_data_sample(&bad_id), Err(codec::DataDecodeError::BadTopicId(_))));
    let no_content = [0x08, 0x01, 0x2a, 0x03, 0x32, 0x01, b'1'];
    assert!(matches!(decode_data_sample(&no_content), Err(codec::DataDecodeError::MissingContent)));
    // Random bytes never panic.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in 0..2000usize {
        let bytes: Vec<u8> = (0..len % 97)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = decode_data_sample(&bytes);
    }
}

#[test]
fn topic_groups_match_ecal() {
    let (g, m) = (Ipv4Addr::new(239, 0, 0, 1), Ipv4Addr::new(255, 255, 255, 240));
    // The protocol notes' netns capture: `nettopic` maps to 239.0.0.7.
    assert_eq!(topic_group("nettopic", g, m), Ipv4Addr::new(239, 0, 0, 7));
    // FNV-1 (not 1a), 32 bit: the empty string is the offset basis.
    assert_eq!(fnv1_32(""), 2_166_136_261);
    assert_eq!(fnv1_32("a"), 2_166_136_261u32.wrapping_mul(16_777_619) ^ 0x61);
    // A topic whose hash lands on the base group moves to the next address inside the mask.
    let t = (0..10_000).map(|i| format!("t{i}")).find(|t| fnv1_32(t) & 0xF == 1).expect("a colliding name");
    assert_eq!(topic_group(&t, g, m), Ipv4Addr::new(239, 0, 0, 2));
    // Everything stays inside 239.0.0.0/28.
    for i in 0..200 {
        let a = topic_group(&format!("topic_{i}"), g, m).octets();
        assert_eq!(&a[..3], &[239, 0, 0]);
        assert!(a[3] < 16 && a[3] != 1);
    }
}

#[test]
fn fragmentation_round_trip_1mb() {
    let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let mut buf = framed("big", 42, "h", 3, 123, &payload);
    let framed_len = buf.len() - HEADER_LEN;
    let d = datagrams(&mut buf, -7);
    let count = framed_len.div_ceil(DEFAULT_MAX_FRAGMENT_PAYLOAD);
    assert_eq!(d.len(), 1 + count);
    assert_eq!(d[0].len(), HEADER_LEN);
    assert!(d[1..d.len() - 1].iter().all(|x| x.len() == MAX_DATAGRAM_LEN));
    let from: SocketAddr = "127.0.0.1:5000".parse().expect("addr");
    let now = Instant::now();
    // Fragments out of order and one duplicated: still exactly one message.
    let mut r = Reassembler::new(ReassemblyConfig::default());
    let mut order: Vec<usize> = (0..d.len()).rev().collect();
    order.insert(3, 5);
    let mut done = Vec::new();
    for i in order {
        if let Ok(Some(m)) = r.push(now, from, &d[i]) {
            done.push(m.into_owned());
        }
    }
    assert_eq!(done.len(), 1);
    assert_eq!(r.counters().duplicate_fragments, 1);
    let (name, proto) = split_name(&done[0]).expect("name");
    assert_eq!(name, "big");
    let s = decode_data_sample(proto).expect("decode");
    assert_eq!((s.publisher_id, s.clock, s.time_us), (42, 3, 123));
    assert!(s.payload == payload);
}

#[test]
fn message_at_the_fragmentation_limit_is_one_datagram() {
    let len = |topic: &str, n: usize| framed(topic, 1, "h", 1, 1, &vec![0; n]).len() - HEADER_LEN;
    // A (topic, payload size) whose framed message is exactly 65,483 bytes (varint lengths make some sizes
    // unreachable for a given topic name).
    let (topic, n) = ["x", "xy", "xyz"]
        .iter()
        .find_map(|t| {
            (DEFAULT_MAX_FRAGMENT_PAYLOAD - 100..DEFAULT_MAX_FRAGMENT_PAYLOAD)
                .find(|&n| len(t, n) == DEFAULT_MAX_FRAGMENT_PAYLOAD)
                .map(|n| (*t, n))
        })
        .expect("an exact size");
    let mut exact = framed(topic, 1, "h", 1, 1, &vec![0; n]);
    assert_eq!(datagrams(&mut exact, 1).len(), 1);
    let mut over = framed(topic, 1, "h", 1, 1, &vec![0; n + 1]);
    let d = datagrams(&mut over, 1);
    assert_eq!(d.len(), 3, "info + 2 fragments");
    assert_eq!(d[1].len(), MAX_DATAGRAM_LEN);
    assert_eq!(d[2].len(), HEADER_LEN + len(topic, n + 1) - DEFAULT_MAX_FRAGMENT_PAYLOAD);
}

/// An inbox that keeps what it gets.
#[derive(Default)]
struct Collect {
    samples: Mutex<Vec<crate::sample::Sample>>,
    drops: AtomicU64,
}

impl Inbox for Collect {
    fn push(&self, sample: crate::sample::Sample) {
        lock(&self.samples).push(sample);
    }
    fn reads_ring_of(&self, _publisher_id: u64) -> bool {
        false
    }
    fn count_drops(&self, n: u64) {
        self.drops.fetch_add(n, Ordering::Relaxed);
    }
}

fn remote_sub(layers: Vec<Layer>) -> RemoteTopic {
    RemoteTopic::for_test(1, 99, layers, crate::registration::Direction::Subscriber)
}

#[test]
fn writer_starts_lazily_and_accepts_udp_subscribers_only() {
    let layer = UdpLayer::new(&Config::default(), "h", Default::default()).expect("no pattern to compile");
    let mut w = layer.writer_factory().create(5, "t", &TypeInfo::default()).expect("writer");
    assert_eq!(w.advert(), None);
    let udp = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    let udp_off = remote_sub(vec![Layer::new(LayerKind::Udp, false, false, LayerPar::None)]);
    let ecal5 =
        remote_sub(vec![Layer { kind: LayerKind::Udp, version: 1, enabled: false, active: true, par: LayerPar::None }]);
    let shm_only = remote_sub(vec![Layer::new(LayerKind::Shm, true, false, LayerPar::None)]);
    assert!(w.accepts(&udp, true) && w.accepts(&ecal5, false));
    assert!(!w.accepts(&udp_off, true) && !w.accepts(&shm_only, true));
    w.set_targets(&[]);
    assert_eq!(w.advert(), None);
    w.set_targets(&[&udp]);
    assert_eq!(w.advert(), Some(Layer::new(LayerKind::Udp, true, true, LayerPar::None)));
    w.set_targets(&[]);
    assert_eq!(w.advert(), Some(Layer::new(LayerKind::Udp, true, false, LayerPar::None)));
    // Switched off in the configuration: no writer, no subscriber advert, no receive socket.
    let mut cfg = Config::default();
    cfg.layers.pub_udp = false;
    cfg.layers.sub_udp = false;
    let off = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    assert!(off.writer_factory().create(5, "t", &TypeInfo::default()).is_none());
    assert!(off.reader_factory().subscriber_advert().is_none());
    assert!(off.reader_factory().io_source().is_none());
    assert_eq!(
        UdpLayer::new(&Config::default(), "h", Default::default())
            .expect("no pattern to compile")
            .reader_factory()
            .subscriber_advert(),
        Some(Layer::new(LayerKind::Udp, true, false, LayerPar::ShoalUdp { packed_version: 1 }))
    );
    let mut no_pack = Config::default();
    no_pack.network.send_pack = false;
    assert_eq!(
        UdpLayer::new(&no_pack, "h", Default::default())
            .expect("no pattern to compile")
            .reader_factory()
            .subscriber_advert(),
        Some(Layer::new(LayerKind::Udp, true, false, LayerPar::None)),
        "send_pack = false: not announced"
    );
}

/// Loopback on a private port: a writer broadcasts, the receiver (as the I/O thread drives it) delivers to the
/// subscriber's inbox, with type info once connected, and drops replays.
#[test]
fn writer_to_receiver_over_loopback() {
    let mut cfg = Config::default();
    // A port derived from the pid, away from eCAL's 14000-14002.
    cfg.network.data_port = 20_000 + (std::process::id() % 20_000) as u16;
    // Every write sent from this thread, as nothing drives an I/O thread's queue here.
    cfg.network.send_mode = crate::config::UdpSendMode::UserThread;
    let layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, "loop_t", &inbox);
    let mut src = rf.io_source().expect("source");
    let mut poll = mio::Poll::new().expect("poll");
    let mut events = mio::Events::with_capacity(8);
    src.maintain(poll.registry(), mio::Token(9), Instant::now());

    let mut w = layer.writer_factory().create(77, "loop_t", &TypeInfo::default()).expect("writer");
    let udp = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    w.set_targets(&[&udp]);
    // Datagrams of a local publisher are same-process duplicates: use a second layer as the "remote" process.
    let other = UdpLayer::new(&cfg, "h2", Default::default()).expect("no pattern to compile");
    let mut w2 = other.writer_factory().create(78, "loop_t", &TypeInfo::default()).expect("writer");
    w2.set_targets(&[&udp]);
    let mut pub_reg = remote_sub(vec![Layer::new(LayerKind::Udp, true, true, LayerPar::None)]);
    pub_reg.key.entity_id = 78;
    pub_reg.type_info = TypeInfo::raw("demo.T");
    let conn = rf.connect("loop_t", Arc::clone(&inbox), &pub_reg, true).expect("connected");
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    w.write(b"own", &SampleMeta { publisher_id: 77, clock: 1, send_time_us: 1 }).expect("write");
    for (clock, payload) in [(1u64, &b"a"[..]), (2, &big[..]), (2, b"replay"), (5, b"e"), (4, b"late")] {
        w2.write(payload, &SampleMeta { publisher_id: 78, clock, send_time_us: 10 }).expect("write");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let late_seen = || layer.shared.counters.out_of_order.load(Ordering::Relaxed) == 1;
    while (lock(&collect.samples).len() < 3 || !late_seen()) && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_millis(50))).expect("poll");
        src.on_readable(Instant::now(), 1024);
        src.maintain(poll.registry(), mio::Token(9), Instant::now());
    }
    let got = lock(&collect.samples);
    let summary: Vec<(u64, u64, usize)> = got.iter().map(|s| (s.publisher_id, s.clock, s.payload().len())).collect();
    assert_eq!(summary, vec![(78, 1, 1), (78, 2, 200_000), (78, 5, 1)]);
    assert!(got[1].payload() == &big[..]);
    assert_eq!(got[0].type_info().name, "demo.T");
    assert_eq!(&*got[0].topic, "loop_t");
    // The replayed clock 2 is a duplicate, 3 and 4 were missing when 5 came: counted then; 4 arriving late is
    // discarded without being counted a second time.
    assert_eq!(collect.drops.load(Ordering::Relaxed), 1 + 2);
    assert_eq!(layer.shared.counters.out_of_order.load(Ordering::Relaxed), 1);
    let c = &layer.shared.counters;
    assert_eq!(c.duplicates.load(Ordering::Relaxed), 1);
    assert_eq!(c.lost.load(Ordering::Relaxed), 2);
    assert!(c.skipped_other_path.load(Ordering::Relaxed) >= 1, "own publisher's datagram skipped");
    assert_eq!(other.shared.counters.sent.load(Ordering::Relaxed), 5);
    drop(got);
    drop(conn);
    rf.subscriber_dropped(1, "loop_t");
    assert!(lock(&layer.shared.subs).topics.is_empty());
}

#[test]
fn multicast_interface_is_the_configured_one_or_a_real_address() {
    let mut net = Config::default().network;
    net.multicast_interface = Ipv4Addr::new(10, 1, 2, 3);
    assert_eq!(super::net::multicast_interface(&net), Ipv4Addr::new(10, 1, 2, 3));
    net.multicast_interface = Ipv4Addr::UNSPECIFIED;
    // The route's source address (or 127.0.0.1 without a route): never 0.0.0.0, so IP_MULTICAST_IF is explicit.
    assert!(!super::net::multicast_interface(&net).is_unspecified());
    // Local mode sends every topic to the broadcast address, network mode to the topic's group.
    assert_eq!(super::net::destination(&net, "nettopic"), "127.255.255.255:14002".parse().expect("addr"));
    net.enabled = true;
    assert_eq!(super::net::destination(&net, "nettopic"), "239.0.0.7:14002".parse().expect("addr"));
}

/// `send_mode = io_thread`: writers queue, the sender (as the I/O thread drives it) sends in `sendmmsg` batches,
/// equal-size small messages as GSO runs, a fragmented message datagram by datagram; everything arrives in order.
#[test]
fn io_thread_mode_sends_batches_that_arrive_complete() {
    let mut cfg = Config::default();
    cfg.network.data_port = 20_000 + ((std::process::id() + 7919) % 20_000) as u16;
    let rx_layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = rx_layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, "batch_t", &inbox);
    let mut rx = rf.io_source().expect("source");
    let mut poll = mio::Poll::new().expect("poll");
    let mut events = mio::Events::with_capacity(8);
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());

    let mut tx_cfg = cfg.clone();
    tx_cfg.network.send_mode = crate::config::UdpSendMode::IoThread;
    let tx_layer = UdpLayer::new(&tx_cfg, "h2", Default::default()).expect("no pattern to compile");
    let mut tx = tx_layer.reader_factory().io_source().expect("the sender is an I/O source");
    let mut w = tx_layer.writer_factory().create(78, "batch_t", &TypeInfo::default()).expect("writer");
    let udp = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    w.set_targets(&[&udp]);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    // Clocks 1..=200 small (same size), 201 the big one, 202 small again.
    for clock in 1..=202u64 {
        let payload: Vec<u8> = if clock == 201 { big.clone() } else { (clock as u32).to_le_bytes().repeat(16) };
        w.write(&payload, &SampleMeta { publisher_id: 78, clock, send_time_us: 10 }).expect("queued");
    }
    // Nothing left the process yet: the I/O thread sends.
    assert_eq!(tx_layer.shared.counters.sent.load(Ordering::Relaxed), 0);
    assert_eq!(tx.flush(Instant::now()), None, "all sent, nothing to retry");
    let c = &tx_layer.shared.counters;
    assert_eq!(c.sent.load(Ordering::Relaxed), 202);
    let calls = c.send_calls.load(Ordering::Relaxed);
    assert!(calls <= 8, "202 messages (210 datagrams) in a few sendmmsg calls, not {calls}");
    assert!(c.gso_runs.load(Ordering::Relaxed) >= 1, "equal-size datagrams to one address go as GSO runs");

    let deadline = Instant::now() + Duration::from_secs(5);
    while lock(&collect.samples).len() < 202 && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_millis(20))).expect("poll");
        rx.on_readable(Instant::now(), 1024);
    }
    let got = lock(&collect.samples);
    assert_eq!(got.len(), 202, "every message arrived");
    for (i, s) in got.iter().enumerate() {
        let clock = i as u64 + 1;
        assert_eq!(s.clock, clock);
        if clock == 201 {
            assert!(s.payload() == &big[..], "the fragmented message is intact");
        } else {
            assert_eq!(s.payload(), &(clock as u32).to_le_bytes().repeat(16)[..]);
        }
    }
    assert_eq!(collect.drops.load(Ordering::Relaxed), 0);
    assert_eq!(rx_layer.shared.counters.kernel_drops.load(Ordering::Relaxed), 0);
}

/// `send_mode = auto` (the default): a lone message and a large one leave from the publisher's thread at once; a
/// stream of small ones is queued for the I/O thread's (packed) batches; while a publisher has messages queued its
/// next ones are queued too, whatever their size or timing, so everything arrives in order and once.
#[test]
fn auto_mode_batches_streams_and_sends_lone_and_large_messages_at_once() {
    let mut cfg = Config::default();
    assert_eq!(cfg.network.send_mode, crate::config::UdpSendMode::Auto, "auto is the default");
    cfg.network.data_port = 20_000 + ((std::process::id() + 7333) % 20_000) as u16;
    let rx_layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = rx_layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, "auto_t", &inbox);
    let mut rx = rf.io_source().expect("source");
    let mut poll = mio::Poll::new().expect("poll");
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());

    let tx_layer = UdpLayer::new(&cfg, "h2", Default::default()).expect("no pattern to compile");
    let mut tx = tx_layer.reader_factory().io_source().expect("the sender is an I/O source");
    let mut w = tx_layer.writer_factory().create(78, "auto_t", &TypeInfo::default()).expect("writer");
    w.set_targets(&[&remote_sub(vec![rf.subscriber_advert().expect("advert")])]);
    let big = cfg.network.send_batch_max + 1;
    let payload = |clock: u64| -> Vec<u8> {
        if clock == 101 || clock == 102 { vec![clock as u8; big] } else { (clock as u32).to_le_bytes().repeat(16) }
    };
    let sent = || tx_layer.counts().sent;
    let mut write = |clock: u64, t: i64| {
        w.write(&payload(clock), &SampleMeta { publisher_id: 78, clock, send_time_us: t }).expect("sent or queued")
    };
    write(1, 1_000);
    assert_eq!(sent(), 1, "a lone message leaves at once");
    for clock in 2..=100 {
        write(clock, 1_000 + clock as i64);
    }
    assert_eq!(sent(), 1, "a stream is queued for the I/O thread");
    write(101, 1_200);
    assert_eq!(sent(), 1, "a large message behind queued ones is queued too");
    assert_eq!(tx.flush(Instant::now()), None, "all sent");
    assert_eq!(sent(), 101);
    assert!(tx_layer.counts().packed_sent_messages >= 99, "the stream went packed");
    write(102, 5_000);
    assert_eq!(sent(), 102, "a large message leaves at once when nothing is queued");
    write(103, 5_010);
    assert_eq!(sent(), 102, "a small one right behind it is batched");
    write(104, 90_000);
    assert_eq!(sent(), 102, "a lone one behind a queued one waits its turn");
    assert_eq!(tx.flush(Instant::now()), None, "all sent");
    assert_eq!(sent(), 104);

    receive(&mut rx, &mut poll, &collect, 104);
    let got = lock(&collect.samples);
    let clocks: Vec<u64> = got.iter().map(|s| s.clock).collect();
    assert_eq!(clocks, (1..=104).collect::<Vec<_>>(), "all arrived, in order, once");
    for s in got.iter() {
        assert_eq!(s.payload(), &payload(s.clock)[..]);
    }
    assert_eq!(collect.drops.load(Ordering::Relaxed), 0);
}

/// A send that finds the queue to the I/O thread full (and, here, nobody emptying it within `send_queue_wait_us`)
/// drops its message, says so, and counts it.
#[test]
fn a_full_send_queue_drops_and_counts() {
    let mut cfg = Config::default();
    cfg.network.send_mode = crate::config::UdpSendMode::IoThread;
    cfg.network.send_queue = 16;
    cfg.network.send_queue_wait = Duration::from_millis(2);
    cfg.network.data_port = 20_000 + ((std::process::id() + 3571) % 20_000) as u16;
    let layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    let mut src = layer.reader_factory().io_source().expect("sender");
    let mut w = layer.writer_factory().create(5, "full_t", &TypeInfo::default()).expect("writer");
    w.set_targets(&[&remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)])]);
    let results: Vec<bool> = (1..=20u64)
        .map(|clock| w.write(b"x", &SampleMeta { publisher_id: 5, clock, send_time_us: 1 }).is_ok())
        .collect();
    assert_eq!(results.iter().filter(|ok| **ok).count(), 16);
    assert!(results[16..].iter().all(|ok| !ok), "the 17th to 20th find the queue full");
    assert_eq!(layer.shared.counters.queue_full.load(Ordering::Relaxed), 4);
    assert_eq!(layer.shared.counters.send_drops.load(Ordering::Relaxed), 4);
    src.flush(Instant::now());
    assert_eq!(layer.shared.counters.sent.load(Ordering::Relaxed), 16);
    assert!(w.write(b"x", &SampleMeta { publisher_id: 5, clock: 21, send_time_us: 1 }).is_ok(), "room again");
    assert_eq!(w.take_late_drops(), 0, "nothing lost after it was queued");
}

/// Drives `rx` until `n` samples arrived in `collect` (or 5 s passed).
fn receive(rx: &mut Box<dyn IoSource>, poll: &mut mio::Poll, collect: &Collect, n: usize) {
    let mut events = mio::Events::with_capacity(8);
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock(&collect.samples).len() < n && Instant::now() < deadline {
        poll.poll(&mut events, Some(Duration::from_millis(20))).expect("poll");
        rx.on_readable(Instant::now(), 1024);
    }
}

/// `send_pack`: while every target announced packed datagrams, the I/O thread packs a publisher's queued small
/// messages; a message too large to pack goes in eCAL's format between them, in order; a target without the
/// announcement (eCAL) switches the next write to eCAL's format, with nothing lost or repeated at the switch.
#[test]
fn io_thread_packs_while_every_target_reads_packed() {
    let mut cfg = Config::default();
    cfg.network.data_port = 20_000 + ((std::process::id() + 6007) % 20_000) as u16;
    let rx_layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = rx_layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, "pack_t", &inbox);
    let mut rx = rf.io_source().expect("source");
    let mut poll = mio::Poll::new().expect("poll");
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());

    let mut tx_cfg = cfg.clone();
    tx_cfg.network.send_mode = crate::config::UdpSendMode::IoThread;
    tx_cfg.network.send_pack_bytes = 4096;
    let tx_layer = UdpLayer::new(&tx_cfg, "h2", Default::default()).expect("no pattern to compile");
    let mut tx = tx_layer.reader_factory().io_source().expect("the sender is an I/O source");
    let mut w = tx_layer.writer_factory().create(78, "pack_t", &TypeInfo::default()).expect("writer");
    let shoal_sub = remote_sub(vec![rf.subscriber_advert().expect("advert")]);
    assert!(reads_packed(&shoal_sub));
    let ecal_sub = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    w.set_targets(&[&shoal_sub]);
    let payload = |clock: u64| -> Vec<u8> {
        if clock == 150 { vec![7u8; 5000] } else { (clock as u32).to_le_bytes().repeat(16) }
    };
    // 1..=299 while only shoal reads (150 too large for 4096 bytes), then an eCAL subscriber joins: 300..=320.
    for clock in 1..=320u64 {
        if clock == 300 {
            w.set_targets(&[&shoal_sub, &ecal_sub]);
        }
        w.write(&payload(clock), &SampleMeta { publisher_id: 78, clock, send_time_us: clock as i64 }).expect("queued");
    }
    assert_eq!(tx.flush(Instant::now()), None, "all sent, nothing to retry");
    let c = tx_layer.counts();
    assert_eq!(c.sent, 320);
    assert_eq!(c.packed_sent_messages, 298, "1..=299 but the large 150");
    // 64-byte payloads: 84-byte records, 47 of them in 4096 bytes (with 24 bytes of header and name).
    assert!(c.packed_sent <= 8, "298 small messages in a few packed datagrams, not {}", c.packed_sent);

    receive(&mut rx, &mut poll, &collect, 320);
    let got = lock(&collect.samples);
    let clocks: Vec<u64> = got.iter().map(|s| s.clock).collect();
    assert_eq!(clocks, (1..=320).collect::<Vec<_>>(), "all arrived, in order, once");
    for s in got.iter() {
        assert_eq!(s.payload(), &payload(s.clock)[..]);
        assert_eq!(s.send_time_ns, s.clock as i64 * 1000);
        assert_eq!(s.publisher_id, 78);
    }
    assert_eq!(collect.drops.load(Ordering::Relaxed), 0);
    let r = rx_layer.counts();
    assert_eq!(r.packed_messages, 298);
    assert_eq!(r.packed_datagrams, c.packed_sent);
    assert_eq!(r.delivered, 320);
    assert_eq!((r.lost, r.duplicates, r.late, r.wire_drops), (0, 0, 0, 0));
}

/// A writer packs only with `send_mode = io_thread` and `send_pack` on, and only while it has targets that all
/// announced it.
#[test]
fn packing_needs_io_thread_send_pack_and_every_target() {
    let shoal_sub = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::ShoalUdp { packed_version: 1 })]);
    let future = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::ShoalUdp { packed_version: 2 })]);
    let ecal_sub = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    assert!(reads_packed(&shoal_sub) && !reads_packed(&future) && !reads_packed(&ecal_sub));
    let packs = |cfg: &Config, targets: &[&RemoteTopic]| {
        let layer = UdpLayer::new(cfg, "h", Default::default()).expect("no pattern to compile");
        let mut w = layer.writer_factory().create(5, "t", &TypeInfo::default()).expect("writer");
        w.set_targets(targets);
        let _ = w.write(b"x", &SampleMeta { publisher_id: 5, clock: 1, send_time_us: 1 });
        let mut src = layer.reader_factory().io_source();
        if let Some(s) = src.as_mut() {
            s.flush(Instant::now());
        }
        layer.counts().packed_sent > 0
    };
    let mut io = Config::default();
    io.network.data_port = 20_000 + ((std::process::id() + 8111) % 20_000) as u16;
    io.network.send_mode = crate::config::UdpSendMode::IoThread;
    assert!(packs(&io, &[&shoal_sub]));
    assert!(!packs(&io, &[&shoal_sub, &ecal_sub]));
    assert!(!packs(&io, &[&future]));
    let mut off = io.clone();
    off.network.send_pack = false;
    assert!(!packs(&off, &[&shoal_sub]));
    let mut user = io.clone();
    user.network.send_mode = crate::config::UdpSendMode::UserThread;
    assert!(!packs(&user, &[&shoal_sub]));
}

/// Local mode: every socket on the data port gets every broadcast, the sending process's own included. Once its
/// send socket is open, the receive socket drops the process's own datagrams in the kernel (they are never
/// queued or copied); the kernel counts them among the socket's drops, and the receiver does not count them as
/// losses of a full receive buffer, while it still counts the real ones.
#[test]
fn own_broadcasts_are_dropped_by_the_kernel_and_not_counted_as_losses() {
    own_broadcasts_filtered(crate::config::UdpSendMode::UserThread, 4451);
    own_broadcasts_filtered(crate::config::UdpSendMode::IoThread, 4452);
}

fn own_broadcasts_filtered(mode: crate::config::UdpSendMode, port_salt: u32) {
    let io_thread = mode == crate::config::UdpSendMode::IoThread;
    let mut cfg = Config::default();
    // The other process's burst is sent from its thread (nothing drives its I/O thread's queue here).
    cfg.network.send_mode = crate::config::UdpSendMode::UserThread;
    cfg.network.data_port = 20_000 + ((std::process::id() + port_salt) % 20_000) as u16;
    // A receive buffer of a few datagrams, so that another process's burst overflows it.
    cfg.network.receive_buffer = 4096;
    let mut own_cfg = cfg.clone();
    own_cfg.network.send_mode = mode;
    let layer = UdpLayer::new(&own_cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, "own_sub_t", &inbox);
    let mut rx = rf.io_source().expect("source");
    let mut poll = mio::Poll::new().expect("poll");
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());
    let udp = remote_sub(vec![Layer::new(LayerKind::Udp, true, false, LayerPar::None)]);
    // This process publishes another topic over UDP: its first write opens the send socket, the next
    // maintenance attaches the filter.
    let mut own = layer.writer_factory().create(5, "own_pub_t", &TypeInfo::default()).expect("writer");
    own.set_targets(&[&udp]);
    let kb = vec![7u8; 1024];
    own.write(&kb, &SampleMeta { publisher_id: 5, clock: 1, send_time_us: 1 }).expect("sent");
    if io_thread {
        assert_eq!(rx.flush(Instant::now()), None, "sent");
    }
    let mut events = mio::Events::with_capacity(8);
    poll.poll(&mut events, Some(Duration::from_millis(200))).expect("poll");
    rx.on_readable(Instant::now(), 1024);
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());
    let c = &layer.shared.counters;
    let before = c.datagrams.load(Ordering::Relaxed);
    assert_eq!(before, 1, "the write before the filter was received");

    let other = UdpLayer::new(&cfg, "h2", Default::default()).expect("no pattern to compile");
    let mut w = other.writer_factory().create(6, "own_sub_t", &TypeInfo::default()).expect("writer");
    w.set_targets(&[&udp]);
    // Another process's 300 datagrams and 400 own ones, none read meanwhile: the buffer overflows with the other
    // process's, and every own one is filtered (counted by the kernel as a drop too).
    let mut own_clock = 1;
    for clock in 1..=300u64 {
        w.write(&kb, &SampleMeta { publisher_id: 6, clock, send_time_us: 1 }).expect("sent");
        for _ in 0..(1 + clock % 2) {
            own_clock += 1;
            own.write(&kb, &SampleMeta { publisher_id: 5, clock: own_clock, send_time_us: 1 }).expect("sent");
        }
    }
    assert_eq!(own_clock, 1 + 450);
    if io_thread {
        assert_eq!(rx.flush(Instant::now()), None, "the queued own messages are sent");
    }
    // Everything the buffer held (it is far fewer than 300).
    while poll.poll(&mut events, Some(Duration::from_millis(100))).is_ok() && !events.is_empty() {
        rx.on_readable(Instant::now(), 1024);
    }
    // One more after the burst: the kernel reports its drop count with the datagrams queued after the drops.
    w.write(&kb, &SampleMeta { publisher_id: 6, clock: 301, send_time_us: 1 }).expect("sent");
    let got_burst = lock(&collect.samples).len();
    receive(&mut rx, &mut poll, &collect, got_burst + 1);
    let got = lock(&collect.samples).len() as u64;
    assert!(got < 150, "the small buffer overflowed ({got} of 301 received)");
    assert_eq!(c.datagrams.load(Ordering::Relaxed) - before, got, "no own datagram was received");
    assert_eq!(
        c.kernel_drops.load(Ordering::Relaxed),
        301 - got,
        "the other process's datagrams the full buffer lost are counted, the 450 own filtered ones are not"
    );
    assert_eq!(c.own_broadcasts.load(Ordering::Relaxed), 451);
}

/// While a fragmented message comes, its next fragment is received straight into its buffer; whatever else arrives
/// between its fragments (another sender's whole datagram, another fragmented message, a fragment out of order) is
/// handled as usual, and every message arrives intact.
/// A UDP layer of `cfg` with one subscriber of `topic`, its receive source registered with a poll, and the address
/// its datagrams go to.
struct Receiving {
    layer: UdpLayer,
    collect: Arc<Collect>,
    rx: Box<dyn IoSource>,
    poll: mio::Poll,
    to: SocketAddr,
}

fn receiving(cfg: &Config, topic: &str) -> Receiving {
    let layer = UdpLayer::new(cfg, "h", Default::default()).expect("no pattern to compile");
    let rf = layer.reader_factory();
    let collect = Arc::new(Collect::default());
    let inbox: Arc<dyn Inbox> = collect.clone();
    rf.subscriber_created(1, topic, &inbox);
    let mut rx = rf.io_source().expect("source");
    let poll = mio::Poll::new().expect("poll");
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());
    let to = SocketAddr::from((Ipv4Addr::LOCALHOST, cfg.network.data_port));
    Receiving { layer, collect, rx, poll, to }
}

#[test]
fn fragments_are_received_in_place_and_other_datagrams_between_them_as_usual() {
    let mut cfg = Config::default();
    cfg.network.data_port = 20_000 + ((std::process::id() + 3301) % 20_000) as u16;
    let Receiving { layer, collect, mut rx, mut poll, to } = receiving(&cfg, "inplace_t");
    let a = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("socket a");
    let b = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("socket b");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mid: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let da = datagrams(&mut framed("inplace_t", 10, "ha", 1, 5, &big), 71);
    let db = datagrams(&mut framed("inplace_t", 20, "hb", 2, 5, &mid), 72);
    let small = datagrams(&mut framed("inplace_t", 20, "hb", 1, 5, b"small"), 73);
    assert_eq!((da.len(), db.len(), small.len()), (1 + 5, 1 + 2, 1));
    let mut events = mio::Events::with_capacity(8);
    let mut step = |sends: &[(&std::net::UdpSocket, &Vec<u8>)]| {
        for (s, d) in sends {
            s.send_to(d, to).expect("send");
        }
        poll.poll(&mut events, Some(Duration::from_millis(200))).expect("poll");
        rx.on_readable(Instant::now(), 1024);
    };
    // a's info and first fragment (received as usual), then its fragments one by one (in place), with b's whole
    // datagram, b's fragmented message and one of a's fragments out of order in between.
    step(&[(&a, &da[0]), (&a, &da[1])]);
    step(&[(&a, &da[2])]);
    step(&[(&b, &small[0]), (&a, &da[3])]);
    step(&[(&b, &db[0]), (&b, &db[1]), (&a, &da[5]), (&a, &da[4])]);
    step(&[(&b, &db[2])]);
    let got = lock(&collect.samples);
    let summary: Vec<(u64, u64, usize)> = got.iter().map(|s| (s.publisher_id, s.clock, s.payload().len())).collect();
    assert_eq!(summary, vec![(20, 1, 5), (10, 1, 300_000), (20, 2, 100_000)]);
    assert!(got[1].payload() == &big[..], "a's message intact");
    assert!(got[2].payload() == &mid[..], "b's message intact");
    let c = &layer.shared.counters;
    let placed = c.in_place_fragments.load(Ordering::Relaxed);
    // a's fragment 1 and 2 at least, and b's last one (b's first arrived after a's, which the in-place receive
    // expected then).
    assert!(placed >= 3, "{placed} fragments received in place");
    assert_eq!(c.datagrams.load(Ordering::Relaxed), 10);
    assert_eq!(c.wire_drops.load(Ordering::Relaxed), 0);
    assert_eq!(collect.drops.load(Ordering::Relaxed), 0);
}

/// A fragment that comes past a gap while the kernel reports drops since the message's last fragment: the missing
/// fragments were dropped (the receiver fell behind), so the message is given up at once (counted, its buffer kept
/// spare) and its remaining fragments are dropped unread; the publisher's next message arrives intact and the one
/// given up is counted lost.
#[test]
fn a_message_whose_fragments_the_kernel_dropped_is_given_up_at_the_gap() {
    let mut cfg = Config::default();
    cfg.network.data_port = 20_000 + ((std::process::id() + 3907) % 20_000) as u16;
    // A receive buffer that holds one large datagram: the next ones sent before it is read are dropped.
    cfg.network.receive_buffer = 4096;
    let Receiving { layer, collect, mut rx, mut poll, to } = receiving(&cfg, "abandon_t");
    let a = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("socket");
    let big = |clock: u64| -> Vec<u8> { (0..300_000u32).map(|i| (i as u64 * 13 + clock) as u8).collect() };
    let message = |clock: u64| datagrams(&mut framed("abandon_t", 10, "ha", clock, 5, &big(clock)), 90 + clock as i32);
    let mut events = mio::Events::with_capacity(8);
    let mut step = |sends: &[&Vec<u8>]| {
        for d in sends {
            a.send_to(d, to).expect("send");
        }
        poll.poll(&mut events, Some(Duration::from_millis(200))).expect("poll");
        rx.on_readable(Instant::now(), 1024);
    };
    let (m1, m2, m3) = (message(1), message(2), message(3));
    assert_eq!(m2.len(), 1 + 5);
    for d in &m1 {
        step(&[d]);
    }
    // Message 2: its info and first fragment, each read; then fragments 1 and 2 at once (2 dropped by the full
    // buffer), 1 read in place; then fragment 3, which carries the drop count; then fragment 4.
    step(&[&m2[0]]);
    step(&[&m2[1]]);
    step(&[&m2[2], &m2[3]]);
    step(&[&m2[4]]);
    step(&[&m2[5]]);
    for d in &m3 {
        step(&[d]);
    }
    let got = lock(&collect.samples);
    let clocks: Vec<u64> = got.iter().map(|s| s.clock).collect();
    assert_eq!(clocks, [1, 3]);
    assert!(got[0].payload() == &big(1)[..] && got[1].payload() == &big(3)[..], "intact");
    drop(got);
    rx.maintain(poll.registry(), mio::Token(9), Instant::now());
    let c = layer.counts();
    assert_eq!(c.kernel_drops, 1, "{c:?}");
    assert_eq!(c.reassembly_abandoned, 1, "{c:?}");
    assert_eq!((c.reassembly_in_flight, c.reassembly_bytes), (0, 0), "nothing held for it: {c:?}");
    assert_eq!(c.lost, 1, "{c:?}");
    assert_eq!(collect.drops.load(Ordering::Relaxed), 1);
    assert_eq!(c.datagrams, 3 * 6 - 1, "every datagram the socket delivered counted once: {c:?}");
}
