//! Received samples: the owned [`Sample`] and the zero-copy [`SampleRef`], shared by the transports (which deliver
//! them) and the public API (which hands them out), so it sits below both.

use std::sync::Arc;

use crate::stats::Via;
use crate::types::TypeInfo;

/// Bytes of a received sample: shared with other same-process subscribers, or owned.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    Shared(Arc<[u8]>),
    Owned(Vec<u8>),
}

impl Payload {
    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Shared(a) => a,
            Payload::Owned(v) => v,
        }
    }
}

/// The metadata accessors [`Sample`] and [`SampleRef`] share (same fields in both).
macro_rules! sample_metadata {
    () => {
        /// Send time stamped by the publisher, in µs since the UNIX epoch (eCAL's unit).
        pub fn send_time_us(&self) -> i64 {
            self.send_time_ns.div_euclid(1000)
        }

        /// Send time stamped by the publisher, in ns since the UNIX epoch (µs precision from eCAL's layers).
        pub fn send_time_ns(&self) -> i64 {
            self.send_time_ns
        }

        /// How the sample reached this subscriber.
        pub fn via(&self) -> Via {
            self.via
        }

        /// The publisher's message counter: 1 for its first message, +1 for each one after.
        pub fn clock(&self) -> u64 {
            self.clock
        }

        /// The publisher's entity id (as in its registration's `topic_id`).
        pub fn publisher_id(&self) -> u64 {
            self.publisher_id
        }
    };
}

/// A received message with its metadata; owns (or shares) its payload.
#[derive(Debug, Clone)]
pub struct Sample {
    pub(crate) payload: Payload,
    /// Send time stamped by the publisher, ns since the UNIX epoch (µs × 1000 from eCAL layers).
    pub(crate) send_time_ns: i64,
    /// How it arrived.
    pub(crate) via: Via,
    pub(crate) clock: u64,
    pub(crate) publisher_id: u64,
    pub(crate) type_info: Arc<TypeInfo>,
    pub(crate) topic: Arc<str>,
}

impl Sample {
    /// The message bytes.
    pub fn payload(&self) -> &[u8] {
        self.payload.as_slice()
    }

    sample_metadata!();

    /// The publisher's type information.
    pub fn type_info(&self) -> &TypeInfo {
        &self.type_info
    }

    /// The topic name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// A borrowed view of this sample, as `recv_with` closures get it.
    pub(crate) fn view(&self) -> SampleRef<'_> {
        SampleRef {
            payload: self.payload(),
            send_time_ns: self.send_time_ns,
            via: self.via,
            clock: self.clock,
            publisher_id: self.publisher_id,
            type_info: &self.type_info,
            topic: &self.topic,
        }
    }

    /// Takes the payload out as a `Vec` (copies only when it is shared).
    pub fn into_payload(self) -> Vec<u8> {
        match self.payload {
            Payload::Owned(v) => v,
            Payload::Shared(a) => a.to_vec(),
        }
    }
}

/// A zero-copy view of a received message: the payload may point straight into a shared-memory slot.
///
/// Given to the closure of [`Subscriber::recv_with`](crate::Subscriber::recv_with). The slot is checked after the
/// closure returns: if the publisher overwrote it meanwhile, the closure's result is discarded and counted as a drop.
#[derive(Debug, Clone, Copy)]
pub struct SampleRef<'a> {
    pub(crate) payload: &'a [u8],
    pub(crate) send_time_ns: i64,
    pub(crate) via: Via,
    pub(crate) clock: u64,
    pub(crate) publisher_id: u64,
    pub(crate) type_info: &'a Arc<TypeInfo>,
    pub(crate) topic: &'a Arc<str>,
}

impl<'a> SampleRef<'a> {
    /// The message bytes (in place).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    sample_metadata!();

    /// The publisher's type information.
    pub fn type_info(&self) -> &'a TypeInfo {
        self.type_info.as_ref()
    }

    /// The topic name.
    pub fn topic(&self) -> &'a str {
        self.topic.as_ref()
    }

    /// Copies the view into an owned [`Sample`].
    pub fn to_owned_sample(&self) -> Sample {
        Sample {
            payload: Payload::Owned(self.payload.to_vec()),
            send_time_ns: self.send_time_ns,
            via: self.via,
            clock: self.clock,
            publisher_id: self.publisher_id,
            type_info: Arc::clone(self.type_info),
            topic: Arc::clone(self.topic),
        }
    }
}

/// Now, in ns since the UNIX epoch (the clock publishers stamp send times with; eCAL's unit is its µs).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}
