//! Per-publisher clock bookkeeping: which samples of a publisher are new, repeated, late or missing.
//!
//! Used per subscriber by the UDP layer (gaps are losses) and by the subscriber's inbox (the same publisher can
//! reach it through two eCAL layers; the second copy is a repeat, not a loss). Publisher ids come from the wire, so
//! the table is bounded: at [`MAX_TRACKED_PUBLISHERS`] the publisher heard from least recently is forgotten.

use std::collections::HashMap;

/// Publishers tracked per table; a new one beyond this replaces the one heard from least recently.
pub(crate) const MAX_TRACKED_PUBLISHERS: usize = 1024;

/// Verdict of [`PublisherClocks::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockCheck {
    /// Deliver; `lost` samples were skipped before it.
    Accept { lost: u64 },
    /// Same clock as the last one accepted.
    Duplicate,
    /// Older than the last one accepted.
    OutOfOrder,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    last_clock: u64,
    /// Value of the table's `ticks` when this publisher was last checked (least recently used = smallest).
    last_tick: u64,
}

/// The last clock accepted per publisher id, bounded (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct PublisherClocks {
    entries: HashMap<u64, Entry>,
    ticks: u64,
}

impl PublisherClocks {
    /// Checks `clock` of `publisher_id` against the last one accepted and records it when accepted. The first
    /// clock seen of a publisher is accepted with no loss (a late joiner starts where it joins).
    pub(crate) fn check(&mut self, publisher_id: u64, clock: u64) -> ClockCheck {
        self.ticks += 1;
        if self.entries.len() >= MAX_TRACKED_PUBLISHERS
            && !self.entries.contains_key(&publisher_id)
            && let Some(oldest) = self.entries.iter().min_by_key(|(_, e)| e.last_tick).map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
        let tick = self.ticks;
        let e = self.entries.entry(publisher_id).or_insert(Entry { last_clock: 0, last_tick: tick });
        e.last_tick = tick;
        if e.last_clock == 0 {
            e.last_clock = clock;
            return ClockCheck::Accept { lost: 0 };
        }
        if clock == e.last_clock {
            return ClockCheck::Duplicate;
        }
        if clock < e.last_clock {
            return ClockCheck::OutOfOrder;
        }
        let lost = clock - e.last_clock - 1;
        e.last_clock = clock;
        ClockCheck::Accept { lost }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_duplicates_and_out_of_order_and_counts_gaps_per_publisher() {
        let mut c = PublisherClocks::default();
        assert_eq!(c.check(7, 10), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(7, 11), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(7, 11), ClockCheck::Duplicate);
        assert_eq!(c.check(7, 9), ClockCheck::OutOfOrder);
        assert_eq!(c.check(7, 15), ClockCheck::Accept { lost: 3 });
        assert_eq!(c.check(7, 14), ClockCheck::OutOfOrder);
        // Another publisher has its own clock.
        assert_eq!(c.check(8, 1), ClockCheck::Accept { lost: 0 });
        assert_eq!(c.check(8, 1), ClockCheck::Duplicate);
        assert_eq!(c.last_clock(7), Some(15));
        c.forget(7);
        assert_eq!(c.check(7, 3), ClockCheck::Accept { lost: 0 }, "a forgotten publisher starts afresh");
    }

    #[test]
    fn is_bounded_and_forgets_the_least_recently_heard() {
        let mut c = PublisherClocks::default();
        for id in 0..(MAX_TRACKED_PUBLISHERS as u64 + 500) {
            c.check(id, 1);
            // Publisher 0 keeps talking: it is never the least recently heard.
            c.check(0, id + 2);
        }
        assert_eq!(c.len(), MAX_TRACKED_PUBLISHERS);
        assert_eq!(c.check(0, MAX_TRACKED_PUBLISHERS as u64 + 501), ClockCheck::Duplicate, "still tracked");
        // The newest publisher is still tracked, the oldest silent ones are not.
        assert_eq!(c.check(MAX_TRACKED_PUBLISHERS as u64 + 499, 1), ClockCheck::Duplicate);
        assert_eq!(c.last_clock(1), None);
    }
}
