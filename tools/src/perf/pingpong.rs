//! Ping-pong latency: the main process sends a message, the peer echoes it, one-way = RTT / 2.
//! Copy mode copies the whole payload in and out on both sides; zero-copy mode writes and reads
//! only the 16-byte header of a loaned slot.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::Run;
use super::args::{Mode, WaitMode};
use super::link::{HEADER_LEN, Receiver, Sender, header, parse_header};
use super::peer::{Peer, PeerCommand, RECV_TIMEOUT};
use super::report::{Latency, Measurement, new_histogram};
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// The least time a block-mode ping-pong warms up for when `--iterations` is not given: after a pause (the peer
/// waits for its command while other systems are measured) the kernel often wakes the first receiver onto its
/// waker's CPU, and the two processes share one CPU until a later wake-up puts them apart. 64 B round trips
/// then take 2.6-3 µs one way instead of 0.12-0.15 µs: after 300 ms of pause before a 64 B block ping-pong of
/// 10,000 round trips, 6 runs of 6 measured that (without the pause none, 2 of 6 at p90), and three such ping-pongs
/// back to back had their processes apart by the third in 6 runs of 6 (the count rule's longest warm-up, 1,000
/// round trips, lasts 0.3 ms at 64 B apart and 6 ms on one CPU).
/// The figure measured is the steady state; every system the tool drives itself (the plain rings, the raw socket
/// programs of `--transport udp|tcp` and shoal) warms up by this rule, iceoryx2's and eCAL's programs, which
/// always sleep, by the round-trip count alone.
pub(crate) const BLOCK_WARMUP: Duration = Duration::from_millis(250);

/// Measures one payload size; `zero_copy` selects the header-only path.
pub(crate) fn measure<S: Sender, R: Receiver>(
    run: &Run,
    tx: &mut S,
    rx: &mut R,
    peer: &mut Peer,
    size: usize,
    zero_copy: bool,
) -> anyhow::Result<Measurement> {
    let warmup = run.args.warmup_for(size);
    let iters = run.args.iterations_for(size);
    let total = warmup + iters;
    let mut out = vec![0u8; size];
    let mut back: Vec<u8> = Vec::with_capacity(size);
    let echo = |n| if zero_copy { PeerCommand::EchoHeader { n } } else { PeerCommand::Echo { n } };
    let mut warmed = warmup;
    if run.wait == WaitMode::Block && run.args.iterations.is_none() {
        // Rounds of twice as many round trips each until BLOCK_WARMUP has passed; the measured command below
        // begins with its own warm-up as in spin mode.
        let started = Instant::now();
        let mut n = warmup;
        while started.elapsed() < BLOCK_WARMUP {
            peer.command(echo(n))?;
            for seq in 0..n {
                round_trip(tx, rx, &mut out, &mut back, size, zero_copy, seq)?;
            }
            peer.report()?;
            warmed += n;
            n = n.saturating_mul(2);
        }
    }
    peer.command(echo(total))?;
    let mut hist = new_histogram();
    rx.take_vias();
    let mut cpu0 = CpuTime::now();
    let mut t_measured = Instant::now();
    for seq in 0..total {
        if seq == warmup {
            cpu0 = CpuTime::now();
            t_measured = Instant::now();
        }
        let rtt = round_trip(tx, rx, &mut out, &mut back, size, zero_copy, seq)?;
        if seq >= warmup {
            let _ = hist.record(((rtt.as_nanos() / 2) as u64).max(1));
        }
    }
    let elapsed = t_measured.elapsed();
    let cpu = CpuTime::now().since(cpu0);
    let pr = peer.report()?;
    Ok(Measurement {
        system: run.system,
        transport: run.label(),
        via: merge_vias(pr.via, rx.take_vias()),
        wait: run.wait,
        mode: if zero_copy { Mode::ZeroCopy } else { Mode::PingPong },
        size,
        subscribers: 1,
        latency: Latency::from_histogram(&hist),
        msgs_per_s: iters as f64 / elapsed.as_secs_f64(),
        messages: iters,
        lost: None,
        drops: Some(pr.drops),
        cpu,
        peer_cpu: pr.cpu,
        peak_rss_kb: peak_rss_kb(),
        peer_peak_rss_kb: pr.peak_rss_kb,
        note: None,
        extra: vec![("warmup_round_trips", warmed as f64)],
    })
}

/// Sends message `seq` of `size` bytes (copied in whole, or only its header with `zero_copy`) and waits for its
/// echo; the round trip's time.
fn round_trip<S: Sender, R: Receiver>(
    tx: &mut S,
    rx: &mut R,
    out: &mut [u8],
    back: &mut Vec<u8>,
    size: usize,
    zero_copy: bool,
    seq: u64,
) -> anyhow::Result<Duration> {
    let h = header(seq, mono_ns());
    let t0 = Instant::now();
    let (got, len) = if zero_copy {
        tx.send_header(size, &h)?;
        let (g, len) = rx.recv_header(RECV_TIMEOUT).context("waiting for the echo")?;
        (parse_header(&g), len)
    } else {
        out[..HEADER_LEN].copy_from_slice(&h);
        tx.send_copy(out)?;
        rx.recv_copy(back, RECV_TIMEOUT).context("waiting for the echo")?;
        (parse_header(back), back.len())
    };
    let rtt = t0.elapsed();
    match got {
        Some((s, _)) if s == seq && len == size => Ok(rtt),
        other => bail!("echo mismatch: sent seq {seq} ({size} B), got {other:?} ({len} B)"),
    }
}

/// Both directions' per-layer counts together.
fn merge_vias(
    mut a: std::collections::BTreeMap<String, u64>,
    b: std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    for (k, n) in b {
        *a.entry(k).or_default() += n;
    }
    a
}
