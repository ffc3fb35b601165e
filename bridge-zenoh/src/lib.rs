//! shoal-zenoh-bridge: carries shoal (and so eCAL) topics between sites over Zenoh routers, where shoal's UDP
//! multicast or broadcast registration cannot go.
//!
//! - [`config`]: the TOML file and flags, every key checked (`etc/bridge.toml` documents them).
//! - [`keyexpr`]: shoal topic ↔ Zenoh key `<prefix>/<escaped topic>`.
//! - [`wire`]: the type in the Zenoh encoding, the bridge's attachment (bridge id, sequence, descriptor).
//! - [`bridge`]: the running bridge (export and import, loop prevention, bounded queues); [`stats`] its counters.
//! - [`probe`]: the messages the tests and the measurement send and check.

pub mod bridge;
pub mod config;
pub mod keyexpr;
pub mod probe;
pub mod stats;
pub mod wire;
