//! `shoal::monitor::Snapshot` read from JSON, as a saved monitor snapshot holds it. The input format and the oracle
//! are described in `../harness/snapshot_json.rs`, which holds the body (the test suite runs the seeds through it
//! too: `core/tests/fuzz_snapshot_json.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness/snapshot_json.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
