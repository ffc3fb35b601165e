//! Multi-process tests whose assertions are about time: how soon a late subscriber gets its first message, how soon
//! sleeping subscribers are woken.
//!
//! They live in their own test binary because cargo runs test binaries one after the other: beside the full-rate
//! tests of `multiprocess.rs` on a 2-core machine the scheduler, not shoal, would decide their figures. The two here
//! are light (1000 and 20 msg/s) and may run side by side.

mod support;

use std::time::Duration;

use support::{Proc, assert_clean_summary, check_summary, shoal_peer, topic};

const T: Duration = Duration::from_secs(20);

fn spawn(args: &[&str]) -> Proc {
    shoal_peer("shoal-peer", args, None)
}

/// Three subscriber processes asleep on their doorbells between messages: every send finds several sleepers and hands
/// their wake-ups to the publisher's waker thread. Each message must wake each of them at once. A lost wake-up leaves
/// a subscriber asleep until the next message wakes it (50 ms later at 20 msg/s) or its doorbell wait's 100 ms safety
/// timeout ends, so its delivery latency is about 50 ms or more; a prompt wake-up takes well under a millisecond,
/// which leaves 30 ms for a busy machine's scheduling.
#[test]
fn sleeping_subscribers_in_three_processes_are_woken_by_every_message() {
    let t = topic("three_sleepers");
    let subs: Vec<Proc> = (0..3).map(|_| spawn(&["sub", "--topic", &t, "--count", "50"])).collect();
    for s in &subs {
        s.expect("ready", T);
    }
    let mut publ = spawn(&["pub", "--topic", &t, "--count", "50", "--rate", "20", "--size", "512", "--wait-subs", "3"]);
    for s in &subs {
        let summary = s.expect("summary", T);
        assert_clean_summary(&summary, 50);
        let max_us = summary["max_latency_us"].as_u64().expect("max_latency_us");
        assert!(max_us < 30_000, "a subscriber slept through a message ({max_us} us): {summary}");
    }
    publ.wait_success(T);
}

#[test]
fn late_joiner_gets_its_first_message_quickly() {
    let t = topic("late_joiner");
    let mut publ = spawn(&["pub", "--topic", &t, "--count", "0", "--rate", "1000", "--wait-subs", "0"]);
    publ.expect("matched", T);
    std::thread::sleep(Duration::from_millis(1500));
    let mut sub = spawn(&["sub", "--topic", &t, "--count", "200"]);
    let first = sub.expect("first", T);
    let since_match = first["since_match_ms"].as_f64().expect("since_match_ms");
    // Within 50 ms of the match (messages come every 1 ms), not a registration period (1 s) later.
    assert!(since_match < 50.0, "first message {since_match} ms after the match");
    let s = sub.expect("summary", T);
    check_summary(&s, 200, 1);
    sub.wait_success(T);
    publ.sigkill(); // its files are removed when `publ` is dropped
}
