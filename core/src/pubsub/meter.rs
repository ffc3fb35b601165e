//! Statistics measured where the data arrives: one [`ConnMeter`] per connection of a subscriber (one publisher, one
//! way of delivery), updated for every delivered sample, and turned into a [`ConnectionStats`] window at every
//! registration refresh.
//!
//! Counting a message costs a few additions; measuring its latency costs a clock read (about 30 ns here, a sixth of
//! a 64 B shared-memory hop). So latency is measured on every message up to about [`LATENCY_SAMPLES_PER_S`]
//! messages per second per connection, and above that on a spread sample: the gap between two measured messages
//! is drawn at random around a mean that doubles after [`SAMPLER_BATCH`] measurements come faster than twice the
//! target, halves when they come slower than half of it, and shrinks at once when the stream slows down. The histogram of a fast stream is then that sample's (hundreds of values a
//! second, plenty for percentiles); `count` in eCAL's latency figures counts measured messages.

use crate::stats::{ConnectionStats, LatencyHistogram, LatencySummary, Via};

/// Latencies measured per second and connection, about, at most (every message below that rate).
pub(crate) const LATENCY_SAMPLES_PER_S: u64 = 1000;
/// Measurements between two adjustments of the sampling gap.
pub(crate) const SAMPLER_BATCH: u32 = 128;
/// The largest mean gap between two measured messages.
const MAX_GAP: u32 = 1 << 20;

/// Windows without a message after which a meter of the inbox table is forgotten (its publisher is gone or
/// silent; a new message starts a fresh one).
const IDLE_WINDOWS: u32 = 10;

/// Counters of one connection.
#[derive(Debug)]
pub(crate) struct ConnMeter {
    pub(crate) publisher_id: u64,
    pub(crate) via: Via,
    messages: u64,
    bytes: u64,
    last_size: u64,
    window_messages: u64,
    window_bytes: u64,
    /// Latencies of the current window, ns.
    latency: LatencyHistogram,
    /// Sum, sum of squares and last of the window's latencies, µs (mean and variance at the window's end).
    sum_us: f64,
    sum_sq_us: f64,
    latest_us: f64,
    idle_windows: u32,
    /// Messages still to skip before the next latency measurement (1: measure the next one).
    countdown: u32,
    /// Mean gap between two measured messages (1: every message).
    gap: u32,
    /// Measurements in the current batch, and the receive time of its first.
    batch: u32,
    batch_start_ns: i64,
    /// Receive time of the last measured message.
    last_measured_ns: i64,
    /// xorshift state for the random gaps.
    rng: u32,
}

impl ConnMeter {
    pub(crate) fn new(publisher_id: u64, via: Via) -> ConnMeter {
        ConnMeter {
            publisher_id,
            via,
            messages: 0,
            bytes: 0,
            last_size: 0,
            window_messages: 0,
            window_bytes: 0,
            latency: LatencyHistogram::default(),
            sum_us: 0.0,
            sum_sq_us: 0.0,
            latest_us: 0.0,
            idle_windows: 0,
            countdown: 1,
            gap: 1,
            batch: 0,
            batch_start_ns: 0,
            last_measured_ns: 0,
            rng: (publisher_id as u32) | 1,
        }
    }

    /// Whether the next delivered message's latency is to be measured (then read the clock and pass it to
    /// [`ConnMeter::record`]).
    #[inline]
    pub(crate) fn latency_due(&self) -> bool {
        self.countdown <= 1
    }

    /// One delivered sample of `len` bytes; `times` = (its send time, our receive time) in ns when its latency was
    /// measured ([`ConnMeter::latency_due`]). A negative latency, from clocks that disagree, counts as 0.
    #[inline]
    pub(crate) fn record(&mut self, len: usize, times: Option<(i64, i64)>) {
        self.messages += 1;
        self.window_messages += 1;
        self.bytes += len as u64;
        self.window_bytes += len as u64;
        self.last_size = len as u64;
        match times {
            Some((sent_ns, received_ns)) => self.measured(received_ns.saturating_sub(sent_ns), received_ns),
            None => self.countdown = self.countdown.saturating_sub(1).max(1),
        }
    }

    fn measured(&mut self, latency_ns: i64, received_ns: i64) {
        let ns = latency_ns.max(0) as u64;
        self.latency.record(ns);
        let us = ns as f64 / 1000.0;
        self.sum_us += us;
        self.sum_sq_us += us * us;
        self.latest_us = us;
        // A measurement long after the last one (the stream slowed down): shrink the gap at once, in proportion.
        let target_ns = 1_000_000_000 / LATENCY_SAMPLES_PER_S;
        let since_last = received_ns.saturating_sub(self.last_measured_ns).max(0) as u64;
        if self.gap > 1 && since_last > 4 * target_ns {
            self.gap = (u64::from(self.gap) * target_ns / since_last).max(1) as u32;
            self.batch = 0;
        }
        self.last_measured_ns = received_ns;
        // Grow it once a batch is measured faster than twice the target rate (and shrink it below half).
        if self.batch == 0 {
            self.batch_start_ns = received_ns;
        }
        self.batch += 1;
        if self.batch >= SAMPLER_BATCH {
            let elapsed_ns = received_ns.saturating_sub(self.batch_start_ns).max(1) as u64;
            let rate = u64::from(SAMPLER_BATCH) * 1_000_000_000 / elapsed_ns;
            if rate > 2 * LATENCY_SAMPLES_PER_S {
                self.gap = (self.gap * 2).min(MAX_GAP);
            } else if rate < LATENCY_SAMPLES_PER_S / 2 {
                self.gap = (self.gap / 2).max(1);
            }
            self.batch = 0;
        }
        self.countdown = if self.gap <= 1 {
            1
        } else {
            // A gap drawn evenly from [gap/2, 3·gap/2): no aliasing with periodic traffic.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 17;
            self.rng ^= self.rng << 5;
            self.gap / 2 + self.rng % self.gap + 1
        };
    }

    /// Ends the window: its statistics (with the connection's `drops` so far and whether it shares our clock) and
    /// its latency summary; the next window starts empty.
    pub(crate) fn take_window(
        &mut self,
        window_ms: u32,
        drops: u64,
        same_host: bool,
    ) -> (ConnectionStats, LatencySummary) {
        let n = self.latency.count();
        let summary = if n == 0 {
            LatencySummary::default()
        } else {
            let mean = self.sum_us / n as f64;
            LatencySummary {
                count: n,
                latest_us: self.latest_us,
                min_us: self.latency.min_ns().unwrap_or(0) as f64 / 1000.0,
                max_us: self.latency.max_ns().unwrap_or(0) as f64 / 1000.0,
                mean_us: mean,
                variance_us2: (self.sum_sq_us / n as f64 - mean * mean).max(0.0),
            }
        };
        let stats = ConnectionStats {
            publisher_id: self.publisher_id,
            via: self.via,
            same_host,
            messages: self.messages,
            bytes: self.bytes,
            drops,
            // An empty window's length changes no rate; constant, it keeps the registration unchanged (see
            // `ConnectionStats::window_ms`).
            window_ms: if self.window_messages == 0 { 0 } else { window_ms },
            window_messages: self.window_messages,
            window_bytes: self.window_bytes,
            last_size: self.last_size,
            latency: std::mem::take(&mut self.latency),
        };
        self.idle_windows = if self.window_messages == 0 { self.idle_windows + 1 } else { 0 };
        self.window_messages = 0;
        self.window_bytes = 0;
        self.sum_us = 0.0;
        self.sum_sq_us = 0.0;
        (stats, summary)
    }

    /// No message for [`IDLE_WINDOWS`] windows.
    pub(crate) fn idle(&self) -> bool {
        self.idle_windows >= IDLE_WINDOWS
    }
}

/// The meters of the samples a subscriber takes from its inbox (same-process publishers and eCAL layers), bounded:
/// publisher ids of UDP samples come from the wire.
#[derive(Debug, Default)]
pub(crate) struct MeterTable {
    meters: Vec<ConnMeter>,
    /// Samples of connections that found the table full (still counted in the subscriber's totals).
    pub(crate) unmetered: u64,
}

impl MeterTable {
    /// Connections metered at most.
    pub(crate) const MAX: usize = crate::registration::codec::MAX_CONNECTIONS;

    /// The meter of `(publisher_id, via)`, created on first use; `None` when the table is full.
    #[inline]
    pub(crate) fn get(&mut self, publisher_id: u64, via: Via) -> Option<&mut ConnMeter> {
        // Most subscribers have one or two connections: the last one used is checked first.
        let found = self.meters.iter().rposition(|m| m.publisher_id == publisher_id && m.via == via);
        let i = match found {
            Some(i) => i,
            None if self.meters.len() < Self::MAX => {
                self.meters.push(ConnMeter::new(publisher_id, via));
                self.meters.len() - 1
            }
            None => {
                self.unmetered += 1;
                return None;
            }
        };
        self.meters.get_mut(i)
    }

    /// Every meter, for the end of a window; meters idle for long are removed afterwards by [`MeterTable::prune`].
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut ConnMeter> {
        self.meters.iter_mut()
    }

    /// Forgets idle meters.
    pub(crate) fn prune(&mut self) {
        self.meters.retain(|m| !m.idle());
    }

    /// Forgets the meters of a publisher that went away.
    pub(crate) fn forget(&mut self, publisher_id: u64) {
        self.meters.retain(|m| m.publisher_id != publisher_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delivers `n` messages `every_ns` apart, measuring whenever due; returns how many were measured.
    fn stream(m: &mut ConnMeter, n: u64, every_ns: i64, t0: i64) -> u64 {
        let mut measured = 0;
        for i in 0..n as i64 {
            let t = t0 + i * every_ns;
            let times = m.latency_due().then_some((t - 500, t));
            measured += u64::from(times.is_some());
            m.record(64, times);
        }
        measured
    }

    #[test]
    fn slow_streams_are_measured_whole_and_fast_ones_sampled_near_the_target_rate() {
        // 500 msgs/s: every message.
        let mut slow = ConnMeter::new(1, Via::ShoalRing);
        assert_eq!(stream(&mut slow, 2000, 2_000_000, 0), 2000);
        // 1 M msgs/s for 2 s: about LATENCY_SAMPLES_PER_S a second once the gap has settled.
        let mut fast = ConnMeter::new(2, Via::ShoalRing);
        let measured = stream(&mut fast, 2_000_000, 1000, 0);
        assert!(measured < 6 * LATENCY_SAMPLES_PER_S, "{measured} measured of 2 M");
        let last_second = stream(&mut fast, 1_000_000, 1000, 2_000_000_000);
        assert!(
            (LATENCY_SAMPLES_PER_S / 3..=3 * LATENCY_SAMPLES_PER_S).contains(&last_second),
            "{last_second} measured in the last second"
        );
        // The rate falls: the gap shrinks back to every message.
        let measured = stream(&mut fast, 20_000, 10_000_000, 4_000_000_000);
        assert!(measured > 19_000, "{measured} of 20000 at 100 msgs/s");
        assert_eq!(fast.take_window(1000, 0, true).0.latency.min_ns(), Some(500));
    }

    #[test]
    fn a_window_reports_its_messages_and_latency_then_starts_empty() {
        let mut m = ConnMeter::new(9, Via::ShoalRing);
        for (len, ns) in [(10, 1000), (20, 3000), (30, -5)] {
            m.record(len, Some((100, 100 + ns)));
        }
        m.record(40, None);
        let (s, l) = m.take_window(500, 2, true);
        assert_eq!((s.messages, s.bytes, s.window_messages, s.last_size, s.drops), (4, 100, 4, 40, 2));
        assert_eq!((s.rate_hz(), s.bandwidth_bps()), (8.0, 200.0));
        assert_eq!((s.latency.count(), s.latency.min_ns(), s.latency.max_ns()), (3, Some(0), Some(3000)));
        assert_eq!((l.count, l.min_us, l.max_us), (3, 0.0, 3.0));
        assert!((l.mean_us - 4.0 / 3.0).abs() < 1e-9);
        let (s2, l2) = m.take_window(1000, 2, true);
        assert_eq!((s2.messages, s2.window_messages, s2.latency.count(), l2.count), (4, 0, 0, 0));
    }

    #[test]
    fn the_table_is_bounded_and_forgets_idle_and_departed_publishers() {
        let mut t = MeterTable::default();
        for id in 0..MeterTable::MAX as u64 + 3 {
            if let Some(m) = t.get(id, Via::Udp) {
                m.record(1, None);
            }
        }
        assert_eq!((t.meters.len(), t.unmetered), (MeterTable::MAX, 3));
        t.forget(0);
        assert_eq!(t.meters.len(), MeterTable::MAX - 1);
        for _ in 0..=IDLE_WINDOWS {
            for m in t.iter_mut() {
                m.take_window(1000, 0, false);
            }
        }
        t.prune();
        assert!(t.meters.is_empty());
    }
}
