//! Where the monitor's data comes from: snapshots of a [`shoal::Node`], the messages of the inspected and the
//! plotted topics and every process's log messages ([`shoal::logging`]), behind three small traits so the tests and
//! the screenshot script can script them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::SystemTime;

use shoal::TypeInfo;
use shoal::logging::{LogReceiver, LogRecord};
use shoal::monitor::Snapshot;

/// Gives one snapshot per refresh.
pub trait SnapshotSource {
    /// What registration knows now.
    fn snapshot(&mut self) -> Snapshot;
}

/// A received message, as the inspector keeps it and the field plot reads it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The topic it came on.
    pub topic: Arc<str>,
    /// The bytes.
    pub payload: Arc<[u8]>,
    /// The publisher's type information.
    pub type_info: Arc<TypeInfo>,
    /// The publisher's entity id.
    pub publisher_id: u64,
    /// The publisher's message counter.
    pub clock: u64,
    /// Send time, µs since the UNIX epoch.
    pub send_time_us: i64,
    /// When the monitor took it.
    pub received_at: SystemTime,
}

/// Delivers the messages of the topics the monitor follows: the inspected one and the plotted ones.
pub trait MessageSource {
    /// Follow exactly `topics` from now on (sorted, no duplicates; empty: none). A topic followed before stays
    /// subscribed; one no longer listed is unsubscribed.
    fn follow(&mut self, topics: &[Arc<str>]);
    /// Messages that arrived since the last call, oldest first per topic.
    fn poll(&mut self, out: &mut Vec<Message>);
    /// Messages of `topic` lost since it was followed, before the monitor took them (the subscriber's drops and
    /// what did not fit in the source's queue).
    fn lost(&self, _topic: &str) -> u64 {
        0
    }
}

/// Snapshots of a shoal node.
#[derive(Debug, Clone)]
pub struct NodeSnapshots(pub shoal::Node);

impl SnapshotSource for NodeSnapshots {
    fn snapshot(&mut self) -> Snapshot {
        self.0.snapshot()
    }
}

/// Messages a followed topic queues between the subscriber's callback and the UI; more are dropped and counted.
pub const MESSAGE_QUEUE: usize = 4096;
/// Payload bytes a followed topic queues, at most (beyond them messages are dropped and counted): a topic of
/// large messages does not hold [`MESSAGE_QUEUE`] of them while the UI is not drawn.
pub const MESSAGE_QUEUE_BYTES: usize = 16 << 20;
/// Payload bytes all followed topics (the inspected one and up to 16 plotted ones) queue together, at most: more
/// are dropped and counted on the topic whose message it was.
pub const MESSAGE_QUEUE_TOTAL_BYTES: usize = 64 << 20;

/// One followed topic: a callback subscriber that copies each message into a queue bounded by count and bytes on
/// the doorbell thread, so that messages keep being taken while the window is not drawn.
#[derive(Debug)]
struct Followed {
    sub: shoal::CallbackSubscriber,
    rx: mpsc::Receiver<Message>,
    overflow: Arc<AtomicU64>,
    /// Payload bytes in `rx`.
    queued_bytes: Arc<AtomicUsize>,
    /// Payload bytes in every followed topic's queue ([`MESSAGE_QUEUE_TOTAL_BYTES`]).
    total: Arc<AtomicUsize>,
}

impl Drop for Followed {
    fn drop(&mut self) {
        // What is left in the queue leaves the total with it.
        self.total.fetch_sub(self.queued_bytes.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// The followed topics' messages, through callback subscribers of a shoal node.
#[derive(Debug)]
pub struct NodeMessages {
    node: shoal::Node,
    topics: BTreeMap<Arc<str>, Followed>,
    total: Arc<AtomicUsize>,
}

impl NodeMessages {
    /// Subscribes through `node` to the topics followed.
    pub fn new(node: shoal::Node) -> NodeMessages {
        NodeMessages { node, topics: BTreeMap::new(), total: Arc::default() }
    }

    /// Payload bytes queued now in all followed topics together.
    pub fn queued_bytes(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    fn subscribe(&self, topic: &Arc<str>) -> Result<Followed, shoal::CreateError> {
        let (tx, rx) = mpsc::sync_channel(MESSAGE_QUEUE);
        let overflow = Arc::new(AtomicU64::new(0));
        let counted = overflow.clone();
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let queued = queued_bytes.clone();
        let (total, all) = (self.total.clone(), self.total.clone());
        let name = topic.clone();
        let mut last_type: Option<Arc<TypeInfo>> = None;
        let sub = self
            .node
            .subscriber(topic)
            .callback(move |s: &shoal::Sample| {
                let len = s.payload().len();
                if queued.load(Ordering::Relaxed) + len > MESSAGE_QUEUE_BYTES
                    || all.load(Ordering::Relaxed) + len > MESSAGE_QUEUE_TOTAL_BYTES
                {
                    counted.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // One type information for a run of messages of the same type.
                let type_info = match &last_type {
                    Some(t) if **t == *s.type_info() => t.clone(),
                    _ => Arc::new(s.type_info().clone()),
                };
                last_type = Some(type_info.clone());
                let m = Message {
                    topic: name.clone(),
                    payload: Arc::from(s.payload()),
                    type_info,
                    publisher_id: s.publisher_id(),
                    clock: s.clock(),
                    send_time_us: s.send_time_us(),
                    received_at: SystemTime::now(),
                };
                // Counted before it is sent, so that the UI's subtraction never comes first.
                queued.fetch_add(len, Ordering::Relaxed);
                all.fetch_add(len, Ordering::Relaxed);
                if tx.try_send(m).is_err() {
                    queued.fetch_sub(len, Ordering::Relaxed);
                    all.fetch_sub(len, Ordering::Relaxed);
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .create()?;
        Ok(Followed { sub, rx, overflow, queued_bytes, total })
    }
}

impl MessageSource for NodeMessages {
    fn follow(&mut self, topics: &[Arc<str>]) {
        self.topics.retain(|t, _| topics.contains(t));
        for t in topics {
            if self.topics.contains_key(t) {
                continue;
            }
            match self.subscribe(t) {
                Ok(f) => {
                    self.topics.insert(t.clone(), f);
                }
                Err(e) => {
                    tracing::warn!(topic = %shoal::monitor::printable(t), error = %e, "cannot subscribe for the inspector or the field plot")
                }
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<Message>) {
        // Bounded: at most one queue's worth per topic and call.
        for f in self.topics.values() {
            for m in f.rx.try_iter().take(MESSAGE_QUEUE) {
                f.queued_bytes.fetch_sub(m.payload.len(), Ordering::Relaxed);
                self.total.fetch_sub(m.payload.len(), Ordering::Relaxed);
                out.push(m);
            }
        }
    }

    fn lost(&self, topic: &str) -> u64 {
        self.topics.get(topic).map_or(0, |f| f.sub.drops() + f.overflow.load(Ordering::Relaxed))
    }
}

/// No messages (headless mode).
#[derive(Debug, Default)]
pub struct NoMessages;

impl MessageSource for NoMessages {
    fn follow(&mut self, _topics: &[Arc<str>]) {}
    fn poll(&mut self, _out: &mut Vec<Message>) {}
}

/// Delivers received log messages (every process's, on eCAL's log channel).
pub trait LogSource {
    /// Records that arrived since the last call, oldest first.
    fn poll(&mut self, out: &mut Vec<LogRecord>);
    /// Records dropped before the monitor took them (its queue was full).
    fn dropped(&self) -> u64 {
        0
    }
}

/// No log messages (headless mode, tests that do not script any).
#[derive(Debug, Default)]
pub struct NoLogs;

impl LogSource for NoLogs {
    fn poll(&mut self, _out: &mut Vec<LogRecord>) {}
}

/// Records queued between the receiving thread and the UI; more are dropped and counted.
pub const LOG_QUEUE: usize = 4096;

/// Log messages from a [`shoal::logging::LogReceiver`] on a thread of its own (`shoal-monitor-logs`), handed to the
/// UI through a bounded queue.
#[derive(Debug)]
pub struct ReceivedLogs {
    rx: mpsc::Receiver<LogRecord>,
    dropped: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
}

impl ReceivedLogs {
    /// Binds the log port of `cfg` and starts the receiving thread (it ends when this is dropped and a record or
    /// the next 500 ms come).
    pub fn start(cfg: &shoal::Config) -> std::io::Result<ReceivedLogs> {
        let mut receiver = LogReceiver::bind(cfg).map_err(std::io::Error::other)?;
        let (tx, rx) = mpsc::sync_channel(LOG_QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let thread_dropped = dropped.clone();
        let ended = Arc::new(AtomicBool::new(false));
        let thread_ended = ended.clone();
        std::thread::Builder::new().name("shoal-monitor-logs".into()).spawn(move || {
            loop {
                match receiver.recv_timeout(std::time::Duration::from_millis(500)) {
                    Ok(Some(r)) => match tx.try_send(r) {
                        Ok(()) => {}
                        Err(mpsc::TrySendError::Full(_)) => {
                            thread_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(mpsc::TrySendError::Disconnected(_)) => return,
                    },
                    // Nothing came in 500 ms: end if the monitor is gone.
                    Ok(None) => {
                        if thread_ended.load(Ordering::Relaxed) {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "log receiver stopped");
                        return;
                    }
                }
            }
        })?;
        Ok(ReceivedLogs { rx, dropped, ended })
    }
}

impl Drop for ReceivedLogs {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Relaxed);
    }
}

impl LogSource for ReceivedLogs {
    fn poll(&mut self, out: &mut Vec<LogRecord>) {
        // Bounded: the UI thread takes at most a queue's worth per frame.
        out.extend(self.rx.try_iter().take(LOG_QUEUE));
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Log records handed out as scripted (tests and screenshots): everything pushed, on the next poll.
#[derive(Debug, Default, Clone)]
pub struct ScriptedLogs(pub Arc<std::sync::Mutex<Vec<LogRecord>>>);

impl LogSource for ScriptedLogs {
    fn poll(&mut self, out: &mut Vec<LogRecord>) {
        out.append(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }
}
