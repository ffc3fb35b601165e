//! Ping-pong latency: the main process sends a message, the peer echoes it, one-way = RTT / 2.
//! Copy mode copies the whole payload in and out on both sides; zero-copy mode writes and reads
//! only the 16-byte header of a loaned slot.

use std::time::Instant;

use anyhow::{Context, bail};

use super::Run;
use super::args::Mode;
use super::link::{HEADER_LEN, Receiver, Sender, header, parse_header};
use super::peer::{Peer, PeerCommand, RECV_TIMEOUT};
use super::report::{Latency, Measurement, new_histogram};
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

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
    peer.command(if zero_copy { PeerCommand::EchoHeader { n: total } } else { PeerCommand::Echo { n: total } })?;
    let mut out = vec![0u8; size];
    let mut back: Vec<u8> = Vec::with_capacity(size);
    let mut hist = new_histogram();
    rx.take_vias();
    let mut cpu0 = CpuTime::now();
    let mut t_measured = Instant::now();
    for seq in 0..total {
        if seq == warmup {
            cpu0 = CpuTime::now();
            t_measured = Instant::now();
        }
        let h = header(seq, mono_ns());
        let t0 = Instant::now();
        let (got, len) = if zero_copy {
            tx.send_header(size, &h)?;
            let (g, len) = rx.recv_header(RECV_TIMEOUT).context("waiting for the echo")?;
            (parse_header(&g), len)
        } else {
            out[..HEADER_LEN].copy_from_slice(&h);
            tx.send_copy(&out)?;
            rx.recv_copy(&mut back, RECV_TIMEOUT).context("waiting for the echo")?;
            (parse_header(&back), back.len())
        };
        let rtt = t0.elapsed();
        match got {
            Some((s, _)) if s == seq && len == size => {}
            other => bail!("echo mismatch: sent seq {seq} ({size} B), got {other:?} ({len} B)"),
        }
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
        extra: Vec::new(),
    })
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
