//! Connection events inside one process: connects and disconnects of raw, typed and callback entities, a type
//! mismatch, drops of a full queue, and where the callbacks run.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use shoal::events::{DropCause, Event, Via};
use shoal::{Node, QueuePolicy, TypeInfo};

fn node() -> Node {
    Node::init_with_config("events_test", shoal::Config::default()).expect("init")
}

fn name(test: &str) -> String {
    format!("ev_{test}_{}", std::process::id())
}

/// A callback that sends each event with the name of the thread it ran on.
fn recorder() -> (impl FnMut(&Event) + Send + 'static, mpsc::Receiver<(Event, String)>) {
    let (tx, rx) = mpsc::channel();
    let cb = move |e: &Event| {
        let _ = tx.send((e.clone(), std::thread::current().name().unwrap_or("").to_owned()));
    };
    (cb, rx)
}

/// The next event that `pick` accepts, within 5 s (others are skipped).
fn next<T>(rx: &mpsc::Receiver<(Event, String)>, what: &str, pick: impl Fn(&Event) -> Option<T>) -> (T, String) {
    let until = Instant::now() + Duration::from_secs(5);
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok((e, thread)) => {
                if let Some(t) = pick(&e) {
                    return (t, thread);
                }
            }
            Err(_) => break,
        }
    }
    panic!("no {what} event within 5 s");
}

#[test]
fn same_process_connects_and_disconnects_reach_both_sides_on_the_events_thread() {
    let node = node();
    let t = name("connect");
    let (pub_cb, pub_rx) = recorder();
    let (sub_cb, sub_rx) = recorder();
    let publ = node.publisher(&t).on_event(pub_cb).create().expect("publisher");
    let sub = node.subscriber(&t).on_event(sub_cb).create().expect("subscriber");

    let (via, thread) = next(&pub_rx, "publisher connected", |e| match e {
        Event::Connected { peer, via } if peer.pid == std::process::id() => Some(via.clone()),
        _ => None,
    });
    assert_eq!(via, vec![Via::SameProcess]);
    assert_eq!(thread, "shoal-events", "callbacks run on the events thread");
    let (peer, _) = next(&sub_rx, "subscriber connected", |e| match e {
        Event::Connected { peer, via } if via == &[Via::SameProcess] => Some(peer.clone()),
        _ => None,
    });
    assert_eq!(peer.host_name, node.host_name());

    drop(sub);
    next(&pub_rx, "publisher disconnected", |e| matches!(e, Event::Disconnected { .. }).then_some(()));
    drop(publ);
}

#[test]
fn a_type_that_disagrees_is_reported_to_both_sides_once() {
    let node = node();
    let t = name("mismatch");
    let (pub_cb, pub_rx) = recorder();
    let (sub_cb, sub_rx) = recorder();
    let _publ = node.publisher(&t).type_info(TypeInfo::raw("demo.A")).on_event(pub_cb).create().expect("publisher");
    // A callback subscriber (typed and raw builders share the option).
    let _sub = node
        .subscriber(&t)
        .type_info(TypeInfo::raw("demo.B"))
        .callback(|_s: &shoal::Sample| {})
        .on_event(sub_cb)
        .create()
        .expect("subscriber");
    let ((theirs, ours), _) = next(&pub_rx, "publisher's type mismatch", |e| match e {
        Event::TypeMismatch { theirs, ours, .. } => Some((theirs.name.clone(), ours.name.clone())),
        _ => None,
    });
    assert_eq!((theirs.as_str(), ours.as_str()), ("demo.B", "demo.A"));
    let ((theirs, ours), _) = next(&sub_rx, "subscriber's type mismatch", |e| match e {
        Event::TypeMismatch { theirs, ours, .. } => Some((theirs.name.clone(), ours.name.clone())),
        _ => None,
    });
    assert_eq!((theirs.as_str(), ours.as_str()), ("demo.A", "demo.B"));

    // Types that agree produce no mismatch.
    let t2 = name("agree");
    let (cb, rx) = recorder();
    let _p2 = node.publisher(&t2).type_info(TypeInfo::raw("demo.A")).create().expect("publisher");
    let _s2 = node.subscriber(&t2).type_info(TypeInfo::raw("demo.A")).on_event(cb).create().expect("subscriber");
    next(&rx, "connected", |e| matches!(e, Event::Connected { .. }).then_some(()));
    std::thread::sleep(Duration::from_millis(200));
    assert!(rx.try_iter().all(|(e, _)| !matches!(e, Event::TypeMismatch { .. })));
}

#[test]
fn drops_of_a_full_queue_are_reported_with_their_count_and_cause() {
    let node = node();
    let t = name("drops");
    let (cb, rx) = recorder();
    let sub = node.subscriber(&t).queue(QueuePolicy::new(4, 0)).on_event(cb).create().expect("subscriber");
    let mut publ = node.publisher(&t).create().expect("publisher");
    next(&rx, "connected", |e| matches!(e, Event::Connected { .. }).then_some(()));
    for i in 0..100u32 {
        publ.send(&i.to_le_bytes()).expect("send");
    }
    // Reported with the next registration refresh (1 s).
    let (count, _) = next(&rx, "dropped", |e| match e {
        Event::Dropped { count, cause: DropCause::Queue } => Some(*count),
        _ => None,
    });
    assert_eq!(count, 96, "100 sent into a queue of 4");
    assert_eq!(sub.drops(), 96);
}
