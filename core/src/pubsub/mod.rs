//! Publishers, subscribers and the per-process runtime that connects them over the transports.

pub(crate) mod dispatch;
pub(crate) mod publisher;
pub(crate) mod runtime;
pub(crate) mod sample;
pub(crate) mod subscriber;
pub(crate) mod typed;
pub(crate) mod waker;

/// Errors of [`Publisher::send`](crate::Publisher::send) and [`Loan::send`](crate::Loan::send).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The shared-memory ring could not take the message (e.g. it could not grow for a large message).
    #[error("shared-memory ring: {0}")]
    Ring(String),
}

/// Errors of [`Publisher::loan`](crate::Publisher::loan).
#[derive(Debug, thiserror::Error)]
pub enum LoanError {
    /// The shared-memory ring could not provide a slot of that size.
    #[error("shared-memory ring: {0}")]
    Ring(String),
}

/// Errors of the `recv*` methods of [`Subscriber`](crate::Subscriber).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// No message arrived in time.
    #[error("no message within the timeout")]
    Timeout,
    /// This subscriber delivers to its callback; it has no pull API.
    #[error("this subscriber was created with a callback; recv is not available")]
    CallbackMode,
}

/// Now, in µs since the UNIX epoch (eCAL's send-time unit).
pub(crate) fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}
