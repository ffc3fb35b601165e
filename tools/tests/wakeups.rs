//! Wake-ups of sleeping subscriber processes through the publisher's waker thread.
//!
//! This test measures delivery latency, so it lives in its own test binary: cargo runs test binaries one after the
//! other, and the full-rate tests of `multiprocess.rs` running beside it on a 2-core machine would otherwise decide
//! its figures.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{PEER, Proc, assert_clean_summary, topic};

const T: Duration = Duration::from_secs(20);

fn spawn(args: &[&str]) -> Proc {
    let mut cmd = Command::new(PEER);
    cmd.args(args);
    Proc::spawn("shoal-peer", cmd)
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
