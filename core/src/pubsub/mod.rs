//! Publishers, subscribers, their builders, and the per-process runtime that connects them over the transports.

pub(crate) mod builder;
pub(crate) mod dispatch;
pub(crate) mod meter;
pub(crate) mod publisher;
pub(crate) mod runtime;
pub(crate) mod subscriber;
pub(crate) mod typed;
pub(crate) mod waker;

use crate::transport::shm_ring::{CommitError, RingCreateError, SlotError};

/// Errors of `create()` on a publisher or subscriber builder.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// Topic names must not be empty.
    #[error("the topic name is empty")]
    EmptyTopic,
    /// The publisher's shared-memory ring could not be created (is `/dev/shm`, or the huge-page mount, writable
    /// and large enough?).
    #[error("cannot create the publisher's shared-memory ring: {0}")]
    Ring(#[from] RingCreateError),
}

/// Errors of [`Publisher::send`](crate::Publisher::send) and [`Loan::send`](crate::Loan::send).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The shared-memory ring has no slot for the message (too large, or the ring could not grow for it).
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// The written slot could not be published.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Errors of [`Publisher::loan`](crate::Publisher::loan).
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum LoanError {
    /// The shared-memory ring has no slot of that size (too large, or the ring could not grow for it).
    #[error(transparent)]
    Slot(#[from] SlotError),
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
