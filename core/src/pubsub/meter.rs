//! Statistics measured where the data arrives: one [`ConnMeter`] per connection of a subscriber (one publisher, one
//! way of delivery), updated for every delivered sample, and turned into a [`ConnectionStats`] window at every
//! registration refresh.

use crate::stats::{ConnectionStats, LatencyHistogram, LatencySummary, Via};

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
        }
    }

    /// One delivered sample of `len` bytes; `latency_ns` when latency is measured (negative values, from clocks
    /// that disagree, count as 0).
    #[inline]
    pub(crate) fn record(&mut self, len: usize, latency_ns: Option<i64>) {
        self.messages += 1;
        self.window_messages += 1;
        self.bytes += len as u64;
        self.window_bytes += len as u64;
        self.last_size = len as u64;
        if let Some(ns) = latency_ns {
            let ns = ns.max(0) as u64;
            self.latency.record(ns);
            let us = ns as f64 / 1000.0;
            self.sum_us += us;
            self.sum_sq_us += us * us;
            self.latest_us = us;
        }
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
            window_ms,
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

    #[test]
    fn a_window_reports_its_messages_and_latency_then_starts_empty() {
        let mut m = ConnMeter::new(9, Via::ShoalRing);
        for (len, ns) in [(10, 1000), (20, 3000), (30, -5)] {
            m.record(len, Some(ns));
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
