//! The send time stamped on every message: the wall clock (ns since the UNIX epoch) read from the CPU's time-stamp
//! counter where the kernel itself keeps time with it.
//!
//! `SystemTime::now()` is a vDSO `clock_gettime(CLOCK_REALTIME)`: 35 ns on the 2-core VM shoal is measured on, paid
//! by every send before its slot is published, so once per one-way trip of a ping-pong (a fifth of a 64 B one-way
//! trip through the ring). Reading the counter (`rdtsc`) and scaling it costs about 10 ns.
//!
//! How: an *anchor* pairs a counter value with the wall clock read on either side of it ([`paired`]); a reading is
//! the anchor's wall time plus the counter ticks since, scaled. The scale (ns per tick) is measured against
//! `CLOCK_MONOTONIC` from the process's first reading on (the runtime takes one when it starts), so it gets more exact
//! the longer the process runs, and NTP steps of the wall clock do not disturb it. For the first [`CALIBRATE_NS`]
//! (1 ms) every reading is `SystemTime::now()`; then the anchor is renewed by the first reading an eighth of the
//! scale's span after the last renewal, at most [`REANCHOR_NS`] (10 ms) ([`reanchor_ns`]; a renewal reads the wall
//! clock two or more times, 35 ns each), so a reading lies within about 100 ns of the wall clock (measured on that VM
//! over a process's first 1.1 s: -66..+79 ns from the midpoint of two wall-clock reads around it) and a step of the
//! wall clock is followed within 10 ms. Where the counter is not the kernel's clock source
//! (`/sys/devices/system/clocksource/clocksource0/current_clocksource` is not `tsc`: a counter that may stop, drift
//! or differ between CPUs), the CPU is not x86-64 or the measured scale is implausible, every reading is
//! `SystemTime::now()`.
//!
//! The anchor is shared by all threads under a sequence lock: readers never wait (a reading that meets a renewal in
//! progress reads the wall clock itself), and one renewing thread at a time writes it (the others read the wall
//! clock and go on). A counter behind the anchor (a thread on a CPU whose counter is a few ticks behind the anchor's)
//! reads the wall clock too, never a time before the anchor.
//!
//! (`minstant` and `fastant` read the counter the same way, but calibrate at process start from a constructor in
//! every binary that links them, for some milliseconds, and keep one anchor for the process's life, so a stepped wall
//! clock is never followed; a library cannot impose either on its users.)

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering, fence};
use std::time::{SystemTime, UNIX_EPOCH};

/// A reading this long after the anchor renews it (sooner while the scale is young, [`reanchor_ns`]).
pub(crate) const REANCHOR_NS: u64 = 10_000_000;
/// The scale is used once measured over at least this long.
pub(crate) const CALIBRATE_NS: u64 = 1_000_000;

/// How long after a renewal the next one comes when the scale was measured over `span_ns`: an eighth of the span, at
/// most [`REANCHOR_NS`], so that the scale's error (its two ends' pairing error over the span) moves a reading by at
/// most an eighth of that pairing error before the next renewal.
pub(crate) fn reanchor_ns(span_ns: u64) -> u64 {
    (span_ns / 8).clamp(1, REANCHOR_NS)
}
/// Fixed-point fraction bits of the scale (ns per tick × 2^32).
const SCALE_SHIFT: u32 = 32;

const UNKNOWN: u8 = 0;
const COUNTER: u8 = 1;
const SYSTEM: u8 = 2;

/// Whether the counter is used; decided on the first reading.
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);
/// Sequence lock of the anchor: odd while a thread writes it.
static SEQ: AtomicU64 = AtomicU64::new(0);
/// Counter and wall clock (ns since the epoch) of the anchor.
static ANCHOR_TICKS: AtomicU64 = AtomicU64::new(0);
static ANCHOR_NS: AtomicU64 = AtomicU64::new(0);
/// ns per tick × 2^32; 0 until measured over [`CALIBRATE_NS`].
static SCALE: AtomicU64 = AtomicU64::new(0);
/// Ticks after the anchor that renew it ([`REANCHOR_NS`] at the scale).
static REANCHOR_TICKS: AtomicU64 = AtomicU64::new(0);
/// Counter and `CLOCK_MONOTONIC` of the process's first reading: where the scale is measured from.
static BASE_TICKS: AtomicU64 = AtomicU64::new(0);
static BASE_MONO_NS: AtomicU64 = AtomicU64::new(0);
/// The wall clock of the process's first reading: calibration ends [`CALIBRATE_NS`] after it.
static BASE_WALL_NS: AtomicU64 = AtomicU64::new(0);

/// The wall clock now, in ns since the UNIX epoch (0 before 1970, as `SystemTime` would give an error).
#[inline]
pub(crate) fn now_ns() -> i64 {
    if MODE.load(Ordering::Relaxed) == COUNTER
        && let Some(t) = from_counter()
    {
        return t;
    }
    slow_now_ns()
}

/// A reading from the anchor, or None when it has to be renewed (or is being renewed).
#[inline]
fn from_counter() -> Option<i64> {
    let s = SEQ.load(Ordering::Acquire);
    if s & 1 == 1 {
        return None;
    }
    let ticks0 = ANCHOR_TICKS.load(Ordering::Relaxed);
    let ns0 = ANCHOR_NS.load(Ordering::Relaxed);
    let scale = SCALE.load(Ordering::Relaxed);
    let limit = REANCHOR_TICKS.load(Ordering::Relaxed);
    // Seqlock reader: the loads above happen before the re-check.
    fence(Ordering::Acquire);
    if SEQ.load(Ordering::Relaxed) != s || scale == 0 {
        return None;
    }
    // Behind the anchor (another CPU's counter) wraps to a huge value and renews too.
    let since = ticks().wrapping_sub(ticks0);
    if since >= limit {
        return None;
    }
    Some((ns0 + scaled(since, scale)) as i64)
}

/// `ticks` × `scale`, in ns.
#[inline]
fn scaled(ticks: u64, scale: u64) -> u64 {
    ((u128::from(ticks) * u128::from(scale)) >> SCALE_SHIFT) as u64
}

#[cold]
#[inline(never)]
fn slow_now_ns() -> i64 {
    let mode = match MODE.load(Ordering::Relaxed) {
        UNKNOWN => {
            let m = if counter_is_clock_source() { COUNTER } else { SYSTEM };
            MODE.store(m, Ordering::Relaxed);
            m
        }
        m => m,
    };
    if mode == SYSTEM {
        return system_ns() as i64;
    }
    // Calibrating (no scale yet): the wall clock as it is, and the renewal that measures the scale only once
    // CALIBRATE_NS have passed since the first reading, so that until then a reading costs what `SystemTime::now()`
    // does (a send in a process's first millisecond is not slower than without the counter).
    if SCALE.load(Ordering::Relaxed) == 0 && BASE_MONO_NS.load(Ordering::Relaxed) != 0 {
        let wall = system_ns();
        if wall.checked_sub(BASE_WALL_NS.load(Ordering::Relaxed)).is_some_and(|since| since < CALIBRATE_NS) {
            return wall as i64;
        }
    }
    // Renew the anchor.
    let (t_mono, mono) = paired(mono_ns);
    let (t, wall) = paired(system_ns);
    let s = SEQ.load(Ordering::Relaxed);
    if s & 1 == 1 || SEQ.compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        // Another thread renews it now.
        return wall as i64;
    }
    // Seqlock writer: the odd sequence is visible before the fields change.
    fence(Ordering::Release);
    let base_mono = BASE_MONO_NS.load(Ordering::Relaxed);
    if base_mono == 0 {
        BASE_TICKS.store(t_mono, Ordering::Relaxed);
        BASE_MONO_NS.store(mono.max(1), Ordering::Relaxed);
        BASE_WALL_NS.store(wall, Ordering::Relaxed);
    } else if let Some(scale) = measure_scale(BASE_TICKS.load(Ordering::Relaxed), base_mono, t_mono, mono) {
        SCALE.store(scale, Ordering::Relaxed);
        let after = reanchor_ns(mono - base_mono);
        REANCHOR_TICKS.store((u128::from(after) << SCALE_SHIFT).div_ceil(u128::from(scale)) as u64, Ordering::Relaxed);
    } else if mono.saturating_sub(base_mono) >= CALIBRATE_NS {
        // Long enough, yet no plausible scale: a counter that does not work here. The wall clock from now on.
        MODE.store(SYSTEM, Ordering::Relaxed);
    }
    ANCHOR_TICKS.store(t, Ordering::Relaxed);
    ANCHOR_NS.store(wall, Ordering::Relaxed);
    SEQ.store(s + 2, Ordering::Release);
    wall as i64
}

/// ns per tick × 2^32 from two (counter, monotonic ns) pairs, once they are at least [`CALIBRATE_NS`] apart; None
/// before, or when the pairs disagree with a counter that moves forward (then the wall clock is read meanwhile).
pub(crate) fn measure_scale(ticks0: u64, mono0: u64, ticks1: u64, mono1: u64) -> Option<u64> {
    let elapsed = mono1.checked_sub(mono0).filter(|e| *e >= CALIBRATE_NS)?;
    let dt = ticks1.checked_sub(ticks0).filter(|d| *d > 0)?;
    let scale = (u128::from(elapsed) << SCALE_SHIFT) / u128::from(dt);
    // Counters tick between 1 MHz and 100 GHz: anything else is not a working counter.
    let ok = (1u128 << SCALE_SHIFT) / 100..=1000u128 << SCALE_SHIFT;
    ok.contains(&scale).then_some(scale as u64)
}

/// A clock read taken this long at most is paired with the counter at once.
const PAIR_WIDTH_NS: u64 = 100;

/// The counter and the clock `read` at the same moment: the midpoint of two reads of the clock on either side of the
/// counter's, from the narrowest of up to four tries (an interrupt between the reads would put the clock's time
/// microseconds after the counter's, and every reading until the next renewal off by as much).
fn paired(read: fn() -> u64) -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..4 {
        let before = read();
        let t = ticks();
        let after = read();
        let width = after.saturating_sub(before);
        if width < best.0 {
            best = (width, t, before + width / 2);
        }
        if width <= PAIR_WIDTH_NS {
            break;
        }
    }
    (best.1, best.2)
}

fn system_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn ticks() -> u64 {
    // SAFETY: RDTSC exists on every x86-64 CPU and only reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn ticks() -> u64 {
    0
}

/// True where the kernel keeps time with the time-stamp counter: it then found it invariant and synchronised across
/// CPUs (it checks both before it selects it).
fn counter_is_clock_source() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|s| s.trim() == "tsc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_needs_a_long_enough_span_and_a_plausible_counter() {
        // 3 GHz: 1/3 ns per tick.
        let s = measure_scale(1_000, 5_000_000, 1_000 + 30_000_000, 15_000_000).expect("10 ms at 3 GHz");
        assert_eq!(scaled(3_000_000_000, s), 999_999_999);
        assert!(measure_scale(1_000, 5_000_000, 1_000 + 3_000_000, 6_000_000).is_some(), "1 ms is enough");
        assert_eq!(measure_scale(1_000, 5_000_000, 1_000 + 2_700_000, 5_900_000), None, "0.9 ms is too short");
        assert_eq!(measure_scale(1_000, 5_000_000, 1_000, 15_000_000), None, "a counter that stood still");
        assert_eq!(measure_scale(9_000, 5_000_000, 1_000, 15_000_000), None, "a counter that went back");
        assert_eq!(measure_scale(1_000, 5_000_000, 1_001, 15_000_000), None, "10 ms in one tick");
        assert_eq!(measure_scale(1_000, 15_000_000, 2_000, 5_000_000), None, "monotonic time went back");
    }

    #[test]
    fn renewals_come_sooner_while_the_scale_is_young() {
        assert_eq!(reanchor_ns(1_000_000), 125_000, "an eighth of a 1 ms span");
        assert_eq!(reanchor_ns(80_000_000), REANCHOR_NS);
        assert_eq!(reanchor_ns(10_000_000_000), REANCHOR_NS);
    }

    #[test]
    fn readings_follow_the_wall_clock() {
        // Over 100 ms (past calibration and several renewals), every reading lies between the wall clock read
        // before and after it, within 2 µs (the scale's error over one renewal period, measured early).
        let end = std::time::Instant::now() + std::time::Duration::from_millis(100);
        let mut n = 0u64;
        while std::time::Instant::now() < end {
            let before = system_ns() as i64;
            let t = now_ns();
            let after = system_ns() as i64;
            assert!(t >= before - 2_000 && t <= after + 2_000, "{before} <= {t} <= {after}");
            n += 1;
        }
        assert!(n > 1000);
    }
}
