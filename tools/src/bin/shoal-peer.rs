//! `shoal-peer`: a scripted publisher, subscriber or service server process for multi-process tests and manual
//! checks.
//!
//! Every message it publishes is self-checking: bytes 0..8 hold the clock, 8..16 the send time (ns, monotonic
//! across processes: CLOCK_MONOTONIC), 16..24 a checksum of the rest, and the rest a pattern derived from the
//! clock. The subscriber verifies each message and reports, as one JSON line on stdout, what it saw.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::json;
use shoal_tools::{emit, fnv1a64, mono_ns};

#[derive(Parser, Debug)]
#[command(name = "shoal-peer", about = "Scripted shoal publisher/subscriber for tests")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Announce this process state (`Node::set_state`): `SEVERITY[:LEVEL[:INFO]]`, e.g. `warning:2:camera at 5 Hz`.
    #[arg(long, global = true)]
    state: Option<String>,
}

/// `SEVERITY[:LEVEL[:INFO]]` as `Node::set_state`'s arguments.
fn parse_state(s: &str) -> Result<(shoal::Severity, shoal::SeverityLevel, String)> {
    let mut parts = s.splitn(3, ':');
    let severity = parts.next().unwrap_or_default().parse::<shoal::Severity>()?;
    let level = match parts.next() {
        None => shoal::SeverityLevel::Level1,
        Some(l) => match l.trim().parse::<i32>() {
            Ok(n @ 1..=5) => shoal::SeverityLevel::from_wire(n),
            _ => bail!("--state level {l:?} is not 1 to 5"),
        },
    };
    Ok((severity, level, parts.next().unwrap_or_default().to_owned()))
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publish self-checking messages.
    Pub(PubArgs),
    /// Receive and verify messages.
    Sub(SubArgs),
    /// Serve a service: method `echo` answers `shoal:` + the request, method `fail` fails with "refused by shoal".
    Serve(ServeArgs),
    /// Log records through `shoal::logging`'s layer (eCAL log messages) and to stderr; no node.
    Log(LogArgs),
    /// Measure the CPU cost of logging through `shoal::logging`'s layer against tracing's fmt layer writing to
    /// stderr (run it with stderr on /dev/null), in one run; prints one JSON line.
    LogBench(LogBenchArgs),
}

// The arguments of `shoal-peer log`.
#[derive(Args, Debug)]
struct LogArgs {
    /// Records to log.
    #[arg(long, default_value_t = 5)]
    count: u64,
    /// Their level: error, warn, info, debug, trace.
    #[arg(long, default_value = "warn")]
    level: tracing::Level,
    /// Their message; ` N` (the record's number) is appended.
    #[arg(long, default_value = "shoal-peer log")]
    text: String,
    /// Between records, in ms.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// The unit name the messages carry.
    #[arg(long, default_value = "shoal_log_peer")]
    unit: String,
}

// The arguments of `shoal-peer log-bench`.
#[derive(Args, Debug)]
struct LogBenchArgs {
    /// Records per second.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds per phase (each phase runs twice, alternating).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

// The arguments of `shoal-peer serve`.
#[derive(Args, Debug)]
struct ServeArgs {
    #[arg(long)]
    service: String,
    /// Serve this long, in ms (0 = until killed).
    #[arg(long, default_value_t = 30_000)]
    duration_ms: u64,
}

// The arguments of `shoal-peer pub`.
#[derive(Args, Debug)]
struct PubArgs {
    #[arg(long)]
    topic: String,
    /// Messages to send (0 = until killed).
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Payload size in bytes (at least 24).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Messages per second (0 = as fast as possible).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Wait for this many subscribers before sending.
    #[arg(long, default_value_t = 1)]
    wait_subs: usize,
    /// How long to wait for them, in ms.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
    /// Wait this long after the subscribers matched before the first send, in ms (a TCP subscriber connects
    /// only after the match, as in eCAL).
    #[arg(long, default_value_t = 0)]
    start_delay_ms: u64,
    /// Stay alive this long after the last message, in ms (so late readers can finish).
    #[arg(long, default_value_t = 200)]
    linger_ms: u64,
    /// Write through a zero-copy loan instead of `send`.
    #[arg(long)]
    loan: bool,
    /// Reliable publisher: wait up to this many ms for a reliable subscriber instead of overwriting.
    #[arg(long)]
    reliable_ms: Option<u64>,
    /// The type name announced (encoding `raw`).
    #[arg(long, default_value = "shoal.test.Pattern")]
    type_name: String,
    /// Keep the last this many messages for late joiners (`PublisherBuilder::history`).
    #[arg(long, default_value_t = 0)]
    history: u32,
    /// Send this many of the `--count` messages at once, before waiting for subscribers (then prints `before`).
    #[arg(long, default_value_t = 0)]
    before: u64,
}

// The arguments of `shoal-peer sub`.
#[derive(Args, Debug)]
struct SubArgs {
    #[arg(long)]
    topic: String,
    /// Stop after this many messages.
    #[arg(long, default_value_t = 100)]
    count: u64,
    /// Give up when no message arrives for this long after the one before, in ms.
    #[arg(long, default_value_t = 10_000)]
    idle_ms: u64,
    /// Give up when the first message does not arrive within this long, in ms (default: 30000, or
    /// `--idle-ms` when that is longer). Publishers start after the subscriber and need a registration round
    /// or more to match, longer on a loaded machine: a test that expects nothing sets this short.
    #[arg(long)]
    first_ms: Option<u64>,
    /// Use the zero-copy `recv_with` view instead of `recv`.
    #[arg(long)]
    zero_copy: bool,
    /// Busy-spin instead of sleeping on the doorbell.
    #[arg(long)]
    spin: bool,
    /// After this many messages, stop receiving for `--pause-ms` (a consumer that is a moment late).
    #[arg(long)]
    pause_after: Option<u64>,
    /// How long the pause of `--pause-after` lasts, in ms.
    #[arg(long, default_value_t = 1000)]
    pause_ms: u64,
    /// Stop once received plus dropped messages reach `--count` (a publisher that may drop, as eCAL's TCP
    /// layer does for a late subscriber, is still accounted for message by message).
    #[arg(long)]
    until_accounted: bool,
    /// Reliable subscriber (a reliable publisher waits for it).
    #[arg(long)]
    reliable: bool,
    /// Stay alive this long after the summary, in ms, with the subscriber registered (so its final drop count
    /// reaches other processes through registration).
    #[arg(long, default_value_t = 0)]
    linger_ms: u64,
    /// Ask each publisher for the messages it kept: `all`, or at most this many (`SubscriberBuilder::history`).
    #[arg(long)]
    history: Option<String>,
}

/// (clock, send ns, intact)
fn verify(buf: &[u8]) -> (u64, u64, bool) {
    if buf.len() < 24 {
        return (0, 0, false);
    }
    let clock = u64::from_le_bytes(buf[0..8].try_into().unwrap_or_default());
    let sent = u64::from_le_bytes(buf[8..16].try_into().unwrap_or_default());
    let sum = u64::from_le_bytes(buf[16..24].try_into().unwrap_or_default());
    let pattern_ok =
        buf[24..].iter().enumerate().all(|(i, &b)| b == (clock as usize).wrapping_mul(31).wrapping_add(i) as u8);
    (clock, sent, pattern_ok && fnv1a64(&buf[24..]) == sum)
}

/// `[shoal_auth]` drop counters as JSON: per channel and per topic, each cause by name.
fn auth_json(a: &shoal::monitor::AuthSummary) -> serde_json::Value {
    let counts = |c: &shoal::monitor::AuthCounts| {
        json!({"unsigned": c.unsigned, "no_key": c.no_key, "malformed": c.malformed, "bad_tag": c.bad_tag,
               "replayed": c.replayed, "stale": c.stale})
    };
    let topics: serde_json::Map<String, serde_json::Value> =
        a.topics.iter().map(|(t, c)| (t.clone(), counts(c))).collect();
    json!({"enabled": a.enabled, "registration": counts(&a.registration), "data": counts(&a.data),
           "verified_registration": a.verified.0, "verified_data": a.verified.1, "topics": topics,
           "senders_evicted": a.senders_evicted})
}

/// The UDP data layer's counters as JSON.
/// What this process's registration received, dropped and sent (for a test that wonders why nothing matched).
fn registration_json(s: &shoal::monitor::Snapshot) -> serde_json::Value {
    let r = &s.registration;
    json!({"datagrams_received": r.datagrams_received, "samples_applied": r.samples_applied,
           "samples_sent": r.samples_sent, "datagrams_sent": r.datagrams_sent,
           "send_failures": s.socket_drops.registration_send_failures, "kernel_drops": s.socket_drops.registration,
           "wire_errors": r.wire_errors, "decode_errors": r.decode_errors, "over_limits": r.over_limits,
           "registry_full": r.registry_full, "foreign_rejected": r.foreign_rejected,
           "non_local_source": r.non_local_source})
}

fn udp_json(u: &shoal::monitor::UdpCounts) -> serde_json::Value {
    json!({"sent": u.sent, "send_drops": u.send_drops, "datagrams": u.datagrams, "wire_drops": u.wire_drops,
           "non_local_source": u.non_local_source,
           "delivered": u.delivered, "lost": u.lost, "duplicates": u.duplicates, "late": u.late,
           "reassembled": u.reassembled, "reassembly_expired": u.reassembly_expired,
           "reassembly_evicted": u.reassembly_evicted, "reassembly_abandoned": u.reassembly_abandoned, "reassembly_in_flight": u.reassembly_in_flight,
           "reassembly_bytes": u.reassembly_bytes, "packed_sent": u.packed_sent,
           "packed_sent_messages": u.packed_sent_messages, "packed_datagrams": u.packed_datagrams,
           "packed_messages": u.packed_messages, "kernel_drops": u.kernel_drops})
}

/// The eCAL TCP layer's counters as JSON.
fn tcp_json(t: &shoal::monitor::TcpCounts) -> serde_json::Value {
    json!({"sessions": t.sessions, "accepted": t.accepted, "admitted": t.admitted,
           "refused_process_cap": t.refused_process_cap, "refused_source_cap": t.refused_source_cap,
           "refused_unannounced": t.refused_unannounced, "handshake_timeouts": t.handshake_timeouts,
           "revoked": t.revoked, "stalled": t.stalled, "queued": t.queued, "send_drops": t.send_drops,
           "connections": t.connections, "connects": t.connects, "connect_failures": t.connect_failures,
           "connect_timeouts": t.connect_timeouts, "connects_deferred": t.connects_deferred,
           "bad_ports": t.bad_ports, "protocol_errors": t.protocol_errors, "delivered": t.delivered,
           "too_large": t.too_large, "decode_errors": t.decode_errors, "lost": t.lost,
           "out_of_order": t.out_of_order})
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // The log commands install their own subscribers and need no node.
    let state = cli.state.clone();
    let with_node = |run: &dyn Fn(&shoal::Node) -> Result<()>| -> Result<()> {
        // The library's warnings (a ring it may not open, ...) go to stderr; stdout carries only the JSON lines.
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .init();
        let node = shoal::Node::init("shoal-peer").context("starting the shoal node")?;
        if let Some(state) = &state {
            let (severity, level, info) = parse_state(state)?;
            node.set_state(severity, level, &info);
        }
        run(&node)
    };
    match cli.cmd {
        Cmd::Pub(a) => with_node(&|node| publish(node, &a)),
        Cmd::Sub(a) => with_node(&|node| subscribe(node, &a)),
        Cmd::Serve(a) => with_node(&|node| serve(node, &a)),
        Cmd::Log(a) => log_peer(&a),
        Cmd::LogBench(a) => log_bench(&a),
    }
}

/// `shoal-peer log`: installs fmt (stderr, `RUST_LOG`) and `shoal::logging`'s layer (levels from `ecal.ini`), logs
/// `--count` records, waits until they are sent, prints `{"event":"done","stats":...}`.
fn log_peer(a: &LogArgs) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let cfg = shoal::Config::load().context("reading ecal.ini")?;
    let layer = shoal::logging::LogLayer::new(&cfg)?.unit_name(&a.unit);
    let stats = layer.stats_handle();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(fmt).with(layer))?;
    for i in 0..a.count {
        let text = &a.text;
        match a.level {
            tracing::Level::ERROR => tracing::error!("{text} {i}"),
            tracing::Level::WARN => tracing::warn!("{text} {i}"),
            tracing::Level::INFO => tracing::info!("{text} {i}"),
            tracing::Level::DEBUG => tracing::debug!("{text} {i}"),
            tracing::Level::TRACE => tracing::trace!("{text} {i}"),
        }
        std::thread::sleep(Duration::from_millis(a.interval_ms));
    }
    let flushed = stats.flush(Duration::from_secs(5));
    let s = stats.stats();
    emit(
        &json!({"event": "done", "pid": std::process::id(), "flushed": flushed, "stats": {"queued": s.queued, "sent": s.sent,
        "dropped_rate": s.dropped_rate, "dropped_queue_full": s.dropped_queue_full, "send_failed": s.send_failed,
        "truncated": s.truncated}}),
    );
    Ok(())
}

/// Logs `rate` records per second for `seconds` under the current default subscriber; the process's CPU seconds
/// (all threads, getrusage) it took, `settle` included (what a layer's thread still does after the last record).
fn log_phase(rate: u64, seconds: f64, settle: &dyn Fn()) -> f64 {
    let total = (rate as f64 * seconds) as u64;
    let cpu0 = shoal_tools::process_cpu_s();
    let start = Instant::now();
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        let now = Instant::now();
        if due > now + Duration::from_millis(1) {
            std::thread::sleep(due - now);
        }
        tracing::info!(seq = i, topic = "robot/odometry", "bench record with a few words of text");
    }
    settle();
    shoal_tools::process_cpu_s() - cpu0
}

/// CPU seconds the thread named `name` of this process ran so far (`/proc/self/task/*/schedstat`), 0 if none.
fn thread_cpu_s(name: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            return stat.split_whitespace().next().and_then(|ns| ns.parse::<f64>().ok()).unwrap_or(0.0) / 1e9;
        }
    }
    0.0
}

/// `shoal-peer log-bench`: the same records at the same rate under three subscribers, each phase twice,
/// alternating: none (the pacing loop and tracing's macro: the floor), `shoal::logging`'s layer (sent on UDP),
/// tracing's fmt layer writing to stderr. Prints the CPU seconds of each and the ratios.
fn log_bench(a: &LogBenchArgs) -> Result<()> {
    use tracing_subscriber::layer::SubscriberExt;
    let mut cfg = shoal::Config::load().context("reading ecal.ini")?;
    cfg.logging.max_rate = u32::try_from(a.rate.saturating_mul(2)).unwrap_or(u32::MAX).min(1_000_000);
    cfg.logging.queue = 1 << 16;
    let layer = shoal::logging::LogLayer::new(&cfg)?.unit_name("shoal_log_bench");
    let stats = layer.stats_handle();
    let ecal_sub = std::sync::Arc::new(tracing_subscriber::registry().with(layer));
    let fmt_sub = std::sync::Arc::new(
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish(),
    );
    let none_sub = std::sync::Arc::new(tracing_subscriber::registry());
    let (mut none, mut ecal, mut fmt) = (0.0, 0.0, 0.0);
    let sender0 = thread_cpu_s("shoal-log");
    let flush = || {
        stats.flush(Duration::from_secs(10));
    };
    for _ in 0..2 {
        none += tracing::subscriber::with_default(none_sub.clone(), || log_phase(a.rate, a.seconds, &|| {}));
        ecal += tracing::subscriber::with_default(ecal_sub.clone(), || log_phase(a.rate, a.seconds, &flush));
        fmt += tracing::subscriber::with_default(fmt_sub.clone(), || log_phase(a.rate, a.seconds, &|| {}));
    }
    let sender = thread_cpu_s("shoal-log") - sender0;
    let s = stats.stats();
    let records = 2 * (a.rate as f64 * a.seconds) as u64;
    emit(&json!({"event": "log_bench", "rate": a.rate, "records_per_subscriber": records,
        "cpu_s": {"none": none, "ecal_layer": ecal, "fmt_stderr": fmt},
        "cpu_us_per_record": {"none": none * 1e6 / records as f64, "ecal_layer": ecal * 1e6 / records as f64,
            "fmt_stderr": fmt * 1e6 / records as f64},
        "ecal_layer_sender_thread_cpu_s": sender,
        "ratio_ecal_over_fmt": ecal / fmt,
        "ratio_above_floor": (ecal - none) / (fmt - none),
        "ecal_layer_stats": {"sent": s.sent, "dropped": s.dropped(), "send_failed": s.send_failed}}));
    Ok(())
}

/// `shoal-peer serve`: prints `ready` (with the port), one `call` line per call of `echo`, `done` at the end (after
/// `--duration-ms`, or at SIGTERM / SIGINT).
fn serve(node: &shoal::Node, a: &ServeArgs) -> Result<()> {
    let raw = || shoal::TypeInfo::new("", "raw", Vec::new());
    let server = node
        .service_server(&a.service)
        .method(
            "echo",
            shoal::TypeInfo::new("req_t", "raw", Vec::new()),
            shoal::TypeInfo::new("resp_t", "raw", Vec::new()),
            |req: &[u8]| {
                emit(&json!({"event": "call", "method": "echo", "size": req.len()}));
                let mut out = b"shoal:".to_vec();
                out.extend_from_slice(req);
                Ok(out)
            },
        )
        .method("fail", raw(), raw(), |_: &[u8]| Err("refused by shoal".into()))
        .build()?;
    emit(&json!({"event": "ready", "pid": std::process::id(), "port": server.port(), "service_id": server.id()}));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, std::sync::Arc::clone(&stop)).context("installing the signal handler")?;
    }
    let end = (a.duration_ms > 0).then(|| Instant::now() + Duration::from_millis(a.duration_ms));
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
        std::thread::sleep(Duration::from_millis(20));
    }
    emit(&json!({"event": "done", "calls": server.call_counts()}));
    Ok(())
}

/// `shoal-peer pub`: waits for the subscribers, sends `--count` self-checking messages at `--rate`, reports.
fn publish(node: &shoal::Node, a: &PubArgs) -> Result<()> {
    if a.size < 24 {
        bail!("--size must be at least 24 bytes (header of the self-checking payload)");
    }
    let builder = node.publisher(&a.topic).type_info(shoal::TypeInfo::raw(&a.type_name));
    let builder = match a.reliable_ms {
        Some(ms) => builder.reliable(Duration::from_millis(ms)),
        None => builder,
    };
    let mut publ = builder.history(a.history).create()?;
    emit(&json!({"event": "ready", "pid": std::process::id(), "publisher_id": publ.id()}));
    let mut buf = vec![0u8; a.size];
    for clock in 1..=a.before {
        shoal_tools::fill_pattern(&mut buf, clock);
        publ.send(&buf)?;
    }
    if a.before > 0 {
        emit(&json!({"event": "before", "sent": a.before}));
    }
    if a.wait_subs > 0 && publ.wait_for_subscribers(a.wait_subs, Duration::from_millis(a.wait_ms)).is_err() {
        return Err(unmatched(node, a, &publ));
    }
    emit(&json!({"event": "matched", "subscribers": publ.subscriber_count()}));
    std::thread::sleep(Duration::from_millis(a.start_delay_ms));
    let start = Instant::now();
    let (sent, max_gap) = send_all(&mut publ, a, start, a.before)?;
    let flow = publ.flow_stats();
    let tcp = tcp_json(&node.snapshot().tcp);
    emit(&json!({"event": "done", "sent": sent, "drops": publ.drops(), "tcp": tcp,
                "max_send_gap_us": max_gap.as_micros() as u64,
                "elapsed_ms": start.elapsed().as_millis() as u64, "reliable_waits": flow.waits,
                "reliable_evicted_dead": flow.evicted_dead,
                "reliable_evicted_stalled": flow.evicted_stalled}));
    std::thread::sleep(Duration::from_millis(a.linger_ms));
    Ok(())
}

/// The error of a publisher whose subscribers did not match in time, with what this node's registration knows, so
/// a failure says whether the subscribers were never heard of or heard of and not matched.
fn unmatched(node: &shoal::Node, a: &PubArgs, publ: &shoal::Publisher) -> anyhow::Error {
    let snap = node.snapshot();
    let known: Vec<String> = snap
        .topics
        .iter()
        .filter(|t| t.topic_name == a.topic && t.direction == shoal::monitor::TopicDirection::Subscriber)
        .map(|t| format!("{}:{} {:?}", t.host_name, t.pid, t.layers))
        .collect();
    anyhow::anyhow!(
        "only {} of {} subscribers matched within {} ms; subscribers of the topic in registration: {known:?}; {} \
         processes known; registration: {}",
        publ.subscriber_count(),
        a.wait_subs,
        a.wait_ms,
        snap.processes.len(),
        registration_json(&snap)
    )
}

/// Sends `--count` messages (0: until killed), paced at `--rate` from `start`, through a loan with `--loan`;
/// reports progress every 10,000. Returns the messages sent and the longest gap between two sends.
fn send_all(publ: &mut shoal::Publisher, a: &PubArgs, start: Instant, sent: u64) -> Result<(u64, Duration)> {
    let period = if a.rate > 0.0 { Some(Duration::from_secs_f64(1.0 / a.rate)) } else { None };
    let mut buf = vec![0u8; a.size];
    let mut max_gap = Duration::ZERO;
    let mut last = Instant::now();
    let mut clock = sent;
    while a.count == 0 || clock < a.count {
        clock += 1;
        if a.loan {
            publ.loan(a.size)?.write(|b| shoal_tools::fill_pattern(b, clock)).send();
        } else {
            shoal_tools::fill_pattern(&mut buf, clock);
            publ.send(&buf)?;
        }
        let now = Instant::now();
        max_gap = max_gap.max(now - last);
        last = now;
        if let Some(p) = period {
            let due = start + p.mul_f64((clock - sent) as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            last = Instant::now();
        }
        if clock.is_multiple_of(10_000) {
            emit(&json!({"event": "progress", "sent": clock, "max_send_gap_us": max_gap.as_micros() as u64}));
        }
    }
    Ok((clock, max_gap))
}

/// `shoal-peer sub`: receives and verifies messages until `--count` (or a timeout), then reports what it saw.
fn subscribe(node: &shoal::Node, a: &SubArgs) -> Result<()> {
    let mut builder = node.subscriber(&a.topic);
    if a.reliable {
        builder = builder.reliable(true);
    }
    if a.spin {
        builder = builder.wait(shoal::WaitStrategy::BusySpin);
    }
    match a.history.as_deref() {
        None => {}
        Some("all") => builder = builder.history(true),
        Some(n) => builder = builder.history(n.parse::<u32>().context("--history: `all` or a number")?),
    }
    let sub = builder.create()?;
    let first_ms = a.first_ms.unwrap_or(a.idle_ms.max(30_000));
    emit(&json!({"event": "ready", "pid": std::process::id()}));
    let created = Instant::now();
    let created_ns = mono_ns();
    let mut matched_at: Option<Instant> = None;
    let mut tally = Tally::default();
    let mut scratch = Vec::new();
    while tally.received + if a.until_accounted { sub.drops() } else { 0 } < a.count {
        if a.pause_after == Some(tally.received) && tally.received > 0 {
            emit(&json!({"event": "pause", "received": tally.received, "ms": a.pause_ms}));
            std::thread::sleep(Duration::from_millis(a.pause_ms));
        }
        if matched_at.is_none() && sub.publisher_count() > 0 {
            matched_at = Some(Instant::now());
        }
        let wait = Duration::from_millis(if tally.received == 0 { first_ms } else { a.idle_ms });
        let r = if a.zero_copy {
            sub.recv_with(Some(wait), |s| {
                // The whole payload is checked: read in place when stable, else copied once into `scratch`.
                let (clock, sent, ok) = verify(s.payload().slice_or_copy(&mut scratch));
                Received { publisher: s.publisher_id(), shoal_clock: s.clock(), clock, sent, ok, via: s.via() }
            })
        } else {
            sub.recv_timeout(wait).map(|s| {
                let (clock, sent, ok) = verify(s.payload());
                Received { publisher: s.publisher_id(), shoal_clock: s.clock(), clock, sent, ok, via: s.via() }
            })
        };
        let m = match r {
            Ok(v) => v,
            Err(shoal::RecvError::Timeout) => {
                tally.timed_out = true;
                break;
            }
            Err(e) => bail!("receive failed: {e}"),
        };
        let now_ns = mono_ns();
        if tally.received == 0 {
            let since_match_ms = matched_at.unwrap_or(created).elapsed().as_secs_f64() * 1e3;
            tally.first_msg_after_match_ms = Some(since_match_ms);
            tally.first_sent_before_created_ms = Some((created_ns as f64 - m.sent as f64) / 1e6);
            emit(&json!({"event": "first", "clock": m.clock, "since_match_ms": tally.first_msg_after_match_ms}));
        }
        tally.count(&m, now_ns);
    }
    emit(&tally.summary(&sub, &node.snapshot()));
    std::thread::sleep(Duration::from_millis(a.linger_ms));
    Ok(())
}

/// One message received: its publisher, its sample clock, and what its payload says ([`verify`]).
struct Received {
    publisher: u64,
    shoal_clock: u64,
    /// The clock and send time in the payload, and whether the payload is intact.
    clock: u64,
    sent: u64,
    ok: bool,
    via: shoal::monitor::Via,
}

/// How many of the first sample clocks `shoal-peer sub` reports.
const FIRST_CLOCKS: usize = 64;

/// What `shoal-peer sub` saw.
#[derive(Default)]
struct Tally {
    received: u64,
    /// Messages whose payload is damaged or does not carry the sample's clock.
    torn: u64,
    out_of_order: u64,
    /// Per publisher: the last sample clock.
    last_clock: std::collections::HashMap<u64, u64>,
    /// Per publisher: messages received, the first and the last sample clock.
    publishers: std::collections::BTreeMap<u64, (u64, u64, u64)>,
    /// The sample clocks of the first messages (at most `FIRST_CLOCKS`).
    first_clocks: Vec<u64>,
    vias: std::collections::BTreeMap<&'static str, u64>,
    lat_sum_ns: u128,
    lat_max_ns: u64,
    timed_out: bool,
    first_msg_after_match_ms: Option<f64>,
    /// How long before this subscriber was created its first message was sent, ms (negative: after; a history
    /// message was sent before).
    first_sent_before_created_ms: Option<f64>,
}

impl Tally {
    /// Counts `m`, received at `now_ns` ([`mono_ns`]).
    fn count(&mut self, m: &Received, now_ns: u64) {
        self.received += 1;
        if self.first_clocks.len() < FIRST_CLOCKS {
            self.first_clocks.push(m.shoal_clock);
        }
        let per = self.publishers.entry(m.publisher).or_insert((0, m.shoal_clock, m.shoal_clock));
        per.0 += 1;
        per.2 = m.shoal_clock;
        *self.vias.entry(m.via.name()).or_default() += 1;
        if !m.ok {
            self.torn += 1;
        }
        if m.ok && m.clock != m.shoal_clock {
            self.torn += 1;
        }
        let prev = self.last_clock.insert(m.publisher, m.shoal_clock).unwrap_or(0);
        if m.shoal_clock <= prev {
            self.out_of_order += 1;
        }
        self.lat_sum_ns += u128::from(now_ns.saturating_sub(m.sent));
        self.lat_max_ns = self.lat_max_ns.max(now_ns.saturating_sub(m.sent));
    }

    /// The summary line: these counts, the subscriber's drops and the node's counters.
    fn summary(&self, sub: &shoal::Subscriber, snapshot: &shoal::monitor::Snapshot) -> serde_json::Value {
        let received = self.received;
        json!({
            "event": "summary",
            "received": received,
            "torn": self.torn,
            "out_of_order": self.out_of_order,
            "drops": sub.drops(),
            "history_missed": sub.history_missed(),
            "publishers": self.publishers.len(),
            "per_publisher": self.publishers.iter()
                .map(|(id, (n, first, last))| {
                    json!({"id": id, "received": n, "first_clock": first, "last_clock": last})
                })
                .collect::<Vec<_>>(),
            "via": self.vias,
            "first_clocks": self.first_clocks,
            "shm_truncations": shoal::shm_truncations(),
            "timed_out": self.timed_out,
            "first_msg_after_match_ms": self.first_msg_after_match_ms,
            "first_sent_before_created_ms": self.first_sent_before_created_ms,
            "mean_latency_us": if received > 0 { (self.lat_sum_ns / u128::from(received)) as f64 / 1e3 } else { 0.0 },
            "max_latency_us": self.lat_max_ns / 1000,
            "auth": auth_json(&snapshot.auth),
            "udp": udp_json(&snapshot.udp),
            "tcp": tcp_json(&snapshot.tcp),
            "registration": registration_json(snapshot),
        })
    }
}
