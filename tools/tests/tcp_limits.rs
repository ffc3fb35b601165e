//! The eCAL TCP layer's bounds against a raw client on loopback (local mode), with a `shoal-peer pub` process whose
//! only subscriber is one this test announces in registration (so that its connection is admitted): the client
//! sends the tcp_pubsub handshake, reads the answer, and never reads again while the publisher sends 1 MB messages.
//! The publisher's resident memory stays within its send queue (`[shoal_tcp] send_queue`) plus socket buffers, the
//! connection is dropped after `stall_timeout_ms` and counted (`Node::snapshot().tcp.stalled`), and the messages
//! lost for it are counted as drops of the publisher. Resident memory before, at its peak and after is printed.
//!
//! Under `[shoal_auth]`, a subscriber registration without the envelope makes no place on a protected topic; a
//! subscriber reading the native ring makes none either.
//!
//! An eCAL 6.1.1 subscriber of this host (default settings but its layer: TCP) is admitted by a local-mode publisher
//! whose listener is on the loopback interface: it connects to what the host name resolves to, a loopback address.
//!
//! The unit tests of `core/src/transport/ecal_tcp/tests.rs` check the other bounds against raw sockets (handshake
//! deadline, admission, caps, forged publishers); `tcp_netns.rs` that a local-mode publisher is not reachable from
//! another host.

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shoal::registration::{Direction, Identity, Layer, LayerKind, LayerPar, LocalTopic, codec};
use shoal::transport::ecal_tcp::frame;
use support::{Peer, finish_tcp_transfer_to_ecal, topic, write_ini};

/// eCAL's local-mode registration address: the loopback broadcast, registration port.
const REGISTRATION: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), 14000);

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name").trim().to_string()
}

/// Resident memory of `pid` in KiB, outside shared memory.
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

/// Announces, from this process, a subscriber `id` of `topic` with only eCAL's TCP layer enabled, every 500 ms until
/// `stop` (registration expires after 10 s without a refresh). Tests running at once use different ids (an entity
/// announced with another topic name would be renamed).
fn announce_tcp_subscriber(id: u64, topic: &str, stop: &AtomicBool) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_broadcast(true).expect("broadcast");
    let host = host_name();
    let me = Identity {
        host_name: host.clone(),
        pid: std::process::id(),
        process_name: "/tcp_limits".into(),
        unit_name: "tcp_limits".into(),
        process_parameter: String::new(),
        shm_transport_domain: host,
        network_mode: false,
    };
    let sub = LocalTopic {
        id,
        topic_name: topic.into(),
        type_info: shoal::TypeInfo::raw("shoal.test.Pattern"),
        layers: vec![Layer::new(LayerKind::Tcp, true, false, LayerPar::Tcp { port: 0 })],
        stats: Default::default(),
    };
    let mut clock = 0;
    while !stop.load(Ordering::Relaxed) {
        clock += 1;
        for sample in [codec::process_sample(&me, clock), codec::topic_sample(&me, Direction::Subscriber, &sub, clock)]
        {
            let mut id = 0;
            let datagrams = codec::encode_registration(&sample, 65_000, &mut || {
                id += 1;
                id
            })
            .expect("encode");
            for d in datagrams {
                let _ = socket.send_to(&d, REGISTRATION);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The TCP port process `pid` listens on (`ss`), once it does.
fn listening_port(pid: u32, timeout: Duration) -> u16 {
    let deadline = Instant::now() + timeout;
    loop {
        let out = std::process::Command::new("ss").args(["-Hltnp"]).output().expect("ss");
        let text = String::from_utf8_lossy(&out.stdout);
        let port = text.lines().filter(|l| l.contains(&format!("pid={pid},"))).find_map(|l| {
            let local = l.split_whitespace().nth(3)?;
            local.rsplit(':').next()?.parse::<u16>().ok()
        });
        if let Some(p) = port {
            return p;
        }
        assert!(Instant::now() < deadline, "process {pid} listens on no TCP port:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_subscriber_that_never_reads_costs_the_publisher_its_send_queue_then_is_dropped_and_counted() {
    const SEND_QUEUE_MB: u64 = 8;
    const STALL_MS: u64 = 3000;
    let ini = write_ini(
        "tcp_stall",
        &format!(
            "[publisher]\nuse_shm = false\nuse_udp_mc = false\nuse_tcp = true\n\
             [shoal_tcp]\nsend_queue = {SEND_QUEUE_MB}m\nstall_timeout_ms = {STALL_MS}\n"
        ),
    );
    let t = topic("tcp_stall");
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| announce_tcp_subscriber(4711, &t, &stop));
        let _stop = StopOnDrop(&stop);
        // 1 MB messages at 100/s for 8 s, starting 1.5 s after the match (time for this client to connect).
        let mut publ = Peer::publisher(&t, 800, 1_000_000, 100)
            .start_delay_ms(1500)
            .linger_ms(300)
            .ini(&ini)
            .spawn_ready("shoal pub");
        let pid = publ.pid();
        let port = listening_port(pid, Duration::from_secs(10));
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
        // A small receive buffer: what the publisher holds for this client is its queue, not our buffer.
        socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        socket.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into()).expect("connect");
        let mut client: TcpStream = socket.into();
        client.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        client.write_all(&frame::handshake()).expect("handshake");
        let mut answer = [0u8; frame::HEADER_LEN + 1];
        client.read_exact(&mut answer).expect("the publisher answers an announced subscriber");
        assert_eq!(answer, frame::handshake());
        let before = rss_kb(pid);
        let mut peak = before;
        let start = Instant::now();
        let done = loop {
            peak = peak.max(rss_kb(pid));
            if let Some(done) = publ.wait_for(Duration::from_millis(20), |v| v["event"] == "done") {
                break done;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "the publisher finishes");
        };
        let after = rss_kb(pid);
        let mb = |kb: u64| kb as f64 / 1024.0;
        eprintln!(
            "publisher RSS: before {:.1} MB, peak {:.1} MB (+{:.1} MB), after {:.1} MB; done: {done}",
            mb(before),
            mb(peak),
            mb(peak - before),
            mb(after)
        );
        let tcp = &done["tcp"];
        assert_eq!(tcp["admitted"], 1, "{done}");
        assert_eq!(tcp["stalled"], 1, "dropped as stalled: {done}");
        assert_eq!(tcp["sessions"], 0, "{done}");
        assert!(tcp["send_drops"].as_u64().unwrap_or(0) > 0, "messages beyond the queue dropped: {done}");
        assert!(done["drops"].as_u64().unwrap_or(0) > 0, "counted as the publisher's drops: {done}");
        // The queue (8 MB) and the socket buffers (up to 4 MB each way on loopback), with room for the allocator.
        let bound_kb = (SEND_QUEUE_MB + 24) * 1024;
        assert!(peak - before <= bound_kb, "peak {} MB above the start, over {} MB", mb(peak - before), mb(bound_kb));
        // The client finds the end of the stream after what was in flight.
        client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut sink = vec![0u8; 1 << 20];
        let closed = loop {
            match client.read(&mut sink) {
                Ok(0) => break true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        assert!(closed, "the publisher closed the connection");
        publ.wait_success(Duration::from_secs(10));
    });
}

#[test]
fn an_ecal_subscriber_of_this_host_is_admitted_by_a_local_mode_publisher() {
    use std::net::ToSocketAddrs;
    let resolved: Vec<_> = (host_name(), 0).to_socket_addrs().map(Iterator::collect).unwrap_or_default();
    if resolved.is_empty() || resolved.iter().any(|a| !a.ip().is_loopback()) {
        // eCAL connects to what the host name resolves to; a local-mode listener is on loopback only (README).
        eprintln!("skipped: host name {} resolves to {resolved:?}, not to loopback addresses only", host_name());
        return;
    }
    let ini = write_ini("tcp_local_ecal", "[publisher]\nuse_shm = false\nuse_udp_mc = false\nuse_tcp = true\n");
    let t = topic("tcp_local_ecal");
    let count = 100;
    let sub = Peer::ecal_subscriber(&t, count, "tcp")
        .arg("--until-clock", count)
        .flag("--pattern-only")
        .timeout_ms(30000)
        .idle_ms(15000)
        .spawn_ready("eCAL sub");
    let publ = Peer::publisher(&t, count, 1000, 100).start_delay_ms(2000).linger_ms(1000).ini(&ini).spawn("shoal pub");
    let ready = publ.expect("ready", Duration::from_secs(10));
    finish_tcp_transfer_to_ecal("tcp_local_ecal", publ, sub, &ready, count, 1000);
}

/// Under `[shoal_auth]` a protected topic's connections are admitted for authenticated subscriber registrations only:
/// with a keyed subscriber connected, a subscriber registration without the envelope (sent by this test from
/// loopback) makes no place, and a raw client's handshake is never answered (closed after `handshake_timeout_ms`,
/// counted). On an unprotected topic the same registration makes a place and the same client is answered.
#[test]
fn a_protected_topic_answers_no_connection_for_an_unsigned_subscriber_registration() {
    for protected in [true, false] {
        let name = format!("tcp_auth_{protected}");
        let pattern = if protected { ".*" } else { "no_topic_is_called_this" };
        let ini = write_ini(
            &name,
            &format!(
                "[publisher]\nuse_shm = false\nuse_udp_mc = false\nuse_tcp = true\n[subscriber]\nshm_rec_enabled = false\n\
                 udp_mc_rec_enabled = false\ntcp_rec_enabled = true\n[shoal_shm_ring]\nenabled = false\n\
                 [shoal_tcp]\nhandshake_timeout_ms = 1000\n[shoal_auth]\nkey_hex = {}\nprotected_topics = {pattern}\n",
                "5a".repeat(32)
            ),
        );
        let t = topic(&name);
        let count = 100;
        let mut sub = Peer::subscriber(&t, count).ini(&ini).spawn_ready("keyed shoal sub");
        let mut publ =
            Peer::publisher(&t, count, 64, 20).start_delay_ms(1500).linger_ms(500).ini(&ini).spawn("keyed shoal pub");
        publ.expect("ready", Duration::from_secs(10));
        let port = listening_port(publ.pid(), Duration::from_secs(10));
        sub.expect_line("first message", Duration::from_secs(10), |v| v["event"] == "first");
        let stop = AtomicBool::new(false);
        let answered = std::thread::scope(|scope| {
            scope.spawn(|| announce_tcp_subscriber(4712, &t, &stop));
            let _stop = StopOnDrop(&stop);
            // Registration of the unsigned subscriber goes out now and every 500 ms: give it a round.
            std::thread::sleep(Duration::from_millis(1200));
            let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| {
                let ss = std::process::Command::new("ss").args(["-Hltnp"]).output().expect("ss");
                panic!(
                    "{name}: connect to port {port}: {e}\nlisteners:\n{}\n{}",
                    String::from_utf8_lossy(&ss.stdout),
                    publ.report()
                )
            });
            client.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            client.write_all(&frame::handshake()).expect("handshake");
            let mut answer = [0u8; frame::HEADER_LEN + 1];
            client.read_exact(&mut answer).is_ok_and(|()| answer == frame::handshake())
        });
        let done = publ.expect("done", Duration::from_secs(30));
        eprintln!("{name}: client answered {answered}; publisher {done}");
        let summary = sub.expect("summary", Duration::from_secs(30));
        assert_eq!(summary["received"], count, "{name}: the keyed subscriber gets everything: {summary}");
        assert_eq!(answered, !protected, "{name}: answered only on the unprotected topic");
        let tcp = &done["tcp"];
        if protected {
            assert_eq!((tcp["admitted"].as_u64(), tcp["refused_unannounced"].as_u64()), (Some(1), Some(1)), "{done}");
        } else {
            assert_eq!(tcp["admitted"], 2, "{done}");
        }
        sub.wait_success(Duration::from_secs(5));
        publ.wait_success(Duration::from_secs(10));
    }
}

/// A shoal subscriber that reads the publisher's native ring makes no place for a TCP connection (it connects no
/// other layer), though it has TCP enabled: with it and one TCP subscriber announced, of two raw clients from this
/// host only the first is answered.
#[test]
fn a_subscriber_reading_the_native_ring_makes_no_tcp_place() {
    let ini = write_ini(
        "tcp_ring_place",
        "[publisher]\nuse_tcp = true\n[subscriber]\ntcp_rec_enabled = true\n[shoal_tcp]\nhandshake_timeout_ms = 1000\n",
    );
    let t = topic("tcp_ring_place");
    let count = 100;
    let mut sub = Peer::subscriber(&t, count).ini(&ini).spawn_ready("ring subscriber");
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| announce_tcp_subscriber(4713, &t, &stop));
        let _stop = StopOnDrop(&stop);
        let mut publ = Peer::publisher(&t, count, 64, 20)
            .wait_subs(2)
            .start_delay_ms(1500)
            .linger_ms(500)
            .ini(&ini)
            .spawn_ready("shoal pub");
        let port = listening_port(publ.pid(), Duration::from_secs(10));
        let answered: Vec<bool> = (0..2)
            .map(|_| {
                let mut client = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                client.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                client.write_all(&frame::handshake()).expect("handshake");
                let mut answer = [0u8; frame::HEADER_LEN + 1];
                let ok = client.read_exact(&mut answer).is_ok_and(|()| answer == frame::handshake());
                (ok, client)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(ok, _client)| ok)
            .collect();
        let done = publ.expect("done", Duration::from_secs(30));
        let summary = sub.expect("summary", Duration::from_secs(30));
        assert_eq!(answered, [true, false], "one place, the announced TCP subscriber's: {done}");
        assert_eq!(summary["received"], count, "{summary}");
        assert_eq!(summary["via"], serde_json::json!({"shoal_ring": count}), "the subscriber read the ring: {summary}");
        publ.wait_success(Duration::from_secs(10));
    });
    sub.wait_success(Duration::from_secs(5));
}

/// Sets its flag when dropped (stops the announcing thread also when an assertion fails).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
