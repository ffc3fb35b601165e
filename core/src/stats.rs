//! Fixed-size statistics measured on the data path: the log-bucket [`LatencyHistogram`] and the running
//! [`LatencySummary`] eCAL's registration carries. Both are plain values (no allocation when recording), filled by
//! subscribers where the data arrives, sent in registration, and shown by the monitor. Also the process's own
//! figures its registration carries ([`ShoalProcessStats`]: kernel drops, memory, CPU).

use std::time::{Duration, Instant};

/// Values below this many nanoseconds have a bucket each.
const EXACT: u64 = 16;
/// Sub-buckets per power of two above [`EXACT`]: bucket widths are 1/8 of their lower bound (≤ 12.5 % apart).
const SUB_BITS: u32 = 3;
const SUBS: usize = 1 << SUB_BITS;
/// The highest power of two with buckets of its own: values of 2^40 ns (18 min) and more share the last bucket.
const TOP_EXP: u32 = 40;

/// Number of buckets of a [`LatencyHistogram`].
pub(crate) const LATENCY_BUCKETS: usize = EXACT as usize + (TOP_EXP as usize - 4) * SUBS;

/// A histogram of latencies in nanoseconds with logarithmic buckets: exact below 16 ns, then eight buckets per power
/// of two (each ≤ 12.5 % wide), up to 2^40 ns. Recording is a few instructions and never allocates.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(into = "HistogramRepr", try_from = "HistogramRepr")
)]
pub struct LatencyHistogram {
    counts: Box<[u32; LATENCY_BUCKETS]>,
    count: u64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram { counts: Box::new([0; LATENCY_BUCKETS]), count: 0, min_ns: u64::MAX, max_ns: 0 }
    }
}

impl std::fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count)
            .field("p50_ns", &self.percentile(0.5))
            .field("max_ns", &self.max_ns())
            .finish()
    }
}

/// The bucket of a value in nanoseconds.
pub(crate) fn bucket_of(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros();
    if exp >= TOP_EXP {
        return LATENCY_BUCKETS - 1;
    }
    let sub = ((ns >> (exp - SUB_BITS)) as usize) & (SUBS - 1);
    EXACT as usize + (exp as usize - 4) * SUBS + sub
}

/// The values `[lower, upper)` in nanoseconds that bucket `index` holds (the last bucket has no upper bound:
/// `u64::MAX`).
pub(crate) fn bucket_bounds(index: usize) -> (u64, u64) {
    if index < EXACT as usize {
        return (index as u64, index as u64 + 1);
    }
    let i = index.min(LATENCY_BUCKETS - 1) - EXACT as usize;
    let exp = (i / SUBS) as u32 + 4;
    let sub = (i % SUBS) as u64;
    let lower = (SUBS as u64 + sub) << (exp - SUB_BITS);
    let upper = if index >= LATENCY_BUCKETS - 1 { u64::MAX } else { (SUBS as u64 + sub + 1) << (exp - SUB_BITS) };
    (lower, upper)
}

impl LatencyHistogram {
    /// Counts one latency.
    pub fn record(&mut self, ns: u64) {
        let b = &mut self.counts[bucket_of(ns)];
        *b = b.saturating_add(1);
        self.count += 1;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Number of latencies counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// True when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The smallest latency counted (exact).
    pub fn min_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min_ns)
    }

    /// The largest latency counted (exact).
    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max_ns)
    }

    /// The latency below which a fraction `q` (0.0–1.0) of the counted ones lie: the midpoint of the bucket that
    /// holds the `q`-th value, clamped to the exact minimum and maximum. `None` when empty.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (lo, hi) = bucket_bounds(i);
                let mid = if hi == u64::MAX { lo } else { lo + (hi - lo) / 2 };
                return Some(mid.clamp(self.min_ns, self.max_ns));
            }
        }
        Some(self.max_ns)
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        self.count = self.count.saturating_add(other.count);
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// The non-empty buckets as `(index, count)`, in order (what registration sends).
    pub fn sparse(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(i, c)| (i, *c))
    }

    /// The non-empty buckets as `(lower ns, upper ns, count)`, in order (for plots).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.sparse().map(|(i, c)| {
            let (lo, hi) = bucket_bounds(i);
            (lo, hi, c)
        })
    }

    /// Rebuilds a histogram from `(index, count)` pairs and the exact extremes, as registration carries it.
    /// Out-of-range indices are ignored (the result counts only what it could place); returns the histogram and
    /// the number of pairs ignored.
    pub fn from_sparse(pairs: impl IntoIterator<Item = (usize, u32)>, min_ns: u64, max_ns: u64) -> (Self, usize) {
        let mut h = LatencyHistogram::default();
        let mut ignored = 0;
        for (i, c) in pairs {
            match h.counts.get_mut(i) {
                Some(slot) => {
                    *slot = slot.saturating_add(c);
                    h.count += u64::from(c);
                }
                None => ignored += 1,
            }
        }
        if h.count > 0 {
            h.min_ns = min_ns.min(max_ns);
            h.max_ns = max_ns;
        }
        (h, ignored)
    }

    /// Forgets every count.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

/// Running latency figures in microseconds, as eCAL 6.1's registration carries them for a subscriber
/// (`data_latency_us`: count, latest, min, max, mean, variance). "Nothing measured" is eCAL's: min +∞, max −∞.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LatencySummary {
    /// Latencies counted.
    pub count: u64,
    /// The last one, µs.
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub latest_us: f64,
    /// The smallest, µs.
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub min_us: f64,
    /// The largest, µs.
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub max_us: f64,
    /// Their mean, µs.
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub mean_us: f64,
    /// Their variance, µs².
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub variance_us2: f64,
}

impl Default for LatencySummary {
    fn default() -> Self {
        LatencySummary {
            count: 0,
            latest_us: 0.0,
            min_us: f64::INFINITY,
            max_us: f64::NEG_INFINITY,
            mean_us: 0.0,
            variance_us2: 0.0,
        }
    }
}

impl LatencySummary {
    /// Counts one latency (Welford's update, so the variance stays exact over long runs).
    pub fn record_us(&mut self, us: f64) {
        self.count += 1;
        self.latest_us = us;
        self.min_us = self.min_us.min(us);
        self.max_us = self.max_us.max(us);
        let delta = us - self.mean_us;
        self.mean_us += delta / self.count as f64;
        let m2 = self.variance_us2 * (self.count - 1) as f64 + delta * (us - self.mean_us);
        self.variance_us2 = m2 / self.count as f64;
    }

    /// Combines two summaries (Chan's parallel formula); `latest` is taken from `other` when it has counts.
    pub fn merge(&mut self, other: &LatencySummary) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let n = na + nb;
        let delta = other.mean_us - self.mean_us;
        let m2 = self.variance_us2 * na + other.variance_us2 * nb + delta * delta * na * nb / n;
        self.mean_us += delta * nb / n;
        self.variance_us2 = m2 / n;
        // Counts announced by peers: saturating, whatever they say.
        self.count = self.count.saturating_add(other.count);
        self.min_us = self.min_us.min(other.min_us);
        self.max_us = self.max_us.max(other.max_us);
        self.latest_us = other.latest_us;
    }
}

/// The way a sample reached a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Via {
    /// From a publisher of the same process (in-memory queue).
    SameProcess,
    /// Through a shoal publisher's shared-memory ring.
    #[default]
    ShoalRing,
    /// Through eCAL's shared-memory memfiles.
    EcalShm,
    /// Through eCAL's UDP data layer.
    Udp,
    /// Through eCAL's TCP layer.
    Tcp,
}

impl Via {
    /// The name shown by the tools (`intra`, `shoal_ring`, `shm`, `udp`, `tcp`: eCAL's layer names).
    pub fn name(self) -> &'static str {
        match self {
            Via::SameProcess => "intra",
            Via::ShoalRing => "shoal_ring",
            Via::EcalShm => "shm",
            Via::Udp => "udp",
            Via::Tcp => "tcp",
        }
    }

    /// The number registration carries (shoal's extension).
    pub fn code(self) -> i32 {
        match self {
            Via::SameProcess => 0,
            Via::ShoalRing => 1,
            Via::EcalShm => 2,
            Via::Udp => 3,
            Via::Tcp => 4,
        }
    }

    /// The inverse of [`Via::code`]; `None` for a number shoal does not know.
    pub fn from_code(code: i32) -> Option<Via> {
        [Via::SameProcess, Via::ShoalRing, Via::EcalShm, Via::Udp, Via::Tcp].into_iter().find(|v| v.code() == code)
    }
}

/// What a subscriber measured on one connection: one publisher, one way ([`Via`]). Totals since the connection
/// started, and the last statistics window (one registration period, about a second).
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConnectionStats {
    /// The publisher's entity id.
    pub publisher_id: u64,
    /// How its samples arrive.
    pub via: Via,
    /// Publisher and subscriber share a clock (same host): only then is the latency meaningful.
    pub same_host: bool,
    /// Messages received so far.
    pub messages: u64,
    /// Payload bytes received so far.
    pub bytes: u64,
    /// Messages lost on this connection so far.
    pub drops: u64,
    /// Length of the last window, ms; 0 when it had no messages (its length then changes no rate, and a constant
    /// keeps an idle subscriber's registration the same from one refresh to the next, so that receivers recognise
    /// it as a repeat).
    pub window_ms: u32,
    /// Messages received in the last window.
    pub window_messages: u64,
    /// Payload bytes received in the last window.
    pub window_bytes: u64,
    /// Size of the last message, bytes.
    pub last_size: u64,
    /// Latencies (receive time − the publisher's send time) of the last window.
    pub latency: LatencyHistogram,
}

impl ConnectionStats {
    /// Messages per second over the last window.
    pub fn rate_hz(&self) -> f64 {
        per_second(self.window_messages, self.window_ms)
    }

    /// Payload bytes per second over the last window.
    pub fn bandwidth_bps(&self) -> f64 {
        per_second(self.window_bytes, self.window_ms)
    }
}

fn per_second(n: u64, window_ms: u32) -> f64 {
    if window_ms == 0 { 0.0 } else { n as f64 * 1000.0 / f64::from(window_ms) }
}

/// shoal's statistics of one publisher or subscriber beyond eCAL's fields, sent in shoal's registration extension.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ShoalStats {
    /// Payload bytes sent (publisher) or received (subscriber) so far.
    pub bytes: u64,
    /// Payload bytes per second over the last window.
    #[cfg_attr(feature = "serde", serde(with = "finite_or_text"))]
    pub bandwidth_bps: f64,
    /// Subscribers: one entry per publisher and way of delivery.
    pub connections: Vec<ConnectionStats>,
    /// Reliable publishers: sends that waited for a reliable subscriber.
    pub reliable_waits: u64,
    /// Reliable publishers: time those sends waited in all, ns.
    pub reliable_wait_ns: u64,
    /// Reliable publishers: subscribers taken out of flow control (process gone, or a full ring behind for the
    /// whole timeout).
    pub reliable_evicted: u64,
    /// Publishers with a history: messages kept now for late joiners.
    pub history_kept: u64,
    /// Publishers with a history: payload bytes of the kept messages.
    pub history_kept_bytes: u64,
    /// Publishers with a history: kept messages sent again to late joiners (same process, TCP).
    pub history_resent: u64,
    /// Publishers with a history: payload bytes of those.
    pub history_resent_bytes: u64,
    /// Subscribers asking for history whose live data comes on another layer than the history (UDP): publishers
    /// whose history did not come before the wait for it ended (their live data was delivered without it).
    pub history_missed: u64,
    /// Such subscribers: history messages dropped because they came after that wait had ended.
    pub history_late: u64,
}

/// A [`LatencyHistogram`] as it is serialized: its non-empty buckets as `(index, count)` pairs.
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
struct HistogramRepr {
    count: u64,
    min_ns: u64,
    max_ns: u64,
    buckets: Vec<(u16, u32)>,
}

#[cfg(feature = "serde")]
impl From<LatencyHistogram> for HistogramRepr {
    fn from(h: LatencyHistogram) -> HistogramRepr {
        let buckets = h
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (u16::try_from(i).unwrap_or(u16::MAX), *c))
            .collect();
        HistogramRepr { count: h.count, min_ns: h.min_ns, max_ns: h.max_ns, buckets }
    }
}

#[cfg(feature = "serde")]
impl TryFrom<HistogramRepr> for LatencyHistogram {
    type Error = String;

    /// Refuses what recording cannot make: a bucket index out of range, a minimum above the maximum of a
    /// histogram that counted something.
    fn try_from(r: HistogramRepr) -> Result<LatencyHistogram, String> {
        if r.count > 0 && r.min_ns > r.max_ns {
            return Err(format!("latency histogram: minimum {} ns above maximum {} ns", r.min_ns, r.max_ns));
        }
        let mut h = LatencyHistogram { count: r.count, min_ns: r.min_ns, max_ns: r.max_ns, ..Default::default() };
        for (i, c) in r.buckets {
            let Some(slot) = h.counts.get_mut(usize::from(i)) else {
                return Err(format!("latency histogram: bucket {i} (there are {LATENCY_BUCKETS})"));
            };
            *slot = c;
        }
        Ok(h)
    }
}

/// An `f64` that may be infinite or not a number (an empty [`LatencySummary`] has `min_us` +∞ and `max_us` −∞;
/// peers announce any value): a number when finite, else the text `inf`, `-inf` or `NaN`, which JSON cannot carry as
/// a number.
#[cfg(feature = "serde")]
mod finite_or_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if *v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(f64),
        Text(String),
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match NumberOrText::deserialize(d)? {
            NumberOrText::Number(v) => Ok(v),
            NumberOrText::Text(t) => match t.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "NaN" => Ok(f64::NAN),
                _ => Err(serde::de::Error::custom(format!("expected a number, `inf`, `-inf` or `NaN`, not `{t}`"))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The load is CPU time over wall time between measurements at least half a second apart; a measurement
    /// sooner keeps the last figure; none before two.
    #[test]
    fn cpu_meter_divides_cpu_time_by_wall_time() {
        let mut m = CpuMeter::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(m.sample(t0, s(10)), None);
        assert_eq!(m.sample(t0 + Duration::from_millis(100), s(11)), None, "too soon");
        assert_eq!(m.sample(t0 + s(2), s(13)), Some(1500), "3 s of CPU in 2 s: one and a half cores");
        assert_eq!(m.sample(t0 + Duration::from_millis(2200), s(14)), Some(1500), "too soon: the last figure");
        assert_eq!(m.sample(t0 + s(4), s(12)), Some(0), "a CPU time going back counts as idle, not as a wrap");
        let st = ShoalProcessStats { cpu_load_permille: Some(250), ..ShoalProcessStats::default() };
        assert_eq!(st.cpu_load(), Some(0.25));
    }

    /// An announced figure moves only by a step or more, so small wobbles of an idle process do not change its
    /// registration; unknown figures pass through.
    #[test]
    fn steady_figures_move_only_by_a_step() {
        let mut a = None;
        assert_eq!(steady(&mut a, Some(100), 10), Some(100));
        assert_eq!(steady(&mut a, Some(109), 10), Some(100));
        assert_eq!(steady(&mut a, Some(91), 10), Some(100));
        assert_eq!(steady(&mut a, Some(110), 10), Some(110));
        assert_eq!(steady(&mut a, None, 10), None);
        assert_eq!(steady(&mut a, Some(5), 10), Some(5));
    }

    #[test]
    fn merging_counts_announced_by_peers_saturates() {
        let big = LatencySummary { count: u64::MAX - 1, mean_us: 5.0, ..LatencySummary::default() };
        let mut s = big;
        s.merge(&big);
        assert_eq!(s.count, u64::MAX);
        let mut h = LatencyHistogram::default();
        h.record(1000);
        h.count = u64::MAX - 1;
        let mut m = h.clone();
        m.merge(&h);
        assert_eq!(m.count(), u64::MAX);
    }

    #[test]
    fn buckets_cover_every_value_in_order_and_stay_within_an_eighth() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, (1 << 30) + 12345, (1 << 39) + 1, 1 << 40, u64::MAX]) {
            let b = bucket_of(ns);
            assert!(b >= last || ns < 100_000, "bucket order");
            let (lo, hi) = bucket_bounds(b);
            assert!(lo <= ns && (ns < hi || hi == u64::MAX), "{ns} in bucket {b} = [{lo}, {hi})");
            if ns >= EXACT && hi != u64::MAX {
                assert!((hi - lo) * 8 <= lo, "bucket {b} [{lo}, {hi}) wider than 1/8");
            }
            if ns < 100_000 {
                last = b;
            }
        }
        assert_eq!(bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.percentile(0.5), None);
        for ns in 1..=1000u64 {
            h.record(ns * 1000); // 1 µs .. 1 ms
        }
        assert_eq!(h.count(), 1000);
        let p50 = h.percentile(0.5).expect("p50") as f64;
        let p99 = h.percentile(0.99).expect("p99") as f64;
        assert!((p50 / 500_000.0 - 1.0).abs() < 0.07, "p50 {p50}");
        assert!((p99 / 990_000.0 - 1.0).abs() < 0.07, "p99 {p99}");
        assert_eq!(h.percentile(1.0), Some(1_000_000));
        assert_eq!(h.min_ns(), Some(1000));
    }

    #[test]
    fn sparse_round_trip_and_bad_indices_are_ignored() {
        let mut h = LatencyHistogram::default();
        for ns in [5, 500, 5000, 5000, 1 << 35] {
            h.record(ns);
        }
        let pairs: Vec<_> = h.sparse().collect();
        assert_eq!(pairs.len(), 4);
        let (back, ignored) = LatencyHistogram::from_sparse(pairs.iter().copied(), 5, 1 << 35);
        assert_eq!((back, ignored), (h.clone(), 0));
        let (partial, ignored) = LatencyHistogram::from_sparse([(3, 2), (LATENCY_BUCKETS, 9), (usize::MAX, 1)], 3, 3);
        assert_eq!((partial.count(), ignored), (2, 2));
        let mut merged = h.clone();
        merged.merge(&partial);
        assert_eq!(merged.count(), 7);
        assert_eq!(merged.min_ns(), Some(3));
    }

    #[test]
    fn summary_matches_direct_mean_and_variance_and_merges() {
        let values = [3.0, 5.0, 8.0, 13.0, 21.0];
        let mut a = LatencySummary::default();
        let mut b = LatencySummary::default();
        let mut all = LatencySummary::default();
        for (i, v) in values.iter().enumerate() {
            all.record_us(*v);
            if i < 2 { a.record_us(*v) } else { b.record_us(*v) }
        }
        let mean = values.iter().sum::<f64>() / 5.0;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 5.0;
        assert!((all.mean_us - mean).abs() < 1e-9 && (all.variance_us2 - var).abs() < 1e-9);
        a.merge(&b);
        assert!((a.mean_us - mean).abs() < 1e-9 && (a.variance_us2 - var).abs() < 1e-9);
        assert_eq!((a.count, a.min_us, a.max_us, a.latest_us), (5, 3.0, 21.0, 21.0));
        assert_eq!(LatencySummary::default().max_us, f64::NEG_INFINITY);
    }

    /// A summary with nothing measured (min +∞, max −∞) and a histogram go through JSON and come back equal; a
    /// histogram recording cannot make (a bucket out of range, min above max) is refused, not kept.
    #[cfg(feature = "serde")]
    #[test]
    fn statistics_survive_json_and_impossible_histograms_are_refused() {
        let mut s = ShoalStats { bandwidth_bps: f64::INFINITY, ..Default::default() };
        let mut c = ConnectionStats::default();
        for ns in [3, 900, 40_000, 40_001, 7_000_000] {
            c.latency.record(ns);
        }
        s.connections.push(c);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ShoalStats>(&text).unwrap(), s);
        let empty = LatencySummary::default();
        let text = serde_json::to_string(&empty).unwrap();
        assert!(text.contains(r#""min_us":"inf","max_us":"-inf""#), "{text}");
        assert_eq!(serde_json::from_str::<LatencySummary>(&text).unwrap(), empty);
        let nan: LatencySummary =
            serde_json::from_str(&text.replace(r#""mean_us":0.0"#, r#""mean_us":"NaN""#)).unwrap();
        assert!(nan.mean_us.is_nan());
        for bad in [
            r#"{"count":1,"min_ns":5,"max_ns":4,"buckets":[]}"#,
            r#"{"count":1,"min_ns":5,"max_ns":5,"buckets":[[60000,1]]}"#,
        ] {
            assert!(serde_json::from_str::<LatencyHistogram>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<LatencySummary>(&text.replace(r#""inf""#, r#""big""#)).is_err());
    }
}

/// What this process's UDP data layer received and dropped since the start, over all its topics (the per-topic
/// share of the losses is each subscriber's drop count). `Node::snapshot().udp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UdpCounts {
    /// Messages handed to the send socket completely.
    pub sent: u64,
    /// Messages dropped on send (socket buffer full or another send error).
    pub send_drops: u64,
    /// Datagrams received.
    pub datagrams: u64,
    /// Local mode: datagrams dropped because they came from another host (a source address that is not loopback),
    /// unread (registration drops and counts its datagrams from another host the same way).
    pub non_local_source: u64,
    /// Packed datagrams (shoal's format, `[shoal_network] send_pack`) sent, and the messages they carried (also
    /// in `sent`).
    pub packed_sent: u64,
    /// Messages sent in packed datagrams.
    pub packed_sent_messages: u64,
    /// Packed datagrams received for subscribed topics (also in `datagrams`).
    pub packed_datagrams: u64,
    /// Samples those packed datagrams carried (before the clock checks that count them delivered or dropped).
    pub packed_messages: u64,
    /// Datagrams dropped by the header check or reassembly, and incomplete messages expired.
    pub wire_drops: u64,
    /// Samples delivered to subscribers.
    pub delivered: u64,
    /// Samples never received, from gaps in a publisher's clock (summed over the subscribers that saw the gap).
    pub lost: u64,
    /// Samples dropped because their clock was seen already.
    pub duplicates: u64,
    /// Samples that arrived after a newer one of their publisher and were discarded (counted in `lost` before).
    pub late: u64,
    /// Fragmented messages reassembled.
    pub reassembled: u64,
    /// Incomplete fragmented messages dropped after the reassembly time-out (5 s).
    pub reassembly_expired: u64,
    /// Incomplete fragmented messages evicted by the reassembly bounds (`[shoal_limits] udp_fragmented_per_source`,
    /// `udp_reassembly_bytes`, messages in flight).
    pub reassembly_evicted: u64,
    /// Incomplete fragmented messages given up at a gap the kernel's drop count explains (a receiver that fell
    /// behind: the socket dropped the missing fragments): their later fragments are dropped unstored, and the
    /// messages show in `lost`. (Absent from the JSON of a shoal that did not count it: read as 0.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub reassembly_abandoned: u64,
    /// Incomplete fragmented messages held right now.
    pub reassembly_in_flight: u64,
    /// Bytes charged against `udp_reassembly_bytes` by the incomplete messages held right now.
    pub reassembly_bytes: u64,
    /// Datagrams the kernel dropped on the data socket because its receive buffer was full (`SO_RXQ_OVFL`, learnt
    /// from the datagrams queued after them); the messages they belonged to show in `lost` (and
    /// `reassembly_abandoned` or `reassembly_expired`). Also sent in this process's registration ([`ShoalProcessStats`]).
    pub kernel_drops: u64,
}

/// What this process's service servers and clients did since the start (`Node::snapshot().services_counts`).
/// Every refusal and failure is counted here; the calls of each server method are also in its registration
/// (`call_count`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServiceCounts {
    /// Client connections the servers hold now.
    pub sessions: u64,
    /// Client connections accepted.
    pub accepted: u64,
    /// Connections closed at once because `[shoal_service] max_sessions` were held.
    pub refused_max_sessions: u64,
    /// Connections closed for not completing the handshake within `handshake_timeout_ms`, or for offering no
    /// protocol version the server speaks.
    pub handshake_failures: u64,
    /// Connections closed after `idle_timeout_ms` without a request.
    pub idle_closed: u64,
    /// Connections closed for a malformed or oversized frame (over `max_request`, an unexpected message type).
    pub frame_errors: u64,
    /// Requests whose protobuf did not decode (answered as failed).
    pub bad_requests: u64,
    /// Requests executed by a handler that returned a response.
    pub calls_served: u64,
    /// Requests answered as failed: unknown method, handler error or panic, response over `max_response`.
    pub calls_failed: u64,
    /// Requests answered as failed at once because `max_pending` requests waited for a handler.
    pub busy: u64,
    /// Under `[shoal_auth]`: connections to protected services refused because no authenticated client of this
    /// service was announced from their address.
    pub unauthenticated: u64,
    /// Calls this process's clients made, one per server called.
    pub calls_made: u64,
    /// Of those: answered with a response (executed or failed by the server).
    pub calls_answered: u64,
    /// Of those: not answered within the call's timeout.
    pub calls_timed_out: u64,
    /// Of those: the connection failed (refused, closed, a malformed response).
    pub calls_broken: u64,
}

/// What this process's eCAL TCP layer did since the start, over all its topics: its publishers' subscriber
/// connections ("sessions": accepted, admitted, refused and dropped, by cause) and its subscribers' connections to
/// publishers. Messages lost on the way are also in each publisher's and subscriber's drop count.
/// `Node::snapshot().tcp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TcpCounts {
    /// Subscriber connections the publishers hold now (admitted or still in their handshake).
    pub sessions: u64,
    /// Subscriber connections accepted (before their handshake).
    pub accepted: u64,
    /// Connections whose handshake was answered: registration announced a subscriber for them.
    pub admitted: u64,
    /// Connections closed at once because the publishers held `[shoal_tcp] max_sessions` already (or their
    /// publisher 256).
    pub refused_process_cap: u64,
    /// Connections closed at once because the publishers held `[shoal_tcp] max_sessions_per_source` from that
    /// address already.
    pub refused_source_cap: u64,
    /// Connections that sent their handshake, closed after `handshake_timeout_ms` because registration announced no
    /// (further) subscriber of the topic for their address (under `[shoal_auth]`, for a protected topic: no
    /// authenticated one).
    pub refused_unannounced: u64,
    /// Connections closed after `handshake_timeout_ms` without a handshake.
    pub handshake_timeouts: u64,
    /// Admitted connections closed because registration announced fewer subscribers for their address than were
    /// connected from it (a subscriber's registration went while its connection stayed).
    pub revoked: u64,
    /// Admitted connections closed because they took none of the bytes queued for them for `stall_timeout_ms`
    /// (the messages still queued are counted as drops of their publisher).
    pub stalled: u64,
    /// Frames handed to subscriber connections, written at once or queued (one per message and connection).
    pub queued: u64,
    /// Messages dropped for a connection whose send queue was full (after the wait, if configured).
    pub send_drops: u64,
    /// Connections to publishers this process's subscribers hold now (connected or connecting).
    pub connections: u64,
    /// Connections whose publisher answered the handshake.
    pub connects: u64,
    /// Connection attempts that ended before the publisher answered (refused, reset, timed out, invalid frames).
    pub connect_failures: u64,
    /// Of those, attempts the publisher did not answer within `handshake_timeout_ms`.
    pub connect_timeouts: u64,
    /// Attempts put off because the subscribers held `[shoal_tcp] max_connections` already.
    pub connects_deferred: u64,
    /// Publishers whose registration announced a port below 1024, not connected to.
    pub bad_ports: u64,
    /// Connections closed because a publisher sent an invalid frame header.
    pub protocol_errors: u64,
    /// Messages delivered to subscribers.
    pub delivered: u64,
    /// Frames above `[shoal_tcp] max_message`, skipped unread.
    pub too_large: u64,
    /// Payload frames that did not decode.
    pub decode_errors: u64,
    /// Messages missing from a publisher's clock sequence.
    pub lost: u64,
    /// Messages with a clock not above the last one delivered on the connection.
    pub out_of_order: u64,
}

/// shoal's statistics of a whole process, sent in its process registration (`shoal.ProcessStatsShoal`, field 100
/// of eCAL's `Process`, which eCAL skips) and shown for every shoal process of a [`Snapshot`](crate::monitor::Snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ShoalProcessStats {
    /// Datagrams the kernel dropped on the process's UDP data socket for a full receive buffer, since the start.
    pub udp_kernel_drops: u64,
    /// The same on its registration socket.
    pub registration_kernel_drops: u64,
    /// Resident memory (RSS), bytes, within [`RSS_STEP`] of the measured one; `None` when not measured.
    pub memory_rss_bytes: Option<u64>,
    /// CPU used between its last two measurements (about one registration period), in thousandths of one core
    /// (1000: one core busy all the time), within [`CPU_LOAD_STEP`] of the measured one; `None` until two
    /// measurements were made.
    pub cpu_load_permille: Option<u32>,
}

impl ShoalProcessStats {
    /// The CPU load as a fraction of one core (1.0: one core busy), if measured.
    pub fn cpu_load(&self) -> Option<f64> {
        self.cpu_load_permille.map(|p| f64::from(p) / 1000.0)
    }
}

/// The announced resident memory follows the measured one when they are this far apart (bytes), not closer: an idle
/// process's registration then repeats, and every receiver recognises the repeat before decoding it
/// (`registration::repeat`), which is what keeps registration cheap at scale.
pub(crate) const RSS_STEP: u64 = 256 << 10;
/// The same for the announced CPU load, in thousandths of a core (0.5 % of one core).
pub(crate) const CPU_LOAD_STEP: u64 = 5;

/// A figure kept steady for announcing: `announced` moves to `measured` only when they are at least `step` apart
/// (or one of them is unknown); returns the figure to announce.
pub(crate) fn steady(announced: &mut Option<u64>, measured: Option<u64>, step: u64) -> Option<u64> {
    match (*announced, measured) {
        (Some(a), Some(m)) if a.abs_diff(m) < step => {}
        _ => *announced = measured,
    }
    *announced
}

/// Measures the CPU load of this process between refreshes: the CPU time used over the wall time passed, over
/// spans of at least [`CpuMeter::MIN_SPAN`] (a refresh right after another keeps the last figure).
#[derive(Debug, Default)]
pub(crate) struct CpuMeter {
    basis: Option<(Instant, Duration)>,
    load_permille: Option<u32>,
}

impl CpuMeter {
    /// The shortest span a load is measured over.
    pub(crate) const MIN_SPAN: Duration = Duration::from_millis(500);

    /// Takes the CPU time `cpu` used by `now`; returns the load over the last span (thousandths of a core).
    pub(crate) fn sample(&mut self, now: Instant, cpu: Duration) -> Option<u32> {
        match self.basis {
            Some((t0, c0)) if now.saturating_duration_since(t0) >= Self::MIN_SPAN => {
                let wall = now.saturating_duration_since(t0).as_secs_f64();
                let used = cpu.saturating_sub(c0).as_secs_f64();
                self.load_permille = Some((used / wall * 1000.0).round().min(f64::from(u32::MAX)) as u32);
                self.basis = Some((now, cpu));
            }
            Some(_) => {}
            None => self.basis = Some((now, cpu)),
        }
        self.load_permille
    }
}
