//! The TCP layer against raw sockets, its source driven by a test-owned `mio::Poll` as the I/O thread drives it.

use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream as StdStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use super::frame::{self, HEADER_LEN};
use super::session::{KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES};
use super::*;
use crate::config::Config;
use crate::registration::{Direction, Layer, LayerKind, LayerPar, RemoteTopic};
use crate::stats::Via;
use crate::sync::lock;
use crate::transport::{Inbox, IoSource, LayerReaderFactory, LayerWriterFactory, SampleMeta};

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

struct Driver {
    poll: Poll,
    events: Events,
    source: Box<dyn IoSource>,
}

impl Driver {
    fn new(layer: &TcpLayer) -> Driver {
        let mut source = layer.reader_factory().io_source().expect("source");
        source.set_token_space(1 << 32, 1 << 32);
        Driver { poll: Poll::new().expect("poll"), events: Events::with_capacity(64), source }
    }

    /// Runs I/O-thread turns until `done` or `timeout`.
    fn run_until(&mut self, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            self.source.maintain(self.poll.registry(), Token(2), Instant::now());
            if done() {
                return true;
            }
            self.poll.poll(&mut self.events, Some(Duration::from_millis(5))).expect("poll");
            let tokens: Vec<Token> = self.events.iter().map(|e| e.token()).collect();
            for t in tokens {
                self.source.on_token(self.poll.registry(), t, Instant::now());
            }
            self.source.on_readable(Instant::now(), 64);
        }
        done()
    }
}

/// The host name of the process under test (the test entities' `for_test` host is "h": another host).
const HOST: &str = "testhost";

fn layer_of(c: &Config) -> TcpLayer {
    TcpLayer::new(c, HOST)
}

/// A subscriber with TCP enabled whose registration came from `source`.
fn tcp_sub_from(entity_id: u64, source: &str) -> RemoteTopic {
    let mut r = RemoteTopic::for_test(
        1,
        entity_id,
        vec![Layer::new(LayerKind::Tcp, true, false, LayerPar::Tcp { port: 0 })],
        Direction::Subscriber,
    );
    r.source = Some(source.parse().expect("address"));
    r
}

/// A subscriber on this host (registered from loopback).
fn tcp_sub(_port: i32) -> RemoteTopic {
    tcp_sub_from(99, "127.0.0.1")
}

fn cfg(queue: usize, max_message: usize) -> Config {
    let mut c = Config::default();
    c.layers.sub_tcp = true;
    c.tcp.send_queue_bytes = queue;
    c.tcp.max_message_bytes = max_message;
    c
}

fn read_frame(s: &mut StdStream) -> (frame::FrameHeader, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).expect("header");
    let header = frame::parse_header(&h).expect("valid header");
    let mut data = vec![0u8; header.data_size as usize];
    s.read_exact(&mut data).expect("data");
    (header, data)
}

fn meta(clock: u64) -> SampleMeta {
    SampleMeta { publisher_id: 4242, clock, send_time_us: clock as i64 }
}

#[test]
fn publisher_serves_a_tcp_pubsub_client_and_drops_whole_messages_for_a_stalled_one() {
    let layer = layer_of(&cfg(64 * 1024, 1 << 20));
    let mut d = Driver::new(&layer);
    let mut w = layer.writer_factory().create(4242, "t", &crate::types::TypeInfo::default()).expect("writer");
    assert!(w.advert().is_none(), "lazy: no server before a subscriber");
    let sub = tcp_sub(0);
    assert!(w.accepts(&sub, false));
    assert!(!w.accepts(&RemoteTopic::for_test(1, 98, vec![], Direction::Subscriber), false));
    w.set_peers(&[&sub]);
    w.set_targets(&[&sub]);
    let Some(Layer { kind: LayerKind::Tcp, enabled: true, active: true, par: LayerPar::Tcp { port }, .. }) = w.advert()
    else {
        panic!("advert {:?}", w.advert())
    };
    let mut client = StdStream::connect(("127.0.0.1", u16::try_from(port).unwrap())).expect("connect");
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Before the handshake the connection gets nothing.
    assert!(d.run_until(Duration::from_secs(5), || layer.counts().accepted == 1));
    w.write(b"early", &meta(1)).expect("write");
    client.write_all(&frame::handshake()).expect("handshake");
    // The I/O thread reads the handshake and answers it at once.
    d.run_until(Duration::from_millis(200), || false);
    let (h, data) = read_frame(&mut client);
    assert_eq!((h.kind, data.as_slice()), (frame::TYPE_HANDSHAKE, &[0u8][..]));
    for clock in 2..=4 {
        w.write(format!("message {clock}").as_bytes(), &meta(clock)).expect("write");
    }
    for clock in 2..=4 {
        let (h, data) = read_frame(&mut client);
        assert_eq!(h.kind, frame::TYPE_PAYLOAD);
        let m = frame::decode_message(&data).expect("decodes");
        assert_eq!((m.publisher_id, m.clock), (4242, clock));
        assert_eq!(&data[m.payload], format!("message {clock}").as_bytes());
    }
    // The client stops reading: socket buffers fill, then the 64 KiB queue; further messages are dropped whole.
    let big: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 251) as u8).collect();
    let expected = big.clone();
    let mut dropped = 0u64;
    for clock in 5..105 {
        if w.write(&big, &meta(clock)).is_err() {
            dropped += 1;
        }
        d.run_until(Duration::from_millis(1), || false);
    }
    assert!(dropped > 0, "a stalled subscriber loses messages");
    assert_eq!(layer.counts().send_drops, dropped);
    // What was taken arrives complete and in order: no torn frame.
    client.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut clocks = Vec::new();
    let reader = std::thread::spawn(move || {
        let mut clocks = Vec::new();
        loop {
            let mut h = [0u8; HEADER_LEN];
            if client.read_exact(&mut h).is_err() {
                return clocks;
            }
            let header = frame::parse_header(&h).expect("valid header");
            let mut data = vec![0u8; header.data_size as usize];
            client.read_exact(&mut data).expect("a frame once begun is complete");
            let m = frame::decode_message(&data).expect("decodes");
            assert!(data[m.payload] == expected[..], "message {} arrives intact", m.clock);
            clocks.push(m.clock);
        }
    });
    d.run_until(Duration::from_secs(2), || reader.is_finished());
    clocks.extend(reader.join().expect("reader"));
    assert_eq!(clocks.len() as u64 + dropped, 100, "every message delivered or counted: {clocks:?}");
    assert!(clocks.windows(2).all(|w| w[0] < w[1]));
}

/// A fake eCAL publisher: accepts, answers the handshake, and sends `frames`.
fn serve(listener: &StdListener, frames: &[Vec<u8>]) -> StdStream {
    let (mut s, _) = listener.accept().expect("accept");
    let mut h = [0u8; HEADER_LEN + 1];
    s.read_exact(&mut h).expect("client handshake");
    assert_eq!(h, frame::handshake());
    s.write_all(&frame::handshake()).expect("answer");
    for f in frames {
        s.write_all(f).expect("frame");
    }
    s
}

/// The subscriber side against a raw-socket publisher: a listener on `addr` (port 0: the kernel's choice) standing for
/// the remote publisher, a `TcpLayer` taking messages of up to `max_message` bytes with its test driver, an inbox,
/// and the publisher's registration announcing the listener's port.
struct TcpPublisherFixture {
    listener: StdListener,
    layer: TcpLayer,
    d: Driver,
    inbox: Arc<Collect>,
    publisher: RemoteTopic,
}

fn tcp_publisher_fixture(addr: &str, max_message: usize) -> TcpPublisherFixture {
    let listener = StdListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    let port = listener.local_addr().unwrap().port();
    let layer = layer_of(&cfg(1 << 20, max_message));
    let d = Driver::new(&layer);
    let inbox = Arc::new(Collect::default());
    let publisher = RemoteTopic::for_test(
        7,
        99,
        vec![Layer::new(LayerKind::Tcp, true, true, LayerPar::Tcp { port: i32::from(port) })],
        Direction::Publisher,
    );
    TcpPublisherFixture { listener, layer, d, inbox, publisher }
}

fn message(clock: u64, payload: &[u8]) -> Vec<u8> {
    frame::encode_message("t", "99", 99, clock, 5, payload).expect("encode")
}

#[test]
fn subscriber_decodes_counts_oversized_and_missing_messages_and_reconnects_with_backoff() {
    let TcpPublisherFixture { listener, layer, mut d, inbox, publisher } =
        tcp_publisher_fixture("127.0.0.1:0", 64 * 1024);
    let factory = layer.reader_factory();
    assert_eq!(factory.subscriber_advert().map(|l| l.kind), Some(LayerKind::Tcp));
    let reader = factory.connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &publisher, true).expect("reader");
    let frames = vec![
        message(1, b"one"),
        message(2, &vec![1u8; 100_000]), // above max_message (64 KiB): skipped unread, counted
        message(3, &[]),
        message(6, b"six"), // 4 and 5 never came: counted
        message(7, &vec![9u8; 60_000]),
    ];
    let server = std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(&listener, &frames));
        assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 4));
        h.join().expect("server")
    });
    {
        let got = lock(&inbox.samples);
        let clocks: Vec<u64> = got.iter().map(|s| s.clock).collect();
        assert_eq!(clocks, [1, 3, 6, 7]);
        assert_eq!(got[0].payload(), b"one");
        assert_eq!(got[1].payload(), b"");
        assert_eq!(got[3].payload(), &vec![9u8; 60_000][..]);
        assert!(got.iter().all(|s| s.via == Via::Tcp && s.publisher_id == 99 && &*s.topic == "t"));
    }
    assert_eq!(inbox.drops.load(Ordering::Relaxed), 3, "one too large, two missing");
    assert_eq!(layer.counts().too_large, 1);
    assert_eq!(layer.counts().lost, 2);
    // The publisher goes (connection closed) and comes back on the same port: the subscriber reconnects.
    drop(server);
    let before = layer.counts().connects;
    assert_eq!(before, 1);
    d.run_until(Duration::from_millis(300), || false);
    let frames = vec![message(8, b"eight")];
    std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(&listener, &frames));
        assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 5));
        drop(h.join().expect("server"));
    });
    assert_eq!(lock(&inbox.samples)[4].payload(), b"eight");
    assert_eq!(layer.counts().connects, 2);
    assert_eq!(inbox.drops.load(Ordering::Relaxed), 3, "clock 8 follows 7: nothing lost");
    // A refused connection backs off: no retry storm.
    drop(listener);
    let failures = layer.counts().connect_failures;
    d.run_until(Duration::from_millis(1000), || false);
    let retries = layer.counts().connect_failures - failures;
    assert!((1..=5).contains(&retries), "100 ms doubling: a few attempts a second, got {retries}");
    // Dropping the reader closes the connection for good.
    drop(reader);
    d.run_until(Duration::from_millis(50), || false);
    let failures = layer.counts().connect_failures;
    d.run_until(Duration::from_millis(2500), || false);
    assert_eq!(layer.counts().connect_failures, failures);
}

#[test]
fn garbage_from_a_publisher_closes_the_connection_without_delivering() {
    let TcpPublisherFixture { listener, layer, mut d, inbox, publisher } =
        tcp_publisher_fixture("127.0.0.1:0", 1 << 20);
    let _reader =
        layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &publisher, true).expect("reader");
    // A frame whose data is not an eCAL message, then a header_size below 12.
    let mut bad = vec![0u8; HEADER_LEN];
    frame::put_header(&mut bad, frame::TYPE_PAYLOAD, 8);
    bad.extend_from_slice(b"NOTECAL!");
    bad.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(&listener, &[bad]));
        assert!(d.run_until(Duration::from_secs(5), || inbox.drops.load(Ordering::Relaxed) == 1));
        let mut s = h.join().expect("server");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        d.run_until(Duration::from_millis(200), || false);
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "the subscriber closed the connection");
    });
    assert!(lock(&inbox.samples).is_empty());
    assert_eq!(layer.counts().decode_errors, 1);
}

#[test]
fn subscriber_reassembles_split_frames_reads_large_payloads_in_place_and_skips_the_rest_of_a_frame() {
    let TcpPublisherFixture { listener, layer, mut d, inbox, publisher } =
        tcp_publisher_fixture("127.0.0.1:0", 1 << 20);
    let _reader =
        layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &publisher, true).expect("reader");
    // Larger than the 64 KiB scratch buffer: most of it is read straight into the payload's buffer.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    // A frame with 5 bytes after the payload (content.size smaller than the data): they are skipped.
    let mut trailing = message(2, b"two");
    let data_size = (trailing.len() - HEADER_LEN + 5) as u64;
    frame::put_header(&mut trailing, frame::TYPE_PAYLOAD, data_size);
    trailing.extend_from_slice(b"12345");
    // A payload frame that is not an eCAL message: skipped whole and counted, the connection stays.
    let mut bad = vec![0u8; HEADER_LEN];
    frame::put_header(&mut bad, frame::TYPE_PAYLOAD, 20);
    bad.extend_from_slice(b"XCAL");
    bad.extend_from_slice(&[0; 16]);
    let mut stream = message(1, &big);
    for f in [trailing, bad, message(4, b"four")] {
        stream.extend_from_slice(&f);
    }
    std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let mut s = serve(&listener, &[]);
            s.set_nodelay(true).unwrap();
            // The big frame in 5 writes, the small ones 3 bytes at a time: headers arrive split.
            let (first, rest) = stream.split_at(big.len() + 40);
            for part in first.chunks(first.len() / 5 + 1) {
                s.write_all(part).expect("write");
            }
            for part in rest.chunks(3) {
                s.write_all(part).expect("write");
                std::thread::sleep(Duration::from_micros(200));
            }
            s
        });
        assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 3));
        drop(h.join().expect("server"));
    });
    let got = lock(&inbox.samples);
    assert_eq!(got.iter().map(|s| s.clock).collect::<Vec<_>>(), [1, 2, 4]);
    assert!(got[0].payload() == &big[..], "the large payload arrives intact");
    assert_eq!(got[1].payload(), b"two");
    assert_eq!(got[2].payload(), b"four");
    assert_eq!(inbox.drops.load(Ordering::Relaxed), 1, "the undecodable frame");
    assert_eq!(layer.counts().decode_errors, 1);
    assert_eq!(layer.counts().lost, 0, "clock 3 was the skipped frame");
}

/// A publisher is reached at the address its registration came from, not at what its host name resolves to (no
/// resolver is asked on the I/O thread): here `localhost` would give 127.0.0.1, where nothing listens, and the
/// publisher listens on 127.0.0.2 only. A host name no resolver knows does not matter either.
#[test]
fn the_publisher_is_reached_at_its_registration_source_without_resolving_its_name() {
    for host in ["localhost", "no-such-host.invalid"] {
        let TcpPublisherFixture { listener, layer, mut d, inbox, mut publisher } =
            tcp_publisher_fixture("127.0.0.2:0", 1 << 20);
        publisher.key.host_name = host.into();
        publisher.source = Some("127.0.0.2".parse().unwrap());
        let _reader = layer
            .reader_factory()
            .connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &publisher, false)
            .expect("reader");
        let frames = vec![message(1, b"one")];
        std::thread::scope(|scope| {
            let h = scope.spawn(|| serve(&listener, &frames));
            assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 1), "{host}");
            drop(h.join().expect("server"));
        });
        assert_eq!(lock(&inbox.samples)[0].payload(), b"one");
        assert_eq!(layer.counts().connect_failures, 0, "{host}: first attempt connected");
    }
}

// ---------------------------------------------------------------------------------------------
// Trust boundaries: admission, deadlines, caps, stalls (publisher side)

/// A configuration with short deadlines for the tests below.
fn strict_cfg() -> Config {
    let mut c = cfg(64 * 1024, 1 << 20);
    c.tcp.handshake_timeout_ms = 300;
    c.tcp.stall_timeout_ms = 300;
    c
}

/// A started publisher writer of topic "t" whose matched subscribers are `peers`; its port.
fn started_writer(layer: &TcpLayer, peers: &[&RemoteTopic]) -> (Box<dyn crate::transport::LayerWriter>, u16) {
    let mut w = layer.writer_factory().create(4242, "t", &crate::types::TypeInfo::default()).expect("writer");
    w.set_peers(peers);
    w.set_targets(peers);
    let Some(Layer { par: LayerPar::Tcp { port }, .. }) = w.advert() else { panic!("advert {:?}", w.advert()) };
    (w, u16::try_from(port).expect("port"))
}

/// A raw TCP client bound to `source` (a loopback address: every one of 127/8 is this host's) connected to `port` on
/// 127.0.0.1.
fn connect_from(source: &str, port: u16) -> StdStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.bind(&std::net::SocketAddr::new(source.parse().expect("address"), 0).into()).expect("bind the client");
    s.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).expect("connect");
    let s: StdStream = s.into();
    s.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    s
}

/// What a client sees on its connection within a short read: bytes, closed, or nothing yet.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Seen {
    Bytes(usize),
    Closed,
    Nothing,
}

fn peek(s: &mut StdStream) -> Seen {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => Seen::Closed,
        Ok(n) => Seen::Bytes(n),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => Seen::Nothing,
        Err(_) => Seen::Closed,
    }
}

/// Runs the driver until `s` shows something other than nothing (or `timeout`).
fn wait_seen(d: &mut Driver, s: &mut StdStream, timeout: Duration) -> Seen {
    let deadline = Instant::now() + timeout;
    loop {
        d.run_until(Duration::from_millis(10), || false);
        let seen = peek(s);
        if seen != Seen::Nothing || Instant::now() >= deadline {
            return seen;
        }
    }
}

#[test]
fn a_connection_that_never_sends_its_handshake_is_closed_after_the_deadline_and_counted() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let sub = tcp_sub(0);
    let (_w, port) = started_writer(&layer, &[&sub]);
    let mut silent = connect_from("127.0.0.1", port);
    let start = Instant::now();
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().accepted == 1));
    assert_eq!(layer.counts().sessions, 1);
    assert_eq!(wait_seen(&mut d, &mut silent, Duration::from_secs(3)), Seen::Closed, "closed at the deadline");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(250), "not before handshake_timeout_ms (300 ms): {took:?}");
    let c = layer.counts();
    assert_eq!((c.handshake_timeouts, c.sessions, c.admitted), (1, 0, 0), "{c:?}");
}

#[test]
fn only_announced_subscribers_are_answered_one_connection_each() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    // The only subscriber registration came from another host: a connection from this host has no place.
    let remote = tcp_sub_from(98, "192.0.2.77");
    let (mut w, port) = started_writer(&layer, &[&remote]);
    let mut stranger = connect_from("127.0.0.1", port);
    stranger.write_all(&frame::handshake()).expect("handshake");
    assert_eq!(wait_seen(&mut d, &mut stranger, Duration::from_secs(3)), Seen::Closed, "never answered, closed");
    assert_eq!(layer.counts().refused_unannounced, 1);
    assert_eq!(layer.counts().admitted, 0);
    // A subscriber of this host announced while a connection waits: it is answered, and gets messages.
    let mut first = connect_from("127.0.0.1", port);
    first.write_all(&frame::handshake()).expect("handshake");
    assert_eq!(wait_seen(&mut d, &mut first, Duration::from_millis(100)), Seen::Nothing, "no place yet");
    let local = tcp_sub(0);
    w.set_peers(&[&remote, &local]);
    first.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    d.run_until(Duration::from_millis(100), || false);
    let (h, _) = read_frame(&mut first);
    assert_eq!(h.kind, frame::TYPE_HANDSHAKE, "admitted once announced");
    // One place: a second connection from this host is not answered while the first holds it.
    let mut second = connect_from("127.0.0.2", port);
    second.write_all(&frame::handshake()).expect("handshake");
    w.write(b"for the admitted one", &meta(1)).expect("write");
    let (h, data) = read_frame(&mut first);
    assert_eq!((h.kind, &data[frame::decode_message(&data).unwrap().payload]), (0, &b"for the admitted one"[..]));
    assert_eq!(wait_seen(&mut d, &mut second, Duration::from_secs(3)), Seen::Closed, "no second place");
    let c = layer.counts();
    assert_eq!((c.admitted, c.refused_unannounced, c.sessions), (1, 2, 1), "{c:?}");
    // More places than connections: nothing to close.
    w.set_peers(&[&remote, &local, &tcp_sub_from(97, "127.0.0.1")]);
    first.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    assert_eq!(wait_seen(&mut d, &mut first, Duration::from_millis(200)), Seen::Nothing, "kept");
    // The subscriber's registration goes: its connection is closed.
    w.set_peers(&[&remote]);
    assert_eq!(wait_seen(&mut d, &mut first, Duration::from_secs(2)), Seen::Closed, "revoked");
    assert_eq!((layer.counts().revoked, layer.counts().sessions), (1, 0));
}

#[test]
fn a_protected_topic_admits_authenticated_subscribers_only() {
    let mut c = strict_cfg();
    c.auth.key = crate::config::AuthKey::new(vec![7; 32]).map(std::sync::Arc::new);
    c.auth.protected_topics = "t|other".into();
    let layer = layer_of(&c);
    let mut d = Driver::new(&layer);
    let unsigned = tcp_sub(0);
    let (mut w, port) = started_writer(&layer, &[&unsigned]);
    let mut s = connect_from("127.0.0.1", port);
    s.write_all(&frame::handshake()).expect("handshake");
    assert_eq!(wait_seen(&mut d, &mut s, Duration::from_secs(3)), Seen::Closed, "unauthenticated: no place");
    assert_eq!((layer.counts().refused_unannounced, layer.counts().admitted), (1, 0));
    let mut signed = tcp_sub(0);
    signed.authenticated = true;
    w.set_peers(&[&unsigned, &signed]);
    let mut s = connect_from("127.0.0.1", port);
    s.write_all(&frame::handshake()).expect("handshake");
    assert_eq!(wait_seen(&mut d, &mut s, Duration::from_secs(3)), Seen::Bytes(13), "authenticated: answered");
    assert_eq!(layer.counts().admitted, 1);
    // Without a key the same unauthenticated subscriber is a place.
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let (_w, port) = started_writer(&layer, &[&unsigned]);
    let mut s = connect_from("127.0.0.1", port);
    s.write_all(&frame::handshake()).expect("handshake");
    assert_eq!(wait_seen(&mut d, &mut s, Duration::from_secs(3)), Seen::Bytes(13));
}

#[test]
fn connections_beyond_the_source_and_process_caps_are_closed_at_once_and_counted() {
    let mut c = strict_cfg();
    c.tcp.handshake_timeout_ms = 10_000;
    c.tcp.max_sessions_per_source = 3;
    c.tcp.max_sessions = 5;
    let layer = layer_of(&c);
    let mut d = Driver::new(&layer);
    let sub = tcp_sub(0);
    let (_w, port) = started_writer(&layer, &[&sub]);
    let mut from_one: Vec<StdStream> = (0..4).map(|_| connect_from("127.0.0.1", port)).collect();
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().refused_source_cap == 1), "{:?}", layer.counts());
    let mut from_two: Vec<StdStream> = (0..3).map(|_| connect_from("127.0.0.2", port)).collect();
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().refused_process_cap == 1), "{:?}", layer.counts());
    let seen: Vec<Seen> = from_one.iter_mut().chain(from_two.iter_mut()).map(peek).collect();
    assert_eq!(seen.iter().filter(|s| **s == Seen::Closed).count(), 2, "{seen:?}");
    assert_eq!((seen[3], seen[6]), (Seen::Closed, Seen::Closed), "the last of each");
    let counts = layer.counts();
    assert_eq!((counts.accepted, counts.sessions), (5, 5), "{counts:?}");
    // A place frees up when a connection goes.
    drop(from_one.remove(0));
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().sessions == 4));
    let _again = connect_from("127.0.0.1", port);
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().accepted == 6));
}

#[test]
fn a_subscriber_that_stops_reading_is_dropped_after_the_stall_timeout_and_its_queue_counted() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let sub = tcp_sub(0);
    let (mut w, port) = started_writer(&layer, &[&sub]);
    let mut s = connect_from("127.0.0.1", port);
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(&frame::handshake()).expect("handshake");
    d.run_until(Duration::from_millis(100), || false);
    assert_eq!(read_frame(&mut s).0.kind, frame::TYPE_HANDSHAKE);
    // It never reads again: socket buffers fill, then the 64 KiB queue (messages beyond it are dropped whole).
    let big = vec![5u8; 256 * 1024];
    let mut clock = 0;
    let start = Instant::now();
    while layer.counts().stalled == 0 && start.elapsed() < Duration::from_secs(5) {
        clock += 1;
        let _ = w.write(&big, &meta(clock));
        d.run_until(Duration::from_millis(5), || false);
    }
    let c = layer.counts();
    assert_eq!((c.stalled, c.sessions), (1, 0), "dropped as stalled: {c:?}");
    assert!(c.send_drops > 0, "messages beyond the queue were dropped before: {c:?}");
    let late = w.take_late_drops();
    assert!(late >= 1, "the messages still queued count as drops of the publisher");
    // Nothing is held for it any more: further messages go nowhere, and nothing is left to count.
    w.write(&big, &meta(clock + 1)).expect("no connection left to drop for");
    assert_eq!(w.take_late_drops(), 0);
}

#[test]
fn a_publishers_connections_probe_a_silent_subscriber_with_keepalive() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let sub = tcp_sub(0);
    let (_w, port) = started_writer(&layer, &[&sub]);
    let server = Arc::clone(&lock(&layer.shared.new_servers)[0]);
    let _client = connect_from("127.0.0.1", port);
    assert!(d.run_until(Duration::from_secs(2), || layer.counts().accepted == 1));
    let session = Arc::clone(&lock(&server.sessions)[0]);
    let st = lock(&session.state);
    let s = socket2::SockRef::from(&st.stream);
    assert!(s.keepalive().expect("SO_KEEPALIVE"), "keepalive on");
    assert_eq!(s.tcp_keepalive_time().expect("TCP_KEEPIDLE"), KEEPALIVE_IDLE);
    assert_eq!(s.tcp_keepalive_interval().expect("TCP_KEEPINTVL"), KEEPALIVE_INTERVAL);
    assert_eq!(s.tcp_keepalive_retries().expect("TCP_KEEPCNT"), KEEPALIVE_PROBES);
}

#[test]
fn a_reading_subscriber_is_not_dropped_however_long_the_topic_is_silent() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let sub = tcp_sub(0);
    let (mut w, port) = started_writer(&layer, &[&sub]);
    let mut s = connect_from("127.0.0.1", port);
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(&frame::handshake()).expect("handshake");
    d.run_until(Duration::from_millis(100), || false);
    assert_eq!(read_frame(&mut s).0.kind, frame::TYPE_HANDSHAKE);
    // Silent for three stall timeouts, then a message: still connected.
    d.run_until(Duration::from_millis(1000), || false);
    w.write(b"late but welcome", &meta(1)).expect("write");
    let (h, _) = read_frame(&mut s);
    assert_eq!(h.kind, frame::TYPE_PAYLOAD);
    assert_eq!((layer.counts().stalled, layer.counts().sessions), (0, 1));
}

/// A non-loopback address of this host, if it has one with a route (the kernel's source for a far address).
fn non_loopback_address() -> Option<std::net::IpAddr> {
    for far in ["192.0.2.1:9", "198.51.100.1:9", "203.0.113.1:9", "[2001:db8::1]:9"] {
        let any = if far.starts_with('[') { "[::]:0" } else { "0.0.0.0:0" };
        let Ok(u) = std::net::UdpSocket::bind(any) else { continue };
        if u.connect(far).is_ok()
            && let Ok(a) = u.local_addr()
            && !a.ip().is_loopback()
            && !a.ip().is_unspecified()
        {
            return Some(a.ip());
        }
    }
    None
}

#[test]
fn in_local_mode_the_listener_is_on_the_loopback_interface_only() {
    for network_mode in [false, true] {
        let mut c = strict_cfg();
        c.network.enabled = network_mode;
        let layer = layer_of(&c);
        let _d = Driver::new(&layer);
        let sub = tcp_sub(0);
        let (_w, port) = started_writer(&layer, &[&sub]);
        let listener = lock(&lock(&layer.shared.new_servers)[0].listener).take().expect("listener not taken yet");
        let device = socket2::SockRef::from(&listener).device().expect("SO_BINDTODEVICE");
        assert_eq!(device.as_deref(), (!network_mode).then_some(&b"lo"[..]), "network mode {network_mode}");
        // Every loopback address reaches it (eCAL subscribers connect to what the host name resolves to).
        for a in ["127.0.0.1", "127.0.1.1"] {
            let ok = StdStream::connect_timeout(&format!("{a}:{port}").parse().unwrap(), Duration::from_secs(1));
            assert!(ok.is_ok(), "{a}: {ok:?}");
        }
        // Where this host has no non-loopback address with a route, the bound device above is the check.
        if let Some(ip) = non_loopback_address() {
            let r = StdStream::connect_timeout(&std::net::SocketAddr::new(ip, port), Duration::from_secs(1));
            assert_eq!(r.is_ok(), network_mode, "{ip} (network mode {network_mode}): {r:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Trust boundaries (subscriber side): forged publisher registrations

/// A publisher registration pointing at `addr` (its source) and `port`.
fn forged_publisher(entity_id: u64, addr: &str, port: u16) -> RemoteTopic {
    let mut p = RemoteTopic::for_test(
        7,
        entity_id,
        vec![Layer::new(LayerKind::Tcp, true, true, LayerPar::Tcp { port: i32::from(port) })],
        Direction::Publisher,
    );
    p.source = Some(addr.parse().expect("address"));
    p
}

/// Sets its flag when dropped: a helper thread told to stop also when an assertion fails (a scope would otherwise wait
/// for it for ever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A host that is no tcp_pubsub publisher (a web server, say): accepts, answers with bytes that are no tcp_pubsub
/// frame, closes. Counts the connections it got until `stop`.
fn third_host(listener: StdListener, stop: &AtomicBool, reply: &'static [u8]) -> u64 {
    listener.set_nonblocking(true).expect("nonblocking");
    let mut accepted = 0;
    let mut held = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut s, _)) => {
                accepted += 1;
                if reply.is_empty() {
                    held.push(s); // says nothing at all
                } else {
                    let _ = s.write_all(reply);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    accepted
}

#[test]
fn forged_registrations_aimed_at_a_third_host_make_one_attempt_at_a_time_backed_off() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let victim = StdListener::bind("127.0.0.3:0").expect("bind");
    let port = victim.local_addr().unwrap().port();
    let inbox = Arc::new(Collect::default());
    let stop = AtomicBool::new(false);
    // Twenty forged publishers, all with the victim's address as their registration source.
    let readers: Vec<_> = (0..20)
        .map(|i| {
            let p = forged_publisher(1000 + i, "127.0.0.3", port);
            layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &p, false).expect("reader")
        })
        .collect();
    let accepted = std::thread::scope(|scope| {
        let h = scope.spawn(|| third_host(victim, &stop, b"HTTP/1.1 400 Bad Request\r\n\r\n"));
        let _stop = StopOnDrop(&stop);
        d.run_until(Duration::from_secs(3), || false);
        stop.store(true, Ordering::Relaxed);
        h.join().expect("victim")
    });
    let c = layer.counts();
    // One attempt at a time, 100 ms doubling to 2 s after each failure: at 0, 0.1, 0.3, 0.7, 1.5 s (and one that
    // may start at 3.5 s had the clock run on).
    assert!((1..=6).contains(&accepted), "bounded and backed off: {accepted} connections in 3 s; {c:?}");
    assert_eq!(c.connects, 0, "no handshake answered");
    assert!(c.protocol_errors >= 1, "{c:?}");
    drop(readers);
    // The same when nothing listens there (refused).
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let _readers: Vec<_> = (0..20)
        .map(|i| {
            let p = forged_publisher(2000 + i, "127.0.0.3", port);
            layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &p, false).expect("reader")
        })
        .collect();
    d.run_until(Duration::from_secs(3), || false);
    let failures = layer.counts().connect_failures;
    assert!((1..=6).contains(&failures), "refused: {failures} attempts in 3 s from 20 forged publishers");
    assert!(inbox.samples.lock().unwrap().is_empty());
}

#[test]
fn a_publisher_that_never_answers_the_handshake_is_given_up_after_the_deadline() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let mute = StdListener::bind("127.0.0.1:0").expect("bind");
    let port = mute.local_addr().unwrap().port();
    let inbox = Arc::new(Collect::default());
    let p = forged_publisher(7, "127.0.0.1", port);
    let _reader = layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &p, false).expect("reader");
    let stop = AtomicBool::new(false);
    let accepted = std::thread::scope(|scope| {
        let h = scope.spawn(|| third_host(mute, &stop, b""));
        let _stop = StopOnDrop(&stop);
        assert!(d.run_until(Duration::from_secs(3), || layer.counts().connect_timeouts == 1), "{:?}", layer.counts());
        let after_first = Instant::now();
        // The next attempt waits for the backoff (100 ms), not sooner.
        d.run_until(Duration::from_millis(50), || false);
        assert_eq!(layer.counts().connections, 0, "given up, not yet retried");
        assert!(d.run_until(Duration::from_secs(2), || layer.counts().connections == 1));
        assert!(after_first.elapsed() >= Duration::from_millis(90));
        d.run_until(Duration::from_millis(100), || false);
        stop.store(true, Ordering::Relaxed);
        h.join().expect("mute publisher")
    });
    assert_eq!(accepted, 2);
    let c = layer.counts();
    assert_eq!((c.connects, c.connect_failures), (0, 1), "{c:?}");
}

#[test]
fn a_publisher_announcing_a_port_below_1024_is_not_connected_to() {
    let layer = layer_of(&strict_cfg());
    let mut d = Driver::new(&layer);
    let inbox = Arc::new(Collect::default());
    let p = forged_publisher(7, "127.0.0.1", 22);
    let mut reader =
        layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &p, false).expect("reader");
    d.run_until(Duration::from_millis(500), || false);
    let c = layer.counts();
    assert_eq!((c.bad_ports, c.connect_failures, c.connections), (1, 0, 0), "{c:?}");
    // It announces a proper port later: connected then.
    let listener = StdListener::bind("127.0.0.1:0").expect("bind");
    reader.update(&forged_publisher(7, "127.0.0.1", listener.local_addr().unwrap().port()));
    let frames = vec![message(1, b"one")];
    std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(&listener, &frames));
        assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 1));
        drop(h.join().expect("server"));
    });
    assert_eq!(layer.counts().bad_ports, 1);
}

#[test]
fn max_connections_bounds_a_subscribers_connections() {
    let mut c = strict_cfg();
    c.tcp.max_connections = 2;
    let layer = layer_of(&c);
    let mut d = Driver::new(&layer);
    let inbox = Arc::new(Collect::default());
    let listeners: Vec<StdListener> = (0..4).map(|_| StdListener::bind("127.0.0.1:0").expect("bind")).collect();
    let _readers: Vec<_> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let p = forged_publisher(10 + i as u64, "127.0.0.1", l.local_addr().unwrap().port());
            layer.reader_factory().connect("t", Arc::clone(&inbox) as Arc<dyn Inbox>, &p, false).expect("reader")
        })
        .collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for l in &listeners {
            let stop = &stop;
            scope.spawn(move || {
                l.set_nonblocking(true).unwrap();
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((mut s, _)) = l.accept() {
                        s.set_nonblocking(false).unwrap();
                        let mut h = [0u8; HEADER_LEN + 1];
                        s.read_exact(&mut h).expect("client handshake");
                        s.write_all(&frame::handshake()).expect("answer");
                        held.push(s);
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        d.run_until(Duration::from_secs(1), || false);
    });
    let c = layer.counts();
    assert_eq!((c.connections, c.connects), (2, 2), "{c:?}");
    assert!(c.connects_deferred >= 2, "{c:?}");
}
