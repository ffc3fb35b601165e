//! 1->N fan-out: one publisher, N subscriber processes (sinks), first with one subscriber and
//! then with N, sends paced so that the subscribers keep up.
//!
//! The cost per send is the publishing thread's CPU time inside `send()` (CLOCK_THREAD_CPUTIME_ID
//! read around each send, less the cost of the clock reads themselves, summed and divided by the
//! sends): unlike wall time it excludes the time the thread was preempted, which on a 2-core
//! machine with N spinning subscribers would dominate. The wall time per send is reported
//! alongside. The N/1 ratios of both are the fan-out cost (target T5).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shoal::Node;

use super::Run;
use super::args::{Mode, System};
use super::link::{HEADER_LEN, Sender, header};
use super::pace::Pacer;
use super::peer::{Peer, PeerCommand, PeerSpec};
use super::report::{Measurement, Reporter, fmt_ns, new_histogram};
use super::shoal_link;
use super::sys::{CpuTime, mono_ns, peak_rss_kb, thread_cpu_ns};

/// Gap between two sends so that `n` subscribers copying `size` bytes each keep up.
pub(crate) fn pacing_gap(n: usize, size: usize) -> Duration {
    // 20 µs for the wake-up, plus 0.5 ns per byte per subscriber for the copies on 2 cores.
    Duration::from_nanos(20_000 + (n as u64 * size as u64) / 2)
}

/// Mean cost of one `send()`, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SendCost {
    /// CPU time of the publishing thread.
    pub(crate) cpu_ns: f64,
    /// Wall time.
    pub(crate) wall_ns: f64,
}

/// What reading the two clocks around a send costs by itself (median of empty brackets), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClockOverhead {
    cpu_ns: u64,
    wall_ns: u64,
}

impl ClockOverhead {
    fn calibrate() -> ClockOverhead {
        const ROUNDS: usize = 2001;
        let mut cpu = Vec::with_capacity(ROUNDS);
        let mut wall = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let (c, w) = bracket(|| ());
            cpu.push(c);
            wall.push(w);
        }
        cpu.sort_unstable();
        wall.sort_unstable();
        ClockOverhead { cpu_ns: cpu[ROUNDS / 2], wall_ns: wall[ROUNDS / 2] }
    }
}

/// Runs `f` between two readings of the thread CPU clock and of the monotonic clock; returns
/// the (CPU, wall) ns elapsed, clock reads included.
#[inline]
fn bracket(f: impl FnOnce()) -> (u64, u64) {
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    f();
    let wall = t0.elapsed().as_nanos() as u64;
    (thread_cpu_ns().saturating_sub(c0), wall)
}

/// Runs fan-out with 1 and with `n_max` subscribers for every size.
pub(crate) fn run(
    run: &Run,
    node: &Node,
    n_max: usize,
    name_of: &mut dyn FnMut() -> String,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    let overhead = ClockOverhead::calibrate();
    let mut at_one: HashMap<usize, SendCost> = HashMap::new();
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
        rep.note(&format!(
            "-- fan-out: shoal, wait={}, {n} subscriber process(es), topic {ping}; cost per send = the publishing \
             thread's CPU time inside send() (excludes preemption; wall time alongside); latency columns = wall \
             time inside send()",
            run.wait
        ));
        for size in run.args.sizes_for(Mode::Fanout) {
            let (m, cost) = measure(run, &mut tx, &mut peers, size, overhead, at_one.get(&size).copied())?;
            if n == 1 {
                at_one.insert(size, cost);
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
    overhead: ClockOverhead,
    at_one: Option<SendCost>,
) -> anyhow::Result<(Measurement, SendCost)> {
    let n = peers.len();
    let count = run.args.fanout_count_for(size);
    for p in peers.iter_mut() {
        p.command(PeerCommand::Sink { count })?;
    }
    let gap = pacing_gap(n, size);
    let mut pacer = Pacer::new(1e9 / gap.as_nanos() as f64, 1);
    let mut out = vec![0u8; size];
    let mut hist = new_histogram();
    let (mut cpu_sum, mut wall_sum) = (0u64, 0u64);
    let cpu0 = CpuTime::now();
    let start = Instant::now();
    for seq in 0..count {
        pacer.wait_for(seq);
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        let mut sent = Ok(());
        let (cpu, wall) = bracket(|| sent = tx.send_copy(&out));
        sent?;
        let wall = wall.saturating_sub(overhead.wall_ns);
        cpu_sum += cpu.saturating_sub(overhead.cpu_ns);
        wall_sum += wall;
        let _ = hist.record(wall.max(1));
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
    let cost = SendCost { cpu_ns: cpu_sum as f64 / count as f64, wall_ns: wall_sum as f64 / count as f64 };
    let mut note = format!(
        "cost per send: cpu {} (wall {}), paced every {}",
        fmt_ns(cost.cpu_ns as u64),
        fmt_ns(cost.wall_ns as u64),
        fmt_ns(gap.as_nanos() as u64)
    );
    let mut extra = vec![
        ("send_cpu_ns", cost.cpu_ns),
        ("send_wall_ns", cost.wall_ns),
        ("pacing_gap_ns", gap.as_nanos() as f64),
        ("clock_overhead_cpu_ns", overhead.cpu_ns as f64),
        ("clock_overhead_wall_ns", overhead.wall_ns as f64),
    ];
    if let (Some(one), true) = (at_one, n > 1) {
        let (rc, rw) = (cost.cpu_ns / one.cpu_ns, cost.wall_ns / one.wall_ns);
        note.push_str(&format!("; {n} subscribers vs 1: cpu {rc:.2}x, wall {rw:.2}x"));
        extra.push(("send_cpu_ratio_vs_1", rc));
        extra.push(("send_wall_ratio_vs_1", rw));
    }
    let lost = (count * n as u64).saturating_sub(received);
    if lost > 0 {
        note.push_str(&format!(
            "; subscribers did not keep up ({lost} lost): fewer spinning processes than cores, --wait block, or --count"
        ));
    }
    let m = Measurement {
        system: System::Shoal,
        wait: run.wait,
        mode: Mode::Fanout,
        size,
        subscribers: n,
        latency: super::report::Latency::from_histogram(&hist),
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
    };
    Ok((m, cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_grows_with_subscribers_and_size() {
        assert_eq!(pacing_gap(1, 64), Duration::from_nanos(20_032));
        assert!(pacing_gap(4, 4 << 20) > pacing_gap(1, 4 << 20));
    }

    #[test]
    fn clock_overhead_is_small_and_bracket_measures_work() {
        let o = ClockOverhead::calibrate();
        assert!(o.cpu_ns < 100_000 && o.wall_ns < 100_000, "{o:?}");
        let (cpu, wall) = bracket(|| {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(2) {
                std::hint::spin_loop();
            }
        });
        assert!(wall >= 2_000_000, "{wall}");
        assert!(cpu > 0 && cpu <= wall + 1_000_000, "{cpu} {wall}");
    }
}
