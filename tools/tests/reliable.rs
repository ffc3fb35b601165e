//! Reliable delivery over the native ring between two shoal processes: unpaced 64 B and 1 MB streams from a reliable
//! publisher to a reliable subscriber lose nothing; a reliable subscriber that is killed (SIGKILL) or stopped
//! (SIGSTOP) never blocks the publisher for longer than its timeout, and is counted as taken out of flow control.

mod support;

use std::time::Duration;

use support::{assert_clean_summary, shoal_peer, topic};

fn sub_args<'a>(t: &'a str, count: &'a str) -> Vec<&'a str> {
    vec!["sub", "--topic", t, "--count", count, "--idle-ms", "10000", "--reliable"]
}

fn pub_args<'a>(t: &'a str, count: &'a str, size: &'a str, reliable_ms: &'a str) -> Vec<&'a str> {
    vec![
        "pub",
        "--topic",
        t,
        "--count",
        count,
        "--size",
        size,
        "--rate",
        "0",
        "--wait-subs",
        "1",
        "--reliable-ms",
        reliable_ms,
    ]
}

fn lossless(name: &str, count: u64, size: usize) {
    let t = topic(name);
    let (count_s, size_s) = (count.to_string(), size.to_string());
    let mut sub = shoal_peer("shoal sub", &sub_args(&t, &count_s), None);
    sub.expect("ready", Duration::from_secs(10));
    let mut publ = shoal_peer("shoal pub", &pub_args(&t, &count_s, &size_s, "10000"), None);
    let done = publ.expect("done", Duration::from_secs(60));
    let summary = sub.expect("summary", Duration::from_secs(30));
    eprintln!("{name}: publisher {done}\n{name}: subscriber {summary}");
    assert_eq!(done["sent"], count, "{done}");
    assert_clean_summary(&summary, count);
    assert_eq!(done["reliable_evicted_dead"], 0, "{done}");
    assert_eq!(done["reliable_evicted_stalled"], 0, "{done}");
    sub.wait_success(Duration::from_secs(5));
    publ.wait_success(Duration::from_secs(10));
}

#[test]
fn an_unpaced_64_byte_stream_loses_nothing_when_both_ends_are_reliable() {
    // 200k messages through a 4096-slot ring: an unpaced writer laps a best-effort reader many times over.
    lossless("reliable_64", 200_000, 64);
}

#[test]
fn an_unpaced_1_mb_stream_loses_nothing_when_both_ends_are_reliable() {
    // 300 messages through a ring of 16 slots of 1 MiB.
    lossless("reliable_1mb", 300, 1_000_000);
}

/// A reliable publisher (timeout 300 ms) streams unpaced to a reliable subscriber that `disturb` kills or stops
/// after its first message; the publisher finishes, its longest send is bounded by the timeout (plus scheduling
/// slack on a loaded machine), and the subscriber is counted as taken out of flow control.
fn publisher_not_blocked(name: &str, disturb: impl FnOnce(&mut support::Proc)) {
    let t = topic(name);
    let count = "100000";
    let mut sub = shoal_peer("shoal sub", &sub_args(&t, count), None);
    sub.expect("ready", Duration::from_secs(10));
    let mut publ = shoal_peer("shoal pub", &pub_args(&t, count, "64", "300"), None);
    sub.expect("first", Duration::from_secs(15));
    disturb(&mut sub);
    let done = publ.expect("done", Duration::from_secs(30));
    eprintln!("{name}: publisher {done}");
    assert_eq!(done["sent"], 100_000, "{done}");
    let evicted =
        done["reliable_evicted_dead"].as_u64().unwrap_or(0) + done["reliable_evicted_stalled"].as_u64().unwrap_or(0);
    assert_eq!(evicted, 1, "the subscriber was taken out of flow control once: {done}");
    let gap = done["max_send_gap_us"].as_u64().expect("max_send_gap_us");
    assert!(gap < 1_300_000, "one send waited at most the 300 ms timeout (+ slack): {gap} µs");
    publ.wait_success(Duration::from_secs(10));
}

#[test]
fn a_killed_reliable_subscriber_never_blocks_the_publisher_beyond_the_timeout() {
    publisher_not_blocked("reliable_killed", |sub| sub.sigkill());
}

#[test]
fn a_stopped_reliable_subscriber_is_taken_out_after_the_timeout() {
    publisher_not_blocked("reliable_stopped", |sub| sub.signal(libc::SIGSTOP));
}
