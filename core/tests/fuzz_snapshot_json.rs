//! The `snapshot_json` fuzz target reaches the snapshot's JSON reader (feature `serde`): its body
//! (`fuzz/harness/snapshot_json.rs`, included here as the target includes it) runs every committed seed with the
//! target's oracle, and the seeds give what they hold.

#![cfg(feature = "serde")]

#[path = "../../fuzz/harness/snapshot_json.rs"]
mod harness;

use harness::Run;

#[test]
fn snapshot_json_seeds_reach_the_reader() {
    let dir = format!("{}/../fuzz/seeds/snapshot_json", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    // The monitor's scripted network at step 55 (shoal and eCAL endpoints, histograms, empty latency summaries).
    assert_eq!(run("fixture_step_55"), Run { read: true, topics: 14 });
    // A mean latency that is not a number and an infinite bandwidth, as peers may announce them.
    assert_eq!(run("one_topic_nan_and_inf"), Run { read: true, topics: 1 });
    // A histogram whose minimum is above its maximum (recording cannot make one; its percentiles would panic).
    assert_eq!(run("histogram_min_above_max"), Run { read: false, topics: 0 });
}
