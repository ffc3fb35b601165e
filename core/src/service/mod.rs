//! Services: request/response between processes, wire-compatible with eCAL 6.1.1's service servers and clients.
//!
//! - A [`ServiceServer`] offers named methods, each with the type information of its request and response and a
//!   handler. It listens on an ephemeral TCP port (in local mode on the loopback interface, in network mode on
//!   every address) and announces it, with its methods, in registration (cmd 5, eCAL's `Service`; cmd 15 when it
//!   goes). The I/O thread accepts connections, answers the protocol handshake and reads requests
//!   (eCAL's service protocol, version 1: a 16-byte header per message); the handlers of all servers of the process run on `[shoal_service]
//!   handler_threads` threads, never on the I/O thread. The handler thread writes its response to the connection
//!   itself as far as the socket takes it without blocking, and leaves the rest to the I/O thread, which then
//!   reads the connection's next request. A handler that returns an error gives the caller a failed response
//!   with its message, as an unknown method does.
//! - A [`ServiceClient`] calls a method on every server of its service name that registration announced (eCAL's
//!   semantics: one response per server), or on one of them. Its calls do their socket I/O on the calling thread
//!   (as a blocking call would; there is no hop through the I/O thread and back): connections to the servers are
//!   made on first use and kept for the next call, all servers are called at once, and the call returns when
//!   every server answered or the timeout passed, with a status per server (executed, failed with the server's
//!   message, timed out). It announces itself in registration (cmd 6). Asynchronous calls run on threads of their
//!   own (as many as handler threads), so that a call never waits for a handler thread it occupies.
//!
//! Bounds (`[shoal_service]`): request and response sizes, client connections per process, the handshake and idle
//! deadlines, the requests waiting for a handler. What they refuse is counted in [`ServiceCounts`].
//!
//! Under `[shoal_auth]` with a key, a service whose name `protected_topics` matches is protected: its servers and
//! clients register sealed (eCAL peers do not see them), and a server answers a connection's handshake only once
//! registration announced an authenticated client of the service from the connection's address (from this host: a
//! loopback address); otherwise it closes it at the handshake deadline (counted as `unauthenticated`). As for the
//! TCP layer, TCP itself proves nothing about who connects: any process on an announced client's host can use its
//! place.
//!
//! [`ServiceCounts`]: crate::stats::ServiceCounts

mod client;
mod pool;
mod server;
mod source;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

pub use client::{
    CallError, CallStatus, ClientBuilder, ResponseError, ServerId, ServiceClient, ServiceResponse, TypedResponse,
    WaitError,
};
pub use server::{BuildError, HandlerError, HandlerResult, ServerBuilder, ServiceServer};

use crate::config::Config;
use crate::io::Command;
use crate::registration::ServerDirectory;
use crate::stats::ServiceCounts;
use crate::sync::lock;

/// Sends a command to the I/O thread (the runtime's; holding it keeps the runtime alive).
pub(crate) type CommandSink = Arc<dyn Fn(Command) + Send + Sync>;

/// Counters behind [`ServiceCounts`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    sessions: AtomicU64,
    accepted: AtomicU64,
    refused_max_sessions: AtomicU64,
    handshake_failures: AtomicU64,
    idle_closed: AtomicU64,
    frame_errors: AtomicU64,
    bad_requests: AtomicU64,
    calls_served: AtomicU64,
    calls_failed: AtomicU64,
    busy: AtomicU64,
    unauthenticated: AtomicU64,
    calls_made: AtomicU64,
    calls_answered: AtomicU64,
    calls_timed_out: AtomicU64,
    calls_broken: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn snapshot(&self) -> ServiceCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ServiceCounts {
            sessions: g(&self.sessions),
            accepted: g(&self.accepted),
            refused_max_sessions: g(&self.refused_max_sessions),
            handshake_failures: g(&self.handshake_failures),
            idle_closed: g(&self.idle_closed),
            frame_errors: g(&self.frame_errors),
            bad_requests: g(&self.bad_requests),
            calls_served: g(&self.calls_served),
            calls_failed: g(&self.calls_failed),
            busy: g(&self.busy),
            unauthenticated: g(&self.unauthenticated),
            calls_made: g(&self.calls_made),
            calls_answered: g(&self.calls_answered),
            calls_timed_out: g(&self.calls_timed_out),
            calls_broken: g(&self.calls_broken),
        }
    }
}

/// The service part of a process's runtime: settings, the handler threads, the servers waiting for the I/O thread,
/// the responses it is to send, and the remote servers registration announced.
pub(crate) struct Services {
    pub(crate) config: crate::config::ServiceConfig,
    /// Local mode: listeners on the loopback interface only.
    pub(crate) local_only: bool,
    /// This host's name, as registration announces it (a server under it is reached on loopback).
    pub(crate) host_name: String,
    pub(crate) counters: Counters,
    /// The handler threads.
    pool: pool::Pool,
    /// The threads of asynchronous calls (apart from the handlers': a call waits for a handler, perhaps of this
    /// process).
    call_pool: pool::Pool,
    /// Servers built and not yet taken by the I/O thread.
    new_servers: Mutex<Vec<Arc<server::ServerCore>>>,
    /// Every live server and client, for their call counts in registration.
    entities: Mutex<Vec<Entity>>,
    /// Requests the handler threads served, for the I/O thread (the rest of a response to write, the connection
    /// to read from again).
    completions: Mutex<Vec<Completion>>,
    waker: OnceLock<Arc<mio::Waker>>,
    /// The remote servers and clients, as the I/O thread publishes them.
    pub(crate) directory: Arc<ServerDirectory>,
    /// Under `[shoal_auth]` with a key: the service names whose servers admit only authenticated clients.
    protected: Option<crate::registration::ProtectedTopics>,
}

enum Entity {
    Server(Weak<server::ServerCore>),
    Client(Weak<client::ClientCore>),
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Services {
    /// The service part for a runtime of `config` on host `host_name` (its `[shoal_auth] protected_topics` was
    /// checked when the registrar was made; a pattern that does not compile protects every service).
    pub(crate) fn new(config: &Config, host_name: &str) -> Arc<Services> {
        let protected = config.auth.key.as_ref().map(|_| {
            crate::registration::ProtectedTopics::new(&config.auth.protected_topics)
                .or_else(|_| crate::registration::ProtectedTopics::new(".*"))
                .expect("`.*` is a regular expression")
        });
        Arc::new(Services {
            protected,
            config: config.service.clone(),
            local_only: !config.network.enabled,
            host_name: host_name.to_owned(),
            counters: Counters::default(),
            pool: pool::Pool::new(config.service.handler_threads, config.service.max_pending),
            call_pool: pool::Pool::new(config.service.handler_threads, config.service.max_pending),
            new_servers: Mutex::new(Vec::new()),
            entities: Mutex::new(Vec::new()),
            completions: Mutex::new(Vec::new()),
            waker: OnceLock::new(),
            directory: Arc::new(ServerDirectory::default()),
        })
    }

    /// The I/O thread's part: server listeners and their connections.
    pub(crate) fn io_source(self: &Arc<Self>) -> Box<dyn crate::transport::IoSource> {
        Box::new(source::ServiceSource::new(Arc::clone(self)))
    }

    /// What the servers and clients of this process did.
    pub(crate) fn counts(&self) -> ServiceCounts {
        self.counters.snapshot()
    }

    /// The call counts of every live server's and client's methods, for their periodic registration.
    pub(crate) fn call_counts(&self) -> Vec<(u64, Vec<(String, i64)>)> {
        let mut entities = lock(&self.entities);
        entities.retain(|e| match e {
            Entity::Server(w) => w.strong_count() > 0,
            Entity::Client(w) => w.strong_count() > 0,
        });
        entities
            .iter()
            .filter_map(|e| match e {
                Entity::Server(w) => w.upgrade().map(|s| (s.id, s.call_counts())),
                Entity::Client(w) => w.upgrade().map(|c| (c.id, c.call_counts())),
            })
            .collect()
    }

    /// Whether a client connecting from `peer` may use server `service`: always, unless `[shoal_auth]` protects the
    /// service; then only when registration announced an authenticated client of it from that address (from this
    /// host: registered under this host's name or from a loopback address).
    fn admits(&self, service: &str, peer: std::net::IpAddr) -> bool {
        let Some(p) = &self.protected else { return true };
        if !p.contains(service) {
            return true;
        }
        let local = peer.is_loopback();
        let entries = self.directory.entries();
        tracing::trace!(service, %peer, known = ?entries.iter().map(|c| (c.role, &c.service_name, c.authenticated, c.source)).collect::<Vec<_>>(), "admission");
        entries.iter().any(|c| {
            c.role == crate::registration::ServiceRole::Client
                && c.service_name == service
                && c.authenticated
                && if local {
                    c.key.host_name == self.host_name || c.source.is_some_and(|a| a.is_loopback())
                } else {
                    c.source == Some(peer)
                }
        })
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get()
            && let Err(e) = w.wake()
        {
            tracing::warn!("cannot wake the I/O thread: {e}");
        }
    }

    /// A handler thread served the request of the session under `token`: of the response `frame` it wrote
    /// `written` bytes itself.
    fn complete(&self, token: mio::Token, frame: Vec<u8>, written: usize) {
        // A response written whole is dropped here, on the handler thread.
        let frame = if written >= frame.len() { Vec::new() } else { frame };
        let written = written.min(frame.len());
        lock(&self.completions).push(Completion { token, frame, written });
        self.wake();
    }
}

/// A served request, for the I/O thread: the session, its response, and the bytes of it the handler wrote.
struct Completion {
    token: mio::Token,
    frame: Vec<u8>,
    written: usize,
}

/// What a server or client is built with: the process's service part, its entity id and the way to the I/O
/// thread.
#[derive(Clone)]
pub(crate) struct Context {
    pub(crate) services: Arc<Services>,
    pub(crate) id: u64,
    pub(crate) send: CommandSink,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("id", &self.id).finish_non_exhaustive()
    }
}
