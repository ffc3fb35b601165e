//! Typed configuration: built-in defaults equal to eCAL 6's, `ecal.ini` parsing and validation.
//!
//! - [`Config::default`]: eCAL 6's defaults on the wire (local mode, registration on UDP 14000,
//!   data on 14002, refresh 1000 ms, timeout 10000 ms).
//! - [`Config::load`]: `$ECAL_INI`, `./ecal.ini`, `$HOME/.ecal/ecal.ini`, `/etc/ecal/ecal.ini`,
//!   else the defaults. [`Config::from_file`] and [`Config::parse_str`] read one file or text.
//! - Files are eCAL 5 style ini: eCAL 5.13 section and key names where eCAL has the setting
//!   (`[common] registration_refresh`, `[network] multicast_ttl`, ...), `[shoal_*]` sections for the
//!   rest. Every key is declared once in `keys.rs`; the parser and the documented default file
//!   (`etc/ecal.ini`, [`Config::default_ini_text`]) are both generated from that table.
//! - [`Config::explain_from`] / [`Config::explain_file`] say where each value came from (built-in default, or a
//!   file's line) and how the file was found (`shoal config show`).
//! - A bad value is a [`ConfigError`] naming file, line, key, value and what is allowed; unknown keys
//!   (the rest of a copied eCAL 5 file) are [`ConfigWarning`]s, logged with `tracing::warn!`.
//! - Keys of eCAL features shoal does not have yet (shared memory across host names through
//!   `shm_transport_domain`) are read so that eCAL files load: a value
//!   that leaves the feature off is silent, one that asks for it is a [`ConfigWarning`] saying "not supported
//!   yet". [`Config`] has no field for a feature that does not exist.
//!
//! The line parser is hand-written; `ini.rs` says why.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

mod error;
mod generate;
mod ini;
mod keys;
mod load;
mod parse;
mod report;
#[cfg(test)]
mod tests;

pub use error::{ConfigError, ConfigWarning, KeyFileError};
pub use load::SearchPaths;
pub use report::{ConfigReport, FoundBy, KeyReport, ValueOrigin};

/// How a blocking receive waits for the next sample.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Sleep on the futex doorbell; while samples come back to back (the previous wait found one within 10 µs),
    /// poll 10 µs first, so that a receiver keeping up with a stream neither sleeps nor costs its publisher a
    /// wake-up per sample; otherwise one wait in 64 polls first (sooner right after a stream ends), for 50 µs when
    /// its thread published since its previous wait (a reply is due), so both sides of a request/response exchange
    /// end up polling (the doorbell's `wait_until`).
    Block,
    /// Spin for the given time, then sleep on the doorbell.
    SpinThenBlock(Duration),
    /// Spin without ever sleeping or yielding (lowest latency, burns a core). While no thread of the process has
    /// slept on its doorbell, publishers skip the doorbell's fence on every send to it (`shm_ring::doorbell`). A
    /// receive reads the clock for its deadline only after its first [`Subscriber::BUSY_SPIN_POLLS_BEFORE_CLOCK`]
    /// polls.
    ///
    /// Give each busy-spinning receiver a CPU of its own; one that shares its CPU with the thread it waits for waits
    /// out that thread's time slice per message (two processes pinned to one CPU, `taskset -c 0 shoal perf --wait
    /// spin --pingpong`: 4.00 ms one way), and several on one CPU lag each other (four subscribers of one publisher
    /// on one CPU: 4-7 ms behind it, and some of a fast stream lost). [`WaitStrategy::SpinThenBlock`] and
    /// [`WaitStrategy::Block`] sleep, and serve such a place. A spin that yields its CPU now and then, as a
    /// block-mode poll does, was tried (`git show 70dd989`) and reverted: on a host whose kernel wakes a thread onto
    /// its waker's CPU, two yielding spinners that a wake-up put on one CPU stay there, too busy for the load
    /// balancer to move (a zero-copy 1-8 MiB ping-pong at 11.8 µs one way instead of 0.25-0.3), where a pure spinner
    /// is moved to the idle CPU within its first time slice.
    ///
    /// [`Subscriber::BUSY_SPIN_POLLS_BEFORE_CLOCK`]: crate::Subscriber::BUSY_SPIN_POLLS_BEFORE_CLOCK
    BusySpin,
}

/// The whole configuration of a node.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Registration timing, port and identity.
    pub registration: RegistrationConfig,
    /// UDP addressing (local broadcast or network multicast).
    pub network: NetworkConfig,
    /// shoal's native shared-memory ring.
    pub shm_ring: ShmRingConfig,
    /// How receives wait.
    pub receive: ReceiveConfig,
    /// Reliable (lossless) delivery over the native ring.
    pub reliable: ReliableConfig,
    /// History for late-joining subscribers: its bounds.
    pub history: HistoryConfig,
    /// The I/O thread.
    pub io: IoConfig,
    /// Bounds on what other processes can make this one store or do.
    pub limits: LimitsConfig,
    /// Which eCAL-facing transport layers publishers and subscribers use.
    pub layers: LayersConfig,
    /// Who may open the files this process creates in shared memory.
    pub security: SecurityConfig,
    /// eCAL's TCP layer: send queues, frame bound.
    pub tcp: TcpConfig,
    /// Service servers and clients: handler threads, sizes, connections, deadlines.
    pub service: ServiceConfig,
    /// Authentication between shoal peers (off without a key).
    pub auth: AuthConfig,
    /// eCAL's log channel: what `shoal::logging`'s tracing layer sends and where its receiver listens.
    pub logging: LoggingConfig,
    /// Where this configuration was read from (`None`: built-in defaults).
    pub source: Option<PathBuf>,
}

/// Registration settings (`[common]`, `[network] multicast_port`, `[shoal_registration]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct RegistrationConfig {
    /// Period of the registration samples (eCAL: 1000 ms).
    pub refresh: Duration,
    /// A remote entity not refreshed for this long is dropped (eCAL: 10000 ms).
    pub timeout: Duration,
    /// Registration UDP port (eCAL: 14000).
    pub port: u16,
    /// Apply samples sent by this process itself (eCAL: true).
    pub loopback: bool,
    /// eCAL `shm_transport_domain`, announced in registration; empty means the host name. shoal itself uses shared
    /// memory only between processes of one host name.
    pub shm_transport_domain: String,
}

/// UDP addressing (`[network]`, `[shoal_network]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfig {
    /// Network mode (multicast across hosts) instead of local broadcast.
    pub enabled: bool,
    /// Local-mode broadcast address (eCAL: 127.255.255.255).
    pub local_broadcast: Ipv4Addr,
    /// Network-mode multicast group (eCAL: 239.0.0.1).
    pub multicast_group: Ipv4Addr,
    /// Mask for the per-topic groups (eCAL: 255.255.255.240).
    pub multicast_mask: Ipv4Addr,
    /// Multicast TTL in network mode (eCAL: 3).
    pub multicast_ttl: u32,
    /// Interface address for multicast send/join; `0.0.0.0` = let the OS choose.
    pub multicast_interface: Ipv4Addr,
    /// UDP data layer port (eCAL: 14002).
    pub data_port: u16,
    /// Receive buffer asked for on the UDP sockets, registration and data (eCAL 6: 5 MiB).
    pub receive_buffer: usize,
    /// Send buffer asked for on the UDP send socket (eCAL 6: 5 MiB).
    pub send_buffer: usize,
    /// Bytes per second the UDP data layer of this process sends at most (a token bucket; 0 = unpaced).
    pub max_send_rate: u64,
    /// Which thread sends UDP data datagrams.
    pub send_mode: UdpSendMode,
    /// `auto` mode: messages of up to this many payload bytes that follow their publisher's previous one closely go
    /// through the I/O thread's batches; larger ones, and lone ones, are sent from the publisher's thread.
    pub send_batch_max: usize,
    /// `io_thread` and `auto` modes: how long the I/O thread may hold queued datagrams to batch more (zero: send as
    /// soon as it has drained the queue).
    pub send_flush_delay: Duration,
    /// `io_thread` and `auto` modes: messages the queue from the publishers to the I/O thread holds.
    pub send_queue: usize,
    /// `io_thread` and `auto` modes: bytes of datagrams the queue and the I/O thread hold unsent at most (one message
    /// is always taken, however large).
    pub send_queue_bytes: usize,
    /// `io_thread` and `auto` modes: how long a send that finds the queue full waits for room before it drops its
    /// message (zero: drops at once).
    pub send_queue_wait: Duration,
    /// Pack small samples between shoal peers (announced by subscribers, done by publishers on what they queue for
    /// the I/O thread: `io_thread` and `auto` modes).
    pub send_pack: bool,
    /// Bytes of a packed datagram at most.
    pub send_pack_bytes: usize,
}

/// Which thread sends a publisher's UDP data datagrams (`[shoal_network] send_mode`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpSendMode {
    /// Per message: a small message that follows its publisher's previous one within [`AUTO_LONE_GAP`] goes
    /// through the I/O thread's batches, a lone one or a large one (above `send_batch_max`) from the publisher's
    /// thread; a publisher's messages still queued keep its next ones in the queue, so none are reordered.
    Auto,
    /// The publisher's own thread, one `send_to` per datagram (lowest latency for a lone message).
    UserThread,
    /// The I/O thread, from a bounded queue, in `sendmmsg` batches with UDP GSO (most messages per second).
    IoThread,
}

/// `send_mode = auto`: a message sent this long or longer after its publisher's previous one is lone: it leaves
/// from the publisher's thread at once, without waking the I/O thread.
pub const AUTO_LONE_GAP: Duration = Duration::from_micros(50);

/// shoal's native shared-memory ring (`[shoal_shm_ring]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ShmRingConfig {
    /// Use shoal's native shared-memory ring between shoal processes on one host.
    pub enabled: bool,
    /// Slots per publisher ring (power of two).
    pub slot_count: u32,
    /// Initial payload bytes per slot; a larger message grows the ring.
    pub slot_size: usize,
    /// Whether ring segments go on the hugetlbfs mount `huge_pages_path`.
    pub huge_pages: HugePages,
    /// The hugetlbfs mount used for huge pages.
    pub huge_pages_path: PathBuf,
}

/// Whether shoal's rings use huge pages (`[shoal_shm_ring] huge_pages`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugePages {
    /// On the hugetlbfs mount `huge_pages_path` when it is there and has free pages; otherwise on normal pages,
    /// quietly (the fallback's reason is kept: `RingWriter::huge_pages_fallback`).
    Auto,
    /// On the hugetlbfs mount, with a warning when a ring cannot go there (it then uses normal pages).
    On,
    /// Normal pages (`/dev/shm`) only.
    Off,
}

impl HugePages {
    /// Whether a ring tries the hugetlbfs mount first.
    pub fn wanted(self) -> bool {
        self != HugePages::Off
    }
}

/// The shared secret of `[shoal_auth]`. Its `Debug` form shows only its length; its bytes are zeroed when it is
/// dropped, and it cannot be cloned (a configuration shares it: [`AuthConfig::key`] is an `Arc`), so no copy of the
/// secret outlives its use. (The HMAC state derived from it lives in the runtime until the runtime ends.)
#[derive(PartialEq, Eq)]
pub struct AuthKey(zeroize::Zeroizing<Vec<u8>>);

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthKey({} bytes)", self.0.len())
    }
}

impl AuthKey {
    /// Shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 16;
    /// Longest key accepted, in bytes.
    pub const MAX_LEN: usize = 64;

    /// A key of [`MIN_LEN`](Self::MIN_LEN)..=[`MAX_LEN`](Self::MAX_LEN) bytes.
    pub fn new(bytes: Vec<u8>) -> Option<AuthKey> {
        let bytes = zeroize::Zeroizing::new(bytes);
        (Self::MIN_LEN..=Self::MAX_LEN).contains(&bytes.len()).then_some(AuthKey(bytes))
    }

    /// A key written as hex digits (32..=128 of them; white space around them is ignored).
    pub fn from_hex(text: &str) -> Option<AuthKey> {
        let t = text.trim();
        if !t.len().is_multiple_of(2) {
            return None;
        }
        let digit = |c: u8| (c as char).to_digit(16);
        // Built in place in the key's own buffer, zeroed on every path (a partial key too).
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(t.len() / 2));
        for p in t.as_bytes().chunks_exact(2) {
            bytes.push((digit(p[0])? * 16 + digit(p[1])?) as u8);
        }
        (Self::MIN_LEN..=Self::MAX_LEN).contains(&bytes.len()).then_some(AuthKey(bytes))
    }

    /// The secret bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Authentication between shoal peers (`[shoal_auth]`): with a key, registration and UDP data of protected topics
/// are sent in an authenticated envelope, and unauthenticated ones for them are refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// The shared key (`None`: authentication off), shared by the clones of this configuration.
    pub key: Option<std::sync::Arc<AuthKey>>,
    /// Where the key was read from (`key_file`), for `shoal config show`.
    pub key_file: Option<PathBuf>,
    /// The key came from `key_hex`.
    pub key_from_hex: bool,
    /// Regular expression a topic name must match (whole name) to be protected.
    pub protected_topics: String,
    /// Largest difference between a sender's clock and ours (zero: not checked).
    pub max_age: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            key: None,
            key_file: None,
            key_from_hex: false,
            protected_topics: ".*".to_owned(),
            max_age: Duration::from_secs(60),
        }
    }
}

/// Access to shared-memory files (`[shoal_security]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    /// Who may open the files this process creates in `/dev/shm` (or on the huge-page mount): ring segments,
    /// doorbells, and the eCAL layer's memfiles, flag locks and events.
    pub shm_access: ShmAccess,
}

/// Who may open a process's shared-memory files (`[shoal_security] shm_access`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShmAccess {
    /// The owner only (mode 0600): processes of other users can neither read the rings nor ring the doorbells.
    Owner,
    /// The owner and its group (rings 0640, files others write 0660).
    Group,
    /// Every user (rings 0644, files others write 0666, as eCAL creates its own).
    All,
}

impl ShmAccess {
    /// Mode of a file other processes only read (ring segments).
    pub fn read_mode(self) -> u32 {
        match self {
            ShmAccess::Owner => 0o600,
            ShmAccess::Group => 0o640,
            ShmAccess::All => 0o644,
        }
    }

    /// Mode of a file other processes write too (doorbells, eCAL memfiles, flag locks and events).
    pub fn write_mode(self) -> u32 {
        match self {
            ShmAccess::Owner => 0o600,
            ShmAccess::Group => 0o660,
            ShmAccess::All => 0o666,
        }
    }
}

/// Reliable delivery over the native ring (`[shoal_reliable]`), in the spirit of ROS 2's RELIABLE + KEEP_ALL: a
/// reliable publisher waits, up to `timeout`, before it overwrites a message a reliable subscriber of another
/// process has not taken yet from its ring. A subscriber that stays a full ring behind for the whole timeout, or
/// whose process is gone, is taken out of that flow control for good (counted). Per publisher and subscriber also
/// with the builders' `reliable` options.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReliableConfig {
    /// Publishers are reliable by default.
    pub publishers: bool,
    /// Subscribers are reliable by default.
    pub subscribers: bool,
    /// How long a reliable publisher waits for a reliable subscriber at most.
    pub timeout: Duration,
}

impl Default for ReliableConfig {
    fn default() -> Self {
        ReliableConfig { publishers: false, subscribers: false, timeout: Duration::from_millis(1000) }
    }
}

/// History for late joiners (`[shoal_history]`): the bounds of what a publisher made with
/// `PublisherBuilder::history(n)` keeps for subscribers that match later.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    /// The largest `n` a publisher keeps (a larger one is taken as this).
    pub max_depth: u32,
    /// Payload bytes a publisher keeps at most: the oldest kept messages go first when the newest `n` exceed it.
    pub max_bytes: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { max_depth: 1024, max_bytes: 4 << 20 }
    }
}

/// Receive settings (`[shoal_receive]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiveConfig {
    /// How a blocking receive waits (`wait`, `spin_us`).
    pub wait: WaitStrategy,
    /// Measure the latency of received messages (`latency_statistics`, default on; sampled above ~1000 msgs/s).
    pub latency_statistics: bool,
    /// What a subscriber keeps of messages it has not taken yet (`queue_depth`, `queue_bytes`).
    pub queue: QueuePolicy,
}

/// What a subscriber keeps of the messages that arrived and were not taken yet (KEEP_LAST-like): the newest
/// `depth` messages, whatever their size, and beyond those older ones while all kept messages together stay
/// within `bytes` (each message counted as at least [`QueuePolicy::MIN_CHARGE`] bytes). When a new message
/// arrives and both bounds are exceeded, the oldest is dropped and counted. So a queue always fits `depth` times
/// the largest message seen, and a stream of small messages gets a deeper queue than one of large messages, as
/// the native ring trades slots for size.
///
/// Set per subscriber with [`SubscriberBuilder::queue`](crate::builder::SubscriberBuilder::queue), for all in
/// `[shoal_receive] queue_depth` / `queue_bytes`. The same-process queue and every eCAL-facing layer (eCAL shared
/// memory, UDP) deliver into this queue. Native-ring samples stay in the publisher's ring until they are read: a
/// ring keeps at least `queue_depth` slots of the publishing process when it grows for large messages, and a
/// subscriber given a policy with the builder that keeps fewer messages than the ring holds (counted in slots of the
/// ring's slot size) skips to its newest ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Newest messages always kept, whatever their size (at least 1).
    pub depth: usize,
    /// Bytes of messages kept beyond `depth`.
    pub bytes: usize,
}

impl QueuePolicy {
    /// The least a message counts for against `bytes` (so a stream of empty messages is bounded too).
    pub const MIN_CHARGE: usize = 64;

    /// `depth` messages, `bytes` beyond them (a depth of 0 is taken as 1).
    pub fn new(depth: usize, bytes: usize) -> QueuePolicy {
        QueuePolicy { depth: depth.max(1), bytes }
    }

    /// Exactly the newest `depth` messages (no byte budget beyond them).
    pub fn keep_last(depth: usize) -> QueuePolicy {
        QueuePolicy::new(depth, 0)
    }

    /// What a message that keeps `len` bytes of memory alive counts for against [`bytes`](Self::bytes): its payload,
    /// or, when its payload is a slice of a larger received buffer (a UDP message or packed datagram), its share of
    /// that buffer.
    pub fn charge(len: usize) -> usize {
        len.max(Self::MIN_CHARGE)
    }

    /// Whether a queue of `len` messages charged `charged` bytes in all is over the policy (drop the oldest).
    pub fn over(&self, len: usize, charged: usize) -> bool {
        len > self.depth && charged > self.bytes
    }

    /// Messages of `msg_len` bytes the policy keeps.
    pub fn capacity_for(&self, msg_len: usize) -> usize {
        self.depth.max(self.bytes / Self::charge(msg_len))
    }
}

impl Default for QueuePolicy {
    /// 16 messages (the fewest slots a grown native ring keeps), and 1 MiB beyond them (a native ring's default
    /// payload budget: 4096 slots of 256 bytes).
    fn default() -> Self {
        QueuePolicy { depth: 16, bytes: 1 << 20 }
    }
}

/// Bounds on what registration and data from other processes can cost this one (`[shoal_limits]`): a peer that
/// announces a million topics or sends 16 MB samples full of empty entries costs a bounded amount, counted.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest registration message accepted (bytes, after reassembly).
    pub registration_message_bytes: usize,
    /// Remote publishers and subscribers kept in all.
    pub remote_topics: usize,
    /// Remote publishers and subscribers kept per process.
    pub topics_per_process: usize,
    /// Remote processes kept.
    pub remote_processes: usize,
    /// Transport layer entries of one registration sample.
    pub layers_per_topic: usize,
    /// Bytes of one name or other text field of a registration sample.
    pub string_bytes: usize,
    /// Bytes of one type descriptor.
    pub descriptor_bytes: usize,
    /// Incomplete fragmented messages kept per sending address.
    pub fragmented_per_source: usize,
    /// Datagrams the I/O thread takes from one socket before it serves timers and the other sockets.
    pub receive_batch: usize,
    /// Bytes the registry keeps for remote topics and processes, all together (names, descriptors, layers).
    pub registry_bytes: usize,
    /// Bytes buffered for incomplete fragmented UDP data messages, all senders together (also the largest one).
    pub udp_reassembly_bytes: usize,
    /// Incomplete fragmented UDP data messages kept per sending address.
    pub udp_fragmented_per_source: usize,
    /// Senders whose replay window is kept, per channel (registration, UDP data), with `[shoal_auth]`.
    pub auth_senders: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            registration_message_bytes: 4 << 20,
            remote_topics: 20_000,
            topics_per_process: 2_000,
            remote_processes: 2_000,
            layers_per_topic: 16,
            string_bytes: 4096,
            descriptor_bytes: 1 << 20,
            fragmented_per_source: 4,
            receive_batch: 256,
            registry_bytes: 24 << 20,
            udp_reassembly_bytes: 64 << 20,
            udp_fragmented_per_source: 8,
            auth_senders: 1024,
        }
    }
}

/// eCAL's TCP layer (`[shoal_tcp]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// Bytes queued per subscriber connection beyond what its socket buffer holds; a message that does not fit
    /// is dropped whole (counted) or, with `send_timeout_ms`, waited for.
    pub send_queue_bytes: usize,
    /// 0: a full send queue drops the message (never blocks the publisher); > 0: the publisher waits up to this
    /// long for room, then drops.
    pub send_timeout_ms: u32,
    /// Largest message a subscriber accepts; a larger frame is skipped without being stored, and counted.
    pub max_message_bytes: usize,
    /// A publisher closes a subscriber connection that has not sent its handshake and been admitted within this
    /// long; a subscriber closes a connection whose publisher has not answered its handshake within this long.
    pub handshake_timeout_ms: u32,
    /// A publisher closes a subscriber connection that takes none of the bytes queued for it for this long.
    pub stall_timeout_ms: u32,
    /// Subscriber connections all publishers of the process hold at most (admitted or still in their handshake).
    pub max_sessions: usize,
    /// Subscriber connections from one address all publishers of the process hold at most.
    pub max_sessions_per_source: usize,
    /// Connections to publishers all subscribers of the process hold at most (connected or connecting).
    pub max_connections: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            send_queue_bytes: 32 << 20,
            send_timeout_ms: 0,
            max_message_bytes: 64 << 20,
            handshake_timeout_ms: 5000,
            stall_timeout_ms: 10_000,
            max_sessions: 1024,
            max_sessions_per_source: 256,
            max_connections: 1024,
        }
    }
}

/// eCAL's log channel (`[monitoring] filter_log_udp`, `[shoal_logging]`): the records `shoal::logging`'s tracing
/// layer sends as eCAL log messages and the port its `LogReceiver` listens on. The addresses are registration's
/// (`[network]`: the local broadcast address, or the multicast group in network mode), as eCAL's.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct LoggingConfig {
    /// eCAL's level filter of its UDP log sink: a bit mask of eCAL's `eLogLevel` values (info 1, warning 2,
    /// error 4, fatal 8, debug1..4 16..128; eCAL: info, warning, error and fatal).
    pub udp_levels: u8,
    /// UDP port of log messages (eCAL 6: `logging.provider.udp.port` and `logging.receiver.udp.port`, 14001).
    pub port: u16,
    /// Records per second the layer sends at most (a token bucket holding one second's records); more are dropped
    /// and counted.
    pub max_rate: u32,
    /// Bytes of a record's content at most; a longer one is cut (on a character boundary) and counted.
    pub max_record_bytes: usize,
    /// Records waiting for the sender thread at most; a record that finds the queue full is dropped and counted.
    pub queue: usize,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig { udp_levels: 0x0f, port: 14001, max_rate: 1000, max_record_bytes: 4096, queue: 1024 }
    }
}

/// Service servers and clients (`[shoal_service]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceConfig {
    /// Threads that run the method handlers of all servers of the process.
    pub handler_threads: usize,
    /// Requests waiting for a handler thread, for all servers; a request beyond is answered as failed at once.
    pub max_pending: usize,
    /// Largest request a server reads (and a client sends); a larger one closes the connection (counted).
    pub max_request_bytes: usize,
    /// Largest response a client reads (and a server sends: a larger one is answered as failed).
    pub max_response_bytes: usize,
    /// Client connections all servers of the process hold at most; a further one is closed at once (counted).
    pub max_sessions: usize,
    /// A server closes a connection that has not completed its handshake within this long.
    pub handshake_timeout_ms: u32,
    /// A server closes a connection that sent no request for this long (eCAL clients connect again).
    pub idle_timeout_ms: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            handler_threads: 2,
            max_pending: 1024,
            max_request_bytes: 64 << 20,
            max_response_bytes: 64 << 20,
            max_sessions: 1024,
            handshake_timeout_ms: 5000,
            idle_timeout_ms: 600_000,
        }
    }
}

/// I/O thread settings (`[shoal_io]`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct IoConfig {
    /// CPUs the I/O thread is pinned to (empty: no pinning).
    pub cpu_affinity: Vec<usize>,
}

/// An eCAL-facing layer, as named in the layer priority lists (`[publisher] priority_local`/`priority_remote`).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EcalLayer {
    /// eCAL shared memory (memfiles): `shm`.
    Shm,
    /// eCAL UDP multicast / local broadcast: `udp` (eCAL 5: `udp_mc`).
    Udp,
    /// eCAL TCP (tcp_pubsub): `tcp`.
    Tcp,
}

impl EcalLayer {
    /// The name used in `ecal.ini` (eCAL 6's yaml names).
    pub fn name(self) -> &'static str {
        match self {
            EcalLayer::Shm => "shm",
            EcalLayer::Udp => "udp",
            EcalLayer::Tcp => "tcp",
        }
    }
}

/// Which eCAL-facing transport layers are on (as in eCAL 6: publishers serve shm, udp and tcp, subscribers
/// receive shm and udp), and in which order a publisher chooses among those a subscriber has enabled.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayersConfig {
    /// Publishers may serve eCAL shared-memory subscribers (memfiles).
    pub pub_shm: bool,
    /// Publishers may serve UDP subscribers.
    pub pub_udp: bool,
    /// Subscribers read eCAL shared-memory memfiles.
    pub sub_shm: bool,
    /// Subscribers receive UDP.
    pub sub_udp: bool,
    /// Publishers may serve TCP subscribers (`[publisher] use_tcp`; eCAL 6 default on).
    pub pub_tcp: bool,
    /// Subscribers connect to publishers' TCP servers (`[subscriber] tcp_rec_enabled`; eCAL 6 default off).
    pub sub_tcp: bool,
    /// Layer order for a subscriber on this host (eCAL 6 `layer_priority_local`: shm, udp, tcp).
    pub priority_local: Vec<EcalLayer>,
    /// Layer order for a subscriber on another host (eCAL 6 `layer_priority_remote`: udp, tcp).
    pub priority_remote: Vec<EcalLayer>,
    /// Smallest payload capacity of a publisher's eCAL memfile, bytes (`[publisher] memfile_minsize`).
    pub memfile_min_size: u64,
    /// Extra capacity when a memfile is re-created for a larger payload, % (`[publisher] memfile_reserve`).
    pub memfile_reserve_percent: u64,
    /// How long a publisher waits for every eCAL shm subscriber process to acknowledge a message, ms; 0 = never
    /// (`[publisher] memfile_ack_timeout`).
    pub memfile_ack_timeout_ms: u32,
    /// Memfiles a publisher writes round-robin (`[publisher] memfile_buffer_count`).
    pub memfile_buffer_count: u32,
}

impl Default for LayersConfig {
    fn default() -> Self {
        LayersConfig {
            pub_shm: true,
            pub_udp: true,
            sub_shm: true,
            sub_udp: true,
            pub_tcp: true,
            sub_tcp: false,
            priority_local: vec![EcalLayer::Shm, EcalLayer::Udp, EcalLayer::Tcp],
            priority_remote: vec![EcalLayer::Udp, EcalLayer::Tcp],
            // eCAL's defaults.
            memfile_min_size: 4096,
            memfile_reserve_percent: 50,
            memfile_ack_timeout_ms: 0,
            memfile_buffer_count: 1,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            registration: RegistrationConfig {
                refresh: Duration::from_millis(1000),
                timeout: Duration::from_millis(10000),
                port: 14000,
                loopback: true,
                shm_transport_domain: String::new(),
            },
            network: NetworkConfig {
                enabled: false,
                local_broadcast: Ipv4Addr::new(127, 255, 255, 255),
                multicast_group: Ipv4Addr::new(239, 0, 0, 1),
                multicast_mask: Ipv4Addr::new(255, 255, 255, 240),
                multicast_ttl: 3,
                multicast_interface: Ipv4Addr::UNSPECIFIED,
                data_port: 14002,
                receive_buffer: 5 << 20,
                send_buffer: 5 << 20,
                max_send_rate: 0,
                send_mode: UdpSendMode::Auto,
                send_batch_max: 16 << 10,
                send_flush_delay: Duration::ZERO,
                send_queue: 4096,
                send_queue_bytes: 16 << 20,
                send_queue_wait: Duration::from_millis(10),
                send_pack: true,
                send_pack_bytes: 1472,
            },
            shm_ring: ShmRingConfig {
                enabled: true,
                // 1 MiB of payload per publisher: 4096 small slots absorb a reader's scheduling gaps of a few ms at
                // a million messages per second; larger messages trade slots for size within the same budget.
                slot_count: 4096,
                slot_size: 256,
                huge_pages: HugePages::Auto,
                huge_pages_path: PathBuf::from("/dev/hugepages"),
            },
            receive: ReceiveConfig {
                wait: WaitStrategy::Block,
                latency_statistics: true,
                queue: QueuePolicy::default(),
            },
            reliable: ReliableConfig::default(),
            history: HistoryConfig::default(),
            limits: LimitsConfig::default(),
            io: IoConfig { cpu_affinity: Vec::new() },
            layers: LayersConfig::default(),
            security: SecurityConfig { shm_access: ShmAccess::Owner },
            tcp: TcpConfig::default(),
            service: ServiceConfig::default(),
            auth: AuthConfig::default(),
            logging: LoggingConfig::default(),
            source: None,
        }
    }
}
