//! `shoal-ros2-peer`: the shoal side of the bridge's tests and benchmark. Publishes or checks the deterministic
//! messages of `shoal_ros2_bridge::testdata` as typed shoal topics, and measures round trips. JSON lines on stdout.
//!
//! ```text
//! shoal-ros2-peer pub --topic T --kind imu --count 20 [--size B] [--rate HZ] [--bad N] [--wrong-type N] [--first I]
//! shoal-ros2-peer sub --topic T --kind imu --count 20 [--size B] [--timeout-ms MS] [--first I] [--wait-pubs N]
//! shoal-ros2-peer rtt --ping T --pong T --size B --count N
//! shoal-ros2-peer tput --ping T --pong T --size B --count N [--window W]
//! shoal-ros2-peer monitor --topic-contains S [--duration-ms MS]
//! shoal-ros2-peer serve --service S --kind set_bool [--method call] [--delay-ms MS] [--duration-ms MS]
//! shoal-ros2-peer call --service S --kind set_bool --count N [--method call] [--timeout-ms MS]
//! ```
//!
//! Service kinds (`testdata::SERVICE_KINDS`): trigger, set_bool, empty (std_srvs) and scale (`demo_msgs/srv/Scale`
//! as `demo.Scale_Request` / `demo.Scale_Response`); the server answers as `testdata::service_response` says, and
//! the client checks every response against it.
//!
//! Kinds: string, imu, image, pointcloud2 (the shipped protobuf types; pose_stamped, twist, transform_stamped and
//! nav_sat_fix publish only), telemetry (`demo.Telemetry` of the generic-mapping tests, `--size` bytes of blob;
//! publish only: telemetry_v2, the same values as `demo_v2.Telemetry` with its fields renumbered, and
//! bad_telemetry, a `demo.BadTelemetry` that does not map), and raw (payloads of `testdata::raw`, announced as `testdata::RAW_TYPE`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::json;
use shoal::{Message, TypeInfo};
use shoal_ros2_bridge::pb::{demo, sensor_msgs, std_msgs};
use shoal_ros2_bridge::testdata;

#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publish messages first..first+count.
    Pub {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        kind: String,
        #[arg(long)]
        count: u32,
        #[arg(long, default_value_t = 0)]
        size: usize,
        #[arg(long, default_value_t = 50.0)]
        rate: f64,
        /// First send this many payloads that are not protobuf, with the right type information.
        #[arg(long, default_value_t = 0)]
        bad: u32,
        /// First send this many valid payloads announced as another type (another publisher on the topic).
        #[arg(long, default_value_t = 0)]
        wrong_type: u32,
        /// The number of the first message.
        #[arg(long, default_value_t = 1)]
        first: u32,
        /// Keep the last this many messages for late joiners (`PublisherBuilder::history`).
        #[arg(long, default_value_t = 0)]
        history: u32,
        /// Wait for this many subscribers before sending (0: send at once).
        #[arg(long, default_value_t = 1)]
        wait_subs: usize,
        /// Stay alive this long after the last message, ms.
        #[arg(long, default_value_t = 500)]
        linger_ms: u64,
        /// Wait this long after the subscribers before sending, ms (more to come: a bridge's DDS readers).
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
    },
    /// Receive and check messages first..first+count (others are counted apart, as `other`).
    Sub {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        kind: String,
        #[arg(long)]
        count: u32,
        #[arg(long, default_value_t = 0)]
        size: usize,
        #[arg(long, default_value_t = 30_000)]
        timeout_ms: u64,
        /// The number of the first message expected.
        #[arg(long, default_value_t = 1)]
        first: u32,
        /// Ask each publisher for the messages it kept for late joiners (`SubscriberBuilder::history`).
        #[arg(long)]
        history: bool,
        /// Wait until this many publishers are matched before saying ready (0: say it at once).
        #[arg(long, default_value_t = 0)]
        wait_pubs: usize,
    },
    /// Every 200 ms, what this process's registration knows of the topics whose name contains `topic_contains`
    /// (shoal's monitor view: type information and drops of every publisher and subscriber).
    Monitor {
        #[arg(long)]
        topic_contains: String,
        #[arg(long, default_value_t = 20_000)]
        duration_ms: u64,
    },
    /// Serve a service of `kind` (answers as `testdata::service_response`), each answer after `delay_ms`.
    Serve {
        #[arg(long)]
        service: String,
        #[arg(long)]
        kind: String,
        #[arg(long, default_value = "call")]
        method: String,
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        #[arg(long, default_value_t = 60_000)]
        duration_ms: u64,
    },
    /// Call a service of `kind` `count` times, one after the other, checking each response; round trips.
    Call {
        #[arg(long)]
        service: String,
        #[arg(long)]
        kind: String,
        #[arg(long)]
        count: u32,
        #[arg(long, default_value = "call")]
        method: String,
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
    },
    /// Round trips: raw payloads of `size` bytes on `ping`, waiting for each on `pong`.
    Rtt {
        #[arg(long)]
        ping: String,
        #[arg(long)]
        pong: String,
        #[arg(long)]
        size: usize,
        #[arg(long)]
        count: u32,
    },
    /// Throughput of the same path: up to `window` messages in flight (sent, not yet back), `count` in all; a
    /// message not back within 5 s of the last progress counts as lost.
    Tput {
        #[arg(long)]
        ping: String,
        #[arg(long)]
        pong: String,
        #[arg(long)]
        size: usize,
        #[arg(long)]
        count: u32,
        #[arg(long, default_value_t = 8)]
        window: u32,
    },
}

fn out(v: serde_json::Value) {
    println!("{v}");
}

/// Type information and encoded message `i` of `kind`.
fn message(kind: &str, i: u32, size: usize) -> anyhow::Result<(TypeInfo, Vec<u8>)> {
    fn enc<M: Message>(m: M) -> anyhow::Result<(TypeInfo, Vec<u8>)> {
        Ok((M::type_info().clone(), m.encode_to_vec()?))
    }
    match kind {
        "string" => enc(testdata::string(i)),
        "imu" => enc(testdata::imu(i)),
        "image" => enc(testdata::image(i, size)),
        "pointcloud2" => enc(testdata::pointcloud2(i, size)),
        "pose_stamped" => enc(testdata::pose_stamped(i)),
        "twist" => enc(testdata::twist(i)),
        "transform_stamped" => enc(testdata::transform_stamped(i)),
        "nav_sat_fix" => enc(testdata::nav_sat_fix(i)),
        "telemetry" => enc(testdata::telemetry(i, size)),
        "telemetry_v2" => enc(testdata::telemetry_v2(i, size)),
        "bad_telemetry" => enc(demo::BadTelemetry::default()),
        "raw" => Ok((TypeInfo::raw(testdata::RAW_TYPE), testdata::raw(i, size))),
        _ => bail!("unknown kind {kind}"),
    }
}

/// The number of a received message and whether it equals the one sent under that number.
fn check(kind: &str, payload: &[u8], size: usize) -> anyhow::Result<(u32, bool)> {
    let i = match kind {
        "string" => testdata::string_index(&std_msgs::String::decode(payload)?),
        "imu" => testdata::header_index(&sensor_msgs::Imu::decode(payload)?.header),
        "image" => testdata::header_index(&sensor_msgs::Image::decode(payload)?.header),
        "pointcloud2" => testdata::header_index(&sensor_msgs::PointCloud2::decode(payload)?.header),
        "telemetry" => {
            // Compared as messages: the bridge's protobuf encoder (prost-reflect) may order or pack bytes
            // differently from prost's.
            let t = demo::Telemetry::decode(payload)?;
            let i = testdata::telemetry_index(&t).context("no message number")?;
            return Ok((i, t == testdata::telemetry(i, size)));
        }
        "raw" => testdata::raw_index(payload),
        _ => bail!("unknown kind {kind}"),
    }
    .context("no message number")?;
    Ok((i, message(kind, i, size)?.1 == payload))
}

/// Whether two protobuf responses of a service `kind` are the same message.
fn same_response(kind: &str, got: &[u8], want: &[u8]) -> bool {
    use shoal_ros2_bridge::pb::std_srvs;
    fn eq<M: prost::Message + Default + PartialEq>(a: &[u8], b: &[u8]) -> bool {
        matches!((M::decode(a), M::decode(b)), (Ok(x), Ok(y)) if x == y)
    }
    match kind {
        "trigger" => eq::<std_srvs::TriggerResponse>(got, want),
        "set_bool" => eq::<std_srvs::SetBoolResponse>(got, want),
        "empty" => eq::<std_srvs::EmptyResponse>(got, want),
        "scale" => eq::<demo::ScaleResponse>(got, want),
        _ => false,
    }
}

fn main() -> anyhow::Result<()> {
    let node = shoal::Node::init("shoal_ros2_peer")?;
    match Args::parse().cmd {
        Cmd::Pub {
            topic,
            kind,
            count,
            size,
            rate,
            bad,
            wrong_type,
            first,
            history,
            wait_subs,
            linger_ms,
            delay_ms,
        } => {
            let (ti, _) = message(&kind, 1, size)?;
            let mut publ = node.publisher(&topic).type_info(ti.clone()).history(history).create()?;
            out(json!({"event": "ready", "publisher_id": publ.id()}));
            if wait_subs > 0 && publ.wait_for_subscribers(wait_subs, Duration::from_secs(20)).is_err() {
                bail!("no subscriber on {topic} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(300 + delay_ms));
            for k in 0..bad {
                publ.send(&[0xff, 0xff, 0xff, 0xff, 0x0f, k as u8])?;
            }
            if wrong_type > 0 {
                let mut other =
                    node.publisher(&topic).type_info(TypeInfo::new("other.Type", "proto", vec![])).create()?;
                let _ = other.wait_for_subscribers(1, Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(300));
                for i in 0..wrong_type {
                    other.send(&message(&kind, 1000 + i, size)?.1)?;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let period = Duration::from_secs_f64(1.0 / rate);
            for i in first..first.saturating_add(count) {
                publ.send(&message(&kind, i, size)?.1)?;
                std::thread::sleep(period);
            }
            out(json!({"event": "done", "sent": count}));
            std::thread::sleep(Duration::from_millis(linger_ms));
        }
        Cmd::Sub { topic, kind, count, size, timeout_ms, first, history, wait_pubs } => {
            let (ti, _) = message(&kind, 1, size)?;
            let sub = node.subscriber(&topic).type_info(ti).history(history).create()?;
            if wait_pubs > 0 && sub.wait_for_publishers(wait_pubs, Duration::from_secs(20)).is_err() {
                bail!("{topic}: fewer than {wait_pubs} publishers matched within 20 s");
            }
            out(json!({"event": "ready"}));
            let end = Instant::now() + Duration::from_millis(timeout_ms);
            let want = first..first.saturating_add(count);
            let (mut seen, mut bad, mut dup, mut undecodable, mut other) =
                (BTreeSet::new(), Vec::new(), 0u64, 0u64, 0u64);
            let mut last = Vec::new();
            while seen.len() < count as usize && Instant::now() < end {
                let Ok(s) = sub.recv_timeout(Duration::from_millis(100)) else { continue };
                last = s.payload().to_vec();
                match check(&kind, s.payload(), size) {
                    Ok((i, _)) if !want.contains(&i) => other += 1,
                    Ok((i, ok)) => {
                        if !ok {
                            bad.push(i);
                        }
                        if !seen.insert(i) {
                            dup += 1;
                        }
                    }
                    Err(_) => undecodable += 1,
                }
            }
            let missing: Vec<u32> = want.filter(|i| !seen.contains(i)).take(20).collect();
            out(json!({"event": "summary", "received": seen.len(), "intact": seen.len() - bad.len(), "bad": bad,
                "duplicates": dup, "undecodable": undecodable, "missing": missing, "timed_out": seen.len() < count as usize,
                "other": other,
                "type": sub_type(&node, &topic, &last)}));
        }
        Cmd::Serve { service, kind, method, delay_ms, duration_ms } => {
            let (req, resp, _) = testdata::service_request(&kind, 1).with_context(|| format!("unknown kind {kind}"))?;
            let served = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counter = std::sync::Arc::clone(&served);
            let _server = node
                .service_server(&service)
                .method(&method, req, resp, move |payload: &[u8]| {
                    std::thread::sleep(Duration::from_millis(delay_ms));
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    testdata::service_response(&kind, payload).map_err(Into::into)
                })
                .build()?;
            out(json!({"event": "ready"}));
            std::thread::sleep(Duration::from_millis(duration_ms));
            out(json!({"event": "summary", "served": served.load(std::sync::atomic::Ordering::Relaxed)}));
        }
        Cmd::Call { service, kind, count, method, timeout_ms } => {
            let (req, resp, _) = testdata::service_request(&kind, 1).with_context(|| format!("unknown kind {kind}"))?;
            let client = node.service_client(&service).method(&method, req, resp).build();
            out(json!({"event": "ready"}));
            client.wait_for_servers(1, Duration::from_secs(20)).map_err(|e| anyhow::anyhow!("{e}"))?;
            let (mut answered, mut intact, mut timed_out, mut failed) = (0u32, 0u32, 0u32, Vec::new());
            let mut rtts = Vec::new();
            for i in 1..=count {
                let (_, _, request) = testdata::service_request(&kind, i).context("kind")?;
                let want = testdata::service_response(&kind, &request).map_err(|e| anyhow::anyhow!(e))?;
                let t0 = Instant::now();
                let r = client.call(&method, &request, Duration::from_millis(timeout_ms));
                let rtt = t0.elapsed();
                match r.as_ref().map(|v| v.first()) {
                    Ok(Some(r)) if r.is_ok() => {
                        answered += 1;
                        rtts.push(rtt.as_secs_f64() * 1e6);
                        // Compared as messages: the bridge's encoder (prost-reflect) may lay bytes out otherwise.
                        if same_response(&kind, &r.payload, &want) {
                            intact += 1;
                        }
                    }
                    Ok(Some(r)) if r.status == shoal::service::CallStatus::TimedOut => timed_out += 1,
                    Ok(Some(r)) => failed.push(format!("{:?}", r.status)),
                    Ok(None) => failed.push("no response".into()),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            rtts.sort_by(f64::total_cmp);
            let pct = |p: f64| rtts.get(((rtts.len() as f64 * p) as usize).min(rtts.len().saturating_sub(1))).copied();
            failed.truncate(5);
            out(json!({"event": "summary", "calls": count, "answered": answered, "intact": intact,
                "timed_out": timed_out, "failed": failed, "p50_us": pct(0.5), "p99_us": pct(0.99)}));
        }
        Cmd::Monitor { topic_contains, duration_ms } => {
            out(json!({"event": "ready"}));
            let end = Instant::now() + Duration::from_millis(duration_ms);
            while Instant::now() < end {
                std::thread::sleep(Duration::from_millis(200));
                let snap = node.snapshot();
                let topics: Vec<_> = snap
                    .topics
                    .iter()
                    .filter(|t| t.topic_name.contains(&topic_contains))
                    .map(|t| {
                        json!({"topic": t.topic_name, "unit_name": t.unit_name,
                            "direction": match t.direction {
                                shoal::monitor::TopicDirection::Publisher => "pub",
                                shoal::monitor::TopicDirection::Subscriber => "sub",
                            },
                            "type": {"name": t.type_info.name, "encoding": t.type_info.encoding,
                                     "descriptor_len": t.type_info.descriptor.len()},
                            "message_drops": t.message_drops, "data_clock": t.data_clock})
                    })
                    .collect();
                out(json!({"event": "snapshot", "topics": topics}));
            }
            out(json!({"event": "done"}));
        }
        Cmd::Tput { ping, pong, size, count, window } => {
            let (mut publ, sub) = bench_pair(&node, &ping, &pong)?;
            let mut payload = vec![0u8; size.max(4)];
            let (mut sent, mut got) = (0u32, 0u32);
            let mut back = std::collections::HashSet::new();
            let start = Instant::now();
            let mut last_progress = start;
            while got < count && last_progress.elapsed() < Duration::from_secs(5) {
                while sent < count && sent - got < window {
                    payload[..4].copy_from_slice(&sent.to_le_bytes());
                    publ.send(&payload)?;
                    sent += 1;
                }
                if let Ok(s) = sub.recv_timeout(Duration::from_millis(1))
                    && let Some(i) = s.payload().get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok())
                    && back.insert(u32::from_le_bytes(i))
                {
                    got += 1;
                    last_progress = Instant::now();
                }
            }
            let wall = if got > 0 { last_progress - start } else { start.elapsed() }.as_secs_f64();
            out(json!({"event": "summary", "size": size, "count": count, "window": window, "sent": sent,
                "received": got, "lost": count - got, "msgs_per_s": f64::from(got) / wall,
                "mb_per_s": f64::from(got) * size as f64 / wall / 1e6}));
        }
        Cmd::Rtt { ping, pong, size, count } => {
            let (mut publ, sub) = bench_pair(&node, &ping, &pong)?;
            let mut payload = vec![0u8; size.max(4)];
            let mut rtts = Vec::new();
            let mut lost = 0;
            let start = Instant::now();
            for i in 0..count {
                payload[..4].copy_from_slice(&i.to_le_bytes());
                let t0 = Instant::now();
                publ.send(&payload)?;
                let end = t0 + Duration::from_secs(5);
                let mut got = false;
                while !got && Instant::now() < end {
                    if let Ok(s) = sub.recv_timeout(Duration::from_millis(50)) {
                        got = s.payload().get(..4) == Some(&i.to_le_bytes()[..]);
                    }
                }
                if got {
                    rtts.push(t0.elapsed().as_secs_f64() * 1e6);
                } else {
                    lost += 1;
                }
            }
            let wall = start.elapsed().as_secs_f64();
            rtts.sort_by(f64::total_cmp);
            let pct = |p: f64| rtts.get(((p * rtts.len() as f64) as usize).min(rtts.len().saturating_sub(1))).copied();
            out(json!({"event": "summary", "size": size, "count": count, "received": rtts.len(), "lost": lost,
                "p50_us": pct(0.5), "p90_us": pct(0.9), "p99_us": pct(0.99),
                "msgs_per_s": rtts.len() as f64 / wall, "mb_per_s": (rtts.len() * size) as f64 / wall / 1e6}));
        }
    }
    Ok(())
}

/// The benchmark's raw publisher on `ping` and subscriber on `pong`, once the bridge's subscriber and publisher
/// are matched and DDS has had time to find the echo peer.
fn bench_pair(node: &shoal::Node, ping: &str, pong: &str) -> anyhow::Result<(shoal::Publisher, shoal::Subscriber)> {
    let publ = node.publisher(ping).type_info(TypeInfo::raw("bench.Ping")).create()?;
    let sub = node.subscriber(pong).create()?;
    out(json!({"event": "ready"}));
    if publ.wait_for_subscribers(1, Duration::from_secs(20)).is_err()
        || sub.wait_for_publishers(1, Duration::from_secs(20)).is_err()
    {
        bail!("the bridge's {ping} subscriber or {pong} publisher did not appear within 20 s");
    }
    std::thread::sleep(Duration::from_secs(2)); // DDS discovery of the echo peer
    Ok((publ, sub))
}

/// The type the bridge's publisher of `topic` announces, as shoal's monitor sees it: name, encoding, the
/// descriptor's length, and `last` (the last payload received, when at most 64 KiB) decoded with that descriptor
/// alone, as a monitor without the generated code decodes it (`decoded`, or `decode_error`).
fn sub_type(node: &shoal::Node, topic: &str, last: &[u8]) -> serde_json::Value {
    let snap = node.snapshot();
    let t =
        snap.topics.iter().find(|t| t.topic_name == topic && t.direction == shoal::monitor::TopicDirection::Publisher);
    match t {
        Some(t) => {
            let mut v = json!({"name": t.type_info.name, "encoding": t.type_info.encoding,
                "descriptor_len": t.type_info.descriptor.len()});
            // Large images would make a line of megabytes: only small payloads are shown.
            if last.len() <= 64 << 10 {
                match shoal::dynamic::decode_to_json(&t.type_info, last) {
                    Ok(d) => v["decoded"] = d,
                    Err(e) => v["decode_error"] = json!(e.to_string()),
                }
            }
            v
        }
        None => json!(null),
    }
}
