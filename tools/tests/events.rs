//! Connection events across processes: a shoal publisher in another process connects over the native ring, its
//! type disagreement is reported, its clean exit disconnects; a shoal subscriber in another process connects to a
//! publisher of this one; an eCAL 6.1.1 publisher connects over eCAL's UDP layer.

mod support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use shoal::TypeInfo;
use shoal::events::{Event, Via};
use support::{ecal_peer, shoal_peer, topic};

fn node() -> shoal::Node {
    shoal::Node::init_with_config("events_test", shoal::Config::default()).expect("shoal node")
}

fn recorder() -> (impl FnMut(&Event) + Send + 'static, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    (
        move |e: &Event| {
            let _ = tx.send(e.clone());
        },
        rx,
    )
}

/// The next event `pick` accepts within `within` (others are skipped).
fn next<T>(rx: &mpsc::Receiver<Event>, what: &str, within: Duration, pick: impl Fn(&Event) -> Option<T>) -> T {
    let until = Instant::now() + within;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(e) => {
                if let Some(t) = pick(&e) {
                    return t;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no {what} event within {within:?}");
}

const MATCH: Duration = Duration::from_secs(15);

#[test]
fn a_publisher_in_another_process_connects_over_the_ring_disagrees_and_disconnects() {
    let node = node();
    let t = topic("events_ring");
    let (cb, rx) = recorder();
    let sub = node.subscriber(&t).type_info(TypeInfo::raw("shoal.test.Other")).on_event(cb).create().expect("sub");
    let mut publ = shoal_peer(
        "shoal-peer pub",
        &["pub", "--topic", &t, "--count", "150", "--rate", "50", "--wait-ms", "30000"],
        None,
    );
    publ.expect("ready", Duration::from_secs(10));
    let pid = publ.pid();
    let (peer, via) = next(&rx, "connected", MATCH, |e| match e {
        Event::Connected { peer, via } => Some((peer.clone(), via.clone())),
        _ => None,
    });
    assert_eq!(peer.pid, pid, "{peer:?}");
    assert!(peer.process_name.ends_with("shoal-peer"), "{peer:?}");
    assert_eq!(via, vec![Via::ShoalRing], "same host, shoal: the native ring");
    let (theirs, ours) = next(&rx, "type mismatch", MATCH, |e| match e {
        Event::TypeMismatch { peer, theirs, ours } if peer.pid == pid => Some((theirs.name.clone(), ours.name.clone())),
        _ => None,
    });
    assert_eq!((theirs.as_str(), ours.as_str()), ("shoal.test.Pattern", "shoal.test.Other"));

    // A clean exit (after its 150 messages) unregisters: the subscriber hears of it at once, not after the
    // registration timeout.
    publ.wait_exit(Duration::from_secs(30)).expect("the publisher exits after its messages");
    let stopped = Instant::now();
    let gone = next(&rx, "disconnected", MATCH, |e| match e {
        Event::Disconnected { peer } => Some(peer.pid),
        _ => None,
    });
    assert_eq!(gone, pid);
    let took = stopped.elapsed();
    if took >= Duration::from_secs(5) {
        // Seen once in CI (9.8 s: the registration timeout's shape): say whether this side's socket or decoder lost
        // the peer's unregistration.
        let snap = node.snapshot();
        panic!(
            "Disconnected took {took:?} (the unregistration was not seen); this node's socket drops {:?}, \
             registration counters {:?}",
            snap.socket_drops, snap.registration
        );
    }
    drop(sub);
}

#[test]
fn a_subscriber_in_another_process_connects_to_a_publisher_of_this_one() {
    let node = node();
    let t = topic("events_pub");
    let (cb, rx) = recorder();
    let mut publ = node.publisher(&t).on_event(cb).create().expect("publisher");
    let sub = shoal_peer("shoal-peer sub", &["sub", "--topic", &t, "--count", "5"], None);
    sub.expect("ready", Duration::from_secs(10));
    let (pid, via) = next(&rx, "connected", MATCH, |e| match e {
        Event::Connected { peer, via } => Some((peer.pid, via.clone())),
        _ => None,
    });
    assert_eq!(pid, sub.pid());
    assert_eq!(via, vec![Via::ShoalRing]);
    let payload = vec![0u8; 64];
    for _ in 0..5 {
        publ.send(&payload).expect("send");
    }
}

#[test]
fn an_ecal_publisher_connects_over_udp() {
    let node = node();
    let t = topic("events_ecal");
    let (cb, rx) = recorder();
    let _sub = node.subscriber(&t).on_event(cb).create().expect("sub");
    let epub = ecal_peer(
        "eCAL pub.py",
        "pub.py",
        &["--topic", &t, "--count", "0", "--rate", "20", "--layer", "udp", "--unit", "events_ecal_pub"],
    );
    epub.expect("ready", Duration::from_secs(20));
    let (peer, via) = next(&rx, "connected", MATCH, |e| match e {
        Event::Connected { peer, via } => Some((peer.clone(), via.clone())),
        _ => None,
    });
    assert_eq!(peer.pid, epub.pid(), "{peer:?}");
    assert_eq!(peer.unit_name, "events_ecal_pub", "{peer:?}");
    assert_eq!(via, vec![Via::Udp], "an eCAL publisher with only UDP");
}
