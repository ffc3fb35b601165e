//! shoal: decentralized publish/subscribe, wire-compatible with eCAL 5.13 / 6.x.
#![deny(unsafe_code)]

pub mod config;
pub mod registration;
pub mod transport;
pub mod types;
pub mod wire;

pub use config::Config;
pub use types::TypeInfo;
