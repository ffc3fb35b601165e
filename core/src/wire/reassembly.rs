//! Bounded reassembly of fragmented ecaludp v5 messages (`ecaludp: reassembly_v5.cpp`).
//!
//! Fragments are keyed by (sender address, id). Fragments may arrive before the info
//! datagram. Memory is bounded: a cap on messages in flight, a cap on bytes buffered over all
//! messages (a message is charged the larger of its declared total and the bytes received, plus
//! a fixed overhead per fragment), and a declared total larger than the cap is refused before
//! anything is allocated. Incomplete messages expire `max_age` after their first datagram. When a
//! cap is reached, the sender holding the most gives up its oldest message, so one flooding sender
//! cannot lock the others out.
//!
//! Fragments that arrive in order are appended to one buffer per message, reserved at the declared total when the
//! info datagram comes first (as eCAL sends it), so a message is copied once on its way in and the completed buffer
//! is handed out as it is; only fragments ahead of a gap are held apart until the gap fills.
//! [`Reassembler::push_filtered`] also lets the caller discard a message by its first fragment (a topic nobody here
//! subscribes to): the rest of its fragments are then only counted, never stored.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::WireError;
use super::header::{DatagramHeader, DatagramKind};

/// Bytes charged per stored fragment on top of its payload (bookkeeping), so that floods of
/// empty fragments are bounded too.
const FRAGMENT_OVERHEAD: usize = 64;

/// Limits of a [`Reassembler`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// An incomplete message is dropped this long after its first datagram (eCAL: 5 s).
    pub max_age: Duration,
    /// Most incomplete messages kept at once. When full, a new message evicts the oldest one of the senders that
    /// hold the most if they hold more than the new message's sender, else its sender's own oldest.
    pub max_messages: usize,
    /// Most bytes buffered over all incomplete messages; also the largest message accepted.
    pub max_bytes: usize,
    /// Most incomplete messages from one sending address (IP and port), so that one sender cannot take every slot:
    /// a new message from a sender at its limit drops that sender's oldest incomplete one.
    pub max_per_source: usize,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig {
            max_age: Duration::from_secs(5),
            max_messages: 64,
            max_bytes: 64 * 1024 * 1024,
            max_per_source: 64,
        }
    }
}

/// What a [`Reassembler`] has seen and dropped, one counter per reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReassemblyCounters {
    /// Datagrams passed to [`Reassembler::push`].
    pub datagrams: u64,
    /// Whole (type 3) messages returned.
    pub whole_messages: u64,
    /// Fragmented messages reassembled and returned.
    pub reassembled_messages: u64,
    /// Datagrams with a bad header (too short, magic, version, type, length).
    pub malformed: u64,
    /// Fragments whose index was already received (dropped, message kept).
    pub duplicate_fragments: u64,
    /// Second info datagrams for one message (dropped, message kept).
    pub duplicate_infos: u64,
    /// Fragments with an index ≥ the announced count (the message is dropped if the info came
    /// after them, otherwise only the fragment).
    pub out_of_range: u64,
    /// Info datagrams with an impossible count (0, or more fragments than bytes).
    pub invalid_info: u64,
    /// Messages whose declared or received size exceeds `max_bytes`.
    pub too_large: u64,
    /// Messages dropped because `max_messages` were in flight (the new one, or the oldest of the biggest holder).
    pub in_flight_limit: u64,
    /// Incomplete messages dropped because their sender started another with `max_per_source` in flight.
    pub source_limit: u64,
    /// Messages dropped because the byte budget was exhausted (the new one, or the oldest of the sender charged the
    /// most bytes).
    pub buffer_limit: u64,
    /// Complete messages whose fragment sizes did not add up to the declared total.
    pub length_mismatch: u64,
    /// Incomplete messages dropped after `max_age`.
    pub expired: u64,
    /// Fragmented messages the caller's filter refused by their first fragment (their other fragments were
    /// counted, not stored).
    pub refused: u64,
    /// Incomplete messages given up by the caller ([`Reassembler::abandon`]: their missing fragments were dropped
    /// by the kernel); their later fragments were counted among `datagrams`, not stored. (Absent from the JSON of a
    /// shoal that did not count it: read as 0.)
    #[cfg_attr(feature = "serde", serde(default))]
    pub abandoned: u64,
}

impl ReassemblyCounters {
    /// Adds `other`'s counts to these (two reassemblers reported as one).
    pub fn add(&mut self, other: &ReassemblyCounters) {
        let ReassemblyCounters {
            datagrams,
            whole_messages,
            reassembled_messages,
            malformed,
            duplicate_fragments,
            duplicate_infos,
            out_of_range,
            invalid_info,
            too_large,
            in_flight_limit,
            source_limit,
            buffer_limit,
            length_mismatch,
            expired,
            refused,
            abandoned,
        } = *other;
        self.datagrams += datagrams;
        self.whole_messages += whole_messages;
        self.reassembled_messages += reassembled_messages;
        self.malformed += malformed;
        self.duplicate_fragments += duplicate_fragments;
        self.duplicate_infos += duplicate_infos;
        self.out_of_range += out_of_range;
        self.invalid_info += invalid_info;
        self.too_large += too_large;
        self.in_flight_limit += in_flight_limit;
        self.source_limit += source_limit;
        self.buffer_limit += buffer_limit;
        self.length_mismatch += length_mismatch;
        self.expired += expired;
        self.refused += refused;
        self.abandoned += abandoned;
    }
}

#[derive(Debug)]
struct Pending {
    first_seen: Instant,
    /// (fragment count, total length) once the info datagram arrived.
    info: Option<(u32, u32)>,
    /// Fragments `0..next` back to back: the message so far (reserved at the declared total once it is known).
    data: Vec<u8>,
    /// Index of the first fragment not in `data`.
    next: u32,
    /// Fragments received ahead of a gap, moved into `data` when the gap fills.
    parked: BTreeMap<u32, Vec<u8>>,
    received_bytes: usize,
    /// Bytes currently charged against the global budget.
    charged: usize,
    /// The filter refused the message: its fragments are counted (until all arrived) and discarded.
    refused: bool,
    /// Fragments counted for a refused message.
    refused_fragments: u32,
}

impl Pending {
    fn new(now: Instant) -> Pending {
        Pending {
            first_seen: now,
            info: None,
            data: Vec::new(),
            next: 0,
            parked: BTreeMap::new(),
            received_bytes: 0,
            charged: 0,
            refused: false,
            refused_fragments: 0,
        }
    }

    /// Fragments received (stored or, for a refused message, counted).
    fn fragment_count(&self) -> usize {
        if self.refused { self.refused_fragments as usize } else { self.next as usize + self.parked.len() }
    }

    /// The highest fragment index received, if any (not tracked for refused messages).
    fn last_index(&self) -> Option<u32> {
        let in_order = self.next.checked_sub(1);
        self.parked.last_key_value().map(|(&k, _)| k).max(in_order)
    }

    fn has_fragment(&self, index: u32) -> bool {
        index < self.next || self.parked.contains_key(&index)
    }

    fn charge(&self) -> usize {
        if self.refused {
            return FRAGMENT_OVERHEAD;
        }
        let declared = self.info.map_or(0, |(_, total)| total as usize);
        declared.max(self.received_bytes) + self.fragment_count() * FRAGMENT_OVERHEAD
    }

    /// Stores fragment `index` (not held yet): appended when it is the next one, else parked.
    fn store(&mut self, index: u32, payload: &[u8]) {
        if index != self.next {
            self.parked.insert(index, payload.to_vec());
            return;
        }
        if let Some((_, total)) = self.info {
            self.data.reserve((total as usize).saturating_sub(self.data.len()));
        }
        self.data.extend_from_slice(payload);
        self.appended();
    }

    /// The next fragment was appended to `data`: the parked ones that follow it are moved in.
    fn appended(&mut self) {
        self.next += 1;
        while let Some(frag) = self.parked.remove(&self.next) {
            self.data.extend_from_slice(&frag);
            self.next += 1;
        }
    }

    /// Forgets the message's bytes: from now on its fragments are only counted. Returns its buffer.
    fn refuse(&mut self) -> Vec<u8> {
        self.refused_fragments = u32::try_from(self.fragment_count()).unwrap_or(u32::MAX);
        self.refused = true;
        self.parked.clear();
        std::mem::take(&mut self.data)
    }
}

/// A message's still empty, unallocated buffer `data` becomes a spare buffer that holds `total` bytes, if one does.
fn give_spare(spare: &mut Vec<Vec<u8>>, data: &mut Vec<u8>, total: usize) {
    if data.capacity() == 0
        && let Some(buf) = take_spare(spare, total)
    {
        *data = buf;
    }
}

/// Takes from `spare` the smallest (empty) buffer that holds `len` bytes, if `len` is worth one (at least
/// [`SPARE_MIN_BYTES`]: a small message does not take a large buffer) and one does.
pub(crate) fn take_spare(spare: &mut Vec<Vec<u8>>, len: usize) -> Option<Vec<u8>> {
    if len < SPARE_MIN_BYTES {
        return None;
    }
    let (i, _) = spare.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity())?;
    Some(spare.swap_remove(i))
}

/// Reassembles eCAL datagrams into framed messages. Sans-IO: the caller passes `now`.
#[derive(Debug)]
pub struct Reassembler {
    cfg: ReassemblyConfig,
    pending: HashMap<(SocketAddr, i32), Pending>,
    buffered: usize,
    counters: ReassemblyCounters,
    /// Buffers of delivered messages handed back ([`Self::recycle`]), reused for new messages: at most
    /// [`SPARE_BUFFERS`] of at most [`SPARE_MAX_BYTES`] each, [`SPARE_BYTES`] in all ([`keep_spare`]).
    spare: Vec<Vec<u8>>,
    /// The last [`ABANDONED_KEYS`] messages given up ([`Self::abandon`]), whose later datagrams are dropped unstored.
    abandoned: VecDeque<(SocketAddr, i32)>,
}

/// Messages given up that a reassembler remembers: a later fragment of an older one starts a new entry (which
/// expires as any incomplete message does).
pub const ABANDONED_KEYS: usize = 16;

/// Most spare buffers a reassembler keeps (a burst of large messages in flight at once wants several).
pub const SPARE_BUFFERS: usize = 8;
/// Most bytes (capacities) of spare buffers a reassembler keeps: eight of 1 MiB messages, two of 4 MiB.
pub const SPARE_BYTES: usize = 8 << 20;
/// Largest capacity of a buffer kept spare (larger ones are freed).
pub const SPARE_MAX_BYTES: usize = 4 << 20;
/// Smallest capacity worth keeping (smaller messages allocate little).
pub const SPARE_MIN_BYTES: usize = 64 << 10;

/// Whether a buffer of `capacity` bytes is worth keeping for reuse ([`SPARE_MIN_BYTES`]..=[`SPARE_MAX_BYTES`]).
pub(crate) fn worth_keeping(capacity: usize) -> bool {
    (SPARE_MIN_BYTES..=SPARE_MAX_BYTES).contains(&capacity)
}

/// Adds `buf`, emptied, to `spare` if it is worth keeping, then frees the smallest buffers while `spare` holds more
/// than [`SPARE_BUFFERS`] or [`SPARE_BYTES`]: the largest are kept (a spare too small for the messages that come
/// now would otherwise stay forever, and every one of them be allocated afresh).
pub(crate) fn keep_spare(spare: &mut Vec<Vec<u8>>, mut buf: Vec<u8>) {
    if !worth_keeping(buf.capacity()) {
        return;
    }
    buf.clear();
    spare.push(buf);
    while spare.len() > SPARE_BUFFERS || spare.iter().map(Vec::capacity).sum::<usize>() > SPARE_BYTES {
        let Some((i, _)) = spare.iter().enumerate().min_by_key(|(_, b)| b.capacity()) else { break };
        spare.swap_remove(i);
    }
}

impl Reassembler {
    /// An empty reassembler with the given limits.
    pub fn new(cfg: ReassemblyConfig) -> Self {
        Reassembler {
            cfg,
            pending: HashMap::new(),
            buffered: 0,
            counters: ReassemblyCounters::default(),
            spare: Vec::new(),
            abandoned: VecDeque::new(),
        }
    }

    /// The limits in use.
    pub fn config(&self) -> &ReassemblyConfig {
        &self.cfg
    }

    /// Drop counters so far.
    pub fn counters(&self) -> &ReassemblyCounters {
        &self.counters
    }

    /// Incomplete messages held.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Bytes charged against the budget by incomplete messages.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }

    /// When the oldest incomplete message expires, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.pending.values().map(|p| p.first_seen + self.cfg.max_age).min()
    }

    /// Drops incomplete messages older than `max_age`; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let max_age = self.cfg.max_age;
        let before = self.pending.len();
        let mut freed = 0usize;
        let spare = &mut self.spare;
        self.pending.retain(|_, p| {
            let keep = now.saturating_duration_since(p.first_seen) < max_age;
            if !keep {
                freed += p.charged;
                keep_spare(spare, std::mem::take(&mut p.data));
            }
            keep
        });
        self.buffered -= freed;
        let n = before - self.pending.len();
        self.counters.expired += n as u64;
        if n > 0 {
            tracing::debug!(expired = n, "ecaludp reassembly: incomplete messages expired");
        }
        n
    }

    /// Feeds one received datagram. Returns the complete framed message when this datagram
    /// completes one (borrowed for a whole datagram, owned after reassembly), `Ok(None)` while a
    /// message is incomplete, or the reason the datagram was dropped (also counted).
    pub fn push<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a [u8],
    ) -> Result<Option<Cow<'a, [u8]>>, WireError> {
        self.push_filtered(now, from, datagram, |_| true)
    }

    /// [`push`](Self::push), where `wanted` sees the first fragment of every fragmented message (the message's
    /// first bytes) once: when it returns false the message is discarded, what was stored of it freed, and its
    /// remaining fragments are only counted (`refused`); it is never returned. Whole datagrams are not filtered.
    pub fn push_filtered<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'a [u8],
        wanted: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Option<Cow<'a, [u8]>>, WireError> {
        self.counters.datagrams += 1;
        if !self.pending.is_empty() {
            self.expire(now);
        }
        let (header, payload) = match DatagramHeader::parse(datagram) {
            Ok(v) => v,
            Err(e) => {
                self.counters.malformed += 1;
                return Err(e);
            }
        };
        let owned = match header.kind {
            DatagramKind::Whole => {
                self.counters.whole_messages += 1;
                return Ok(Some(Cow::Borrowed(payload)));
            }
            // A fragment of a message given up. (Its info came before the first fragment: an info datagram
            // starts a new message that reuses the id.)
            DatagramKind::Fragment if self.abandoned.contains(&(from, header.id)) => return Ok(None),
            DatagramKind::FragmentInfo => {
                self.abandoned.retain(|k| *k != (from, header.id));
                self.on_info(now, (from, header.id), header.num, header.len)
            }
            DatagramKind::Fragment => self.on_fragment(now, (from, header.id), header.num, payload, wanted),
        };
        owned.map(|done| done.map(Cow::Owned))
    }

    fn drop_message(&mut self, key: &(SocketAddr, i32)) {
        if let Some(p) = self.pending.remove(key) {
            self.buffered -= p.charged;
            keep_spare(&mut self.spare, p.data);
        }
    }

    /// Recomputes the charge of `key` and enforces the byte budget.
    ///
    /// Over budget, the sender charged the most bytes gives up its oldest message (its own older ones first when
    /// that is `key`'s sender), as long as it would still hold more than `key`'s sender; otherwise `key`'s message is
    /// dropped. So a sender that floods the budget (say with messages declared 64 MiB long and never completed)
    /// loses its own messages, not the messages of senders that hold less.
    fn recharge(&mut self, key: &(SocketAddr, i32)) -> Result<(), WireError> {
        let Some(p) = self.pending.get(key) else { return Ok(()) };
        let new_charge = p.charge();
        loop {
            let Some(p) = self.pending.get(key) else { return Ok(()) };
            let others = self.buffered - p.charged;
            if others + new_charge <= self.cfg.max_bytes {
                break;
            }
            let mut held: HashMap<SocketAddr, usize> = HashMap::new();
            for (k, q) in &self.pending {
                if k != key {
                    *held.entry(k.0).or_default() += q.charged;
                }
            }
            let mine = held.get(&key.0).copied().unwrap_or(0);
            // Ties go to the lowest address, so the choice does not depend on the map's order.
            let top = held.iter().max_by_key(|(a, n)| (**n, std::cmp::Reverse(**a))).map(|(a, n)| (*a, *n));
            let victim_sender = match top {
                Some((addr, _)) if addr == key.0 => Some(addr),
                Some((addr, n)) if n > mine + new_charge => Some(addr),
                _ => None,
            };
            self.counters.buffer_limit += 1;
            let oldest = victim_sender.and_then(|addr| {
                self.pending
                    .iter()
                    .filter(|(k, _)| k.0 == addr && *k != key)
                    .min_by_key(|(k, q)| (q.first_seen, **k))
                    .map(|(k, _)| *k)
            });
            match oldest {
                Some(oldest) => self.drop_message(&oldest),
                None => {
                    self.drop_message(key);
                    return Err(WireError::BufferFull { limit: self.cfg.max_bytes });
                }
            }
        }
        if let Some(p) = self.pending.get_mut(key) {
            self.buffered = self.buffered - p.charged + new_charge;
            p.charged = new_charge;
        }
        Ok(())
    }

    fn entry(&mut self, now: Instant, key: (SocketAddr, i32)) -> Result<&mut Pending, WireError> {
        if !self.pending.contains_key(&key) && self.pending.len() >= self.cfg.max_messages {
            // Full: of the senders holding the most incomplete messages, the oldest message goes, if they hold more
            // than the newcomer's sender does; else the newcomer's sender gives up its own oldest (a newer message
            // supersedes it). Neither one flooding sender nor many (one message from each of many addresses) can lock a sender holding fewer out, and a sender
            // cannot evict others to hold more than they do.
            let mut held: HashMap<SocketAddr, usize> = HashMap::new();
            for (addr, _) in self.pending.keys() {
                *held.entry(*addr).or_default() += 1;
            }
            let mine = held.get(&key.0).copied().unwrap_or(0);
            let top = held.values().copied().max().unwrap_or(0);
            self.counters.in_flight_limit += 1;
            if top == 0 {
                return Err(WireError::TooManyInFlight { limit: self.cfg.max_messages });
            }
            let from_top = top > mine;
            let oldest = self
                .pending
                .iter()
                .filter(|((a, _), _)| if from_top { held.get(a) == Some(&top) } else { *a == key.0 })
                .min_by_key(|(k, p)| (p.first_seen, **k))
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.drop_message(&oldest);
            }
        }
        if !self.pending.contains_key(&key)
            && self.pending.keys().filter(|(addr, _)| *addr == key.0).count() >= self.cfg.max_per_source
        {
            // A sender's newer message supersedes its oldest incomplete one (lost fragments must not lock it out).
            let oldest = self
                .pending
                .iter()
                .filter(|((addr, _), _)| *addr == key.0)
                .min_by_key(|(k, p)| (p.first_seen, **k))
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.counters.source_limit += 1;
                self.drop_message(&oldest);
            }
        }
        Ok(self.pending.entry(key).or_insert_with(|| Pending::new(now)))
    }

    fn on_info(
        &mut self,
        now: Instant,
        key: (SocketAddr, i32),
        count: u32,
        total: u32,
    ) -> Result<Option<Vec<u8>>, WireError> {
        if total as usize > self.cfg.max_bytes {
            self.counters.too_large += 1;
            self.drop_message(&key);
            return Err(WireError::MessageTooLarge { declared: total as u64, limit: self.cfg.max_bytes });
        }
        if count == 0 || count > total.max(1) {
            self.counters.invalid_info += 1;
            self.drop_message(&key);
            return Err(WireError::InvalidFragmentInfo { count, total });
        }
        let p = self.entry(now, key)?;
        if p.info.is_some() {
            self.counters.duplicate_infos += 1;
            return Err(WireError::DuplicateInfo);
        }
        // The buffer is reserved at the declared total by the next in-order fragment (`Pending::store`), once the
        // budget has taken the declared total: an info datagram alone allocates nothing.
        p.info = Some((count, total));
        if let Some(last) = p.last_index()
            && last >= count
        {
            self.counters.out_of_range += 1;
            self.drop_message(&key);
            return Err(WireError::FragmentIndexOutOfRange { index: last, count });
        }
        self.recharge(&key)?;
        self.complete_if_done(&key)
    }

    fn on_fragment(
        &mut self,
        now: Instant,
        key: (SocketAddr, i32),
        index: u32,
        payload: &[u8],
        wanted: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Option<Vec<u8>>, WireError> {
        // Without an info datagram an index can still be bounded: every fragment carries at
        // least one byte of a message of at most max_bytes.
        let limit = match self.pending.get(&key).and_then(|p| p.info) {
            Some((count, _)) => count as u64,
            None => self.cfg.max_bytes as u64,
        };
        if index as u64 >= limit {
            self.counters.out_of_range += 1;
            return Err(WireError::FragmentIndexOutOfRange { index, count: limit.min(u32::MAX as u64) as u32 });
        }
        let max_bytes = self.cfg.max_bytes;
        let p = self.entry(now, key)?;
        if p.refused {
            p.refused_fragments = p.refused_fragments.saturating_add(1);
            return self.complete_if_done(&key);
        }
        if p.has_fragment(index) {
            self.counters.duplicate_fragments += 1;
            return Err(WireError::DuplicateFragment { index });
        }
        let received = p.received_bytes + payload.len();
        let declared = p.info.map(|(_, total)| total as usize);
        if received > max_bytes || declared.is_some_and(|t| received > t) {
            let declared = declared.unwrap_or(max_bytes);
            if received > max_bytes {
                self.counters.too_large += 1;
            } else {
                self.counters.length_mismatch += 1;
            }
            self.drop_message(&key);
            return Err(WireError::LengthMismatch { declared: declared as u64, received: received as u64 });
        }
        p.received_bytes = received;
        if index == 0 && !wanted(payload) {
            let buf = p.refuse();
            keep_spare(&mut self.spare, buf);
            let Some(p) = self.pending.get_mut(&key) else { return Ok(None) };
            p.refused_fragments = p.refused_fragments.saturating_add(1);
            self.counters.refused += 1;
        } else {
            // The entry again, beside the spare buffers (`p` borrowed all of `self`).
            if let Some(p) = self.pending.get_mut(&key) {
                if index == p.next
                    && let Some((_, total)) = p.info
                {
                    give_spare(&mut self.spare, &mut p.data, total as usize);
                }
                p.store(index, payload);
            }
        }
        self.recharge(&key)?;
        self.complete_if_done(&key)
    }

    /// Gives up `from`'s incomplete message `id`, for a caller that knows it cannot complete: a fragment of it came
    /// past a gap, and the socket's drop count rose in between (the missing fragments were dropped by the kernel,
    /// not reordered). What it held goes (its buffer kept spare), it is counted (`abandoned`), and its later
    /// fragments, the one that told included, are counted among `datagrams` and dropped unstored, so that a
    /// receiver that fell behind spends nothing more on it (the last [`ABANDONED_KEYS`] messages given up are
    /// remembered; an info datagram with the same id starts a new message). False when no such message is held.
    pub fn abandon(&mut self, from: SocketAddr, id: i32) -> bool {
        let key = (from, id);
        let Some(p) = self.pending.remove(&key) else { return false };
        self.buffered -= p.charged;
        keep_spare(&mut self.spare, p.data);
        self.counters.abandoned += 1;
        self.counters.datagrams += 1;
        if self.abandoned.len() == ABANDONED_KEYS {
            self.abandoned.pop_front();
        }
        self.abandoned.push_back(key);
        true
    }

    /// Hands back the buffer of a message this reassembler returned, once its reader is done with it: kept (as
    /// [`keep_spare`] keeps it: up to [`SPARE_BUFFERS`] and [`SPARE_BYTES`], if its capacity is
    /// [`SPARE_MIN_BYTES`]..=[`SPARE_MAX_BYTES`]) for a later message of at most its capacity, which then needs no
    /// fresh memory (no page faults); else freed.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        keep_spare(&mut self.spare, buf);
    }

    /// Spare buffers held ([`Self::recycle`]).
    pub fn spare_buffers(&self) -> usize {
        self.spare.len()
    }

    /// Receiving in place: for `from`'s incomplete message `id`, once its info datagram arrived, the index of the
    /// next fragment in order, the most bytes it can have (the declared total less what arrived so far) and the
    /// message's buffer, which holds the declared total (reserved here; the budget charged it with the info) and
    /// to which the fragment is to be appended. Then [`Self::commit_in_place`], or [`Self::undo_in_place`] when what
    /// was appended is not that fragment. `None` for a message unknown, complete, refused, expired at `now` (expired
    /// messages are dropped first, as [`Self::push`] does) or without its info.
    pub fn next_fragment_target(
        &mut self,
        now: Instant,
        from: SocketAddr,
        id: i32,
    ) -> Option<(u32, usize, &mut Vec<u8>)> {
        if !self.pending.is_empty() {
            self.expire(now);
        }
        let p = self.pending.get_mut(&(from, id))?;
        let (count, total) = p.info?;
        if p.refused || p.next >= count || p.received_bytes > total as usize {
            return None;
        }
        // Fragments parked ahead of a gap count against the declared total too (a longer fragment is pushed, and
        // refused, as usual).
        let room = total as usize - p.received_bytes;
        give_spare(&mut self.spare, &mut p.data, total as usize);
        p.data.reserve_exact(total as usize - p.data.len());
        Some((p.next, room, &mut p.data))
    }

    /// The next fragment in order (`index`, as [`Self::next_fragment_target`] gave it) of `from`'s message `id` was
    /// appended in place, `len` bytes, its header checked by the caller (a fragment of this message, this index,
    /// `len` bytes long), with nothing else done to the reassembler since: it counts as [`Self::push_filtered`] at
    /// the same time would count it, `wanted` seeing the first fragment.
    pub fn commit_in_place(
        &mut self,
        from: SocketAddr,
        id: i32,
        index: u32,
        len: usize,
        wanted: impl FnOnce(&[u8]) -> bool,
    ) -> Result<Option<Vec<u8>>, WireError> {
        self.counters.datagrams += 1;
        let key = (from, id);
        let Some(p) = self.pending.get_mut(&key) else { return Ok(None) };
        if index != p.next || p.data.len() < len {
            // Not what next_fragment_target said: the caller's mistake; the message cannot be trusted.
            self.counters.malformed += 1;
            self.drop_message(&key);
            return Err(WireError::DuplicateFragment { index });
        }
        p.received_bytes += len;
        if index == 0 && !wanted(&p.data[..len]) {
            let buf = p.refuse();
            keep_spare(&mut self.spare, buf);
            let Some(p) = self.pending.get_mut(&key) else { return Ok(None) };
            p.refused_fragments = p.refused_fragments.saturating_add(1);
            self.counters.refused += 1;
        } else {
            p.appended();
        }
        self.recharge(&key)?;
        self.complete_if_done(&key)
    }

    /// What was appended in place to `from`'s message `id` beyond its first `keep` bytes is not its next fragment:
    /// moved to the end of `out` (the caller then pushes the datagram it belongs to as usual).
    pub fn undo_in_place(&mut self, from: SocketAddr, id: i32, keep: usize, out: &mut Vec<u8>) {
        if let Some(p) = self.pending.get_mut(&(from, id))
            && p.data.len() > keep
        {
            out.extend_from_slice(&p.data[keep..]);
            p.data.truncate(keep);
        }
    }

    fn complete_if_done(&mut self, key: &(SocketAddr, i32)) -> Result<Option<Vec<u8>>, WireError> {
        let Some(p) = self.pending.get(key) else { return Ok(None) };
        let Some((count, total)) = p.info else { return Ok(None) };
        if p.fragment_count() < count as usize {
            return Ok(None);
        }
        let Some(p) = self.pending.remove(key) else { return Ok(None) };
        self.buffered -= p.charged;
        if p.refused {
            keep_spare(&mut self.spare, p.data);
            return Ok(None);
        }
        if p.received_bytes != total as usize {
            keep_spare(&mut self.spare, p.data);
            self.counters.length_mismatch += 1;
            return Err(WireError::LengthMismatch { declared: total as u64, received: p.received_bytes as u64 });
        }
        // `count` distinct indices below `count`: all of them, so every parked fragment went into `data`.
        debug_assert!(p.parked.is_empty() && p.data.len() == p.received_bytes);
        self.counters.reassembled_messages += 1;
        Ok(Some(p.data))
    }
}
