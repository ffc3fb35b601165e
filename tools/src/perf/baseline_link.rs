//! The baseline side of the links: a plain SPSC ring of `shoal_baseline::spsc` as [`Sender`] and [`Receiver`].
//! `<prefix>_ping` carries main to peer, `<prefix>_pong` back; the prefix holds the main process's pid.

use std::time::Duration;

use shoal_baseline::spsc::{self, Ring, Wait};

use super::args::WaitMode;
use super::link::{HEADER_LEN, Receiver, Sender, TimedOut};

/// How long a send waits on a full ring before the other process counts as gone.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) use spsc::ring_paths;

impl From<WaitMode> for Wait {
    fn from(w: WaitMode) -> Wait {
        match w {
            WaitMode::Spin => Wait::Spin,
            WaitMode::Block => Wait::Block,
        }
    }
}

/// A receive timeout becomes the loops' [`TimedOut`]; anything else is fatal.
fn map_err(e: spsc::Error) -> anyhow::Error {
    match e {
        spsc::Error::TimedOut(t) => anyhow::Error::new(TimedOut(t)),
        e => anyhow::Error::new(e),
    }
}

/// One end of a baseline ring as a link.
#[derive(Debug)]
pub(crate) struct BaselineLink(pub(crate) Ring);

impl BaselineLink {
    /// Creates the ring file at `path` (the main process's end).
    pub(crate) fn create(
        path: &std::path::Path,
        slot_count: u64,
        slot_size: usize,
        wait: WaitMode,
    ) -> anyhow::Result<BaselineLink> {
        Ok(BaselineLink(Ring::create_with(path, slot_count, slot_size, wait.into())?))
    }

    /// Opens the ring file the main process created (the peer's end).
    pub(crate) fn open(path: &std::path::Path, wait: WaitMode) -> anyhow::Result<BaselineLink> {
        Ok(BaselineLink(Ring::open(path, wait.into())?))
    }
}

impl Sender for BaselineLink {
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        self.0.write_with(payload.len(), IO_TIMEOUT, |b| b.copy_from_slice(payload)).map_err(map_err)
    }

    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()> {
        self.0.write_with(len, IO_TIMEOUT, |b| b[..HEADER_LEN].copy_from_slice(header)).map_err(map_err)
    }
}

impl Receiver for BaselineLink {
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        self.0
            .read_with(timeout, |s| {
                buf.clear();
                buf.extend_from_slice(s);
            })
            .map_err(map_err)
    }

    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)> {
        self.0
            .read_with(timeout, |s| {
                let mut h = [0u8; HEADER_LEN];
                let n = s.len().min(HEADER_LEN);
                h[..n].copy_from_slice(&s[..n]);
                (h, s.len())
            })
            .map_err(map_err)
    }

    fn drops(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::link::is_timeout;

    #[test]
    fn a_ring_is_a_link_whose_receive_timeout_is_the_loops_timeout() {
        let p = std::path::PathBuf::from(format!("/dev/shm/shoal_perf_test_{}_link", std::process::id()));
        let mut tx = BaselineLink::create(&p, 16, 64, WaitMode::Spin).unwrap();
        let mut rx = BaselineLink::open(&p, WaitMode::Spin).unwrap();
        tx.send_copy(&[7; 40]).unwrap();
        tx.send_header(48, &[9; HEADER_LEN]).unwrap();
        let mut buf = Vec::new();
        rx.recv_copy(&mut buf, Duration::from_secs(1)).unwrap();
        assert_eq!(buf, [7; 40]);
        assert_eq!(rx.recv_header(Duration::from_secs(1)).unwrap(), ([9; HEADER_LEN], 48));
        let e = rx.recv_copy(&mut buf, Duration::from_millis(10)).unwrap_err();
        assert!(is_timeout(&e), "{e}");
        assert!(!is_timeout(&tx.send_copy(&[0; 65]).unwrap_err()));
    }
}
