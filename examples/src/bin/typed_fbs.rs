//! Typed FlatBuffers messages (`fbs/pose.fbs`, generated at build time by shoal-codegen with planus, no flatc).
//!
//! ```text
//! typed_fbs                 # one process: publish 3 messages and receive them
//! typed_fbs sub [N] [TOPIC]         # receive N messages (default 5) on TOPIC (`pose`), viewed without decoding
//! typed_fbs pub [N] [MS] [TOPIC]    # wait for a subscriber, then send N messages (5), one every MS ms (100)
//! ```

use std::time::Duration;

mod fbs {
    shoal::include_fbs!();
}
use fbs::demo::{Mode, Pose, PoseRef, Vec3, Waypoint};

const TOPIC: &str = "pose";

/// The `n`-th message the publisher sends.
fn sample(n: u64) -> Pose {
    Pose {
        seq: n,
        frame_id: Some("map".into()),
        position: Some(Vec3 { x: n as f64, y: 2.0, z: 0.0 }),
        heading_rad: 0.25,
        mode: if n.is_multiple_of(2) { Mode::Driving } else { Mode::Docking },
        route: Some(vec![
            Waypoint { name: Some("dock".into()), position: Some(Vec3 { x: 0.0, y: 0.0, z: 0.0 }) },
            Waypoint { name: Some(format!("wp{n}")), position: Some(Vec3 { x: 1.0, y: 1.0, z: 0.0 }) },
        ]),
    }
}

/// One line per message, read through the view (fields decoded only when accessed); the tests read it.
fn describe(p: PoseRef<'_>) -> Result<String, planus::Error> {
    let pos = p.position()?.map(|v| (v.x(), v.y()));
    let mut route = Vec::new();
    if let Some(wps) = p.route()? {
        for wp in wps.iter() {
            route.push(wp?.name()?.unwrap_or("?").to_string());
        }
    }
    Ok(format!(
        "seq={} frame={} pos={:?} heading={} mode={:?} route={}",
        p.seq()?,
        p.frame_id()?.unwrap_or("-"),
        pos,
        p.heading_rad()?,
        p.mode()?,
        route.join(",")
    ))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let count = |i: usize, default: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let node = shoal::Node::init("typed_fbs")?;
    match args.first().map(String::as_str) {
        Some("pub") => {
            let (n, period) = (count(1, 5), count(2, 100));
            let topic = args.get(3).map_or(TOPIC, String::as_str);
            let mut publ = node.publisher(topic).typed::<Pose>().create()?;
            if publ.wait_for_subscribers(1, Duration::from_secs(20)).is_err() {
                anyhow::bail!("no subscriber on `{topic}` within 20 s");
            }
            for seq in 1..=n {
                publ.send(&sample(seq))?;
                println!("sent seq={seq}");
                std::thread::sleep(Duration::from_millis(period));
            }
        }
        Some("sub") => {
            let n = count(1, 5);
            let topic = args.get(2).map_or(TOPIC, String::as_str);
            let sub = node.subscriber(topic).typed::<Pose>().create()?;
            println!("ready: {} ({topic})", <Pose as shoal::Message>::type_info().name);
            for _ in 0..n {
                // The view reads the received bytes where they are; from another process's ring slot they are
                // first copied into a buffer the subscriber reuses (the publisher may overwrite the slot meanwhile).
                let line = sub.recv_with(Some(Duration::from_secs(30)), |pose, meta| {
                    describe(pose).map(|d| format!("got {d} (clock {})", meta.clock))
                })??;
                println!("{line}");
            }
        }
        None => {
            let sub = node.subscriber(TOPIC).typed::<Pose>().create()?;
            let mut publ = node.publisher(TOPIC).typed::<Pose>().create()?;
            for seq in 1..=3 {
                publ.send(&sample(seq))?;
                let got = sub.recv_timeout(Duration::from_secs(1))?;
                println!("got owned seq={} route={:?}", got.msg.seq, got.msg.route.map(|r| r.len()));
            }
        }
        Some(other) => anyhow::bail!("unknown mode {other:?}: use `pub` or `sub`"),
    }
    Ok(())
}
