//! History for late joiners inside one process: a subscriber that asks gets the publisher's kept messages, in
//! order and once, then live data with no gap; one that does not ask gets live data only; the history is bounded
//! by its depth and by `[shoal_history] max_bytes`.
//!
//! Run with `--nocapture` to see the first clocks each subscriber received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal::{History, Node};

const T: Duration = Duration::from_secs(5);

fn node() -> Node {
    Node::init_with_config("history_test", shoal::Config::default()).expect("init")
}

fn topic(name: &str) -> String {
    format!("history_{name}_{}", std::process::id())
}

/// Takes every message there is now (after the connection's history arrived) and gives their clocks.
fn drain(sub: &shoal::Subscriber) -> Vec<u64> {
    let mut out = Vec::new();
    while let Ok(s) = sub.recv_timeout(Duration::from_millis(200)) {
        out.push(s.clock());
    }
    out
}

#[test]
fn a_late_subscriber_gets_the_history_then_live_data_with_no_gap_and_no_repeat() {
    let node = node();
    let t = topic("late");
    let mut publ = node.publisher(&t).history(10).create().expect("publisher");
    for i in 1..=30u64 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    let sub = node.subscriber(&t).history(true).create().expect("subscriber");
    let live = node.subscriber(&t).create().expect("subscriber without history");
    for i in 31..=40u64 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    let got = drain(&sub);
    println!("same process, history(10), subscriber history(true): first clocks {:?}", &got[..got.len().min(15)]);
    assert_eq!(got, (21..=40).collect::<Vec<u64>>());
    let live = drain(&live);
    println!("same process, subscriber without history: first clocks {:?}", &live[..live.len().min(15)]);
    assert_eq!(live, (31..=40).collect::<Vec<u64>>());
    assert_eq!(sub.drops(), 0);
}

#[test]
fn a_subscriber_gets_at_most_the_depth_it_asks_for() {
    let node = node();
    let t = topic("depth");
    let mut publ = node.publisher(&t).history(10).create().expect("publisher");
    for i in 1..=30u64 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    let sub = node.subscriber(&t).history(3u32).create().expect("subscriber");
    publ.send(&31u64.to_le_bytes()).expect("send");
    assert_eq!(drain(&sub), [28, 29, 30, 31]);
}

#[test]
fn the_history_is_bounded_by_the_byte_budget() {
    let mut config = shoal::Config::default();
    config.history.max_bytes = 1000;
    let node = Node::init_with_config("history_test_bytes", config).expect("init");
    let t = topic("bytes");
    let mut publ = node.publisher(&t).history(100).create().expect("publisher");
    for i in 1..=30u8 {
        publ.send(&[i; 300]).expect("send");
    }
    let sub = node.subscriber(&t).history(true).create().expect("subscriber");
    // Three of 300 bytes fit 1000.
    assert_eq!(drain(&sub), [28, 29, 30]);
}

#[test]
fn a_concurrent_publisher_leaves_no_gap_and_no_repeat_between_history_and_live() {
    let node = node();
    let t = topic("race");
    let mut publ = node.publisher(&t).history(50).create().expect("publisher");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let sender = std::thread::spawn(move || {
        let mut i = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            i += 1;
            publ.send(&i.to_le_bytes()).expect("send");
            if i.is_multiple_of(64) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        publ
    });
    std::thread::sleep(Duration::from_millis(20));
    // Subscribers join while the publisher sends; each sees one run of clocks.
    let subs: Vec<shoal::Subscriber> = (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(3));
            node.subscriber(&t).history(true).queue(shoal::QueuePolicy::new(1 << 16, 0)).create().expect("sub")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _publ = sender.join().expect("sender");
    for sub in &subs {
        let got: Vec<u64> = std::iter::from_fn(|| sub.try_recv()).map(|s| s.clock()).collect();
        assert!(got.len() > 50, "history and live: {}", got.len());
        assert!(got.windows(2).all(|w| w[1] == w[0] + 1), "a gap or a repeat: {got:?}");
        assert_eq!(sub.drops(), 0);
    }
}

#[test]
fn a_callback_subscriber_gets_the_history_first() {
    let node = node();
    let t = topic("callback");
    let mut publ = node.publisher(&t).history(5).create().expect("publisher");
    for i in 1..=8u64 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let _sub = node
        .subscriber(&t)
        .callback(move |s| sink.lock().unwrap().push(s.clock()))
        .history(History::All)
        .create()
        .expect("subscriber");
    publ.send(&9u64.to_le_bytes()).expect("send");
    let until = std::time::Instant::now() + T;
    while seen.lock().unwrap().len() < 6 && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(*seen.lock().unwrap(), [4, 5, 6, 7, 8, 9]);
}

#[test]
fn the_publisher_counts_what_it_keeps_and_sent_again_in_registration() {
    let node = node();
    let t = topic("counted");
    let mut publ = node.publisher(&t).history(4).create().expect("publisher");
    for i in 1..=10u8 {
        publ.send(&[i; 10]).expect("send");
    }
    let _a = node.subscriber(&t).history(true).create().expect("subscriber");
    let _b = node.subscriber(&t).history(2u32).create().expect("subscriber");
    let until = std::time::Instant::now() + T;
    loop {
        let snap = node.snapshot();
        let entry = snap.topics.iter().find(|e| e.topic_name == t && e.entity_id == publ.id()).cloned();
        if let Some(h) = entry.and_then(|e| e.shoal).filter(|h| h.history_kept > 0) {
            assert_eq!(
                (h.history_kept, h.history_kept_bytes, h.history_resent, h.history_resent_bytes),
                (4, 40, 6, 60)
            );
            break;
        }
        assert!(std::time::Instant::now() < until, "the publisher's history counters never reached the snapshot");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_history_deeper_than_the_default_queue_arrives_whole() {
    let node = node();
    let t = topic("deep");
    let mut publ = node.publisher(&t).history(200).create().expect("publisher");
    for i in 1..=300u64 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    // The default queue keeps 16 messages (and 1 MiB): a subscriber asking for history keeps what it asks for.
    let sub = node.subscriber(&t).history(true).create().expect("subscriber");
    assert_eq!(drain(&sub), (101..=300).collect::<Vec<u64>>());
    assert_eq!(sub.drops(), 0);
}
