//! A process with 100 topics runs at most 3 threads that shoal started (the I/O thread, the doorbell thread, and the
//! waker thread once a publisher serves two or more subscriber processes).

use std::time::Duration;

fn threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(Result::ok)
        .map(|e| std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_string())
        .collect()
}

#[test]
fn hundred_topics_use_at_most_three_shoal_threads() {
    let before = threads().len();
    let node = shoal::Node::init_with_config("threads_test", shoal::Config::default()).expect("init");
    let tag = std::process::id();
    let mut pubs = Vec::new();
    let mut subs = Vec::new();
    let mut cb_subs = Vec::new();
    for i in 0..100 {
        let topic = format!("threads_{tag}_{i}");
        pubs.push(node.publisher(&topic).type_info(shoal::TypeInfo::raw("t")).create().expect("publisher"));
        subs.push(node.subscriber(&topic).create().expect("subscriber"));
        cb_subs.push(node.subscriber(&topic).callback(|_s| {}).create().expect("callback subscriber"));
    }
    for (i, p) in pubs.iter_mut().enumerate() {
        p.send(format!("m{i}").as_bytes()).expect("send");
    }
    for (i, s) in subs.iter().enumerate() {
        let got = s.recv_timeout(Duration::from_secs(5)).expect("receive");
        assert_eq!(got.payload(), format!("m{i}").as_bytes());
    }
    std::thread::sleep(Duration::from_millis(200));
    let after = threads();
    let started = after.len() - before;
    assert!(started <= 3, "shoal started {started} threads: {after:?}");
    drop((pubs, subs, cb_subs, node));
}
