//! A publisher's server and its subscriber connections: the places registration offers (admission), a
//! connection's send queue, and the I/O thread's part (accept, handshake and admission, flushing, closing).

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use crate::registration::RemoteTopic;
use crate::sync::lock;
use crate::transport::HistorySource;

use super::source::{CloseReason, Entry, Outcome, TcpSource};
use super::{Counters, bump, frame};

/// Connections one publisher serves at most; further ones are closed at once.
pub(super) const MAX_SESSIONS_PER_PUBLISHER: usize = 256;

/// Bytes a publisher reads from a subscriber before the handshake must be complete.
pub(super) const MAX_SESSION_INPUT: usize = 4096;

/// TCP keepalive of a publisher's connections: a subscriber whose host vanished (no reset ever comes) is noticed
/// after about 10 + 3 × 2 s, even on a silent topic, and its place freed.
pub(super) const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
pub(super) const KEEPALIVE_PROBES: u32 = 3;

/// Where a connection may come from, for admission (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Origin {
    /// A process of this host.
    ThisHost,
    /// This address.
    Addr(IpAddr),
}

/// The place a matched subscriber makes for a connection: this host for one registered from a loopback address or
/// under this host's name, else the address its registration came from; `None` without a known source.
pub(super) fn subscriber_origin(r: &RemoteTopic, host_name: &str) -> Option<Origin> {
    if r.source.is_some_and(|ip| ip.is_loopback()) || r.key.host_name == host_name {
        return Some(Origin::ThisHost);
    }
    r.source.map(|ip| Origin::Addr(ip.to_canonical()))
}

/// One publisher's server: its listener until the I/O thread takes it, and its subscriber connections.
pub(super) struct Server {
    pub(super) topic: String,
    pub(super) port: u16,
    pub(super) listener: Mutex<Option<std::net::TcpListener>>,
    pub(super) sessions: Mutex<Vec<Arc<Session>>>,
    /// One place per subscriber that registration announced (module docs), set by the publisher.
    pub(super) places: Mutex<Vec<Origin>>,
    /// Connections admitted per place kind (the I/O thread's bookkeeping).
    pub(super) admitted: Mutex<HashMap<Origin, usize>>,
    /// Messages that were queued for connections closed as stalled, for the publisher's drop count.
    pub(super) late_drops: AtomicU64,
    /// Set when the publisher goes: the I/O thread closes the listener and the connections.
    pub(super) closed: AtomicBool,
    /// The publisher's entity id and its decimal form (eCAL's topic id), for the frames of its history.
    pub(super) publisher_id: u64,
    pub(super) id_str: String,
    /// The messages the publisher keeps for late joiners, if it keeps any: a connection whose handshake asks for
    /// them gets them right after the handshake's answer, before live data.
    pub(super) history: Option<Arc<dyn HistorySource>>,
}

impl Server {
    /// Takes a free place for a connection from `peer` (also from this host when `this_host`), if any.
    pub(super) fn admit(&self, peer: IpAddr, this_host: bool) -> Option<Origin> {
        let places = lock(&self.places);
        let mut admitted = lock(&self.admitted);
        let candidates = [Some(Origin::Addr(peer)), this_host.then_some(Origin::ThisHost)];
        for origin in candidates.into_iter().flatten() {
            let offered = places.iter().filter(|p| **p == origin).count();
            let held = admitted.entry(origin).or_insert(0);
            if *held < offered {
                *held += 1;
                return Some(origin);
            }
        }
        None
    }

    /// Gives back the place a closed connection held.
    pub(super) fn release(&self, origin: Origin) {
        let mut admitted = lock(&self.admitted);
        if let Some(n) = admitted.get_mut(&origin) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                admitted.remove(&origin);
            }
        }
    }

    /// Place kinds held by more connections than registration offers now, and by how many.
    pub(super) fn over_admitted(&self) -> Vec<(Origin, usize)> {
        let places = lock(&self.places);
        let admitted = lock(&self.admitted);
        admitted
            .iter()
            .filter_map(|(o, held)| {
                let offered = places.iter().filter(|p| *p == o).count();
                held.checked_sub(offered).filter(|excess| *excess > 0).map(|excess| (*o, excess))
            })
            .collect()
    }
}

/// One subscriber connection of a publisher.
pub(super) struct Session {
    pub(super) state: Mutex<SessionState>,
    /// Signalled when the queue got room or the connection died (for `send_timeout_ms`).
    pub(super) room: Condvar,
    /// The subscriber's address (an IPv4-mapped address as the IPv4 one).
    pub(super) peer: SocketAddr,
    /// The connection comes from this host: its peer address is a loopback one or its own local address.
    pub(super) this_host: bool,
    pub(super) accepted_at: Instant,
}

pub(super) struct SessionState {
    pub(super) stream: TcpStream,
    /// Bytes received from the subscriber not yet parsed (its handshake).
    pub(super) input: Vec<u8>,
    /// The subscriber sent its handshake.
    pub(super) handshaken: bool,
    /// Admitted (the place it holds) and its handshake answered: messages go to this connection.
    pub(super) admitted: Option<Origin>,
    /// Frames to write; the front one from `front_off` on.
    pub(super) queue: VecDeque<Arc<Vec<u8>>>,
    pub(super) front_off: usize,
    /// Bytes in `queue` (whole frames).
    pub(super) queued: usize,
    /// When the queue last became non-empty or lost bytes to the socket (for `stall_timeout_ms`).
    pub(super) progress_at: Instant,
    /// A write or read failed; the I/O thread removes the connection.
    pub(super) dead: bool,
    /// The history depth a shoal subscriber's handshake asked for ([`frame::handshake_asking_history`]).
    pub(super) history: Option<u32>,
    /// It asked for the history only ([`frame::handshake_asking_history_only`]): no live message goes to it.
    pub(super) history_only: bool,
    /// Buffers of frames written out, for the next rests of messages the socket did not take at once
    /// ([`Self::frame_buffer`]; as many as [`crate::wire::reassembly::keep_spare`] keeps): no fresh mapping per
    /// large message while several wait in the queue.
    pub(super) spare: Vec<Vec<u8>>,
}

impl SessionState {
    pub(super) fn ready(&self) -> bool {
        self.admitted.is_some()
    }

    /// Queues `frame` (the rest of a message, or a whole one).
    pub(super) fn push(&mut self, frame: Arc<Vec<u8>>) {
        if self.queue.is_empty() {
            self.progress_at = Instant::now();
        }
        self.queued += frame.len();
        self.queue.push_back(frame);
    }

    /// Writes queued frames until the socket would block.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        let mut progress = false;
        let result = loop {
            let Some(front) = self.queue.front() else { break Ok(()) };
            match (&self.stream).write(&front[self.front_off..]) {
                Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    progress = true;
                    self.front_off += n;
                    if self.front_off == front.len() {
                        self.queued -= front.len();
                        self.front_off = 0;
                        if let Some(done) = self.queue.pop_front() {
                            self.keep_spare(done);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if progress {
            self.progress_at = Instant::now();
        }
        result
    }

    /// Writes `head` then `payload` until the socket would block (one `writev` while part of `head` is left);
    /// returns the bytes written. Only for a connection with an empty queue.
    pub(super) fn write_direct(&mut self, head: &[u8], payload: &[u8]) -> io::Result<usize> {
        let total = head.len() + payload.len();
        let mut done = 0;
        while done < total {
            let r = if done < head.len() {
                (&self.stream).write_vectored(&[IoSlice::new(&head[done..]), IoSlice::new(payload)])
            } else {
                (&self.stream).write(&payload[done - head.len()..])
            };
            match r {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Keeps the buffer of a frame written out as a spare, if nothing else holds it and it is worth keeping.
    fn keep_spare(&mut self, frame: Arc<Vec<u8>>) {
        if let Ok(buf) = Arc::try_unwrap(frame) {
            crate::wire::reassembly::keep_spare(&mut self.spare, buf);
        }
    }

    /// An empty buffer for a frame of `len` bytes: the smallest spare that holds that much, else a new one. A frame
    /// under [`crate::wire::reassembly::SPARE_MIN_BYTES`] always gets a new one (the allocator's free lists serve
    /// those without fresh pages; a spare would be wasted on it).
    pub(super) fn frame_buffer(&mut self, len: usize) -> Vec<u8> {
        crate::wire::reassembly::take_spare(&mut self.spare, len).unwrap_or_else(|| Vec::with_capacity(len))
    }

    /// Whether a frame of `len` bytes fits the queue bound (an empty queue takes any frame).
    pub(super) fn has_room(&self, len: usize, cap: usize) -> bool {
        self.queue.is_empty() || self.queued + len <= cap
    }

    /// Messages queued and not completely written (the front one may be partly out).
    pub(super) fn queued_messages(&self) -> u64 {
        self.queue.len() as u64
    }
}

/// Why the I/O thread closes a publisher's connection.
#[derive(Debug, Clone, Copy)]
pub(super) enum SessionEnd {
    HandshakeTimeout,
    Unannounced,
    Revoked,
    Stalled,
}

impl TcpSource {
    pub(super) fn accept(&mut self, registry: &Registry, token: Token, now: Instant) {
        let shared = Arc::clone(&self.shared);
        let counters = &shared.counters;
        loop {
            let Some(Entry::Listener { server, listener }) = self.entries.get(&token) else { return };
            let server = Arc::clone(server);
            let (mut stream, peer) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("topic {}: TCP accept failed: {e}", server.topic);
                    return;
                }
            };
            let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
            let from_source = self.per_source.get(&peer.ip()).copied().unwrap_or(0);
            if self.sessions >= self.shared.cfg.max_sessions
                || lock(&server.sessions).len() >= MAX_SESSIONS_PER_PUBLISHER
            {
                bump(&counters.refused_process_cap);
                tracing::debug!(
                    "topic {}: TCP subscriber {peer} refused: {} connections already (max_sessions {})",
                    server.topic,
                    self.sessions,
                    self.shared.cfg.max_sessions
                );
                continue;
            }
            if from_source >= self.shared.cfg.max_sessions_per_source {
                bump(&counters.refused_source_cap);
                tracing::debug!(
                    "topic {}: TCP subscriber {peer} refused: {from_source} connections from {} already \
                     (max_sessions_per_source)",
                    server.topic,
                    peer.ip()
                );
                continue;
            }
            let this_host = peer.ip().is_loopback()
                || stream.local_addr().is_ok_and(|local| local.ip().to_canonical() == peer.ip());
            let _ = stream.set_nodelay(true);
            let keepalive = socket2::TcpKeepalive::new()
                .with_time(KEEPALIVE_IDLE)
                .with_interval(KEEPALIVE_INTERVAL)
                .with_retries(KEEPALIVE_PROBES);
            if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
                tracing::debug!("topic {}: no TCP keepalive for subscriber {peer}: {e}", server.topic);
            }
            let Some(t) = self.alloc_token() else { continue };
            if let Err(e) = registry.register(&mut stream, t, Interest::READABLE | Interest::WRITABLE) {
                tracing::warn!("topic {}: cannot poll TCP subscriber {peer}: {e}", server.topic);
                continue;
            }
            bump(&counters.accepted);
            tracing::debug!("topic {}: TCP subscriber {peer} connected", server.topic);
            let session = Arc::new(Session {
                state: Mutex::new(SessionState {
                    stream,
                    input: Vec::new(),
                    handshaken: false,
                    admitted: None,
                    queue: VecDeque::new(),
                    front_off: 0,
                    queued: 0,
                    progress_at: now,
                    dead: false,
                    history: None,
                    history_only: false,
                    spare: Vec::new(),
                }),
                room: Condvar::new(),
                peer,
                this_host,
                accepted_at: now,
            });
            lock(&server.sessions).push(Arc::clone(&session));
            self.entries.insert(t, Entry::Session { server, session });
            self.sessions += 1;
            *self.per_source.entry(peer.ip()).or_insert(0) += 1;
            self.set_session_gauges();
        }
    }

    /// Admits a connection that sent its handshake if a place fits it (module docs): answers the handshake.
    /// False when no place is free.
    pub(super) fn try_admit(counters: &Counters, server: &Server, session: &Session, st: &mut SessionState) -> bool {
        let Some(origin) = server.admit(session.peer.ip(), session.this_host) else { return false };
        st.admitted = Some(origin);
        st.push(Arc::new(frame::handshake().to_vec()));
        if let Some(depth) = st.history {
            if let Some(history) = &server.history {
                Self::queue_history(server, history.as_ref(), depth, st);
            }
            // The subscriber asked, so it knows the mark: what follows is live data (or, history only, nothing).
            st.push(Arc::new(frame::history_end().to_vec()));
        }
        bump(&counters.admitted);
        tracing::debug!("topic {}: TCP subscriber {} admitted ({origin:?})", server.topic, session.peer);
        true
    }

    /// Queues the publisher's kept messages (the newest `depth`) for a connection just admitted, before any live
    /// message: this runs under the connection's lock, which a live write takes too (after the publisher kept its
    /// message), so a message is either in this history or written live after it. The one being sent while the
    /// history is read may come both ways: the subscriber drops the second as a repeat (`stream.rs`). Bounded by
    /// the publisher's history (depth and bytes), not by `send_queue`.
    fn queue_history(server: &Server, history: &dyn HistorySource, depth: u32, st: &mut SessionState) {
        let mut frames = 0u32;
        history.replay(depth, &mut |clock, time_us, payload| match frame::encode_message(
            &server.topic,
            &server.id_str,
            server.publisher_id,
            clock,
            time_us,
            payload,
        ) {
            Ok(f) => {
                st.push(Arc::new(f));
                frames += 1;
            }
            Err(e) => tracing::debug!("topic {}: kept message {clock} not sent: {e}", server.topic),
        });
        tracing::debug!("topic {}: {frames} kept messages queued for a late TCP subscriber", server.topic);
    }

    /// Reads the subscriber's handshake (and anything else it sends, bounded), admits and answers it, flushes the
    /// queue.
    pub(super) fn service_session(
        counters: &Counters,
        server: &Server,
        session: &Session,
        scratch: &mut [u8],
    ) -> Outcome {
        let mut st = lock(&session.state);
        if st.dead {
            return Outcome::Close(CloseReason::SendFailed);
        }
        loop {
            match (&st.stream).read(scratch) {
                Ok(0) => return Outcome::Close(CloseReason::ClosedBySubscriber),
                Ok(n) => {
                    if st.input.len() + n > MAX_SESSION_INPUT {
                        return Outcome::Close(CloseReason::SubscriberInputTooLong);
                    }
                    st.input.extend_from_slice(&scratch[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Outcome::Close(e.into()),
            }
        }
        match frame::take_subscriber_input(&mut st.input, MAX_SESSION_INPUT) {
            Err(e) => return Outcome::Close(e.into()),
            Ok(i) if i.handshakes == 0 => {}
            Ok(i) => {
                st.handshaken = true;
                st.history = i.history.or(st.history);
                st.history_only |= i.history_only;
            }
        }
        if st.handshaken && !st.ready() {
            Self::try_admit(counters, server, session, &mut st);
        }
        let flushed = st.flush();
        drop(st);
        session.room.notify_all();
        match flushed {
            Ok(()) => Outcome::Keep(false),
            Err(e) => Outcome::Close(e.into()),
        }
    }

    /// Closes the publisher's connection under `token` for `end` and counts it.
    pub(super) fn end_session(&mut self, registry: &Registry, token: Token, end: SessionEnd) {
        let counters = &self.shared.counters;
        if let Some(Entry::Session { server, session }) = self.entries.get(&token) {
            let queued = lock(&session.state).queued_messages();
            let counter = match end {
                SessionEnd::HandshakeTimeout => &counters.handshake_timeouts,
                SessionEnd::Unannounced => &counters.refused_unannounced,
                SessionEnd::Revoked => &counters.revoked,
                SessionEnd::Stalled => {
                    server.late_drops.fetch_add(queued, Ordering::Relaxed);
                    &counters.stalled
                }
            };
            bump(counter);
            tracing::debug!(
                "topic {}: TCP subscriber {} closed: {end:?} ({queued} messages queued)",
                server.topic,
                session.peer
            );
        }
        self.remove(Some(registry), token);
    }
}
