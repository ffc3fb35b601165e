//! The body of the `snapshot_json` fuzz target, also run on the committed seeds by `core/tests/fuzz_snapshot_json.rs`.
//!
//! Input: the JSON text of a `shoal::monitor::Snapshot` (feature `serde`), as a saved monitor snapshot holds it
//! (`shoal-monitor --open` reads its `snapshot` and `before` this way).
//!
//! Oracle: besides no panic: a snapshot that reads is summed up (`Snapshot::topic_summaries`, what the monitor's view
//! is built from) and every latency histogram in it answers its percentiles within its minimum and maximum; written
//! again, it reads back and writes the same text (numbers exactly, infinities and NaN as text).

use shoal::monitor::Snapshot;

/// What one input did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // the fuzz target only runs it
pub(crate) struct Run {
    /// The input read as a snapshot.
    pub(crate) read: bool,
    /// Its publishers and subscribers.
    pub(crate) topics: usize,
}

pub(crate) fn run(data: &[u8]) -> Run {
    let Ok(snap) = serde_json::from_slice::<Snapshot>(data) else {
        return Run { read: false, topics: 0 };
    };
    let summaries = snap.topic_summaries();
    assert!(summaries.len() <= snap.topics.len());
    for t in &snap.topics {
        let Some(s) = &t.shoal else { continue };
        for c in &s.connections {
            let h = &c.latency;
            for q in [0.0, 0.5, 0.99, 1.0] {
                if let (Some(p), Some(lo), Some(hi)) = (h.percentile(q), h.min_ns(), h.max_ns()) {
                    assert!((lo..=hi).contains(&p), "percentile {q}: {p} outside {lo}..={hi}");
                }
            }
        }
    }
    let text = serde_json::to_vec(&snap).expect("a snapshot that was read is written");
    let again: Snapshot = serde_json::from_slice(&text).expect("a written snapshot reads back");
    assert_eq!(serde_json::to_vec(&again).expect("written"), text, "written again, the same text");
    Run { read: true, topics: snap.topics.len() }
}
