//! What the shoal-tools binaries (`shoal`, `shoal-peer`, `shoal-snapshot`) and their tests share: the clocks the
//! measurements read, the FNV-1a digest the peers print, the JSON-lines output of the scripted peers, and
//! [`mcap_read`], the bounded MCAP reader of `shoal play` and `shoal info` (also driven by the fuzz target
//! `mcap_read`).

pub mod mcap_read;

/// CLOCK_MONOTONIC in nanoseconds: one clock for all processes of the host, so a timestamp written by one process
/// can be compared with a reading in another.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID) in nanoseconds: time the thread actually ran,
/// excluding the time it was preempted or asleep.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `clock_gettime(clock)` in nanoseconds, for clocks Linux always supports.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the callers pass CLOCK_MONOTONIC or CLOCK_THREAD_CPUTIME_ID,
    // which Linux always supports.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// User plus system CPU time of this process so far, all threads, in seconds (getrusage).
pub fn process_cpu_s() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` points to writable memory of the size of `rusage`; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage succeeded, so it filled the struct (and it was zeroed before).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// FNV-1a, 64 bit: `shoal-peer`'s payload checksum and the descriptor digest that `shoal-snapshot` and the Python
/// eCAL peers print.
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Fills `buf` (at least 24 bytes) with `shoal-peer`'s self-checking payload of message `clock`: the clock, the send
/// time ([`mono_ns`]) and the FNV-1a digest of the pattern that follows, each little-endian, then the pattern.
pub fn fill_pattern(buf: &mut [u8], clock: u64) {
    for (i, b) in buf[24..].iter_mut().enumerate() {
        *b = (clock as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    let sum = fnv1a64(&buf[24..]);
    buf[0..8].copy_from_slice(&clock.to_le_bytes());
    buf[8..16].copy_from_slice(&mono_ns().to_le_bytes());
    buf[16..24].copy_from_slice(&sum.to_le_bytes());
}

/// A `size`-byte (at least 24) self-checking payload of message `clock` ([`fill_pattern`]).
pub fn pattern_payload(clock: u64, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size.max(24)];
    fill_pattern(&mut buf, clock);
    buf
}

/// Writes `v` as one line on stdout and flushes it: the scripted peers' output is read line by line as it comes.
pub fn emit(v: &serde_json::Value) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a64_matches_the_reference_values() {
        assert_eq!(super::fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
