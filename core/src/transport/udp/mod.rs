//! eCAL's UDP data layer (`transport_layer` type 1, "udp_mc").
//!
//! - Addressing: local mode broadcasts every topic to `local_broadcast:data_port` (127.255.255.255:14002); network
//!   mode sends to the topic's V2 multicast group ([`net::topic_group`]) and receives on the base group and the
//!   groups of the subscribed topics.
//! - Local mode takes data from this host only: a datagram whose source is not a loopback address is dropped before
//!   anything of it is read and counted (`UdpCounts::non_local_source`), as registration does with its own.
//! - Own datagrams: in local mode to 127.255.255.255 the process's receive socket would get all its own broadcasts
//!   back (and discard them as the same process's). Once the send socket is open, a socket filter drops them in
//!   the kernel before they are queued or copied ([`net::drop_own_datagrams`]); the senders count what they send
//!   there, which the receiver takes off the kernel's drop count. In network mode they still loop back when this
//!   process joined the topic's group, and are discarded after the copy.
//! - Datagrams: ecaludp v5 header, `[u16 name_len][topic\0]` prefix, then the data `Sample` protobuf
//!   ([`crate::wire::data_sample`]); messages above 65,483 framed bytes are fragmented, received ones go through the bounded
//!   [`Reassembler`](crate::wire::Reassembler).
//! - Publisher side (`UdpLayer::writer_factory`): a writer per publisher, started lazily by its first UDP
//!   subscriber (only then does the `udp` entry appear in the publisher's registration), sending through one
//!   non-blocking socket per runtime. The data sample is encoded up to its payload and after it; the datagrams
//!   gather those and the payload from where it lies ([`crate::wire::send_framed_pieces`]).
//!   `[shoal_network] send_mode = user_thread`: from the publisher's thread, one `send_to` per datagram (no copy of
//!   the payload but the kernel's); a full socket buffer drops the message and counts it. `io_thread`: the publisher
//!   frames the message into one buffer (one copy) and queues it; the I/O thread sends the queue in `sendmmsg`
//!   batches with UDP GSO ([`send`]); a full queue drops the message and counts it as a drop of its publisher.
//!   `auto` (the default) chooses per message (`UdpWriter::queue_for`): a small message that follows its
//!   publisher's previous one within [`crate::config::AUTO_LONE_GAP`] is queued, a lone or large one
//!   (`send_batch_max`) sent from the publisher's thread, unless messages of the publisher are still queued
//!   (counted by [`send::Queued`]): then it queues behind them, so a publisher's messages are never reordered.
//! - Packing (`[shoal_network] send_pack`, shoal peers only): a subscriber's UDP layer entry announces
//!   `LayerPar::ShoalUdp { packed_version: 1 }` (eCAL skips the field). A writer in `io_thread` mode whose UDP
//!   targets all announced it (`set_targets`, under the publisher's layer lock that `write` holds too, so the
//!   switch falls between two messages) queues each message that fits in `send_pack_bytes` as a packed datagram
//!   of one sample ([`crate::wire::packed`]); the I/O thread appends it to the same publisher's packed datagram
//!   right before it in the queue. Protected topics (`[shoal_auth]`) are never packed. The receiver checks a
//!   packed datagram whole, copies it out of the receive buffer once and dispatches its samples together (one
//!   subscriber-table lock, the same clock checks and counts as eCAL-format samples one at a time), their payloads
//!   slices of that copy.
//! - Subscriber side (`UdpLayer::reader_factory`): every subscriber is in a table (topic → subscribers) from its
//!   creation, so it receives from publishers it has not heard of yet (eCAL does the same). The I/O thread
//!   receives (`recv.rs`, `recvmmsg` 16 datagrams a call, the kernel's drop count of the socket kept; while a
//!   fragmented message comes, one datagram a call, its next fragment straight into the message's buffer, which
//!   goes back to the receiver for reuse when the last sample holding it is dropped; a later fragment that comes
//!   while the socket reports drops since the last one gives the message up at once, its remaining fragments
//!   dropped unread, so that a receiver that fell behind spends nothing more on it); per
//!   subscriber and publisher, the samples missing in a gap of the publisher's clock are counted as the
//!   subscriber's drops when the newer sample arrives, a repeated clock is dropped and counted too, and a late
//!   sample (its clock in such a gap) is discarded without counting its loss twice.
//! - `[shoal_auth]` with a key: a publisher of a protected topic seals every datagram
//!   ([`crate::wire::auth`], its fragments 48 bytes smaller), the receiver accepts a protected topic's messages only
//!   from verified, new envelopes (reassembled apart from unauthenticated datagrams) and counts the rest.

pub(crate) mod net;
mod pace;
mod recv;
mod send;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use std::io::IoSlice;

use socket2::{SockAddr, Socket};

use crate::config::Config;
use crate::registration::{Layer, LayerKind, LayerPar, ProtectedTopics, RemoteTopic};
use crate::sync::lock;
use crate::transport::clock::PublisherClocks;
use crate::transport::{
    Inbox, IoSource, LayerReader, LayerReaderFactory, LayerWriteError, LayerWriter, LayerWriterFactory, SampleMeta,
};
use crate::types::TypeInfo;
use crate::wire::auth::{AuthKey, AuthStats, Channel, ENVELOPE_HEADER_LEN, ENVELOPE_OVERHEAD, Sealer, TAG_LEN};
use crate::wire::{DEFAULT_MAX_FRAGMENT_PAYLOAD, HEADER_LEN, MAX_PIECES, SendFramedError, send_framed_pieces};

use crate::wire::data_sample::{DataSampleRef, DataSampleTail, encode_data_sample_head};

/// Process-wide counters of one runtime's UDP layer (drops per subscriber also go to the subscriber's count).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Messages handed to the send socket completely.
    pub(crate) sent: AtomicU64,
    /// `send_mode = io_thread`: messages dropped because the queue to the I/O thread was full.
    pub(crate) queue_full: AtomicU64,
    /// `send_mode = io_thread`: `sendmmsg` calls, and the GSO runs (several datagrams in one message) they sent.
    pub(crate) send_calls: AtomicU64,
    pub(crate) gso_runs: AtomicU64,
    /// Datagrams the kernel dropped on the data socket for a full receive buffer (`SO_RXQ_OVFL`, less this
    /// runtime's own broadcasts that the socket's filter dropped: [`net::drop_own_datagrams`]).
    pub(crate) kernel_drops: AtomicU64,
    /// Local mode to the loopback broadcast address: datagrams this runtime's send socket sent there, counted before
    /// each send and taken back when it fails (the receive socket's filter drops them, and the kernel counts them
    /// with its drops).
    pub(crate) own_broadcasts: AtomicU64,
    /// Messages dropped on send (socket buffer full or another send error).
    pub(crate) send_drops: AtomicU64,
    /// Datagrams received.
    pub(crate) datagrams: AtomicU64,
    /// Local mode: datagrams dropped because they did not come from a loopback address (another host's), before
    /// anything of them was read.
    pub(crate) non_local_source: AtomicU64,
    /// Of them, fragments received straight into their message's buffer (`recv.rs`, `InPlace`).
    pub(crate) in_place_fragments: AtomicU64,
    /// `send_pack`: packed datagrams sent, and the messages they carried.
    pub(crate) packed_sent: AtomicU64,
    pub(crate) packed_sent_messages: AtomicU64,
    /// Packed datagrams received and checked, and the samples they carried (for subscribed topics).
    pub(crate) packed_datagrams: AtomicU64,
    pub(crate) packed_messages: AtomicU64,
    /// Datagrams dropped by the header check or reassembly (see the reassembler's counters for the reason).
    pub(crate) wire_drops: AtomicU64,
    /// Complete messages with a malformed name prefix.
    pub(crate) framing_errors: AtomicU64,
    /// Messages for a subscribed topic whose protobuf was rejected.
    pub(crate) decode_errors: AtomicU64,
    /// Messages for topics nobody here subscribes to (ignored, not a loss).
    pub(crate) unknown_topic: AtomicU64,
    /// Samples delivered to subscribers.
    pub(crate) delivered: AtomicU64,
    /// Samples dropped as duplicates (clock already seen).
    pub(crate) duplicates: AtomicU64,
    /// Samples dropped as out of order (clock lower than one already delivered).
    pub(crate) out_of_order: AtomicU64,
    /// Samples never received, from gaps in a publisher's clock.
    pub(crate) lost: AtomicU64,
    /// Copies skipped because the subscriber reads that publisher through the native ring or the same process.
    pub(crate) skipped_other_path: AtomicU64,
    /// The receiver's reassemblers (copied by the I/O thread after each batch and each expiry): messages
    /// reassembled, incomplete ones expired, evicted by the bounds and abandoned at a kernel drop, and those held
    /// now with their bytes.
    pub(crate) reassembled: AtomicU64,
    pub(crate) reassembly_expired: AtomicU64,
    pub(crate) reassembly_evicted: AtomicU64,
    pub(crate) reassembly_abandoned: AtomicU64,
    pub(crate) reassembly_in_flight: AtomicU64,
    pub(crate) reassembly_bytes: AtomicU64,
}

impl Counters {
    fn counts(&self) -> crate::stats::UdpCounts {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        crate::stats::UdpCounts {
            sent: l(&self.sent),
            send_drops: l(&self.send_drops),
            datagrams: l(&self.datagrams),
            non_local_source: l(&self.non_local_source),
            packed_sent: l(&self.packed_sent),
            packed_sent_messages: l(&self.packed_sent_messages),
            packed_datagrams: l(&self.packed_datagrams),
            packed_messages: l(&self.packed_messages),
            wire_drops: l(&self.wire_drops),
            delivered: l(&self.delivered),
            lost: l(&self.lost),
            duplicates: l(&self.duplicates),
            late: l(&self.out_of_order),
            reassembled: l(&self.reassembled),
            reassembly_expired: l(&self.reassembly_expired),
            reassembly_evicted: l(&self.reassembly_evicted),
            reassembly_abandoned: l(&self.reassembly_abandoned),
            reassembly_in_flight: l(&self.reassembly_in_flight),
            reassembly_bytes: l(&self.reassembly_bytes),
            kernel_drops: l(&self.kernel_drops),
        }
    }
}

/// One live subscriber in the table.
struct SubEntry {
    sub_id: u64,
    /// Data address of the subscriber's inbox, to find the entry from `connect`.
    inbox_addr: usize,
    inbox: Weak<dyn Inbox>,
    /// Clock check per publisher (bounded: publisher ids come from datagrams).
    pubs: PublisherClocks,
    /// Type information of publishers known from registration (recorded by the layer readers).
    types: HashMap<u64, Arc<TypeInfo>>,
}

/// topic → its live subscribers.
#[derive(Default)]
struct SubTable {
    topics: HashMap<Arc<str>, Vec<SubEntry>>,
    /// Ids of this runtime's publishers: their datagrams looping back are same-process duplicates (kept here, so a
    /// received sample is checked under the one lock it takes anyway).
    local_publishers: HashSet<u64>,
}

/// State shared by the factories, the writers, the readers and the I/O thread's receiver of one runtime.
struct Shared {
    config: crate::config::NetworkConfig,
    /// Bounds of the data layer's reassembly (`[shoal_limits] udp_*`).
    reassembly: crate::wire::ReassemblyConfig,
    pub_enabled: bool,
    sub_enabled: bool,
    host_name: String,
    /// The multicast interface, resolved on first use (network mode only).
    iface: OnceLock<Ipv4Addr>,
    /// The send socket, opened by the first writer that starts (`None`: it could not be opened).
    sender: OnceLock<Option<Socket>>,
    /// [`net::own_datagrams_loop_back`]: the receive socket drops this runtime's own datagrams, and the senders count
    /// them in `counters.own_broadcasts`.
    own_loop_back: bool,
    subs: Mutex<SubTable>,
    /// Bumped whenever the set of subscribed topics changes.
    subs_version: AtomicU64,
    counters: Counters,
    /// `[shoal_auth]` when it has a key.
    auth: Option<DataAuth>,
    /// Authentication drops of this process (shared with registration).
    auth_stats: Arc<AuthStats>,
    /// `[shoal_network] max_send_rate` when it is not 0.
    pacer: Option<pace::SendPacer>,
    /// `send_mode = io_thread`: the queue from the writers to the I/O thread.
    send_queue: Option<Arc<send::SendQueue>>,
    /// Whether a send failure was logged at warn level yet: [0] a full socket buffer or queue, [1] any other error (each kind
    /// once per process; every failure is counted in `counters.send_drops` and at debug level).
    send_failure_warned: [AtomicBool; 2],
}

/// The UDP layer's side of `[shoal_auth]`.
#[derive(Debug)]
struct DataAuth {
    key: Arc<AuthKey>,
    protected: ProtectedTopics,
    max_age: std::time::Duration,
    senders: usize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("udp::Shared")
            .field("network", &self.config.enabled)
            .field("pub_enabled", &self.pub_enabled)
            .field("sub_enabled", &self.sub_enabled)
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn iface(&self) -> Ipv4Addr {
        *self.iface.get_or_init(|| net::multicast_interface(&self.config))
    }

    fn sender(&self) -> Option<&Socket> {
        self.sender
            .get_or_init(|| match net::open_send_socket(&self.config, self.iface_if_network()) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("UDP data layer: cannot open the send socket, UDP publishing is off: {e}");
                    None
                }
            })
            .as_ref()
    }

    /// Logs the first send failure of its kind at warn level, with what was lost and why (`congested`: the socket
    /// buffer or the queue to the I/O thread was full; else another send error). Every failure is counted in
    /// `send_drops` and the publisher's drops; later ones of a kind are not logged above debug level.
    fn note_send_failure(&self, congested: bool, what: &dyn std::fmt::Display) {
        if !self.send_failure_warned[usize::from(!congested)].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "UDP data layer: {what} (counted in the publisher's drops; further {} are only counted)",
                if congested { "drops for a full buffer" } else { "send errors" }
            );
        }
    }

    fn iface_if_network(&self) -> Ipv4Addr {
        if self.config.enabled { self.iface() } else { Ipv4Addr::UNSPECIFIED }
    }

    /// Counts `n` datagrams about to be sent to the loopback broadcast address (when the receive socket drops its
    /// own), or takes back `n` that failed (`sent = false`).
    fn count_own(&self, n: usize, sent: bool) {
        if self.own_loop_back && n > 0 {
            let c = &self.counters.own_broadcasts;
            if sent {
                c.fetch_add(n as u64, Ordering::Relaxed)
            } else {
                c.fetch_sub(n as u64, Ordering::Relaxed)
            };
        }
    }

    /// The subscribed topics, when they changed since `seen` (which is updated).
    fn topics_if_changed(&self, seen: &mut u64) -> Option<Vec<Arc<str>>> {
        let v = self.subs_version.load(Ordering::Acquire);
        if v == *seen {
            return None;
        }
        *seen = v;
        Some(lock(&self.subs).topics.keys().cloned().collect())
    }
}

/// The UDP layer of one runtime: hands out the writer and reader factories, which share its state.
#[derive(Debug, Clone)]
pub(crate) struct UdpLayer {
    shared: Arc<Shared>,
}

impl UdpLayer {
    /// The layer for a runtime with this configuration and host name; opens no socket yet. Authentication drops
    /// are counted in `auth_stats`.
    pub(crate) fn new(config: &Config, host_name: &str, auth_stats: Arc<AuthStats>) -> Result<UdpLayer, regex::Error> {
        let auth = match &config.auth.key {
            Some(key) => Some(DataAuth {
                key: key.clone(),
                protected: ProtectedTopics::new(&config.auth.protected_topics)?,
                max_age: config.auth.max_age,
                senders: config.limits.auth_senders,
            }),
            None => None,
        };
        Ok(UdpLayer {
            shared: Arc::new(Shared {
                config: config.network.clone(),
                reassembly: crate::wire::ReassemblyConfig {
                    max_bytes: config.limits.udp_reassembly_bytes,
                    max_per_source: config.limits.udp_fragmented_per_source,
                    ..crate::wire::ReassemblyConfig::default()
                },
                pub_enabled: config.layers.pub_udp,
                sub_enabled: config.layers.sub_udp,
                host_name: host_name.to_string(),
                iface: OnceLock::new(),
                sender: OnceLock::new(),
                own_loop_back: net::own_datagrams_loop_back(&config.network),
                subs: Mutex::new(SubTable::default()),
                subs_version: AtomicU64::new(0),
                counters: Counters::default(),
                send_failure_warned: Default::default(),
                auth,
                auth_stats,
                pacer: pace::SendPacer::new(config.network.max_send_rate),
                send_queue: (config.network.send_mode != crate::config::UdpSendMode::UserThread
                    && config.layers.pub_udp)
                    .then(|| {
                        Arc::new(send::SendQueue::new(
                            config.network.send_queue,
                            config.network.send_queue_bytes,
                            config.network.send_queue_wait,
                            config.network.send_flush_delay,
                            config.network.send_pack_bytes,
                        ))
                    }),
            }),
        })
    }

    /// The layer's counters since the start.
    pub(crate) fn counts(&self) -> crate::stats::UdpCounts {
        self.shared.counters.counts()
    }

    /// The publisher-side factory (creates writers only when `layers.pub_udp` is on).
    pub(crate) fn writer_factory(&self) -> UdpWriterFactory {
        UdpWriterFactory { shared: Arc::clone(&self.shared) }
    }

    /// The subscriber-side factory (does anything only when `layers.sub_udp` is on).
    pub(crate) fn reader_factory(&self) -> UdpReaderFactory {
        UdpReaderFactory { shared: Arc::clone(&self.shared) }
    }
}

/// Creates a [`LayerWriter`] per publisher.
#[derive(Debug)]
pub(crate) struct UdpWriterFactory {
    shared: Arc<Shared>,
}

impl LayerWriterFactory for UdpWriterFactory {
    fn create(&self, publisher_id: u64, topic: &str, _type_info: &TypeInfo) -> Option<Box<dyn LayerWriter>> {
        if !self.shared.pub_enabled {
            return None;
        }
        if let Err(e) = crate::wire::begin_framed(&mut Vec::new(), topic) {
            tracing::warn!("topic {topic:?}: its name cannot be framed for UDP ({e}); no UDP layer");
            return None;
        }
        lock(&self.shared.subs).local_publishers.insert(publisher_id);
        let dest = net::destination(&self.shared.config, topic);
        Some(Box::new(UdpWriter {
            shared: Arc::clone(&self.shared),
            publisher_id,
            id_str: publisher_id.to_string(),
            topic: topic.to_string(),
            dest: dest.into(),
            dest_v4: dest,
            started: false,
            targets: 0,
            buf: Vec::new(),
            next_fragment_id: rand::random::<u32>(),
            late_drops: Arc::new(AtomicU64::new(0)),
            queued: Arc::new(AtomicUsize::new(0)),
            last_send_us: None,
            pack_allowed: self.shared.config.send_pack
                && self.shared.send_queue.is_some()
                && crate::wire::packed::packable_topic(topic)
                && !self.shared.auth.as_ref().is_some_and(|a| a.protected.contains(topic)),
            pack: false,
            sealer: self
                .shared
                .auth
                .as_ref()
                .filter(|a| a.protected.contains(topic))
                .map(|a| Sealer::new(&a.key, Channel::Data)),
        }))
    }
}

/// The UDP writer of one publisher.
struct UdpWriter {
    shared: Arc<Shared>,
    publisher_id: u64,
    id_str: String,
    topic: String,
    dest: SockAddr,
    dest_v4: SocketAddrV4,
    started: bool,
    targets: usize,
    /// Reused for every message: `[24-byte header][u16 name_len][topic\0][Sample protobuf]`.
    buf: Vec<u8>,
    next_fragment_id: u32,
    /// `send_mode = io_thread` or `auto`: messages the I/O thread could not send (taken by the publisher).
    late_drops: Arc<AtomicU64>,
    /// Messages of this writer in the queue to the I/O thread or held by it, not yet sent or dropped
    /// ([`send::Queued`]): while there are any, `auto` mode queues the next message too, so none are reordered.
    queued: Arc<AtomicUsize>,
    /// `send_mode = auto`: the send time of the previous message, to tell a stream from a lone message.
    last_send_us: Option<i64>,
    /// Packing is possible for this publisher: `send_pack` on, `send_mode` not `user_thread`, the topic not protected
    /// by `[shoal_auth]` and its name short enough.
    pack_allowed: bool,
    /// Small samples are queued in the packed format: `pack_allowed` and every UDP subscriber announced it
    /// (decided in `set_targets`, under the publisher's layer lock that `write` holds too).
    pack: bool,
    /// Seals every datagram when `[shoal_auth]` protects the topic.
    sealer: Option<Sealer>,
}

/// Whether a subscriber announced in registration that it reads packed datagrams of this version.
pub(crate) fn reads_packed(remote: &RemoteTopic) -> bool {
    remote.layers.iter().any(|l| {
        l.kind == LayerKind::Udp
            && matches!(l.par, LayerPar::ShoalUdp { packed_version } if packed_version == u32::from(crate::wire::packed::PACK_VERSION))
    })
}

impl std::fmt::Debug for UdpWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpWriter")
            .field("publisher_id", &self.publisher_id)
            .field("topic", &self.topic)
            .field("dest", &self.dest_v4)
            .field("started", &self.started)
            .field("targets", &self.targets)
            .field("sealed", &self.sealer.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for UdpWriter {
    fn drop(&mut self) {
        lock(&self.shared.subs).local_publishers.remove(&self.publisher_id);
    }
}

/// Why the UDP layer did not send a message (counted in the layer's `send_drops`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UdpWriteError {
    /// The message cannot be framed (the topic name was checked at creation; not expected).
    #[error("cannot frame the message")]
    Encode(#[source] crate::wire::EncodeError),
    /// The runtime's send socket could not be opened.
    #[error("no UDP send socket")]
    NoSocket,
    /// The socket buffer was full: the datagram was dropped.
    #[error("{part} to {dest} dropped: socket buffer full")]
    Congested {
        /// The datagram of the message.
        part: crate::wire::DatagramPart,
        /// Where it went.
        dest: SocketAddrV4,
        /// What `send` returned.
        #[source]
        source: std::io::Error,
    },
    /// `send` failed.
    #[error("{part} to {dest} failed")]
    Send {
        /// The datagram of the message.
        part: crate::wire::DatagramPart,
        /// Where it went.
        dest: SocketAddrV4,
        /// What `send` returned.
        #[source]
        source: std::io::Error,
    },
    /// The datagrams of the message do not fit the send queue's u32 offsets.
    #[error("message of {0} bytes too large for the send queue")]
    TooLargeForQueue(usize),
    /// The message cannot be packed (the writer checked the topic name and the size; not expected).
    #[error("message of {0} bytes cannot be packed")]
    Unpackable(usize),
    /// The queue to the I/O thread stayed full.
    #[error(
        "message to {dest} dropped: the queue to the I/O thread stayed full for {} µs ([shoal_network] send_queue, \
         send_queue_wait_us)",
        waited.as_micros()
    )]
    QueueFull {
        /// Where it went.
        dest: SocketAddrV4,
        /// How long the publisher waited for room.
        waited: std::time::Duration,
    },
}

/// Whether `e` means "the socket cannot take it now" (the message is dropped, not an error of the layer).
fn is_congestion(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

impl UdpWriter {
    /// Counts the message as dropped and returns `e` as the layer's error.
    fn fail(&self, e: UdpWriteError) -> LayerWriteError {
        self.shared.counters.send_drops.fetch_add(1, Ordering::Relaxed);
        LayerWriteError::Udp(e)
    }

    fn send_error(&self, source: std::io::Error, part: crate::wire::DatagramPart) -> LayerWriteError {
        let dest = self.dest_v4;
        let congested = is_congestion(&source);
        let e = if congested {
            UdpWriteError::Congested { part, dest, source }
        } else {
            UdpWriteError::Send { part, dest, source }
        };
        let source = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
        self.shared.note_send_failure(congested, &format_args!("topic {}: {e}{source}", self.topic));
        self.fail(e)
    }
}

impl LayerWriter for UdpWriter {
    fn kind(&self) -> LayerKind {
        LayerKind::Udp
    }

    fn accepts(&self, remote: &RemoteTopic, _same_host: bool) -> bool {
        remote.layers.iter().any(|l| l.kind == LayerKind::Udp && l.is_enabled())
    }

    fn set_targets(&mut self, targets: &[&RemoteTopic]) {
        if !targets.is_empty() && !self.started {
            self.started = true;
            tracing::debug!("topic {}: UDP layer started, sending to {}", self.topic, self.dest_v4);
        }
        self.targets = targets.len();
        let pack = self.pack_allowed && !targets.is_empty() && targets.iter().all(|t| reads_packed(t));
        if pack != self.pack {
            tracing::debug!(
                "topic {}: UDP samples {}",
                self.topic,
                if pack { "packed (every UDP subscriber reads packed datagrams)" } else { "in eCAL's format" }
            );
            self.pack = pack;
        }
    }

    fn advert(&self) -> Option<Layer> {
        self.started.then(|| Layer::new(LayerKind::Udp, true, self.targets > 0, LayerPar::None))
    }

    fn write(&mut self, payload: &[u8], meta: &SampleMeta) -> Result<(), LayerWriteError> {
        self.next_fragment_id = self.next_fragment_id.wrapping_add(1);
        let queue = self.queue_for(payload.len(), meta.send_time_us);
        if self.pack
            && let Some(q) = queue.clone()
            && crate::wire::packed::packed_header_len(&self.topic) + crate::wire::packed::record_len(payload.len())
                <= q.pack_bytes()
        {
            return self.enqueue_packed(&q, payload, meta);
        }
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.frame(&mut buf, payload, meta).and_then(|tail| {
            let pieces = [&buf[HEADER_LEN..], payload, tail.as_slice()];
            match queue {
                Some(q) => self.enqueue(&q, &pieces),
                None => {
                    let r = self.send(&pieces);
                    if r.is_ok() {
                        self.shared.counters.sent.fetch_add(1, Ordering::Relaxed);
                    }
                    r
                }
            }
        });
        self.buf = buf;
        result
    }

    fn take_late_drops(&mut self) -> u64 {
        if self.late_drops.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.late_drops.swap(0, Ordering::Relaxed)
    }
}

impl UdpWriter {
    /// The queue to the I/O thread when this message goes through it, `None` when the publisher's thread sends it
    /// (`[shoal_network] send_mode`; `auto`: see [`crate::config::UdpSendMode::Auto`]).
    fn queue_for(&mut self, len: usize, send_time_us: i64) -> Option<Arc<send::SendQueue>> {
        let q = self.shared.send_queue.as_ref()?;
        if self.shared.config.send_mode != crate::config::UdpSendMode::Auto {
            return Some(Arc::clone(q));
        }
        let previous = self.last_send_us.replace(send_time_us);
        // Acquire: when none of its messages is left, the I/O thread's sends of them happened before this one.
        if self.queued.load(Ordering::Acquire) > 0 {
            return Some(Arc::clone(q));
        }
        let gap_us = previous.map(|p| send_time_us.saturating_sub(p));
        let lone = gap_us.is_none_or(|g| g < 0 || g >= crate::config::AUTO_LONE_GAP.as_micros() as i64);
        (len <= self.shared.config.send_batch_max && !lone).then(|| Arc::clone(q))
    }

    /// Fills `buf` with 24 free header bytes, the `[u16 name_len][topic\0]` prefix and the data sample up to its
    /// payload; returns the sample's bytes after the payload. The message is `buf[HEADER_LEN..]`, the payload, the
    /// tail: sent from where they are ([`send_framed_pieces`]).
    fn frame(&self, buf: &mut Vec<u8>, payload: &[u8], meta: &SampleMeta) -> Result<DataSampleTail, LayerWriteError> {
        // The topic name was checked at creation; this cannot fail.
        crate::wire::begin_framed(buf, &self.topic).map_err(|e| self.fail(UdpWriteError::Encode(e)))?;
        Ok(encode_data_sample_head(
            buf,
            &DataSampleRef {
                topic_name: &self.topic,
                topic_id: &self.id_str,
                publisher_id: self.publisher_id,
                host_name: &self.shared.host_name,
                clock: meta.clock,
                time_us: meta.send_time_us,
                payload,
            },
        ))
    }

    /// Sends the framed message in `pieces` as eCAL datagrams through the runtime's send socket.
    fn send(&mut self, pieces: &[&[u8]]) -> Result<(), LayerWriteError> {
        let Some(sock) = self.shared.sender() else {
            return Err(self.fail(UdpWriteError::NoSocket));
        };
        let dest = &self.dest;
        let id = self.next_fragment_id as i32;
        let shared = &*self.shared;
        let send_one = |parts: &[IoSlice<'_>]| {
            shared.count_own(1, true);
            let r = match parts {
                [one] => sock.send_to(one, dest).map(|_| ()),
                _ => sock.send_to_vectored(parts, dest).map(|_| ()),
            };
            if r.is_err() {
                shared.count_own(1, false);
            }
            r
        };
        let pacer = self.shared.pacer.as_ref();
        let pace = |parts: &[IoSlice<'_>]| {
            if let Some(p) = pacer {
                p.take(parts.iter().map(|s| s.len()).sum());
            }
        };
        let r = match &mut self.sealer {
            None => send_framed_pieces(pieces, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || id, |parts| {
                pace(parts);
                send_one(parts)
            }),
            Some(sealer) => {
                let now_ns = crate::wire::auth::unix_ns();
                send_framed_pieces(pieces, DEFAULT_MAX_FRAGMENT_PAYLOAD - ENVELOPE_OVERHEAD, &mut || id, |parts| {
                    let (head, tag) = seal_datagram(sealer, parts, now_ns);
                    let (slices, n) = sealed_slices(&head, parts, &tag);
                    pace(&slices[..n]);
                    send_one(&slices[..n])
                })
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(SendFramedError::Encode(e)) => Err(self.fail(UdpWriteError::Encode(e))),
            Err(SendFramedError::Send { part, error }) => Err(self.send_error(error, part)),
        }
    }
}

/// Seals one datagram, which [`send_framed_pieces`] hands over as slices: the envelope's header (to go before them)
/// and tag (after them).
fn seal_datagram(
    sealer: &mut Sealer,
    parts: &[IoSlice<'_>],
    now_ns: u64,
) -> ([u8; ENVELOPE_HEADER_LEN], [u8; TAG_LEN]) {
    let mut plain: [&[u8]; MAX_PIECES + 1] = [&[]; MAX_PIECES + 1];
    for (p, s) in plain.iter_mut().zip(parts) {
        *p = s;
    }
    sealer.seal_parts(&plain[..parts.len().min(MAX_PIECES + 1)], now_ns)
}

/// A sealed datagram's slices: the envelope's header, the datagram's `parts`, the tag; and how many there are.
fn sealed_slices<'a>(
    head: &'a [u8; ENVELOPE_HEADER_LEN],
    parts: &[IoSlice<'a>],
    tag: &'a [u8; TAG_LEN],
) -> ([IoSlice<'a>; MAX_PIECES + 3], usize) {
    let mut out: [IoSlice<'a>; MAX_PIECES + 3] = std::array::from_fn(|_| IoSlice::new(&[]));
    out[0] = IoSlice::new(head);
    let mut n = 1;
    for p in parts.iter().take(MAX_PIECES + 1) {
        out[n] = *p;
        n += 1;
    }
    out[n] = IoSlice::new(tag);
    (out, n + 1)
}

impl UdpWriter {
    /// `send_mode = io_thread`: cuts the framed message in `pieces` into its datagrams (sealed if the topic is
    /// protected), copies them into one buffer and queues it for the I/O thread. A full queue drops the message
    /// (counted).
    fn enqueue(&mut self, q: &send::SendQueue, pieces: &[&[u8]]) -> Result<(), LayerWriteError> {
        let id = self.next_fragment_id as i32;
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let mut data = Vec::with_capacity(total + 64);
        let mut ends: Vec<u32> = Vec::new();
        // Offsets fit in a u32 unless a message comes within 0.04 % of 4 GiB (send_framed caps it at u32::MAX
        // framed bytes, headers add 24 bytes per 64 KB); such a message is refused below.
        let mark = |data: &Vec<u8>, ends: &mut Vec<u32>| ends.push(u32::try_from(data.len()).unwrap_or(u32::MAX));
        let r = match &mut self.sealer {
            None => send_framed_pieces(pieces, DEFAULT_MAX_FRAGMENT_PAYLOAD, &mut || id, |parts| {
                for p in parts {
                    data.extend_from_slice(p);
                }
                mark(&data, &mut ends);
                Ok::<(), std::io::Error>(())
            }),
            Some(sealer) => {
                let now_ns = crate::wire::auth::unix_ns();
                send_framed_pieces(pieces, DEFAULT_MAX_FRAGMENT_PAYLOAD - ENVELOPE_OVERHEAD, &mut || id, |parts| {
                    let (head, tag) = seal_datagram(sealer, parts, now_ns);
                    let (slices, n) = sealed_slices(&head, parts, &tag);
                    for p in &slices[..n] {
                        data.extend_from_slice(p);
                    }
                    mark(&data, &mut ends);
                    Ok(())
                })
            }
        };
        match r {
            Ok(()) => {}
            Err(SendFramedError::Encode(e)) => return Err(self.fail(UdpWriteError::Encode(e))),
            Err(SendFramedError::Send { part, error }) => return Err(self.send_error(error, part)),
        }
        if ends.last().is_some_and(|e| *e as usize != data.len()) {
            return Err(self.fail(UdpWriteError::TooLargeForQueue(data.len())));
        }
        if ends.len() == 1 {
            ends.clear();
        }
        // Pacing charges the publisher's thread here too, before the message is queued, so the I/O thread's
        // batches leave no faster than `max_send_rate`.
        if let Some(p) = self.shared.pacer.as_ref() {
            p.take(data.len());
        }
        let m = send::Outgoing {
            dest: self.dest_v4,
            data,
            ends,
            drops: Arc::clone(&self.late_drops),
            pack_key: None,
            messages: 1,
            _queued: send::Queued::new(&self.queued),
        };
        self.push(q, m)
    }

    /// `send_mode = io_thread` and packing negotiated: queues the message as a packed datagram of one sample; the
    /// I/O thread appends the samples of this publisher queued right after it (`send.rs`).
    fn enqueue_packed(
        &mut self,
        q: &send::SendQueue,
        payload: &[u8],
        meta: &SampleMeta,
    ) -> Result<(), LayerWriteError> {
        let mut data = Vec::new();
        if crate::wire::packed::begin_packed(
            &mut data,
            self.publisher_id,
            &self.topic,
            meta.clock,
            meta.send_time_us,
            payload,
        )
        .is_none()
        {
            // The writer checked the topic name and the size; this cannot happen.
            return Err(self.fail(UdpWriteError::Unpackable(payload.len())));
        }
        if let Some(p) = self.shared.pacer.as_ref() {
            p.take(data.len());
        }
        let m = send::Outgoing {
            dest: self.dest_v4,
            data,
            ends: Vec::new(),
            drops: Arc::clone(&self.late_drops),
            pack_key: Some(self.publisher_id),
            messages: 1,
            _queued: send::Queued::new(&self.queued),
        };
        self.push(q, m)
    }

    fn push(&mut self, q: &send::SendQueue, m: send::Outgoing) -> Result<(), LayerWriteError> {
        match q.push_waiting(m) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.shared.counters.queue_full.fetch_add(1, Ordering::Relaxed);
                let e = UdpWriteError::QueueFull { dest: self.dest_v4, waited: q.full_wait() };
                self.shared.note_send_failure(true, &format_args!("topic {}: {e}", self.topic));
                Err(self.fail(e))
            }
        }
    }
}

/// Subscriber side: keeps the subscriber table and connects subscribers to UDP publishers.
#[derive(Debug)]
pub(crate) struct UdpReaderFactory {
    shared: Arc<Shared>,
}

fn inbox_addr(inbox: &Arc<dyn Inbox>) -> usize {
    Arc::as_ptr(inbox) as *const () as usize
}

impl LayerReaderFactory for UdpReaderFactory {
    fn subscriber_advert(&self) -> Option<Layer> {
        let par = if self.shared.config.send_pack {
            LayerPar::ShoalUdp { packed_version: u32::from(crate::wire::packed::PACK_VERSION) }
        } else {
            LayerPar::None
        };
        self.shared.sub_enabled.then(|| Layer::new(LayerKind::Udp, true, false, par))
    }

    fn connect(
        &self,
        topic: &str,
        inbox: Arc<dyn Inbox>,
        remote: &RemoteTopic,
        _same_host: bool,
    ) -> Option<Box<dyn LayerReader>> {
        if !self.shared.sub_enabled || !remote.layers.iter().any(|l| l.kind == LayerKind::Udp && l.is_enabled()) {
            return None;
        }
        let addr = inbox_addr(&inbox);
        let publisher_id = remote.key.entity_id;
        let mut t = lock(&self.shared.subs);
        let entry = t.topics.get_mut(topic)?.iter_mut().find(|e| e.inbox_addr == addr)?;
        entry.types.insert(publisher_id, Arc::new(remote.type_info.clone()));
        drop(t);
        tracing::debug!("topic {topic}: UDP connection to publisher {publisher_id} ({})", remote.key.host_name);
        Some(Box::new(UdpReader { shared: Arc::clone(&self.shared), topic: Arc::from(topic), addr, publisher_id }))
    }

    fn subscriber_created(&self, sub_id: u64, topic: &str, inbox: &Arc<dyn Inbox>) {
        if !self.shared.sub_enabled {
            return;
        }
        let mut t = lock(&self.shared.subs);
        let entries = t.topics.entry(Arc::from(topic)).or_default();
        entries.push(SubEntry {
            sub_id,
            inbox_addr: inbox_addr(inbox),
            inbox: Arc::downgrade(inbox),
            pubs: PublisherClocks::default(),
            types: HashMap::new(),
        });
        self.shared.subs_version.fetch_add(1, Ordering::Release);
    }

    fn subscriber_dropped(&self, sub_id: u64, topic: &str) {
        if !self.shared.sub_enabled {
            return;
        }
        let removed = {
            let mut t = lock(&self.shared.subs);
            let mut removed = Vec::new();
            if let Some(entries) = t.topics.get_mut(topic) {
                while let Some(i) = entries.iter().position(|e| e.sub_id == sub_id) {
                    removed.push(entries.swap_remove(i));
                }
                if entries.is_empty() {
                    t.topics.remove(topic);
                }
            }
            removed
        };
        if !removed.is_empty() {
            self.shared.subs_version.fetch_add(1, Ordering::Release);
        }
        // The entries (and the weak inboxes) are dropped here, outside the table lock.
        drop(removed);
    }

    fn io_source(&self) -> Option<Box<dyn IoSource>> {
        let recv = self.shared.sub_enabled.then(|| recv::UdpReceiver::new(Arc::clone(&self.shared)));
        let send =
            self.shared.send_queue.as_ref().map(|q| send::UdpSender::new(Arc::clone(&self.shared), Arc::clone(q)));
        if recv.is_none() && send.is_none() {
            return None;
        }
        Some(Box::new(UdpSource { recv, send }))
    }
}

/// A subscriber's UDP connection to one registered publisher: keeps its type information in the table.
struct UdpReader {
    shared: Arc<Shared>,
    topic: Arc<str>,
    addr: usize,
    publisher_id: u64,
}

impl std::fmt::Debug for UdpReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpReader").field("topic", &self.topic).field("publisher_id", &self.publisher_id).finish()
    }
}

impl UdpReader {
    fn with_entry(&self, f: impl FnOnce(&mut SubEntry)) {
        let mut t = lock(&self.shared.subs);
        if let Some(e) = t.topics.get_mut(&self.topic).and_then(|v| v.iter_mut().find(|e| e.inbox_addr == self.addr)) {
            f(e);
        }
    }
}

impl LayerReader for UdpReader {
    fn update(&mut self, remote: &RemoteTopic) {
        let ti = Arc::new(remote.type_info.clone());
        self.with_entry(|e| {
            e.types.insert(remote.key.entity_id, ti);
        });
    }
}

impl Drop for UdpReader {
    fn drop(&mut self) {
        let id = self.publisher_id;
        self.with_entry(|e| {
            e.types.remove(&id);
        });
    }
}

/// The UDP layer's part of the I/O thread: the receiver (subscribers) and, with `send_mode = io_thread`, the
/// sender of the queued messages.
struct UdpSource {
    recv: Option<recv::UdpReceiver>,
    send: Option<send::UdpSender>,
}

impl IoSource for UdpSource {
    fn maintain(&mut self, registry: &mio::Registry, token: mio::Token, now: std::time::Instant) {
        if let Some(r) = &mut self.recv {
            r.maintain(registry, token, now);
        }
    }

    fn on_readable(&mut self, now: std::time::Instant, batch: usize) -> bool {
        self.recv.as_mut().is_some_and(|r| r.on_readable(now, batch))
    }

    fn set_waker(&mut self, waker: Arc<mio::Waker>) {
        if let Some(s) = &mut self.send {
            s.set_waker(waker);
        }
    }

    fn flush(&mut self, now: std::time::Instant) -> Option<std::time::Instant> {
        self.send.as_mut().and_then(|s| s.flush(now))
    }

    fn before_sleep(&mut self) -> bool {
        self.send.as_mut().is_some_and(|s| s.before_sleep())
    }

    fn kernel_drops(&self) -> u64 {
        self.recv.as_ref().map_or(0, |r| r.kernel_drops())
    }
}
