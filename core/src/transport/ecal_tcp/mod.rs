//! eCAL's TCP layer (`transport_layer` type 5, tcp_pubsub 1.x framing as eCAL 6.1.1 speaks it).
//!
//! - Publisher side ([`TcpLayer::writer_factory`]): a publisher's writer starts when its first subscriber that has
//!   TCP enabled is assigned to it (eCAL's priority lists, `[publisher] priority_*`), or at creation for a publisher
//!   with a history for late joiners (shoal subscribers whose live data comes through another layer fetch it here,
//!   `pubsub/history.rs`); it then listens on an ephemeral port and announces it in `layer_par_tcp.port`. In local mode (`[network] network_enabled = false`)
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
//!   other layer) and, for a publisher with a history, the matched shoal subscribers that ask for it (not reading
//!   its ring), each one place for one connection. A subscriber registered from a
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
//!
//! Files: [`publisher`] the writer and its listener (the publisher's thread), [`session`] a publisher's
//! connections and their admission, [`subscriber`] the subscriber's factory and handle, [`client`] a subscriber's
//! connection on the I/O thread, [`source`] the I/O thread's table of sockets and deadlines; [`frame`] and
//! [`stream`] the byte formats (sans-IO).
//!
//! [`RemoteTopic::source`]: crate::registration::RemoteTopic::source
//! [`RemoteTopic::authenticated`]: crate::registration::RemoteTopic::authenticated

mod client;
#[doc(hidden)]
pub mod frame;
mod publisher;
mod session;
mod source;
#[doc(hidden)]
pub mod stream;
mod subscriber;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::config::{Config, TcpConfig};
use crate::registration::ProtectedTopics;
use crate::stats::TcpCounts;

pub(crate) use publisher::TcpWriteError;
use publisher::TcpWriterFactory;
use session::Server;
use subscriber::{ClientShared, TcpReaderFactory};

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
