//! The baseline side of the links: the plain rings of `shoal_baseline` (the line and warm rings of `strong`, the
//! deep ring of `spsc`) as [`Sender`] and [`Receiver`].
//! `<prefix>_ping` carries main to peer, `<prefix>_pong` back; the prefix holds the main process's pid.

use std::time::Duration;

use shoal_baseline::copy;
use shoal_baseline::spsc::{self, Ring, Wait};
use shoal_baseline::strong::{self, LineRing, WarmRing};

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

/// Which plain ring a baseline session measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingKind {
    /// The line ring of `shoal_baseline::strong`: tag and payload in one slot (the small-message floor).
    Line,
    /// The warm ring of `shoal_baseline::strong`: the buffer released last is written next (large messages).
    Warm,
    /// The deep SPSC ring of `shoal_baseline::spsc`, as many slots as shoal's ring (the second reference).
    Deep,
}

impl RingKind {
    /// The `transport` label of its rows.
    pub(crate) fn label(self) -> &'static str {
        match self {
            RingKind::Line => LINE_LABEL,
            RingKind::Warm => WARM_LABEL,
            RingKind::Deep => DEEP_LABEL,
        }
    }

    /// Slots of its ring for `size`-byte messages (`shoal_slots`: shoal's ring's for that size).
    pub(crate) fn slot_count(self, size: usize, shoal_slots: u64) -> u64 {
        match self {
            // The streaming partner of a reliable publisher has 1024 slots; for large messages few slots (1024
            // of them would cycle through gigabytes of cold memory).
            RingKind::Line if size <= 4096 => 1024,
            RingKind::Line => 4,
            RingKind::Warm => 4,
            RingKind::Deep => shoal_slots,
        }
    }
}

/// Row labels of the plain rings; the strongest of a figure is taken among the first two.
pub(crate) const LINE_LABEL: &str = "line_ring";
pub(crate) const WARM_LABEL: &str = "warm_ring";
pub(crate) const DEEP_LABEL: &str = "baseline_ring";

/// One end of a baseline ring as a link.
#[derive(Debug)]
pub(crate) enum BaselineLink {
    Deep(Ring),
    Line(LineRing),
    Warm(WarmRing),
}

/// Calls `$f` on the ring of any kind.
macro_rules! ring {
    ($link:expr, $r:ident => $e:expr) => {
        match $link {
            BaselineLink::Deep($r) => $e,
            BaselineLink::Line($r) => $e,
            BaselineLink::Warm($r) => $e,
        }
    };
}

impl BaselineLink {
    /// Creates the ring file at `path` (the main process's end).
    pub(crate) fn create(
        kind: RingKind,
        path: &std::path::Path,
        slot_count: u64,
        slot_size: usize,
        wait: WaitMode,
    ) -> anyhow::Result<BaselineLink> {
        Ok(match kind {
            RingKind::Deep => BaselineLink::Deep(Ring::create_with(path, slot_count, slot_size, wait.into())?),
            RingKind::Line => BaselineLink::Line(LineRing::create(path, slot_count, slot_size, wait.into())?),
            RingKind::Warm => BaselineLink::Warm(WarmRing::create(path, slot_count, slot_size, wait.into())?),
        })
    }

    /// Opens the ring file the main process created (the peer's end), of the kind its magic says.
    pub(crate) fn open(path: &std::path::Path, wait: WaitMode) -> anyhow::Result<BaselineLink> {
        Ok(match strong::kind_of(path)? {
            "line" => BaselineLink::Line(LineRing::open(path, wait.into())?),
            "warm" => BaselineLink::Warm(WarmRing::open(path, wait.into())?),
            _ => BaselineLink::Deep(Ring::open(path, wait.into())?),
        })
    }

    /// Slots (buffers) of the ring.
    pub(crate) fn slot_count(&self) -> u64 {
        ring!(self, r => r.slot_count())
    }

    /// Largest message of the ring.
    pub(crate) fn slot_size(&self) -> usize {
        ring!(self, r => r.slot_size())
    }
}

impl Sender for BaselineLink {
    fn send_copy(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        match self {
            // Streamed from STREAM_MIN bytes on, as shoal's ring streams its copying writes.
            BaselineLink::Warm(r) => r.write_copy(payload, IO_TIMEOUT),
            _ => ring!(self, r => r.write_with(payload.len(), IO_TIMEOUT, |b| copy::copy_from(b, payload))),
        }
        .map_err(map_err)
    }

    fn send_header(&mut self, len: usize, header: &[u8; HEADER_LEN]) -> anyhow::Result<()> {
        ring!(self, r => r.write_with(len, IO_TIMEOUT, |b| b[..HEADER_LEN].copy_from_slice(header))).map_err(map_err)
    }
}

impl Receiver for BaselineLink {
    fn recv_copy(&mut self, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<()> {
        match self {
            BaselineLink::Warm(r) => r.read_copy(timeout, buf),
            _ => ring!(self, r => r.read_with(timeout, |s| {
                buf.clear();
                copy::extend(buf, s);
            })),
        }
        .map_err(map_err)
    }

    fn recv_header(&mut self, timeout: Duration) -> anyhow::Result<([u8; HEADER_LEN], usize)> {
        ring!(self, r => r.read_with(timeout, |s| {
            let mut h = [0u8; HEADER_LEN];
            let n = s.len().min(HEADER_LEN);
            h[..n].copy_from_slice(&s[..n]);
            (h, s.len())
        }))
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
    use shoal::transport::shm_ring::{Pacer, PollState};

    /// The baseline rings' block mode polls by shoal's rule (so block-mode ratios compare rings): same constants.
    #[test]
    fn the_baseline_block_mode_polls_by_shoals_rule() {
        assert_eq!(spsc::STREAM_POLL_SPIN, PollState::SPIN);
        assert_eq!(spsc::STREAM_POLL_PROBE_EVERY, PollState::PROBE_EVERY);
        assert_eq!(spsc::STREAM_POLL_REPLY_SPIN, PollState::REPLY_SPIN);
        assert_eq!(spsc::STREAM_POLL_REPLY_SPIN_PER_MIB, PollState::REPLY_SPIN_PER_MIB);
        assert_eq!(spsc::STREAM_POLL_REPLY_SPIN_MAX, PollState::REPLY_SPIN_MAX);
        assert_eq!(spsc::STREAM_POLL_YIELD_FIRST, Pacer::FIRST);
        assert_eq!(spsc::STREAM_POLL_YIELD_LONGEST, Pacer::LONGEST);
        assert_eq!(spsc::STREAM_POLL_GAVE_WAY, Pacer::GAVE_WAY);
        assert_eq!(spsc::STREAM_POLL_GAVE_WAY_IN_A_ROW, PollState::GAVE_WAY_IN_A_ROW);
        for bytes in [0, 64, 1 << 20, 3 << 20, 1 << 30] {
            assert_eq!(spsc::reply_window(bytes), PollState::reply_window(bytes));
        }
    }

    /// Their spin mode reads the clock as late as shoal's busy spin does.
    #[test]
    fn the_baseline_spin_mode_reads_the_clock_by_shoals_rule() {
        assert_eq!(spsc::SPIN_POLLS_BEFORE_CLOCK, shoal::Subscriber::BUSY_SPIN_POLLS_BEFORE_CLOCK);
    }

    #[test]
    fn a_ring_is_a_link_whose_receive_timeout_is_the_loops_timeout() {
        for kind in [RingKind::Deep, RingKind::Line, RingKind::Warm] {
            let p = std::path::PathBuf::from(format!("/dev/shm/shoal_perf_test_{}_link_{kind:?}", std::process::id()));
            let mut tx = BaselineLink::create(kind, &p, 16, 64, WaitMode::Spin).unwrap();
            let mut rx = BaselineLink::open(&p, WaitMode::Spin).unwrap();
            assert_eq!(std::mem::discriminant(&rx), std::mem::discriminant(&tx), "the peer opens the kind created");
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
}
