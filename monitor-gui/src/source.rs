//! Where the monitor's data comes from: snapshots of a [`shoal::Node`] and the messages of the inspected topic,
//! behind two small traits so the tests and the screenshot script can script them.

use std::sync::Arc;
use std::time::SystemTime;

use shoal::TypeInfo;
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
