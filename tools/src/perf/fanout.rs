//! 1->N fan-out: one publisher, N subscriber processes (sinks). Measures the time spent inside
//! `send()` per message while the subscribers keep up (sends are paced), first with one
//! subscriber and then with N, and reports the N/1 ratio of the mean send cost.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shoal::Node;

use super::Run;
use super::args::{Mode, System};
use super::link::{HEADER_LEN, Sender, header};
use super::peer::{Peer, PeerCommand, PeerSpec};
use super::report::{Latency, Measurement, Reporter, fmt_ns, new_histogram};
use super::shoal_link;
use super::sys::{CpuTime, mono_ns, peak_rss_kb};

/// Gap between two sends so that `n` subscribers copying `size` bytes each keep up.
pub(crate) fn pacing_gap(n: usize, size: usize) -> Duration {
    // 20 µs for the wake-up, plus 0.5 ns per byte per subscriber for the copies on 2 cores.
    Duration::from_nanos(20_000 + (n as u64 * size as u64) / 2)
}

fn pace_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now + Duration::from_micros(300) {
        std::thread::sleep(deadline - now - Duration::from_micros(200));
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// Runs fan-out with 1 and with `n_max` subscribers for every size.
pub(crate) fn run(
    run: &Run,
    node: &Node,
    n_max: usize,
    name_of: &mut dyn FnMut() -> String,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let mut mean_at_one: HashMap<usize, f64> = HashMap::new();
    let rounds: Vec<usize> = if n_max == 1 { vec![1] } else { vec![1, n_max] };
    for n in rounds {
        let name = name_of();
        let (ping, _) = shoal_link::topics(&name);
        let mut tx = shoal_link::publisher(node, &ping)?;
        let mut peers = Vec::with_capacity(n);
        for i in 0..n {
            let spec = PeerSpec {
                system: System::Shoal,
                wait: run.wait,
                name: &name,
                index: i,
                sink_only: true,
                cpu: run.peer_cpu(i),
            };
            peers.push(Peer::spawn(&spec)?);
        }
        for p in &mut peers {
            p.wait_ready()?;
        }
        shoal_link::wait_subscribers(&tx, n)?;
        rep.note(&format!("-- fan-out: shoal, wait={}, {n} subscriber process(es), topic {ping}", run.wait));
        for &size in &run.args.sizes {
            let m = measure(run, &mut tx, &mut peers, size, mean_at_one.get(&size).copied())?;
            if let (1, Some(l)) = (n, m.latency) {
                mean_at_one.insert(size, l.mean);
            }
            rep.report(m);
        }
        for p in peers {
            p.quit()?;
        }
    }
    Ok(())
}

fn measure(
    run: &Run,
    tx: &mut shoal_link::ShoalTx,
    peers: &mut [Peer],
    size: usize,
    mean_at_one: Option<f64>,
) -> anyhow::Result<Measurement> {
    let n = peers.len();
    let count = run.args.fanout_count_for(size);
    for p in peers.iter_mut() {
        p.command(PeerCommand::Sink { count })?;
    }
    let gap = pacing_gap(n, size);
    let mut out = vec![0u8; size];
    let mut hist = new_histogram();
    let mut inside = Duration::ZERO;
    let cpu0 = CpuTime::now();
    let start = Instant::now();
    let mut next = start;
    for seq in 0..count {
        pace_until(next);
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        let t0 = Instant::now();
        tx.send_copy(&out)?;
        let dt = t0.elapsed();
        inside += dt;
        let _ = hist.record((dt.as_nanos() as u64).max(1));
        next = t0 + gap;
    }
    let elapsed = start.elapsed();
    let cpu = CpuTime::now().since(cpu0);
    let mut received = 0;
    let mut drops = 0;
    let mut peer_cpu = CpuTime::default();
    let mut peer_rss = 0;
    for p in peers.iter_mut() {
        let r = p.report()?;
        received += r.received;
        drops += r.drops;
        peer_cpu.user_us += r.cpu.user_us;
        peer_cpu.sys_us += r.cpu.sys_us;
        peer_rss = peer_rss.max(r.peak_rss_kb);
    }
    let latency: Option<Latency> = Latency::from_histogram(&hist);
    let mean = inside.as_nanos() as f64 / count as f64;
    let mut note = format!("send() mean {} (paced every {})", fmt_ns(mean as u64), fmt_ns(gap.as_nanos() as u64));
    let mut extra = vec![("send_mean_ns", mean), ("pacing_gap_ns", gap.as_nanos() as f64)];
    if let (Some(one), true) = (mean_at_one, n > 1) {
        note.push_str(&format!("; {n} subscribers cost {:.2}x the send() of 1", mean / one));
        extra.push(("send_ns_ratio_vs_1", mean / one));
    }
    let lost = (count * n as u64).saturating_sub(received);
    if lost > 0 {
        note.push_str(&format!(
            "; subscribers did not keep up ({lost} lost): fewer spinning processes than cores, --wait block, or --count"
        ));
    }
    Ok(Measurement {
        system: System::Shoal,
        wait: run.wait,
        mode: Mode::Fanout,
        size,
        subscribers: n,
        latency,
        msgs_per_s: count as f64 / elapsed.as_secs_f64(),
        messages: count,
        lost: Some(lost),
        drops: Some(drops),
        cpu,
        peer_cpu,
        peak_rss_kb: peak_rss_kb(),
        peer_peak_rss_kb: peer_rss,
        note: Some(note),
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_grows_with_subscribers_and_size() {
        assert_eq!(pacing_gap(1, 64), Duration::from_nanos(20_032));
        assert!(pacing_gap(4, 4 << 20) > pacing_gap(1, 4 << 20));
        let t = Instant::now();
        pace_until(t + Duration::from_millis(2));
        assert!(t.elapsed() >= Duration::from_millis(2));
    }
}
