//! Send pacing of the UDP data layer (`[shoal_network] max_send_rate`): one token bucket per runtime, shared by
//! all its UDP writers, charged with every datagram's bytes before the datagram leaves.
//!
//! The bucket holds 1 ms of the rate, and at least two full datagrams so that a message of one datagram never has
//! to wait for a bucket smaller than itself. A datagram takes its bytes even when that drives the bucket
//! negative; the next one waits (sleeping on the sender's thread) until the bucket is back at zero, so the average
//! rate is the configured one and bursts stay within the bucket. Oversleeping is not lost: tokens accrue from the
//! clock, capped at the bucket size.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::lock;
use crate::wire::MAX_DATAGRAM_LEN;

/// A token bucket in bytes.
#[derive(Debug)]
pub(crate) struct SendPacer {
    /// Bytes per second.
    rate: f64,
    /// Most tokens the bucket holds.
    burst: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Bytes that may be sent now (negative: owed).
    tokens: f64,
    last: Instant,
}

impl SendPacer {
    /// A pacer for `rate` bytes per second; `None` for 0 (unpaced).
    pub(crate) fn new(rate: u64) -> Option<SendPacer> {
        (rate > 0).then(|| {
            let rate = rate as f64;
            let burst = (rate / 1000.0).max(2.0 * MAX_DATAGRAM_LEN as f64);
            SendPacer { rate, burst, state: Mutex::new(State { tokens: burst, last: Instant::now() }) }
        })
    }

    /// Takes `bytes` from the bucket, first waiting until it is no longer in debt.
    pub(crate) fn take(&self, bytes: usize) {
        loop {
            let wait = {
                let mut s = lock(&self.state);
                let now = Instant::now();
                let dt = now.saturating_duration_since(s.last).as_secs_f64();
                s.last = now;
                s.tokens = (s.tokens + dt * self.rate).min(self.burst);
                if s.tokens >= 0.0 {
                    s.tokens -= bytes as f64;
                    return;
                }
                Duration::from_secs_f64(-s.tokens / self.rate)
            };
            std::thread::sleep(wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_unpaced() {
        assert!(SendPacer::new(0).is_none());
    }

    #[test]
    fn the_average_rate_is_the_configured_one() {
        // 20 MB/s, 2 MB in 64 KB datagrams: the first bucket (2 datagrams) goes at once, the rest at the rate.
        let p = SendPacer::new(20 << 20).unwrap();
        let t0 = Instant::now();
        let mut sent = 0usize;
        while sent < 2 << 20 {
            p.take(65_536);
            sent += 65_536;
        }
        let took = t0.elapsed().as_secs_f64();
        let expected = ((2 << 20) as f64 - p.burst - 65_536.0) / (20 << 20) as f64;
        assert!(took >= expected * 0.95, "took {took:.3} s, expected at least {expected:.3} s");
        assert!(took < expected * 3.0 + 0.05, "took {took:.3} s, expected about {expected:.3} s");
    }

    #[test]
    fn a_datagram_within_the_bucket_does_not_wait() {
        let p = SendPacer::new(1 << 30).unwrap();
        let t0 = Instant::now();
        p.take(MAX_DATAGRAM_LEN);
        assert!(t0.elapsed() < Duration::from_millis(50));
    }
}
