//! Streaming throughput: the main process sends a fixed count; the peer takes every message as an application does
//! (`Receiver::recv_sink`: a ring's copied out, one a network layer received read where it is), counts it and
//! measures send-to-receive latency from the header. The rate is messages received over (last receive - first
//! send), on the shared monotonic clock.
//!
//! Each size runs twice: unpaced (the sender goes as fast as it can; shoal's ring never makes
//! the writer wait, so a slower reader loses messages, while the baseline's writer waits on a
//! full ring) and paced at a fixed rate, where a reader that keeps up must lose nothing.

use std::time::Duration;

use super::Run;
use super::args::{Mode, PerfArgs};
use super::link::{HEADER_LEN, Receiver, Sender, header};
use super::pace::{Pacer, STREAM_BURST};
use super::peer::{Peer, PeerCommand, RECV_TIMEOUT};
use super::report::{Measurement, fmt_rate};
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// How a stream is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Pacing {
    /// As fast as the sender can.
    Unpaced,
    /// At this many messages per second.
    Rate(f64),
}

/// Paced rate without `--rate` and without a baseline: at most 100k msg/s and 1 GB/s.
const DEFAULT_RATE_MSGS: f64 = 100_000.0;
const DEFAULT_RATE_BYTES: f64 = 1e9;

/// Longest default paced stream.
const PACED_SPAN: Duration = Duration::from_secs(1);

/// Fewest messages of a default paced stream.
const PACED_MIN_COUNT: u64 = 50;

/// The paced rate for `size`: `--rate`, else half the baseline's unpaced msg/s for the same size
/// and wait mode, else min(100k msg/s, 1 GB/s).
pub(crate) fn paced_rate(args: &PerfArgs, size: usize, baseline_unpaced: Option<f64>) -> f64 {
    args.rate
        .or(baseline_unpaced.filter(|r| *r > 0.0).map(|r| r / 2.0))
        .unwrap_or_else(|| DEFAULT_RATE_MSGS.min(DEFAULT_RATE_BYTES / size as f64))
}

/// Messages of a stream: `--count`, else the unpaced default, shortened for a paced stream so
/// that it lasts at most [`PACED_SPAN`].
fn count_for(args: &PerfArgs, size: usize, pacing: Pacing) -> u64 {
    let full = args.count_for(size);
    match (args.count, pacing) {
        (None, Pacing::Rate(r)) => full.min(((r * PACED_SPAN.as_secs_f64()) as u64).max(PACED_MIN_COUNT)),
        _ => full,
    }
}

/// Measures one payload size with the given pacing.
/// A few echo round trips at this size first let the transport reach its steady state (e.g. a
/// ring that grows for large messages) outside the measured stream.
pub(crate) fn measure<S: Sender, R: Receiver>(
    run: &Run,
    tx: &mut S,
    rx: &mut R,
    peer: &mut Peer,
    size: usize,
    pacing: Pacing,
) -> anyhow::Result<Measurement> {
    let count = count_for(run.args, size, pacing);
    warm_up(tx, rx, peer, size)?;
    peer.command(PeerCommand::Sink { count })?;
    let mut pacer = match pacing {
        Pacing::Unpaced => None,
        Pacing::Rate(r) => Some(Pacer::new(r, STREAM_BURST)),
    };
    let mut out = vec![0u8; size];
    let cpu0 = CpuTime::now();
    let start = mono_ns();
    tx.set_batching(pacer.is_none())?;
    for seq in 0..count {
        if let Some(p) = &mut pacer {
            p.wait_for(seq);
        }
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        tx.send_copy(&out)?;
    }
    tx.set_batching(false)?;
    let sent_s = mono_ns().saturating_sub(start) as f64 / 1e9;
    let cpu = CpuTime::now().since(cpu0);
    let pr = peer.report()?;
    let span_s = pr.last_ns.saturating_sub(start) as f64 / 1e9;
    let mut extra = vec![("send_rate", if sent_s > 0.0 { count as f64 / sent_s } else { f64::NAN })];
    if let Pacing::Rate(r) = pacing {
        extra.push(("rate_target", r));
    }
    if run.args.pin {
        // `--pin`: this process on CPU 0, the reader on its own CPU.
        extra.push(("pinned", 1.0));
    }
    if run.system == super::args::System::Shoal && super::shoal_link::reliable() {
        extra.push(("reliable", 1.0));
    }
    if run.system == super::args::System::Shoal && run.transport == super::args::Transport::Udp {
        // Whether a stream is sent through the I/O thread's batches (`[shoal_network] send_mode` io_thread, or auto:
        // the default, which batches small messages that follow each other closely): 1, or 0 from the user's thread.
        let io = super::shoal_link::config()?.network.send_mode != shoal::config::UdpSendMode::UserThread;
        extra.push(("udp_send_io_thread", if io { 1.0 } else { 0.0 }));
    }
    Ok(Measurement {
        system: run.system,
        transport: run.label(),
        via: pr.via,
        wait: run.wait,
        mode: if pacing == Pacing::Unpaced { Mode::Throughput } else { Mode::ThroughputPaced },
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
        extra,
    })
}

/// The one-line summary of a size: `unpaced: X msg/s (Y lost) / paced at R msg/s: Z lost`,
/// with the rates the sender achieved (a preempted sender falls behind a pace).
pub(crate) fn summary(unpaced: &Measurement, paced: &Measurement) -> String {
    let get = |m: &Measurement, key: &str| m.extra_value(key).unwrap_or(f64::NAN);
    let lost = |m: &Measurement| m.lost.unwrap_or(0);
    format!(
        "unpaced: {} msg/s ({} lost; sent at {}) / paced at {} msg/s: {} lost (sent at {}){}",
        fmt_rate(unpaced.msgs_per_s),
        lost(unpaced),
        fmt_rate(get(unpaced, "send_rate")),
        fmt_rate(get(paced, "rate_target")),
        lost(paced),
        fmt_rate(get(paced, "send_rate")),
        if lost(paced) > 0 { "  <- LOSS at a rate the reader should sustain" } else { "" }
    )
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PerfArgs,
    }

    #[test]
    fn paced_rate_and_count_defaults() {
        let a = T::parse_from(["x"]).a;
        assert_eq!(paced_rate(&a, 64, Some(3e6)), 1.5e6);
        assert_eq!(paced_rate(&a, 64, None), 100_000.0);
        assert_eq!(paced_rate(&a, 4 << 20, None), 1e9 / (4 << 20) as f64);
        assert_eq!(count_for(&a, 64, Pacing::Unpaced), 200_000);
        assert_eq!(count_for(&a, 64, Pacing::Rate(50_000.0)), 50_000);
        assert_eq!(count_for(&a, 4 << 20, Pacing::Rate(10.0)), 50);
        let a = T::parse_from(["x", "--rate", "1000", "--count", "7"]).a;
        assert_eq!(paced_rate(&a, 64, Some(3e6)), 1000.0);
        assert_eq!(count_for(&a, 64, Pacing::Rate(1000.0)), 7);
    }
}
