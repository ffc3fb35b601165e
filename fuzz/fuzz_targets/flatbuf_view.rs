//! `shoal topic echo`'s schema-less view of a FlatBuffers payload (`tools/src/flatbuf.rs`) on the input bytes. The
//! oracle is described in `../harness/flatbuf_view.rs`, which holds the body (the test suite runs the seeds through
//! it too: `tools/tests/fuzz_flatbuf_view.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../harness/flatbuf_view.rs"]
mod harness;

fuzz_target!(|data: &[u8]| {
    let _ = harness::run(data);
});
