//! A protobuf descriptor announced by another process (a `FileDescriptorSet`) and a payload of its type, decoded as
//! the tools decode them. The input format and the oracle are described in `../harness/descriptor_decode.rs`, which
//! holds the body (the test suite runs the seeds through it too: `core/tests/fuzz_descriptor_decode.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness/descriptor_decode.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
