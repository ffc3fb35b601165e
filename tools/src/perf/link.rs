//! What the measurement loops need from a transport, implemented by the baseline ring and by
//! shoal's publisher/subscriber, plus the 16-byte message header (sequence + send timestamp).

use std::time::Duration;

/// Bytes of the header at the start of every message: sequence number and CLOCK_MONOTONIC
/// send time in ns, both little endian.
pub(crate) const HEADER_LEN: usize = 16;

/// Sending side of a one-way link.
pub(crate) trait Sender {
    /// Copies `payload` into the transport and publishes it.
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()>;
    /// Publishes a `len`-byte message of which only the header is written (zero-copy path).
    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()>;
    /// Unpaced streams: on, the sender may hold messages back to send several at once (the raw UDP program's
    /// `sendmmsg` batches); off sends what it holds. A no-op for senders that do not batch.
    fn set_batching(&mut self, _on: bool) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Receiving side of a one-way link.
pub(crate) trait Receiver {
    /// Receives the next message, copying it into `buf` (cleared first, capacity reused).
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()>;
    /// Receives the next message reading only its header; returns the header and the length.
    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)>;
    /// Receives the next message of a stream as an application takes it: into `buf` (cleared first) where the
    /// message is not yet in memory of this process's own (a shared-memory slot: copied, all of it, as
    /// [`recv_copy`](Self::recv_copy)); where a transport already received it into such memory (shoal's UDP and TCP
    /// layers: the buffer a sample hands out, as `Subscriber::recv` gives it), only its header is read into `buf`.
    /// The raw programs receive into `buf` itself.
    fn recv_sink(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.recv_copy(buf, timeout)
    }
    /// Messages the transport reports as lost for this receiver so far.
    fn drops(&self) -> u64;
    /// Messages received per layer (`shoal::monitor::Via::name`) since the last call; empty for the baselines.
    fn take_vias(&mut self) -> std::collections::BTreeMap<String, u64> {
        Default::default()
    }
}

/// A receive that saw no message within its timeout (other errors are fatal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimedOut(pub(crate) Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no message within {:?}: the other process is gone or stuck", self.0)
    }
}

impl std::error::Error for TimedOut {}

/// True if `e` is a receive timeout.
pub(crate) fn is_timeout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<TimedOut>().is_some()
}

/// Encodes a header.
pub(crate) fn header(seq: u64, send_ns: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&seq.to_le_bytes());
    h[8..].copy_from_slice(&send_ns.to_le_bytes());
    h
}

/// Decodes the header at the start of `msg` (`None` if the message is shorter than a header).
pub(crate) fn parse_header(msg: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(msg.get(..8)?.try_into().ok()?);
    let ts = u64::from_le_bytes(msg.get(8..HEADER_LEN)?.try_into().ok()?);
    Some((seq, ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = header(7, 123_456_789);
        assert_eq!(parse_header(&h), Some((7, 123_456_789)));
        assert_eq!(parse_header(&h[..15]), None);
    }
}
