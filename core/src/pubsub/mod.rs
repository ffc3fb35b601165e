//! Publishers, subscribers, their builders, and the per-process runtime that connects them over the transports.

pub(crate) mod builder;
pub(crate) mod dispatch;
pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod meter;
pub(crate) mod publisher;
pub(crate) mod runtime;
pub(crate) mod subscriber;
pub(crate) mod typed;
pub(crate) mod waker;

use std::path::PathBuf;

use crate::transport::shm_ring::{DoorbellCreateError, DoorbellOpenError, RingCreateError, SlotError};

/// A shared-memory file of shoal's (a publisher's ring segment, this process's doorbell) could not be made.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A ring of this geometry cannot be made: `[shoal_shm_ring] slot_count` must be a power of two within the
    /// allowed range, `slot_size` and the whole segment within their limits (`shoal config check` names them).
    #[error("a shared-memory ring of {slot_count} slots of {slot_size} bytes is outside the allowed geometry")]
    Geometry {
        /// Slots asked for.
        slot_count: u32,
        /// Bytes per slot asked for.
        slot_size: usize,
    },
    /// A file operation failed (is `/dev/shm`, or the huge-page mount, writable and large enough?).
    #[error("shared memory: {op} {}: {source}", path.display())]
    Io {
        /// The step that failed (create, fallocate, mmap, ...).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// A file this process had just created was not what it wrote (another process changed it meanwhile).
    #[error("shared memory: {} changed under this process ({what})", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
        /// What was found wrong.
        what: &'static str,
    },
}

impl From<RingCreateError> for ShmError {
    fn from(e: RingCreateError) -> ShmError {
        match e {
            RingCreateError::InvalidSlotCount(slot_count) => ShmError::Geometry { slot_count, slot_size: 0 },
            RingCreateError::InvalidSlotSize(slot_size) => ShmError::Geometry { slot_count: 0, slot_size },
            RingCreateError::TooLarge { slot_count, slot_size } => ShmError::Geometry { slot_count, slot_size },
            RingCreateError::Io { op, path, source } => ShmError::Io { op, path, source },
        }
    }
}

impl From<DoorbellCreateError> for ShmError {
    fn from(e: DoorbellCreateError) -> ShmError {
        ShmError::Io { op: e.op, path: e.path, source: e.source }
    }
}

impl From<DoorbellOpenError> for ShmError {
    fn from(e: DoorbellOpenError) -> ShmError {
        match e {
            DoorbellOpenError::Io { op, path, source } => ShmError::Io { op, path, source },
            DoorbellOpenError::BadName(name) => ShmError::Changed { path: name.into(), what: "not a doorbell name" },
            DoorbellOpenError::TooSmall { path, .. } => ShmError::Changed { path, what: "too small" },
            DoorbellOpenError::BadHeader { path, .. } => ShmError::Changed { path, what: "bad header" },
        }
    }
}

/// Errors of `create()` on a publisher or subscriber builder.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Topic names must not be empty.
    #[error("the topic name is empty")]
    EmptyTopic,
    /// The publisher's shared-memory ring could not be created.
    #[error("cannot create the publisher's shared-memory ring")]
    Ring(#[source] ShmError),
}

impl From<RingCreateError> for CreateError {
    fn from(e: RingCreateError) -> CreateError {
        CreateError::Ring(e.into())
    }
}

/// Errors of [`Publisher::send`](crate::Publisher::send), [`Loan::send`](crate::Loan::send) and
/// [`Publisher::loan`](crate::Publisher::loan): the publisher's shared-memory ring has no slot for the message.
/// Nothing was sent.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The message exceeds the largest slot a ring can have.
    #[error("a message of {len} bytes exceeds the largest shared-memory slot ({max} bytes)")]
    TooLarge {
        /// The message's length.
        len: usize,
        /// The largest slot a ring can have.
        max: usize,
    },
    /// The message needed a ring with larger slots and making it failed (the publisher keeps its current ring).
    #[error("cannot grow the shared-memory ring for the message")]
    Grow(#[source] ShmError),
}

/// Errors of [`Publisher::loan`](crate::Publisher::loan): as for a send, the ring has no slot of that size.
pub type LoanError = SendError;

impl From<SlotError> for SendError {
    fn from(e: SlotError) -> SendError {
        match e {
            SlotError::TooLarge { len, max } => SendError::TooLarge { len, max },
            SlotError::Grow(g) => SendError::Grow(g.into()),
        }
    }
}

/// Errors of the `recv*` methods of [`Subscriber`](crate::Subscriber).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// No message arrived in time.
    #[error("no message within the timeout")]
    Timeout,
}

/// Error of [`Publisher::wait_for_subscribers`](crate::Publisher::wait_for_subscribers) and
/// [`Subscriber::wait_for_publishers`](crate::Subscriber::wait_for_publishers): fewer peers than asked for matched
/// before the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{matched} of {wanted} matched within {timeout:?}")]
pub struct MatchTimeout {
    /// How many were asked for.
    pub wanted: usize,
    /// How many were matched when the time was up.
    pub matched: usize,
    /// The timeout given.
    pub timeout: std::time::Duration,
}
