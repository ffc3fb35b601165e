//! Per-publisher clock bookkeeping: which samples of a publisher are new, repeated, late or missing.
//!
//! Used per subscriber by the UDP layer (gaps are losses) and by the subscriber's inbox (the same publisher can
//! reach it through two eCAL layers; the second copy is a repeat, not a loss). Publisher ids come from the wire, so
//! the table is bounded: at [`MAX_TRACKED_PUBLISHERS`] the publisher heard from least recently is forgotten.
//!
//! A clock far ahead of the real one (one spoofed or corrupt sample with clock 2^63) must not silence the real
//! publisher for good: when nothing of a publisher was accepted for [`RESYNC_AFTER`] while its samples keep
//! arriving behind the last accepted clock in increasing order, the table takes the arriving clock as the truth
//! again ([`PublisherClocks::resyncs`] counts it).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Publishers tracked per table; a new one beyond this replaces the one heard from least recently.
pub(crate) const MAX_TRACKED_PUBLISHERS: usize = 1024;
/// How long a publisher's samples must stay behind its last accepted clock, with nothing accepted, before the
/// table resynchronises to them. Longer than any lag between two eCAL layers carrying the same publisher (whose
/// late copies must stay dropped).
pub(crate) const RESYNC_AFTER: Duration = Duration::from_secs(3);
/// Increasing samples behind the last accepted clock needed (after `RESYNC_AFTER`) to resynchronise.
const RESYNC_SAMPLES: u32 = 4;

/// Verdict of [`PublisherClocks::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockCheck {
    /// Deliver; `lost` samples were skipped before it.
    Accept { lost: u64 },
    /// Same clock as the last one accepted.
    Duplicate,
    /// Older than the last one accepted.
    OutOfOrder,
    /// Deliver: after [`RESYNC_AFTER`] of samples behind the last accepted clock, the table took this one as the
    /// publisher's clock again (the last accepted was far ahead of the real stream: spoofed or corrupt).
    Resync,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    last_clock: u64,
    /// Value of the table's `ticks` when this publisher was last checked (least recently used = smallest).
    last_tick: u64,
    /// When a sample of this publisher was last accepted.
    last_accept: Instant,
    /// The last clock seen behind `last_clock`, and how many increasing ones in a row came behind it.
    behind_last: u64,
    behind_run: u32,
}

/// The last clock accepted per publisher id, bounded (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct PublisherClocks {
    entries: HashMap<u64, Entry>,
    ticks: u64,
    resyncs: u64,
}

impl PublisherClocks {
    /// Checks `clock` of `publisher_id` against the last one accepted and records it when accepted. The first
    /// clock seen of a publisher is accepted with no loss (a late joiner starts where it joins).
    pub(crate) fn check(&mut self, publisher_id: u64, clock: u64, now: Instant) -> ClockCheck {
        self.publisher(publisher_id, now).check(clock, now)
    }

    /// The entry of `publisher_id` (made, evicting the least recently heard at the bound, if it is new), to check
    /// several of its clocks in a row with one table lookup: [`PublisherClock::check`] gives what
    /// [`PublisherClocks::check`] would for each.
    pub(crate) fn publisher(&mut self, publisher_id: u64, now: Instant) -> PublisherClock<'_> {
        self.ticks += 1;
        if self.entries.len() >= MAX_TRACKED_PUBLISHERS
            && !self.entries.contains_key(&publisher_id)
            && let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.last_tick).map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
        let tick = self.ticks;
        let entry = self.entries.entry(publisher_id).or_insert(Entry {
            last_clock: 0,
            last_tick: tick,
            last_accept: now,
            behind_last: 0,
            behind_run: 0,
        });
        entry.last_tick = tick;
        PublisherClock { entry, resyncs: &mut self.resyncs }
    }

    /// Times the table resynchronised a publisher to clocks behind its last accepted one.
    #[cfg(test)]
    pub(crate) fn resyncs(&self) -> u64 {
        self.resyncs
    }

    /// Forgets a publisher (it unregistered).
    pub(crate) fn forget(&mut self, publisher_id: u64) {
        self.entries.remove(&publisher_id);
    }

    /// The last clock accepted of `publisher_id`.
    #[cfg(test)]
    pub(crate) fn last_clock(&self, publisher_id: u64) -> Option<u64> {
        self.entries.get(&publisher_id).map(|e| e.last_clock)
    }

    /// Publishers tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// One publisher's entry of a [`PublisherClocks`] table ([`PublisherClocks::publisher`]).
pub(crate) struct PublisherClock<'a> {
    entry: &'a mut Entry,
    resyncs: &'a mut u64,
}

impl PublisherClock<'_> {
    /// Checks the publisher's next `clock` (see [`PublisherClocks::check`]).
    pub(crate) fn check(&mut self, clock: u64, now: Instant) -> ClockCheck {
        let e = &mut *self.entry;
        if e.last_clock == 0 {
            e.last_clock = clock;
            e.last_accept = now;
            return ClockCheck::Accept { lost: 0 };
        }
        if clock <= e.last_clock {
            e.behind_run = if clock > e.behind_last { e.behind_run + 1 } else { 1 };
            e.behind_last = clock;
            if e.behind_run >= RESYNC_SAMPLES && now.saturating_duration_since(e.last_accept) >= RESYNC_AFTER {
                // The last accepted clock was not this stream's: start again from here.
                e.last_clock = clock;
                e.last_accept = now;
                e.behind_run = 0;
                *self.resyncs += 1;
                return ClockCheck::Resync;
            }
            return if clock == e.last_clock { ClockCheck::Duplicate } else { ClockCheck::OutOfOrder };
        }
        let lost = clock - e.last_clock - 1;
        e.last_clock = clock;
        e.last_accept = now;
        e.behind_run = 0;
        ClockCheck::Accept { lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    #[test]
    fn drops_duplicates_and_out_of_order_and_counts_gaps_per_publisher() {
        let mut c = PublisherClocks::default();
        assert_eq!(c.check(7, 10, t0()), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(7, 11, t0()), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(7, 11, t0()), ClockCheck::Duplicate);
        assert_eq!(c.check(7, 9, t0()), ClockCheck::OutOfOrder);
        assert_eq!(c.check(7, 15, t0()), ClockCheck::Accept { lost: 3 });
        assert_eq!(c.check(7, 14, t0()), ClockCheck::OutOfOrder);
        // Another publisher has its own clock.
        assert_eq!(c.check(8, 1, t0()), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(8, 1, t0()), ClockCheck::Duplicate);
        assert_eq!(c.last_clock(7), Some(15));
        c.forget(7);
        assert_eq!(c.check(7, 3, t0()), ClockCheck::Accept { lost: 0 }, "a forgotten publisher starts afresh");
    }

    #[test]
    fn is_bounded_and_forgets_the_least_recently_heard() {
        let mut c = PublisherClocks::default();
        for id in 0..(MAX_TRACKED_PUBLISHERS as u64 + 500) {
            c.check(id, 1, t0());
            // Publisher 0 keeps talking: it is never the least recently heard.
            c.check(0, id + 2, t0());
        }
        assert_eq!(c.len(), MAX_TRACKED_PUBLISHERS);
        assert_eq!(c.check(0, MAX_TRACKED_PUBLISHERS as u64 + 501, t0()), ClockCheck::Duplicate, "still tracked");
        // The newest publisher is still tracked, the oldest silent ones are not.
        assert_eq!(c.check(MAX_TRACKED_PUBLISHERS as u64 + 499, 1, t0()), ClockCheck::Duplicate);
        assert_eq!(c.last_clock(1), None);
    }

    #[test]
    fn a_far_ahead_clock_does_not_silence_the_real_publisher_for_good() {
        let mut c = PublisherClocks::default();
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        assert_eq!(c.check(7, 100, at(0)), ClockCheck::Accept { lost: 0 });
        // One spoofed sample far ahead: accepted (it cannot be told apart yet), the real ones then look late.
        assert_eq!(c.check(7, 1 << 63, at(1)), ClockCheck::Accept { lost: (1 << 63) - 101 });
        let mut clock = 101;
        let mut ms = 2;
        while at(ms) < at(1) + RESYNC_AFTER {
            assert_eq!(c.check(7, clock, at(ms)), ClockCheck::OutOfOrder);
            clock += 1;
            ms += 10;
        }
        // After RESYNC_AFTER with nothing accepted, the real stream is taken back.
        assert_eq!(c.check(7, clock, at(ms)), ClockCheck::Resync);
        assert_eq!(c.check(7, clock + 1, at(ms + 10)), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(7, clock + 1, at(ms + 20)), ClockCheck::Duplicate);
        assert_eq!(c.resyncs(), 1);
    }

    #[test]
    fn late_copies_from_a_slower_layer_stay_dropped() {
        let mut c = PublisherClocks::default();
        let t = Instant::now();
        // Layer A delivers 1..=100 at once; layer B's copies of the same clocks arrive within a second.
        for clock in 1..=100 {
            assert!(matches!(c.check(3, clock, t), ClockCheck::Accept { .. }));
        }
        for clock in 1..=100 {
            let late = t + Duration::from_millis(10 * clock);
            assert!(
                matches!(c.check(3, clock, late), ClockCheck::Duplicate | ClockCheck::OutOfOrder),
                "clock {clock} delivered twice"
            );
        }
        assert_eq!(c.resyncs(), 0);
    }
}
