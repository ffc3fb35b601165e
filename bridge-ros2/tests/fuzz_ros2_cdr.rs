//! The `ros2_cdr` fuzz target reaches the bridge's CDR reader and its protobuf <-> CDR mapping: its body
//! (`fuzz/harness/ros2_cdr.rs`, run here against this crate's `generic` and `msgdef`) runs every committed seed
//! with the target's oracle; the seeds map and decode, and the hostile ones (descriptors importing themselves or
//! each other, a pair that does not map) are refused without a crash.

use shoal_ros2_bridge::{generic, msgdef};

#[allow(dead_code)] // seedgen uses the rest
#[path = "../../fuzz/harness/ros2_cdr.rs"]
mod harness;

use harness::Run;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts the bytes allocated now and the peak since the last reset (as the fuzz target does).
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

#[test]
fn ros2_cdr_seeds_map_and_round_trip() {
    let dir = format!("{}/../fuzz/seeds/ros2_cdr", env!("CARGO_MANIFEST_DIR"));
    let run = |name: &str| {
        let path = format!("{dir}/{name}");
        harness::run(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let both = Run { mapped: true, decoded: true };
    for pair in ["telemetry", "telemetry_empty", "pose", "imu", "image", "pointcloud2", "custom"] {
        for form in ["proto", "cdr"] {
            assert_eq!(run(&format!("{pair}_{form}")), both, "{pair}_{form}");
        }
    }
    assert_eq!(run("bad_telemetry"), Run::default(), "demo.BadTelemetry does not map");
    // Found by the fuzzer: 32 elements in int16[<=8] errors were read from CDR (the bound was checked only
    // against a length the reader announces, and cdr-encoding announces none).
    assert_eq!(run("regress_bounded_sequence_from_dds"), Run { mapped: true, decoded: false });
    assert_eq!(run("self_import"), Run::default(), "a set importing itself is refused");
    assert_eq!(run("import_cycle"), Run::default(), "two files importing each other are refused");
    for entry in std::fs::read_dir(&dir).expect("the seeds") {
        let name = entry.expect("an entry").file_name().into_string().expect("a UTF-8 name");
        let _ = run(&name);
    }
}

/// A CDR sample whose sequence claims more elements than the sample holds is an error, and nothing is allocated
/// for the elements that are not there (cdr-encoding announces no length to the reader, so the elements are read
/// one by one until the sample ends; a reader told the length checks it against the sample's size first).
#[test]
fn a_sequence_longer_than_its_sample_is_refused() {
    let dir = format!("{}/../fuzz/seeds/ros2_cdr", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(format!("{dir}/custom_cdr")).expect("the custom seed");
    let input = harness::Input::parse(&bytes);
    let m = input.mapping().expect("the custom pair maps");
    // fuzz_msgs/Fuzz starts with int64[] a: its length is the first word after the encapsulation header.
    let mut sample = input.sample.to_vec();
    sample[4..8].copy_from_slice(&0x1000_0000u32.to_le_bytes());
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let e = m.decode_cdr(&sample).expect_err("268 million int64 in a sample of a few hundred bytes");
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert_eq!(e, "unexpected end of input");
    assert!(peak < 64 << 10, "{peak} bytes allocated for a {}-byte sample", sample.len());
}
