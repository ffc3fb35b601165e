//! iceoryx2's publish/subscribe ping-pong between two processes, measured the way `shoal perf` measures shoal
//! (tools/src/perf/pingpong.rs): the main process copies a message whose first 16 bytes are a sequence number and a
//! CLOCK_MONOTONIC timestamp into a loaned sample and sends it; the echo process copies the received sample out into
//! a buffer, copies that buffer into a loaned sample of its own service and sends it back; the main process copies
//! the echo out. One-way latency = round trip / 2, into a histogram of the same bounds and precision as shoal perf's.
//!
//! Wait modes: `spin` polls `Subscriber::receive` in a busy loop; `block` sleeps on an iceoryx2 event
//! (`Listener::timed_wait`) that the sender's `Notifier` signals after every send (iceoryx2's own way of waking a
//! subscriber; a `WaitSet` attaching the listener would add a multiplexing layer on top of the same wait).
//!
//! Usage (what `shoal perf --baseline` runs; built by scripts/iceoryx2):
//!   shoal-iceoryx2-bench --wait spin|block --sizes 64,4096 --warmups 1000,1000 --iterations 10000,10000
//!                        [--cpu N --peer-cpu M]
//! prints one JSON object per size on stdout (p50_ns .. max_ns, mean_ns, msgs_per_s, messages, CPU and peak RSS of
//! both processes). The echo process is this program again with `--echo PREFIX`, driven through its stdin.

use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use iceoryx2::port::listener::Listener;
use iceoryx2::port::notifier::Notifier;
use iceoryx2::port::publisher::Publisher;
use iceoryx2::port::subscriber::Subscriber;
use iceoryx2::prelude::*;

type Res<T> = Result<T, Box<dyn Error>>;

/// Bytes of the header at the start of every message (sequence, send time), as in shoal perf.
const HEADER_LEN: usize = 16;
/// The sequence number of handshake probes (never a measured message).
const PROBE: u64 = u64::MAX;
/// How long a receive waits before the other process counts as gone.
const RECV_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Spin,
    Block,
}

#[derive(Debug)]
struct Args {
    wait: Wait,
    sizes: Vec<usize>,
    warmups: Vec<u64>,
    iterations: Vec<u64>,
    cpu: Option<usize>,
    peer_cpu: Option<usize>,
    echo: Option<String>,
}

fn parse_list<T: std::str::FromStr>(s: &str) -> Res<Vec<T>>
where
    T::Err: Error + 'static,
{
    s.split(',').map(|x| x.trim().parse::<T>().map_err(|e| format!("{x:?}: {e}").into())).collect()
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        wait: Wait::Spin,
        sizes: Vec::new(),
        warmups: Vec::new(),
        iterations: Vec::new(),
        cpu: None,
        peer_cpu: None,
        echo: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--wait" => {
                a.wait = match val()?.as_str() {
                    "spin" => Wait::Spin,
                    "block" => Wait::Block,
                    w => return Err(format!("--wait {w}: spin or block").into()),
                }
            }
            "--sizes" => a.sizes = parse_list(&val()?)?,
            "--warmups" => a.warmups = parse_list(&val()?)?,
            "--iterations" => a.iterations = parse_list(&val()?)?,
            "--cpu" => a.cpu = Some(val()?.parse()?),
            "--peer-cpu" => a.peer_cpu = Some(val()?.parse()?),
            "--echo" => a.echo = Some(val()?),
            "--help" | "-h" => {
                println!(
                    "shoal-iceoryx2-bench --wait spin|block --sizes A,B --warmups A,B --iterations A,B [--cpu N --peer-cpu M]"
                );
                std::process::exit(0);
            }
            f => return Err(format!("unknown argument {f:?} (see --help)").into()),
        }
    }
    if a.echo.is_none() {
        if a.sizes.is_empty() || a.sizes.len() != a.warmups.len() || a.sizes.len() != a.iterations.len() {
            return Err("--sizes, --warmups and --iterations need one value per size".into());
        }
        if let Some(s) = a.sizes.iter().find(|&&s| s < HEADER_LEN) {
            return Err(format!("size {s} is smaller than the {HEADER_LEN}-byte header").into());
        }
    }
    Ok(a)
}

fn pin(cpu: Option<usize>) -> Res<()> {
    let Some(cpu) = cpu else { return Ok(()) };
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity only access `set`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!("pinning to CPU {cpu}: {}", std::io::Error::last_os_error()).into());
        }
    }
    Ok(())
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// User and system CPU time (µs) and peak RSS (kB) of this process.
fn usage() -> (u64, u64, u64) {
    // SAFETY: a zeroed rusage is valid to be overwritten by getrusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage to write to.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime), ru.ru_maxrss as u64)
}

/// One direction: the sending process's publisher (and notifier in block mode), the other's subscriber (and
/// listener).
struct Tx {
    publisher: Publisher<ipc::Service, [u8], ()>,
    notifier: Option<Notifier<ipc::Service>>,
}

struct Rx {
    subscriber: Subscriber<ipc::Service, [u8], ()>,
    listener: Option<Listener<ipc::Service>>,
}

fn service_names(prefix: &str, size: usize, dir: &str) -> Res<(ServiceName, ServiceName)> {
    Ok((ServiceName::new(&format!("{prefix}_{size}_{dir}"))?, ServiceName::new(&format!("{prefix}_{size}_{dir}_ev"))?))
}

fn pubsub(node: &Node<ipc::Service>, name: &ServiceName) -> Res<PortFactory<ipc::Service, [u8], ()>> {
    // As iceoryx2's own publish-subscribe benchmark sets it up: one publisher, one subscriber, no history, a
    // subscriber buffer of one sample (a ping-pong never has more in flight).
    Ok(node
        .service_builder(name)
        .publish_subscribe::<[u8]>()
        .max_publishers(1)
        .max_subscribers(1)
        .history_size(0)
        .subscriber_max_buffer_size(1)
        .enable_safe_overflow(true)
        .open_or_create()?)
}

type PortFactory<S, P, H> = iceoryx2::service::port_factory::publish_subscribe::PortFactory<S, P, H>;

fn tx(node: &Node<ipc::Service>, prefix: &str, size: usize, dir: &str, wait: Wait) -> Res<Tx> {
    let (data, ev) = service_names(prefix, size, dir)?;
    let publisher = pubsub(node, &data)?.publisher_builder().initial_max_slice_len(size).create()?;
    let notifier = match wait {
        Wait::Spin => None,
        Wait::Block => Some(node.service_builder(&ev).event().open_or_create()?.notifier_builder().create()?),
    };
    Ok(Tx { publisher, notifier })
}

fn rx(node: &Node<ipc::Service>, prefix: &str, size: usize, dir: &str, wait: Wait) -> Res<Rx> {
    let (data, ev) = service_names(prefix, size, dir)?;
    let subscriber = pubsub(node, &data)?.subscriber_builder().create()?;
    let listener = match wait {
        Wait::Spin => None,
        Wait::Block => Some(node.service_builder(&ev).event().open_or_create()?.listener_builder().create()?),
    };
    Ok(Rx { subscriber, listener })
}

impl Tx {
    /// Copies `payload` into a loaned sample and sends it (then wakes the receiver in block mode).
    fn send_copy(&self, payload: &[u8]) -> Res<()> {
        let sample = self.publisher.loan_slice_uninit(payload.len())?;
        sample.write_from_slice(payload).send()?;
        if let Some(n) = &self.notifier {
            n.notify()?;
        }
        Ok(())
    }
}

impl Rx {
    /// Receives the next sample, copying it into `buf`; `Ok(false)` when none came within `timeout`.
    fn recv_copy(&self, buf: &mut Vec<u8>, timeout: Duration) -> Res<bool> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(s) = self.subscriber.receive()? {
                buf.clear();
                buf.extend_from_slice(s.payload());
                return Ok(true);
            }
            match &self.listener {
                None => {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) && start.elapsed() > timeout {
                        return Ok(false);
                    }
                }
                Some(l) => {
                    let left = timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    l.timed_wait(|_| {}, left.min(Duration::from_millis(100)))?;
                }
            }
        }
    }
}

fn seq_of(msg: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(msg.get(..8)?.try_into().ok()?))
}

fn node() -> Res<Node<ipc::Service>> {
    set_log_level(LogLevel::Error);
    Ok(NodeBuilder::new().signal_handling_mode(SignalHandlingMode::Disabled).create::<ipc::Service>()?)
}

/// The main process: spawns the echo process, measures every size, prints a JSON line per size.
fn run_main(a: &Args) -> Res<()> {
    pin(a.cpu)?;
    let prefix = format!("shoal_i2b_{}", std::process::id());
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["--echo", &prefix, "--wait", if a.wait == Wait::Spin { "spin" } else { "block" }]);
    if let Some(c) = a.peer_cpu {
        cmd.args(["--peer-cpu", &c.to_string()]);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
    let mut to_child = child.stdin.take().ok_or("echo stdin")?;
    let mut from_child = BufReader::new(child.stdout.take().ok_or("echo stdout")?);
    let mut line = String::new();
    let mut expect = |word: &str, line: &mut String| -> Res<()> {
        line.clear();
        from_child.read_line(line)?;
        if !line.starts_with(word) {
            return Err(format!("the echo process said {:?}, expected {word:?}", line.trim_end()).into());
        }
        Ok(())
    };
    let node = node()?;
    let result = (|| -> Res<()> {
        for ((&size, &warmup), &iters) in a.sizes.iter().zip(&a.warmups).zip(&a.iterations) {
            let tx = tx(&node, &prefix, size, "a2b", a.wait)?;
            let rx = rx(&node, &prefix, size, "b2a", a.wait)?;
            writeln!(to_child, "size {size} {warmup} {iters}")?;
            to_child.flush()?;
            expect("ready", &mut line)?;
            let mut out = vec![0u8; size];
            let mut back: Vec<u8> = Vec::with_capacity(size);
            // Handshake: probes until one comes back (both sides' ports are connected then).
            out[..8].copy_from_slice(&PROBE.to_le_bytes());
            let deadline = Instant::now() + RECV_TIMEOUT;
            loop {
                tx.send_copy(&out)?;
                if rx.recv_copy(&mut back, Duration::from_millis(20))? {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("no echo of a probe within {RECV_TIMEOUT:?} ({size} B)").into());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
            while rx.recv_copy(&mut back, Duration::ZERO)? {}
            let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)?;
            let total = warmup + iters;
            let (mut u0, mut s0, _) = usage();
            let mut t_measured = Instant::now();
            for seq in 0..total {
                if seq == warmup {
                    (u0, s0, _) = usage();
                    t_measured = Instant::now();
                }
                out[..8].copy_from_slice(&seq.to_le_bytes());
                out[8..HEADER_LEN].copy_from_slice(&mono_ns().to_le_bytes());
                let t0 = Instant::now();
                tx.send_copy(&out)?;
                loop {
                    if !rx.recv_copy(&mut back, RECV_TIMEOUT)? {
                        return Err(format!("no echo within {RECV_TIMEOUT:?}: sent seq {seq} ({size} B)").into());
                    }
                    // A late probe echo is skipped.
                    if seq_of(&back) != Some(PROBE) {
                        break;
                    }
                }
                let rtt = t0.elapsed();
                if seq_of(&back) != Some(seq) || back.len() != size {
                    return Err(format!(
                        "echo mismatch: sent seq {seq} ({size} B), got {:?} ({} B)",
                        seq_of(&back),
                        back.len()
                    )
                    .into());
                }
                if seq >= warmup {
                    let _ = hist.record(((rtt.as_nanos() / 2) as u64).max(1));
                }
            }
            let elapsed = t_measured.elapsed();
            let (u1, s1, rss) = usage();
            expect("done", &mut line)?;
            let peer: Vec<u64> = line.split_whitespace().skip(1).map(str::parse).collect::<Result<_, _>>()?;
            let [pu, ps, prss] = peer[..] else { return Err(format!("bad report {line:?}").into()) };
            println!(
                "{{\"size_bytes\":{size},\"p50_ns\":{},\"p90_ns\":{},\"p99_ns\":{},\"p999_ns\":{},\"max_ns\":{},\"mean_ns\":{},\
                 \"msgs_per_s\":{},\"messages\":{iters},\"cpu_user_us\":{},\"cpu_sys_us\":{},\"peak_rss_kb\":{rss},\
                 \"peer_cpu_user_us\":{pu},\"peer_cpu_sys_us\":{ps},\"peer_peak_rss_kb\":{prss}}}",
                hist.value_at_quantile(0.5),
                hist.value_at_quantile(0.9),
                hist.value_at_quantile(0.99),
                hist.value_at_quantile(0.999),
                hist.max(),
                hist.mean(),
                iters as f64 / elapsed.as_secs_f64(),
                u1 - u0,
                s1 - s0,
            );
            std::io::stdout().flush()?;
        }
        Ok(())
    })();
    let _ = writeln!(to_child, "quit");
    drop(to_child);
    let status = child.wait()?;
    result?;
    if !status.success() {
        return Err(format!("the echo process exited with {status}").into());
    }
    Ok(())
}

/// The echo process: for each `size S WARMUP ITERS` line, opens its ports, says `ready`, echoes probes and then
/// WARMUP + ITERS messages, says `done USER_US SYS_US PEAK_RSS_KB` (CPU over the measured messages).
fn run_echo(a: &Args, prefix: &str) -> Res<()> {
    pin(a.peer_cpu)?;
    let node = node()?;
    let stdin = std::io::stdin();
    let mut buf: Vec<u8> = Vec::new();
    for line in stdin.lock().lines() {
        let line = line?;
        let f: Vec<&str> = line.split_whitespace().collect();
        let (size, warmup, iters): (usize, u64, u64) = match f[..] {
            ["quit"] => return Ok(()),
            ["size", s, w, n] => (s.parse()?, w.parse()?, n.parse()?),
            _ => return Err(format!("unknown command {line:?}").into()),
        };
        let rx = rx(&node, prefix, size, "a2b", a.wait)?;
        let tx = tx(&node, prefix, size, "b2a", a.wait)?;
        println!("ready");
        std::io::stdout().flush()?;
        let (mut u0, mut s0, _) = usage();
        let mut echoed = 0u64;
        while echoed < warmup + iters {
            if !rx.recv_copy(&mut buf, RECV_TIMEOUT)? {
                return Err(format!("echo: no message within {RECV_TIMEOUT:?} ({size} B)").into());
            }
            if seq_of(&buf) != Some(PROBE) {
                if echoed == warmup {
                    (u0, s0, _) = usage();
                }
                echoed += 1;
            }
            tx.send_copy(&buf)?;
        }
        let (u1, s1, rss) = usage();
        println!("done {} {} {rss}", u1 - u0, s1 - s0);
        std::io::stdout().flush()?;
    }
    Ok(())
}

fn main() {
    let r = parse_args().and_then(|a| match &a.echo {
        Some(prefix) => run_echo(&a, prefix),
        None => run_main(&a),
    });
    if let Err(e) = r {
        eprintln!("shoal-iceoryx2-bench: error: {e}");
        std::process::exit(1);
    }
}
