//! The TCP layer against raw sockets, its source driven by a test-owned `mio::Poll` as the I/O thread drives it.

use std::io::{Read, Write};
use std::net::{TcpListener as StdListener, TcpStream as StdStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};

use super::frame::{self, HEADER_LEN};
use super::*;
use crate::config::Config;
use crate::registration::{Direction, Layer, LayerKind, LayerPar, RemoteTopic};
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

fn tcp_sub(port: i32) -> RemoteTopic {
    RemoteTopic::for_test(
        1,
        99,
        vec![Layer::new(LayerKind::Tcp, true, false, LayerPar::Tcp { port })],
        Direction::Subscriber,
    )
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
    let layer = TcpLayer::new(&cfg(64 * 1024, 1 << 20));
    let mut d = Driver::new(&layer);
    let mut w = layer.writer_factory().create(4242, "t", &crate::types::TypeInfo::default()).expect("writer");
    assert!(w.advert().is_none(), "lazy: no server before a subscriber");
    let sub = tcp_sub(0);
    assert!(w.accepts(&sub, false));
    assert!(!w.accepts(&RemoteTopic::for_test(1, 98, vec![], Direction::Subscriber), false));
    w.set_targets(&[&sub]);
    let Some(Layer { kind: LayerKind::Tcp, enabled: true, active: true, par: LayerPar::Tcp { port }, .. }) = w.advert()
    else {
        panic!("advert {:?}", w.advert())
    };
    let mut client = StdStream::connect(("127.0.0.1", u16::try_from(port).unwrap())).expect("connect");
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Before the handshake the connection gets nothing.
    assert!(d.run_until(Duration::from_secs(5), || layer.counters().accepted.load(Ordering::Relaxed) == 1));
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
    assert_eq!(layer.counters().send_drops.load(Ordering::Relaxed), dropped);
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
    let layer = TcpLayer::new(&cfg(1 << 20, max_message));
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
    assert_eq!(layer.counters().too_large.load(Ordering::Relaxed), 1);
    assert_eq!(layer.counters().lost.load(Ordering::Relaxed), 2);
    // The publisher goes (connection closed) and comes back on the same port: the subscriber reconnects.
    drop(server);
    let before = layer.counters().connects.load(Ordering::Relaxed);
    assert_eq!(before, 1);
    d.run_until(Duration::from_millis(300), || false);
    let frames = vec![message(8, b"eight")];
    std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(&listener, &frames));
        assert!(d.run_until(Duration::from_secs(5), || lock(&inbox.samples).len() == 5));
        drop(h.join().expect("server"));
    });
    assert_eq!(lock(&inbox.samples)[4].payload(), b"eight");
    assert_eq!(layer.counters().connects.load(Ordering::Relaxed), 2);
    assert_eq!(inbox.drops.load(Ordering::Relaxed), 3, "clock 8 follows 7: nothing lost");
    // A refused connection backs off: no retry storm.
    drop(listener);
    let failures = layer.counters().connect_failures.load(Ordering::Relaxed);
    d.run_until(Duration::from_millis(1000), || false);
    let retries = layer.counters().connect_failures.load(Ordering::Relaxed) - failures;
    assert!((1..=5).contains(&retries), "100 ms doubling: a few attempts a second, got {retries}");
    // Dropping the reader closes the connection for good.
    drop(reader);
    d.run_until(Duration::from_millis(50), || false);
    let failures = layer.counters().connect_failures.load(Ordering::Relaxed);
    d.run_until(Duration::from_millis(2500), || false);
    assert_eq!(layer.counters().connect_failures.load(Ordering::Relaxed), failures);
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
    assert_eq!(layer.counters().decode_errors.load(Ordering::Relaxed), 1);
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
    assert_eq!(layer.counters().decode_errors.load(Ordering::Relaxed), 1);
    assert_eq!(layer.counters().lost.load(Ordering::Relaxed), 0, "clock 3 was the skipped frame");
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
        assert_eq!(layer.counters().connect_failures.load(Ordering::Relaxed), 0, "{host}: first attempt connected");
    }
}
