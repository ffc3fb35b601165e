//! eCAL's TCP layer (`transport_layer` type 5, tcp_pubsub 1.x framing as eCAL 6.1.1 speaks it).
//!
//! - Publisher side ([`TcpLayer::writer_factory`]): a publisher's writer starts when its first subscriber that has
//!   TCP enabled is assigned to it (eCAL's priority lists, `[publisher] priority_*`); it then listens on an
//!   ephemeral port and announces it in `layer_par_tcp.port`. In local mode (`[network] network_enabled = false`)
//!   the listener is bound to the loopback interface (`[::]` or `0.0.0.0` with `SO_BINDTODEVICE lo`: any
//!   127.x.y.z and `::1` reach it, other hosts do not; where the option is refused, `127.0.0.1` alone), in network
//!   mode to every address (`[::]`, or `0.0.0.0` without IPv6). The I/O thread accepts connections, answers an
//!   admitted subscriber's protocol handshake (below), and flushes the send queues when the sockets become
//!   writable. `send()` encodes a message's header once ([`frame`]) and hands the message to every admitted
//!   connection: to a connection with nothing queued, header and payload are written at once with one `writev`
//!   from the publisher's thread, as far as the socket takes them, without blocking, and only the unwritten rest
//!   is queued; behind queued frames the whole frame (copied once per message) is queued. The queue is bounded in
//!   bytes by `[shoal_tcp] send_queue`. A message that does not fit a connection's queue is dropped whole for
//!   that connection and counted (default), or the publisher waits up to `[shoal_tcp] send_timeout_ms` for room.
//!   A frame once begun is always completed, so a subscriber never sees a torn frame. A connection that takes
//!   none of its queued bytes for `[shoal_tcp] stall_timeout_ms` is closed (counted, and the messages still
//!   queued for it as drops of the publisher): what a publisher holds for its subscribers is at most
//!   `send_queue` per connection, and for at most that long for one that stopped reading.
//! - Admission. tcp_pubsub's handshake says nothing about who connects, so a publisher decides from what the
//!   connection shows, its peer address, against what registration announced: the matched subscribers of its
//!   topic that have TCP enabled (whichever layer the publisher chose for them: an eCAL subscriber connects to
//!   every publisher that announces a port; shoal subscribers reading the native ring excepted, they connect no
//!   other layer), each one place for one connection. A subscriber registered from a
//!   loopback address or under this host's name is a place for a connection from this host (peer address on
//!   loopback, or the connection's own local address); any other one is a place for a connection from the address
//!   its registration came from ([`RemoteTopic::source`]). Under `[shoal_auth]`, a protected topic's places are
//!   its authenticated subscribers only ([`RemoteTopic::authenticated`]). A connection's handshake is answered,
//!   and messages sent to it, once a place fits it that no other connection holds: at once, or when registration
//!   announces one within `[shoal_tcp] handshake_timeout_ms` of the accept; otherwise it is closed then
//!   (counted: no handshake, or no place). When registration announces fewer places for an address than there
//!   are connections from it (a subscriber's registration went), the newest of them are closed (counted). A
//!   connection whose subscriber's host vanished holds its place until TCP keepalive notices (10 s idle, then 3
//!   probes 2 s apart) or a write fails; meanwhile a new connection for that place is refused. At
//!   accept, a connection beyond `[shoal_tcp] max_sessions` (all publishers of the process) or
//!   `max_sessions_per_source` (from one address), or 256 for one publisher, is closed at once (counted). What
//!   this rule cannot do: tell apart two processes behind one address (on one host, any local process can take
//!   the place of an announced local subscriber that is not connected yet; TCP has no peer credentials, and
//!   mapping a loopback peer to a process needs privileges and a racy scan of `/proc`), or admit a subscriber
//!   whose connections leave from another address than its registration does (a multi-homed host that sends
//!   registration and TCP through different interfaces).
//! - Subscriber side ([`TcpLayer::reader_factory`], only with `[subscriber] tcp_rec_enabled`): a connection per
//!   subscriber and matched publisher, to the announced port at the address the publisher's registration came
//!   from ([`RemoteTopic::source`]: its address in this network namespace, whatever its host name resolves to).
//!   eCAL resolves the host name (as is, then `host_name.local`); shoal asks no resolver, so nothing waits on
//!   `getaddrinfo` (a slow DNS server would stall the I/O thread for seconds). Without a source (an entry not made
//!   from a datagram) a host name that is an address literal is used, and a publisher on this host is reached on
//!   loopback. It is driven by the I/O thread: non-blocking connect, handshake, frames decoded as they arrive
//!   ([`stream`]). A frame larger than `[shoal_tcp] max_message` is skipped without being stored, and counted; so
//!   are frames that do not decode and gaps in the publisher's clock (messages it dropped for this connection, or
//!   sent while it was down); an invalid frame header closes the connection (counted). A connection whose
//!   publisher has not answered the handshake within `handshake_timeout_ms` is given up (counted).
//! - A registration's source address can be forged, so a subscriber must not be made to hammer a third host:
//!   it connects only to ports from 1024 on (eCAL's publishers listen on ephemeral ports; a lower one is counted
//!   and not connected to), to an address only one attempt at a time until the address answers a tcp_pubsub
//!   handshake, then again only after its failure backoff (100 ms doubling to 2 s, shared by every connection to
//!   that address, reset only by an answered handshake, not by a mere TCP connect), and holds at most
//!   `[shoal_tcp] max_connections` connections in all (an attempt beyond waits, counted). A lost connection is
//!   retried with its own backoff (the same steps) until the publisher's registration goes.
//! - All sockets are registered with the I/O thread's poll (one token per listener and connection); the layer
//!   starts no thread and makes no blocking call on the I/O thread. Deadlines (handshakes, stalls) are checked
//!   on its turns, at least every 500 ms.
//! - A subscriber connects once the publisher's registration names the port, and tcp_pubsub gives a connection
//!   messages only after its handshake: what the publisher sends before that does not reach this subscriber
//!   (the same holds between eCAL processes).
//! - Counts: [`crate::stats::TcpCounts`], in `Node::snapshot().tcp`.

#[doc(hidden)]
pub mod frame;
#[doc(hidden)]
pub mod stream;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};

use crate::config::{Config, TcpConfig};
use crate::registration::{Layer, LayerKind, LayerPar, ProtectedTopics, RemoteTopic};
use crate::sample::{Payload, Sample};
use crate::stats::{TcpCounts, Via};
use crate::sync::lock;
use crate::transport::{
    Inbox, IoSource, LayerReader, LayerReaderFactory, LayerWriteError, LayerWriter, LayerWriterFactory, SampleMeta,
};
use crate::types::TypeInfo;

use stream::{Event, StreamDecoder};

/// Connections one publisher serves at most; further ones are closed at once.
const MAX_SESSIONS_PER_PUBLISHER: usize = 256;
/// Bytes a publisher reads from a subscriber before the handshake must be complete.
const MAX_SESSION_INPUT: usize = 4096;
/// Bytes one connection may read per I/O-thread turn before the others get theirs.
const READ_BUDGET: usize = 8 << 20;
/// Reconnect backoff, per connection and per publisher address.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A connection waiting for another attempt to its address to end looks again this much later.
const PROBE_WAIT: Duration = Duration::from_millis(20);
/// Deadlines are checked at most this often.
const SWEEP_PERIOD: Duration = Duration::from_millis(20);
/// Addresses no connection uses any more are forgotten at most this often.
const ADDRESS_CLEANUP_PERIOD: Duration = Duration::from_secs(1);
/// A subscriber does not connect to a lower port (eCAL's publishers listen on ephemeral ports).
const MIN_PUBLISHER_PORT: u16 = 1024;
/// TCP keepalive of a publisher's connections: a subscriber whose host vanished (no reset ever comes) is noticed
/// after about 10 + 3 × 2 s, even on a silent topic, and its place freed.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_PROBES: u32 = 3;

/// Process-wide counters of one runtime's TCP layer (see [`TcpCounts`] for their meaning; drops also go to the
/// publisher's or subscriber's count).
#[derive(Debug, Default)]
struct Counters {
    sessions: AtomicU64,
    accepted: AtomicU64,
    admitted: AtomicU64,
    refused_process_cap: AtomicU64,
    refused_source_cap: AtomicU64,
    refused_unannounced: AtomicU64,
    handshake_timeouts: AtomicU64,
    revoked: AtomicU64,
    stalled: AtomicU64,
    queued: AtomicU64,
    send_drops: AtomicU64,
    connections: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    connect_timeouts: AtomicU64,
    connects_deferred: AtomicU64,
    bad_ports: AtomicU64,
    protocol_errors: AtomicU64,
    delivered: AtomicU64,
    too_large: AtomicU64,
    decode_errors: AtomicU64,
    lost: AtomicU64,
    out_of_order: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    fn counts(&self) -> TcpCounts {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TcpCounts {
            sessions: g(&self.sessions),
            accepted: g(&self.accepted),
            admitted: g(&self.admitted),
            refused_process_cap: g(&self.refused_process_cap),
            refused_source_cap: g(&self.refused_source_cap),
            refused_unannounced: g(&self.refused_unannounced),
            handshake_timeouts: g(&self.handshake_timeouts),
            revoked: g(&self.revoked),
            stalled: g(&self.stalled),
            queued: g(&self.queued),
            send_drops: g(&self.send_drops),
            connections: g(&self.connections),
            connects: g(&self.connects),
            connect_failures: g(&self.connect_failures),
            connect_timeouts: g(&self.connect_timeouts),
            connects_deferred: g(&self.connects_deferred),
            bad_ports: g(&self.bad_ports),
            protocol_errors: g(&self.protocol_errors),
            delivered: g(&self.delivered),
            too_large: g(&self.too_large),
            decode_errors: g(&self.decode_errors),
            lost: g(&self.lost),
            out_of_order: g(&self.out_of_order),
        }
    }
}

/// State shared by the factories, writers, readers and the I/O thread's source of one runtime.
struct Shared {
    cfg: TcpConfig,
    pub_enabled: bool,
    sub_enabled: bool,
    /// Local mode: listeners on the loopback interface only.
    local_only: bool,
    /// This process's host name (subscribers registered under it are on this host).
    host_name: String,
    /// `[shoal_auth]`: the protected topics, whose places are authenticated subscribers only.
    protection: Protection,
    /// Servers started since the I/O thread last looked (their listeners still to be registered).
    new_servers: Mutex<Vec<Arc<Server>>>,
    /// Subscriber connections created since the I/O thread last looked.
    new_clients: Mutex<Vec<Arc<ClientShared>>>,
    counters: Counters,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ecal_tcp::Shared")
            .field("pub_enabled", &self.pub_enabled)
            .field("sub_enabled", &self.sub_enabled)
            .field("local_only", &self.local_only)
            .finish_non_exhaustive()
    }
}

/// The TCP layer of one runtime: hands out the writer and reader factories, which share its state.
#[derive(Debug, Clone)]
pub(crate) struct TcpLayer {
    shared: Arc<Shared>,
}

impl TcpLayer {
    /// The layer for a runtime with this configuration on host `host_name`; opens no socket yet.
    pub(crate) fn new(config: &Config, host_name: &str) -> TcpLayer {
        let protection = match (&config.auth.key, ProtectedTopics::new(&config.auth.protected_topics)) {
            (None, _) => Protection::Off,
            (Some(_), Ok(p)) => Protection::Topics(p),
            // The registrar refuses to start with a pattern that does not compile; should one get here anyway,
            // every topic is protected (the strict reading).
            (Some(_), Err(_)) => Protection::All,
        };
        TcpLayer {
            shared: Arc::new(Shared {
                cfg: config.tcp.clone(),
                pub_enabled: config.layers.pub_tcp,
                sub_enabled: config.layers.sub_tcp,
                local_only: !config.network.enabled,
                host_name: host_name.to_string(),
                protection,
                new_servers: Mutex::new(Vec::new()),
                new_clients: Mutex::new(Vec::new()),
                counters: Counters::default(),
            }),
        }
    }

    /// The publisher-side factory (creates writers only when `[publisher] use_tcp` is on).
    pub(crate) fn writer_factory(&self) -> TcpWriterFactory {
        TcpWriterFactory { shared: Arc::clone(&self.shared) }
    }

    /// The subscriber-side factory (connects only when `[subscriber] tcp_rec_enabled` is on).
    pub(crate) fn reader_factory(&self) -> TcpReaderFactory {
        TcpReaderFactory { shared: Arc::clone(&self.shared) }
    }

    /// The layer's counters so far.
    pub(crate) fn counts(&self) -> TcpCounts {
        self.shared.counters.counts()
    }
}

/// Which topics admit authenticated subscribers only (`[shoal_auth]`).
#[derive(Debug)]
enum Protection {
    /// No key: none.
    Off,
    /// A key and a pattern that does not compile: all.
    All,
    /// A key: those of `protected_topics`.
    Topics(ProtectedTopics),
}

impl Protection {
    fn protects(&self, topic: &str) -> bool {
        match self {
            Protection::Off => false,
            Protection::All => true,
            Protection::Topics(p) => p.contains(topic),
        }
    }
}

/// Where a connection may come from, for admission (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Origin {
    /// A process of this host.
    ThisHost,
    /// This address.
    Addr(IpAddr),
}

/// The place a matched subscriber makes for a connection: this host for one registered from a loopback address or
/// under this host's name, else the address its registration came from; `None` without a known source.
fn subscriber_origin(r: &RemoteTopic, host_name: &str) -> Option<Origin> {
    if r.source.is_some_and(|ip| ip.is_loopback()) || r.key.host_name == host_name {
        return Some(Origin::ThisHost);
    }
    r.source.map(|ip| Origin::Addr(ip.to_canonical()))
}

// ---------------------------------------------------------------------------------------------
// Publisher side

/// One publisher's server: its listener until the I/O thread takes it, and its subscriber connections.
struct Server {
    topic: String,
    port: u16,
    listener: Mutex<Option<std::net::TcpListener>>,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// One place per subscriber that registration announced (module docs), set by the publisher.
    places: Mutex<Vec<Origin>>,
    /// Connections admitted per place kind (the I/O thread's bookkeeping).
    admitted: Mutex<HashMap<Origin, usize>>,
    /// Messages that were queued for connections closed as stalled, for the publisher's drop count.
    late_drops: AtomicU64,
    /// Set when the publisher goes: the I/O thread closes the listener and the connections.
    closed: AtomicBool,
}

impl Server {
    /// Takes a free place for a connection from `peer` (also from this host when `this_host`), if any.
    fn admit(&self, peer: IpAddr, this_host: bool) -> Option<Origin> {
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
    fn release(&self, origin: Origin) {
        let mut admitted = lock(&self.admitted);
        if let Some(n) = admitted.get_mut(&origin) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                admitted.remove(&origin);
            }
        }
    }

    /// Place kinds held by more connections than registration offers now, and by how many.
    fn over_admitted(&self) -> Vec<(Origin, usize)> {
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
struct Session {
    state: Mutex<SessionState>,
    /// Signalled when the queue got room or the connection died (for `send_timeout_ms`).
    room: Condvar,
    /// The subscriber's address (an IPv4-mapped address as the IPv4 one).
    peer: SocketAddr,
    /// The connection comes from this host: its peer address is a loopback one or its own local address.
    this_host: bool,
    accepted_at: Instant,
}

struct SessionState {
    stream: TcpStream,
    /// Bytes received from the subscriber not yet parsed (its handshake).
    input: Vec<u8>,
    /// The subscriber sent its handshake.
    handshaken: bool,
    /// Admitted (the place it holds) and its handshake answered: messages go to this connection.
    admitted: Option<Origin>,
    /// Frames to write; the front one from `front_off` on.
    queue: VecDeque<Arc<Vec<u8>>>,
    front_off: usize,
    /// Bytes in `queue` (whole frames).
    queued: usize,
    /// When the queue last became non-empty or lost bytes to the socket (for `stall_timeout_ms`).
    progress_at: Instant,
    /// A write or read failed; the I/O thread removes the connection.
    dead: bool,
}

impl SessionState {
    fn ready(&self) -> bool {
        self.admitted.is_some()
    }

    /// Queues `frame` (the rest of a message, or a whole one).
    fn push(&mut self, frame: Arc<Vec<u8>>) {
        if self.queue.is_empty() {
            self.progress_at = Instant::now();
        }
        self.queued += frame.len();
        self.queue.push_back(frame);
    }

    /// Writes queued frames until the socket would block.
    fn flush(&mut self) -> io::Result<()> {
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
                        self.queue.pop_front();
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
    fn write_direct(&mut self, head: &[u8], payload: &[u8]) -> io::Result<usize> {
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

    /// Whether a frame of `len` bytes fits the queue bound (an empty queue takes any frame).
    fn has_room(&self, len: usize, cap: usize) -> bool {
        self.queue.is_empty() || self.queued + len <= cap
    }

    /// Messages queued and not completely written (the front one may be partly out).
    fn queued_messages(&self) -> u64 {
        self.queue.len() as u64
    }
}

/// Creates a [`LayerWriter`] per publisher.
#[derive(Debug)]
pub(crate) struct TcpWriterFactory {
    shared: Arc<Shared>,
}

impl LayerWriterFactory for TcpWriterFactory {
    fn create(&self, publisher_id: u64, topic: &str, _type_info: &TypeInfo) -> Option<Box<dyn LayerWriter>> {
        if !self.shared.pub_enabled {
            return None;
        }
        Some(Box::new(TcpWriter {
            protected: self.shared.protection.protects(topic),
            shared: Arc::clone(&self.shared),
            publisher_id,
            id_str: publisher_id.to_string(),
            topic: topic.to_string(),
            server: None,
            start_failed: false,
            targets: 0,
            places: Vec::new(),
        }))
    }
}

/// The TCP writer of one publisher.
struct TcpWriter {
    shared: Arc<Shared>,
    publisher_id: u64,
    id_str: String,
    topic: String,
    /// `[shoal_auth]` protects the topic: only authenticated subscribers make places.
    protected: bool,
    server: Option<Arc<Server>>,
    /// The listener could not be opened (logged once; the layer stays off for this publisher).
    start_failed: bool,
    targets: usize,
    /// The places of the matched subscribers (copied to the server when it starts).
    places: Vec<Origin>,
}

impl std::fmt::Debug for TcpWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpWriter")
            .field("publisher_id", &self.publisher_id)
            .field("topic", &self.topic)
            .field("port", &self.server.as_ref().map(|s| s.port))
            .field("targets", &self.targets)
            .field("places", &self.places.len())
            .finish_non_exhaustive()
    }
}

impl Drop for TcpWriter {
    fn drop(&mut self) {
        if let Some(s) = &self.server {
            s.closed.store(true, Ordering::Release);
            for session in lock(&s.sessions).iter() {
                session.room.notify_all();
            }
        }
    }
}

/// Binds the listener of a publisher: in local mode on the loopback interface ([`bind_loopback`]); else `[::]:0`
/// where IPv6 works (dual stack), or `0.0.0.0:0`.
fn bind_listener(local_only: bool) -> io::Result<std::net::TcpListener> {
    let l = if local_only {
        bind_loopback()?
    } else {
        std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
            .or_else(|_| std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))?
    };
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A listener reachable from this host only: the wildcard address (dual stack where IPv6 works) bound to the
/// loopback interface (`SO_BINDTODEVICE lo`), so that every loopback address (eCAL subscribers connect to what the
/// publisher's host name resolves to, often 127.0.1.1) reaches it and no other interface does; where the option is
/// refused, `127.0.0.1` alone.
fn bind_loopback() -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let on_lo = |domain: Domain, addr: SocketAddr| -> io::Result<Socket> {
        let s = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        if domain == Domain::IPV6 {
            s.set_only_v6(false)?;
        }
        s.set_reuse_address(true)?;
        s.bind_device(Some(b"lo"))?;
        s.bind(&addr.into())?;
        s.listen(128)?;
        Ok(s)
    };
    let socket = on_lo(Domain::IPV6, SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)))
        .or_else(|_| on_lo(Domain::IPV4, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))));
    match socket {
        Ok(s) => Ok(s.into()),
        Err(e) => {
            tracing::debug!("TCP listener: cannot bind to the loopback interface ({e}); listening on 127.0.0.1 only");
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        }
    }
}

impl TcpWriter {
    fn start(&mut self) {
        match bind_listener(self.shared.local_only).and_then(|l| Ok((l.local_addr()?.port(), l))) {
            Ok((port, l)) => {
                let server = Arc::new(Server {
                    topic: self.topic.clone(),
                    port,
                    listener: Mutex::new(Some(l)),
                    sessions: Mutex::new(Vec::new()),
                    places: Mutex::new(self.places.clone()),
                    admitted: Mutex::new(HashMap::new()),
                    late_drops: AtomicU64::new(0),
                    closed: AtomicBool::new(false),
                });
                lock(&self.shared.new_servers).push(Arc::clone(&server));
                tracing::debug!("topic {}: TCP layer started, listening on port {port}", self.topic);
                self.server = Some(server);
            }
            Err(e) => {
                self.start_failed = true;
                tracing::warn!("topic {}: cannot open the TCP layer's listener, no TCP for it: {e}", self.topic);
            }
        }
    }

    /// Hands one message (`head` then `payload`) to one connection, waiting for room up to `deadline` if set;
    /// false when it was dropped. With nothing queued before it, the frame is written at once from this thread
    /// (one `writev`, as far as the socket takes it) and only the unwritten rest is queued; behind queued frames
    /// it is queued whole, as `whole` (built once per message, on first need).
    fn enqueue(
        &self,
        session: &Session,
        head: &[u8],
        payload: &[u8],
        whole: &mut Option<Arc<Vec<u8>>>,
        deadline: Option<Instant>,
    ) -> bool {
        let cap = self.shared.cfg.send_queue_bytes;
        let len = head.len() + payload.len();
        let mut st = lock(&session.state);
        if st.dead || !st.ready() {
            // Not admitted yet (handshake pending) or going: not a subscriber of this message, as in tcp_pubsub.
            return true;
        }
        while !st.has_room(len, cap) {
            // Room may have come since the I/O thread's last turn.
            if let Err(e) = st.flush() {
                st.dead = true;
                tracing::debug!("topic {}: TCP subscriber {} lost: {e}", self.topic, session.peer);
                return true;
            }
            if st.has_room(len, cap) {
                break;
            }
            let Some(left) = deadline.and_then(|d| d.checked_duration_since(Instant::now())) else {
                return false;
            };
            st = session.room.wait_timeout(st, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
            if st.dead {
                return true;
            }
        }
        bump(&self.shared.counters.queued);
        let result = if st.queue.is_empty() {
            st.write_direct(head, payload).map(|n| {
                if n < len {
                    let rest = if n < head.len() {
                        let mut rest = Vec::with_capacity(len - n);
                        rest.extend_from_slice(&head[n..]);
                        rest.extend_from_slice(payload);
                        rest
                    } else {
                        payload[n - head.len()..].to_vec()
                    };
                    st.push(Arc::new(rest));
                }
            })
        } else {
            let frame = whole.get_or_insert_with(|| {
                let mut f = Vec::with_capacity(len);
                f.extend_from_slice(head);
                f.extend_from_slice(payload);
                Arc::new(f)
            });
            st.push(Arc::clone(frame));
            st.flush()
        };
        if let Err(e) = result {
            st.dead = true;
            tracing::debug!("topic {}: TCP subscriber {} lost: {e}", self.topic, session.peer);
        }
        true
    }
}

impl LayerWriter for TcpWriter {
    fn kind(&self) -> LayerKind {
        LayerKind::Tcp
    }

    fn accepts(&self, remote: &RemoteTopic, _same_host: bool) -> bool {
        !self.start_failed && remote.layers.iter().any(|l| l.kind == LayerKind::Tcp && l.is_enabled())
    }

    fn set_peers(&mut self, peers: &[&RemoteTopic]) {
        self.places = peers
            .iter()
            .filter(|r| !self.protected || r.authenticated)
            .filter_map(|r| subscriber_origin(r, &self.shared.host_name))
            .collect();
        if let Some(server) = &self.server {
            *lock(&server.places) = self.places.clone();
        }
    }

    fn set_targets(&mut self, targets: &[&RemoteTopic]) {
        if !targets.is_empty() && self.server.is_none() && !self.start_failed {
            self.start();
        }
        self.targets = targets.len();
    }

    fn advert(&self) -> Option<Layer> {
        let s = self.server.as_ref()?;
        Some(Layer::new(LayerKind::Tcp, true, self.targets > 0, LayerPar::Tcp { port: i32::from(s.port) }))
    }

    fn write(&mut self, payload: &[u8], meta: &SampleMeta) -> Result<(), LayerWriteError> {
        let Some(server) = &self.server else { return Ok(()) };
        let sessions: Vec<Arc<Session>> = lock(&server.sessions).clone();
        if sessions.is_empty() {
            return Ok(());
        }
        let head = frame::encode_head(
            &self.topic,
            &self.id_str,
            self.publisher_id,
            meta.clock,
            meta.send_time_us,
            payload.len(),
        )
        .map_err(|e| LayerWriteError::Failed { layer: LayerKind::Tcp, message: e.to_string() })?;
        let mut whole = None;
        let timeout = self.shared.cfg.send_timeout_ms;
        let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(u64::from(timeout)));
        let mut dropped = 0u64;
        for s in &sessions {
            if !self.enqueue(s, &head, payload, &mut whole, deadline) {
                dropped += 1;
            }
        }
        if dropped == 0 {
            return Ok(());
        }
        self.shared.counters.send_drops.fetch_add(dropped, Ordering::Relaxed);
        Err(LayerWriteError::Failed {
            layer: LayerKind::Tcp,
            message: format!(
                "message {} dropped for {dropped} of {} subscriber connections: send queue full",
                meta.clock,
                sessions.len()
            ),
        })
    }

    fn take_late_drops(&mut self) -> u64 {
        self.server.as_ref().map_or(0, |s| s.late_drops.swap(0, Ordering::Relaxed))
    }
}

// ---------------------------------------------------------------------------------------------
// Subscriber side

/// One subscriber's connection to one publisher, shared by its [`LayerReader`] and the I/O thread.
struct ClientShared {
    topic: Arc<str>,
    publisher_id: u64,
    host_name: String,
    /// The publisher is on this host (reached on loopback when its registration's source is unknown).
    same_host: bool,
    /// Where the publisher's registration last came from (updated when it re-registers from elsewhere; used at
    /// the next connection attempt).
    source: Mutex<Option<IpAddr>>,
    /// The announced port (updated when the publisher re-registers with another one).
    port: AtomicU32,
    inbox: Arc<dyn Inbox>,
    type_info: Arc<TypeInfo>,
    /// Set when the subscriber or the publisher goes: the I/O thread closes the connection.
    closed: AtomicBool,
}

/// Creates the subscriber-side connections.
#[derive(Debug)]
pub(crate) struct TcpReaderFactory {
    shared: Arc<Shared>,
}

/// The announced TCP port of a publisher, if any.
fn announced_port(remote: &RemoteTopic) -> Option<u16> {
    remote.layers.iter().find_map(|l| match (&l.kind, &l.par) {
        (LayerKind::Tcp, LayerPar::Tcp { port }) => u16::try_from(*port).ok().filter(|p| *p != 0),
        _ => None,
    })
}

impl LayerReaderFactory for TcpReaderFactory {
    fn subscriber_advert(&self) -> Option<Layer> {
        self.shared.sub_enabled.then(|| Layer::new(LayerKind::Tcp, true, false, LayerPar::Tcp { port: 0 }))
    }

    fn connect(
        &self,
        topic: &str,
        inbox: Arc<dyn Inbox>,
        remote: &RemoteTopic,
        same_host: bool,
    ) -> Option<Box<dyn LayerReader>> {
        if !self.shared.sub_enabled {
            return None;
        }
        let port = announced_port(remote)?;
        let client = Arc::new(ClientShared {
            topic: Arc::from(topic),
            publisher_id: remote.key.entity_id,
            host_name: remote.key.host_name.clone(),
            same_host,
            source: Mutex::new(remote.source),
            port: AtomicU32::new(u32::from(port)),
            inbox,
            type_info: Arc::new(remote.type_info.clone()),
            closed: AtomicBool::new(false),
        });
        tracing::debug!(
            "topic {topic}: TCP connection to publisher {} of {} at {:?}:{port}",
            remote.key.entity_id,
            remote.key.host_name,
            remote.source
        );
        lock(&self.shared.new_clients).push(Arc::clone(&client));
        Some(Box::new(TcpReader { client }))
    }

    fn io_source(&self) -> Option<Box<dyn IoSource>> {
        Some(Box::new(TcpSource {
            shared: Arc::clone(&self.shared),
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
        }))
    }
}

/// The subscriber's handle of one connection; dropping it closes the connection.
struct TcpReader {
    client: Arc<ClientShared>,
}

impl std::fmt::Debug for TcpReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpReader")
            .field("topic", &self.client.topic)
            .field("publisher_id", &self.client.publisher_id)
            .field("host", &self.client.host_name)
            .field("port", &self.client.port.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for TcpReader {
    fn drop(&mut self) {
        self.client.closed.store(true, Ordering::Release);
    }
}

impl LayerReader for TcpReader {
    fn update(&mut self, remote: &RemoteTopic) {
        if let Some(port) = announced_port(remote) {
            self.client.port.store(u32::from(port), Ordering::Release);
        }
        if remote.source.is_some() {
            *lock(&self.client.source) = remote.source;
        }
    }
}

/// Where a subscriber connects to its publisher, without asking a name resolver: the address the publisher's
/// registration came from; without one, its host name if that is an address literal, or loopback for a publisher
/// on this host.
fn publisher_address(c: &ClientShared) -> Option<IpAddr> {
    if let Some(ip) = *lock(&c.source) {
        return Some(ip.to_canonical());
    }
    if let Ok(ip) = c.host_name.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    c.same_host.then_some(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// The I/O thread's side of a subscriber connection.
struct Client {
    shared: Arc<ClientShared>,
    stream: Option<TcpStream>,
    /// The non-blocking connect completed.
    connected: bool,
    /// The publisher answered the handshake on the current connection.
    answered: bool,
    /// Set by [`Client::service`] when the publisher has just answered (the source updates its address state).
    just_answered: bool,
    /// The address of the current attempt while it counts as one in flight to that address.
    attempt_addr: Option<IpAddr>,
    /// When the current attempt started.
    attempt_started: Instant,
    /// The address of the last attempt (which address state this connection uses).
    addr: Option<IpAddr>,
    /// The port of the current or last attempt.
    port: u16,
    /// A port below 1024 already counted for this connection.
    bad_port: Option<u16>,
    /// Handshake bytes still to write.
    out: Vec<u8>,
    decoder: StreamDecoder,
    backoff: Duration,
    next_attempt: Instant,
}

/// What a subscriber knows of one publisher address: whether it answered a tcp_pubsub handshake since its last
/// failure, and when it may be tried again (module docs).
#[derive(Debug)]
struct AddressState {
    good: bool,
    in_flight: u32,
    next_probe: Instant,
    backoff: Duration,
}

impl AddressState {
    fn new(now: Instant) -> AddressState {
        AddressState { good: false, in_flight: 0, next_probe: now, backoff: BACKOFF_MIN }
    }

    fn failed(&mut self, now: Instant) {
        self.good = false;
        self.next_probe = now + self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }
}

enum Entry {
    Listener { server: Arc<Server>, listener: TcpListener },
    Session { server: Arc<Server>, session: Arc<Session> },
    Client(Box<Client>),
}

/// Why the I/O thread closes a publisher's connection.
#[derive(Debug, Clone, Copy)]
enum SessionEnd {
    HandshakeTimeout,
    Unannounced,
    Revoked,
    Stalled,
}

/// The TCP layer's sockets on the I/O thread.
struct TcpSource {
    shared: Arc<Shared>,
    first_token: usize,
    token_count: usize,
    next_token: usize,
    entries: HashMap<Token, Entry>,
    /// Connections that stopped reading at their budget; continued on the next turn.
    pending: HashSet<Token>,
    scratch: Vec<u8>,
    /// Publisher connections held, in all and per peer address.
    sessions: usize,
    per_source: HashMap<IpAddr, usize>,
    /// Subscriber connections with a socket (connected or connecting).
    connections: usize,
    /// Publisher addresses of the subscriber connections.
    addresses: HashMap<IpAddr, AddressState>,
    next_sweep: Option<Instant>,
    next_address_cleanup: Option<Instant>,
}

/// What servicing a connection found.
enum Outcome {
    /// Keep it; true when it has more to read (budget reached).
    Keep(bool),
    /// Close it (the reason is logged by the caller).
    Close(String),
}

impl TcpSource {
    fn alloc_token(&mut self) -> Option<Token> {
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

    fn set_session_gauges(&self) {
        let c = &self.shared.counters;
        c.sessions.store(self.sessions as u64, Ordering::Relaxed);
        c.connections.store(self.connections as u64, Ordering::Relaxed);
    }

    fn remove(&mut self, registry: Option<&Registry>, token: Token) {
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

    fn accept(&mut self, registry: &Registry, token: Token, now: Instant) {
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
    fn try_admit(counters: &Counters, server: &Server, session: &Session, st: &mut SessionState) -> bool {
        let Some(origin) = server.admit(session.peer.ip(), session.this_host) else { return false };
        st.admitted = Some(origin);
        st.push(Arc::new(frame::handshake().to_vec()));
        bump(&counters.admitted);
        tracing::debug!("topic {}: TCP subscriber {} admitted ({origin:?})", server.topic, session.peer);
        true
    }

    /// Reads the subscriber's handshake (and anything else it sends, bounded), admits and answers it, flushes the
    /// queue.
    fn service_session(counters: &Counters, server: &Server, session: &Session, scratch: &mut [u8]) -> Outcome {
        let mut st = lock(&session.state);
        if st.dead {
            return Outcome::Close("connection failed on send".into());
        }
        loop {
            match (&st.stream).read(scratch) {
                Ok(0) => return Outcome::Close("closed by the subscriber".into()),
                Ok(n) => {
                    if st.input.len() + n > MAX_SESSION_INPUT {
                        return Outcome::Close("subscriber sent more than a handshake".into());
                    }
                    st.input.extend_from_slice(&scratch[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Outcome::Close(e.to_string()),
            }
        }
        match frame::take_subscriber_frames(&mut st.input, MAX_SESSION_INPUT) {
            Err(e) => return Outcome::Close(e.to_string()),
            Ok(0) => {}
            Ok(_) => st.handshaken = true,
        }
        if st.handshaken && !st.ready() {
            Self::try_admit(counters, server, session, &mut st);
        }
        let flushed = st.flush();
        drop(st);
        session.room.notify_all();
        match flushed {
            Ok(()) => Outcome::Keep(false),
            Err(e) => Outcome::Close(e.to_string()),
        }
    }

    /// Starts a connection attempt to [`publisher_address`] and connects without blocking, within the bounds of the
    /// module docs (port, `max_connections`, one attempt at a time to an address that has not answered).
    fn try_connect(&mut self, registry: &Registry, token: Token, now: Instant) {
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
                c.out = frame::handshake().to_vec();
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
    fn answered(&mut self, token: Token) {
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
    fn disconnect(&mut self, registry: Option<&Registry>, token: Token, why: &str, now: Instant) {
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

    /// Closes the publisher's connection under `token` for `end` and counts it.
    fn end_session(&mut self, registry: &Registry, token: Token, end: SessionEnd) {
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

    /// Checks the deadlines: handshakes and admissions of publishers' connections, stalled ones, places that went,
    /// subscribers' attempts that were not answered; forgets addresses no connection uses.
    fn sweep(&mut self, registry: &Registry, now: Instant) {
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
            self.disconnect(Some(registry), t, "the publisher did not answer the handshake in time", now);
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

impl Client {
    /// Completes the connect, writes the handshake, reads and delivers frames (up to [`READ_BUDGET`] bytes).
    fn service(&mut self, shared: &Shared, scratch: &mut [u8]) -> Outcome {
        let Some(stream) = self.stream.take() else { return Outcome::Keep(false) };
        let outcome = self.service_stream(&stream, shared, scratch);
        self.stream = Some(stream);
        outcome
    }

    fn service_stream(&mut self, stream: &TcpStream, shared: &Shared, scratch: &mut [u8]) -> Outcome {
        let mut stream = stream;
        if !self.connected {
            if let Ok(Some(e)) | Err(e) = stream.take_error() {
                return Outcome::Close(format!("connect: {e}"));
            }
            match stream.peer_addr() {
                Ok(_) => self.connected = true,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Outcome::Keep(false),
                Err(e) => return Outcome::Close(format!("connect: {e}")),
            }
        }
        while !self.out.is_empty() {
            match stream.write(&self.out) {
                Ok(0) => return Outcome::Close("handshake not written".into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Outcome::Close(e.to_string()),
            }
        }
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                return Outcome::Keep(true);
            }
            // Large remainders of a message are read in place, everything else through the scratch buffer.
            let (read, direct) = match self.decoder.payload_spare(scratch.len()) {
                Some((buf, left)) => (crate::sys::recv_into_spare(stream.as_fd(), buf, left), true),
                None => (stream.read(scratch), false),
            };
            let n = match read {
                Ok(0) => return Outcome::Close("closed by the publisher".into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Keep(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Outcome::Close(e.to_string()),
            };
            budget = budget.saturating_sub(n);
            let bytes = if direct { &[][..] } else { &scratch[..n] };
            if let Err(e) = self.feed(shared, bytes) {
                bump(&shared.counters.protocol_errors);
                return Outcome::Close(e.to_string());
            }
        }
    }

    /// Feeds received bytes through the connection's decoder and acts on what it reports.
    fn feed(&mut self, shared: &Shared, bytes: &[u8]) -> Result<(), stream::StreamError> {
        let Client { decoder, shared: cs, answered, just_answered, .. } = self;
        let counters = &shared.counters;
        let mut delivered = false;
        let result = decoder.feed(bytes, &mut |event| match event {
            Event::Handshake => {
                if !*answered {
                    *answered = true;
                    *just_answered = true;
                }
            }
            Event::Message(m) => {
                if cs.inbox.reads_ring_of(m.publisher_id) {
                    return;
                }
                cs.inbox.push_unwoken(Sample {
                    payload: Payload::Owned(m.payload),
                    send_time_ns: m.time_us.saturating_mul(1000),
                    via: Via::Tcp,
                    clock: m.clock,
                    publisher_id: m.publisher_id,
                    type_info: Arc::clone(&cs.type_info),
                    topic: Arc::clone(&cs.topic),
                });
                delivered = true;
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
            self.entries.insert(
                t,
                Entry::Client(Box::new(Client {
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
                    decoder: StreamDecoder::new(self.shared.cfg.max_message_bytes),
                    backoff: BACKOFF_MIN,
                    next_attempt: now,
                })),
            );
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
            self.disconnect(Some(registry), t, "the publisher announced another port", now);
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
