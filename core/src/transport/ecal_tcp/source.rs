//! The TCP layer's sockets on the I/O thread: one token per listener and connection, the dispatch of their
//! readiness to the publisher's ([`super::session`]) and the subscriber's ([`super::client`]) side, and the
//! deadlines checked on its turns.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Interest, Registry, Token};

use crate::sync::lock;
use crate::transport::IoSource;

use super::client::{AddressState, BACKOFF_MIN, Client};
use super::session::{Server, Session, SessionEnd};
use super::{Shared, bump};

/// Deadlines are checked at most this often.
pub(super) const SWEEP_PERIOD: Duration = Duration::from_millis(20);

/// Addresses no connection uses any more are forgotten at most this often.
pub(super) const ADDRESS_CLEANUP_PERIOD: Duration = Duration::from_secs(1);

pub(super) enum Entry {
    Listener { server: Arc<Server>, listener: TcpListener },
    Session { server: Arc<Server>, session: Arc<Session> },
    Client(Box<Client>),
}

/// The TCP layer's sockets on the I/O thread.
pub(super) struct TcpSource {
    pub(super) shared: Arc<Shared>,
    pub(super) first_token: usize,
    pub(super) token_count: usize,
    pub(super) next_token: usize,
    pub(super) entries: HashMap<Token, Entry>,
    /// Connections that stopped reading at their budget; continued on the next turn.
    pub(super) pending: HashSet<Token>,
    pub(super) scratch: Vec<u8>,
    /// Publisher connections held, in all and per peer address.
    pub(super) sessions: usize,
    pub(super) per_source: HashMap<IpAddr, usize>,
    /// Subscriber connections with a socket (connected or connecting).
    pub(super) connections: usize,
    /// Publisher addresses of the subscriber connections.
    pub(super) addresses: HashMap<IpAddr, AddressState>,
    pub(super) next_sweep: Option<Instant>,
    pub(super) next_address_cleanup: Option<Instant>,
}

/// What servicing a connection found.
pub(super) enum Outcome {
    /// Keep it; true when it has more to read (budget reached).
    Keep(bool),
    /// Close it (the reason is logged by the caller).
    Close(CloseReason),
}

/// Why the I/O thread closes a connection (logged; the counted reasons of a publisher's are [`SessionEnd`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum CloseReason {
    /// The subscriber's non-blocking connect failed.
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The socket took none of the subscriber's handshake.
    #[error("handshake not written")]
    HandshakeNotWritten,
    /// The publisher did not answer the subscriber's handshake within `handshake_timeout_ms`.
    #[error("the publisher did not answer the handshake in time")]
    HandshakeTimeout,
    /// The publisher's registration announced another port: the subscriber connects there.
    #[error("the publisher announced another port")]
    PortChanged,
    /// The publisher closed the subscriber's connection.
    #[error("closed by the publisher")]
    ClosedByPublisher,
    /// The subscriber closed the publisher's connection.
    #[error("closed by the subscriber")]
    ClosedBySubscriber,
    /// A write from the publisher's thread failed before the I/O thread's turn.
    #[error("connection failed on send")]
    SendFailed,
    /// The subscriber sent more than a handshake ([`super::session::MAX_SESSION_INPUT`] bytes).
    #[error("subscriber sent more than a handshake")]
    SubscriberInputTooLong,
    /// What the subscriber sent is not tcp_pubsub frames.
    #[error(transparent)]
    SubscriberInput(#[from] super::frame::SubscriberInputError),
    /// What the publisher sent cannot be decoded on (counted as a protocol error).
    #[error(transparent)]
    Stream(#[from] super::stream::StreamError),
    /// A read or write failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl TcpSource {
    /// The layer's source, with no socket yet.
    pub(super) fn new(shared: Arc<Shared>) -> TcpSource {
        TcpSource {
            shared,
            first_token: 0,
            token_count: 0,
            next_token: 0,
            entries: HashMap::new(),
            pending: HashSet::new(),
            scratch: vec![0u8; 64 * 1024],
            sessions: 0,
            per_source: HashMap::new(),
            connections: 0,
            addresses: HashMap::new(),
            next_sweep: None,
            next_address_cleanup: None,
        }
    }

    pub(super) fn alloc_token(&mut self) -> Option<Token> {
        if self.token_count == 0 {
            return None;
        }
        for _ in 0..self.token_count {
            let t = Token(self.first_token + self.next_token);
            self.next_token = (self.next_token + 1) % self.token_count;
            if !self.entries.contains_key(&t) {
                return Some(t);
            }
        }
        None
    }

    pub(super) fn set_session_gauges(&self) {
        let c = &self.shared.counters;
        c.sessions.store(self.sessions as u64, Ordering::Relaxed);
        c.connections.store(self.connections as u64, Ordering::Relaxed);
    }

    pub(super) fn remove(&mut self, registry: Option<&Registry>, token: Token) {
        self.pending.remove(&token);
        let Some(entry) = self.entries.remove(&token) else { return };
        match entry {
            Entry::Listener { mut listener, .. } => {
                if let Some(r) = registry {
                    let _ = r.deregister(&mut listener);
                }
            }
            Entry::Session { server, session } => {
                let admitted = {
                    let mut st = lock(&session.state);
                    st.dead = true;
                    if let Some(r) = registry {
                        let _ = r.deregister(&mut st.stream);
                    }
                    let _ = st.stream.shutdown(std::net::Shutdown::Both);
                    st.admitted.take()
                };
                session.room.notify_all();
                if let Some(origin) = admitted {
                    server.release(origin);
                }
                lock(&server.sessions).retain(|s| !Arc::ptr_eq(s, &session));
                self.sessions = self.sessions.saturating_sub(1);
                let ip = session.peer.ip();
                if let Some(n) = self.per_source.get_mut(&ip) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        self.per_source.remove(&ip);
                    }
                }
            }
            Entry::Client(mut c) => {
                if let Some(mut s) = c.stream.take() {
                    if let Some(r) = registry {
                        let _ = r.deregister(&mut s);
                    }
                    self.connections = self.connections.saturating_sub(1);
                }
                if let Some(ip) = c.attempt_addr.take()
                    && let Some(a) = self.addresses.get_mut(&ip)
                {
                    a.in_flight = a.in_flight.saturating_sub(1);
                }
            }
        }
        self.set_session_gauges();
    }

    /// Checks the deadlines: handshakes and admissions of publishers' connections, stalled ones, places that went,
    /// subscribers' attempts that were not answered; forgets addresses no connection uses.
    pub(super) fn sweep(&mut self, registry: &Registry, now: Instant) {
        if self.next_sweep.is_some_and(|t| now < t) {
            return;
        }
        self.next_sweep = Some(now + SWEEP_PERIOD);
        let handshake = Duration::from_millis(u64::from(self.shared.cfg.handshake_timeout_ms));
        let stall = Duration::from_millis(u64::from(self.shared.cfg.stall_timeout_ms));
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        let mut ends = Vec::new();
        let mut timed_out = Vec::new();
        let mut servers: HashMap<*const Server, Arc<Server>> = HashMap::new();
        for (t, e) in &self.entries {
            match e {
                Entry::Session { server, session } => {
                    let mut st = lock(&session.state);
                    if st.dead {
                        continue;
                    }
                    if st.ready() {
                        servers.entry(Arc::as_ptr(server)).or_insert_with(|| Arc::clone(server));
                        if !st.queue.is_empty() && now.saturating_duration_since(st.progress_at) >= stall {
                            ends.push((*t, SessionEnd::Stalled));
                        }
                        continue;
                    }
                    if st.handshaken && Self::try_admit(counters, server, session, &mut st) {
                        if st.flush().is_err() {
                            st.dead = true;
                        }
                        drop(st);
                        session.room.notify_all();
                        continue;
                    }
                    if now.saturating_duration_since(session.accepted_at) >= handshake {
                        let end = if st.handshaken { SessionEnd::Unannounced } else { SessionEnd::HandshakeTimeout };
                        ends.push((*t, end));
                    }
                }
                Entry::Client(c) => {
                    if c.stream.is_some()
                        && !c.answered
                        && now.saturating_duration_since(c.attempt_started) >= handshake
                    {
                        timed_out.push(*t);
                    }
                }
                Entry::Listener { .. } => {}
            }
        }
        // Places that went: the newest connections of each kind over its count are closed.
        for server in servers.values() {
            for (origin, excess) in server.over_admitted() {
                let mut held: Vec<(Instant, Token)> = self
                    .entries
                    .iter()
                    .filter_map(|(t, e)| match e {
                        Entry::Session { server: s, session } if Arc::ptr_eq(s, server) => {
                            (lock(&session.state).admitted == Some(origin)).then_some((session.accepted_at, *t))
                        }
                        _ => None,
                    })
                    .collect();
                held.sort();
                ends.extend(held.iter().rev().take(excess).map(|(_, t)| (*t, SessionEnd::Revoked)));
            }
        }
        for (t, end) in ends {
            self.end_session(registry, t, end);
        }
        for t in timed_out {
            bump(&self.shared.counters.connect_timeouts);
            self.disconnect(Some(registry), t, &CloseReason::HandshakeTimeout, now);
        }
        if self.next_address_cleanup.is_none_or(|t| now >= t) {
            self.next_address_cleanup = Some(now + ADDRESS_CLEANUP_PERIOD);
            let used: HashSet<IpAddr> = self
                .entries
                .values()
                .filter_map(|e| match e {
                    Entry::Client(c) => c.addr,
                    _ => None,
                })
                .collect();
            self.addresses.retain(|ip, a| a.in_flight > 0 || used.contains(ip));
        }
    }
}

impl IoSource for TcpSource {
    fn set_token_space(&mut self, first: usize, count: usize) {
        self.first_token = first;
        self.token_count = count;
    }

    fn maintain(&mut self, registry: &Registry, _token: Token, now: Instant) {
        let servers = std::mem::take(&mut *lock(&self.shared.new_servers));
        for server in servers {
            let Some(std_listener) = lock(&server.listener).take() else { continue };
            let mut listener = TcpListener::from_std(std_listener);
            let Some(t) = self.alloc_token() else { continue };
            if let Err(e) = registry.register(&mut listener, t, Interest::READABLE) {
                tracing::warn!("topic {}: cannot poll the TCP listener: {e}", server.topic);
                continue;
            }
            self.entries.insert(t, Entry::Listener { server, listener });
            // Connections may already wait in the backlog (the port was announced before this turn).
            self.accept(registry, t, now);
        }
        let clients = std::mem::take(&mut *lock(&self.shared.new_clients));
        for shared in clients {
            let Some(t) = self.alloc_token() else { continue };
            let port = u16::try_from(shared.port.load(Ordering::Relaxed)).unwrap_or(0);
            let client = Client::new(shared, port, self.shared.cfg.max_message_bytes, now);
            self.entries.insert(t, Entry::Client(Box::new(client)));
        }
        let mut gone = Vec::new();
        let mut reconnect = Vec::new();
        let mut connect = Vec::new();
        for (t, e) in &self.entries {
            match e {
                Entry::Listener { server, .. } | Entry::Session { server, .. }
                    if server.closed.load(Ordering::Acquire) =>
                {
                    gone.push(*t)
                }
                Entry::Session { session, .. } if lock(&session.state).dead => gone.push(*t),
                Entry::Client(c) if c.shared.closed.load(Ordering::Acquire) => gone.push(*t),
                Entry::Client(c) => {
                    let port = c.shared.port.load(Ordering::Acquire);
                    if c.stream.is_some() && u32::from(c.port) != port {
                        reconnect.push(*t);
                    } else if c.stream.is_none() && now >= c.next_attempt {
                        connect.push(*t);
                    }
                }
                _ => {}
            }
        }
        for t in gone {
            self.remove(Some(registry), t);
        }
        for t in reconnect {
            if let Some(Entry::Client(c)) = self.entries.get_mut(&t) {
                c.backoff = Duration::ZERO;
            }
            self.disconnect(Some(registry), t, &CloseReason::PortChanged, now);
            if let Some(Entry::Client(c)) = self.entries.get_mut(&t) {
                c.backoff = BACKOFF_MIN;
            }
        }
        for t in connect {
            self.try_connect(registry, t, now);
        }
        let pending: Vec<Token> = self.pending.drain().collect();
        for t in pending {
            self.on_token(registry, t, now);
        }
        self.sweep(registry, now);
    }

    fn on_readable(&mut self, _now: Instant, _batch: usize) -> bool {
        // Connections that reached their read budget go on in `maintain`, which has the registry.
        !self.pending.is_empty()
    }

    fn on_token(&mut self, registry: &Registry, token: Token, now: Instant) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        let outcome = match self.entries.get_mut(&token) {
            None => Outcome::Keep(false),
            Some(Entry::Listener { .. }) => {
                self.accept(registry, token, now);
                Outcome::Keep(false)
            }
            Some(Entry::Session { server, session }) => {
                Self::service_session(&self.shared.counters, server, session, &mut scratch)
            }
            Some(Entry::Client(c)) => c.service(&self.shared, &mut scratch),
        };
        self.scratch = scratch;
        if let Some(Entry::Client(c)) = self.entries.get(&token)
            && c.just_answered
        {
            self.answered(token);
        }
        match outcome {
            Outcome::Keep(more) => {
                if more {
                    self.pending.insert(token);
                }
                more
            }
            Outcome::Close(why) => {
                match self.entries.get(&token) {
                    Some(Entry::Client(_)) => self.disconnect(Some(registry), token, &why, now),
                    Some(Entry::Session { server, session }) => {
                        tracing::debug!("topic {}: TCP subscriber {} gone: {why}", server.topic, session.peer);
                        self.remove(Some(registry), token);
                    }
                    _ => {}
                }
                false
            }
        }
    }
}
