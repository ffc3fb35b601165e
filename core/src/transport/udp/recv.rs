//! The receive side of the UDP data layer, run by the I/O thread: the data socket (opened while at least one
//! subscriber exists), group membership in network mode, reassembly, decoding, clock checks and delivery.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};

use crate::sample::{Payload, Sample};
use crate::stats::Via;
use crate::sync::lock;
use crate::transport::{Inbox, IoSource};
use crate::types::TypeInfo;
use crate::wire::auth::{self as wauth, AuthReceiver, AuthReject, Channel};
use crate::wire::packed;
use crate::wire::{DatagramHeader, DatagramKind, HEADER_LEN, Reassembler, ReassemblyCounters, split_name};

use super::Shared;
use super::net::topic_group;
use crate::transport::clock::ClockCheck;
use crate::wire::data_sample::{decode_data_sample, decode_data_sample_from};

/// Datagrams one `recvmmsg` takes at most (64 KiB of buffer each, allocated with the socket's first datagram).
const RECV_SLOTS: usize = 16;

/// Sample vectors of up to this capacity are kept for the next batch (a larger one, from a burst, is freed).
const SPARE_CAPACITY: usize = 4096;

/// How often a summary of the counters is logged (debug) when they changed.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What the receiver hands one subscriber after the table lock: the samples accepted for it and the losses
/// counted for it since the last hand-over (once per `recvmmsg` batch, [`UdpReceiver::deliver_pending`]).
struct Pending {
    inbox: Arc<dyn Inbox>,
    samples: Vec<Sample>,
    drops: u64,
}

/// One record of a received datagram for [`UdpReceiver::dispatch_batch`]: its payload is `len` bytes at `off` of
/// the datagram's shared buffer.
#[derive(Debug, Clone, Copy)]
struct Record {
    clock: u64,
    time_us: i64,
    off: usize,
    len: usize,
}

/// The data socket and everything the I/O thread keeps for it.
pub(crate) struct UdpReceiver {
    shared: Arc<Shared>,
    socket: Option<UdpSocket>,
    /// Topic groups joined (network mode), besides the base group.
    joined: BTreeSet<Ipv4Addr>,
    seen_version: u64,
    /// The socket could not be opened for this subscriber-table version (retried when it changes).
    failed_version: Option<u64>,
    reassembler: Reassembler,
    batch: super::net::RecvBatch,
    /// Per subscriber (each once), what the datagrams of the current `recvmmsg` batch brought it: handed over and
    /// woken after the batch, not per sample.
    pending: Vec<Pending>,
    /// Inboxes upgraded under the table lock and not delivered to: released after it (the last reference may be
    /// among them, whose drop takes the table lock).
    release: Vec<Arc<dyn Inbox>>,
    /// The records of the datagram being dispatched (reused).
    records: Vec<Record>,
    /// Emptied sample vectors of earlier hand-overs, reused (at most one per subscriber of the last batch).
    spare: Vec<Vec<Sample>>,
    empty_type: Arc<TypeInfo>,
    last_summary: Instant,
    last_summary_datagrams: u64,
    /// `[shoal_auth]` with a key: checks envelopes, reassembles what they carry apart from unauthenticated datagrams.
    auth: Option<AuthReceiver>,
    /// Counts of reassemblers replaced (the socket closed), so the published totals keep counting.
    reassembly_base: ReassemblyCounters,
    /// The open socket's filter of this runtime's own broadcasts, once attached.
    own: Option<OwnFilter>,
    /// Attaching it failed for the open socket (not retried until the socket is reopened).
    own_failed: bool,
    /// Fragments received straight into their message's buffer.
    in_place: InPlace,
    /// Buffers of reassembled messages whose readers are done with them, for the reassembler to reuse
    /// ([`crate::transport::recycle`]).
    returned: crate::transport::recycle::Returned,
}

/// Local mode to the loopback broadcast address ([`super::net::own_datagrams_loop_back`]): the receive socket drops
/// this runtime's own datagrams in the kernel ([`super::net::drop_own_datagrams`]), which counts each among the
/// socket's drops. The drops `SO_RXQ_OVFL` reports since the filter was attached, less the datagrams this runtime
/// sent there since then, are the ones of a full receive buffer.
///
/// The senders count a datagram before they send it, so the difference never counts an own datagram as a loss
/// once it was sent; it may count a real loss late (the own datagram counted, not yet filtered), never twice. The
/// datagrams counted between the attach and the snapshot of the count after it, a few at most, would be counted
/// as losses: an over-count, never a hidden loss.
#[derive(Debug)]
struct OwnFilter {
    /// `counters.own_broadcasts` right after the filter was attached.
    own_base: u64,
    /// Drops the socket reported since then (own datagrams included).
    raw: u64,
    /// Drops of a full receive buffer counted since then.
    counted: u64,
}

impl UdpReceiver {
    pub(crate) fn new(shared: Arc<Shared>) -> UdpReceiver {
        let reassembly = shared.reassembly.clone();
        let auth = shared
            .auth
            .as_ref()
            .map(|a| AuthReceiver::new(&a.key, Channel::Data, a.senders, a.max_age, reassembly.clone()));
        UdpReceiver {
            shared,
            socket: None,
            joined: BTreeSet::new(),
            seen_version: 0,
            failed_version: None,
            reassembler: Reassembler::new(reassembly),
            batch: super::net::RecvBatch::new(RECV_SLOTS),
            pending: Vec::new(),
            release: Vec::new(),
            records: Vec::new(),
            spare: Vec::new(),
            empty_type: Arc::new(TypeInfo::default()),
            last_summary: Instant::now(),
            last_summary_datagrams: 0,
            auth,
            reassembly_base: ReassemblyCounters::default(),
            own: None,
            own_failed: false,
            in_place: InPlace::default(),
            returned: Default::default(),
        }
    }

    /// Brings the socket and the group memberships in line with the subscribed topics.
    fn sync(&mut self, registry: &Registry, token: Token, topics: &[Arc<str>]) {
        if topics.is_empty() {
            if let Some(mut s) = self.socket.take() {
                let _ = registry.deregister(&mut s);
                self.joined.clear();
                self.batch.reset_socket();
                self.reassembly_base.add(self.reassembler.counters());
                self.reassembler = Reassembler::new(self.reassembler.config().clone());
                if let Some(a) = &mut self.auth {
                    self.reassembly_base.add(a.reassembler.counters());
                    a.reassembler = Reassembler::new(a.reassembler.config().clone());
                }
                self.publish_reassembly();
                self.own = None;
                self.own_failed = false;
                self.in_place.forget();
                tracing::debug!("UDP data layer: no subscriber left, data socket closed");
            }
            return;
        }
        let net = &self.shared.config;
        if self.socket.is_none() {
            let iface = if net.enabled { self.shared.iface() } else { Ipv4Addr::UNSPECIFIED };
            let opened = super::net::open_recv_socket(net, iface, net.data_port).and_then(|mut s| {
                registry.register(&mut s, token, Interest::READABLE)?;
                Ok(s)
            });
            match opened {
                Ok(s) => {
                    tracing::debug!(
                        "UDP data layer: receiving on 0.0.0.0:{}{}",
                        net.data_port,
                        if net.enabled { format!(", group {} on {iface}", net.multicast_group) } else { String::new() }
                    );
                    self.socket = Some(s);
                    self.failed_version = None;
                }
                Err(e) => {
                    if self.failed_version != Some(self.seen_version) {
                        tracing::warn!("UDP data layer: cannot open the data socket on port {}: {e}", net.data_port);
                    }
                    self.failed_version = Some(self.seen_version);
                    return;
                }
            }
        }
        if !net.enabled {
            return;
        }
        let Some(socket) = &self.socket else { return };
        let iface = self.shared.iface();
        let wanted: BTreeSet<Ipv4Addr> = topics
            .iter()
            .map(|t| topic_group(t, net.multicast_group, net.multicast_mask))
            .filter(|g| *g != net.multicast_group)
            .collect();
        for g in self.joined.difference(&wanted) {
            if let Err(e) = socket.leave_multicast_v4(g, &iface) {
                tracing::debug!("UDP data layer: leaving group {g} failed: {e}");
            }
        }
        for g in wanted.difference(&self.joined) {
            match socket.join_multicast_v4(g, &iface) {
                Ok(()) => tracing::debug!("UDP data layer: joined topic group {g} on {iface}"),
                Err(e) => tracing::warn!("UDP data layer: cannot join topic group {g} on {iface}: {e}"),
            }
        }
        self.joined = wanted;
    }

    /// Attaches the filter of this runtime's own broadcasts once both the receive and the send socket are open
    /// ([`OwnFilter`]).
    fn filter_own_datagrams(&mut self) {
        if self.own.is_some() || self.own_failed || !self.shared.own_loop_back {
            return;
        }
        let (Some(socket), Some(Some(sender))) = (&self.socket, self.shared.sender.get()) else { return };
        match super::net::drop_own_datagrams(socket, sender) {
            Ok(source) => {
                let own_base = self.shared.counters.own_broadcasts.load(Ordering::Relaxed);
                self.own = Some(OwnFilter { own_base, raw: 0, counted: 0 });
                tracing::debug!("UDP data layer: the data socket drops this process's own datagrams (from {source})");
            }
            Err(e) => {
                self.own_failed = true;
                tracing::debug!(
                    "UDP data layer: cannot filter this process's own datagrams ({e}); they are received and discarded"
                );
            }
        }
    }

    /// One datagram received in place ([`InPlace`]), when a fragment is expected and its message has a buffer;
    /// `None` otherwise (then the caller receives as usual).
    fn recv_in_place(
        &mut self,
        fd: std::os::fd::RawFd,
        now: Instant,
        batcher: &mut super::net::RecvBatch,
    ) -> Option<(super::net::Drained, Option<std::io::Error>)> {
        use super::net::Drained;
        let (from, id) = self.in_place.expected?;
        let ip = &mut self.in_place;
        let (index, room, target) = self.reassembler.next_fragment_target(now, from, id)?;
        if ip.spill.is_empty() {
            ip.spill = vec![0u8; super::net::SLOT];
        }
        let keep = target.len();
        let got = match crate::sys::mmsg::recv_split(fd, &mut ip.head, target, room, &mut ip.spill) {
            Ok(got) => got,
            Err(e) => return Some(Drained::of_error(e)),
        };
        let dropped_before = batcher.dropped_before(got.dropped_total);
        batcher.note_overflow(got.dropped_total);
        let head = DatagramHeader::parse_head(&ip.head).ok().filter(|_| !got.truncated && got.from == from);
        let placed = got.len == HEADER_LEN + got.in_target
            && head.is_some_and(|h| {
                h.kind == DatagramKind::Fragment && h.id == id && h.num == index && h.len as usize == got.in_target
            });
        if !placed
            && dropped_before
            && head.is_some_and(|h| h.kind == DatagramKind::Fragment && h.id == id && h.num > index)
            && self.reassembler.abandon(from, id)
        {
            // A later fragment of the message, and the kernel dropped datagrams since the last one: the missing
            // fragments are lost, not late. The message is given up (its subscribers count it lost from the gap in
            // clocks), and its remaining fragments are dropped as they come, unread.
            self.shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
            self.in_place.doomed = Some((from, id));
            return Some((Drained::Budget, None));
        }
        if placed {
            self.shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
            self.shared.counters.in_place_fragments.fetch_add(1, Ordering::Relaxed);
            let shared = &self.shared;
            let wanted = |first: &[u8]| wanted_message(shared, first);
            match self.reassembler.commit_in_place(from, id, index, got.in_target, wanted) {
                Ok(Some(msg)) => self.handle_message(now, from, Cow::Owned(msg), false),
                Ok(None) => {}
                Err(e) => {
                    self.shared.counters.wire_drops.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!("UDP data layer: datagram from {from} dropped: {e}");
                }
            }
            return Some((Drained::Budget, None));
        }
        // Another datagram: its bytes gathered in order (head, what went to the message's buffer, the spill).
        let mut d = std::mem::take(&mut ip.scratch);
        d.clear();
        d.extend_from_slice(&ip.head[..got.len.min(HEADER_LEN)]);
        self.reassembler.undo_in_place(from, id, keep, &mut d);
        let spilled = got.len.saturating_sub(HEADER_LEN + got.in_target).min(self.in_place.spill.len());
        d.extend_from_slice(&self.in_place.spill[..spilled]);
        if got.truncated {
            batcher.note_truncated(got.from);
        } else {
            self.receive(now, got.from, &d);
        }
        self.in_place.scratch = d;
        Some((Drained::Budget, None))
    }

    /// While fragments of the message given up last may come ([`InPlace::doomed`]): peeks at the next datagram's
    /// header and drops the datagram unread (its payload never copied) when it is one of them; `None`, with the
    /// datagram left queued, when it is anything else (and then none of them is expected any more).
    fn skip_doomed(
        &mut self,
        fd: std::os::fd::RawFd,
        batcher: &mut super::net::RecvBatch,
    ) -> Option<(super::net::Drained, Option<std::io::Error>)> {
        use super::net::Drained;
        use crate::sys::mmsg::recv_head;
        let (from, id) = self.in_place.doomed?;
        let mut head = [0u8; HEADER_LEN];
        let peeked = match recv_head(fd, &mut head, libc::MSG_PEEK) {
            Ok(p) => p,
            Err(e) => return Some(Drained::of_error(e)),
        };
        let of_it = peeked.from == from
            && peeked.len == HEADER_LEN
            && DatagramHeader::parse_head(&head).is_ok_and(|h| h.kind == DatagramKind::Fragment && h.id == id);
        if !of_it {
            self.in_place.doomed = None;
            return None;
        }
        // The only reader of the socket: the datagram dropped is the one peeked at.
        match recv_head(fd, &mut [], 0) {
            Ok(got) => {
                batcher.note_overflow(got.dropped_total);
                self.shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
                Some((Drained::Budget, None))
            }
            Err(e) => Some(Drained::of_error(e)),
        }
    }

    /// Of `raw` drops the socket reported now, those of a full receive buffer ([`OwnFilter`]).
    fn kernel_drops_of(&mut self, raw: u64) -> u64 {
        let Some(f) = &mut self.own else { return raw };
        f.raw += raw;
        let own = self.shared.counters.own_broadcasts.load(Ordering::Relaxed).saturating_sub(f.own_base);
        let lost = f.raw.saturating_sub(own).saturating_sub(f.counted);
        f.counted += lost;
        lost
    }

    /// A datagram as the socket gave it: in local mode one from another host (a source that is not loopback) is
    /// dropped unread and counted, as registration does with its own; any other is handled, and after a fragment
    /// the next one of its message is expected in place.
    fn receive(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        if !self.shared.config.enabled && !from.ip().is_loopback() {
            self.in_place.expected = None;
            self.shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
            let n = self.shared.counters.non_local_source.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::debug!(
                    "UDP data layer: datagram from {from} dropped: local mode takes data from this host only ({n} so \
                     far)"
                );
            }
            return;
        }
        self.in_place.expected = expected_after(self.auth.is_none(), from, datagram);
        self.handle_datagram(now, from, datagram);
    }

    fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.shared.counters.datagrams.fetch_add(1, Ordering::Relaxed);
        if packed::is_packed(datagram) {
            self.handle_packed(now, from, datagram);
            return;
        }
        let opened = wauth::open_datagram(
            self.auth.as_mut(),
            &mut self.reassembler,
            &self.shared.auth_stats,
            Channel::Data,
            now,
            datagram,
        );
        let shared = &self.shared;
        let (pushed, authenticated) = match opened {
            Ok(o) => {
                let wanted = |first: &[u8]| wanted_message(shared, first);
                (o.reassembler.push_filtered(now, from, o.datagram, wanted), o.authenticated)
            }
            Err(cause) => {
                let topic = self.subscribed_topic_of(datagram);
                self.shared.auth_stats.count(Channel::Data, cause, topic.as_deref(), &from);
                return;
            }
        };
        match pushed {
            Ok(Some(msg)) => self.handle_message(now, from, msg, authenticated),
            Ok(None) => {}
            Err(e) => {
                self.shared.counters.wire_drops.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("UDP data layer: datagram from {from} dropped: {e}");
            }
        }
    }

    /// The topic an envelope's whole (unfragmented) datagram names, when a subscriber here has it: which topic a
    /// refused datagram was for, as far as that can be told (the name is not authenticated; it only attributes the
    /// drop to one of this process's own topics).
    fn subscribed_topic_of(&self, datagram: &[u8]) -> Option<String> {
        let env = wauth::parse_envelope(datagram).ok()?;
        let (header, payload) = DatagramHeader::parse(env.inner).ok()?;
        if header.kind != DatagramKind::Whole {
            return None;
        }
        let (name, _) = split_name(payload).ok()?;
        lock(&self.shared.subs).topics.contains_key(name).then(|| name.to_owned())
    }

    fn handle_message(&mut self, now: Instant, from: SocketAddr, msg: Cow<'_, [u8]>, authenticated: bool) {
        let c = &self.shared.counters;
        let proto_at = match split_name(&msg) {
            Ok((name, proto)) => {
                if !lock(&self.shared.subs).topics.contains_key(name) {
                    c.unknown_topic.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if !authenticated
                    && let Some(auth) = &self.shared.auth
                    && auth.protected.contains(name)
                {
                    self.shared.auth_stats.count(Channel::Data, AuthReject::Unsigned, Some(name), &from);
                    return;
                }
                msg.len() - proto.len()
            }
            Err(e) => {
                c.framing_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("UDP data layer: message from {from} dropped: {e}");
                return;
            }
        };
        // A reassembled message is decoded in place: the payload stays in its buffer, which the sample keeps. A
        // whole datagram lives in the receive buffer the next batch overwrites: its payload is copied out (once).
        let owned;
        let (decoded, raw, held): (_, &[u8], _) = match msg {
            Cow::Borrowed(m) => (decode_data_sample(&m[proto_at..]), m, None),
            Cow::Owned(v) => {
                let capacity = v.capacity();
                owned = self.returned.bytes(v);
                (decode_data_sample_from(owned.slice(proto_at..)), &owned[..], Some(capacity))
            }
        };
        let sample = match decoded {
            Ok(s) => s,
            Err(e) => {
                c.decode_errors.fetch_add(1, Ordering::Relaxed);
                let name = split_name(raw).map(|(n, _)| n.to_owned()).unwrap_or_default();
                tracing::debug!("UDP data layer: sample on {name:?} from {from} dropped: {e}");
                self.count_topic_drop(&name);
                return;
            }
        };
        self.records.clear();
        self.records.push(Record { clock: sample.clock, time_us: sample.time_us, off: 0, len: sample.payload.len() });
        // The payload of a reassembled message keeps the message's whole buffer alive (whatever else the sample
        // carried, a long host name say); a copied one only itself.
        let held = held.unwrap_or(sample.payload.len());
        self.dispatch_batch(now, &sample.topic_name, sample.publisher_id, &sample.payload, held);
    }

    /// A shoal packed datagram (`wire::packed`): checked whole, then its samples dispatched together
    /// ([`Self::dispatch_batch`]: the same clock checks and counts as eCAL-format samples one by one, with one
    /// table lock and one copy of the datagram, whose records the samples are slices of). Packed datagrams are never
    /// sealed: a protected topic's is refused, every sample counted.
    fn handle_packed(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let c = &self.shared.counters;
        let p = match packed::PackedDatagram::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                c.wire_drops.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("UDP data layer: packed datagram from {from} dropped: {e}");
                return;
            }
        };
        let n = p.count() as u64;
        if !lock(&self.shared.subs).topics.contains_key(p.topic) {
            c.unknown_topic.fetch_add(n, Ordering::Relaxed);
            return;
        }
        if let Some(auth) = &self.shared.auth
            && auth.protected.contains(p.topic)
        {
            self.shared.auth_stats.count_n(Channel::Data, AuthReject::Unsigned, Some(p.topic), &from, n);
            return;
        }
        c.packed_datagrams.fetch_add(1, Ordering::Relaxed);
        c.packed_messages.fetch_add(n, Ordering::Relaxed);
        // The datagram lives in the receive buffer the next batch overwrites: copied out once, the records' payloads
        // are ranges of that copy.
        let data = bytes::Bytes::copy_from_slice(datagram);
        let base = datagram.as_ptr() as usize;
        self.records.clear();
        self.records.extend(p.records().map(|r| Record {
            clock: r.clock,
            time_us: r.time_us,
            off: r.payload.as_ptr() as usize - base,
            len: r.payload.len(),
        }));
        self.dispatch_batch(now, p.topic, p.publisher_id, &data, data.len());
    }

    /// One loss for every subscriber of `topic` (a sample for it could not be decoded).
    fn count_topic_drop(&mut self, topic: &str) {
        let t = lock(&self.shared.subs);
        if let Some(entries) = t.topics.get(topic) {
            for inbox in entries.iter().filter_map(|e| e.inbox.upgrade()) {
                pending_of(&mut self.pending, &mut self.spare, inbox).drops += 1;
            }
        }
    }

    /// Dispatches the samples of one datagram (or reassembled message) of `publisher_id` on `topic_name`:
    /// [`Self::records`], in the publisher's order, whose payloads are ranges of `data`. Under one table lock and
    /// one topic lookup, for each subscriber one lookup of the publisher's clock entry, then every record's clock
    /// checked in turn (gaps counted as lost, repeats as duplicates, late ones as out of order, exactly as one sample
    /// at a time would); the accepted samples wait in [`Self::pending`] for the end of the `recvmmsg` batch.
    ///
    /// `data` keeps `held` bytes alive (a whole datagram, or a reassembled message's buffer). Each subscriber's
    /// samples of it are charged equal shares of `held`, at least their own length ([`Payload::held`]), so that
    /// what they are charged in its queue adds up to what they keep alive, however few of the records it accepts.
    fn dispatch_batch(&mut self, now: Instant, topic_name: &str, publisher_id: u64, data: &bytes::Bytes, held: usize) {
        let c = &self.shared.counters;
        let n = self.records.len() as u64;
        if n == 0 {
            return;
        }
        let mut t = lock(&self.shared.subs);
        if t.local_publishers.contains(&publisher_id) {
            // Our own publisher's datagram looped back: same-process subscribers got it directly.
            c.skipped_other_path.fetch_add(n, Ordering::Relaxed);
            return;
        }
        let Some(topic) = t.topics.get_key_value(topic_name).map(|(k, _)| Arc::clone(k)) else {
            c.unknown_topic.fetch_add(n, Ordering::Relaxed);
            return;
        };
        let Some(entries) = t.topics.get_mut(&topic) else { return };
        let (mut delivered, mut lost, mut duplicates, mut late, mut skipped) = (0u64, 0u64, 0u64, 0u64, 0u64);
        for e in entries.iter_mut() {
            let Some(inbox) = e.inbox.upgrade() else { continue };
            if inbox.reads_ring_of(publisher_id) {
                skipped += n;
                self.release.push(inbox);
                continue;
            }
            let type_info = e.types.get(&publisher_id).cloned().unwrap_or_else(|| Arc::clone(&self.empty_type));
            let p = pending_of(&mut self.pending, &mut self.spare, inbox);
            let first = p.samples.len();
            let mut clock = e.pubs.publisher(publisher_id, now);
            for r in &self.records {
                match clock.check(r.clock, now) {
                    ClockCheck::Accept { lost: gap } => {
                        if gap > 0 {
                            lost += gap;
                            p.drops += gap;
                            tracing::debug!(
                                "topic {topic}: {gap} samples of publisher {publisher_id} never arrived (clock {})",
                                r.clock
                            );
                        }
                    }
                    ClockCheck::Resync => {
                        tracing::warn!(
                            "topic {topic}: publisher {publisher_id} resumed at clock {} after samples far behind its \
                             last clock; a far-ahead clock (spoofed or corrupt) had been accepted",
                            r.clock
                        );
                    }
                    ClockCheck::Duplicate => {
                        duplicates += 1;
                        p.drops += 1;
                        continue;
                    }
                    ClockCheck::OutOfOrder => {
                        // Late: its clock lies in a gap already counted as lost when the newer sample was accepted
                        // (or it was delivered before): not a second drop for the subscriber.
                        late += 1;
                        continue;
                    }
                }
                delivered += 1;
                p.samples.push(Sample {
                    payload: Payload::Bytes { bytes: data.slice(r.off..r.off + r.len), held: 0 },
                    send_time_ns: r.time_us.saturating_mul(1000),
                    via: Via::Udp,
                    clock: r.clock,
                    publisher_id,
                    type_info: Arc::clone(&type_info),
                    topic: Arc::clone(&topic),
                });
            }
            let accepted = &mut p.samples[first..];
            let share = held.div_ceil(accepted.len().max(1));
            for s in accepted {
                if let Payload::Bytes { held, .. } = &mut s.payload {
                    *held = share;
                }
            }
        }
        drop(t);
        self.release.clear();
        for (counter, v) in [
            (&c.delivered, delivered),
            (&c.lost, lost),
            (&c.duplicates, duplicates),
            (&c.out_of_order, late),
            (&c.skipped_other_path, skipped),
        ] {
            if v > 0 {
                counter.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    /// Hands every subscriber what the last `recvmmsg` batch brought it (one push of all its samples, its losses
    /// counted) and wakes the waiters of those that got samples, each once.
    fn deliver_pending(&mut self) {
        for mut p in self.pending.drain(..) {
            if p.drops > 0 {
                p.inbox.count_drops(p.drops);
            }
            if !p.samples.is_empty() {
                p.inbox.push_batch_unwoken(&mut p.samples);
                p.inbox.wake();
            }
            // An inbox leaves nothing behind; should one, its samples are released here, not kept for the next batch.
            p.samples.clear();
            if p.samples.capacity() <= SPARE_CAPACITY {
                self.spare.push(p.samples);
            }
        }
    }

    /// Copies the reassemblers' counts and what they hold now into the shared counters (`Node::snapshot().udp`).
    fn publish_reassembly(&self) {
        let mut total = self.reassembly_base;
        total.add(self.reassembler.counters());
        let (mut in_flight, mut bytes) = (self.reassembler.in_flight(), self.reassembler.buffered_bytes());
        if let Some(a) = &self.auth {
            total.add(a.reassembler.counters());
            in_flight += a.reassembler.in_flight();
            bytes += a.reassembler.buffered_bytes();
        }
        let c = &self.shared.counters;
        c.reassembled.store(total.reassembled_messages, Ordering::Relaxed);
        c.reassembly_expired.store(total.expired, Ordering::Relaxed);
        let evicted = total.in_flight_limit + total.source_limit + total.buffer_limit;
        c.reassembly_evicted.store(evicted, Ordering::Relaxed);
        c.reassembly_abandoned.store(total.abandoned, Ordering::Relaxed);
        c.reassembly_in_flight.store(in_flight as u64, Ordering::Relaxed);
        c.reassembly_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    fn log_summary(&mut self, now: Instant) {
        if now.saturating_duration_since(self.last_summary) < SUMMARY_EVERY {
            return;
        }
        self.last_summary = now;
        let c = &self.shared.counters;
        let datagrams = c.datagrams.load(Ordering::Relaxed);
        if datagrams == self.last_summary_datagrams {
            return;
        }
        self.last_summary_datagrams = datagrams;
        let r = self.reassembler.counters();
        tracing::debug!(
            datagrams,
            delivered = c.delivered.load(Ordering::Relaxed),
            wire_drops = c.wire_drops.load(Ordering::Relaxed),
            expired = r.expired,
            duplicate_fragments = r.duplicate_fragments,
            out_of_range = r.out_of_range,
            in_flight_limit = r.in_flight_limit,
            buffer_limit = r.buffer_limit,
            framing_errors = c.framing_errors.load(Ordering::Relaxed),
            decode_errors = c.decode_errors.load(Ordering::Relaxed),
            unknown_topic = c.unknown_topic.load(Ordering::Relaxed),
            skipped_other_path = c.skipped_other_path.load(Ordering::Relaxed),
            duplicates = c.duplicates.load(Ordering::Relaxed),
            out_of_order = c.out_of_order.load(Ordering::Relaxed),
            lost = c.lost.load(Ordering::Relaxed),
            send_drops = c.send_drops.load(Ordering::Relaxed),
            "UDP data layer counters"
        );
    }
}

impl IoSource for UdpReceiver {
    fn maintain(&mut self, registry: &Registry, token: Token, now: Instant) {
        let mut seen = self.seen_version;
        if let Some(topics) = self.shared.topics_if_changed(&mut seen) {
            self.seen_version = seen;
            self.sync(registry, token, &topics);
        }
        self.filter_own_datagrams();
        if self.reassembler.next_expiry().is_some_and(|t| t <= now) {
            let before = self.reassembler.counters().expired;
            self.reassembler.expire(now);
            let n = self.reassembler.counters().expired - before;
            self.shared.counters.wire_drops.fetch_add(n, Ordering::Relaxed);
        }
        if let Some(a) = &mut self.auth
            && a.reassembler.next_expiry().is_some_and(|t| t <= now)
        {
            let before = a.reassembler.counters().expired;
            a.reassembler.expire(now);
            let n = a.reassembler.counters().expired - before;
            self.shared.counters.wire_drops.fetch_add(n, Ordering::Relaxed);
        }
        self.publish_reassembly();
        self.log_summary(now);
    }

    fn on_readable(&mut self, now: Instant, batch: usize) -> bool {
        let Some(socket) = &self.socket else { return false };
        let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
        let mut batcher = std::mem::replace(&mut self.batch, super::net::RecvBatch::new(1));
        let before = batcher.kernel_drops();
        // One `recvmmsg` at a time, waking the subscribers after each (not per sample, and not only after the
        // whole budget, which would hold the first sample back). While fragments come, one datagram at a time,
        // the next fragment of the message in progress received straight into its buffer ([`InPlace`]). Buffers
        // the subscribers are done with are taken back before each receive: a burst of large messages completes
        // several in one call, each wanting one.
        let mut left = batch;
        let (drained, err) = loop {
            for b in self.returned.take() {
                self.reassembler.recycle(b);
            }
            let n = if self.in_place.expected.is_some() { 1 } else { left.min(RECV_SLOTS) };
            let (drained, err) = match self.skip_doomed(fd, &mut batcher) {
                Some(r) => r,
                None => match self.recv_in_place(fd, now, &mut batcher) {
                    Some(r) => r,
                    None => batcher.recv(fd, n, |from, d| self.receive(now, from, d)),
                },
            };
            self.deliver_pending();
            left -= n;
            if drained != super::net::Drained::Budget || left == 0 {
                break (drained, err);
            }
        };
        let raw = batcher.kernel_drops() - before;
        self.batch = batcher;
        let dropped = if raw > 0 { self.kernel_drops_of(raw) } else { 0 };
        if dropped > 0 {
            self.shared.counters.kernel_drops.fetch_add(dropped, Ordering::Relaxed);
            tracing::debug!(
                "UDP data layer: the kernel dropped {dropped} datagrams on port {} (receive buffer full)",
                self.shared.config.data_port
            );
        }
        if let Some(e) = err {
            tracing::warn!("UDP data layer: receive failed: {e}");
        }
        drained == super::net::Drained::Budget
    }

    fn kernel_drops(&self) -> u64 {
        self.shared.counters.kernel_drops.load(Ordering::Relaxed)
    }
}

/// After datagram `d` from `from`: the message whose next fragment to receive in place, when `d` was a fragment
/// or the fragment info of one (and datagrams are not sealed: an envelope goes before the header).
fn expected_after(plain: bool, from: SocketAddr, d: &[u8]) -> Option<(SocketAddr, i32)> {
    if !plain {
        return None;
    }
    match DatagramHeader::parse(d) {
        Ok((h, _)) if h.kind != DatagramKind::Whole => Some((from, h.id)),
        _ => None,
    }
}

/// Receiving a fragmented message's fragments straight into its buffer, which saves copying each out of a receive
/// slot. After a fragment (or the info) of a message, the next datagram is received alone, scattered: its header
/// into `head`, its payload appended to that message's buffer as its next fragment, anything longer into `spill`.
/// If it is that fragment (same sender, message and index, the length it says), it stays there; else its bytes
/// are gathered in `scratch` and it is handled as any datagram.
#[derive(Debug, Default)]
struct InPlace {
    /// The message whose next fragment is expected: (sender, message id).
    expected: Option<(SocketAddr, i32)>,
    /// The message given up last ([`crate::wire::Reassembler::abandon`]): while its fragments come, each is dropped
    /// unread once a peek at its header shows it is one of them (`UdpReceiver::skip_doomed`).
    doomed: Option<(SocketAddr, i32)>,
    head: [u8; crate::wire::HEADER_LEN],
    spill: Vec<u8>,
    scratch: Vec<u8>,
}

impl InPlace {
    /// Forgets the messages of the closed socket (the buffers stay for the next one).
    fn forget(&mut self) {
        self.expected = None;
        self.doomed = None;
    }
}

/// The pending hand-over of `inbox` (made if it has none yet in this batch).
fn pending_of<'a>(
    pending: &'a mut Vec<Pending>,
    spare: &mut Vec<Vec<Sample>>,
    inbox: Arc<dyn Inbox>,
) -> &'a mut Pending {
    let i = match pending.iter().position(|p| Arc::ptr_eq(&p.inbox, &inbox)) {
        Some(i) => i,
        None => {
            pending.push(Pending { inbox, samples: spare.pop().unwrap_or_default(), drops: 0 });
            pending.len() - 1
        }
    };
    &mut pending[i]
}

/// Whether a fragmented message whose first bytes are `first` is for a topic subscribed here: its other fragments
/// are then reassembled; otherwise only counted (an unknown topic, as a whole message of it would be). A first
/// fragment too short to hold the name cannot tell: kept.
fn wanted_message(shared: &Shared, first: &[u8]) -> bool {
    let Ok((name, _)) = split_name(first) else { return true };
    let wanted = lock(&shared.subs).topics.contains_key(name);
    if !wanted {
        shared.counters.unknown_topic.fetch_add(1, Ordering::Relaxed);
    }
    wanted
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::config::Config;
    use crate::transport::udp::UdpLayer;
    use crate::transport::{LayerReaderFactory, LayerWriterFactory};
    use crate::wire::packed::{append_records, begin_packed, records_of};

    /// A subscriber's inbox that keeps what it gets, counts its hand-overs, and may read a publisher's ring.
    #[derive(Default)]
    struct Keep {
        samples: Mutex<Vec<Sample>>,
        batches: AtomicU64,
        drops: AtomicU64,
        wakes: AtomicU64,
        ring_of: Option<u64>,
    }

    impl Inbox for Keep {
        fn push(&self, sample: Sample) {
            lock(&self.samples).push(sample);
        }
        fn push_batch_unwoken(&self, samples: &mut Vec<Sample>) {
            self.batches.fetch_add(1, Ordering::Relaxed);
            lock(&self.samples).append(samples);
        }
        fn wake(&self) {
            self.wakes.fetch_add(1, Ordering::Relaxed);
        }
        fn reads_ring_of(&self, publisher_id: u64) -> bool {
            self.ring_of == Some(publisher_id)
        }
        fn count_drops(&self, n: u64) {
            self.drops.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn payload(clock: u64) -> Vec<u8> {
        (clock as u32).to_le_bytes().repeat(16)
    }

    /// A packed datagram of `publisher_id` on `topic` with these clocks, in this order.
    fn packed_of(publisher_id: u64, topic: &str, clocks: &[u64]) -> Vec<u8> {
        let mut d = Vec::new();
        begin_packed(&mut d, publisher_id, topic, clocks[0], clocks[0] as i64, &payload(clocks[0])).expect("packs");
        for &c in &clocks[1..] {
            let mut one = Vec::new();
            begin_packed(&mut one, publisher_id, topic, c, c as i64, &payload(c)).expect("packs");
            assert!(append_records(&mut d, records_of(&one), 1));
        }
        d
    }

    /// The records of packed datagrams are checked in order per subscriber, exactly as one sample at a time: a gap
    /// inside a datagram is lost once, a repeated clock is a duplicate (a drop), a late one is neither; a
    /// subscriber that reads the publisher's ring gets none of them (skipped, each counted); each subscriber gets
    /// one hand-over and one wake-up per batch; the payloads are the records' bytes.
    #[test]
    fn dispatch_batch_counts_exactly_what_one_sample_at_a_time_would() {
        let layer = UdpLayer::new(&Config::default(), "h", Default::default()).expect("no pattern to compile");
        let rf = layer.reader_factory();
        let plain = Arc::new(Keep::default());
        let ring = Arc::new(Keep { ring_of: Some(78), ..Keep::default() });
        let (a, b): (Arc<dyn Inbox>, Arc<dyn Inbox>) = (plain.clone(), ring.clone());
        rf.subscriber_created(1, "batch_t", &a);
        rf.subscriber_created(2, "batch_t", &b);
        let own = layer.writer_factory().create(5, "batch_t", &TypeInfo::default()).expect("a local publisher");
        let mut rx = UdpReceiver::new(Arc::clone(&layer.shared));
        let from: SocketAddr = "127.0.0.1:9".parse().expect("address");
        let now = Instant::now();
        let batch = [
            packed_of(78, "batch_t", &[1, 2, 3]),
            // 3 again (duplicate), 7 (4..=6 lost), 5 late, 8.
            packed_of(78, "batch_t", &[3, 7, 5, 8]),
            // 6 late, then 9; a publisher of another process with its own clock.
            packed_of(78, "batch_t", &[6, 9]),
            packed_of(79, "batch_t", &[40, 42]),
            // Not subscribed here; and this process's own publisher looping back.
            packed_of(78, "other_t", &[1, 2]),
            packed_of(5, "batch_t", &[1, 2, 3]),
        ];
        for d in &batch {
            rx.handle_datagram(now, from, d);
        }
        assert!(lock(&plain.samples).is_empty(), "handed over after the batch, not per datagram");
        rx.deliver_pending();
        let got: Vec<(u64, u64)> = lock(&plain.samples).iter().map(|s| (s.publisher_id, s.clock)).collect();
        assert_eq!(got, [(78, 1), (78, 2), (78, 3), (78, 7), (78, 8), (78, 9), (79, 40), (79, 42)]);
        for s in lock(&plain.samples).iter() {
            assert_eq!(s.payload(), &payload(s.clock)[..]);
            assert_eq!(s.send_time_ns, s.clock as i64 * 1000);
            assert_eq!(&*s.topic, "batch_t");
            assert!(matches!(s.payload, Payload::Bytes { .. }), "a slice of the datagram's buffer");
        }
        assert_eq!(plain.batches.load(Ordering::Relaxed), 1, "one hand-over for the whole batch");
        assert_eq!(plain.wakes.load(Ordering::Relaxed), 1, "one wake-up for the whole batch");
        // 1 duplicate + 3 lost (4, 5, 6 missing when 7 came) + 1 lost (41); 5 and 6 late: not counted again.
        assert_eq!(plain.drops.load(Ordering::Relaxed), 1 + 3 + 1);
        // The ring reader of 78 gets only 79's samples, and 79's gap.
        let got: Vec<(u64, u64)> = lock(&ring.samples).iter().map(|s| (s.publisher_id, s.clock)).collect();
        assert_eq!(got, [(79, 40), (79, 42)]);
        assert_eq!((ring.batches.load(Ordering::Relaxed), ring.drops.load(Ordering::Relaxed)), (1, 1));
        assert_eq!(ring.wakes.load(Ordering::Relaxed), 1);
        let c = layer.counts();
        assert_eq!(c.delivered, 8 + 2);
        assert_eq!(c.lost, 3 + 1 + 1);
        assert_eq!(c.duplicates, 1);
        assert_eq!(c.late, 2);
        assert_eq!(c.packed_datagrams, 5, "the unsubscribed topic's is not counted as received packed");
        assert_eq!(c.packed_messages, 3 + 4 + 2 + 2 + 3);
        let counters = &layer.shared.counters;
        assert_eq!(counters.unknown_topic.load(Ordering::Relaxed), 2, "both samples of the other topic");
        // The ring reader's 9 samples of publisher 78, and the own publisher's 3 (once, for the topic).
        assert_eq!(counters.skipped_other_path.load(Ordering::Relaxed), 3 + 4 + 2 + 3);
        // The same checks one sample at a time give the same verdicts.
        let mut one = crate::transport::clock::PublisherClocks::default();
        let verdicts: Vec<ClockCheck> = [1, 2, 3, 3, 7, 5, 8, 6, 9].iter().map(|&c| one.check(78, c, now)).collect();
        let accepted = verdicts.iter().filter(|v| matches!(v, ClockCheck::Accept { .. })).count();
        assert_eq!(accepted, 6);
        drop(own);
    }

    /// eCAL-format datagrams of `topic` from publisher 78: the sample with `clock`, whole and cut into fragments.
    fn ecal_datagrams(topic: &str, clock: u64, len: usize) -> Vec<Vec<u8>> {
        let mut framed = Vec::new();
        let payload = vec![clock as u8; len];
        crate::wire::data_sample::encode_data_sample(
            &mut framed,
            &crate::wire::data_sample::DataSampleRef {
                topic_name: topic,
                topic_id: "78",
                publisher_id: 78,
                host_name: "h",
                clock,
                time_us: 0,
                payload: &payload,
            },
        );
        let mut id = clock as i32 * 100;
        crate::wire::encode_message(topic, &framed, crate::wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || {
            id += 1;
            id
        })
        .expect("encodes")
    }

    /// In local mode data comes from this host only: a datagram from any source that is not a loopback address
    /// (eCAL-format whole or fragmented, or packed) is dropped unread and counted; the same from 127.0.0.1 is
    /// delivered. In network mode another host's datagram is delivered.
    #[test]
    fn local_mode_drops_and_counts_data_from_other_hosts() {
        let run = |network: bool, from: &str| {
            let mut cfg = Config::default();
            cfg.network.enabled = network;
            let layer = UdpLayer::new(&cfg, "h", Default::default()).expect("no pattern to compile");
            let keep = Arc::new(Keep::default());
            let inbox: Arc<dyn Inbox> = keep.clone();
            layer.reader_factory().subscriber_created(1, "local_t", &inbox);
            let mut rx = UdpReceiver::new(Arc::clone(&layer.shared));
            let from: SocketAddr = from.parse().expect("address");
            let now = Instant::now();
            let mut sent = 0;
            for d in ecal_datagrams("local_t", 1, 100).iter().chain(&ecal_datagrams("local_t", 2, 200_000)) {
                rx.receive(now, from, d);
                sent += 1;
            }
            rx.receive(now, from, &packed_of(78, "local_t", &[3, 4]));
            rx.deliver_pending();
            let clocks: Vec<u64> = lock(&keep.samples).iter().map(|s| s.clock).collect();
            (clocks, layer.counts().non_local_source, layer.counts().datagrams, sent + 1)
        };
        let (clocks, refused, datagrams, sent) = run(false, "10.231.9.2:40000");
        assert!(clocks.is_empty(), "another host's data delivered in local mode: {clocks:?}");
        assert_eq!((refused, datagrams), (sent, sent), "each datagram counted as received and refused");
        let (clocks, refused, _, _) = run(false, "127.0.0.1:40000");
        assert_eq!((clocks, refused), (vec![1, 2, 3, 4], 0));
        let (clocks, refused, _, _) = run(true, "10.231.9.2:40000");
        assert_eq!((clocks, refused), (vec![1, 2, 3, 4], 0), "network mode takes other hosts' data");
    }

    /// Queues charge what a sample keeps alive: the one sample of a reassembled message whose payload is tiny
    /// beside the rest of it (a long host name) is charged the message's whole buffer; the samples one subscriber
    /// accepts from a packed datagram share the datagram between them, so one accepted record among repeated ones is
    /// charged all of it, and the records of a datagram accepted whole add up to it.
    #[test]
    fn samples_are_charged_the_buffer_they_keep_alive() {
        let layer = UdpLayer::new(&Config::default(), "h", Default::default()).expect("no pattern to compile");
        let keep = Arc::new(Keep::default());
        let inbox: Arc<dyn Inbox> = keep.clone();
        layer.reader_factory().subscriber_created(1, "held_t", &inbox);
        let mut rx = UdpReceiver::new(Arc::clone(&layer.shared));
        let from: SocketAddr = "127.0.0.1:9".parse().expect("address");
        let now = Instant::now();
        let held = |keep: &Keep| -> Vec<(u64, usize, usize)> {
            lock(&keep.samples).drain(..).map(|s| (s.clock, s.payload().len(), s.payload.held())).collect()
        };

        // A 200 KB message whose payload is 8 bytes.
        let mut framed = Vec::new();
        let host = "h".repeat(200_000);
        crate::wire::data_sample::encode_data_sample(
            &mut framed,
            &crate::wire::data_sample::DataSampleRef {
                topic_name: "held_t",
                topic_id: "78",
                publisher_id: 78,
                host_name: &host,
                clock: 1,
                time_us: 0,
                payload: &[1u8; 8],
            },
        );
        let mut id = 0;
        let ds = crate::wire::encode_message("held_t", &framed, crate::wire::DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || {
            id += 1;
            id
        })
        .expect("encodes");
        assert!(ds.len() > 3, "fragmented");
        for d in &ds {
            rx.receive(now, from, d);
        }
        rx.deliver_pending();
        let got = held(&keep);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, 8);
        assert!(got[0].2 >= 200_000, "charged the reassembled buffer, not 8 bytes: {got:?}");

        // One new clock among repeated ones: the accepted record holds the whole datagram.
        let mut clocks = vec![2u64];
        clocks.extend([1u64; 300]);
        let d = packed_of(78, "held_t", &clocks);
        rx.receive(now, from, &d);
        rx.deliver_pending();
        let got = held(&keep);
        assert_eq!(got.len(), 1, "one accepted, the repeats dropped");
        assert_eq!(got[0].2, d.len(), "charged the datagram: {got:?}");

        // A datagram accepted whole: its records share it.
        let clocks: Vec<u64> = (3..303).collect();
        let d = packed_of(78, "held_t", &clocks);
        rx.receive(now, from, &d);
        rx.deliver_pending();
        let got = held(&keep);
        assert_eq!(got.len(), 300);
        let total: usize = got.iter().map(|g| g.2).sum();
        assert!((d.len()..d.len() + 300).contains(&total), "shares add up to the datagram: {total} of {}", d.len());
        assert!(got.iter().all(|g| g.2 >= g.1), "never less than the payload");
    }

    /// A packed datagram of a protected topic (`[shoal_auth]`) is refused whole: every sample in it counted once,
    /// as unsigned, for the topic; nothing delivered.
    #[test]
    fn a_protected_topics_packed_datagram_is_refused_with_every_sample_counted() {
        let mut cfg = Config::default();
        cfg.auth.key = crate::config::AuthKey::new(vec![7; 32]).map(Arc::new);
        cfg.auth.protected_topics = "secret_.*".to_owned();
        let stats = Arc::new(crate::wire::auth::AuthStats::new(true));
        let layer = UdpLayer::new(&cfg, "h", Arc::clone(&stats)).expect("the pattern compiles");
        let keep = Arc::new(Keep::default());
        let inbox: Arc<dyn Inbox> = keep.clone();
        layer.reader_factory().subscriber_created(1, "secret_t", &inbox);
        let mut rx = UdpReceiver::new(Arc::clone(&layer.shared));
        let from: SocketAddr = "127.0.0.1:9".parse().expect("address");
        rx.handle_datagram(Instant::now(), from, &packed_of(78, "secret_t", &[1, 2, 3, 4, 5]));
        rx.deliver_pending();
        assert!(lock(&keep.samples).is_empty());
        let s = stats.summary();
        assert_eq!(s.data.unsigned, 5);
        assert_eq!(s.topics.iter().find(|(t, _)| t == "secret_t").map(|(_, c)| c.unsigned), Some(5));
        assert_eq!(layer.counts().packed_messages, 0);
    }
}
