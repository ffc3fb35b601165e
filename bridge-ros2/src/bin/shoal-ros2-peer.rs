//! `shoal-ros2-peer`: the shoal side of the bridge's tests and benchmark. Publishes or checks the deterministic
//! messages of `shoal_ros2_bridge::testdata` as typed shoal topics, and measures round trips. JSON lines on stdout.
//!
//! ```text
//! shoal-ros2-peer pub --topic T --kind imu --count 20 [--size B] [--rate HZ] [--bad N] [--wrong-type N]
//! shoal-ros2-peer sub --topic T --kind imu --count 20 [--size B] [--timeout-ms MS]
//! shoal-ros2-peer rtt --ping T --pong T --size B --count N
//! ```

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use serde_json::json;
use shoal::{Message, TypeInfo};
use shoal_ros2_bridge::pb::{sensor_msgs, std_msgs};
use shoal_ros2_bridge::testdata;

#[derive(Parser, Debug)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Publish messages 1..=count.
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
    },
    /// Receive and check messages 1..=count.
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
        _ => bail!("unknown kind {kind}"),
    }
    .context("no message number")?;
    Ok((i, message(kind, i, size)?.1 == payload))
}

fn main() -> anyhow::Result<()> {
    let node = shoal::Node::init("shoal_ros2_peer")?;
    match Args::parse().cmd {
        Cmd::Pub { topic, kind, count, size, rate, bad, wrong_type } => {
            let (ti, _) = message(&kind, 1, size)?;
            let mut publ = node.publisher(&topic).type_info(ti.clone()).create()?;
            out(json!({"event": "ready", "publisher_id": publ.id()}));
            if !publ.wait_for_subscribers(1, Duration::from_secs(20)) {
                bail!("no subscriber on {topic} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(300));
            for k in 0..bad {
                publ.send(&[0xff, 0xff, 0xff, 0xff, 0x0f, k as u8])?;
            }
            if wrong_type > 0 {
                let mut other =
                    node.publisher(&topic).type_info(TypeInfo::new("other.Type", "proto", vec![])).create()?;
                other.wait_for_subscribers(1, Duration::from_secs(5));
                std::thread::sleep(Duration::from_millis(300));
                for i in 0..wrong_type {
                    other.send(&message(&kind, 1000 + i, size)?.1)?;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            let period = Duration::from_secs_f64(1.0 / rate);
            for i in 1..=count {
                publ.send(&message(&kind, i, size)?.1)?;
                std::thread::sleep(period);
            }
            out(json!({"event": "done", "sent": count}));
            std::thread::sleep(Duration::from_millis(500));
        }
        Cmd::Sub { topic, kind, count, size, timeout_ms } => {
            let (ti, _) = message(&kind, 1, size)?;
            let sub = node.subscriber(&topic).type_info(ti).create()?;
            out(json!({"event": "ready"}));
            let end = Instant::now() + Duration::from_millis(timeout_ms);
            let (mut seen, mut bad, mut dup, mut undecodable) = (BTreeSet::new(), Vec::new(), 0u64, 0u64);
            while seen.len() < count as usize && Instant::now() < end {
                let Ok(s) = sub.recv_timeout(Duration::from_millis(100)) else { continue };
                match check(&kind, s.payload(), size) {
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
            let missing: Vec<u32> = (1..=count).filter(|i| !seen.contains(i)).take(20).collect();
            out(json!({"event": "summary", "received": seen.len(), "intact": seen.len() - bad.len(), "bad": bad,
                "duplicates": dup, "undecodable": undecodable, "missing": missing, "timed_out": seen.len() < count as usize,
                "type": sub_type(&node, &topic)}));
        }
        Cmd::Rtt { ping, pong, size, count } => {
            let mut publ = node.publisher(&ping).type_info(TypeInfo::raw("bench.Ping")).create()?;
            let sub = node.subscriber(&pong).create()?;
            out(json!({"event": "ready"}));
            if !publ.wait_for_subscribers(1, Duration::from_secs(20))
                || !sub.wait_for_publishers(1, Duration::from_secs(20))
            {
                bail!("the bridge's {ping} subscriber or {pong} publisher did not appear within 20 s");
            }
            std::thread::sleep(Duration::from_secs(2)); // DDS discovery of the echo peer
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

/// The type the bridge's publisher of `topic` announces, as shoal's monitor sees it (name and encoding, and
/// whether a descriptor came with it).
fn sub_type(node: &shoal::Node, topic: &str) -> serde_json::Value {
    let snap = node.snapshot();
    let t =
        snap.topics.iter().find(|t| t.topic_name == topic && t.direction == shoal::monitor::TopicDirection::Publisher);
    match t {
        Some(t) => {
            json!({"name": t.type_info.name, "encoding": t.type_info.encoding, "descriptor_len": t.type_info.descriptor.len()})
        }
        None => json!(null),
    }
}
