//! 1->N fan-out: one publisher, N subscriber processes (sinks), first with one subscriber and
//! then with N, sends paced so that N subscribers keep up (the same pace for both runs, so the
//! two differ only in the number of subscribers).
//!
//! The cost per send is the publishing thread's CPU time inside `send()` (CLOCK_THREAD_CPUTIME_ID
//! read around each send, less the median cost of the clock reads themselves, taken next to the sends in the same
//! conditions): unlike wall time it
//! excludes the time the thread was preempted, which on a 2-core machine with N spinning
//! subscribers would dominate. Its median over the sends is the figure compared (target T5),
//! the mean is reported alongside (it also carries the rare send that met a page fault, a timer
//! interrupt or a slow clock read under contention), and so is the wall time. A warm-up of
//! unmeasured sends first lets the ring reach its size for the payload and fault its pages in.
//!
//! The publisher writes the whole payload before each send, as an application that produces its
//! message does. Without that, on a 2-core machine the N subscribers' copies run on the
//! publisher's core while it waits for the next send and evict its idle buffer: the N=4 run then
//! measured cache misses on a source buffer nobody had touched for milliseconds (1 MB: 1.2-1.4x),
//! not the cost of send().

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shoal::Node;

use super::Run;
use super::args::WaitMode;
use super::args::{Mode, System};
use super::link::{HEADER_LEN, Sender, header};
use super::pace::Pacer;
use super::peer::{Peer, PeerCommand, PeerSpec};
use super::report::{Measurement, Reporter, fmt_ns, new_histogram};
use super::shoal_link;
use super::sys::{CpuTime, mono_ns, peak_rss_kb, pin_thread_for_scope, thread_cpu_ns};

/// Gap between two sends so that `n` subscribers copying `size` bytes each keep up.
pub(crate) fn pacing_gap(n: usize, size: usize) -> Duration {
    // 20 µs for the wake-up, plus 0.5 ns per byte per subscriber for the copies on 2 cores.
    Duration::from_nanos(20_000 + (n as u64 * size as u64) / 2)
}

/// Cost of one `send()`, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SendCost {
    /// Median CPU time of the publishing thread.
    pub(crate) cpu_p50_ns: f64,
    /// Mean CPU time of the publishing thread.
    pub(crate) cpu_mean_ns: f64,
    /// Median wall time.
    pub(crate) wall_p50_ns: f64,
    /// Mean wall time.
    pub(crate) wall_mean_ns: f64,
}

/// Unmeasured sends before the measured ones: enough for the ring to grow to the payload's size
/// and for its slots to be written once.
fn warmup_for(count: u64) -> u64 {
    (count / 10).clamp(20, 500)
}

/// What reading the two clocks around a send costs by itself (median of empty brackets), ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClockOverhead {
    cpu_ns: u64,
    wall_ns: u64,
}

impl ClockOverhead {
    /// Measured on an idle publisher, before any subscriber starts (used if a run has no sends).
    fn calibrate() -> ClockOverhead {
        let mut brackets: Vec<(u64, u64)> = (0..2001).map(|_| bracket(|| ())).collect();
        ClockOverhead::median_of(&mut brackets).unwrap_or(ClockOverhead { cpu_ns: 0, wall_ns: 0 })
    }

    /// Medians of empty (CPU, wall) brackets; `None` without any.
    fn median_of(brackets: &mut [(u64, u64)]) -> Option<ClockOverhead> {
        let mid = brackets.len().checked_sub(1)? / 2;
        let cpu_ns = *brackets.select_nth_unstable_by_key(mid, |b| b.0).1;
        let wall_ns = *brackets.select_nth_unstable_by_key(mid, |b| b.1).1;
        Some(ClockOverhead { cpu_ns: cpu_ns.0, wall_ns: wall_ns.1 })
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
    // Spinning subscribers need cores of their own: with more spinning processes than cores, the ones sharing the
    // publisher's core would make its cost the scheduler's (every send after a context switch meets cold caches).
    // So in spin mode (and with --pin) the publishing thread keeps CPU 0 and the subscribers share the others.
    let isolate = run.cpus > 1 && (run.wait == WaitMode::Spin || run.args.pin);
    let _pinned = if isolate && !run.args.pin { Some(pin_thread_for_scope(0)?) } else { None };
    let sink_cpu = |i: usize| isolate.then(|| 1 + i % (run.cpus - 1));
    let overhead = ClockOverhead::calibrate();
    let mut at_one: HashMap<usize, SendCost> = HashMap::new();
    let rounds: Vec<usize> = if n_max == 1 { vec![1] } else { vec![1, n_max] };
    let pace = |size| pacing_gap(n_max, size);
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
                cpu: sink_cpu(i),
            };
            peers.push(Peer::spawn(&spec)?);
        }
        for p in &mut peers {
            p.wait_ready()?;
        }
        shoal_link::wait_subscribers(&tx, n)?;
        let placement = if isolate {
            format!("publishing thread on CPU 0, subscribers on CPUs 1-{}", run.cpus - 1)
        } else {
            "unpinned".to_string()
        };
        rep.note(&format!(
            "-- fan-out: shoal, wait={}, {n} subscriber process(es), topic {ping}, {placement}; cost per send = the \
             publishing thread's CPU time inside send() (excludes preemption; wall time alongside); latency columns \
             = wall time inside send()",
            run.wait
        ));
        for size in run.args.sizes_for(Mode::Fanout) {
            let (m, cost) = measure(run, &mut tx, &mut peers, size, pace(size), overhead, at_one.get(&size).copied())?;
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
    gap: Duration,
    overhead: ClockOverhead,
    at_one: Option<SendCost>,
) -> anyhow::Result<(Measurement, SendCost)> {
    let n = peers.len();
    let count = run.args.fanout_count_for(size);
    let warmup = warmup_for(count);
    for p in peers.iter_mut() {
        p.command(PeerCommand::Sink { count: warmup + count })?;
    }
    let mut pacer = Pacer::new(1e9 / gap.as_nanos() as f64, 1);
    let mut out = vec![0u8; size];
    for seq in 0..warmup {
        pacer.wait_for(seq);
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        tx.send_copy(&out)?;
    }
    // Raw brackets around each send, and empty brackets next to them: the clock reads' own cost is taken in the
    // same conditions as the sends (under N spinning subscribers a thread-CPU clock read costs more than idle).
    let mut raw: Vec<(u64, u64)> = Vec::with_capacity(count as usize);
    let mut empty: Vec<(u64, u64)> = Vec::with_capacity(count as usize);
    let cpu0 = CpuTime::now();
    let start = Instant::now();
    for seq in warmup..warmup + count {
        pacer.wait_for(seq);
        out.fill(seq as u8);
        out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
        empty.push(bracket(|| ()));
        let mut sent = Ok(());
        raw.push(bracket(|| sent = tx.send_copy(&out)));
        sent?;
    }
    let elapsed = start.elapsed();
    let cpu = CpuTime::now().since(cpu0);
    let mut received = 0;
    let mut drops = 0;
    let mut peer_cpu = CpuTime::default();
    let mut peer_rss = 0;
    // Delivery latency (send to receive) of the slowest subscriber: p50 and p99.
    let mut delivery: Option<(u64, u64)> = None;
    for p in peers.iter_mut() {
        let r = p.report()?;
        if let Some(l) = r.latency {
            let (p50, p99) = delivery.unwrap_or((0, 0));
            delivery = Some((p50.max(l.p50), p99.max(l.p99)));
        }
        received += r.received;
        drops += r.drops;
        peer_cpu.user_us += r.cpu.user_us;
        peer_cpu.sys_us += r.cpu.sys_us;
        peer_rss = peer_rss.max(r.peak_rss_kb);
    }
    let overhead = ClockOverhead::median_of(&mut empty).unwrap_or(overhead);
    let mut hist = new_histogram();
    let mut cpu_hist = new_histogram();
    let (mut cpu_sum, mut wall_sum) = (0u64, 0u64);
    for (cpu, wall) in raw {
        let cpu = cpu.saturating_sub(overhead.cpu_ns);
        let wall = wall.saturating_sub(overhead.wall_ns);
        cpu_sum += cpu;
        wall_sum += wall;
        let _ = hist.record(wall.max(1));
        let _ = cpu_hist.record(cpu.max(1));
    }
    let cost = SendCost {
        cpu_p50_ns: cpu_hist.value_at_quantile(0.5) as f64,
        cpu_mean_ns: cpu_sum as f64 / count as f64,
        wall_p50_ns: hist.value_at_quantile(0.5) as f64,
        wall_mean_ns: wall_sum as f64 / count as f64,
    };
    let mut note = format!(
        "cost per send: cpu p50 {} mean {} (wall p50 {} mean {}), paced every {}, after {warmup} warm-up sends",
        fmt_ns(cost.cpu_p50_ns as u64),
        fmt_ns(cost.cpu_mean_ns as u64),
        fmt_ns(cost.wall_p50_ns as u64),
        fmt_ns(cost.wall_mean_ns as u64),
        fmt_ns(gap.as_nanos() as u64)
    );
    let mut extra = vec![
        ("send_cpu_ns", cost.cpu_p50_ns),
        ("send_cpu_mean_ns", cost.cpu_mean_ns),
        ("send_wall_ns", cost.wall_p50_ns),
        ("send_wall_mean_ns", cost.wall_mean_ns),
        ("pacing_gap_ns", gap.as_nanos() as f64),
        ("warmup_sends", warmup as f64),
        ("clock_overhead_cpu_ns", overhead.cpu_ns as f64),
        ("clock_overhead_wall_ns", overhead.wall_ns as f64),
    ];
    if let Some((p50, p99)) = delivery {
        note.push_str(&format!("; delivery p50 {} p99 {} (slowest subscriber)", fmt_ns(p50), fmt_ns(p99)));
        extra.push(("delivery_p50_ns", p50 as f64));
        extra.push(("delivery_p99_ns", p99 as f64));
    }
    if let (Some(one), true) = (at_one, n > 1) {
        let rc = cost.cpu_p50_ns / one.cpu_p50_ns;
        let rm = cost.cpu_mean_ns / one.cpu_mean_ns;
        let rw = cost.wall_p50_ns / one.wall_p50_ns;
        note.push_str(&format!("; {n} subscribers vs 1: cpu p50 {rc:.2}x (mean {rm:.2}x), wall p50 {rw:.2}x"));
        extra.push(("send_cpu_ratio_vs_1", rc));
        extra.push(("send_cpu_mean_ratio_vs_1", rm));
        extra.push(("send_wall_ratio_vs_1", rw));
    }
    let lost = ((warmup + count) * n as u64).saturating_sub(received);
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
