//! Optional authentication between shoal peers (`[shoal_auth]`): an envelope around each ecaludp datagram.
//!
//! ```text
//!  0  4  magic "SHOA" (not "ECAL": eCAL's ecaludp socket drops it before reassembly and receives on)
//!  4  1  version 1
//!  5  1  channel: 1 registration, 2 UDP data (so a datagram cannot be moved from one port to the other)
//!  6  2  reserved, 0
//!  8  8  sender id (random per sealer: the registration of a process, one UDP publisher)
//! 16  8  counter (1, 2, 3, ... per sender id)
//! 24  8  sender's wall clock, ns since the Unix epoch
//! 32  n  the eCAL datagram (24-byte ecaludp header and its payload) as it would be sent without a key
//! 32+n 16 tag: HMAC-SHA256 over bytes 0..32+n, the first 16 bytes
//! ```
//!
//! A receiver with the key checks the tag (constant time), then the [`ReplayGuard`]: the time must be within
//! `max_age` of its own clock (60 s by default), and the counter new within a sliding window of [`REPLAY_WINDOW`]
//! counters per sender id (as IPsec and WireGuard do); sender state is bounded and the least recently heard sender
//! is evicted first. A sender the guard has no window for (a first contact: the receiver restarted, or evicted it)
//! is heard only from envelopes written after the receiver started, or after its last eviction, less
//! [`CLOCK_ALLOWANCE`]: so a capture cannot be replayed to a restarted receiver within `max_age`. Only datagrams
//! whose tag verified create or move sender state. Nothing here panics on received bytes.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub use crate::config::AuthKey;
use crate::sync::lock;
use crate::wire::reassembly::{Reassembler, ReassemblyConfig};

/// Magic of an authenticated datagram.
pub const AUTH_MAGIC: [u8; 4] = *b"SHOA";
/// The envelope version this code writes and reads.
pub const AUTH_VERSION: u8 = 1;
/// Bytes before the eCAL datagram.
pub const ENVELOPE_HEADER_LEN: usize = 32;
/// Bytes of the tag after it.
pub const TAG_LEN: usize = 16;
/// Bytes the envelope adds to a datagram.
pub const ENVELOPE_OVERHEAD: usize = ENVELOPE_HEADER_LEN + TAG_LEN;
/// Counters remembered behind the highest one of a sender.
pub const REPLAY_WINDOW: u64 = 1024;
type HmacSha256 = Hmac<Sha256>;

fn mac_of(key: &AuthKey) -> HmacSha256 {
    // HMAC-SHA256 takes keys of any length (AuthKey bounds it to 16..=64 bytes anyway).
    HmacSha256::new_from_slice(key.bytes()).unwrap_or_else(|_| unreachable!("HMAC accepts every key length"))
}

/// Which socket a datagram is for (part of what the tag covers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// The registration port (14000).
    Registration,
    /// The UDP data port (14002).
    Data,
}

impl Channel {
    fn to_u8(self) -> u8 {
        match self {
            Channel::Registration => 1,
            Channel::Data => 2,
        }
    }
}

/// Why a datagram was not accepted, one cause per counter of [`AuthCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AuthReject {
    /// No envelope, on a protected topic (or a registration entry that was authenticated).
    #[error("unauthenticated (no envelope) for a protected topic")]
    Unsigned,
    /// An envelope arrived but this process has no key.
    #[error("authenticated datagram, but this process has no key ([shoal_auth])")]
    NoKey,
    /// Too short, wrong version, wrong channel or reserved bytes set.
    #[error("malformed authentication envelope")]
    Malformed,
    /// The tag does not verify: another key, or altered bytes.
    #[error("authentication tag does not verify (another key, or altered)")]
    BadTag,
    /// A counter seen before, or behind the window.
    #[error("replayed (counter already seen or behind the window)")]
    Replayed,
    /// The sender's time is further than `max_age` from ours.
    #[error("too old (sender time outside max_age)")]
    Stale,
}

impl AuthReject {
    const ALL: [AuthReject; 6] = [
        AuthReject::Unsigned,
        AuthReject::NoKey,
        AuthReject::Malformed,
        AuthReject::BadTag,
        AuthReject::Replayed,
        AuthReject::Stale,
    ];

    fn index(self) -> usize {
        match self {
            AuthReject::Unsigned => 0,
            AuthReject::NoKey => 1,
            AuthReject::Malformed => 2,
            AuthReject::BadTag => 3,
            AuthReject::Replayed => 4,
            AuthReject::Stale => 5,
        }
    }
}

/// Now as ns since the Unix epoch (0 if the clock is before it).
pub fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Seals datagrams of one sender id.
pub struct Sealer {
    mac: HmacSha256,
    channel: Channel,
    sender_id: u64,
    counter: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("channel", &self.channel).field("sender_id", &self.sender_id).finish()
    }
}

impl Sealer {
    /// A sealer with a random sender id.
    pub fn new(key: &AuthKey, channel: Channel) -> Sealer {
        Sealer::with_sender_id(key, channel, rand::random())
    }

    /// A sealer with the given sender id (tests).
    pub fn with_sender_id(key: &AuthKey, channel: Channel, sender_id: u64) -> Sealer {
        Sealer { mac: mac_of(key), channel, sender_id, counter: 0 }
    }

    /// Envelope header and tag for the datagram made of `parts`, sent at `time_ns`; send
    /// `[header, parts..., tag]` as one datagram.
    pub fn seal_parts(&mut self, parts: &[&[u8]], time_ns: u64) -> ([u8; ENVELOPE_HEADER_LEN], [u8; TAG_LEN]) {
        self.counter += 1;
        let mut head = [0u8; ENVELOPE_HEADER_LEN];
        head[0..4].copy_from_slice(&AUTH_MAGIC);
        head[4] = AUTH_VERSION;
        head[5] = self.channel.to_u8();
        head[8..16].copy_from_slice(&self.sender_id.to_le_bytes());
        head[16..24].copy_from_slice(&self.counter.to_le_bytes());
        head[24..32].copy_from_slice(&time_ns.to_le_bytes());
        let mut mac = self.mac.clone();
        mac.update(&head);
        for p in parts {
            mac.update(p);
        }
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&full[..TAG_LEN]);
        (head, tag)
    }

    /// The sealed form of one datagram.
    pub fn seal(&mut self, datagram: &[u8], time_ns: u64) -> Vec<u8> {
        let (head, tag) = self.seal_parts(&[datagram], time_ns);
        let mut out = Vec::with_capacity(datagram.len() + ENVELOPE_OVERHEAD);
        out.extend_from_slice(&head);
        out.extend_from_slice(datagram);
        out.extend_from_slice(&tag);
        out
    }
}

/// Whether a datagram carries the envelope (starts with [`AUTH_MAGIC`]).
pub fn is_envelope(datagram: &[u8]) -> bool {
    datagram.starts_with(&AUTH_MAGIC)
}

/// The fields of an envelope, parsed without the key (the tag not checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// The channel byte (1 registration, 2 data; others are refused by [`Verifier::open`]).
    pub channel: u8,
    /// Sender id.
    pub sender_id: u64,
    /// Counter.
    pub counter: u64,
    /// Sender's time, ns since the Unix epoch.
    pub time_ns: u64,
    /// The eCAL datagram inside.
    pub inner: &'a [u8],
    /// The tag.
    pub tag: &'a [u8],
}

/// Parses an envelope: magic, version 1, reserved bytes 0, room for the tag.
pub fn parse_envelope(datagram: &[u8]) -> Result<Envelope<'_>, AuthReject> {
    let Some((head, rest)) = datagram.split_first_chunk::<ENVELOPE_HEADER_LEN>() else {
        return Err(AuthReject::Malformed);
    };
    if head[0..4] != AUTH_MAGIC || head[4] != AUTH_VERSION || head[6..8] != [0, 0] {
        return Err(AuthReject::Malformed);
    }
    let Some(split) = rest.len().checked_sub(TAG_LEN) else {
        return Err(AuthReject::Malformed);
    };
    let (inner, tag) = rest.split_at(split);
    let word = |off: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&head[off..off + 8]);
        u64::from_le_bytes(b)
    };
    Ok(Envelope { channel: head[5], sender_id: word(8), counter: word(16), time_ns: word(24), inner, tag })
}

/// Checks envelopes of one channel against the key.
#[derive(Clone)]
pub struct Verifier {
    mac: HmacSha256,
    channel: Channel,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("channel", &self.channel).finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `channel`.
    pub fn new(key: &AuthKey, channel: Channel) -> Verifier {
        Verifier { mac: mac_of(key), channel }
    }

    /// The envelope when it is well formed, for this channel, and its tag verifies (replay is checked apart, by a
    /// [`ReplayGuard`]).
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Result<Envelope<'a>, AuthReject> {
        let env = parse_envelope(datagram)?;
        if env.channel != self.channel.to_u8() {
            return Err(AuthReject::Malformed);
        }
        let mut mac = self.mac.clone();
        mac.update(&datagram[..ENVELOPE_HEADER_LEN + env.inner.len()]);
        mac.verify_truncated_left(env.tag).map_err(|_| AuthReject::BadTag)?;
        Ok(env)
    }
}

#[derive(Debug)]
struct SenderWindow {
    /// Highest counter accepted.
    top: u64,
    /// Bit `c % REPLAY_WINDOW` set: counter `c` (within the window behind `top`) was accepted.
    bits: [u64; (REPLAY_WINDOW / 64) as usize],
    last_heard: Instant,
}

impl SenderWindow {
    fn bit(c: u64) -> (usize, u64) {
        let i = c % REPLAY_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    fn accept(&mut self, counter: u64) -> Result<(), AuthReject> {
        if counter > self.top {
            if counter - self.top >= REPLAY_WINDOW {
                self.bits = [0; (REPLAY_WINDOW / 64) as usize];
            } else {
                // Clear what the window leaves behind, the new top's own bit included.
                for c in self.top + 1..=counter {
                    let (w, m) = Self::bit(c);
                    self.bits[w] &= !m;
                }
            }
            self.top = counter;
        } else if self.top - counter >= REPLAY_WINDOW {
            return Err(AuthReject::Replayed);
        }
        let (w, m) = Self::bit(counter);
        if self.bits[w] & m != 0 {
            return Err(AuthReject::Replayed);
        }
        self.bits[w] |= m;
        Ok(())
    }
}

/// How much older than a receiver's start (or its last eviction of a sender's window) the first envelope it takes
/// from a sender may be: the clocks of two hosts may differ by this much without losing traffic at a receiver's
/// start. A sender whose clock lags further is heard once its clock has passed the receiver's start.
pub const CLOCK_ALLOWANCE: Duration = Duration::from_secs(2);

/// Replay protection: time within `max_age`, counter new in a sliding window per sender, at most `max_senders`
/// senders remembered (the least recently heard one is evicted for a new one); a sender without a window is heard
/// only from envelopes newer than the guard's start or last eviction, less [`CLOCK_ALLOWANCE`].
#[derive(Debug)]
pub struct ReplayGuard {
    senders: HashMap<u64, SenderWindow>,
    max_senders: usize,
    max_age: Duration,
    evicted: u64,
    /// Envelopes of senders without a window must be at least this new (Unix ns).
    floor_ns: u64,
}

impl ReplayGuard {
    /// A guard starting now; `max_age` zero means the time is not checked (nor the first-contact floor).
    pub fn new(max_senders: usize, max_age: Duration) -> ReplayGuard {
        ReplayGuard::starting_at(max_senders, max_age, unix_ns())
    }

    /// A guard whose start is `start_ns` (Unix ns).
    pub fn starting_at(max_senders: usize, max_age: Duration, start_ns: u64) -> ReplayGuard {
        ReplayGuard {
            senders: HashMap::new(),
            max_senders: max_senders.max(1),
            max_age,
            evicted: 0,
            floor_ns: start_ns.saturating_sub(CLOCK_ALLOWANCE.as_nanos() as u64),
        }
    }

    /// Checks and records an envelope whose tag verified, at `now` (monotonic) and `now_ns` (Unix ns).
    pub fn check(&mut self, env: &Envelope<'_>, now: Instant, now_ns: u64) -> Result<(), AuthReject> {
        if env.counter == 0 {
            return Err(AuthReject::Malformed);
        }
        if !self.max_age.is_zero() {
            let age = u128::from(now_ns.abs_diff(env.time_ns));
            if age > self.max_age.as_nanos() {
                return Err(AuthReject::Stale);
            }
            // A first contact written before this guard started (or forgot a sender) may be a capture: what it
            // replays cannot be told from the original any more.
            if env.time_ns < self.floor_ns && !self.senders.contains_key(&env.sender_id) {
                return Err(AuthReject::Stale);
            }
        }
        if !self.senders.contains_key(&env.sender_id) && self.senders.len() >= self.max_senders {
            let oldest = self.senders.iter().min_by_key(|(_, w)| w.last_heard).map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.senders.remove(&id);
                self.evicted += 1;
                // The evicted sender's captures would pass as first contacts: only newer ones may from now on.
                self.floor_ns = self.floor_ns.max(now_ns.saturating_sub(CLOCK_ALLOWANCE.as_nanos() as u64));
            }
        }
        match self.senders.entry(env.sender_id) {
            Entry::Occupied(mut o) => {
                let w = o.get_mut();
                w.accept(env.counter)?;
                w.last_heard = now;
            }
            Entry::Vacant(v) => {
                let mut w = SenderWindow { top: 0, bits: [0; (REPLAY_WINDOW / 64) as usize], last_heard: now };
                w.accept(env.counter)?;
                v.insert(w);
            }
        }
        Ok(())
    }

    /// Senders remembered.
    pub fn senders(&self) -> usize {
        self.senders.len()
    }

    /// Senders evicted to make room for new ones.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

/// The receiving side of one channel with a key: the tag check, the replay guard, and the reassembly of what
/// verified envelopes carry, apart from unauthenticated datagrams (whose fragments could otherwise be mixed into an
/// authenticated message with the same sender address and id).
#[derive(Debug)]
pub struct AuthReceiver {
    /// Checks tags.
    pub verifier: Verifier,
    /// Rejects replayed and stale envelopes.
    pub guard: ReplayGuard,
    /// Reassembles authenticated datagrams only.
    pub reassembler: Reassembler,
}

impl AuthReceiver {
    /// A receiver for `channel` with `key`, remembering at most `max_senders` senders.
    pub fn new(
        key: &AuthKey,
        channel: Channel,
        max_senders: usize,
        max_age: Duration,
        reassembly: ReassemblyConfig,
    ) -> AuthReceiver {
        AuthReceiver {
            verifier: Verifier::new(key, channel),
            guard: ReplayGuard::new(max_senders, max_age),
            reassembler: Reassembler::new(reassembly),
        }
    }
}

/// A received datagram accepted for reassembly by [`open_datagram`].
#[derive(Debug)]
pub struct Opened<'a, 'r> {
    /// The eCAL datagram: the whole datagram when it was plain, what the envelope carried otherwise.
    pub datagram: &'a [u8],
    /// It came in a verified, new envelope.
    pub authenticated: bool,
    /// Where it is reassembled: the authenticated reassembler or the plain one.
    pub reassembler: &'r mut Reassembler,
}

/// The prologue of every receiver (registration and the UDP data layer): a plain datagram goes to `plain`; an
/// envelope is opened with `auth` (tag, then replay guard; verified envelopes and evicted senders are counted in
/// `stats`) and what it carries goes to `auth`'s reassembler. `Err` is the cause of a refusal, which the caller
/// counts with [`AuthStats::count`] (it knows which of its topics to attribute it to); an envelope without a key is
/// [`AuthReject::NoKey`].
pub fn open_datagram<'a, 'r>(
    auth: Option<&'r mut AuthReceiver>,
    plain: &'r mut Reassembler,
    stats: &AuthStats,
    channel: Channel,
    now: Instant,
    datagram: &'a [u8],
) -> Result<Opened<'a, 'r>, AuthReject> {
    if !is_envelope(datagram) {
        return Ok(Opened { datagram, authenticated: false, reassembler: plain });
    }
    let auth = auth.ok_or(AuthReject::NoKey)?;
    let env = auth.verifier.open(datagram)?;
    let evicted = auth.guard.evicted();
    let checked = auth.guard.check(&env, now, unix_ns());
    stats.count_evicted(auth.guard.evicted() - evicted);
    checked?;
    stats.count_verified(channel);
    Ok(Opened { datagram: env.inner, authenticated: true, reassembler: &mut auth.reassembler })
}

/// Datagrams or samples not accepted, one counter per cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AuthCounts {
    /// Without an envelope, for a protected topic (or an entry that was authenticated).
    pub unsigned: u64,
    /// With an envelope while this process has no key.
    pub no_key: u64,
    /// Malformed envelopes.
    pub malformed: u64,
    /// Tags that do not verify (another key, or altered bytes).
    pub bad_tag: u64,
    /// Replayed counters.
    pub replayed: u64,
    /// Sender time outside `max_age`.
    pub stale: u64,
}

impl AuthCounts {
    fn add(&mut self, cause: AuthReject, n: u64) {
        let f = match cause {
            AuthReject::Unsigned => &mut self.unsigned,
            AuthReject::NoKey => &mut self.no_key,
            AuthReject::Malformed => &mut self.malformed,
            AuthReject::BadTag => &mut self.bad_tag,
            AuthReject::Replayed => &mut self.replayed,
            AuthReject::Stale => &mut self.stale,
        };
        *f += n;
    }

    /// All causes together.
    pub fn total(&self) -> u64 {
        self.unsigned + self.no_key + self.malformed + self.bad_tag + self.replayed + self.stale
    }
}

/// This process's `[shoal_auth]` refusals (in `Snapshot::auth`): the drops of both channels and per topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AuthSummary {
    /// Whether this process has a key.
    pub enabled: bool,
    /// Registration datagrams and samples dropped.
    pub registration: AuthCounts,
    /// UDP data datagrams and samples dropped.
    pub data: AuthCounts,
    /// Datagrams accepted with a verified envelope (registration, data).
    pub verified: (u64, u64),
    /// Drops per topic, for those whose topic was known (at most 256 topics; the others only in the
    /// totals).
    pub topics: Vec<(String, AuthCounts)>,
    /// Replay-window senders evicted to make room (registration and data together).
    pub senders_evicted: u64,
}

/// Topics with their own drop counters in [`AuthStats`].
pub const MAX_TOPICS: usize = 256;

/// The process's authentication drop counters, shared by registration and the UDP data layer; each cause is
/// logged once (warn), then only counted.
#[derive(Debug, Default)]
pub struct AuthStats {
    enabled: bool,
    counts: [[AtomicU64; 6]; 2],
    verified: [AtomicU64; 2],
    evicted: AtomicU64,
    logged: AtomicU32,
    topics: Mutex<std::collections::BTreeMap<String, AuthCounts>>,
}

impl AuthStats {
    /// Counters for a process with (`enabled`) or without a key.
    pub fn new(enabled: bool) -> AuthStats {
        AuthStats { enabled, ..AuthStats::default() }
    }

    fn ch(channel: Channel) -> usize {
        match channel {
            Channel::Registration => 0,
            Channel::Data => 1,
        }
    }

    /// Counts one drop; `topic` when it is known. The first drop of each cause and channel is logged.
    pub fn count(&self, channel: Channel, cause: AuthReject, topic: Option<&str>, from: &dyn std::fmt::Display) {
        self.count_n(channel, cause, topic, from, 1);
    }

    /// Counts `n` refusals of one cause at once (the samples of one refused datagram), as `n` calls of
    /// [`count`](Self::count) would.
    pub fn count_n(
        &self,
        channel: Channel,
        cause: AuthReject,
        topic: Option<&str>,
        from: &dyn std::fmt::Display,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        self.counts[Self::ch(channel)][cause.index()].fetch_add(n, Ordering::Relaxed);
        let bit = 1u32 << (Self::ch(channel) * 8 + cause.index());
        if self.logged.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            tracing::warn!(
                "shoal_auth: {} datagram from {from}{} dropped: {cause} (logged once; further drops are counted)",
                match channel {
                    Channel::Registration => "registration",
                    Channel::Data => "UDP data",
                },
                topic.map(|t| format!(" on topic {t:?}")).unwrap_or_default(),
            );
        }
        if let Some(t) = topic {
            let mut map = lock(&self.topics);
            let len = map.len();
            if let Some(c) = map.get_mut(t) {
                c.add(cause, n);
            } else if len < MAX_TOPICS {
                let mut c = AuthCounts::default();
                c.add(cause, n);
                map.insert(t.to_owned(), c);
            }
        }
    }

    /// Counts one datagram whose envelope verified.
    pub fn count_verified(&self, channel: Channel) {
        self.verified[Self::ch(channel)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts replay-window senders evicted.
    pub fn count_evicted(&self, n: u64) {
        if n > 0 {
            self.evicted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The counters now.
    pub fn summary(&self) -> AuthSummary {
        let counts = |ch: usize| {
            let mut c = AuthCounts::default();
            for cause in AuthReject::ALL {
                c.add(cause, self.counts[ch][cause.index()].load(Ordering::Relaxed));
            }
            c
        };
        AuthSummary {
            enabled: self.enabled,
            registration: counts(0),
            data: counts(1),
            verified: (self.verified[0].load(Ordering::Relaxed), self.verified[1].load(Ordering::Relaxed)),
            topics: lock(&self.topics).iter().map(|(t, c)| (t.clone(), *c)).collect(),
            senders_evicted: self.evicted.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> AuthKey {
        AuthKey::new(vec![b; 32]).expect("32 bytes")
    }

    #[test]
    fn seal_then_open_round_trips_and_binds_every_byte() {
        let mut s = Sealer::with_sender_id(&key(1), Channel::Registration, 7);
        let v = Verifier::new(&key(1), Channel::Registration);
        let d = s.seal(b"ECAL\x05 some datagram", 42);
        assert_eq!(d.len(), 19 + ENVELOPE_OVERHEAD);
        let env = v.open(&d).expect("valid");
        assert_eq!((env.sender_id, env.counter, env.time_ns, env.inner), (7, 1, 42, &b"ECAL\x05 some datagram"[..]));
        for i in 0..d.len() {
            let mut bad = d.clone();
            bad[i] ^= 0x01;
            assert!(v.open(&bad).is_err(), "flipping byte {i} was accepted");
        }
        assert_eq!(Verifier::new(&key(2), Channel::Registration).open(&d), Err(AuthReject::BadTag));
        assert_eq!(Verifier::new(&key(1), Channel::Data).open(&d), Err(AuthReject::Malformed));
        assert_eq!(v.open(&d[..ENVELOPE_OVERHEAD - 1]), Err(AuthReject::Malformed));
        assert!(!is_envelope(b"ECAL\x05"));
    }

    #[test]
    fn parts_seal_like_one_buffer() {
        let mut a = Sealer::with_sender_id(&key(3), Channel::Data, 9);
        let mut b = Sealer::with_sender_id(&key(3), Channel::Data, 9);
        let (h, t) = a.seal_parts(&[b"abc", b"", b"defg"], 5);
        let whole = b.seal(b"abcdefg", 5);
        assert_eq!(&whole[..ENVELOPE_HEADER_LEN], &h);
        assert_eq!(&whole[whole.len() - TAG_LEN..], &t);
    }

    #[test]
    fn hex_keys() {
        assert_eq!(AuthKey::from_hex(&"ab".repeat(32)), AuthKey::new(vec![0xab; 32]));
        assert_eq!(AuthKey::from_hex(" 00112233445566778899aabbccddeeff\n").map(|k| k.bytes().len()), Some(16));
        for bad in ["", "abc", &"ab".repeat(15), &"ab".repeat(65), &"zz".repeat(16)] {
            assert_eq!(AuthKey::from_hex(bad), None, "{bad:?}");
        }
        assert_eq!(format!("{:?}", key(9)), "AuthKey(32 bytes)");
    }

    fn env(sender_id: u64, counter: u64, time_ns: u64) -> Envelope<'static> {
        Envelope { channel: 1, sender_id, counter, time_ns, inner: &[], tag: &[] }
    }

    #[test]
    fn window_accepts_each_counter_once_and_reordering_within_the_window() {
        let now = Instant::now();
        let mut g = ReplayGuard::new(8, Duration::ZERO);
        for c in [1, 2, 5, 3, 4, 1000, 10] {
            assert_eq!(g.check(&env(1, c, 0), now, 0), Ok(()), "counter {c}");
        }
        for c in [1, 2, 3, 4, 5, 10, 1000] {
            assert_eq!(g.check(&env(1, c, 0), now, 0), Err(AuthReject::Replayed), "counter {c}");
        }
        // 1000 - 1024 < 0: everything from 1 on is in the window; jump so that 10 falls behind it.
        assert_eq!(g.check(&env(1, 1040, 0), now, 0), Ok(()));
        assert_eq!(g.check(&env(1, 15, 0), now, 0), Err(AuthReject::Replayed), "behind the window");
        assert_eq!(g.check(&env(1, 1039, 0), now, 0), Ok(()), "not seen, within the window");
        assert_eq!(g.check(&env(1, 0, 0), now, 0), Err(AuthReject::Malformed));
        // A big jump clears the window; the old top is then behind it.
        assert_eq!(g.check(&env(1, 1_000_000, 0), now, 0), Ok(()));
        assert_eq!(g.check(&env(1, 1040, 0), now, 0), Err(AuthReject::Replayed));
        assert_eq!(g.check(&env(1, 999_999, 0), now, 0), Ok(()));
    }

    #[test]
    fn window_slides_cleanly_bit_by_bit() {
        // Every counter once, out of order by up to 100, over many windows: all accepted, all replays refused.
        let now = Instant::now();
        let mut g = ReplayGuard::new(1, Duration::ZERO);
        let mut order: Vec<u64> = (1..=5000).collect();
        for chunk in order.chunks_mut(100) {
            chunk.reverse();
        }
        for &c in &order {
            assert_eq!(g.check(&env(5, c, 0), now, 0), Ok(()), "{c}");
        }
        for c in 5000 - REPLAY_WINDOW + 1..=5000 {
            assert_eq!(g.check(&env(5, c, 0), now, 0), Err(AuthReject::Replayed), "{c}");
        }
    }

    #[test]
    fn senders_are_bounded_and_time_checked() {
        let t0 = Instant::now();
        let now_ns = 100_000_000_000;
        let mut g = ReplayGuard::starting_at(3, Duration::from_secs(10), now_ns);
        for (i, s) in [1u64, 2, 3, 4].iter().enumerate() {
            assert_eq!(g.check(&env(*s, 1, now_ns), t0 + Duration::from_millis(i as u64), now_ns), Ok(()));
        }
        assert_eq!((g.senders(), g.evicted()), (3, 1));
        // Sender 1 was evicted (least recently heard): its state is gone.
        assert_eq!(g.check(&env(1, 1, now_ns), t0 + Duration::from_secs(1), now_ns), Ok(()));
        assert_eq!(g.check(&env(4, 2, now_ns - 11_000_000_000), t0, now_ns), Err(AuthReject::Stale));
        assert_eq!(g.check(&env(4, 2, now_ns + 11_000_000_000), t0, now_ns), Err(AuthReject::Stale));
        assert_eq!(g.check(&env(4, 2, now_ns - 9_000_000_000), t0, now_ns), Ok(()));
    }

    /// A restarted receiver (a new guard) takes no envelope written before it started, less the clock allowance,
    /// from a sender it has no window for, although it is well within `max_age`; one with a window goes on as
    /// before. After an eviction, first contacts must be newer than the eviction.
    #[test]
    fn first_contacts_older_than_the_guard_are_refused() {
        let t0 = Instant::now();
        let start = 1_000_000_000_000u64;
        let s = 1_000_000_000u64;
        let mut g = ReplayGuard::starting_at(2, Duration::from_secs(60), start);
        // Captured 10 s before the receiver started: within max_age, refused.
        assert_eq!(g.check(&env(1, 5, start - 10 * s), t0, start + s), Err(AuthReject::Stale));
        // Written 1 s before the start (clocks differ): heard.
        assert_eq!(g.check(&env(2, 5, start - s), t0, start + s), Ok(()));
        // Sender 2 has a window now: its older envelopes are judged by it (new counter: taken; replay: refused).
        assert_eq!(g.check(&env(2, 4, start - 3 * s), t0, start + s), Ok(()));
        assert_eq!(g.check(&env(2, 4, start - 3 * s), t0, start + s), Err(AuthReject::Replayed));
        // Sender 1, written after the start: heard (later than sender 2). Then sender 3 evicts sender 2, the one
        // heard least recently, at start + 20 s.
        assert_eq!(g.check(&env(1, 6, start + 2 * s), t0 + Duration::from_secs(2), start + 2 * s), Ok(()));
        let later = t0 + Duration::from_secs(20);
        assert_eq!(g.check(&env(3, 1, start + 20 * s), later, start + 20 * s), Ok(()));
        assert_eq!(g.evicted(), 1);
        // Sender 2's capture from before the eviction no longer passes as a first contact.
        assert_eq!(g.check(&env(2, 9, start + 10 * s), later, start + 20 * s), Err(AuthReject::Stale));
        // max_age 0: no time checks at all.
        let mut g = ReplayGuard::starting_at(2, Duration::ZERO, start);
        assert_eq!(g.check(&env(1, 5, 0), t0, start), Ok(()));
    }

    #[test]
    fn stats_count_per_cause_and_topic_and_stay_bounded() {
        let s = AuthStats::new(true);
        s.count(Channel::Data, AuthReject::Unsigned, Some("a"), &"x");
        s.count(Channel::Data, AuthReject::Unsigned, Some("a"), &"x");
        s.count(Channel::Registration, AuthReject::BadTag, None, &"x");
        for i in 0..MAX_TOPICS + 10 {
            s.count(Channel::Data, AuthReject::Replayed, Some(&format!("t{i}")), &"x");
        }
        let sum = s.summary();
        assert_eq!(sum.data.unsigned, 2);
        assert_eq!(sum.data.replayed, (MAX_TOPICS + 10) as u64);
        assert_eq!(sum.registration.bad_tag, 1);
        assert_eq!(sum.topics.len(), MAX_TOPICS);
        assert_eq!(sum.topics.iter().find(|(t, _)| t == "a").map(|(_, c)| c.unsigned), Some(2));
    }
}
