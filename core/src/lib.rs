//! shoal: decentralized publish/subscribe, wire-compatible with eCAL 6.x (tested against eCAL 6.1.1; eCAL 5.13 uses
//! the same wire and is designed for, but untested).
//!
//! A [`Node`] joins the process's runtime; publishers and subscribers come from its builders, one entry point per
//! role with options as methods:
//!
//! ```no_run
//! let node = shoal::Node::init("hello")?;
//! let mut publ = node.publisher("greeting").type_info(shoal::TypeInfo::raw("text")).create()?;
//! let sub = node.subscriber("greeting").create()?;
//! publ.send(b"hello")?;
//! let s = sub.recv_timeout(std::time::Duration::from_secs(1))?;
//! assert_eq!(s.payload(), b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - Raw bytes: [`Publisher`] (`send`, zero-copy [`Loan`]), [`Subscriber`] (`recv`, `recv_timeout`, `try_recv`,
//!   `recv_with` on a zero-copy [`SampleRef`], whose [`PayloadView`] copies out only what is read and never lends
//!   a slice of a slot another process may be writing).
//! - Generated messages (`shoal-codegen`, [`Message`]): `.typed::<M>()` gives [`TypedPublisher`] and
//!   [`TypedSubscriber`].
//! - Callbacks: `.callback(..)` gives a [`CallbackSubscriber`], run on the process's doorbell thread.
//! - Services (eCAL's request/response, same wire): [`Node::service_server`] gives a [`ServiceServer`],
//!   [`Node::service_client`] a [`ServiceClient`] whose calls return a [`ServiceResponse`] per server ([`service`]).
//! - Logs on eCAL's log channel, both ways: [`logging`] (a `tracing` layer the application installs, a receiver).
//! - What the system looks like: [`Node::snapshot`] ([`monitor`]); decoding any protobuf topic from its
//!   registration descriptor: [`dynamic`]; configuration: [`config`] (`ecal.ini`); every error type: [`error`].
//!
//! Everything above is the public API, stated in this file: the root re-exports, [`builder`], [`error`],
//! [`config`], [`monitor`], [`service`], [`logging`] and [`dynamic`]. With the cargo feature `internals` (off by default; the repository's
//! fuzz targets, tests and tools turn it on) the modules `registration`, `transport` and `wire` and
//! `ring_geometry` are public too, for them only: they are not part of the API and change without notice.
#![deny(unsafe_code)]
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod config;
pub mod dynamic;
mod io;
pub mod logging;
pub mod monitor;
mod node;
pub mod process;
mod pubsub;
mod sample;
pub mod service;
mod stats;
mod sync;
mod sys;
mod types;

// The internals the fuzz targets and the repository's tests drive directly (feature `internals`); private otherwise,
// where what only they use is dead code.
#[cfg(feature = "internals")]
pub mod registration;
#[cfg(not(feature = "internals"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod registration;
#[cfg(feature = "internals")]
pub mod transport;
#[cfg(not(feature = "internals"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod transport;
#[cfg(feature = "internals")]
pub mod wire;
#[cfg(not(feature = "internals"))]
#[allow(unreachable_pub, dead_code, unused_imports)]
mod wire;

/// The builders of [`Node::publisher`] and [`Node::subscriber`] and their kinds.
pub mod builder {
    pub use crate::pubsub::builder::{CallbackSubscriberBuilder, PublisherBuilder, Raw, SubscriberBuilder, Typed};
}

/// Connection events of publishers and subscribers (`.on_event(..)` on their builders).
pub mod events {
    pub use crate::pubsub::events::{DropCause, Event, Peer, QUEUE_LIMIT};
    pub use crate::stats::Via;
}

/// Every error type of the public API, each with the causes it keeps as its source.
pub mod error {
    pub use crate::config::{ConfigError, KeyFileError};
    pub use crate::io::IoStartError;
    pub use crate::node::InitError;
    pub use crate::pubsub::typed::{TypedRecvError, TypedSendError};
    pub use crate::pubsub::{CreateError, LoanError, MatchTimeout, RecvError, SendError, ShmError};
    pub use crate::service::{BuildError as ServiceBuildError, CallError, WaitError as ServiceWaitError};
    pub use crate::types::{DecodeError, EncodeError};
}

pub use config::{Config, HistoryConfig, HugePages, QueuePolicy, ShmAccess, UdpSendMode, WaitStrategy};
pub use error::{
    CreateError, InitError, LoanError, MatchTimeout, RecvError, SendError, TypedRecvError, TypedSendError,
};
pub use node::Node;
#[cfg(feature = "internals")]
pub use node::ring_geometry;
pub use process::{ProcessState, Severity, SeverityLevel};
pub use pubsub::history::History;
pub use pubsub::publisher::{Loan, Publisher, Unwritten, Written};
pub use pubsub::subscriber::{CallbackSubscriber, Subscriber};
pub use pubsub::typed::{MessageMeta, Received, TypedPublisher, TypedSubscriber};
pub use sample::{PayloadView, Sample, SampleRef};
pub use service::{CallStatus, ServerId, ServiceClient, ServiceResponse, ServiceServer};
pub use transport::shm_ring::FlowStats;
#[doc(hidden)]
pub use types::codegen_support as __codegen;
pub use types::{DecodeError, EncodeError, Message, MessageSink, TypeInfo};

/// Shared-memory mappings (ring segments, doorbells, eCAL memfiles and sync files) that another process truncated
/// while this process had them mapped, since it started. Each such access would have raised SIGBUS; a process-wide
/// handler instead put zero pages over the mapping, the message being read was dropped (counted in the
/// subscriber's [`drops`](Subscriber::drops)) and the reader detached (a ring) or mapped the file again (an eCAL
/// memfile). Each truncation is also logged once as a warning.
pub fn shm_truncations() -> u64 {
    sys::shm_guard::truncations()
}

/// eCAL sync files (a memfile's `_mtx`, a subscriber process's events) this process gave up since it started
/// because someone kept their creation `flock` for 250 ms (a live creator holds it for microseconds; any local user
/// who can open the file can hold it). The memfile or subscriber process is then not served over eCAL shared memory;
/// each is logged as a warning.
pub fn shm_lock_timeouts() -> u64 {
    transport::ecal_shm::sync::flock_timeouts()
}

/// Times this process gave up the inner pthread mutex of an eCAL sync object (a memfile's `_mtx`, a subscriber
/// process's event) on a publisher's send or target change, or on a subscriber's detach from a memfile, because
/// someone held it past the budget of 20 ms (a live holder keeps it for a few instructions; any local user who can
/// open the file can keep it for ever). Each skipped a flag lock (the memfile is re-created), an unlock (left to the
/// next send), an event (the message counts as a drop of the publisher), an acknowledge, or the wake-up of a
/// stopping observer thread (left to end by itself).
pub fn shm_inner_lock_skips() -> u64 {
    transport::ecal_shm::sync::inner_lock_skips()
}
