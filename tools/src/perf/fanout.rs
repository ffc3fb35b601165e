//! 1->N fan-out: the cost of `send()` with N subscriber processes against its cost with one.
//!
//! One publisher, one topic; a subscriber process (sink) that stays, and N-1 more that join and
//! leave. Per payload size the publisher sends in 16 phases, 1, N, N, 1, 1, N, N, 1, ... subscribers
//! (the machine's drift falls on both counts alike), at one pace for all (one send per gap, so
//! that N subscribers keep up). Comparing one publisher with itself keeps everything but the
//! subscriber count equal (ring, addresses, connection state).
//!
//! The cost per send is the publishing thread's CPU time inside `send()` (CLOCK_THREAD_CPUTIME_ID
//! read around each send, less the median cost of the clock reads themselves, taken next to the
//! sends in the same conditions): unlike wall time it excludes the time the thread was preempted,
//! which on a 2-core machine with N spinning subscribers would dominate. Small spin-mode sends are
//! timed in bursts of 16 (the clock read is a system call of ~0.5 µs); blocking-mode sends one by
//! one, so that each meets sleeping subscribers. A phase's cost is the mean of its sends: in blocking mode the
//! cost of one send is bimodal, ~0.3 µs when it finds nobody asleep and ~5-10 µs (on this kind of VM: the wake-up
//! of a halted vCPU) when it wakes a thread, so a median reports only which of the two makes up more than half of
//! the sends (with one subscriber about half of them wake it), not what the sends cost. The figure compared (targets
//! T5, S6) is the median of the ratios of each N phase's mean to each 1 phase's mean of the same ABBA block
//! (1, N, N, 1 phases: four ratios per block, sixteen in all): on a shared VM a whole phase can run
//! 1.5-3x slower (the clock read's own cost rises with it), and for a while, minutes at times, every
//! copy of a large message 5-10x slower, for one process as for another; a block's four phases
//! follow each other, so its ratios compare sends made in one regime, and the median outvotes a
//! slow phase (two of the sixteen ratios) and a block a change fell in. Per count, the median of its
//! phases' means, the median and mean over all sends, and the wall time are reported alongside.
//! Each
//! phase starts with unmeasured sends that let the ring reach its size for the payload and fault
//! its pages in.
//!
//! On a machine with more than one CPU the publishing thread keeps CPU 0 and the subscribers share the others, in
//! both wait modes (see `run`): subscribers running on the publisher's core would evict its cache between sends.
//!
//! The publisher writes the whole payload before each send, as an application that produces its
//! message does. Without that, on a 2-core machine the subscribers' copies run on the
//! publisher's core while it waits for the next send and evict its idle buffer: the N side then
//! measured cache misses on a source buffer nobody had touched for milliseconds (1 MB: 1.2-1.4x),
//! not the cost of send().

use std::time::{Duration, Instant};

use anyhow::bail;
use hdrhistogram::Histogram;
use shoal::Node;

use super::Run;
use super::args::{Mode, System, Transport, WaitMode};
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
    /// CPU time of the publishing thread: the median of the phases' means (the figure compared).
    pub(crate) cpu_ns: f64,
    /// Wall time: the median of the phases' means.
    pub(crate) wall_ns: f64,
    /// Median CPU time of the publishing thread over all phases.
    pub(crate) cpu_p50_ns: f64,
    /// Mean CPU time of the publishing thread.
    pub(crate) cpu_mean_ns: f64,
    /// Median wall time over all phases.
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
    /// Medians of empty (CPU, wall) brackets; `None` without any.
    fn median_of(brackets: &[(u64, u64)]) -> Option<ClockOverhead> {
        (!brackets.is_empty()).then(|| ClockOverhead {
            cpu_ns: median(brackets.iter().map(|b| b.0)),
            wall_ns: median(brackets.iter().map(|b| b.1)),
        })
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

/// ABBA blocks per size: 8 phases of each count.
const PLAN_REPEATS: usize = 4;

/// Subscriber counts of the phases of one size: ABBA order, so that a linear drift of the machine cancels.
fn phase_plan(n_max: usize) -> Vec<usize> {
    if n_max <= 1 {
        return vec![1];
    }
    [1, n_max, n_max, 1].repeat(PLAN_REPEATS)
}

/// What the phases of one size gathered for one subscriber count.
#[derive(Default)]
struct Gathered {
    /// (CPU, wall) ns of each measured send, clock overhead removed (a burst's sends share its cost).
    sends: Vec<(u64, u64)>,
    /// The clock overhead of each phase.
    overheads: Vec<ClockOverhead>,
    /// Mean (CPU, wall) ns per send of each phase.
    phase_mean: Vec<(u64, u64)>,
    /// Sends per clock bracket.
    burst: u64,
    /// Messages each subscriber should have received, summed over the subscribers.
    expected: u64,
    received: u64,
    drops: u64,
    peer_cpu: CpuTime,
    peer_rss_kb: u64,
    /// Delivery latency (send to receive) of the slowest subscriber of any phase: p50, p99.
    delivery: Option<(u64, u64)>,
    elapsed: Duration,
    cpu: CpuTime,
    warmup: u64,
}

/// The publisher and its sinks.
struct Bench<'r> {
    run: &'r Run<'r>,
    name: String,
    tx: shoal_link::ShoalTx,
    peers: Vec<Peer>,
    isolate: bool,
}

impl Bench<'_> {
    /// Spawns or stops sinks until the publisher has exactly `n` subscribers.
    fn set_subscribers(&mut self, n: usize) -> anyhow::Result<()> {
        while self.peers.len() > n {
            if let Some(p) = self.peers.pop() {
                p.quit()?;
            }
        }
        let first_new = self.peers.len();
        for i in first_new..n {
            let spec = PeerSpec {
                system: System::Shoal,
                wait: self.run.wait,
                name: &self.name,
                index: i,
                sink_only: true,
                // Subscribers off the publisher's CPU (see `run`).
                cpu: self.isolate.then(|| 1 + i % (self.run.cpus - 1)),
                pages: None,
                transport: Transport::Shm,
                netns: None,
            };
            self.peers.push(Peer::spawn(&spec)?);
        }
        for p in &mut self.peers[first_new..] {
            p.wait_ready()?;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.tx.0.subscriber_count() != n {
            if Instant::now() > deadline {
                bail!(
                    "the fan-out publisher has {} subscribers, expected {n} within 10 s: check shoal registration \
                     (UDP port 14000 on loopback)",
                    self.tx.0.subscriber_count()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// One phase: `count` measured sends (after a warm-up) to the current subscribers, in bursts of
    /// [`burst_for`] sends.
    fn phase(&mut self, size: usize, gap: Duration, count: u64, acc: &mut Gathered) -> anyhow::Result<()> {
        let burst = burst_for(self.run.wait, size);
        let count = count.div_ceil(burst) * burst;
        let warmup = warmup_for(count).div_ceil(burst) * burst;
        for p in &mut self.peers {
            p.command(PeerCommand::Sink { count: warmup + count })?;
        }
        // One buffer per message of a burst, written (as an application writes its message) before the burst.
        let mut bufs: Vec<Vec<u8>> = (0..burst).map(|_| vec![0u8; size]).collect();
        let mut pacer = Pacer::new(1e9 / gap.as_nanos() as f64, burst);
        for seq in 0..warmup {
            pacer.wait_for(seq);
            let out = &mut bufs[0];
            out[..HEADER_LEN].copy_from_slice(&header(seq, mono_ns()));
            self.tx.send_copy(out)?;
        }
        let mut raw = Vec::with_capacity((count / burst) as usize);
        let mut empty = Vec::with_capacity((count / burst) as usize);
        let cpu0 = CpuTime::now();
        let start = Instant::now();
        let mut seq = warmup;
        while seq < warmup + count {
            pacer.wait_for(seq);
            for (i, b) in bufs.iter_mut().enumerate() {
                b.fill((seq + i as u64) as u8);
            }
            // An empty bracket next to each burst: the clock reads' own cost in the same conditions (it varies with
            // the machine's state, and under N spinning subscribers a thread-CPU clock read costs more than idle).
            empty.push(bracket(|| ()));
            let tx = &mut self.tx;
            let mut sent = Ok(());
            raw.push(bracket(|| {
                for (i, out) in bufs.iter_mut().enumerate() {
                    out[..HEADER_LEN].copy_from_slice(&header(seq + i as u64, mono_ns()));
                    if let Err(e) = tx.send_copy(out) {
                        sent = Err(e);
                        return;
                    }
                }
            }));
            sent?;
            seq += burst;
        }
        acc.elapsed += start.elapsed();
        let cpu = CpuTime::now().since(cpu0);
        acc.cpu.user_us += cpu.user_us;
        acc.cpu.sys_us += cpu.sys_us;
        // Each send's cost: its burst's bracket less this phase's median clock cost, shared by the burst's sends.
        let overhead = ClockOverhead::median_of(&empty).unwrap_or(ClockOverhead { cpu_ns: 0, wall_ns: 0 });
        let sends: Vec<(u64, u64)> = raw
            .iter()
            .map(|&(cpu, wall)| {
                (cpu.saturating_sub(overhead.cpu_ns) / burst, wall.saturating_sub(overhead.wall_ns) / burst)
            })
            .collect();
        acc.phase_mean.push((mean(sends.iter().map(|s| s.0)), mean(sends.iter().map(|s| s.1))));
        acc.sends.extend(sends);
        acc.overheads.push(overhead);
        acc.warmup = warmup;
        acc.burst = burst;
        acc.expected += (warmup + count) * self.peers.len() as u64;
        for p in &mut self.peers {
            let r = p.report()?;
            if let Some(l) = r.latency {
                let (p50, p99) = acc.delivery.unwrap_or((0, 0));
                acc.delivery = Some((p50.max(l.p50), p99.max(l.p99)));
            }
            acc.received += r.received;
            acc.drops += r.drops;
            acc.peer_cpu.user_us += r.cpu.user_us;
            acc.peer_cpu.sys_us += r.cpu.sys_us;
            acc.peer_rss_kb = acc.peer_rss_kb.max(r.peak_rss_kb);
        }
        Ok(())
    }
}

/// The mean of some values, rounded down (0 without any).
fn mean(values: impl Iterator<Item = u64>) -> u64 {
    let (sum, n) = values.fold((0u128, 0u128), |(s, n), v| (s + u128::from(v), n + 1));
    u64::try_from(sum / n.max(1)).unwrap_or(u64::MAX)
}

/// The median of some values (0 without any).
fn median(values: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.collect();
    if v.is_empty() {
        return 0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

/// Sends per clock bracket. Small spin-mode sends (~0.3 µs) go in bursts, so that the thread-CPU clock read (a
/// system call, ~0.5 µs, varying with the machine's state) does not dwarf what it measures. Blocking-mode sends
/// are timed one by one: each then meets sleeping subscribers and pays its wake-up (several µs here), as an isolated
/// send does; in a burst only the first would.
fn burst_for(wait: WaitMode, size: usize) -> u64 {
    match wait {
        WaitMode::Spin if size <= 4096 => 16,
        _ => 1,
    }
}

/// Runs fan-out with 1 and with `n_max` subscribers for every size (see the module comment).
pub(crate) fn run(
    run: &Run,
    node: &Node,
    n_max: usize,
    name_of: &mut dyn FnMut() -> String,
    rep: &mut Reporter,
) -> anyhow::Result<()> {
    // The subscribers need cores other than the publisher's: spinning ones would make its cost the scheduler's
    // (every send after a context switch meets cold caches), and sleeping ones that wake on its core evict its
    // private cache between two sends (1 MB to 16 block-mode subscribers on 2 cores: the send's copy ran from L3,
    // 104 us against 44 us to one; with the subscribers on the other core 52-58 us against 65-78 us). That is the
    // cost of sharing a core with other processes' work, not of the send, so in both wait modes the publishing
    // thread keeps CPU 0 and the subscribers share the others.
    let isolate = run.cpus > 1;
    let _pinned = if isolate && !run.args.pin { Some(pin_thread_for_scope(0)?) } else { None };
    let name = name_of();
    let (topic, _) = shoal_link::topics(&name);
    let tx = shoal_link::publisher(node, &topic)?;
    let mut bench = Bench { run, name, tx, peers: Vec::new(), isolate };
    bench.set_subscribers(1)?;
    let placement = if isolate {
        format!("publishing thread on CPU 0, subscribers on CPUs 1-{}", run.cpus - 1)
    } else {
        "unpinned".to_string()
    };
    let plan = phase_plan(n_max);
    rep.note(&format!(
        "-- fan-out: shoal, wait={}, topic {topic}, phases of {} subscriber process(es) per size, {placement}; cost \
         per send = the publishing thread's CPU time inside send() (excludes preemption; wall time alongside); \
         latency columns = wall time inside send()",
        run.wait,
        plan.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    ));
    for &size in &run.args.sizes() {
        let gap = pacing_gap(n_max, size);
        let phases_per_count = plan.iter().filter(|n| **n == 1).count() as u64;
        let per_phase = run.args.fanout_count_for(size).div_ceil(phases_per_count).max(1);
        let mut one = Gathered::default();
        let mut many = Gathered::default();
        for &n in &plan {
            bench.set_subscribers(n)?;
            let acc = if n == 1 { &mut one } else { &mut many };
            bench.phase(size, gap, per_phase, acc)?;
        }
        let one_phases = one.phase_mean.clone();
        let first = report(run, rep, size, 1, gap, one, None);
        if n_max > 1 {
            report(run, rep, size, n_max, gap, many, Some((first, &one_phases)));
        }
    }
    bench.set_subscribers(0)
}

/// The ratio of the `many` phases to the `one` phases (their means' `value`): the median of the ratios of each
/// `many` phase to each `one` phase of the same ABBA block of the plan (`phase_plan`: block k holds the phases 2k and
/// 2k+1 of each count), the mean of the middle two of an even number.
fn block_ratio(one: &[(u64, u64)], many: &[(u64, u64)], value: impl Fn(&(u64, u64)) -> u64) -> f64 {
    let mut ratios: Vec<f64> = one
        .chunks(2)
        .zip(many.chunks(2))
        .flat_map(|(o, m)| {
            let value = &value;
            o.iter().flat_map(move |o| m.iter().map(move |m| value(m) as f64 / value(o).max(1) as f64))
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    match ratios.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => ratios[n / 2],
        n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
    }
}

/// Reports the sends of one subscriber count; with `vs_one` (the one-subscriber cost and its phases' means), their
/// ratio to the one-subscriber cost. Returns the cost.
fn report(
    run: &Run,
    rep: &mut Reporter,
    size: usize,
    n: usize,
    gap: Duration,
    acc: Gathered,
    vs_one: Option<(SendCost, &[(u64, u64)])>,
) -> SendCost {
    let (hist, cost) = summarize(&acc.sends, &acc.phase_mean);
    let messages = acc.sends.len() as u64 * acc.burst;
    let phases = acc.overheads.len().max(1) as u64;
    let overhead = ClockOverhead {
        cpu_ns: acc.overheads.iter().map(|o| o.cpu_ns).sum::<u64>() / phases,
        wall_ns: acc.overheads.iter().map(|o| o.wall_ns).sum::<u64>() / phases,
    };
    let mut note = format!(
        "cost per send: cpu {} (median of the phases' means; all sends: p50 {} mean {}), wall {} (p50 {} mean \
         {}), {} send(s) per clock reading every {}, {} warm-up sends per phase",
        fmt_ns(cost.cpu_ns as u64),
        fmt_ns(cost.cpu_p50_ns as u64),
        fmt_ns(cost.cpu_mean_ns as u64),
        fmt_ns(cost.wall_ns as u64),
        fmt_ns(cost.wall_p50_ns as u64),
        fmt_ns(cost.wall_mean_ns as u64),
        acc.burst,
        fmt_ns(gap.as_nanos() as u64 * acc.burst),
        acc.warmup
    );
    let mut extra = vec![
        ("send_cpu_ns", cost.cpu_ns),
        ("send_cpu_p50_ns", cost.cpu_p50_ns),
        ("send_cpu_mean_ns", cost.cpu_mean_ns),
        ("send_wall_ns", cost.wall_ns),
        ("send_wall_p50_ns", cost.wall_p50_ns),
        ("send_wall_mean_ns", cost.wall_mean_ns),
        ("pacing_gap_ns", gap.as_nanos() as f64),
        ("phases", acc.phase_mean.len() as f64),
        ("warmup_sends", acc.warmup as f64),
        ("sends_per_clock_reading", acc.burst as f64),
        ("clock_overhead_cpu_ns", overhead.cpu_ns as f64),
        ("clock_overhead_wall_ns", overhead.wall_ns as f64),
    ];
    if let Some((p50, p99)) = acc.delivery {
        note.push_str(&format!("; delivery p50 {} p99 {} (slowest subscriber)", fmt_ns(p50), fmt_ns(p99)));
        extra.push(("delivery_p50_ns", p50 as f64));
        extra.push(("delivery_p99_ns", p99 as f64));
    }
    if let Some((one, one_phases)) = vs_one {
        let rc = block_ratio(one_phases, &acc.phase_mean, |p| p.0);
        let rw = block_ratio(one_phases, &acc.phase_mean, |p| p.1);
        let rm = cost.cpu_ns / one.cpu_ns;
        let rp = cost.cpu_p50_ns / one.cpu_p50_ns;
        note.push_str(&format!(
            "; {n} subscribers vs 1: cpu {rc:.2}x (the median of its phases' ratios to the 1 phases of the same \
             ABBA block, phase means; of the counts' median phase means {rm:.2}x, of all sends' p50 {rp:.2}x), wall \
             {rw:.2}x"
        ));
        extra.push(("send_cpu_ratio_vs_1", rc));
        extra.push(("send_cpu_medians_ratio_vs_1", rm));
        extra.push(("send_cpu_p50_ratio_vs_1", rp));
        extra.push(("send_wall_ratio_vs_1", rw));
    }
    let lost = acc.expected.saturating_sub(acc.received);
    if lost > 0 {
        note.push_str(&format!(
            "; subscribers did not keep up ({lost} lost): fewer spinning processes than cores, --wait block, or \
             --count"
        ));
    }
    rep.report(Measurement {
        system: System::Shoal,
        transport: Transport::Shm.label(System::Shoal),
        via: Default::default(),
        wait: run.wait,
        mode: Mode::Fanout,
        size,
        subscribers: n,
        latency: super::report::Latency::from_histogram(&hist),
        msgs_per_s: messages as f64 / acc.elapsed.as_secs_f64().max(1e-9),
        messages,
        lost: Some(lost),
        drops: Some(acc.drops),
        cpu: acc.cpu,
        peer_cpu: acc.peer_cpu,
        peak_rss_kb: peak_rss_kb(),
        peer_peak_rss_kb: acc.peer_rss_kb,
        note: Some(note),
        extra,
    });
    cost
}

/// The wall-time histogram and the cost of sends given as (CPU, wall) ns, with the means of their phases.
fn summarize(sends: &[(u64, u64)], phase_mean: &[(u64, u64)]) -> (Histogram<u64>, SendCost) {
    let mut hist = new_histogram();
    let mut cpu_hist = new_histogram();
    let (mut cpu_sum, mut wall_sum) = (0u64, 0u64);
    for &(cpu, wall) in sends {
        cpu_sum += cpu;
        wall_sum += wall;
        let _ = hist.record(wall.max(1));
        let _ = cpu_hist.record(cpu.max(1));
    }
    let n = sends.len().max(1) as f64;
    let cost = SendCost {
        cpu_ns: median(phase_mean.iter().map(|p| p.0)) as f64,
        wall_ns: median(phase_mean.iter().map(|p| p.1)) as f64,
        cpu_p50_ns: cpu_hist.value_at_quantile(0.5) as f64,
        cpu_mean_ns: cpu_sum as f64 / n,
        wall_p50_ns: hist.value_at_quantile(0.5) as f64,
        wall_mean_ns: wall_sum as f64 / n,
    };
    (hist, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_median_of_the_phases_ratios_within_their_blocks() {
        // Four ABBA blocks (1 and N phase means in plan order); every copy 5x slower from the third block's second
        // 1 phase on, a change of regime in mid-run.
        let one = [(100, 10), (100, 10), (100, 10), (100, 10), (100, 10), (500, 50), (500, 50), (500, 50)];
        let many = [(110, 11), (110, 11), (120, 12), (120, 12), (500, 50), (500, 50), (550, 55), (550, 55)];
        // Ratios: 1.1 four times, 1.2 four times, 5, 1, 5, 1 (the change within the block), 1.1 four times.
        assert!((block_ratio(&one, &many, |p| p.0) - 1.1).abs() < 1e-9);
        assert!((block_ratio(&one, &many, |p| p.1) - 1.1).abs() < 1e-9);
        // The counts' median phase means set against each other would say 5x (500 / 100).
        assert_eq!((median(many.iter().map(|p| p.0)), median(one.iter().map(|p| p.0))), (500, 100));
        // One phase 3x slower moves two of the sixteen ratios, not the median.
        let mut slow = many;
        slow[2].0 = 360;
        assert!((block_ratio(&one, &slow, |p| p.0) - 1.1).abs() < 1e-9);
        // An even count takes the mean of the middle two.
        assert!((block_ratio(&[(100, 1), (100, 1)], &[(100, 1), (120, 1)], |p| p.0) - 1.1).abs() < 1e-9);
        assert!(block_ratio(&[], &[], |p| p.0).is_nan());
    }

    #[test]
    fn phases_alternate_abba_with_as_many_of_each_count() {
        let p = phase_plan(4);
        assert_eq!(p[..8], [1, 4, 4, 1, 1, 4, 4, 1]);
        assert_eq!(p.len(), 4 * PLAN_REPEATS);
        assert_eq!(p.iter().filter(|n| **n == 1).count(), p.iter().filter(|n| **n == 4).count());
        assert_eq!(phase_plan(1), vec![1]);
    }

    #[test]
    fn pacing_grows_with_subscribers_and_size() {
        assert_eq!(pacing_gap(1, 64), Duration::from_nanos(20_032));
        assert!(pacing_gap(4, 4 << 20) > pacing_gap(1, 4 << 20));
    }

    #[test]
    fn clock_overhead_is_small_and_bracket_measures_work() {
        let empty: Vec<(u64, u64)> = (0..2001).map(|_| bracket(|| ())).collect();
        let o = ClockOverhead::median_of(&empty).expect("brackets");
        assert_eq!(ClockOverhead::median_of(&[]), None);
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
