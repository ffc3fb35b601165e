//! History for late joiners: the messages a publisher keeps ([`HistoryStore`]) and what a subscriber asks for
//! ([`History`]).
//!
//! A publisher made with `history(n)` keeps its last `n` messages, within `[shoal_history] max_bytes` of payload,
//! as shared payloads (the same `Arc` same-process subscribers get, so keeping costs no copy when one of them
//! exists). Who gets them, and how each layer stitches them to live data without a gap or a repeat:
//!
//! - **Same process**: when a subscriber that asks for history is connected, the publisher's kept messages are put
//!   into its queue under the store's lock, and the subscriber is added to the publisher's connections under that
//!   lock too. A send appends to the store and takes its connections under the same lock, so every message is
//!   either in the history the subscriber got or in the live data it gets, never both, never neither.
//! - **Native ring**: the ring is the store (a publisher with a history writes its ring even with no reader, and
//!   makes it at least `n + 1` slots deep); a subscriber opening it rewinds its cursor over at most its depth of the
//!   newest slots that fit the publisher's announced byte budget. History and live data are one stream of slots.
//! - **TCP**: a new connection of a subscriber that announced a depth gets the kept messages first, queued under the
//!   store's lock; a live message the publisher was sending at that moment may follow as a repeat of the last kept
//!   one, which the subscriber's per-publisher clock check drops as already delivered (not as a loss).
//! - **UDP and eCAL subscribers**: live data only (a re-send over multicast would reach every subscriber of the
//!   group, eCAL's among them, which deliver a message whose clock is not in their counter cache unless
//!   `drop_out_of_order_messages` is set; and live data reaches a new UDP subscriber before the publisher even learns
//!   of it, so history would come after live data).
//!
//! Why the ring is the store for ring readers rather than a copy: its slots already hold the past messages, a
//! reader validates each slot as it does for overwrites, and history and live data are then one stream with no
//! hand-over. The cost is the ring's depth (`n + 1` slots of the largest message) and a copy per send into the store
//! for the other layers, which shares the payload with same-process delivery. Limits: a ring that grows (a message
//! larger than its slots) starts a new segment, and a reader opening it afterwards gets the history kept since; ring
//! readers reading history are not counted in the publisher's `history_resent` (they read it themselves).

use std::collections::VecDeque;
use std::sync::Arc;

/// What a subscriber asks of each publisher it matches (see
/// [`SubscriberBuilder::history`](crate::builder::SubscriberBuilder::history)): nothing (live data only), the last
/// `n` messages the publisher kept, or all it kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum History {
    /// Live data only (the default).
    #[default]
    Off,
    /// At most this many of the newest kept messages of each publisher.
    Last(u32),
    /// All each publisher kept.
    All,
}

impl History {
    /// The depth announced in registration: 0 none, `u32::MAX` all.
    pub(crate) fn depth(self) -> u32 {
        match self {
            History::Off => 0,
            History::Last(n) => n,
            History::All => u32::MAX,
        }
    }

    /// From the depth announced in registration.
    pub(crate) fn from_depth(depth: u32) -> History {
        match depth {
            0 => History::Off,
            u32::MAX => History::All,
            n => History::Last(n),
        }
    }
}

impl From<bool> for History {
    /// `true`: all each publisher kept; `false`: none.
    fn from(all: bool) -> History {
        if all { History::All } else { History::Off }
    }
}

impl From<u32> for History {
    /// At most `n` messages of each publisher (0: none).
    fn from(n: u32) -> History {
        History::from_depth(n)
    }
}

/// One kept message.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) clock: u64,
    pub(crate) send_time_ns: i64,
    pub(crate) payload: Arc<[u8]>,
}

/// A publisher's last messages, bounded by a depth and a byte budget; and what it sent again to late joiners.
#[derive(Debug)]
pub(crate) struct HistoryStore {
    depth: usize,
    max_bytes: usize,
    kept: VecDeque<Kept>,
    bytes: usize,
    resent: u64,
    resent_bytes: u64,
}

impl HistoryStore {
    pub(crate) fn new(depth: u32, max_bytes: usize) -> HistoryStore {
        let depth = depth as usize;
        HistoryStore {
            depth,
            max_bytes,
            kept: VecDeque::with_capacity(depth.min(1024)),
            bytes: 0,
            resent: 0,
            resent_bytes: 0,
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        u32::try_from(self.depth).unwrap_or(u32::MAX)
    }

    pub(crate) fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Keeps `k`, letting the oldest go while more than `depth` messages or `max_bytes` are kept (a message larger
    /// than the budget leaves nothing kept).
    pub(crate) fn push(&mut self, k: Kept) {
        self.bytes += k.payload.len();
        self.kept.push_back(k);
        while self.kept.len() > self.depth || self.bytes > self.max_bytes {
            match self.kept.pop_front() {
                Some(old) => self.bytes -= old.payload.len(),
                None => break,
            }
        }
    }

    /// The newest `n` kept messages (all for `u32::MAX`), oldest first, counted as sent again.
    pub(crate) fn resend(&mut self, want: History) -> impl Iterator<Item = &Kept> {
        let n = (want.depth() as usize).min(self.kept.len());
        let skip = self.kept.len() - n;
        self.resent += n as u64;
        self.resent_bytes += self.kept.iter().skip(skip).map(|k| k.payload.len() as u64).sum::<u64>();
        self.kept.iter().skip(skip)
    }

    /// (messages kept, their payload bytes, messages sent again, their bytes).
    pub(crate) fn counters(&self) -> (u64, u64, u64, u64) {
        (self.kept.len() as u64, self.bytes as u64, self.resent, self.resent_bytes)
    }
}

impl crate::transport::HistorySource for std::sync::Mutex<HistoryStore> {
    fn replay(&self, depth: u32, f: &mut dyn FnMut(u64, i64, &[u8])) {
        let mut store = crate::sync::lock(self);
        for k in store.resend(History::from_depth(depth)) {
            f(k.clock, k.send_time_ns.div_euclid(1000), &k.payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(clock: u64, len: usize) -> Kept {
        Kept { clock, send_time_ns: 0, payload: Arc::from(vec![0u8; len]) }
    }

    #[test]
    fn the_store_keeps_the_newest_n_within_the_byte_budget() {
        let mut h = HistoryStore::new(4, 1000);
        for c in 1..=10 {
            h.push(kept(c, 100));
        }
        assert_eq!(h.resend(History::All).map(|k| k.clock).collect::<Vec<_>>(), [7, 8, 9, 10]);
        assert_eq!(h.resend(History::Last(2)).map(|k| k.clock).collect::<Vec<_>>(), [9, 10]);
        assert_eq!(h.counters(), (4, 400, 6, 600));
        // Three of 400 bytes exceed the budget: the two newest stay.
        for c in 11..=13 {
            h.push(kept(c, 400));
        }
        assert_eq!(h.resend(History::All).map(|k| k.clock).collect::<Vec<_>>(), [12, 13]);
        // One larger than the whole budget leaves nothing.
        h.push(kept(14, 1001));
        assert_eq!(h.resend(History::All).count(), 0);
        assert_eq!(h.counters().0, 0);
    }

    #[test]
    fn a_subscriber_asks_for_all_a_depth_or_nothing() {
        assert_eq!(History::from(true), History::All);
        assert_eq!(History::from(false), History::Off);
        assert_eq!(History::from(5u32), History::Last(5));
        assert_eq!(History::from(0u32), History::Off);
        for h in [History::Off, History::Last(3), History::All] {
            assert_eq!(History::from_depth(h.depth()), h);
        }
    }
}
