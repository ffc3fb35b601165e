//! eCAL's TCP layer (`transport_layer` type 5, tcp_pubsub 1.x framing as eCAL 6.1.1 speaks it).
//!
//! - Publisher side ([`TcpLayer::writer_factory`]): a publisher's writer starts when its first subscriber that has
//!   TCP enabled is assigned to it (eCAL's priority lists, `[publisher] priority_*`); it then listens on an
//!   ephemeral port (`::`, or `0.0.0.0` without IPv6) and announces it in `layer_par_tcp.port`. The I/O thread
//!   accepts connections, answers the subscriber's protocol handshake, and flushes the send queues when the
//!   sockets become writable. `send()` encodes a message's header once ([`frame`]) and hands the message to every
//!   connection that finished its handshake: to a connection with nothing queued, header and payload are written
//!   at once with one `writev` from the publisher's thread, as far as the socket takes them, without blocking, and
//!   only the unwritten rest is queued; behind queued frames the whole frame (copied once per message) is queued.
//!   The queue is bounded in bytes by `[shoal_tcp] send_queue`. A message that does not fit a connection's queue
//!   is dropped whole for that connection and counted (default), or the publisher waits up to
//!   `[shoal_tcp] send_timeout_ms` for room. A frame once begun
//!   is always completed, so a subscriber never sees a torn frame.
//! - Subscriber side ([`TcpLayer::reader_factory`], only with `[subscriber] tcp_rec_enabled`): a connection per
//!   subscriber and publisher, to the announced port at the address the publisher's registration came from
//!   ([`RemoteTopic::source`]: its address in this network namespace, whatever its host name resolves to). eCAL
//!   resolves the host name (as is, then `host_name.local`); shoal asks no resolver, so nothing waits on
//!   `getaddrinfo` (a slow DNS server would stall the I/O thread for seconds). Without a source (an entry not made
//!   from a datagram) a host name that is an address literal is used, and a publisher on this host is reached on
//!   loopback. It is driven by the I/O thread: non-blocking connect, handshake, frames decoded as they arrive. A frame larger than
//!   `[shoal_tcp] max_message` is skipped without being stored, and counted; so are frames that do not decode and
//!   gaps in the publisher's clock (messages it dropped for this connection, or sent while it was down). A lost
//!   connection is retried with a backoff from 100 ms doubling to 2 s until the publisher's registration goes.
//! - All sockets are registered with the I/O thread's poll (one token per listener and connection); the layer
//!   starts no thread and makes no blocking call on the I/O thread.
//! - A subscriber connects once the publisher's registration names the port, and tcp_pubsub gives a connection
//!   messages only after its handshake: what the publisher sends before that does not reach this subscriber
//!   (the same holds between eCAL processes).

pub(crate) mod frame;
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
use crate::registration::{Layer, LayerKind, LayerPar, RemoteTopic};
use crate::sample::{Payload, Sample};
use crate::stats::Via;
use crate::sync::lock;
use crate::transport::{
    Inbox, IoSource, LayerReader, LayerReaderFactory, LayerWriteError, LayerWriter, LayerWriterFactory, SampleMeta,
};
use crate::types::TypeInfo;

/// Connections one publisher serves at most; further ones are closed at once.
const MAX_SESSIONS_PER_PUBLISHER: usize = 256;
/// Bytes a publisher reads from a subscriber before the handshake must be complete.
const MAX_SESSION_INPUT: usize = 4096;
/// Bytes one connection may read per I/O-thread turn before the others get theirs.
const READ_BUDGET: usize = 8 << 20;
/// Reconnect backoff.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A `header_size` above this is not tcp_pubsub (it sends 12).
const MAX_HEADER_SIZE: u16 = 1024;

/// Process-wide counters of one runtime's TCP layer (drops also go to the publisher's or subscriber's count).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Frames handed to a connection, written at once or queued (one per message and connection).
    pub(crate) queued: AtomicU64,
    /// Messages dropped for a connection whose queue was full (after the wait, if configured).
    pub(crate) send_drops: AtomicU64,
    /// Subscriber connections accepted by publishers.
    pub(crate) accepted: AtomicU64,
    /// Connections this process's subscribers established.
    pub(crate) connects: AtomicU64,
    /// Connection attempts that failed (resolution, refused, reset before the handshake).
    pub(crate) connect_failures: AtomicU64,
    /// Messages delivered to subscribers.
    pub(crate) delivered: AtomicU64,
    /// Frames above `max_message`, skipped unread.
    pub(crate) too_large: AtomicU64,
    /// Payload frames that did not decode.
    pub(crate) decode_errors: AtomicU64,
    /// Messages missing from a publisher's clock sequence.
    pub(crate) lost: AtomicU64,
    /// Messages with a clock not above the last one delivered on the connection.
    pub(crate) out_of_order: AtomicU64,
}

impl Counters {
    fn summary(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "queued {}, send drops {}, accepted {}, connects {}, connect failures {}, delivered {}, too large {}, \
             decode errors {}, lost {}, out of order {}",
            g(&self.queued),
            g(&self.send_drops),
            g(&self.accepted),
            g(&self.connects),
            g(&self.connect_failures),
            g(&self.delivered),
            g(&self.too_large),
            g(&self.decode_errors),
            g(&self.lost),
            g(&self.out_of_order)
        )
    }
}

/// State shared by the factories, writers, readers and the I/O thread's source of one runtime.
struct Shared {
    cfg: TcpConfig,
    pub_enabled: bool,
    sub_enabled: bool,
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
            .finish_non_exhaustive()
    }
}

/// The TCP layer of one runtime: hands out the writer and reader factories, which share its state.
#[derive(Debug, Clone)]
pub(crate) struct TcpLayer {
    shared: Arc<Shared>,
}

impl TcpLayer {
    /// The layer for a runtime with this configuration; opens no socket yet.
    pub(crate) fn new(config: &Config) -> TcpLayer {
        TcpLayer {
            shared: Arc::new(Shared {
                cfg: config.tcp.clone(),
                pub_enabled: config.layers.pub_tcp,
                sub_enabled: config.layers.sub_tcp,
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

    #[cfg(test)]
    fn counters(&self) -> &Counters {
        &self.shared.counters
    }
}

// ---------------------------------------------------------------------------------------------
// Publisher side

/// One publisher's server: its listener until the I/O thread takes it, and its subscriber connections.
struct Server {
    topic: String,
    port: u16,
    listener: Mutex<Option<std::net::TcpListener>>,
    sessions: Mutex<Vec<Arc<Session>>>,
    /// Set when the publisher goes: the I/O thread closes the listener and the connections.
    closed: AtomicBool,
}

/// One subscriber connection of a publisher.
struct Session {
    state: Mutex<SessionState>,
    /// Signalled when the queue got room or the connection died (for `send_timeout_ms`).
    room: Condvar,
    peer: SocketAddr,
}

struct SessionState {
    stream: TcpStream,
    /// Bytes received from the subscriber not yet parsed (its handshake).
    input: Vec<u8>,
    /// The handshake arrived and was answered: messages go to this connection.
    ready: bool,
    /// Frames to write; the front one from `front_off` on.
    queue: VecDeque<Arc<Vec<u8>>>,
    front_off: usize,
    /// Bytes in `queue` (whole frames).
    queued: usize,
    /// A write or read failed; the I/O thread removes the connection.
    dead: bool,
}

impl SessionState {
    /// Writes queued frames until the socket would block.
    fn flush(&mut self) -> io::Result<()> {
        while let Some(front) = self.queue.front() {
            match (&self.stream).write(&front[self.front_off..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.front_off += n;
                    if self.front_off == front.len() {
                        self.queued -= front.len();
                        self.front_off = 0;
                        self.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
            shared: Arc::clone(&self.shared),
            publisher_id,
            id_str: publisher_id.to_string(),
            topic: topic.to_string(),
            server: None,
            start_failed: false,
            targets: 0,
        }))
    }
}

/// The TCP writer of one publisher.
struct TcpWriter {
    shared: Arc<Shared>,
    publisher_id: u64,
    id_str: String,
    topic: String,
    server: Option<Arc<Server>>,
    /// The listener could not be opened (logged once; the layer stays off for this publisher).
    start_failed: bool,
    targets: usize,
}

impl std::fmt::Debug for TcpWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpWriter")
            .field("publisher_id", &self.publisher_id)
            .field("topic", &self.topic)
            .field("port", &self.server.as_ref().map(|s| s.port))
            .field("targets", &self.targets)
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

/// Binds the listener of a publisher: `[::]:0` where IPv6 works (dual stack), else `0.0.0.0:0`.
fn bind_listener() -> io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
        .or_else(|_| std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl TcpWriter {
    fn start(&mut self) {
        match bind_listener().and_then(|l| Ok((l.local_addr()?.port(), l))) {
            Ok((port, l)) => {
                let server = Arc::new(Server {
                    topic: self.topic.clone(),
                    port,
                    listener: Mutex::new(Some(l)),
                    sessions: Mutex::new(Vec::new()),
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
        if st.dead || !st.ready {
            // Not connected yet (handshake pending) or going: not a subscriber of this message, as in tcp_pubsub.
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
        self.shared.counters.queued.fetch_add(1, Ordering::Relaxed);
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
                    st.queued += rest.len();
                    st.queue.push_back(Arc::new(rest));
                }
            })
        } else {
            let frame = whole.get_or_insert_with(|| {
                let mut f = Vec::with_capacity(len);
                f.extend_from_slice(head);
                f.extend_from_slice(payload);
                Arc::new(f)
            });
            st.queued += len;
            st.queue.push_back(Arc::clone(frame));
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
        return Some(ip);
    }
    if let Ok(ip) = c.host_name.parse::<IpAddr>() {
        return Some(ip);
    }
    c.same_host.then_some(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Where a connection is in the incoming byte stream.
enum Rx {
    /// Reading the 12 header bytes.
    Header { buf: [u8; frame::HEADER_LEN], got: usize },
    /// Skipping `left` bytes of a longer header, then the data of `header`.
    ExtraHeader { left: usize, header: frame::FrameHeader },
    /// Reading the start of a payload frame's data of `data_size` bytes: magic, length, sample header.
    Head { buf: Vec<u8>, data_size: usize },
    /// Reading a message's payload into its own buffer (`buf.len()` of `m.payload.len()` bytes so far), then
    /// skipping `trailing` bytes of the frame.
    Payload { buf: Vec<u8>, m: frame::Decoded, trailing: usize },
    /// Skipping `left` bytes (a handshake's data, or a frame above `max_message`).
    Skip { left: u64 },
}

impl Rx {
    fn start() -> Rx {
        Rx::Header { buf: [0; frame::HEADER_LEN], got: 0 }
    }

    /// Skipping the `left` bytes left of a frame, then the next header.
    fn after(left: usize) -> Rx {
        if left == 0 { Rx::start() } else { Rx::Skip { left: left as u64 } }
    }
}

/// The I/O thread's side of a subscriber connection.
struct Client {
    shared: Arc<ClientShared>,
    stream: Option<TcpStream>,
    /// The non-blocking connect completed.
    connected: bool,
    /// The port of the current or last attempt.
    port: u16,
    /// Handshake bytes still to write.
    out: Vec<u8>,
    rx: Rx,
    backoff: Duration,
    next_attempt: Instant,
    /// Clock of the last message delivered on this connection.
    last_clock: Option<u64>,
    /// Frames skipped as too large since then (already counted; their clocks fall into the next gap).
    skipped: u64,
}

enum Entry {
    Listener { server: Arc<Server>, listener: TcpListener },
    Session { server: Arc<Server>, session: Arc<Session> },
    Client(Box<Client>),
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
                {
                    let mut st = lock(&session.state);
                    st.dead = true;
                    if let Some(r) = registry {
                        let _ = r.deregister(&mut st.stream);
                    }
                    let _ = st.stream.shutdown(std::net::Shutdown::Both);
                }
                session.room.notify_all();
                lock(&server.sessions).retain(|s| !Arc::ptr_eq(s, &session));
            }
            Entry::Client(mut c) => {
                if let (Some(r), Some(s)) = (registry, c.stream.as_mut()) {
                    let _ = r.deregister(s);
                }
            }
        }
    }

    fn accept(&mut self, registry: &Registry, token: Token) {
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
            if lock(&server.sessions).len() >= MAX_SESSIONS_PER_PUBLISHER {
                tracing::warn!(
                    "topic {}: TCP subscriber {peer} refused: {MAX_SESSIONS_PER_PUBLISHER} connections already",
                    server.topic
                );
                continue;
            }
            let _ = stream.set_nodelay(true);
            let Some(t) = self.alloc_token() else { continue };
            if let Err(e) = registry.register(&mut stream, t, Interest::READABLE | Interest::WRITABLE) {
                tracing::warn!("topic {}: cannot poll TCP subscriber {peer}: {e}", server.topic);
                continue;
            }
            self.shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
            tracing::debug!("topic {}: TCP subscriber {peer} connected", server.topic);
            let session = Arc::new(Session {
                state: Mutex::new(SessionState {
                    stream,
                    input: Vec::new(),
                    ready: false,
                    queue: VecDeque::new(),
                    front_off: 0,
                    queued: 0,
                    dead: false,
                }),
                room: Condvar::new(),
                peer,
            });
            lock(&server.sessions).push(Arc::clone(&session));
            self.entries.insert(t, Entry::Session { server, session });
        }
    }

    /// Reads the subscriber's handshake (and anything else it sends, bounded), answers it, flushes the queue.
    fn service_session(session: &Session, scratch: &mut [u8]) -> Outcome {
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
        // Frames from the subscriber: tcp_pubsub sends only its handshake.
        while st.input.len() >= frame::HEADER_LEN {
            let mut h = [0u8; frame::HEADER_LEN];
            h.copy_from_slice(&st.input[..frame::HEADER_LEN]);
            let Some(header) = frame::parse_header(&h) else {
                return Outcome::Close("invalid frame header from the subscriber".into());
            };
            let Some(total) = usize::try_from(header.data_size)
                .ok()
                .and_then(|d| d.checked_add(usize::from(header.header_size)))
                .filter(|t| *t <= MAX_SESSION_INPUT)
            else {
                return Outcome::Close("oversized frame from the subscriber".into());
            };
            if st.input.len() < total {
                break;
            }
            st.input.drain(..total);
            if header.kind == frame::TYPE_HANDSHAKE && !st.ready {
                st.ready = true;
                let hs = Arc::new(frame::handshake().to_vec());
                st.queued += hs.len();
                st.queue.push_front(hs);
            }
        }
        let flushed = st.flush();
        drop(st);
        session.room.notify_all();
        match flushed {
            Ok(()) => Outcome::Keep(false),
            Err(e) => Outcome::Close(e.to_string()),
        }
    }

    /// Starts a connection attempt to [`publisher_address`] and connects without blocking.
    fn try_connect(&mut self, registry: &Registry, token: Token, now: Instant) {
        let Some(Entry::Client(c)) = self.entries.get_mut(&token) else { return };
        let port = u16::try_from(c.shared.port.load(Ordering::Acquire)).unwrap_or(0);
        c.port = port;
        let result = match publisher_address(&c.shared) {
            None => Err(format!("no address for host {}: its registration's source is unknown", c.shared.host_name)),
            Some(ip) => {
                let addr = SocketAddr::new(ip, port);
                TcpStream::connect(addr).map_err(|e| format!("connect to {addr}: {e}")).and_then(|mut s| {
                    registry
                        .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                        .map_err(|e| format!("cannot poll the connection to {addr}: {e}"))?;
                    Ok(s)
                })
            }
        };
        match result {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                c.stream = Some(s);
                c.connected = false;
                c.out = frame::handshake().to_vec();
                c.rx = Rx::start();
            }
            Err(e) => {
                self.shared.counters.connect_failures.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("topic {}: TCP connection to publisher {}: {e}", c.shared.topic, c.shared.publisher_id);
                c.next_attempt = now + c.backoff;
                c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    /// Drops the connection's socket and schedules the next attempt.
    fn disconnect(&mut self, registry: Option<&Registry>, token: Token, why: &str, now: Instant) {
        let counters = &self.shared.counters;
        self.pending.remove(&token);
        let Some(Entry::Client(c)) = self.entries.get_mut(&token) else { return };
        if let Some(mut s) = c.stream.take() {
            if let Some(r) = registry {
                let _ = r.deregister(&mut s);
            }
            if !c.connected {
                counters.connect_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        tracing::debug!(
            "topic {}: TCP connection to publisher {} ({}:{}) lost: {why}; retry in {:?} ({})",
            c.shared.topic,
            c.shared.publisher_id,
            c.shared.host_name,
            c.port,
            c.backoff,
            counters.summary()
        );
        c.connected = false;
        c.rx = Rx::start();
        c.next_attempt = now + c.backoff;
        c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
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
                Ok(_) => {
                    self.connected = true;
                    self.backoff = BACKOFF_MIN;
                    shared.counters.connects.fetch_add(1, Ordering::Relaxed);
                }
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
            let direct = matches!(&self.rx, Rx::Payload { buf, m, .. } if m.payload.len() - buf.len() >= scratch.len());
            let read = if direct {
                let Rx::Payload { buf, m, .. } = &mut self.rx else { unreachable!("checked above") };
                let left = m.payload.len() - buf.len();
                crate::sys::recv_into_spare(stream.as_fd(), buf, left)
            } else {
                stream.read(scratch)
            };
            let n = match read {
                Ok(0) => return Outcome::Close("closed by the publisher".into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Keep(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Outcome::Close(e.to_string()),
            };
            budget = budget.saturating_sub(n);
            let result = if direct { self.advance(shared, &[]) } else { self.advance(shared, &scratch[..n]) };
            if let Err(why) = result {
                return Outcome::Close(why);
            }
        }
    }

    /// Feeds received bytes through the frame state machine, delivering complete messages.
    fn advance(&mut self, shared: &Shared, mut bytes: &[u8]) -> Result<(), String> {
        loop {
            match &mut self.rx {
                Rx::Header { buf, got } => {
                    let take = (frame::HEADER_LEN - *got).min(bytes.len());
                    buf[*got..*got + take].copy_from_slice(&bytes[..take]);
                    *got += take;
                    bytes = &bytes[take..];
                    if *got < frame::HEADER_LEN {
                        return Ok(());
                    }
                    let header = frame::parse_header(buf)
                        .filter(|h| h.header_size <= MAX_HEADER_SIZE)
                        .ok_or_else(|| "invalid tcp_pubsub header".to_string())?;
                    let extra = usize::from(header.header_size) - frame::HEADER_LEN;
                    self.rx = Rx::ExtraHeader { left: extra, header };
                }
                Rx::ExtraHeader { left, header } => {
                    let take = (*left).min(bytes.len());
                    *left -= take;
                    bytes = &bytes[take..];
                    if *left > 0 {
                        return Ok(());
                    }
                    let header = *header;
                    self.rx = self.begin_data(shared, header);
                }
                Rx::Skip { left } => {
                    let take = usize::try_from(*left).map_or(bytes.len(), |l| l.min(bytes.len()));
                    *left -= take as u64;
                    bytes = &bytes[take..];
                    if *left > 0 {
                        return Ok(());
                    }
                    self.rx = Rx::start();
                }
                Rx::Head { buf, data_size } => {
                    let data_size = *data_size;
                    let take = (frame::head_want(buf, data_size) - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() < frame::head_want(buf, data_size) {
                        if bytes.is_empty() {
                            return Ok(());
                        }
                        continue;
                    }
                    let head = std::mem::take(buf);
                    self.rx = self.begin_payload(shared, &head, data_size);
                }
                Rx::Payload { buf, m, trailing } => {
                    let want = m.payload.len();
                    let take = (want - buf.len()).min(bytes.len());
                    buf.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if buf.len() < want {
                        return Ok(());
                    }
                    let (payload, m, trailing) = (std::mem::take(buf), m.clone(), *trailing);
                    self.rx = Rx::after(trailing);
                    self.deliver(shared, &m, payload);
                }
            }
            if bytes.is_empty() && matches!(self.rx, Rx::Header { got: 0, .. }) {
                return Ok(());
            }
        }
    }

    fn begin_data(&mut self, shared: &Shared, header: frame::FrameHeader) -> Rx {
        if header.kind != frame::TYPE_PAYLOAD {
            // The publisher's handshake (protocol version 0) or a future message type: not for the user.
            return if header.data_size == 0 { Rx::start() } else { Rx::Skip { left: header.data_size } };
        }
        let max = shared.cfg.max_message_bytes;
        match usize::try_from(header.data_size) {
            Ok(0) => Rx::start(),
            Ok(n) if n <= max => Rx::Head { buf: Vec::with_capacity(128), data_size: n },
            _ => {
                shared.counters.too_large.fetch_add(1, Ordering::Relaxed);
                self.count_drops(1);
                self.skipped += 1;
                tracing::debug!(
                    "topic {}: TCP frame of {} bytes from publisher {} above max_message ({max}); skipped",
                    self.shared.topic,
                    header.data_size,
                    self.shared.publisher_id
                );
                Rx::Skip { left: header.data_size }
            }
        }
    }

    /// Decodes the start of a payload frame's data (`head`, of `data_size` bytes in all); the payload is then read
    /// into a buffer of its own, or the rest of the frame skipped if it does not decode.
    fn begin_payload(&mut self, shared: &Shared, head: &[u8], data_size: usize) -> Rx {
        match frame::decode_head(head, data_size) {
            Err(e) => {
                shared.counters.decode_errors.fetch_add(1, Ordering::Relaxed);
                self.count_drops(1);
                self.skipped += 1;
                tracing::debug!("topic {}: TCP message dropped: {e}", self.shared.topic);
                Rx::after(data_size - head.len())
            }
            Ok(m) => {
                let trailing = data_size - m.payload.end;
                if m.payload.is_empty() {
                    self.deliver(shared, &m, Vec::new());
                    return Rx::after(trailing);
                }
                Rx::Payload { buf: Vec::with_capacity(m.payload.len()), m, trailing }
            }
        }
    }

    /// Counts lost messages in the subscriber's drops (the reader itself keeps no separate count).
    fn count_drops(&self, n: u64) {
        self.shared.inbox.count_drops(n);
    }

    /// Delivers a received message (`m` from its header, `payload` its bytes) unless its clock is out of order.
    fn deliver(&mut self, shared: &Shared, m: &frame::Decoded, payload: Vec<u8>) {
        if let Some(last) = self.last_clock {
            if m.clock <= last {
                shared.counters.out_of_order.fetch_add(1, Ordering::Relaxed);
                self.count_drops(1);
                return;
            }
            // Skipped frames were counted when skipped; the rest of the gap never came.
            let gap = m.clock - last - 1;
            let skipped = gap.min(self.skipped);
            let lost = gap - skipped;
            if lost > 0 {
                shared.counters.lost.fetch_add(lost, Ordering::Relaxed);
                self.count_drops(lost);
            }
        }
        self.skipped = 0;
        self.last_clock = Some(m.clock);
        if self.shared.inbox.reads_ring_of(m.publisher_id) {
            return;
        }
        self.shared.inbox.push(Sample {
            payload: Payload::Owned(payload),
            send_time_ns: m.time_us.saturating_mul(1000),
            via: Via::Tcp,
            clock: m.clock,
            publisher_id: m.publisher_id,
            type_info: Arc::clone(&self.shared.type_info),
            topic: Arc::clone(&self.shared.topic),
        });
        shared.counters.delivered.fetch_add(1, Ordering::Relaxed);
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
            self.accept(registry, t);
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
                    port,
                    out: Vec::new(),
                    rx: Rx::start(),
                    backoff: BACKOFF_MIN,
                    next_attempt: now,
                    last_clock: None,
                    skipped: 0,
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
                self.accept(registry, token);
                Outcome::Keep(false)
            }
            Some(Entry::Session { session, .. }) => Self::service_session(session, &mut scratch),
            Some(Entry::Client(c)) => c.service(&self.shared, &mut scratch),
        };
        self.scratch = scratch;
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
