//! Sending at a fixed rate on the monotonic clock, in bursts.
//!
//! The clock is read only at the start of each burst of `burst` messages; the messages of a
//! burst go back to back, and burst `i + 1` starts `burst / rate` after burst `i` (or at once if
//! that time has passed). This stays accurate at millions of messages per second (one clock read
//! per burst, no sleep per message) while a burst stays short enough for a reader that keeps up
//! on average: [`STREAM_BURST`] is half of shoal's default 16-slot ring. A sender that was
//! delayed (e.g. preempted) does not catch up with a longer burst, which would overrun a reader
//! that keeps up with the rate: its schedule restarts from the late burst, so the rate it
//! achieves can be lower than asked (callers report the achieved rate).

use std::time::{Duration, Instant};

/// Burst of the paced throughput stream: at most this many messages are sent back to back.
/// It must stay below the ring's slot count (16 by default for shoal and the baseline), or a
/// reader that is just waking up is overrun by a single burst.
pub(crate) const STREAM_BURST: u64 = 8;

/// Waits shorter than this are spun (sleep granularity is ~50-100 µs); longer ones sleep first.
const SPIN_BELOW: Duration = Duration::from_micros(300);

/// Paces consecutive sends at a fixed rate.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    /// When the next burst is due.
    next_due: Instant,
    period_ns: f64,
    burst: u64,
    /// First sequence number of the next burst (the clock is checked there).
    next_check: u64,
}

impl Pacer {
    /// A pacer starting now at `rate` messages per second, checking the clock every `burst`
    /// messages (`burst` is at least 1; `rate` must be positive).
    pub(crate) fn new(rate: f64, burst: u64) -> Pacer {
        Pacer { next_due: Instant::now(), period_ns: 1e9 / rate.max(1e-3), burst: burst.max(1), next_check: 0 }
    }

    /// Call before sending message `seq` (0, 1, 2, ...): at the start of a burst, waits until
    /// the burst is due; inside a burst, returns at once. A late burst starts at once.
    #[inline]
    pub(crate) fn wait_for(&mut self, seq: u64) {
        if seq < self.next_check {
            return;
        }
        self.next_check = seq + self.burst;
        let now = Instant::now();
        let start = if now < self.next_due {
            wait_until(self.next_due);
            self.next_due
        } else {
            now
        };
        self.next_due = start + Duration::from_nanos((self.burst as f64 * self.period_ns) as u64);
    }
}

/// Waits until `deadline`: sleeps while it is far away, then spins for precision.
pub(crate) fn wait_until(deadline: Instant) {
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    if deadline - now > SPIN_BELOW {
        std::thread::sleep(deadline - now - SPIN_BELOW / 2);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacer_keeps_the_rate_with_bursts() {
        // 20k msg/s for 2000 messages = 100 ms, clock read every 8 messages.
        let mut p = Pacer::new(20_000.0, 8);
        assert_eq!(p.period_ns, 50_000.0);
        let t = Instant::now();
        for seq in 0..2000 {
            p.wait_for(seq);
        }
        let e = t.elapsed();
        // Message 1992 (the last burst start) is due at 99.6 ms.
        assert!(e >= Duration::from_micros(99_600), "{e:?}");
        assert!(e < Duration::from_millis(400), "{e:?}");
    }

    #[test]
    fn a_late_sender_does_not_catch_up_and_wait_until_sleeps_long_gaps() {
        let mut p = Pacer::new(1000.0, 1);
        p.wait_for(0);
        std::thread::sleep(Duration::from_millis(20));
        // Late: the next message goes at once, the one after a full period later (no burst of 20).
        let t = Instant::now();
        p.wait_for(1);
        assert!(t.elapsed() < Duration::from_micros(500));
        p.wait_for(2);
        assert!(t.elapsed() >= Duration::from_micros(900), "{:?}", t.elapsed());
        let t = Instant::now();
        wait_until(t + Duration::from_millis(3));
        assert!(t.elapsed() >= Duration::from_millis(3));
    }
}
