//! `RingReader::open` on a ring segment file whose bytes come from the fuzzer, then reads until the reader settles.
//! The input format, the files written and the oracle are described in `../harness/ring_header.rs`, which holds the
//! body (the test suite runs the seeds through it too: `core/tests/fuzz_ring_header.rs`).
//!
//! Every 2^k-th input (from 1024 on) the target prints to stderr (libFuzzer's log) how many inputs opened a reader,
//! and how many samples, torn reads, generation changes, ended readers and drops they led to: evidence that inputs
//! reach the reader.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

#[path = "../harness/ring_header.rs"]
mod harness;

static INPUTS: AtomicU64 = AtomicU64::new(0);
static OPENED: AtomicU64 = AtomicU64::new(0);
static SAMPLES: AtomicU64 = AtomicU64::new(0);
static TORN: AtomicU64 = AtomicU64::new(0);
static FOLLOWED: AtomicU64 = AtomicU64::new(0);
static ENDED: AtomicU64 = AtomicU64::new(0);
static DROPS: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let run = harness::run(data);
    let r = Ordering::Relaxed;
    let inputs = INPUTS.fetch_add(1, r) + 1;
    OPENED.fetch_add(u64::from(run.opened), r);
    SAMPLES.fetch_add(run.samples, r);
    TORN.fetch_add(run.torn, r);
    FOLLOWED.fetch_add(run.followed, r);
    ENDED.fetch_add(u64::from(run.ended), r);
    DROPS.fetch_add(run.drops.min(1 << 32), r);
    if inputs >= 1024 && inputs.is_power_of_two() {
        eprintln!(
            "ring_header: {inputs} inputs, {} opened a reader, {} samples read, {} torn, {} generation changes, {} \
             readers ended, {} drops (at most 2^32 an input)",
            OPENED.load(r),
            SAMPLES.load(r),
            TORN.load(r),
            FOLLOWED.load(r),
            ENDED.load(r),
            DROPS.load(r)
        );
    }
});
