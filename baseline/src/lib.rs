//! Reference implementations that `shoal perf --baseline` measures beside shoal, with no middleware in between.
//!
//! [`spsc`]: a plain single-producer single-consumer ring in a `/dev/shm` file shared by two processes. It is the
//! floor shoal's shared-memory ring is compared with (latency and throughput ratios in the same run). It is not
//! part of shoal: nothing but the measurement tool uses it.
//!
//! [`strong`]: the strongest plain rings for each message size (a cache-line ring for small messages, a ring
//! that hands back the buffer released last for large ones), the references shoal's ratios are taken against; the
//! [`spsc`] ring, as deep as shoal's, stays as a second reference.
//!
//! [`net`]: raw socket programs for `--transport udp|tcp`: `sendmmsg`/`recvmmsg` datagrams and a
//! length-prefixed TCP stream, the floor shoal's UDP and TCP layers are compared with.
//!
//! [`copy`]: the rings' payload copies, with the guard against a slow case of `memcpy` that shoal's copies have.
//!
//! Unsafe code (the mapping, the slot accesses and the futex calls; `sendmmsg`/`recvmmsg`) lives in [`spsc`], [`strong`]
//! and [`net`] only, each block with its
//! `// SAFETY:` comment (the workspace lints deny undocumented unsafe blocks and unsafe operations in unsafe
//! functions).
#![warn(missing_docs)]

pub mod copy;
pub mod net;
pub mod spsc;
pub mod strong;
