//! eCAL log messages as `shoal log` receives them. The input format and the oracle are described in
//! `../harness/log_decode.rs`, which holds the body (the test suite runs the seeds through it too:
//! `core/tests/fuzz_log_decode.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness/log_decode.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
