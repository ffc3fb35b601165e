//! The ROS 2 bridge's CDR reader and protobuf <-> CDR mapping (`bridge-ros2/src/generic.rs`, `msgdef.rs`, compiled
//! here from the same files) on fuzzer bytes: the input format and the oracle are described in
//! `../harness/ros2_cdr.rs`, which holds the body (the test suite runs the seeds through it too:
//! `bridge-ros2/tests/fuzz_ros2_cdr.rs`). Besides the harness's oracle, the bytes allocated at once while one input
//! runs stay within `ALLOWED_PEAK`: a length field cannot make the bridge allocate for what is not there.
#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)] // the bridge uses more of it than the harness
#[path = "../../bridge-ros2/src/generic.rs"]
mod generic;
#[allow(dead_code)]
#[path = "../../bridge-ros2/src/msgdef.rs"]
mod msgdef;

#[path = "../harness/ros2_cdr.rs"]
mod harness;

/// Counts the bytes allocated now and the peak since the last reset.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; the counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// What one input may make the process hold at once beyond what it held before: 16 MiB, plus 64 bytes per input
/// byte (decoded messages and descriptors take several times their wire size).
fn allowed_peak(input_len: usize) -> usize {
    (16 << 20) + 64 * input_len
}

fuzz_target!(|data: &[u8]| {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let _ = harness::run(data);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert!(peak <= allowed_peak(data.len()), "{peak} bytes allocated at once for an input of {} bytes", data.len());
});
