//! Streaming throughput: the main process sends a fixed count as fast as it can; the peer
//! copies every message out, counts it and measures send-to-receive latency from the header.
//! The rate is messages received over (last receive - first send), on the shared monotonic clock.

use super::Run;
use super::args::Mode;
use super::link::{HEADER_LEN, Receiver, Sender, header};
use super::peer::{Peer, PeerCommand, RECV_TIMEOUT};
use super::report::Measurement;
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// Measures one payload size.
/// A few echo round trips at this size first let the transport reach its steady state (e.g. a
/// ring that grows for large messages) outside the measured stream.
pub(crate) fn measure<S: Sender, R: Receiver>(
    run: &Run,
    tx: &mut S,
    rx: &mut R,
    peer: &mut Peer,
    size: usize,
) -> anyhow::Result<Measurement> {
    let count = run.args.count_for(size);
    warm_up(tx, rx, peer, size)?;
    peer.command(PeerCommand::Sink { count })?;
    let mut out = vec![0u8; size];
    let cpu0 = CpuTime::now();
    let start = mono_ns();
    for seq in 0..count {
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        tx.send_copy(&out)?;
    }
    let cpu = CpuTime::now().since(cpu0);
    let pr = peer.report()?;
    let span_s = pr.last_ns.saturating_sub(start) as f64 / 1e9;
    Ok(Measurement {
        system: run.system,
        wait: run.wait,
        mode: Mode::Throughput,
        size,
        subscribers: 1,
        latency: pr.latency,
        msgs_per_s: if span_s > 0.0 { pr.received as f64 / span_s } else { 0.0 },
        messages: count,
        lost: Some(count.saturating_sub(pr.received)),
        drops: Some(pr.drops),
        cpu,
        peer_cpu: pr.cpu,
        peak_rss_kb: peak_rss_kb(),
        peer_peak_rss_kb: pr.peak_rss_kb,
        note: None,
        extra: Vec::new(),
    })
}

fn warm_up<S: Sender, R: Receiver>(tx: &mut S, rx: &mut R, peer: &mut Peer, size: usize) -> anyhow::Result<()> {
    const ROUNDS: u64 = 8;
    peer.command(PeerCommand::Echo { n: ROUNDS })?;
    let mut out = vec![0u8; size];
    let mut back = Vec::with_capacity(size);
    for seq in 0..ROUNDS {
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        tx.send_copy(&out)?;
        rx.recv_copy(&mut back, RECV_TIMEOUT)?;
    }
    peer.report().map(drop)
}
