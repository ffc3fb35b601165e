//! The frames of eCAL's service protocol and the request and response messages they carry. The input format and the
//! oracle are described in `../harness/service_frame.rs`, which holds the body (the test suite runs the seeds through
//! it too: `core/tests/fuzz_service_frame.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness/service_frame.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
