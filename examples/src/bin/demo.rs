//! The shoal demo: one publisher process and two subscriber processes on this host exchange traffic over the
//! shared-memory ring; every second each subscriber prints its rate, bandwidth, latency percentiles and drops.
//!
//! `cargo run --release -p shoal-examples --bin demo -- [SECONDS] [RATE_HZ] [SIZE_BYTES]`

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;

const TOPIC_PREFIX: &str = "shoal_demo";

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn publisher(topic: &str, seconds: u64, rate: f64, size: usize) -> Result<()> {
    let node = shoal::Node::init("demo_pub")?;
    let mut publ = node.publisher(topic).type_info(shoal::TypeInfo::raw("shoal.demo.Bytes")).create()?;
    if publ.wait_for_subscribers(2, Duration::from_secs(10)).is_err() {
        bail!("the subscribers did not show up within 10 s");
    }
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut n: u64 = 0;
    while start.elapsed() < Duration::from_secs(seconds) {
        n += 1;
        publ.loan(size)?
            .write(|b| {
                b[..8].copy_from_slice(&mono_ns().to_le_bytes());
                b[8..].fill(n as u8);
            })
            .send();
        let due = start + period.mul_f64(n as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
    println!("[publisher] sent {n} messages of {size} B in {seconds} s");
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

fn subscriber(topic: &str, name: &str, seconds: u64) -> Result<()> {
    let node = shoal::Node::init(name)?;
    let sub = node.subscriber(topic).create()?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut count, mut bytes) = (0u64, 0u64);
    let mut window = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(seconds + 12);
    let mut total = 0u64;
    while Instant::now() < deadline {
        let got = sub.recv_with(Some(Duration::from_millis(200)), |s| {
            let p = s.payload();
            let sent = u64::from_le_bytes(p.read_array(0).unwrap_or_default());
            (mono_ns().saturating_sub(sent), p.len())
        });
        match got {
            Ok((lat_ns, len)) => {
                hist.saturating_record(lat_ns.max(1));
                count += 1;
                total += 1;
                bytes += len as u64;
            }
            Err(shoal::RecvError::Timeout) if total > 0 => break,
            Err(shoal::RecvError::Timeout) => continue,
            Err(e) => return Err(e.into()),
        }
        if window.elapsed() >= Duration::from_secs(1) {
            let dt = window.elapsed().as_secs_f64();
            println!(
                "[{name}] {:>8.0} msg/s {:>8.1} MB/s  latency p50 {:>6.1} µs  p99 {:>6.1} µs  max {:>8.1} µs  drops {}",
                count as f64 / dt,
                bytes as f64 / dt / 1e6,
                hist.value_at_quantile(0.5) as f64 / 1e3,
                hist.value_at_quantile(0.99) as f64 / 1e3,
                hist.max() as f64 / 1e3,
                sub.drops()
            );
            hist.reset();
            count = 0;
            bytes = 0;
            window = Instant::now();
        }
    }
    println!("[{name}] received {total} messages, {} dropped", sub.drops());
    Ok(())
}

const USAGE: &str = "usage: demo [SECONDS [RATE_HZ [SIZE_BYTES]]]   (defaults: 5 s, 10000 msg/s, 4096 B)
  starts one publisher and two subscriber processes on this host; each subscriber prints its rate, bandwidth,
  latency percentiles and drops every second";

/// Positional argument `i`, or `default` when absent; a value that does not parse says which and what is expected.
fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str, expected: &str, default: T) -> Result<T> {
    match args.get(i) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| anyhow::anyhow!("{name} must be {expected}, not {v:?}\n{USAGE}")),
    }
}

/// Errors are printed as one message (with their causes), never with a backtrace, whatever `RUST_BACKTRACE` says.
fn main() {
    if let Err(e) = run() {
        eprintln!("demo: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--role") {
        let role = args.get(2).context("--role needs pub or sub")?;
        let topic = args.get(3).context("missing topic")?;
        let seconds: u64 = args.get(4).context("missing seconds")?.parse()?;
        return match role.as_str() {
            "pub" => publisher(topic, seconds, args[5].parse()?, args[6].parse()?),
            "sub" => subscriber(topic, &args[5], seconds),
            other => bail!("unknown role {other}"),
        };
    }
    if args.iter().skip(1).any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    if args.len() > 4 {
        bail!("too many arguments\n{USAGE}");
    }
    let seconds: u64 = arg(&args, 1, "SECONDS", "a whole number of seconds", 5)?;
    let rate: f64 = arg(&args, 2, "RATE_HZ", "messages per second, e.g. 1000 or 0.5", 10_000.0)?;
    let size: usize = arg(&args, 3, "SIZE_BYTES", "a whole number of bytes", 4096)?;
    if !(rate.is_finite() && rate > 0.0) {
        bail!("RATE_HZ must be a positive number of messages per second, not {rate}\n{USAGE}");
    }
    if size < 8 {
        bail!("SIZE_BYTES must be at least 8\n{USAGE}");
    }
    let topic = format!("{TOPIC_PREFIX}_{}", std::process::id());
    println!("shoal demo: 1 publisher -> 2 subscribers on topic {topic}, {rate} msg/s of {size} B for {seconds} s");
    let exe = std::env::current_exe()?;
    let spawn = |extra: &[String]| -> Result<Child> {
        let mut c = Command::new(&exe);
        c.arg("--role").args(extra);
        Ok(c.spawn()?)
    };
    let s = seconds.to_string();
    let mut children = vec![
        spawn(&["sub".into(), topic.clone(), s.clone(), "subscriber-1".into()])?,
        spawn(&["sub".into(), topic.clone(), s.clone(), "subscriber-2".into()])?,
        spawn(&["pub".into(), topic.clone(), s, rate.to_string(), size.to_string()])?,
    ];
    let mut ok = true;
    for c in &mut children {
        ok &= c.wait()?.success();
    }
    if !ok {
        bail!("a demo process failed (see its output above)");
    }
    Ok(())
}
