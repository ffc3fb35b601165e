//! The public API inside one process: same-process delivery, pull and callback forms, loans, errors, snapshot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal::monitor::TopicDirection;
use shoal::{MatchTimeout, Node, RecvError, TypeInfo};

fn node() -> Node {
    Node::init_with_config("node_test", shoal::Config::default()).expect("init")
}

fn topic(name: &str) -> String {
    format!("node_{name}_{}", std::process::id())
}

const T: Duration = Duration::from_secs(5);

#[test]
fn same_process_pull_delivers_payload_and_metadata() {
    let node = node();
    let t = topic("pull");
    let sub = node.subscriber(&t).create().expect("subscriber");
    let mut publ =
        node.publisher(&t).type_info(TypeInfo::new("demo.Text", "raw", b"desc".to_vec())).create().expect("publisher");
    assert_eq!(publ.wait_for_subscribers(1, T), Ok(1));
    assert_eq!(sub.wait_for_publishers(1, T), Ok(1));
    for i in 1..=3u8 {
        publ.send(&[i; 10]).expect("send");
    }
    for i in 1..=3u64 {
        let s = sub.recv_timeout(T).expect("recv");
        assert_eq!(s.payload(), &[i as u8; 10]);
        assert_eq!(s.clock(), i);
        assert_eq!(s.publisher_id(), publ.id());
        assert_eq!(s.type_info().name, "demo.Text");
        assert_eq!(s.type_info().descriptor, b"desc");
        assert_eq!(s.topic(), t);
        let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
        assert!((now_us - s.send_time_us()).abs() < 5_000_000);
    }
    assert!(sub.try_recv().is_none());
    assert!(matches!(sub.recv_timeout(Duration::from_millis(20)), Err(RecvError::Timeout)));
}

#[test]
fn loan_typestate_and_recv_with() {
    let node = node();
    let t = topic("loan");
    let sub = node.subscriber(&t).create().expect("subscriber");
    let mut publ = node.publisher(&t).type_info(TypeInfo::raw("bytes")).create().expect("publisher");
    let loan = publ.loan(100_000).expect("loan");
    assert_eq!(loan.len(), 100_000);
    // `loan.send()` does not compile here: only a written loan can be sent.
    loan.write(|b| b.fill(9)).send();
    // Same process: the payload is in this process's memory and nobody writes it any more, so it is lent in place.
    let sum: u64 = sub
        .recv_with(Some(T), |s| {
            let p = s.payload();
            assert_eq!(p.as_slice().map(<[u8]>::len), Some(p.len()), "a same-process payload is stable");
            p.as_slice().unwrap_or_default().iter().map(|&b| u64::from(b)).sum()
        })
        .expect("recv_with");
    assert_eq!(sum, 900_000);
    // An unsent loan sends nothing.
    drop(publ.loan(10).expect("loan"));
    assert!(sub.try_recv().is_none());
}

#[test]
fn callback_subscriber_runs_on_the_doorbell_thread() {
    let node = node();
    let t = topic("callback");
    let got = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicU64::new(0));
    let (g, c) = (Arc::clone(&got), Arc::clone(&count));
    let sub = node
        .subscriber(&t)
        .callback(move |s| {
            g.lock().unwrap().push(s.payload().to_vec());
            c.fetch_add(1, Ordering::SeqCst);
            assert_eq!(std::thread::current().name(), Some("shoal-doorbell"));
        })
        .create()
        .expect("subscriber");
    let mut publ = node.publisher(&t).type_info(TypeInfo::raw("bytes")).create().expect("publisher");
    for i in 0..50u32 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    let deadline = Instant::now() + T;
    while count.load(Ordering::SeqCst) < 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 50);
    assert_eq!(sub.received(), 50);
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p, &(i as u32).to_le_bytes());
    }
}

#[test]
fn empty_topic_is_an_error() {
    let node = node();
    assert!(matches!(node.publisher("").create(), Err(shoal::CreateError::EmptyTopic)));
    assert!(matches!(node.subscriber("").create(), Err(shoal::CreateError::EmptyTopic)));
}

#[test]
fn snapshot_lists_own_process_and_topics_until_dropped() {
    let node = node();
    let t = topic("snapshot");
    let publ = node.publisher(&t).type_info(TypeInfo::raw("snap.Type")).create().expect("publisher");
    let sub = node.subscriber(&t).create().expect("subscriber");
    let find = |want_pub: bool, want_sub: bool| {
        let deadline = Instant::now() + T;
        loop {
            let snap = node.snapshot();
            let has = |d: TopicDirection| snap.topics.iter().any(|e| e.topic_name == t && e.direction == d);
            let me = snap.processes.iter().any(|p| p.is_self && p.pid == std::process::id());
            if me && has(TopicDirection::Publisher) == want_pub && has(TopicDirection::Subscriber) == want_sub {
                return snap;
            }
            assert!(Instant::now() < deadline, "snapshot never showed pub={want_pub} sub={want_sub}: {snap:#?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let snap = find(true, true);
    let entry = snap.topics.iter().find(|e| e.topic_name == t && e.direction == TopicDirection::Publisher).unwrap();
    assert_eq!(entry.type_info.name, "snap.Type");
    assert_eq!(entry.entity_id, publ.id());
    assert_eq!(entry.host_name, node.host_name());
    assert!(entry.layers.iter().any(|l| l == "shoal_ring"), "{entry:?}");
    // The page size its ring got, as its registration announces it: 2 MB pages where /dev/hugepages is a hugetlbfs
    // with free pages (`huge_pages = auto`, the default), the normal 4 KiB ones where there is no such directory.
    let page_kb = entry.ring_page_kb.expect("a shoal publisher announces its ring's pages");
    assert!(page_kb == 4 || page_kb == 2048, "{entry:?}");
    if !std::path::Path::new("/dev/hugepages").is_dir() {
        assert_eq!(page_kb, 4, "{entry:?}");
    }
    drop(publ);
    find(false, true);
    drop(sub);
    find(false, false);
}

#[test]
fn subscriber_statistics_reach_the_snapshot() {
    let node = node();
    let t = topic("stats");
    let mut publ = node.publisher(&t).create().expect("publisher");
    let sub = node.subscriber(&t).create().expect("subscriber");
    for i in 0..100u32 {
        publ.send(&[i as u8; 64]).expect("send");
        sub.recv_timeout(T).expect("recv");
    }
    // The next periodic registration (every second) carries the counts; the process reads its own.
    let deadline = Instant::now() + T;
    let (sub_entry, pub_entry) = loop {
        let snap = node.snapshot();
        let find = |d| snap.topics.iter().find(|e| e.topic_name == t && e.direction == d).cloned();
        if let (Some(s), Some(p)) = (find(TopicDirection::Subscriber), find(TopicDirection::Publisher))
            && s.shoal.as_ref().is_some_and(|x| x.connections.first().is_some_and(|c| c.messages == 100))
        {
            break (s, p);
        }
        assert!(Instant::now() < deadline, "no statistics of 100 messages in the snapshot: {snap:#?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let stats = sub_entry.shoal.expect("shoal statistics");
    let conn = &stats.connections[0];
    assert_eq!((conn.publisher_id, conn.via, conn.same_host), (publ.id(), shoal::monitor::Via::SameProcess, true));
    assert_eq!((conn.bytes, conn.last_size, conn.drops, stats.bytes), (6400, 64, 0, 6400));
    // eCAL's figures: every message's latency counted, plausible on one host (well under a second).
    assert_eq!(sub_entry.latency.count, 100);
    assert!(sub_entry.latency.min_us >= 0.0 && sub_entry.latency.max_us < 1e6, "{:?}", sub_entry.latency);
    assert!(sub_entry.latency.mean_us <= sub_entry.latency.max_us);
    assert_eq!(sub_entry.data_clock, 100);
    assert_eq!((pub_entry.data_clock, pub_entry.shoal.expect("publisher statistics").bytes), (100, 6400));
}

#[test]
fn drops_the_application_reports_reach_the_snapshot() {
    let node = node();
    let t = topic("app_drops");
    let mut publ = node.publisher(&t).create().expect("publisher");
    let sub = node.subscriber(&t).create().expect("subscriber");
    publ.send(b"x").expect("send");
    sub.recv_timeout(T).expect("recv");
    assert_eq!(sub.drops(), 0);
    sub.count_dropped(3);
    publ.count_dropped(2);
    assert_eq!(sub.drops(), 3, "counted on the subscriber at once");
    // The next periodic registration carries them as eCAL's message_drops of each entity.
    let deadline = Instant::now() + T;
    loop {
        let snap = node.snapshot();
        let drops = |d| snap.topics.iter().find(|e| e.topic_name == t && e.direction == d).map(|e| e.message_drops);
        if (drops(TopicDirection::Subscriber), drops(TopicDirection::Publisher)) == (Some(3), Some(2)) {
            break;
        }
        assert!(Instant::now() < deadline, "drops 3 (subscriber) and 2 (publisher) not in the snapshot: {snap:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn waiting_for_peers_gives_how_many_matched_or_a_typed_timeout() {
    let node = node();
    let t = topic("wait_peers");
    let sub = node.subscriber(&t).create().expect("subscriber");
    let wait = Duration::from_millis(200);
    let started = Instant::now();
    assert_eq!(sub.wait_for_publishers(1, wait), Err(MatchTimeout { wanted: 1, matched: 0, timeout: wait }));
    assert!(started.elapsed() >= wait, "waited the whole timeout: {:?}", started.elapsed());
    let publ = node.publisher(&t).create().expect("publisher");
    let other = node.subscriber(&t).create().expect("second subscriber");
    assert_eq!(sub.wait_for_publishers(1, T), Ok(1));
    assert_eq!(publ.wait_for_subscribers(2, T), Ok(2));
    let e = publ.wait_for_subscribers(3, Duration::from_millis(50)).expect_err("only two subscribers");
    assert_eq!((e.wanted, e.matched), (3, 2));
    assert_eq!(e.to_string(), "2 of 3 matched within 50ms");
    // Zero is matched at once.
    assert_eq!(sub.wait_for_publishers(0, Duration::ZERO), Ok(1));
    drop(other);
}
