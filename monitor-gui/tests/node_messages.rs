//! The field plot and the inspector over a live node: `NodeMessages` follows several topics at once through
//! callback subscribers, and the plotted fields of each are taken from their messages.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_monitor::app::MonitorApp;
use shoal_monitor::fixture::{imu_payload, imu_type_info};
use shoal_monitor::signals::FieldPath;
use shoal_monitor::source::{MessageSource, NodeMessages, NodeSnapshots};

fn topics() -> [String; 2] {
    let pid = std::process::id();
    [format!("/fieldplot_{pid}/a"), format!("/fieldplot_{pid}/b")]
}

/// Two topics followed at once: the messages of each arrive, named by topic, none lost; a topic no longer followed
/// brings none.
#[test]
fn node_messages_follows_several_topics_and_stops_following() {
    let node = shoal::Node::init_with_config("fieldplot_follow", shoal::Config::default()).expect("node");
    let [a, b] = topics();
    let mut pubs: Vec<shoal::Publisher> =
        [&a, &b].iter().map(|t| node.publisher(t).type_info(imu_type_info()).create().expect("publisher")).collect();
    let mut source = NodeMessages::new(node.clone());
    let (ta, tb): (Arc<str>, Arc<str>) = (a.as_str().into(), b.as_str().into());
    source.follow(&[ta.clone(), tb.clone()]);
    for p in &pubs {
        p.wait_for_subscribers(1, Duration::from_secs(10)).expect("matched");
    }
    for i in 0..50u64 {
        for p in &mut pubs {
            p.send(&imu_payload(i, "imu", [i as f64, 0.0, 0.0], [0.0; 3])).expect("send");
        }
    }
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while got.len() < 100 && Instant::now() < until {
        source.poll(&mut got);
        std::thread::sleep(Duration::from_millis(10));
    }
    let count = |t: &Arc<str>, got: &[shoal_monitor::source::Message]| got.iter().filter(|m| m.topic == *t).count();
    assert_eq!((count(&ta, &got), count(&tb, &got)), (50, 50));
    assert_eq!(source.lost(&a) + source.lost(&b), 0);
    assert!(got.iter().all(|m| m.type_info.name == "pb.sensors.Imu"));
    // b is no longer followed: its messages do not come.
    source.follow(std::slice::from_ref(&ta));
    got.clear();
    for p in &mut pubs {
        p.send(&imu_payload(99, "imu", [1.0; 3], [0.0; 3])).expect("send");
    }
    let until = Instant::now() + Duration::from_secs(5);
    while count(&ta, &got) < 1 && Instant::now() < until {
        source.poll(&mut got);
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    source.poll(&mut got);
    assert_eq!((count(&ta, &got), count(&tb, &got)), (1, 0));
}

/// The monitor plots a field of each of two live topics.
#[test]
fn the_monitor_plots_fields_of_two_live_topics() {
    let node = shoal::Node::init_with_config("fieldplot_live", shoal::Config::default()).expect("node");
    let [a, b] = topics().map(|t| format!("{t}_live"));
    let mut pubs: Vec<shoal::Publisher> =
        [&a, &b].iter().map(|t| node.publisher(t).type_info(imu_type_info()).create().expect("publisher")).collect();
    let mut app = MonitorApp::manual(Box::new(NodeSnapshots(node.clone())), Box::new(NodeMessages::new(node.clone())));
    app.plot_field(&a, FieldPath::parse("accel.x").expect("path")).expect("fits");
    app.plot_field(&b, FieldPath::parse("gyro.z").expect("path")).expect("fits");
    app.refresh_now(); // follows both
    for p in &pubs {
        p.wait_for_subscribers(1, Duration::from_secs(10)).expect("matched");
    }
    for i in 0..20u64 {
        for p in &mut pubs {
            p.send(&imu_payload(i, "imu", [i as f64, 0.0, 0.0], [0.0, 0.0, -(i as f64)])).expect("send");
        }
    }
    let until = Instant::now() + Duration::from_secs(10);
    let done = |app: &MonitorApp| app.signals().list().iter().all(|s| s.messages == 20);
    while !done(&app) && Instant::now() < until {
        app.refresh_now();
        std::thread::sleep(Duration::from_millis(20));
    }
    let l = app.signals().list();
    assert!(done(&app), "{:?}", l.iter().map(|s| (&s.label, s.messages)).collect::<Vec<_>>());
    assert_eq!(l[0].last.map(|v| v.1), Some(19.0));
    assert_eq!(l[1].last.map(|v| v.1), Some(-19.0));
    assert!(l.iter().all(|s| s.undecodable == 0 && s.missing == 0 && !s.points().is_empty()));
}

/// Large messages the UI has not taken are bounded by bytes: of 40 messages of 1 MiB at most 16 wait, and every
/// other one is counted as lost.
#[test]
fn node_messages_queues_at_most_its_bytes_and_counts_the_rest() {
    use shoal_monitor::source::MESSAGE_QUEUE_BYTES;
    let node = shoal::Node::init_with_config("fieldplot_bytes", shoal::Config::default()).expect("node");
    let [t, _] = topics().map(|t| format!("{t}_large"));
    let mut publisher = node.publisher(&t).type_info(shoal::TypeInfo::raw("blob")).create().expect("publisher");
    let mut source = NodeMessages::new(node.clone());
    let topic: Arc<str> = t.as_str().into();
    source.follow(std::slice::from_ref(&topic));
    publisher.wait_for_subscribers(1, Duration::from_secs(10)).expect("matched");
    let blob = vec![7u8; 1 << 20];
    for _ in 0..40 {
        publisher.send(&blob).expect("send");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Not taken while they arrive, as by a UI that is not drawn; then taken once.
    let bound = MESSAGE_QUEUE_BYTES / blob.len();
    let until = Instant::now() + Duration::from_secs(10);
    while source.lost(&t) < (40 - bound) as u64 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut got = Vec::new();
    source.poll(&mut got);
    let lost = source.lost(&t);
    assert!(got.len() <= bound, "{} messages of 1 MiB queued", got.len());
    assert_eq!(got.len() as u64 + lost, 40, "{} taken, {lost} lost", got.len());
}

/// All followed topics together queue at most `MESSAGE_QUEUE_TOTAL_BYTES` (64 MiB) while the UI takes nothing:
/// five topics of 1 MiB messages, 20 each, could hold 80 MiB by their own bounds; the rest is counted as lost on
/// its topic, and a topic no longer followed gives its bytes back.
#[test]
fn node_messages_queue_at_most_their_total_bytes() {
    use shoal_monitor::source::{MESSAGE_QUEUE_BYTES, MESSAGE_QUEUE_TOTAL_BYTES};
    let node = shoal::Node::init_with_config("fieldplot_total", shoal::Config::default()).expect("node");
    let names: Vec<String> = (0..5).map(|i| format!("/fieldplot_{}/total_{i}", std::process::id())).collect();
    let topics: Vec<Arc<str>> = names.iter().map(|t| t.as_str().into()).collect();
    let mut source = NodeMessages::new(node.clone());
    source.follow(&topics);
    let mut pubs: Vec<_> = names
        .iter()
        .map(|t| node.publisher(t).type_info(shoal::TypeInfo::raw("blob")).create().expect("publisher"))
        .collect();
    for p in &pubs {
        p.wait_for_subscribers(1, Duration::from_secs(10)).expect("matched");
    }
    let blob = vec![7u8; 1 << 20];
    let per_topic = 20u64;
    assert!(per_topic as usize * blob.len() > MESSAGE_QUEUE_BYTES);
    for _ in 0..per_topic {
        for p in &mut pubs {
            p.send(&blob).expect("send");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = per_topic * names.len() as u64;
    let until = Instant::now() + Duration::from_secs(10);
    let lost = |s: &NodeMessages| names.iter().map(|t| s.lost(t)).sum::<u64>();
    while lost(&source) + ((source.queued_bytes() / blob.len()) as u64) < sent && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(source.queued_bytes() <= MESSAGE_QUEUE_TOTAL_BYTES, "{} bytes queued", source.queued_bytes());
    let mut got = Vec::new();
    source.poll(&mut got);
    assert!(got.len() * blob.len() <= MESSAGE_QUEUE_TOTAL_BYTES, "{} messages of 1 MiB queued", got.len());
    assert_eq!(got.len() as u64 + lost(&source), sent, "{} taken", got.len());
    assert_eq!(source.queued_bytes(), 0);
    // Queued, then unfollowed: the bytes leave the total with the topic.
    pubs[0].send(&blob).expect("send");
    let until = Instant::now() + Duration::from_secs(5);
    while source.queued_bytes() == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(source.queued_bytes(), blob.len());
    source.follow(&topics[1..]);
    assert_eq!(source.queued_bytes(), 0);
}
