//! Soak: one publisher, four subscriber processes, sequence-checked messages over the native ring for a while.
//!
//! Every message is self-checking (`shoal-peer`): each subscriber reports what it received, what its subscriber
//! counted as dropped, and anything torn or out of order. What must hold: nothing torn or out of order, and every
//! message either received or counted as a drop (no unexplained loss); the heap of every process (RssAnon, which
//! leaves out the shared-memory ring) is flat between the first quarter of the run and its end.
//!
//! `SHOAL_SOAK_SECONDS` sets the duration (default 20 here; `scripts/soak` runs an hour).

mod support;

use std::time::{Duration, Instant};

use support::{Proc, shoal_peer, topic};

/// Messages per second: fast enough to matter, paced so a loaded CI machine keeps up most of the time.
const RATE: u64 = 5000;
/// Heap growth allowed between the first quarter and the end of the run.
const HEAP_GROWTH_LIMIT_KB: u64 = 2048;

fn seconds() -> u64 {
    std::env::var("SHOAL_SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(20).max(4)
}

/// `RssAnon` of `pid` in KiB (private memory: heap and stacks, not the mapped ring).
fn rss_anon_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn one_to_four_sequence_checked_soak() {
    let secs = seconds();
    let count = RATE * secs;
    let t = topic("soak");
    let (count_s, rate_s) = (count.to_string(), RATE.to_string());
    let subs: Vec<Proc> = (0..4)
        .map(|i| {
            shoal_peer(
                &format!("soak sub {i}"),
                &["sub", "--topic", &t, "--count", &count_s, "--idle-ms", "5000"],
                None,
            )
        })
        .collect();
    for s in &subs {
        s.expect("ready", Duration::from_secs(20));
    }
    let args = ["pub", "--topic", &t, "--count", &count_s, "--rate", &rate_s, "--size", "1024", "--wait-subs", "4"];
    let mut publ = shoal_peer("soak pub", &args, None);
    publ.expect("matched", Duration::from_secs(20));
    let started = Instant::now();
    let pids: Vec<u32> = std::iter::once(publ.pid()).chain(subs.iter().map(Proc::pid)).collect();
    std::thread::sleep(Duration::from_secs(secs) / 4);
    let early: Vec<Option<u64>> = pids.iter().map(|&p| rss_anon_kb(p)).collect();
    std::thread::sleep((Duration::from_secs(secs) * 9 / 10).saturating_sub(started.elapsed()));
    let late: Vec<Option<u64>> = pids.iter().map(|&p| rss_anon_kb(p)).collect();

    let done = publ.expect("done", Duration::from_secs(secs + 60));
    assert_eq!(done["sent"], count, "{done}");
    for mut s in subs {
        let summary = s.expect("summary", Duration::from_secs(30));
        eprintln!("soak: {} {summary}", s.name());
        assert_eq!(summary["torn"], 0, "{summary}");
        assert_eq!(summary["out_of_order"], 0, "{summary}");
        let received = summary["received"].as_u64().expect("received");
        let drops = summary["drops"].as_u64().expect("drops");
        // A message is either received or counted as dropped: none lost without a count.
        assert_eq!(received + drops, count, "unexplained loss: {summary}");
        s.wait_success(Duration::from_secs(10));
    }
    publ.wait_success(Duration::from_secs(10));
    for ((pid, e), l) in pids.iter().zip(&early).zip(&late) {
        let (Some(e), Some(l)) = (e, l) else { panic!("no RssAnon for pid {pid}: {e:?} {l:?}") };
        eprintln!("soak: pid {pid} RssAnon {e} KiB after a quarter, {l} KiB near the end");
        assert!(l.saturating_sub(*e) <= HEAP_GROWTH_LIMIT_KB, "pid {pid}: heap grew from {e} to {l} KiB");
    }
}
