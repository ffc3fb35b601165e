//! A subscriber's connection to one publisher on the I/O thread: which address to connect to, the bounded
//! attempts (per-connection and per-address backoff, `max_connections`), the handshake, and the frames decoded as
//! they arrive ([`super::stream`]) delivered to the subscriber's inbox.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::sample::{Payload, Sample};
use crate::stats::Via;
use crate::sync::lock;

use super::source::{CloseReason, Entry, Outcome, TcpSource};
use super::stream::{self, Event, StreamDecoder};
use super::subscriber::ClientShared;
use super::{Shared, bump, frame};

/// Bytes one connection may read per I/O-thread turn before the others get theirs.
pub(super) const READ_BUDGET: usize = 8 << 20;

/// Reconnect backoff, per connection and per publisher address.
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(100);
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A connection waiting for another attempt to its address to end looks again this much later.
pub(super) const PROBE_WAIT: Duration = Duration::from_millis(20);

/// A subscriber does not connect to a lower port (eCAL's publishers listen on ephemeral ports).
pub(super) const MIN_PUBLISHER_PORT: u16 = 1024;

/// Where a subscriber connects to its publisher, without asking a name resolver: the address the publisher's
/// registration came from; without one, its host name if that is an address literal, or loopback for a publisher
/// on this host.
pub(super) fn publisher_address(c: &ClientShared) -> Option<IpAddr> {
    if let Some(ip) = *lock(&c.source) {
        return Some(ip.to_canonical());
    }
    if let Ok(ip) = c.host_name.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    c.same_host.then_some(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The I/O thread's side of a subscriber connection.
pub(super) struct Client {
    pub(super) shared: Arc<ClientShared>,
    pub(super) stream: Option<TcpStream>,
    /// The non-blocking connect completed.
    pub(super) connected: bool,
    /// The publisher answered the handshake on the current connection.
    pub(super) answered: bool,
    /// Set by [`Client::service`] when the publisher has just answered (the source updates its address state).
    pub(super) just_answered: bool,
    /// The address of the current attempt while it counts as one in flight to that address.
    pub(super) attempt_addr: Option<IpAddr>,
    /// When the current attempt started.
    pub(super) attempt_started: Instant,
    /// The address of the last attempt (which address state this connection uses).
    pub(super) addr: Option<IpAddr>,
    /// The port of the current or last attempt.
    pub(super) port: u16,
    /// A port below 1024 already counted for this connection.
    pub(super) bad_port: Option<u16>,
    /// Handshake bytes still to write.
    pub(super) out: Vec<u8>,
    /// The current connection's handshake asks for the publisher's history (`pubsub/history.rs`).
    pub(super) asks_history: bool,
    /// The publisher sent all the history asked for (its [`frame::history_end`] mark): later connections do not
    /// ask again.
    pub(super) history_answered: bool,
    /// Messages on the current connection are history, until the publisher's mark (an eCAL publisher, which
    /// answers the handshake as any, never sends one: its live data goes through the subscriber's history gate,
    /// which passes a publisher that announced no history).
    pub(super) in_history: bool,
    pub(super) decoder: StreamDecoder,
    /// Buffers of delivered payloads whose readers are done with them, for the decoder to reuse.
    returned: crate::transport::recycle::Returned,
    pub(super) backoff: Duration,
    pub(super) next_attempt: Instant,
}

/// What a subscriber knows of one publisher address: whether it answered a tcp_pubsub handshake since its last
/// failure, and when it may be tried again (module docs).
#[derive(Debug)]
pub(super) struct AddressState {
    pub(super) good: bool,
    pub(super) in_flight: u32,
    pub(super) next_probe: Instant,
    pub(super) backoff: Duration,
}

impl AddressState {
    pub(super) fn new(now: Instant) -> AddressState {
        AddressState { good: false, in_flight: 0, next_probe: now, backoff: BACKOFF_MIN }
    }

    pub(super) fn failed(&mut self, now: Instant) {
        self.good = false;
        self.next_probe = now + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }
}

impl Client {
    /// The I/O thread's side of the connection `shared`, to the announced `port`, not connected yet: the first
    /// attempt is due at `now`.
    pub(super) fn new(shared: Arc<ClientShared>, port: u16, max_message: usize, now: Instant) -> Client {
        Client {
            shared,
            stream: None,
            connected: false,
            answered: false,
            just_answered: false,
            attempt_addr: None,
            attempt_started: now,
            addr: None,
            port,
            bad_port: None,
            out: Vec::new(),
            asks_history: false,
            history_answered: false,
            in_history: false,
            decoder: StreamDecoder::new(max_message),
            returned: Default::default(),
            backoff: BACKOFF_MIN,
            next_attempt: now,
        }
    }

    /// Completes the connect, writes the handshake, reads and delivers frames (up to [`READ_BUDGET`] bytes).
    pub(super) fn service(&mut self, shared: &Shared, scratch: &mut [u8]) -> Outcome {
        let Some(stream) = self.stream.take() else { return Outcome::Keep(false) };
        let outcome = self.service_stream(&stream, shared, scratch);
        self.stream = Some(stream);
        outcome
    }

    pub(super) fn service_stream(&mut self, stream: &TcpStream, shared: &Shared, scratch: &mut [u8]) -> Outcome {
        let mut stream = stream;
        if !self.connected {
            if let Ok(Some(e)) | Err(e) = stream.take_error() {
                return Outcome::Close(CloseReason::Connect(e));
            }
            match stream.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Outcome::Keep(false),
                Err(e) => return Outcome::Close(CloseReason::Connect(e)),
            }
        }
        while !self.out.is_empty() {
            match stream.write(&self.out) {
                Ok(0) => return Outcome::Close(CloseReason::HandshakeNotWritten),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Outcome::Close(e.into()),
            }
        }
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                return Outcome::Keep(true);
            }
            // Buffers the subscribers are done with, before each read: one call may complete several messages.
            for b in self.returned.take() {
                self.decoder.recycle(b);
            }
            // Large remainders of a message are read in place, everything else through the scratch buffer.
            let (read, direct) = match self.decoder.payload_spare(scratch.len()) {
                Some((buf, left)) => (crate::sys::recv_into_spare(stream.as_fd(), buf, left), true),
                None => (stream.read(scratch), false),
            };
            let n = match read {
                Ok(0) => return Outcome::Close(CloseReason::ClosedByPublisher),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Keep(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Outcome::Close(e.into()),
            };
            budget = budget.saturating_sub(n);
            let bytes = if direct { &[][..] } else { &scratch[..n] };
            if let Err(e) = self.feed(shared, bytes) {
                bump(&shared.counters.protocol_errors);
                return Outcome::Close(e.into());
            }
        }
    }

    /// Feeds received bytes through the connection's decoder and acts on what it reports.
    pub(super) fn feed(&mut self, shared: &Shared, bytes: &[u8]) -> Result<(), stream::StreamError> {
        let Client {
            decoder,
            shared: cs,
            answered,
            just_answered,
            asks_history,
            history_answered,
            in_history,
            returned,
            ..
        } = self;
        let counters = &shared.counters;
        let mut delivered = false;
        let result = decoder.feed(bytes, &mut |event| match event {
            Event::Handshake => {
                if !*answered {
                    *answered = true;
                    *just_answered = true;
                    *in_history = *asks_history;
                }
            }
            Event::HistoryEnd => {
                if *in_history {
                    *in_history = false;
                    *history_answered = true;
                    cs.inbox.history_end(cs.publisher_id);
                    if cs.history_only {
                        // Nothing else comes on this connection: the I/O thread closes it on its next turn.
                        cs.closed.store(true, Ordering::Release);
                    }
                }
            }
            Event::Message(m) => {
                if cs.inbox.reads_ring_of(m.publisher_id) {
                    return;
                }
                let held = m.payload.capacity();
                let sample = Sample {
                    // The buffer comes back to the decoder when the last reader is done with it.
                    payload: Payload::Bytes { bytes: returned.bytes(m.payload), held },
                    send_time_ns: m.time_us.saturating_mul(1000),
                    via: Via::Tcp,
                    clock: m.clock,
                    publisher_id: m.publisher_id,
                    type_info: Arc::clone(&cs.type_info),
                    topic: Arc::clone(&cs.topic),
                };
                if *in_history {
                    cs.inbox.push_history(sample);
                } else {
                    cs.inbox.push_unwoken(sample);
                    delivered = true;
                }
                bump(&counters.delivered);
            }
            Event::TooLarge { data_size } => {
                bump(&counters.too_large);
                cs.inbox.count_drops(1);
                tracing::debug!(
                    "topic {}: TCP frame of {data_size} bytes from publisher {} above max_message ({}); skipped",
                    cs.topic,
                    cs.publisher_id,
                    shared.cfg.max_message_bytes
                );
            }
            Event::Undecodable(e) => {
                bump(&counters.decode_errors);
                cs.inbox.count_drops(1);
                tracing::debug!("topic {}: TCP message dropped: {e}", cs.topic);
            }
            Event::OutOfOrder { .. } => {
                bump(&counters.out_of_order);
                cs.inbox.count_drops(1);
            }
            // The message a shoal publisher was sending while it read its history for this connection, again
            // (`session.rs`): already delivered, not a loss.
            Event::Repeat { .. } => {}
            Event::Lost(n) => {
                counters.lost.fetch_add(n, Ordering::Relaxed);
                cs.inbox.count_drops(n);
            }
        });
        if delivered {
            cs.inbox.wake();
        }
        result
    }
}

impl TcpSource {
    /// Starts a connection attempt to [`publisher_address`] and connects without blocking, within the bounds of the
    /// module docs (port, `max_connections`, one attempt at a time to an address that has not answered).
    pub(super) fn try_connect(&mut self, registry: &Registry, token: Token, now: Instant) {
        let TcpSource { entries, addresses, connections, shared, .. } = self;
        let Some(Entry::Client(c)) = entries.get_mut(&token) else { return };
        let counters = &shared.counters;
        let port = u16::try_from(c.shared.port.load(Ordering::Acquire)).unwrap_or(0);
        c.port = port;
        if port < MIN_PUBLISHER_PORT {
            if c.bad_port != Some(port) {
                c.bad_port = Some(port);
                bump(&counters.bad_ports);
                tracing::debug!(
                    "topic {}: publisher {} announces TCP port {port}, below {MIN_PUBLISHER_PORT}: not connected to",
                    c.shared.topic,
                    c.shared.publisher_id
                );
            }
            c.next_attempt = now + BACKOFF_MAX;
            return;
        }
        let Some(ip) = publisher_address(&c.shared) else {
            bump(&counters.connect_failures);
            tracing::debug!(
                "topic {}: TCP connection to publisher {}: no address for host {}: its registration's source is \
                 unknown",
                c.shared.topic,
                c.shared.publisher_id,
                c.shared.host_name
            );
            c.next_attempt = now + c.backoff;
            c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
            return;
        };
        c.addr = Some(ip);
        if *connections >= shared.cfg.max_connections {
            bump(&counters.connects_deferred);
            tracing::debug!(
                "topic {}: TCP connection to publisher {} put off: {} connections (max_connections)",
                c.shared.topic,
                c.shared.publisher_id,
                *connections
            );
            c.next_attempt = now + c.backoff;
            c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
            return;
        }
        let address = addresses.entry(ip).or_insert_with(|| AddressState::new(now));
        if !address.good && (address.in_flight > 0 || now < address.next_probe) {
            c.next_attempt = address.next_probe.max(now + PROBE_WAIT);
            return;
        }
        let addr = SocketAddr::new(ip, port);
        let result = TcpStream::connect(addr).map_err(|e| format!("connect to {addr}: {e}")).and_then(|mut s| {
            registry
                .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                .map_err(|e| format!("cannot poll the connection to {addr}: {e}"))?;
            Ok(s)
        });
        match result {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                c.stream = Some(s);
                c.connected = false;
                c.answered = false;
                c.attempt_addr = Some(ip);
                c.attempt_started = now;
                // A subscriber asking for history asks each publisher once (a reconnection is no new match: what
                // came live before must not come again).
                let depth = c.shared.inbox.history_depth();
                c.asks_history = depth > 0 && !c.history_answered;
                c.in_history = false;
                c.out = match (c.asks_history, c.shared.history_only) {
                    (true, true) => frame::handshake_asking_history_only(depth).to_vec(),
                    (true, false) => frame::handshake_asking_history(depth).to_vec(),
                    (false, _) => frame::handshake().to_vec(),
                };
                c.decoder.restart();
                address.in_flight += 1;
                *connections += 1;
            }
            Err(e) => {
                bump(&counters.connect_failures);
                address.failed(now);
                tracing::debug!("topic {}: TCP connection to publisher {}: {e}", c.shared.topic, c.shared.publisher_id);
                c.next_attempt = now + c.backoff;
                c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
            }
        }
        self.set_session_gauges();
    }

    /// The publisher answered the handshake of the connection under `token`: its address is good again.
    pub(super) fn answered(&mut self, token: Token) {
        let Some(Entry::Client(c)) = self.entries.get_mut(&token) else { return };
        c.just_answered = false;
        bump(&self.shared.counters.connects);
        c.backoff = BACKOFF_MIN;
        if let Some(ip) = c.attempt_addr.take()
            && let Some(a) = self.addresses.get_mut(&ip)
        {
            a.in_flight = a.in_flight.saturating_sub(1);
            a.good = true;
            a.backoff = BACKOFF_MIN;
        }
    }

    /// Drops the connection's socket and schedules the next attempt; an attempt the publisher had not answered
    /// counts as a failure of its address.
    pub(super) fn disconnect(&mut self, registry: Option<&Registry>, token: Token, why: &CloseReason, now: Instant) {
        self.pending.remove(&token);
        let TcpSource { entries, addresses, connections, shared, .. } = self;
        let counters = &shared.counters;
        let Some(Entry::Client(c)) = entries.get_mut(&token) else { return };
        if let Some(mut s) = c.stream.take() {
            if let Some(r) = registry {
                let _ = r.deregister(&mut s);
            }
            *connections = connections.saturating_sub(1);
            if !c.answered {
                bump(&counters.connect_failures);
            }
        }
        if let Some(ip) = c.attempt_addr.take()
            && let Some(a) = addresses.get_mut(&ip)
        {
            a.in_flight = a.in_flight.saturating_sub(1);
            a.failed(now);
        }
        tracing::debug!(
            "topic {}: TCP connection to publisher {} ({}:{}) lost: {why}; retry in {:?}",
            c.shared.topic,
            c.shared.publisher_id,
            c.shared.host_name,
            c.port,
            c.backoff,
        );
        c.connected = false;
        c.answered = false;
        c.decoder.restart();
        c.next_attempt = now + c.backoff;
        c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
        self.set_session_gauges();
    }
}
