//! [`LogLayer`]: tracing records → eCAL log messages, through a bounded queue and the `shoal-log` sender thread.

use std::fmt::{self, Write as _};
use std::io::IoSlice;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_queue::ArrayQueue;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;

use super::{LogLevel, LogRecord};
use crate::config::Config;
use crate::sys::mmsg::{OutMsg, send_mmsg};
use crate::transport::udp::net as udp_net;

/// How long the sender naps after a turn that sent something, so that a stream of records is sent in batches
/// (one wake-up per nap, not one per record).
const NAP: Duration = Duration::from_millis(10);
/// How long an idle sender sleeps at most before it looks at the stop flag again.
const IDLE_SLEEP: Duration = Duration::from_secs(1);

/// What the layer sent and refused, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogLayerStats {
    /// Records queued for sending (their level selected, within the rate, room in the queue).
    pub queued: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Records dropped because the rate limit (`[shoal_logging] max_rate`) had no token left.
    pub dropped_rate: u64,
    /// Records dropped because the queue (`[shoal_logging] queue`) was full.
    pub dropped_queue_full: u64,
    /// Datagrams the socket refused (its send buffer full, no route).
    pub send_failed: u64,
    /// Records whose content was cut to `[shoal_logging] max_record` bytes (sent, not dropped).
    pub truncated: u64,
}

impl LogLayerStats {
    /// Records that were not sent, for any reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_rate + self.dropped_queue_full + self.send_failed
    }
}

/// A record waiting for the sender: the identity fields are the sender's, set once.
#[derive(Debug)]
struct Pending {
    time_us: i64,
    level: LogLevel,
    content: String,
}

/// A token bucket: `rate` tokens per second, at most `rate` held.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

#[derive(Debug)]
struct Shared {
    queue: ArrayQueue<Pending>,
    bucket: Mutex<Bucket>,
    rate: f64,
    /// The sender is in its long sleep: a producer wakes it.
    idle: AtomicBool,
    stop: AtomicBool,
    sender: OnceLock<Thread>,
    queued: AtomicU64,
    sent: AtomicU64,
    /// Records the sender has finished with (sent or not).
    done: AtomicU64,
    dropped_rate: AtomicU64,
    dropped_queue_full: AtomicU64,
    send_failed: AtomicU64,
    truncated: AtomicU64,
}

impl Shared {
    fn take_token(&self, now: Instant) -> bool {
        let mut b = crate::sync::lock(&self.bucket);
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.last = now;
        b.tokens = (b.tokens + elapsed * self.rate).min(self.rate);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn wake(&self) {
        if let Some(t) = self.sender.get() {
            t.unpark();
        }
    }

    fn stats(&self) -> LogLayerStats {
        LogLayerStats {
            queued: self.queued.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            dropped_rate: self.dropped_rate.load(Ordering::Relaxed),
            dropped_queue_full: self.dropped_queue_full.load(Ordering::Relaxed),
            send_failed: self.send_failed.load(Ordering::Relaxed),
            truncated: self.truncated.load(Ordering::Relaxed),
        }
    }
}

/// Stops the sender thread when the last clone of its layer is dropped (it sends what is queued first).
#[derive(Debug)]
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        self.0.wake();
    }
}

/// Reads a layer's [`LogLayerStats`] after the layer was moved into a subscriber.
#[derive(Debug, Clone)]
pub struct LogStatsHandle(Arc<Shared>);

impl LogStatsHandle {
    /// The counters now.
    pub fn stats(&self) -> LogLayerStats {
        self.0.stats()
    }

    /// Waits until every record queued so far has been handed to the socket, at most `timeout`; true when it has
    /// (call it before a process exits so its last records are not lost with the sender thread).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let target = self.0.queued.load(Ordering::SeqCst);
        self.0.wake();
        while self.0.done.load(Ordering::SeqCst) < target {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

/// The sending side of the process's identity in each message.
#[derive(Debug, Clone)]
struct Identity {
    host_name: String,
    process_id: i32,
    process_name: String,
    unit_name: String,
}

/// A `tracing_subscriber::Layer` that sends the records `[monitoring] filter_log_udp` selects as eCAL 6.1.1 log
/// messages on eCAL's UDP log channel (see the [module](super) documentation). The application installs it; it
/// never filters what other layers see.
#[derive(Debug, Clone)]
pub struct LogLayer {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
    levels: u8,
    max_record: usize,
    identity: Arc<Mutex<Identity>>,
}

/// Why a [`LogLayer`] could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogLayerError {
    /// The UDP send socket.
    #[error("cannot open the log message socket: {0}")]
    Socket(#[source] std::io::Error),
    /// The sender thread.
    #[error("cannot start the log sender thread: {0}")]
    Thread(#[source] std::io::Error),
}

impl LogLayer {
    /// A layer sending with `cfg`'s addresses (`[network]`), port, levels and bounds (`[shoal_logging]`), and the
    /// sender thread `shoal-log`. The unit name is the executable's file name until [`LogLayer::unit_name`].
    pub fn new(cfg: &Config) -> Result<LogLayer, LogLayerError> {
        LogLayer::build(cfg, true)
    }

    /// [`LogLayer::new`]; without `spawn` no sender thread runs (tests of the bounds: nothing drains the queue).
    pub(super) fn build(cfg: &Config, spawn: bool) -> Result<LogLayer, LogLayerError> {
        let net = &cfg.network;
        let iface = if net.enabled { udp_net::multicast_interface(net) } else { Ipv4Addr::UNSPECIFIED };
        let socket = udp_net::open_send_socket(net, iface).map_err(LogLayerError::Socket)?;
        let to = if net.enabled { net.multicast_group } else { net.local_broadcast };
        let dest = SocketAddrV4::new(to, cfg.logging.port);
        let rate = f64::from(cfg.logging.max_rate.max(1));
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(cfg.logging.queue.max(1)),
            bucket: Mutex::new(Bucket { tokens: rate, last: Instant::now() }),
            rate,
            idle: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            sender: OnceLock::new(),
            queued: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            dropped_rate: AtomicU64::new(0),
            dropped_queue_full: AtomicU64::new(0),
            send_failed: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
        });
        let process_name = crate::sys::current_exe_name();
        let unit = std::path::Path::new(&process_name)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| process_name.clone());
        let identity = Arc::new(Mutex::new(Identity {
            host_name: crate::sys::host_name(),
            process_id: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            process_name,
            unit_name: unit,
        }));
        if spawn {
            let thread_shared = Arc::clone(&shared);
            let thread_identity = Arc::clone(&identity);
            let thread = std::thread::Builder::new()
                .name("shoal-log".into())
                .spawn(move || run_sender(&thread_shared, &thread_identity, &socket, dest))
                .map_err(LogLayerError::Thread)?;
            // Set once, here: the thread exists.
            let _ = shared.sender.set(thread.thread().clone());
        }
        Ok(LogLayer {
            _stop: Arc::new(StopOnDrop(Arc::clone(&shared))),
            shared,
            levels: cfg.logging.udp_levels,
            max_record: cfg.logging.max_record_bytes.max(4),
            identity,
        })
    }

    /// The unit name the messages carry (eCAL: the name a process initialised eCAL with; the monitor shows it).
    pub fn unit_name(self, name: &str) -> LogLayer {
        crate::sync::lock(&self.identity).unit_name = name.to_string();
        self
    }

    /// The handle that reads this layer's counters once the layer is installed.
    pub fn stats_handle(&self) -> LogStatsHandle {
        LogStatsHandle(Arc::clone(&self.shared))
    }

    /// Offers one record (the layer's `on_event` without tracing): level filter, content bound, rate, queue. True
    /// when it was queued.
    fn offer(&self, level: LogLevel, format: impl FnOnce(&mut Bounded)) -> bool {
        if self.levels & level.bit() == 0 {
            return false;
        }
        let now = Instant::now();
        if !self.shared.take_token(now) {
            self.shared.dropped_rate.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut content = Bounded::new(self.max_record);
        format(&mut content);
        if content.truncated {
            self.shared.truncated.fetch_add(1, Ordering::Relaxed);
        }
        let time_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        let pending = Pending { time_us, level, content: content.text };
        if self.shared.queue.push(pending).is_err() {
            self.shared.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        // The sender sleeps until woken when idle; while busy it naps and comes back on its own, unless the queue
        // fills towards its bound.
        if self.shared.idle.load(Ordering::SeqCst) || self.shared.queue.len() * 2 >= self.shared.queue.capacity() {
            self.shared.idle.store(false, Ordering::SeqCst);
            self.shared.wake();
        }
        true
    }

    /// [`LogLayer::offer`] with plain text (tests and the bench).
    #[cfg(test)]
    pub(super) fn offer_text(&self, level: LogLevel, text: &str) -> bool {
        self.offer(level, |b| {
            let _ = b.write_str(text);
        })
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let level = LogLevel::from_tracing(*event.metadata().level());
        self.offer(level, |b| event.record(&mut FieldWriter { out: b, first: true }));
    }
}

/// A string that takes at most `max` bytes; what does not fit is cut on a character boundary and marked `...`.
#[derive(Debug)]
pub(super) struct Bounded {
    pub(super) text: String,
    max: usize,
    pub(super) truncated: bool,
}

impl Bounded {
    pub(super) fn new(max: usize) -> Bounded {
        Bounded { text: String::new(), max, truncated: false }
    }
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.truncated {
            return Ok(());
        }
        if self.text.len() + s.len() <= self.max {
            self.text.push_str(s);
            return Ok(());
        }
        let room = self.max.saturating_sub(3).saturating_sub(self.text.len());
        let mut cut = room.min(s.len());
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        // The text may already be longer than max - 3: cut it back on a character boundary.
        let mut keep = self.text.len().min(self.max.saturating_sub(3));
        while !self.text.is_char_boundary(keep) {
            keep -= 1;
        }
        self.text.truncate(keep);
        self.text.push_str("...");
        self.truncated = true;
        Ok(())
    }
}

/// Writes an event's message, then its other fields as ` key=value`.
struct FieldWriter<'a> {
    out: &'a mut Bounded,
    first: bool,
}

impl FieldWriter<'_> {
    fn sep(&mut self) {
        if !self.first {
            let _ = self.out.write_char(' ');
        }
        self.first = false;
    }
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.sep();
        if field.name() != "message" {
            let _ = write!(self.out, "{}=", field.name());
        }
        let _ = self.out.write_str(value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.sep();
        if field.name() == "message" {
            let _ = write!(self.out, "{value:?}");
        } else {
            let _ = write!(self.out, "{}={value:?}", field.name());
        }
    }
}

/// Records the sender encodes and hands to one `sendmmsg` at most.
const BATCH: usize = 64;

/// The sender thread: drains the queue, sends each record as one datagram, a batch per `sendmmsg` (non-blocking),
/// naps while busy, sleeps until woken when idle; ends, after sending what is queued, when the layer is gone. It
/// logs nothing.
fn run_sender(shared: &Shared, identity: &Mutex<Identity>, socket: &socket2::Socket, dest: SocketAddrV4) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
    let mut id_counter: i32 = 0;
    let mut next_id = move || {
        id_counter = id_counter.wrapping_add(1);
        id_counter
    };
    let mut datagrams: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    loop {
        let mut sent_any = false;
        let mut record: Option<LogRecord> = None;
        loop {
            datagrams.clear();
            let mut records = 0u64;
            while records < BATCH as u64 {
                let Some(p) = shared.queue.pop() else { break };
                let r = record.get_or_insert_with(|| {
                    let id = crate::sync::lock(identity);
                    LogRecord {
                        time_us: 0,
                        host_name: id.host_name.clone(),
                        process_id: id.process_id,
                        process_name: id.process_name.clone(),
                        unit_name: id.unit_name.clone(),
                        level: LogLevel::Info,
                        content: String::new(),
                    }
                });
                r.time_us = p.time_us;
                r.level = p.level;
                r.content = p.content;
                datagrams.extend(super::wire::encode_datagrams(r, &mut next_id));
                records += 1;
            }
            if records == 0 {
                break;
            }
            send_batch(shared, fd, dest, &datagrams);
            shared.done.fetch_add(records, Ordering::SeqCst);
            sent_any = true;
        }
        if shared.stop.load(Ordering::SeqCst) && shared.queue.is_empty() {
            return;
        }
        if sent_any {
            std::thread::park_timeout(NAP);
        } else {
            shared.idle.store(true, Ordering::SeqCst);
            // A record queued between the drain and `idle` being set saw `idle` false: look again before sleeping.
            // (Should a wake-up still be missed, the record waits IDLE_SLEEP at most.)
            if shared.queue.is_empty() && !shared.stop.load(Ordering::SeqCst) {
                std::thread::park_timeout(IDLE_SLEEP);
            }
            shared.idle.store(false, Ordering::SeqCst);
        }
    }
}

/// Sends `datagrams` to `dest` with as few `sendmmsg` calls as the kernel allows; a datagram it refuses is counted
/// and skipped.
fn send_batch(shared: &Shared, fd: std::os::fd::RawFd, dest: SocketAddrV4, datagrams: &[Vec<u8>]) {
    let slices: Vec<[IoSlice<'_>; 1]> = datagrams.iter().map(|d| [IoSlice::new(d)]).collect();
    let msgs: Vec<OutMsg<'_>> = slices.iter().map(|iov| OutMsg { dest, iov, segment: None }).collect();
    let mut from = 0;
    while let Some(rest) = msgs.get(from..).filter(|r| !r.is_empty()) {
        match send_mmsg(fd, rest) {
            Ok(n) if n > 0 => {
                shared.sent.fetch_add(n as u64, Ordering::Relaxed);
                from += n;
            }
            _ => {
                shared.send_failed.fetch_add(1, Ordering::Relaxed);
                from += 1;
            }
        }
    }
}
