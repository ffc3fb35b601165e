//! Where the monitor's data comes from: snapshots of a [`shoal::Node`], the messages of the inspected topic and
//! every process's log messages ([`shoal::logging`]), behind three small traits so the tests and the screenshot
//! script can script them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// A received message, as the inspector keeps it.
#[derive(Debug, Clone)]
pub struct Message {
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

/// Delivers the messages of one topic at a time.
pub trait MessageSource {
    /// Inspect `topic` from now on (`None`: none).
    fn select(&mut self, topic: Option<&str>);
    /// Messages that arrived since the last call, oldest first.
    fn poll(&mut self, out: &mut Vec<Message>);
}

/// Snapshots of a shoal node.
#[derive(Debug, Clone)]
pub struct NodeSnapshots(pub shoal::Node);

impl SnapshotSource for NodeSnapshots {
    fn snapshot(&mut self) -> Snapshot {
        self.0.snapshot()
    }
}

/// The inspected topic's messages, through a raw subscriber of a shoal node.
#[derive(Debug)]
pub struct NodeMessages {
    node: shoal::Node,
    sub: Option<shoal::Subscriber>,
    topic: Option<String>,
    last_type: Option<Arc<TypeInfo>>,
}

impl NodeMessages {
    /// Subscribes through `node` when a topic is selected.
    pub fn new(node: shoal::Node) -> NodeMessages {
        NodeMessages { node, sub: None, topic: None, last_type: None }
    }
}

impl MessageSource for NodeMessages {
    fn select(&mut self, topic: Option<&str>) {
        if topic == self.topic.as_deref() {
            return;
        }
        self.sub = None;
        self.topic = topic.map(str::to_owned);
        if let Some(t) = topic {
            match self.node.subscriber(t).create() {
                Ok(s) => self.sub = Some(s),
                Err(e) => tracing::warn!(topic = t, error = %e, "cannot subscribe for the inspector"),
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<Message>) {
        let Some(sub) = &self.sub else { return };
        // Bounded: a fast topic must not keep the UI thread here.
        for _ in 0..256 {
            let Some(s) = sub.try_recv() else { break };
            // One type information for a run of messages of the same type.
            let type_info = match &self.last_type {
                Some(t) if **t == *s.type_info() => t.clone(),
                _ => Arc::new(s.type_info().clone()),
            };
            self.last_type = Some(type_info.clone());
            out.push(Message {
                payload: Arc::from(s.payload()),
                type_info,
                publisher_id: s.publisher_id(),
                clock: s.clock(),
                send_time_us: s.send_time_us(),
                received_at: SystemTime::now(),
            });
        }
    }
}

/// No messages (headless mode).
#[derive(Debug, Default)]
pub struct NoMessages;

impl MessageSource for NoMessages {
    fn select(&mut self, _topic: Option<&str>) {}
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
