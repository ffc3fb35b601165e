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
//! - **UDP (and eCAL shared memory)**: the history does not go on the group (a re-send there would reach every
//!   subscriber, eCAL's among them, which deliver a message whose clock is not in their counter cache unless
//!   `drop_out_of_order_messages` is set). The subscriber fetches it over a TCP connection for the history only
//!   (`"SHHO"` handshake; a publisher with a history opens its TCP listener at creation and admits matched
//!   subscribers that ask, whichever layer carries their live data) that ends with the publisher's history-end
//!   mark. A publisher that announces a history and no TCP port (its TCP layer off) cannot send it: the subscriber
//!   counts it as missed at once. Live data reaches a new UDP
//!   subscriber before the publisher even learns of it, so the subscriber's [`HistoryGate`] holds each publisher's
//!   live messages until that publisher's registration says it keeps no history, or its history has come; then
//!   both are merged by clock (one copy each, the history as kept when the fetch was served, so the run starts at
//!   the older of its first kept and first live message) and delivered under the gate's lock. Bounded: the wait
//!   (three registration periods, at least [`GATE_MIN_WAIT`]), the bytes held (four times `[shoal_history]
//!   max_bytes`) and the publishers tracked; a history that does not come in time is counted as missed and live data
//!   goes on.
//! - **eCAL subscribers**: live data only, on every layer.
//!
//! Why the ring is the store for ring readers rather than a copy: its slots already hold the past messages, a
//! reader validates each slot as it does for overwrites, and history and live data are then one stream with no
//! hand-over. The cost is the ring's depth (`n + 1` slots of the largest message) and a copy per send into the store
//! for the other layers, which shares the payload with same-process delivery. Limits: a ring that grows (a message
//! larger than its slots) starts a new segment, and a reader opening it afterwards gets the history kept since; ring
//! readers reading history are not counted in the publisher's `history_resent` (they read it themselves).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// What the gate needs of a held message: its publisher's clock and the bytes it holds.
pub(crate) trait Held {
    fn clock(&self) -> u64;
    fn held_bytes(&self) -> usize;
}

impl Held for crate::sample::Sample {
    fn clock(&self) -> u64 {
        self.clock
    }
    fn held_bytes(&self) -> usize {
        self.payload.held()
    }
}

/// Publishers a gate tracks at most; samples of further ones pass without waiting (a flood of made-up publisher
/// ids cannot make the gate hold without bound).
pub(crate) const GATE_MAX_PUBLISHERS: usize = 1024;
/// The shortest wait of a gate for a publisher's registration and for its history.
pub(crate) const GATE_MIN_WAIT: Duration = Duration::from_secs(2);
/// Live messages a gate holds per publisher at most while it waits (and `max_held_bytes` of them).
pub(crate) const GATE_MAX_HELD: usize = 65536;

/// What a publisher's registration offers a subscriber that asks for history, for [`HistoryGate::matched`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// No history (an eCAL publisher, a shoal one without `history(n)`), or one read in its ring.
    None,
    /// A history that will come over TCP (the publisher announces its port).
    Fetch,
    /// A history with no way to come (its TCP layer is off): counted as missed at once.
    Unreachable,
}

/// One publisher's state in a [`HistoryGate`].
#[derive(Debug)]
enum Gate<T> {
    /// Everything passes.
    Open,
    /// The history did not come in time: live data passes, history that comes now is dropped (it would be older
    /// than what was delivered).
    GaveUp,
    /// Live messages are held until the publisher's registration says it keeps no history for us
    /// (`for_history` false: not known yet) or its history has come (`for_history`), or until `deadline`.
    Waiting { for_history: bool, deadline: Instant, live: Vec<T>, history: Vec<T>, bytes: usize },
}

impl<T> Gate<T> {
    fn waiting(for_history: bool, deadline: Instant) -> Gate<T> {
        Gate::Waiting { for_history, deadline, live: Vec::new(), history: Vec::new(), bytes: 0 }
    }
}

/// The history of a publisher whose live data comes on another path than its history (UDP, while the history
/// comes over TCP): per publisher, the live messages that arrive before the history are held, then both are
/// merged by the publisher's clock (one copy of each) and delivered in order; from then on live data passes.
///
/// A subscriber that asks for history makes one. Until a publisher's registration is known, its live messages
/// wait (`unknown_wait`): it may keep a history. A publisher whose registration announces none (an eCAL one, a
/// shoal one without `history(n)`) opens its gate at once, and so does one whose history cannot come (no TCP
/// port: counted as missed); one whose history will come holds it until it has (`fetch_wait`). Either wait ends early when more than `max_held_bytes` (or [`GATE_MAX_HELD`]
/// messages) are held: what is held is delivered and the publisher's history, if it comes later, dropped and
/// counted ([`HistoryGate::missed`]). Every entry point returns the messages to deliver now, in order; the caller
/// delivers them under the gate's lock so that a later live message cannot overtake them.
#[derive(Debug)]
pub(crate) struct HistoryGate<T> {
    entries: HashMap<u64, Gate<T>>,
    unknown_wait: Duration,
    fetch_wait: Duration,
    max_held_bytes: usize,
    /// Publishers whose history did not come before the wait ended.
    missed: u64,
    /// History messages that came after their publisher's wait had ended (dropped).
    late: u64,
}

impl<T: Held> HistoryGate<T> {
    pub(crate) fn new(unknown_wait: Duration, fetch_wait: Duration, max_held_bytes: usize) -> HistoryGate<T> {
        HistoryGate { entries: HashMap::new(), unknown_wait, fetch_wait, max_held_bytes, missed: 0, late: 0 }
    }

    /// A live message of `publisher`.
    pub(crate) fn live(&mut self, publisher: u64, s: T, now: Instant) -> Vec<T> {
        if !self.entries.contains_key(&publisher) {
            if self.entries.len() >= GATE_MAX_PUBLISHERS {
                return vec![s];
            }
            self.entries.insert(publisher, Gate::waiting(false, now + self.unknown_wait));
        }
        let Some(gate) = self.entries.get_mut(&publisher) else { return vec![s] };
        match gate {
            Gate::Open | Gate::GaveUp => vec![s],
            Gate::Waiting { deadline, live, bytes, .. } => {
                *bytes += s.held_bytes();
                live.push(s);
                if now >= *deadline || *bytes > self.max_held_bytes || live.len() > GATE_MAX_HELD {
                    self.give_up(publisher)
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// The registration of `publisher` is known: what it offers of its history.
    pub(crate) fn matched(&mut self, publisher: u64, offer: Offer, now: Instant) -> Vec<T> {
        let serves_history = offer == Offer::Fetch;
        let first = matches!(self.entries.get(&publisher), None | Some(Gate::Waiting { for_history: false, .. }));
        if first && offer == Offer::Unreachable {
            self.missed += 1;
        }
        match self.entries.get_mut(&publisher) {
            None => {
                if self.entries.len() < GATE_MAX_PUBLISHERS {
                    let gate = if serves_history { Gate::waiting(true, now + self.fetch_wait) } else { Gate::Open };
                    self.entries.insert(publisher, gate);
                }
                Vec::new()
            }
            Some(Gate::Waiting { for_history: for_history @ false, deadline, .. }) => {
                if serves_history {
                    *for_history = true;
                    *deadline = now + self.fetch_wait;
                    Vec::new()
                } else {
                    self.open(publisher)
                }
            }
            Some(_) => Vec::new(),
        }
    }

    /// A message of `publisher`'s history.
    pub(crate) fn history(&mut self, publisher: u64, s: T) -> Vec<T> {
        match self.entries.get_mut(&publisher) {
            Some(Gate::Waiting { history, bytes, .. }) => {
                *bytes += s.held_bytes();
                history.push(s);
                Vec::new()
            }
            Some(Gate::GaveUp) => {
                self.late += 1;
                Vec::new()
            }
            // A publisher that announced no history (eCAL's, answering a shoal handshake as any): live data.
            Some(Gate::Open) | None => vec![s],
        }
    }

    /// `publisher`'s history has all come.
    pub(crate) fn history_end(&mut self, publisher: u64) -> Vec<T> {
        match self.entries.get(&publisher) {
            Some(Gate::Waiting { .. }) => self.open(publisher),
            _ => Vec::new(),
        }
    }

    /// Ends the waits that are past their deadline.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<T> {
        let due: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, g)| matches!(g, Gate::Waiting { deadline, .. } if now >= *deadline))
            .map(|(p, _)| *p)
            .collect();
        let mut out = Vec::new();
        for p in due {
            out.extend(self.give_up(p));
        }
        out
    }

    /// `publisher` went: what was held for it is delivered (a history still awaited is counted as missed).
    pub(crate) fn forget(&mut self, publisher: u64) -> Vec<T> {
        match self.entries.remove(&publisher) {
            Some(Gate::Waiting { live, history, for_history, .. }) => {
                self.missed += u64::from(for_history);
                merge(history, live)
            }
            _ => Vec::new(),
        }
    }

    /// `publisher` is read through its native ring, which holds both its history and its live data: what was held
    /// of it is dropped (the ring has it) and its gate opened.
    pub(crate) fn read_in_ring(&mut self, publisher: u64) {
        if let Some(g) = self.entries.get_mut(&publisher) {
            *g = Gate::Open;
        }
    }

    /// Publishers whose history did not come before their wait ended, and history messages dropped because they
    /// came after it.
    pub(crate) fn missed(&self) -> (u64, u64) {
        (self.missed, self.late)
    }

    fn open(&mut self, publisher: u64) -> Vec<T> {
        match self.entries.insert(publisher, Gate::Open) {
            Some(Gate::Waiting { live, history, .. }) => merge(history, live),
            _ => Vec::new(),
        }
    }

    /// Ends a wait: the held messages are delivered; a publisher that keeps a history we waited for is counted as
    /// missed, and its history dropped if it comes later.
    fn give_up(&mut self, publisher: u64) -> Vec<T> {
        let was_for_history = matches!(self.entries.get(&publisher), Some(Gate::Waiting { for_history: true, .. }));
        let next = if was_for_history {
            self.missed += 1;
            Gate::GaveUp
        } else {
            Gate::Open
        };
        match self.entries.insert(publisher, next) {
            Some(Gate::Waiting { live, history, .. }) => merge(history, live),
            _ => Vec::new(),
        }
    }
}

/// One publisher's history and live messages as one run in clock order, one copy of each clock (both are in
/// order already; where they overlap the history's copy is kept).
fn merge<T: Held>(history: Vec<T>, live: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(history.len() + live.len());
    let mut h = history.into_iter().peekable();
    let mut l = live.into_iter().peekable();
    loop {
        let take_history = match (h.peek(), l.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a.clock() <= b.clock(),
        };
        let next = if take_history { h.next() } else { l.next() };
        if let Some(s) = next {
            if out.last().is_some_and(|last: &T| last.clock() >= s.clock()) {
                continue;
            }
            out.push(s);
        }
    }
    out
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

    /// A held message in gate tests: (clock, bytes).
    impl Held for (u64, usize) {
        fn clock(&self) -> u64 {
            self.0
        }
        fn held_bytes(&self) -> usize {
            self.1
        }
    }

    fn clocks(v: Vec<(u64, usize)>) -> Vec<u64> {
        v.into_iter().map(|(c, _)| c).collect()
    }

    fn gate() -> HistoryGate<(u64, usize)> {
        HistoryGate::new(Duration::from_secs(2), Duration::from_secs(3), 10_000)
    }

    #[test]
    fn live_data_that_comes_before_the_history_waits_and_both_are_merged_once_in_order() {
        let now = Instant::now();
        let mut g = gate();
        // Live data of a publisher not known yet waits for its registration.
        for c in 30..=35 {
            assert!(g.live(7, (c, 10), now).is_empty());
        }
        // It keeps a history that will come: live data keeps waiting.
        assert!(g.matched(7, Offer::Fetch, now).is_empty());
        assert!(g.live(7, (36, 10), now).is_empty());
        // The history as the publisher kept it when asked: the newest 5, overlapping the live data.
        for c in 32..=37 {
            assert!(g.history(7, (c, 10)).is_empty());
        }
        assert_eq!(clocks(g.history_end(7)), (30..=37).collect::<Vec<_>>());
        // From now on live data passes, and so would a (late) history message of an open gate.
        assert_eq!(clocks(g.live(7, (38, 10), now)), [38]);
        assert_eq!(g.missed(), (0, 0));
    }

    #[test]
    fn a_history_older_than_the_first_live_message_comes_first() {
        let now = Instant::now();
        let mut g = gate();
        g.matched(1, Offer::Fetch, now);
        for c in 41..=43 {
            g.live(1, (c, 1), now);
        }
        for c in 31..=40 {
            g.history(1, (c, 1));
        }
        assert_eq!(clocks(g.history_end(1)), (31..=43).collect::<Vec<_>>());
    }

    #[test]
    fn a_publisher_without_history_opens_at_once_and_releases_what_waited() {
        let now = Instant::now();
        let mut g = gate();
        g.live(2, (5, 1), now);
        g.live(2, (6, 1), now);
        assert_eq!(clocks(g.matched(2, Offer::None, now)), [5, 6]);
        assert_eq!(clocks(g.live(2, (7, 1), now)), [7]);
        // Known before any message: nothing waits.
        assert!(g.matched(3, Offer::None, now).is_empty());
        assert_eq!(clocks(g.live(3, (1, 1), now)), [1]);
        // eCAL's publisher answers a history handshake with live data: it passes.
        assert_eq!(clocks(g.history(3, (2, 1))), [2]);
    }

    #[test]
    fn a_history_that_does_not_come_in_time_is_counted_and_dropped_when_it_comes_late() {
        let now = Instant::now();
        let mut g = gate();
        g.matched(4, Offer::Fetch, now);
        g.live(4, (10, 1), now);
        assert!(g.expire(now + Duration::from_secs(2)).is_empty(), "not due yet");
        assert_eq!(clocks(g.expire(now + Duration::from_secs(3))), [10]);
        assert_eq!(g.missed(), (1, 0));
        assert!(g.history(4, (9, 1)).is_empty());
        assert_eq!(g.missed(), (1, 1));
        assert_eq!(clocks(g.live(4, (11, 1), now)), [11]);
        // A publisher whose registration never came: its data waited, then passes, nothing missed.
        g.live(5, (1, 1), now);
        assert_eq!(clocks(g.live(5, (2, 1), now + Duration::from_secs(2))), [1, 2]);
        assert_eq!(g.missed(), (1, 1));
    }

    #[test]
    fn the_gate_is_bounded_in_bytes_and_in_publishers() {
        let now = Instant::now();
        let mut g = gate();
        g.matched(1, Offer::Fetch, now);
        for c in 1..=9 {
            assert!(g.live(1, (c, 1000), now).is_empty());
        }
        // Over 10,000 bytes held: all is delivered, the history counted as missed.
        assert_eq!(clocks(g.live(1, (10, 1001), now)).len(), 10);
        assert_eq!(g.missed(), (1, 0));
        // Made-up publishers beyond the bound pass without waiting.
        for p in 100..100 + GATE_MAX_PUBLISHERS as u64 {
            g.live(p, (1, 1), now);
        }
        assert_eq!(clocks(g.live(99_999, (1, 1), now)), [1]);
        // A publisher that goes releases what it held (a history awaited is missed); one read through its ring
        // drops it.
        assert_eq!(clocks(g.forget(100)), [1]);
        assert_eq!(g.missed(), (1, 0));
        let mut g2 = gate();
        g2.matched(1, Offer::Fetch, now);
        g2.live(1, (5, 1), now);
        assert_eq!(clocks(g2.forget(1)), [5]);
        assert_eq!(g2.missed(), (1, 0));
        // A history that cannot come (no TCP port) is missed at once, and nothing waits.
        g2.live(2, (1, 1), now);
        assert_eq!(clocks(g2.matched(2, Offer::Unreachable, now)), [1]);
        assert_eq!(g2.missed(), (2, 0));
        g2.matched(2, Offer::Unreachable, now);
        assert_eq!(g2.missed(), (2, 0), "counted once");
        g.read_in_ring(101);
        assert_eq!(clocks(g.live(101, (2, 1), now)), [2]);
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
