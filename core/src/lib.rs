//! shoal: decentralized publish/subscribe, wire-compatible with eCAL 5.13 / 6.x.
//!
//! ```no_run
//! let node = shoal::Node::init("hello")?;
//! let mut publ = node.publisher("greeting", shoal::TypeInfo::raw("text"))?;
//! let sub = node.subscriber("greeting")?;
//! publ.send(b"hello")?;
//! let s = sub.recv_timeout(std::time::Duration::from_secs(1))?;
//! assert_eq!(s.payload(), b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod config;
pub mod dynamic;
mod io;
pub mod monitor;
mod node;
mod pubsub;
pub mod registration;
mod sys;
pub mod transport;
pub mod types;
pub mod wire;

pub use config::{Config, WaitStrategy};
pub use io::IoStartError;
pub use node::{CreateError, InitError, Node};
pub use pubsub::publisher::{Init, Loan, Publisher, Uninit};
pub use pubsub::sample::{Sample, SampleRef};
pub use pubsub::subscriber::Subscriber;
pub use pubsub::typed::{MessageMeta, Received, TypedPublisher, TypedRecvError, TypedSendError, TypedSubscriber};
pub use pubsub::{LoanError, RecvError, SendError};
#[doc(hidden)]
pub use types::codegen_support as __codegen;
pub use types::{DecodeError, EncodeError, Message, MessageSink, TypeInfo};
