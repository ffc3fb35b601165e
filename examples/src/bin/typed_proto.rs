//! Typed protobuf messages (`proto/imu.proto`, generated at build time by shoal-codegen, no protoc).
//!
//! ```text
//! typed_proto                 # one process: publish 3 messages and receive them
//! typed_proto sub [N] [TOPIC]         # receive N messages (default 5) on TOPIC (`imu`), print each
//! typed_proto pub [N] [MS] [TOPIC]    # wait for a subscriber, then send N messages (5), one every MS ms (100)
//! ```

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod proto {
    shoal::include_proto!();
}
use proto::pb::{Header, Imu, imu};

const TOPIC: &str = "imu";

/// The `n`-th message the publisher sends.
fn sample(n: u64) -> Imu {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Imu {
        header: Some(Header {
            stamp: Some(prost_types::Timestamp { seconds: now.as_secs() as i64, nanos: now.subsec_nanos() as i32 }),
            frame_id: "imu_link".into(),
            seq: n,
        }),
        linear_acceleration: Some(imu::Vector3 { x: 0.1 * n as f64, y: 0.0, z: 9.81 }),
        angular_velocity: Some(imu::Vector3 { x: 0.0, y: 0.0, z: 0.5 }),
        status: if n.is_multiple_of(2) { imu::Status::Ok } else { imu::Status::Degraded } as i32,
        covariance: vec![0.01; 9],
        attributes: HashMap::from([("unit".to_string(), "m/s2".to_string())]),
        calibration: Some(if n.is_multiple_of(2) {
            imu::Calibration::CalibrationFile(format!("cal_{n}.yaml"))
        } else {
            imu::Calibration::TemperatureC(20.0 + n as f64)
        }),
    }
}

/// One line per message, the same in every mode (the tests read it).
fn describe(m: &Imu) -> String {
    let h = m.header.clone().unwrap_or_default();
    let acc = m.linear_acceleration.unwrap_or_default();
    let calib = match &m.calibration {
        Some(imu::Calibration::CalibrationFile(f)) => format!("file:{f}"),
        Some(imu::Calibration::TemperatureC(t)) => format!("temp:{t}"),
        None => "none".into(),
    };
    format!(
        "seq={} frame={} stamped={} acc_x={:.1} acc_z={} status={} cov={} unit={} calib={}",
        h.seq,
        h.frame_id,
        h.stamp.is_some_and(|s| s.seconds > 0),
        acc.x,
        acc.z,
        m.status().as_str_name(),
        m.covariance.len(),
        m.attributes.get("unit").map_or("-", String::as_str),
        calib
    )
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = |i: usize, default: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let node = shoal::Node::init("typed_proto")?;
    match args.first().map(String::as_str) {
        Some("pub") => {
            let (n, period) = (count(1, 5), count(2, 100));
            let topic = args.get(3).map_or(TOPIC, String::as_str);
            let mut publ = node.publisher(topic).typed::<Imu>().create()?;
            if publ.wait_for_subscribers(1, Duration::from_secs(20)).is_err() {
                anyhow::bail!("no subscriber on `{topic}` within 20 s");
            }
            for seq in 1..=n {
                let m = sample(seq);
                publ.send(&m)?;
                println!("sent {}", describe(&m));
                std::thread::sleep(Duration::from_millis(period));
            }
        }
        Some("sub") => {
            let n = count(1, 5);
            let topic = args.get(2).map_or(TOPIC, String::as_str);
            let sub = node.subscriber(topic).typed::<Imu>().create()?;
            println!("ready: {} ({topic})", <Imu as shoal::Message>::type_info().name);
            for _ in 0..n {
                let got = sub.recv_timeout(Duration::from_secs(30))?;
                println!("got {} (clock {})", describe(&got.msg), got.meta.clock);
            }
        }
        None => {
            let sub = node.subscriber(TOPIC).typed::<Imu>().create()?;
            let mut publ = node.publisher(TOPIC).typed::<Imu>().create()?;
            for seq in 1..=3 {
                publ.send(&sample(seq))?;
                let got = sub.recv_timeout(Duration::from_secs(1))?;
                println!("got {}", describe(&got.msg));
            }
        }
        Some(other) => anyhow::bail!("unknown mode {other:?}: use `pub` or `sub`"),
    }
    Ok(())
}
