//! An eCAL memory file read as a subscriber's observer reads it, while the file changes between reads. The input
//! format, the files written and the oracle are described in `../harness/memfile_header.rs`, which holds the body
//! (the test suite runs the seeds through it too: `core/tests/fuzz_memfile_header.rs`).
//!
//! Every 2^k-th input (from 1024 on) the target prints to stderr (libFuzzer's log) how many inputs the reader
//! opened, and how many messages, empty reads, refused reads and survived truncations they led to.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;

#[path = "../harness/memfile_header.rs"]
mod harness;

static INPUTS: AtomicU64 = AtomicU64::new(0);
static OPENED: AtomicU64 = AtomicU64::new(0);
static MESSAGES: AtomicU64 = AtomicU64::new(0);
static EMPTY: AtomicU64 = AtomicU64::new(0);
static ERRORS: AtomicU64 = AtomicU64::new(0);
static TRUNCATIONS: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let run = harness::run(data);
    let r = Ordering::Relaxed;
    let inputs = INPUTS.fetch_add(1, r) + 1;
    OPENED.fetch_add(u64::from(run.opened), r);
    MESSAGES.fetch_add(run.messages, r);
    EMPTY.fetch_add(run.empty, r);
    ERRORS.fetch_add(run.errors, r);
    TRUNCATIONS.fetch_add(run.truncations, r);
    if inputs >= 1024 && inputs.is_power_of_two() {
        eprintln!(
            "memfile_header: {inputs} inputs, {} opened, {} messages read, {} empty reads, {} refused, {} \
             truncations survived",
            OPENED.load(r),
            MESSAGES.load(r),
            EMPTY.load(r),
            ERRORS.load(r),
            TRUNCATIONS.load(r)
        );
    }
});
