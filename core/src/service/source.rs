//! The servers' sockets on the I/O thread: listeners, client connections (handshake, requests read, responses
//! written), their deadlines and bounds. One token per listener and connection.
//!
//! A connection's socket is shared with the handler thread serving its request: while a request is with a handler
//! the I/O thread neither reads nor writes that connection, so the handler writes the response itself, as far as
//! the socket takes it without blocking (the I/O thread is not woken on the way to the caller); the rest, if any,
//! goes back to the I/O thread, which writes it when the socket has room. Either way the handler hands the
//! connection back (`Services::complete`), and the I/O thread reads the next request.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::sync::lock;
use crate::transport::IoSource;
use crate::wire::service::{FrameDecoder, MessageType, choose_version, handshake_response};

use super::server::ServerCore;
use super::{Services, bump};

/// Deadlines are checked at most this often.
const SWEEP_PERIOD: Duration = Duration::from_millis(100);
/// Bytes read from one connection per turn before the others have theirs.
const READ_BUDGET: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's handshake request.
    Handshake,
    /// Waiting for a request.
    Ready,
    /// A request is with a handler thread; nothing more is read until its response is written.
    Busy,
}

struct Session {
    server: Arc<ServerCore>,
    /// Shared with the handler thread of a request (module docs); polled through its file descriptor.
    stream: Arc<TcpStream>,
    /// The client's address (admission under `[shoal_auth]`).
    peer: std::net::IpAddr,
    /// A handshake waiting for admission: the version to answer with once registration announces the client.
    awaiting: Option<u8>,
    /// What the client sent after a handshake that waits (a request sent at once), read when it is admitted.
    stash: Vec<u8>,
    decoder: FrameDecoder,
    phase: Phase,
    /// Bytes to write (a response, the handshake answer) and how many of them went out.
    out: Vec<u8>,
    out_at: usize,
    /// When the phase began (for the handshake and idle deadlines).
    since: Instant,
    writable_interest: bool,
}

enum Entry {
    Listener { server: Arc<ServerCore>, listener: TcpListener },
    Session(Box<Session>),
}

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
enum Close {
    #[error("closed by the client")]
    Eof,
    #[error("the server was dropped")]
    ServerGone,
    #[error("handshake not completed in time")]
    HandshakeTimeout,
    #[error("no authenticated client of this protected service was announced from this address")]
    Unauthenticated,
    #[error("no common protocol version")]
    NoCommonVersion,
    #[error("idle for too long")]
    Idle,
    #[error("a request sent before the previous one was answered")]
    Pipelined,
    #[error("unexpected message type {0}")]
    UnexpectedType(u8),
    #[error(transparent)]
    Frame(#[from] crate::wire::service::FrameError),
    #[error(transparent)]
    Io(#[from] io::Error),
}

pub(super) struct ServiceSource {
    services: Arc<Services>,
    first_token: usize,
    token_count: usize,
    next_token: usize,
    entries: HashMap<Token, Entry>,
    sessions: usize,
    scratch: Vec<u8>,
    next_sweep: Option<Instant>,
    /// Connections left with input after their read budget.
    pending: Vec<Token>,
}

impl ServiceSource {
    pub(super) fn new(services: Arc<Services>) -> ServiceSource {
        ServiceSource {
            services,
            first_token: 0,
            token_count: 0,
            next_token: 0,
            entries: HashMap::new(),
            sessions: 0,
            scratch: vec![0u8; 64 * 1024],
            next_sweep: None,
            pending: Vec::new(),
        }
    }

    fn alloc_token(&mut self) -> Option<Token> {
        for _ in 0..self.token_count {
            let t = Token(self.first_token + self.next_token);
            self.next_token = (self.next_token + 1) % self.token_count.max(1);
            if !self.entries.contains_key(&t) {
                return Some(t);
            }
        }
        None
    }

    fn accept(&mut self, registry: &Registry, token: Token, now: Instant) {
        loop {
            let Some(Entry::Listener { server, listener }) = self.entries.get(&token) else { return };
            let server = Arc::clone(server);
            let (stream, peer) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("service {}: accept failed: {e}", server.name);
                    return;
                }
            };
            bump(&self.services.counters.accepted);
            if self.sessions >= self.services.config.max_sessions {
                bump(&self.services.counters.refused_max_sessions);
                tracing::debug!("service {}: connection from {peer} refused (max_sessions)", server.name);
                continue;
            }
            let _ = stream.set_nodelay(true);
            let Some(t) = self.alloc_token() else { continue };
            if let Err(e) = registry.register(&mut SourceFd(&stream.as_raw_fd()), t, Interest::READABLE) {
                tracing::debug!("service {}: cannot poll a connection: {e}", server.name);
                continue;
            }
            self.sessions += 1;
            self.services.counters.sessions.store(self.sessions as u64, Ordering::Relaxed);
            let max = self.services.config.max_request_bytes;
            let session = Session {
                server,
                stream: Arc::new(stream),
                // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
                peer: peer.ip().to_canonical(),
                awaiting: None,
                stash: Vec::new(),
                decoder: FrameDecoder::new(max),
                phase: Phase::Handshake,
                out: Vec::new(),
                out_at: 0,
                since: now,
                writable_interest: false,
            };
            self.entries.insert(t, Entry::Session(Box::new(session)));
            // Data may have arrived with the connection.
            self.pending.push(t);
        }
    }

    fn close(&mut self, registry: &Registry, token: Token, why: &Close) {
        if let Some(Entry::Session(s)) = self.entries.remove(&token) {
            let _ = registry.deregister(&mut SourceFd(&s.stream.as_raw_fd()));
            // Closed now, for the client too, even while a handler thread still holds the socket (its response
            // write then fails).
            let _ = s.stream.shutdown(std::net::Shutdown::Both);
            self.sessions -= 1;
            self.services.counters.sessions.store(self.sessions as u64, Ordering::Relaxed);
            tracing::debug!("service {}: connection closed: {why}", s.server.name);
        }
    }

    /// Reads and handles what a connection sent, writes what it waits for. True when input is left (budget).
    fn service(&mut self, registry: &Registry, token: Token, now: Instant) -> Result<bool, Close> {
        let services = Arc::clone(&self.services);
        let Some(Entry::Session(s)) = self.entries.get_mut(&token) else { return Ok(false) };
        write_out(s, registry, token)?;
        if let Some(v) = s.awaiting {
            if !services.admits(&s.server.name, s.peer) {
                return Ok(false);
            }
            s.awaiting = None;
            answer_handshake(s, v, now);
            write_out(s, registry, token)?;
        }
        let mut budget = READ_BUDGET;
        while s.phase != Phase::Busy && s.out_at == s.out.len() {
            if budget == 0 {
                return Ok(true);
            }
            // What waited with the handshake first, then the socket.
            let stashed = std::mem::take(&mut s.stash);
            let n = if !stashed.is_empty() {
                self.scratch[..stashed.len()].copy_from_slice(&stashed);
                stashed.len()
            } else {
                match (&*s.stream).read(&mut self.scratch) {
                    Ok(0) => return Err(Close::Eof),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            budget = budget.saturating_sub(n);
            let mut input = &self.scratch[..n];
            while !input.is_empty() {
                let Some(frame) = s.decoder.decode(&mut input)? else { break };
                match (s.phase, MessageType::from_u8(frame.header.message_type)) {
                    (Phase::Handshake, Some(MessageType::HandshakeRequest)) if s.awaiting.is_none() => {
                        let Some(v) = choose_version(&frame.payload) else {
                            bump(&services.counters.handshake_failures);
                            return Err(Close::NoCommonVersion);
                        };
                        if !services.admits(&s.server.name, s.peer) {
                            // Registration may not have announced the client yet: the answer waits for it, until
                            // the handshake deadline. Nothing more is read meanwhile.
                            tracing::debug!(
                                "service {}: handshake from {} waits for an authenticated client's registration",
                                s.server.name,
                                s.peer
                            );
                            s.awaiting = Some(v);
                            s.stash = input.to_vec();
                            return Ok(false);
                        }
                        answer_handshake(s, v, now);
                        write_out(s, registry, token)?;
                    }
                    (Phase::Ready, Some(MessageType::Request)) => {
                        s.phase = Phase::Busy;
                        let server = Arc::clone(&s.server);
                        let svc = Arc::clone(&services);
                        let payload = frame.payload;
                        // Nothing of this connection's is left to write (a handshake answer could be): the handler
                        // may write the response itself.
                        let direct = (s.out_at == s.out.len()).then(|| Arc::clone(&s.stream));
                        let job = Box::new(move || {
                            let response = server.serve(&svc, payload);
                            // A server dropped meanwhile answers no more: the I/O thread closes the connection.
                            let written = match direct {
                                Some(stream) if !server.closed.load(Ordering::Acquire) => {
                                    write_direct(&stream, &response)
                                }
                                _ => 0,
                            };
                            svc.complete(token, response, written);
                        });
                        if services.pool.submit(job).is_err() {
                            bump(&services.counters.busy);
                            s.out = busy_response(&s.server);
                            s.out_at = 0;
                            s.phase = Phase::Ready;
                            s.since = now;
                            write_out(s, registry, token)?;
                        }
                        if !input.is_empty() {
                            // The protocol has one request at a time per connection (eCAL's clients wait for the
                            // answer): a client that sends the next one before it is closed.
                            bump(&services.counters.frame_errors);
                            return Err(Close::Pipelined);
                        }
                    }
                    (_, _) => {
                        bump(&services.counters.frame_errors);
                        return Err(Close::UnexpectedType(frame.header.message_type));
                    }
                }
            }
        }
        Ok(false)
    }

    fn sweep(&mut self, registry: &Registry, now: Instant) {
        let handshake = Duration::from_millis(u64::from(self.services.config.handshake_timeout_ms));
        let idle = Duration::from_millis(u64::from(self.services.config.idle_timeout_ms));
        let mut to_close = Vec::new();
        for (t, e) in &self.entries {
            match e {
                Entry::Listener { server, .. } if server.closed.load(Ordering::Acquire) => {
                    to_close.push((*t, Close::ServerGone));
                }
                Entry::Session(s) if s.server.closed.load(Ordering::Acquire) => to_close.push((*t, Close::ServerGone)),
                Entry::Session(s) if s.phase == Phase::Handshake && now.duration_since(s.since) >= handshake => {
                    if s.awaiting.is_some() {
                        to_close.push((*t, Close::Unauthenticated));
                    } else {
                        to_close.push((*t, Close::HandshakeTimeout));
                    }
                }
                // A handshake waiting for its client's registration: looked at again on every sweep.
                Entry::Session(s) if s.awaiting.is_some() => self.pending.push(*t),
                Entry::Session(s)
                    if s.phase == Phase::Ready
                        && s.out_at == s.out.len()
                        && !s.decoder.mid_frame()
                        && now.duration_since(s.since) >= idle =>
                {
                    to_close.push((*t, Close::Idle));
                }
                _ => {}
            }
        }
        for (t, why) in to_close {
            if let Some(Entry::Listener { server, mut listener }) = self.entries.remove(&t) {
                let _ = registry.deregister(&mut listener);
                tracing::debug!("service {}: listener closed", server.name);
            } else {
                self.close(registry, t, &why);
                // Counted once closed: whoever reads the count finds the connection closed.
                match why {
                    Close::HandshakeTimeout => bump(&self.services.counters.handshake_failures),
                    Close::Unauthenticated => bump(&self.services.counters.unauthenticated),
                    Close::Idle => bump(&self.services.counters.idle_closed),
                    _ => {}
                }
            }
        }
    }
}

fn answer_handshake(s: &mut Session, version: u8, now: Instant) {
    s.out = handshake_response(version);
    s.out_at = 0;
    s.phase = Phase::Ready;
    s.since = now;
}

/// A handler thread's write of `frame` to its connection, until the socket would block or fails (the I/O thread
/// then meets the failure itself); returns the bytes written.
fn write_direct(stream: &TcpStream, frame: &[u8]) -> usize {
    let mut done = 0;
    while done < frame.len() {
        match (&*stream).write(&frame[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    done
}

/// Writes what is queued; asks for writability while some is left.
fn write_out(s: &mut Session, registry: &Registry, token: Token) -> Result<(), Close> {
    while s.out_at < s.out.len() {
        match (&*s.stream).write(&s.out[s.out_at..]) {
            Ok(0) => return Err(Close::Io(io::ErrorKind::WriteZero.into())),
            Ok(n) => s.out_at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let want_writable = s.out_at < s.out.len();
    if want_writable != s.writable_interest {
        let interest = if want_writable { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
        registry.reregister(&mut SourceFd(&s.stream.as_raw_fd()), token, interest)?;
        s.writable_interest = want_writable;
    }
    if !want_writable {
        s.out.clear();
        s.out_at = 0;
    }
    Ok(())
}

/// The answer to a request no handler thread could take.
fn busy_response(server: &ServerCore) -> Vec<u8> {
    use crate::wire::pb;
    let header = pb::ServiceHeader {
        service_name: server.name.clone(),
        service_id: server.id.to_string(),
        state: pb::service_header::ECallState::Failed as i32,
        error: "server busy: [shoal_service] max_pending requests wait for a handler".into(),
        ..Default::default()
    };
    super::server::frame_response(&pb::Response { header: Some(header), response: Vec::new(), ret_state: 0 })
}

impl IoSource for ServiceSource {
    fn maintain(&mut self, registry: &Registry, _token: Token, now: Instant) {
        let new: Vec<Arc<ServerCore>> = std::mem::take(&mut *lock(&self.services.new_servers));
        for server in new {
            let Some(l) = lock(&server.listener).take() else { continue };
            let Some(t) = self.alloc_token() else { continue };
            let mut listener = TcpListener::from_std(l);
            if let Err(e) = registry.register(&mut listener, t, Interest::READABLE) {
                tracing::warn!("service {}: cannot poll its listener: {e}", server.name);
                continue;
            }
            self.entries.insert(t, Entry::Listener { server, listener });
            // Connections made before the listener was polled.
            self.accept(registry, t, now);
        }
        if self.next_sweep.is_none_or(|t| now >= t) {
            self.next_sweep = Some(now + SWEEP_PERIOD);
            self.sweep(registry, now);
        }
        let pending = std::mem::take(&mut self.pending);
        for t in pending {
            self.on_token(registry, t, now);
        }
    }

    fn on_readable(&mut self, _now: Instant, _batch: usize) -> bool {
        false
    }

    fn set_token_space(&mut self, first: usize, count: usize) {
        self.first_token = first;
        self.token_count = count;
    }

    fn on_token(&mut self, registry: &Registry, token: Token, now: Instant) -> bool {
        match self.entries.get(&token) {
            Some(Entry::Listener { .. }) => self.accept(registry, token, now),
            Some(Entry::Session(_)) => match self.service(registry, token, now) {
                Ok(true) => self.pending.push(token),
                Ok(false) => {}
                Err(why) => {
                    if let Close::Frame(_) = why {
                        bump(&self.services.counters.frame_errors);
                    }
                    self.close(registry, token, &why);
                }
            },
            None => {}
        }
        // Connections left with input are continued from `maintain`, on this same turn.
        false
    }

    fn set_waker(&mut self, waker: Arc<mio::Waker>) {
        let _ = self.services.waker.set(waker);
    }

    fn flush(&mut self, now: Instant) -> Option<Instant> {
        let done: Vec<super::Completion> = std::mem::take(&mut *lock(&self.services.completions));
        if done.is_empty() {
            return None;
        }
        // The registry is not at hand here: what the handler left is written on the session's next turn (this
        // one's `maintain`), as are interest changes.
        for c in done {
            let Some(Entry::Session(s)) = self.entries.get_mut(&c.token) else { continue };
            s.out_at = c.written.min(c.frame.len());
            s.out = c.frame;
            s.phase = Phase::Ready;
            s.since = now;
            self.pending.push(c.token);
        }
        None
    }
}
