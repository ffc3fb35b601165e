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
use crate::wire::{DatagramHeader, DatagramKind, Reassembler, ReassemblyCounters, split_name};

use super::Shared;
use super::codec::{DataSample, decode_data_sample, decode_data_sample_from, topic_group};
use crate::transport::clock::ClockCheck;

/// Datagrams one `recvmmsg` takes at most (64 KiB of buffer each, allocated with the socket's first datagram).
const RECV_SLOTS: usize = 16;

/// How often a summary of the counters is logged (debug) when they changed.
const SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// What to do with a decoded sample for one subscriber (decided under the table lock, done after it).
enum Action {
    Deliver(Arc<dyn Inbox>, Arc<TypeInfo>),
    Drop(Arc<dyn Inbox>, u64),
    /// Keep the upgraded inbox alive until the table lock is released (it may be the last reference).
    Release(Arc<dyn Inbox>),
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
    actions: Vec<Action>,
    /// Inboxes delivered to since the last wake-up (each once): woken after each `recvmmsg` batch, not per sample.
    to_wake: Vec<Arc<dyn Inbox>>,
    empty_type: Arc<TypeInfo>,
    last_summary: Instant,
    last_summary_datagrams: u64,
    /// `[shoal_auth]` with a key: checks envelopes, reassembles what they carry apart from unauthenticated datagrams.
    auth: Option<AuthReceiver>,
    /// Counts of reassemblers replaced (the socket closed), so the published totals keep counting.
    reassembly_base: ReassemblyCounters,
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
            actions: Vec::new(),
            to_wake: Vec::new(),
            empty_type: Arc::new(TypeInfo::default()),
            last_summary: Instant::now(),
            last_summary_datagrams: 0,
            auth,
            reassembly_base: ReassemblyCounters::default(),
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
        let (decoded, raw): (_, &[u8]) = match msg {
            Cow::Borrowed(m) => (decode_data_sample(&m[proto_at..]), m),
            Cow::Owned(v) => {
                owned = bytes::Bytes::from(v);
                (decode_data_sample_from(owned.slice(proto_at..)), &owned[..])
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
        self.dispatch(now, sample);
    }

    /// A shoal packed datagram (`wire::packed`): checked whole, then each sample dispatched as an eCAL-format one
    /// would be (same clock checks and counts). Packed datagrams are never sealed: a protected topic's is refused.
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
            for _ in 0..n {
                self.shared.auth_stats.count(Channel::Data, AuthReject::Unsigned, Some(p.topic), &from);
            }
            return;
        }
        c.packed_datagrams.fetch_add(1, Ordering::Relaxed);
        c.packed_messages.fetch_add(n, Ordering::Relaxed);
        for r in p.records() {
            let sample = DataSample {
                topic_name: p.topic.to_owned(),
                publisher_id: p.publisher_id,
                host_name: String::new(),
                clock: r.clock,
                time_us: r.time_us,
                payload: bytes::Bytes::copy_from_slice(r.payload),
            };
            self.dispatch(now, sample);
        }
    }

    /// One loss for every subscriber of `topic` (a sample for it could not be decoded).
    fn count_topic_drop(&mut self, topic: &str) {
        {
            let t = lock(&self.shared.subs);
            if let Some(entries) = t.topics.get(topic) {
                self.actions.extend(entries.iter().filter_map(|e| e.inbox.upgrade()).map(|i| Action::Drop(i, 1)));
            }
        }
        self.run_actions(None);
    }

    fn dispatch(&mut self, now: Instant, sample: DataSample) {
        let c = &self.shared.counters;
        {
            let mut t = lock(&self.shared.subs);
            if t.local_publishers.contains(&sample.publisher_id) {
                // Our own publisher's datagram looped back: same-process subscribers got it directly.
                c.skipped_other_path.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let Some(topic) = t.topics.get_key_value(sample.topic_name.as_str()).map(|(k, _)| Arc::clone(k)) else {
                c.unknown_topic.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let Some(entries) = t.topics.get_mut(&topic) else { return };
            for e in entries.iter_mut() {
                let Some(inbox) = e.inbox.upgrade() else { continue };
                if inbox.reads_ring_of(sample.publisher_id) {
                    c.skipped_other_path.fetch_add(1, Ordering::Relaxed);
                    self.actions.push(Action::Release(inbox));
                    continue;
                }
                match e.pubs.check(sample.publisher_id, sample.clock, now) {
                    ClockCheck::Accept { lost } => {
                        if lost > 0 {
                            c.lost.fetch_add(lost, Ordering::Relaxed);
                            tracing::debug!(
                                "topic {topic}: {lost} samples of publisher {} never arrived (clock {})",
                                sample.publisher_id,
                                sample.clock
                            );
                            self.actions.push(Action::Drop(Arc::clone(&inbox), lost));
                        }
                        let ti = e.types.get(&sample.publisher_id).cloned().unwrap_or_else(|| self.empty_type.clone());
                        self.actions.push(Action::Deliver(inbox, ti));
                    }
                    ClockCheck::Resync => {
                        tracing::warn!(
                            "topic {topic}: publisher {} resumed at clock {} after samples far behind its last \
                             clock; a far-ahead clock (spoofed or corrupt) had been accepted",
                            sample.publisher_id,
                            sample.clock
                        );
                        let ti = e.types.get(&sample.publisher_id).cloned().unwrap_or_else(|| self.empty_type.clone());
                        self.actions.push(Action::Deliver(inbox, ti));
                    }
                    ClockCheck::Duplicate => {
                        c.duplicates.fetch_add(1, Ordering::Relaxed);
                        self.actions.push(Action::Drop(inbox, 1));
                    }
                    ClockCheck::OutOfOrder => {
                        // Late: its clock lies in a gap already counted as lost when the newer sample was accepted
                        // (or it was delivered before): not a second drop for the subscriber.
                        c.out_of_order.fetch_add(1, Ordering::Relaxed);
                        self.actions.push(Action::Release(inbox));
                    }
                }
            }
            drop(t);
            self.run_actions(Some((sample, topic)));
        }
    }

    /// Delivers and counts what was decided under the table lock, outside it. Every subscriber gets the same
    /// payload buffer; the subscribers' waiters are woken after the batch ([`Self::wake_delivered`]).
    fn run_actions(&mut self, sample: Option<(DataSample, Arc<str>)>) {
        for a in self.actions.drain(..) {
            match a {
                Action::Deliver(inbox, type_info) => {
                    let Some((s, topic)) = sample.as_ref() else { continue };
                    inbox.push_unwoken(Sample {
                        payload: Payload::Bytes(s.payload.clone()),
                        send_time_ns: s.time_us.saturating_mul(1000),
                        via: Via::Udp,
                        clock: s.clock,
                        publisher_id: s.publisher_id,
                        type_info,
                        topic: Arc::clone(topic),
                    });
                    self.shared.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    if !self.to_wake.iter().any(|w| Arc::ptr_eq(w, &inbox)) {
                        self.to_wake.push(inbox);
                    }
                }
                Action::Drop(inbox, n) => inbox.count_drops(n),
                Action::Release(inbox) => drop(inbox),
            }
        }
    }

    /// Wakes the waiters of every subscriber delivered to since the last call.
    fn wake_delivered(&mut self) {
        for inbox in self.to_wake.drain(..) {
            inbox.wake();
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
        // whole budget, which would hold the first sample back).
        let mut left = batch;
        let (drained, err) = loop {
            let n = left.min(RECV_SLOTS);
            let (drained, err) = batcher.recv(fd, n, |from, d| self.handle_datagram(now, from, d));
            self.wake_delivered();
            left -= n;
            if drained != super::net::Drained::Budget || left == 0 {
                break (drained, err);
            }
        };
        let dropped = batcher.kernel_drops() - before;
        self.batch = batcher;
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
