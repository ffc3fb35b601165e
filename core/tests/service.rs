//! Services inside one process (the server and client talk over loopback TCP as two processes would): calls to one
//! and to every server, failed and timed-out calls, what registration announces, the counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use shoal::monitor::ServiceRole;
use shoal::{CallStatus, Node, TypeInfo};

fn node() -> Node {
    Node::init_with_config("service_test", shoal::Config::default()).expect("init")
}

fn name(test: &str) -> String {
    format!("svc_{test}_{}", std::process::id())
}

const T: Duration = Duration::from_secs(5);

fn raw() -> TypeInfo {
    TypeInfo::raw("")
}

#[test]
fn a_call_reaches_the_server_and_its_response_comes_back() {
    let node = node();
    let n = name("echo");
    let _server = node
        .service_server(&n)
        .method("echo", TypeInfo::raw("req"), TypeInfo::raw("resp"), |req: &[u8]| {
            let mut out = b"echo:".to_vec();
            out.extend_from_slice(req);
            Ok(out)
        })
        .method("fail", raw(), raw(), |_: &[u8]| Err("no luck".into()))
        .build()
        .expect("server");
    let client = node.service_client(&n).build();
    assert_eq!(client.wait_for_servers(1, T), Ok(1));

    for i in 0..3 {
        let msg = format!("hello {i}");
        let r = client.call("echo", msg.as_bytes(), T).expect("call");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, CallStatus::Executed, "{r:?}");
        assert_eq!(r[0].payload, format!("echo:{msg}").into_bytes());
        assert_eq!(r[0].server.pid, std::process::id());
    }
    let r = client.call("fail", b"", T).expect("call");
    assert_eq!(r[0].status, CallStatus::Failed("no luck".into()));
    let r = client.call("nope", b"", T).expect("call");
    assert!(matches!(&r[0].status, CallStatus::Failed(m) if m.contains("no method named 'nope'")), "{r:?}");

    // A large request and response.
    let big = vec![7u8; 1 << 20];
    let r = client.call("echo", &big, T).expect("call");
    assert_eq!(r[0].payload.len(), big.len() + 5);

    // Registration announces the server with its methods and their types, and the client.
    let deadline = Instant::now() + T;
    loop {
        let snap = node.snapshot();
        let mine: Vec<_> = snap.services.iter().filter(|s| s.service_name == n).collect();
        let server = mine.iter().find(|s| s.role == ServiceRole::Server);
        let client_entry = mine.iter().find(|s| s.role == ServiceRole::Client);
        if let (Some(s), Some(_)) = (server, client_entry) {
            let echo = s.methods.iter().find(|m| m.name == "echo").expect("echo announced");
            assert_eq!((echo.request.name.as_str(), echo.response.name.as_str()), ("req", "resp"));
            assert!(s.tcp_port >= 1024);
            let c = snap.service_counts;
            assert!(c.calls_served >= 4 && c.calls_failed >= 2 && c.calls_answered >= 6, "{c:?}");
            break;
        }
        assert!(Instant::now() < deadline, "services not in the snapshot: {:?}", snap.services);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_call_goes_to_every_server_and_one_can_be_chosen() {
    let node = node();
    let n = name("many");
    let servers: Vec<_> = (0..3)
        .map(|i| {
            node.service_server(&n).method("who", raw(), raw(), move |_: &[u8]| Ok(vec![i])).build().expect("server")
        })
        .collect();
    let client = node.service_client(&n).build();
    assert_eq!(client.wait_for_servers(3, T), Ok(3));
    let r = client.call("who", b"", T).expect("call");
    let mut got: Vec<u8> = r.iter().map(|r| r.payload[0]).collect();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2]);

    let chosen = client.servers().into_iter().find(|s| s.entity_id == servers[1].id()).expect("server 1 listed");
    let one = client.call_server(&chosen, "who", b"", T).expect("call one");
    assert_eq!(one.payload, [1]);
}

#[test]
fn a_slow_server_times_out_and_the_others_answer() {
    let node = node();
    let n = name("slow");
    let _fast = node.service_server(&n).method("m", raw(), raw(), |_: &[u8]| Ok(b"fast".to_vec())).build().unwrap();
    let _slow = node
        .service_server(&n)
        .method("m", raw(), raw(), |_: &[u8]| {
            std::thread::sleep(Duration::from_millis(1500));
            Ok(b"slow".to_vec())
        })
        .build()
        .unwrap();
    let client = node.service_client(&n).build();
    assert_eq!(client.wait_for_servers(2, T), Ok(2));
    let t0 = Instant::now();
    let r = client.call("m", b"", Duration::from_millis(300)).expect("call");
    assert!(t0.elapsed() < Duration::from_millis(1200), "the call waited for the slow server");
    let statuses: Vec<_> = r.iter().map(|r| (r.status.clone(), r.payload.clone())).collect();
    assert!(statuses.contains(&(CallStatus::Executed, b"fast".to_vec())), "{statuses:?}");
    assert!(statuses.contains(&(CallStatus::TimedOut, Vec::new())), "{statuses:?}");
}

#[test]
fn a_dropped_server_is_gone_for_its_clients() {
    let node = node();
    let n = name("gone");
    let server = node.service_server(&n).method("m", raw(), raw(), |_: &[u8]| Ok(vec![])).build().unwrap();
    let client = node.service_client(&n).build();
    assert_eq!(client.wait_for_servers(1, T), Ok(1));
    assert!(client.call("m", b"", T).unwrap()[0].is_ok());
    drop(server);
    let deadline = Instant::now() + T;
    while !client.servers().is_empty() {
        assert!(Instant::now() < deadline, "the dropped server is still announced");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches!(client.call("m", b"", T), Err(shoal::error::CallError::NoServer { .. })));
}

#[test]
fn async_calls_run_their_callback() {
    let node = node();
    let n = name("async");
    let _server = node.service_server(&n).method("m", raw(), raw(), |r: &[u8]| Ok(r.to_vec())).build().unwrap();
    let client = Arc::new(node.service_client(&n).build());
    assert_eq!(client.wait_for_servers(1, T), Ok(1));
    let done = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..4u8 {
        let done = Arc::clone(&done);
        let tx = tx.clone();
        client.call_async("m", vec![i], T, move |r| {
            let r = r.expect("call");
            done.fetch_add(1, Ordering::SeqCst);
            tx.send(r[0].payload.clone()).unwrap();
        });
    }
    let mut got: Vec<Vec<u8>> = (0..4).map(|_| rx.recv_timeout(T).expect("callback")).collect();
    got.sort();
    assert_eq!(got, [vec![0], vec![1], vec![2], vec![3]]);
    assert_eq!(done.load(Ordering::SeqCst), 4);
}

// ----- bounds and bad input -------------------------------------------------------------------------------

mod bounds {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    /// A node whose runtime has small bounds. Every node with this configuration shares one runtime, so its
    /// session limit and counters too: the tests using it take turns (each holds the guard it returns).
    fn bounded_node() -> (std::sync::MutexGuard<'static, ()>, Node) {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut cfg = shoal::Config::default();
        cfg.service.max_request_bytes = 1024;
        cfg.service.handshake_timeout_ms = 200;
        cfg.service.idle_timeout_ms = 1000;
        cfg.service.max_sessions = 3;
        (turn, Node::init_with_config("service_bounds", cfg).expect("init"))
    }

    fn handshake() -> Vec<u8> {
        vec![0, 0, 0, 2, 1, 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1]
    }

    fn connect(port: u16) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(T)).unwrap();
        s
    }

    /// Reads until the server closes the connection; returns what it sent.
    fn until_closed(mut s: TcpStream) -> Vec<u8> {
        let mut all = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return all,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return all,
                Err(e) => panic!("the server did not close the connection: {e}"),
            }
        }
    }

    fn counts(node: &Node) -> shoal::monitor::ServiceCounts {
        node.snapshot().service_counts
    }

    #[test]
    fn bad_connections_are_closed_and_counted_and_good_ones_served() {
        let (_turn, node) = bounded_node();
        let n = name("bounds");
        let server = node.service_server(&n).method("m", raw(), raw(), |r: &[u8]| Ok(r.to_vec())).build().unwrap();
        let port = server.port();
        let before = counts(&node);

        // A request announcing more than max_request (1 KiB) after the handshake: closed, nothing allocated.
        let mut s = connect(port);
        s.write_all(&handshake()).unwrap();
        s.write_all(&[0, 0x10, 0, 0, 1, 3, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        let got = until_closed(s);
        assert_eq!(got.len(), 17, "the handshake was answered, then the connection closed");
        // A frame of a type the client must not send (a response).
        let mut s = connect(port);
        s.write_all(&handshake()).unwrap();
        s.write_all(&[0, 0, 0, 0, 1, 4, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
        until_closed(s);
        // A request frame whose payload is no protobuf: answered as failed, the connection kept.
        let mut s = connect(port);
        s.write_all(&handshake()).unwrap();
        s.write_all(&[0, 0, 0, 2, 1, 3, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]).unwrap();
        let mut buf = [0u8; 17 + 16];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(buf[17 + 5], 4, "a response frame");
        // A connection that never sends its handshake: closed after handshake_timeout_ms.
        let t0 = Instant::now();
        until_closed(connect(port));
        assert!(t0.elapsed() < Duration::from_secs(2));

        let c = counts(&node);
        assert!(c.frame_errors >= before.frame_errors + 2, "{c:?}");
        assert!(c.bad_requests > before.bad_requests, "{c:?}");
        assert!(c.handshake_failures > before.handshake_failures, "{c:?}");

        // Beyond max_sessions (3, the kept connection above among them): closed at once.
        let held: Vec<TcpStream> = (0..2).map(|_| connect(port)).collect();
        let extra = connect(port);
        let t0 = Instant::now();
        until_closed(extra);
        assert!(t0.elapsed() < Duration::from_millis(150), "closed at once, not by the handshake deadline");
        assert!(counts(&node).refused_max_sessions > before.refused_max_sessions);
        drop(held);
        drop(s);

        // The server still serves a proper client.
        let client = node.service_client(&n).build();
        assert_eq!(client.wait_for_servers(1, T), Ok(1));
        std::thread::sleep(Duration::from_millis(300));
        let r = client.call("m", b"ok", T).unwrap();
        assert_eq!(r[0].payload, b"ok");
        // A request over max_request is refused by the client before it is sent.
        assert!(matches!(client.call("m", &[0u8; 2048], T), Err(shoal::error::CallError::RequestTooLarge { .. })));
    }

    #[test]
    fn a_full_handler_queue_answers_busy_and_an_oversized_response_fails() {
        let mut cfg = shoal::Config::default();
        cfg.service.handler_threads = 1;
        cfg.service.max_pending = 1;
        cfg.service.max_response_bytes = 1024;
        let node = Node::init_with_config("service_busy", cfg).expect("init");
        let n = name("busy");
        let _server = node
            .service_server(&n)
            .method("slow", raw(), raw(), |_: &[u8]| {
                std::thread::sleep(Duration::from_millis(400));
                Ok(b"done".to_vec())
            })
            .method("big", raw(), raw(), |_: &[u8]| Ok(vec![0u8; 2048]))
            .build()
            .unwrap();
        let client = Arc::new(node.service_client(&n).build());
        assert_eq!(client.wait_for_servers(1, T), Ok(1));

        // One call runs (and perhaps one waits in the queue of one); the others find it full and are answered at once.
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&client);
                std::thread::spawn(move || c.call("slow", b"", T).unwrap().remove(0).status)
            })
            .collect();
        let statuses: Vec<CallStatus> = calls.into_iter().map(|h| h.join().unwrap()).collect();
        let busy = statuses.iter().filter(|s| matches!(s, CallStatus::Failed(m) if m.contains("server busy"))).count();
        let done = statuses.iter().filter(|s| **s == CallStatus::Executed).count();
        assert!(busy >= 1 && done >= 1 && busy + done == 4, "{statuses:?}");
        assert!(node.snapshot().service_counts.busy >= busy as u64);

        // A response over max_response (1 KiB) is not sent: the call fails with the reason.
        let r = client.call("big", b"", T).unwrap();
        assert!(matches!(&r[0].status, CallStatus::Failed(m) if m.contains("max_response")), "{r:?}");
    }

    #[test]
    fn an_idle_connection_is_closed_and_the_client_connects_again() {
        let (_turn, node) = bounded_node();
        let n = name("idle");
        let _server = node.service_server(&n).method("m", raw(), raw(), |r: &[u8]| Ok(r.to_vec())).build().unwrap();
        let client = node.service_client(&n).build();
        assert_eq!(client.wait_for_servers(1, T), Ok(1));
        assert!(client.call("m", b"1", T).unwrap()[0].is_ok());
        let before = counts(&node).idle_closed;
        // The deadline (1 s) is checked on the I/O thread's turns, at least every 500 ms.
        let deadline = Instant::now() + Duration::from_secs(3);
        while counts(&node).idle_closed == before {
            assert!(Instant::now() < deadline, "the idle connection was not closed");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The kept connection is gone; the call makes a new one.
        let r = client.call("m", b"2", T).unwrap();
        assert_eq!((r[0].status.clone(), r[0].payload.clone()), (CallStatus::Executed, b"2".to_vec()));
    }

    #[test]
    fn a_server_that_goes_mid_call_fails_the_call_and_its_successor_is_called() {
        let node = node();
        let n = name("restart");
        let server = node
            .service_server(&n)
            .method("m", raw(), raw(), |_: &[u8]| {
                std::thread::sleep(Duration::from_millis(500));
                Ok(b"late".to_vec())
            })
            .build()
            .unwrap();
        let client = Arc::new(node.service_client(&n).build());
        assert_eq!(client.wait_for_servers(1, T), Ok(1));
        let c = Arc::clone(&client);
        let call = std::thread::spawn(move || {
            let t0 = Instant::now();
            (c.call("m", b"", Duration::from_secs(10)).unwrap(), t0.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(server);
        let (r, took) = call.join().unwrap();
        assert!(matches!(r[0].status, CallStatus::Broken(_)), "{r:?}");
        assert!(took < Duration::from_secs(2), "the failure took {took:?}");

        let _again = node.service_server(&n).method("m", raw(), raw(), |_: &[u8]| Ok(b"new".to_vec())).build().unwrap();
        let deadline = Instant::now() + T;
        loop {
            if let Ok(r) = client.call("m", b"", T)
                && r.len() == 1
                && r[0].is_ok()
            {
                assert_eq!(r[0].payload, b"new");
                break;
            }
            assert!(Instant::now() < deadline, "the new server was not called");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
